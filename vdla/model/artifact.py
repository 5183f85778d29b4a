"""The deployable model artifact (``.vdla``): everything needed to run a compiled model, and nothing
that needs the compiler or ONNX to read.

A ``.vdla`` file is a zip archive:

* ``manifest.json``: format version, vdla version, the hardware config and its hash, the model's
  inputs and outputs (types with quantization), the steps in execution order (a step of a branch with its
  guard, ``when``: the conditions under which a run needs it), the DRAM tensors
  (address, packed shape, dtype), the memory plan and the per-layer descriptions;
* ``image.bin``: the DRAM image from the config's base address: packed weights and per-channel
  constants, micro-op kernels and the accelerator instruction streams (activations are planned in
  an arena inside it and need no initial contents);
* ``cpu.npz``: the parameters of the CPU steps' graphs;
* ``cpu/<target>.so`` (optional, ``vdla compile --cpu-target``): the CPU steps' kernels compiled ahead of time
  for a machine (:mod:`vdla.cpu_fallback.native`); the manifest's ``cpu_code`` gives each one's LLVM triple,
  the machines that run it, its SHA-256 and its kernels. A machine with code here needs no LLVM;
* ``signature.json`` (optional, ``vdla compile --sign KEY``): an Ed25519 signature of every other member
  (:mod:`vdla.model.trust`). A signed artifact that fails it is refused; native code loads only from an artifact
  signed by a trusted key, or when the user says so for one run (docs/security.md).

An accelerator step is one instruction stream already in the image (address and length); consecutive
accelerator steps of one guard are also joined into one stream (the manifest's ``streams``) that overlaps their
fills and drains. A CPU step is a graph of CPU operators (run by the artifact's code for the machine, else JIT-compiled
at load, else interpreted with numpy) whose ``@dram`` inputs and outputs are packed tensors read from and
written to DRAM.
Writing is atomic (a temporary file renamed into place): no partial artifact is ever left behind.
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from vdla._version import __version__
from vdla.config import HwConfig, config_mismatch, dict_hash, from_dict
from vdla.cpu_fallback.native import TARGETS, NativeLibrary
from vdla.errors import VdlaError
from vdla.graph.branches import Guard
from vdla.graph.graph import Graph
from vdla.graph.serialize import graph_from_json, graph_to_json, type_from_json, type_to_json
from vdla.graph.types import DTYPES, TensorType
from vdla.graph.verify import verify
from vdla.isa.instructions import INSN_BYTES
from vdla.model.trust import (
    MAX_SIGNATURE_BYTES,
    SIGNATURE_MEMBER,
    Signature,
    SignatureError,
    SigningKey,
    add_signature,
    check_signature,
    content_digest,
)
from vdla.untrusted import ZipReader, check_size, max_read_bytes, npz_arrays, read_file

FORMAT = "vdla-model"
FORMAT_VERSION = 1


class ArtifactError(VdlaError, ValueError):
    """A model artifact that cannot be used: unreadable, from another format version or config."""


@dataclass(frozen=True)
class DramTensor:
    """A packed tensor in DRAM at physical address ``addr``."""

    addr: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclass
class AccelStep:
    """One accelerator layer: the instruction stream at ``insn_addr`` and what it reads and writes; ``when``
    the guard under which a run needs it (:mod:`vdla.graph.branches`: ``()``, always)."""

    name: str
    insn_addr: int
    insn_count: int
    macs: int
    reads: list[str]
    writes: list[str]
    layer: dict = field(default_factory=dict)  # op, shapes, schedule, epilogue (for tables)
    when: Guard = ()

    kind = "accel"


@dataclass
class CpuStep:
    """A CPU region: a graph whose ``dram_inputs``/``dram_outputs`` (graph value -> DRAM tensor) are
    read from and written to DRAM; its other inputs and outputs are host values; ``when`` as for
    :class:`AccelStep`."""

    name: str
    graph: Graph
    dram_inputs: dict[str, str]
    dram_outputs: dict[str, str]
    macs: int = 0
    note: str = ""
    when: Guard = ()

    kind = "cpu"


Step = AccelStep | CpuStep


@dataclass
class AccelStream:
    """Steps ``first .. first + count - 1`` (all accelerator steps) joined into one instruction stream at
    ``insn_addr`` (:func:`vdla.compiler.stream.join_programs`): each layer's fill and drain overlap its
    neighbours'. ``starts[k]`` is the index of layer ``k``'s first instruction in the stream. Each step keeps
    its own stream too, to run the layers one at a time."""

    first: int
    count: int
    insn_addr: int
    insn_count: int
    starts: list[int]

    def span(self, k: int) -> tuple[int, int]:
        """The [lo, hi) instruction indices of the stream's layer ``k``."""
        return self.starts[k], self.starts[k + 1] if k + 1 < self.count else self.insn_count


@dataclass
class Artifact:
    """A compiled model (see the module docstring)."""

    config: HwConfig
    inputs: dict[str, TensorType]
    outputs: dict[str, TensorType]
    steps: list[Step]
    dram: dict[str, DramTensor]
    image: np.ndarray  # uint8, placed at config.dram_base_addr
    memory: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    streams: list[AccelStream] = field(default_factory=list)
    cpu_code: dict[str, NativeLibrary] = field(default_factory=dict)  # target name -> its CPU steps' kernels
    signature: Signature | None = None  # the checked signature it was loaded with (save() signs only with a key)

    @property
    def accel_macs(self) -> int:
        return sum(s.macs for s in self.steps if isinstance(s, AccelStep))

    @property
    def total_macs(self) -> int:
        return sum(s.macs for s in self.steps)

    def save(self, path: str | Path, key: SigningKey | None = None) -> Path:
        """Write the artifact atomically to ``path``, signed by ``key`` if given (the contents as read back)."""
        path = Path(path)
        manifest, arrays = self._manifest()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("manifest.json", json.dumps(manifest, indent=1))
                z.writestr("image.bin", self.image.tobytes())
                buf = io.BytesIO()
                np.savez(buf, **arrays)
                z.writestr("cpu.npz", buf.getvalue())
                for name, lib in self.cpu_code.items():
                    z.writestr(f"cpu/{name}.so", lib.code)
            if key is not None:
                *contents, zr = _read(Path(tmp), max_read_bytes(None))
                add_signature(tmp, key, _digest(zr.names(), *contents))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def _manifest(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays: dict[str, np.ndarray] = {}
        steps = []
        for i, s in enumerate(self.steps):
            when = {"when": [[c, v] for c, v in s.when]} if s.when else {}  # absent: always (older readers too)
            if isinstance(s, AccelStep):
                steps.append({"kind": "accel", **{k: v for k, v in asdict(s).items() if k != "when"}, **when})
                continue
            desc, params = graph_to_json(s.graph)
            for k, v in params.items():
                arrays[f"{i}/{k}"] = v
            steps.append(
                {
                    "kind": "cpu",
                    "name": s.name,
                    "graph": desc,
                    "dram_inputs": s.dram_inputs,
                    "dram_outputs": s.dram_outputs,
                    "macs": s.macs,
                    "note": s.note,
                    **when,
                }
            )
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "vdla_version": __version__,
            "config": self.config.to_dict(),
            "config_hash": self.config.hash,
            "inputs": {k: type_to_json(t) for k, t in self.inputs.items()},
            "outputs": {k: type_to_json(t) for k, t in self.outputs.items()},
            "steps": steps,
            "dram": {k: {"addr": t.addr, "shape": list(t.shape), "dtype": t.dtype} for k, t in self.dram.items()},
            "image_bytes": int(self.image.size),
            "memory": self.memory,
            "meta": self.meta,
            "streams": [asdict(s) for s in self.streams],
            "cpu_code": {
                name: {
                    "file": f"cpu/{name}.so",
                    "triple": TARGETS[name].triple,
                    "cpu": TARGETS[name].cpu,
                    "machines": list(TARGETS[name].machines),
                    "sha256": lib.sha256,
                    "kernels": lib.kernels,
                }
                for name, lib in self.cpu_code.items()
            },
        }
        return manifest, arrays


_MALFORMED = (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError)


@contextmanager
def _place(path: Path, place: str) -> Iterator[None]:
    """Name the file and the manifest's ``place`` in any error from reading it (a malformed or hostile one)."""
    try:
        yield
    except ArtifactError:
        raise
    except _MALFORMED as e:  # a VdlaError among them (ConfigError, GraphError, ...) keeps its words
        detail = str(e) if isinstance(e, VdlaError) else f"{type(e).__name__}: {e}"
        raise ArtifactError(f"{path}: manifest {place}: {detail}") from e


def _read(
    path: Path, limit: int
) -> tuple[dict, np.ndarray, dict[str, np.ndarray], dict[str, NativeLibrary], ZipReader]:
    """The manifest, the DRAM image, the CPU parameters and the CPU code, each member read by its exact name
    within the read limit (:mod:`vdla.untrusted`), and the archive's reader (its members' names, and the
    signature: :func:`_signature_doc`)."""
    zr = ZipReader(read_file(path, limit, ArtifactError), str(path), limit, ArtifactError)
    with _place(path, "(manifest.json)"):
        manifest = json.loads(zr.read("manifest.json"))
        if not isinstance(manifest, dict):
            raise ArtifactError(f"{path}: manifest.json holds a {type(manifest).__name__}, not an object")
    image = np.frombuffer(zr.read("image.bin"), np.uint8).copy()
    arrays = npz_arrays(ZipReader(zr.read("cpu.npz"), f"{path}: cpu.npz", limit - zr.spent, ArtifactError))
    code = {}
    with _place(path, "cpu_code"):
        libraries = dict(manifest.get("cpu_code", {})).items()
    for name, c in libraries:
        with _place(path, f"cpu_code {name!r}"):
            if c["file"] != f"cpu/{name}.so":
                raise ArtifactError(f"{path}: manifest cpu_code {name!r}: its file is {c['file']!r}, not cpu/{name}.so")
            code[name] = NativeLibrary(name, zr.read(c["file"]), str(c["sha256"]), _kernels(c["kernels"]))
    return manifest, image, arrays, code, zr


def _signature_doc(path: Path, zr: ZipReader) -> bytes | None:
    """The archive's ``signature.json`` (None: unsigned), read like every other member, at most
    :data:`vdla.model.trust.MAX_SIGNATURE_BYTES`; a member that cannot be read is a SignatureError."""
    info = zr.infos.get(SIGNATURE_MEMBER)
    if info is None:
        return None
    if info.file_size > MAX_SIGNATURE_BYTES:
        raise SignatureError(f"{path}: {SIGNATURE_MEMBER} is larger than {MAX_SIGNATURE_BYTES >> 20} MiB")
    try:
        return zr.read(SIGNATURE_MEMBER)
    except ArtifactError as e:
        raise SignatureError(f"{path}: cannot read {SIGNATURE_MEMBER} ({e})") from e


def _guard(path: Path, i: int, when: list) -> Guard:
    """Step ``i``'s guard as the manifest stores it: pairs of a condition value and a bool."""
    if not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], bool) for x in when):
        raise ArtifactError(f"{path}: step {i}: 'when' must be [condition, true|false] pairs, got {when!r}")
    return tuple((c, v) for c, v in when)


def _kernels(kernels: dict) -> dict[str, int]:
    return {str(k): int(v) for k, v in dict(kernels).items()}


def _digest(names: list[str], manifest: dict, image: np.ndarray, arrays: dict, code: dict[str, NativeLibrary]) -> dict:
    """The signed digest of the contents as read and the zip's members (:func:`vdla.model.trust.content_digest`)."""
    return content_digest(manifest, image, arrays, {t: lib.code for t, lib in code.items()}, names)


def load_artifact(path: str | Path, config: HwConfig | None = None, max_bytes: int | None = None) -> Artifact:
    """Read an artifact, refusing another format version, a corrupt or malformed file (naming the file and the
    place), one that claims more than the read limit (``max_bytes``, :func:`vdla.untrusted.max_read_bytes`)
    anywhere, a signed artifact that fails its signature (:class:`vdla.model.trust.SignatureError`), or (when
    ``config`` is given) an artifact compiled for another hardware configuration."""
    path = Path(path)
    limit = max_read_bytes(max_bytes)
    manifest, image, arrays, code, zr = _read(path, limit)
    doc = _signature_doc(path, zr)
    names = zr.names()
    signature = check_signature(path, doc, names, _digest(names, manifest, image, arrays, code) if doc else {})
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: format {manifest.get('format')!r} version {manifest.get('format_version')!r}; this vdla "
            f"({__version__}) reads {FORMAT!r} version {FORMAT_VERSION}: compile the model again"
        )
    with _place(path, "config"):
        cfg = _config(path, manifest, config)
    with _place(path, "image_bytes"):
        if image.size != manifest["image_bytes"]:
            raise ArtifactError(
                f"{path}: the DRAM image has {image.size} bytes, the manifest says {manifest['image_bytes']}"
            )
        if image.size > cfg.dram_bytes:
            raise ArtifactError(f"{path}: the DRAM image ({image.size} bytes) is larger than the DRAM window")
    with _place(path, "inputs"):
        inputs = _types(path, "inputs", manifest["inputs"], limit)
    with _place(path, "outputs"):
        outputs = _types(path, "outputs", manifest["outputs"], limit)
    with _place(path, "dram"):
        dram = {str(k): _dram_tensor(path, cfg, str(k), d, limit) for k, d in manifest["dram"].items()}
    window = (cfg.dram_base_addr, cfg.dram_base_addr + image.size)
    with _place(path, "steps"):
        listed = _list(manifest["steps"])
    steps = [_step(path, i, s, arrays, window, limit) for i, s in enumerate(listed)]
    with _place(path, "streams"):
        streams = [_stream(path, s, len(steps), window) for s in manifest.get("streams", manifest.get("chains", []))]
    with _place(path, "memory and meta"):
        memory, meta = dict(manifest["memory"]), dict(manifest["meta"])
    return Artifact(cfg, inputs, outputs, steps, dram, image, memory, meta, streams, code, signature=signature)


def _list(value: object) -> list:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _config(path: Path, manifest: dict, config: HwConfig | None) -> HwConfig:
    cfg = from_dict(manifest["config"])
    # an artifact written before the board presets hashed its config dict whole, as stored (dict_hash)
    if manifest["config_hash"] not in (cfg.hash, dict_hash(manifest["config"])):
        raise ArtifactError(f"{path}: the stored config hashes to {cfg.hash:#010x}, not {manifest['config_hash']!r}")
    if config is not None and config.hash != cfg.hash:
        raise ArtifactError(f"{path}: {config_mismatch(cfg, config)}")
    return cfg


def _types(path: Path, place: str, types: dict, limit: int) -> dict[str, TensorType]:
    out = {}
    for k, t in dict(types).items():
        out[str(k)] = _checked_type(path, f"{place} {k!r}", type_from_json(t), limit)
    return out


def _checked_type(path: Path, place: str, t: TensorType, limit: int) -> TensorType:
    """``t``, refused when a dimension is below 1, its dtype unknown or it claims more than ``limit`` bytes."""
    if any(d < 1 for d in t.shape) or t.dtype not in DTYPES:
        raise ArtifactError(f"{path}: manifest {place}: {t.dtype}{list(t.shape)} is not a tensor type vdla runs")
    check_size(
        math.prod(t.shape) * np.dtype(t.dtype).itemsize, limit, f"{path}: manifest {place}", str(t), ArtifactError
    )
    return t


def _dram_tensor(path: Path, cfg: HwConfig, name: str, d: dict, limit: int) -> DramTensor:
    """A DRAM tensor of the manifest, which must lie inside the DRAM window."""
    t = DramTensor(int(d["addr"]), tuple(int(s) for s in d["shape"]), str(d["dtype"]))
    _checked_type(path, f"dram {name!r}", TensorType(t.shape, t.dtype), limit)
    if t.addr < cfg.dram_base_addr or t.addr + t.nbytes > cfg.dram_base_addr + cfg.dram_bytes:
        raise ArtifactError(
            f"{path}: manifest dram {name!r}: {t.nbytes} bytes at {t.addr:#x} lie outside the DRAM window"
        )
    return t


def _insns_inside(path: Path, place: str, addr: int, count: int, window: tuple[int, int]) -> None:
    """Refuse an instruction stream (``count`` instructions at ``addr``) not inside the image's ``window``."""
    if not all(isinstance(v, int) for v in (addr, count)) or count < 0:
        raise ArtifactError(f"{path}: manifest {place}: insn_addr and insn_count must be integers, count >= 0")
    if addr < window[0] or addr + count * INSN_BYTES > window[1]:
        raise ArtifactError(
            f"{path}: manifest {place}: {count} instructions at {addr:#x} lie outside the image "
            f"[{window[0]:#x}, {window[1]:#x})"
        )


def _step(path: Path, i: int, s: dict, arrays: dict[str, np.ndarray], window: tuple[int, int], limit: int) -> Step:
    with _place(path, f"steps[{i}]"):
        when = _guard(path, i, s.get("when", []))  # written by vdla since branch skipping; absent: always
        if s["kind"] == "accel":
            step = AccelStep(**{k: v for k, v in s.items() if k not in ("kind", "when")}, when=when)
            _insns_inside(path, f"steps[{i}]", step.insn_addr, step.insn_count, window)
            return step
        if s["kind"] != "cpu":
            raise ArtifactError(f"{path}: manifest steps[{i}]: kind {s['kind']!r} is neither 'accel' nor 'cpu'")
        prefix = f"{i}/"
        params = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
        graph = graph_from_json(s["graph"], params)
        for name, t in verify(graph, after=f"loading {path.name} steps[{i}]").items():
            _checked_type(path, f"steps[{i}] value {name!r}", t, limit)
        return CpuStep(
            str(s["name"]),
            graph,
            _names(s["dram_inputs"]),
            _names(s["dram_outputs"]),
            int(s["macs"]),
            str(s["note"]),
            when,
        )


def _names(mapping: dict) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(mapping).items()}


def _stream(path: Path, s: dict, steps: int, window: tuple[int, int]) -> AccelStream:
    stream = AccelStream(**s)
    _insns_inside(path, "streams", stream.insn_addr, stream.insn_count, window)
    ints = (stream.first, stream.count, *stream.starts)
    if not all(isinstance(v, int) for v in ints) or not 0 <= stream.first < stream.first + stream.count <= steps:
        raise ArtifactError(f"{path}: manifest streams: {s!r} does not name steps of the artifact")
    if len(stream.starts) != stream.count:
        raise ArtifactError(f"{path}: manifest streams: {stream.count} steps, {len(stream.starts)} starts")
    return stream
