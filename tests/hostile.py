"""The hostile-input campaign (docs/security.md, "Readers: limits and the hostile-input campaign"): real files
(seeds) mutated by Hypothesis-drawn edits, thrown at vdla's four readers of files that travel.

* ``artifact``: :func:`vdla.model.load_artifact` of ``.vdla`` files (two compiled models, CPU and accelerator
  steps; one of them also signed, so that the signature's reader is in the campaign);
* ``onnx``: :func:`vdla.frontend.import_onnx` of ONNX files (small models of the zoo, two suite models);
* ``npz``: the calibration reader (:func:`vdla.model.pipeline.read_calib_file` and
  :func:`vdla.graph.calibrate.check_calibration`) of ``.npz`` files (stored and deflated);
* ``asm``: :func:`vdla.isa.assemble_file`, then validation (on the every-unit ``pynq-full`` configuration) and
  encoding, of assembler programs (the zoo's random programs, disassembled).

A case is a seed, at most one targeted edit of its structure (a manifest field, an ONNX tensor or node, an
``.npy`` header, a zip member's declared size, an assembler word: huge shapes, negative strides, wrong dtypes,
cycles, missing initializers, duplicate names, zip bombs...) and up to four byte mutations (bit flips,
truncation, overwrites, insertions, deletions). :func:`run_case` writes it to a file of its own directory and
reads it: the reader must succeed or raise a :class:`~vdla.errors.VdlaError` whose message names the file,
write nothing, and finish within the case's time bound. Anything else is a :class:`Finding`.

``make test`` runs a few thousand cases in process (tests/test_hostile_inputs.py); ``make fuzz`` runs this module
as a script: ``--cases`` cases split across ``--workers`` worker processes, each under ``RLIMIT_AS`` with a
per-case timer; a worker that crashes or hangs is a finding too (the case it was on is kept), and is replaced.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

TARGETS = ("artifact", "onnx", "npz", "asm")
SUFFIX = {"artifact": ".vdla", "onnx": ".onnx", "npz": ".npz", "asm": ".s"}
CASE_SECONDS = 20.0  # the time bound of one case (a hang guard: cases take milliseconds)
MEMORY_BYTES = 6 << 30  # RLIMIT_AS of a campaign worker: the interpreter's mappings and 256 MiB reads, several times
HUGE = (0, -1, -(2**31), 2**31 - 1, 2**31, 2**32, 2**40, 2**63 - 1, 2**64, 10**30)


class Finding(AssertionError):
    """A case on which a reader broke its contract (raised something else, named no file, wrote, took too long)."""


class CaseTimeout(Exception):
    """Raised by the case timer; a reader that swallows it still fails the case (the timer's flag stays set)."""


@dataclass(frozen=True)
class Seed:
    """A real file of a target: its name, its bytes and what its reader needs beside them (the model's input
    shapes for an ONNX file with a dynamic batch; the model's input types for calibration data)."""

    name: str
    data: bytes
    extra: dict | None = None


@dataclass(frozen=True)
class Case:
    target: str
    seed: str
    edits: tuple[str, ...]
    data: bytes

    def __repr__(self) -> str:
        return f"Case({self.target}, seed {self.seed}, edits {list(self.edits)}, {len(self.data)} bytes)"


# ---------------------------------------------------------------------------------------------------- the seeds


@cache
def seeds() -> dict[str, list[Seed]]:
    """The seed files of every target, made once per process (a second or two)."""
    warnings.simplefilter("ignore")
    return {"artifact": _artifact_seeds(), "onnx": _onnx_seeds(), "npz": _npz_seeds(), "asm": _asm_seeds()}


def _artifact_seeds() -> list[Seed]:
    from test_graph_qdq import S_A, residual_graph

    from vdla.model.pipeline import compile_graph_model, compile_model
    from vdla.model.trust import generate_key, load_signing_key
    from vdla.zoo.models import mlp

    out = []
    with tempfile.TemporaryDirectory() as d:
        for name, (artifact, _) in {
            "residual": compile_graph_model(residual_graph(s_b=S_A, s_out=S_A), "pynq"),
            "mlp": compile_model(mlp(features=16, hidden=(16,), classes=4), "random"),
        }.items():
            out.append(Seed(name, artifact.save(Path(d) / f"{name}.vdla").read_bytes()))
        generate_key(Path(d) / "key")
        key = load_signing_key(Path(d) / "key")
        out.append(Seed("mlp-signed", artifact.save(Path(d) / "signed.vdla", key=key).read_bytes()))
    return out


def _onnx_seeds() -> list[Seed]:
    from vdla.zoo.models import attention, mlp, unet
    from vdla.zoo.suite import suite_model

    built = {
        "mlp": mlp(features=16, hidden=(16,), classes=4),
        "unet": unet(image=16, widths=(4, 8)),
        "attention": attention(tokens=4, dim=8, heads=2),
    }
    out = [Seed(k, m.SerializeToString()) for k, m in built.items()]
    for name in ("squeezenet", "bert_tiny"):
        m = suite_model(name)
        out.append(Seed(name, m.path.read_bytes(), {"input_shapes": m.input_shapes()}))
    return out


def _npz_seeds() -> list[Seed]:
    from vdla.graph.types import TensorType

    rng = np.random.default_rng(0)
    types = {"x": TensorType((1, 16), "float32"), "image": TensorType((1, 3, 8, 8), "float32")}
    arrays = {
        "x": rng.normal(size=(8, 16)).astype(np.float32),
        "image": rng.normal(size=(8, 3, 8, 8)).astype(np.float32),
    }
    out = []
    for name, save in (("stored", np.savez), ("deflated", np.savez_compressed)):
        buf = io.BytesIO()
        save(buf, **arrays)
        out.append(Seed(name, buf.getvalue(), {"types": types}))
    buf = io.BytesIO()
    np.savez(buf, x=arrays["x"][:4].astype(np.float64))
    out.append(Seed("one-float64", buf.getvalue(), {"types": {"x": types["x"]}}))
    return out


def _asm_seeds() -> list[Seed]:
    from vdla.isa import disassemble
    from vdla.runtime import Device
    from vdla.zoo.random_programs import build_program, pynq_full

    dev = Device(pynq_full())  # every unit: the programs use depthwise, src_out, the OUT multiplier and the LUT
    return [Seed(f"random-{k}", disassemble(build_program(dev, k).insns).encode()) for k in range(4)]


# ------------------------------------------------------------------------------------------------ the mutations


def _at(draw, data: bytes | list) -> int:
    return draw(st.integers(0, 2**31)) % max(len(data), 1)


@st.composite
def byte_mutation(draw, data: bytes) -> tuple[str, bytes]:
    """One byte-level mutation of ``data``: a bit flip, a truncation, an overwrite (random bytes or a hostile
    32-bit integer), an insertion or a deletion."""
    kind = draw(st.sampled_from(("flip", "truncate", "overwrite", "int32", "insert", "delete")))
    i = _at(draw, data)
    if kind == "flip":
        return kind, data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1 :] if data else data
    if kind == "truncate":
        return kind, data[:i]
    if kind == "overwrite":
        b = draw(st.binary(min_size=1, max_size=8))
        return kind, data[:i] + b + data[i + len(b) :]
    if kind == "int32":
        b = struct.pack("<I", draw(st.sampled_from(HUGE)) % 2**32)
        return kind, data[:i] + b + data[i + 4 :]
    if kind == "insert":
        return kind, data[:i] + draw(st.binary(min_size=1, max_size=16)) + data[i:]
    return kind, data[:i] + data[i + draw(st.integers(1, 64)) :]


def _hostile_json(draw):
    return draw(
        st.one_of(
            st.sampled_from(HUGE),
            st.sampled_from([None, "", "x", "float128", "object", "int8", [], {}, [2**40, 2**40], [-1, 16], 1e308]),
            st.floats(allow_nan=True),
            st.text(max_size=8),
        )
    )


def _json_paths(value, path=()) -> Iterator[tuple]:
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        yield from _json_paths(v, (*path, k))


@st.composite
def json_edit(draw, doc) -> tuple[str, object]:
    """Replace, delete or duplicate one place of a JSON document (drawn among all of them), or nest it deep."""
    paths = list(_json_paths(doc))
    path = paths[_at(draw, paths)]
    kind = draw(st.sampled_from(("replace", "delete", "duplicate", "nest")))
    if not path:
        return "nest root", [[doc]] if kind != "nest" else "[" * 100000
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    if kind == "replace":
        parent[key] = _hostile_json(draw)
    elif kind == "delete":
        del parent[key]
    elif kind == "duplicate" and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(parent[key])))
    elif kind == "duplicate":
        parent[f"{key}_"] = parent[key]
    else:
        parent[key] = json.loads("[" * 60 + "1" + "]" * 60) if draw(st.booleans()) else [parent[key]] * 3
    return f"json {kind} {'/'.join(map(str, path))}", doc


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def _zip(members: dict[str, bytes] | list[tuple[str, bytes]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are an edit
        for n, b in members.items() if isinstance(members, dict) else members:
            z.writestr(n, b)
    return buf.getvalue()


@st.composite
def zip_edit(draw, data: bytes) -> tuple[str, bytes]:
    """An edit of a zip archive's structure: a member's declared size, method or name; a duplicate or extra
    member; a deflate bomb in place of a member."""
    members = _members(data)
    names = list(members)
    kind = draw(st.sampled_from(("size", "method", "rename", "duplicate", "bomb", "stored", "drop")))
    if not names:
        return "empty", data
    name = names[_at(draw, names)]
    if kind == "size":  # the central directory's uncompressed size of the member, smaller or larger
        return kind, _patch_size(data, name, draw(st.sampled_from((0, 1, 2**31, 2**32 - 1))))
    if kind == "method":
        return kind, _patch_method(data, name, draw(st.sampled_from((1, 9, 12, 14, 99))))
    if kind == "rename":
        new = draw(st.sampled_from(("../" + name, "/" + name, name.upper(), name + "\x00", "a/../" + name)))
        return kind, _zip({new if n == name else n: b for n, b in members.items()})
    if kind == "duplicate":
        return kind, _zip([*members.items(), (name, draw(st.binary(max_size=32)))])
    if kind == "bomb":  # 1 GiB of zeros declared as the member's own size
        return kind, _bomb(members, name)
    if kind == "stored":
        return kind, _zip(members, zipfile.ZIP_STORED)
    return kind, _zip({n: b for n, b in members.items() if n != name})


def _offsets(data: bytes, sig: bytes) -> Iterator[int]:
    i = data.find(sig)
    while i >= 0:
        yield i
        i = data.find(sig, i + 1)


def _header(data: bytes, name: str, sig: bytes, name_at: int) -> int:
    """The offset of ``name``'s central (``PK\\1\\2``, name at 46) or local (``PK\\3\\4``, at 30) header."""
    length_at = 28 if name_at == 46 else 26
    for off in _offsets(data, sig):
        n = struct.unpack_from("<H", data, off + length_at)[0]
        if data[off + name_at : off + name_at + n] == name.encode():
            return off
    raise ValueError(f"no header of {name!r}")


def _patch(data: bytes, name: str, at: int, fmt: str, value: int) -> bytes:
    """``data`` with ``value`` packed at offset ``at`` of ``name``'s central directory header."""
    out = bytearray(data)
    struct.pack_into(fmt, out, _header(data, name, b"PK\x01\x02", 46) + at, value)
    return bytes(out)


def _patch_size(data: bytes, name: str, size: int) -> bytes:
    return _patch(data, name, 24, "<I", size)


def _patch_method(data: bytes, name: str, method: int) -> bytes:
    return _patch(data, name, 10, "<H", method)


BOMB_BYTES = 64 << 20


@cache
def _zeros_deflated() -> bytes:
    """A raw deflate stream of :data:`BOMB_BYTES` zeros (64 KiB of it)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"".join(c.compress(bytes(1 << 20)) for _ in range(BOMB_BYTES >> 20)) + c.flush()


def _bomb(members: dict[str, bytes], name: str) -> bytes:
    """``members`` with ``name`` replaced by a deflate stream of 64 MiB of zeros that declares the member's
    original size and CRC: a reader trusting the stream would inflate all of it."""
    stream, original = _zeros_deflated(), members[name]
    data = _zip({**members, name: b""}, zipfile.ZIP_STORED)
    local = _header(data, name, b"PK\x03\x04", 30)
    n, m = struct.unpack_from("<HH", data, local + 26)
    body = local + 30 + n + m
    crc, size = zlib.crc32(original), len(original)
    out = bytearray(data[:body] + stream + data[body:])
    struct.pack_into("<H", out, local + 8, 8)  # deflated
    struct.pack_into("<III", out, local + 14, crc, len(stream), size)
    cen = _header(bytes(out), name, b"PK\x01\x02", 46)
    struct.pack_into("<H", out, cen + 10, 8)
    struct.pack_into("<III", out, cen + 16, crc, len(stream), size)
    for off in _offsets(bytes(out), b"PK\x01\x02"):  # the members after it moved by the stream's length
        (at,) = struct.unpack_from("<I", out, off + 42)
        if at > local:
            struct.pack_into("<I", out, off + 42, at + len(stream))
    end = bytes(out).rfind(b"PK\x05\x06")
    (start,) = struct.unpack_from("<I", out, end + 16)
    struct.pack_into("<I", out, end + 16, start + len(stream))
    return bytes(out)


# targeted edits by target: each draws what it needs and returns (what it did, the new bytes)


@st.composite
def artifact_edit(draw, data: bytes) -> tuple[str, bytes]:
    members = _members(data)
    kind = draw(st.sampled_from(("manifest", "manifest", "manifest", "npz", "zip", "graph")))
    if kind == "zip":
        return draw(zip_edit(data))
    if kind == "npz":
        what, npz = draw(npz_edit(members["cpu.npz"]))
        return f"cpu.npz {what}", _zip({**members, "cpu.npz": npz})
    manifest = json.loads(members["manifest.json"])
    what, manifest = draw(graph_edit(manifest)) if kind == "graph" else draw(json_edit(manifest))
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    return what, _zip({**members, "manifest.json": text.encode()})


@st.composite
def graph_edit(draw, manifest: dict) -> tuple[str, dict]:
    """An edit of a CPU step's graph: a cycle, a duplicate name, a node reading a missing parameter."""
    graphs = [s["graph"] for s in manifest["steps"] if s.get("kind") == "cpu" and s["graph"]["nodes"]]
    g = graphs[_at(draw, graphs)]
    nodes = g["nodes"]
    i = _at(draw, nodes)
    kind = draw(st.sampled_from(("cycle", "duplicate", "missing", "reverse", "unknown-op")))
    if kind == "cycle":
        nodes[0]["inputs"] = [nodes[i]["output"], *nodes[0]["inputs"][1:]]
    elif kind == "duplicate":
        nodes.insert(i, json.loads(json.dumps(nodes[i])))
    elif kind == "missing":
        nodes[i]["inputs"] = [*nodes[i]["inputs"], "no_such_param"]
        g["params"] = [*g["params"], "no_such_param"]
    elif kind == "reverse":
        nodes.reverse()
    else:
        nodes[i]["op"] = draw(st.sampled_from(("__import__", "conv2d", "softmax", "", "gemm")))
    return f"graph {kind} node {i}", manifest


@st.composite
def npz_edit(draw, data: bytes) -> tuple[str, bytes]:
    """An edit of an ``.npz``: one ``.npy`` header (shape, dtype, order, version), an array cut short or grown, a
    member that is no ``.npy``, or an edit of the zip itself."""
    members = _members(data)
    names = list(members)
    kind = draw(st.sampled_from(("shape", "dtype", "fortran", "version", "body", "member", "zip")))
    if not names:
        kind = "member"
    name = names[_at(draw, names)] if names else ""
    if kind == "zip":
        return draw(zip_edit(data))
    if kind == "member":
        return kind, _zip({**members, draw(st.sampled_from(("../x.npy", "x.txt", "a/b.npy"))): b"\x93NUMPY"})
    npy = members[name]
    header_len = struct.unpack_from("<H", npy, 8)[0]
    header, body = npy[10 : 10 + header_len].decode("latin1"), npy[10 + header_len :]
    d = ast.literal_eval(header)
    if kind == "shape":
        d["shape"] = tuple(draw(st.lists(st.sampled_from((*HUGE, 1, 3)), max_size=4)))
    elif kind == "dtype":
        d["descr"] = draw(
            st.sampled_from(("|O", "<U8", "|V8", ">f8", "<c16", "|b1", "<M8[s]", "", "<f2", [("a", "<f4")]))
        )
    elif kind == "fortran":
        d["fortran_order"] = draw(st.sampled_from((True, 1, "yes")))
    elif kind == "version":
        npy = npy[:6] + bytes([draw(st.integers(0, 4)), 0]) + npy[8:]
    else:
        body = body[: _at(draw, body)] if draw(st.booleans()) else body + bytes(draw(st.integers(1, 64)))
    text = repr(d).encode("latin1") + b"\n"
    npy = npy[:8] + struct.pack("<H", len(text)) + text + body
    return f"{name} {kind}", _zip({**members, name: npy})


@st.composite
def onnx_edit(draw, data: bytes) -> tuple[str, bytes]:
    """An edit of an ONNX model: a tensor's dims, type or data; a missing initializer; a duplicate output name; a
    cycle; an input's shape; an attribute's value; the opset."""
    import onnx

    m = onnx.load_from_string(data)
    g = m.graph
    kind = draw(st.sampled_from(("dims", "dtype", "raw", "drop-init", "dup-name", "cycle", "input", "attr", "opset")))
    if kind in ("dims", "dtype", "raw", "drop-init") and g.initializer:
        t = g.initializer[_at(draw, g.initializer)]
        if kind == "dims":
            t.dims[:] = draw(st.lists(st.sampled_from((*HUGE[1:8], 1, 3, 0)), min_size=1, max_size=4))
        elif kind == "dtype":
            t.data_type = draw(st.integers(0, 30))
        elif kind == "raw":
            t.raw_data = t.raw_data[: _at(draw, t.raw_data)]
        else:
            g.initializer.remove(t)
    elif kind == "dup-name" and len(g.node) > 1:
        g.node[_at(draw, g.node)].output[0] = g.node[_at(draw, g.node)].output[0]
    elif kind == "cycle" and g.node:
        g.node[0].input[0] = g.node[_at(draw, g.node)].output[0]
    elif kind == "input":
        dims = g.input[0].type.tensor_type.shape.dim
        if dims:
            dims[_at(draw, dims)].dim_value = draw(st.sampled_from((*HUGE[1:8], 0)))
    elif kind == "attr":
        _edit_attr(draw, g)
    elif kind == "opset":
        m.opset_import[0].version = draw(st.sampled_from((0, 1, 6, 99, -1, 2**62)))
    return f"onnx {kind}", m.SerializeToString()


def _edit_attr(draw, g) -> None:
    import onnx

    attrs = [a for n in g.node for a in n.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
    if not attrs:
        return
    a = attrs[_at(draw, attrs)]
    value = draw(st.sampled_from((*HUGE[1:8], 0, -2)))
    if a.type == onnx.AttributeProto.INT:
        a.i = value
    elif a.ints:
        a.ints[_at(draw, a.ints)] = value


@st.composite
def asm_edit(draw, data: bytes) -> tuple[str, bytes]:
    """An edit of an assembler program: a number made huge or negative, a word dropped or duplicated, a line
    repeated, bytes that are not UTF-8, a very long line."""
    lines = data.decode().splitlines()
    i = _at(draw, lines)
    words = lines[i].split()
    kind = draw(st.sampled_from(("number", "drop", "duplicate", "line", "utf8", "long")))
    if kind == "number" and words:
        k = _at(draw, words)
        key = words[k].partition("=")[0]
        words[k] = f"{key}={draw(st.sampled_from((*HUGE, '-1,-1', '0x', '1,2,3,4,5', '9' * 5000)))}"
    elif kind == "drop" and words:
        del words[_at(draw, words)]
    elif kind == "duplicate" and words:
        words.insert(_at(draw, words), words[_at(draw, words)])
    elif kind == "line":
        lines.insert(i, lines[i])
    elif kind == "utf8":
        return kind, data[: _at(draw, data)] + draw(st.sampled_from((b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80")))
    else:
        words.append("x" * 100000)
    lines[i] = " ".join(words)
    return f"asm {kind} line {i + 1}", "\n".join(lines).encode()


EDITS = {"artifact": artifact_edit, "onnx": onnx_edit, "npz": npz_edit, "asm": asm_edit}


@st.composite
def cases(draw, target: str) -> Case:
    """A case of ``target``: a seed, maybe a targeted edit, up to four byte mutations."""
    s = draw(st.sampled_from(seeds()[target]))
    data, edits = s.data, []
    if draw(st.integers(0, 3)):  # three cases in four are edited first
        what, data = draw(EDITS[target](data))
        edits.append(what)
    for _ in range(draw(st.integers(0, 4))):
        what, data = draw(byte_mutation(data))
        edits.append(what)
    return Case(target, s.name, tuple(edits), data)


# ------------------------------------------------------------------------------------------------ one case


def _seed(case: Case) -> Seed:
    return next(s for s in seeds()[case.target] if s.name == case.seed)


def read(case: Case, path: Path) -> None:
    """Run ``case.target``'s reader on the file ``path`` (holding the case's bytes)."""
    extra = _seed(case).extra or {}
    if case.target == "artifact":
        from vdla.model import load_artifact

        load_artifact(path)
    elif case.target == "onnx":
        from vdla.frontend.onnx import import_onnx

        import_onnx(path, input_shapes=extra.get("input_shapes"))
    elif case.target == "npz":
        from vdla.graph.graph import Graph
        from vdla.model.pipeline import _load_calib

        _load_calib(path, Graph(extra["types"], [], []))
    else:
        from vdla.isa import assemble_file, decode_program, encode_program, validate_program
        from vdla.zoo.random_programs import pynq_full

        insns = assemble_file(path)
        validate_program(insns, pynq_full(), where=str(path))
        decode_program(encode_program(insns))


@contextlib.contextmanager
def timer(seconds: float) -> Iterator[dict]:
    """Raise :class:`CaseTimeout` in this (main) thread after ``seconds``; the flag says whether it fired."""
    state = {"fired": False}

    def fire(signum, frame):
        state["fired"] = True
        raise CaseTimeout(f"the case ran past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield state
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_case(case: Case, seconds: float = CASE_SECONDS) -> str:
    """Read ``case`` from a file of a fresh directory; ``"ok"`` or the refusal's class name. Raises
    :class:`Finding` when the reader breaks its contract (module docstring)."""
    from vdla.errors import VdlaError

    with tempfile.TemporaryDirectory(prefix="vdla-hostile-") as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(d) / f"case{SUFFIX[case.target]}"
        path.write_bytes(case.data)
        outcome, error = "ok", None
        with timer(seconds) as state:
            try:
                read(case, path)
            except VdlaError as e:
                outcome, error = type(e).__name__, e
            except CaseTimeout:
                pass
            except Exception as e:
                raise Finding(f"{case!r}: {type(e).__name__}: {e}"[:2000]) from e
        if state["fired"]:
            raise Finding(f"{case!r}: no answer within {seconds:g} s")
        if error is not None and path.name not in str(error):
            raise Finding(f"{case!r}: {type(error).__name__} does not name the file: {error}"[:2000])
        written = sorted(p.name for p in Path(d).iterdir() if p != path)
        if written or path.read_bytes() != case.data:
            raise Finding(f"{case!r}: the reader wrote {written or 'the file it read'}")
    return outcome


# ------------------------------------------------------------------------------------------------ the campaign


def worker(target: str, count: int, hypothesis_seed: int, out: Path) -> int:
    """Run ``count`` cases of ``target`` drawn by Hypothesis from ``hypothesis_seed``, under ``RLIMIT_AS``, each
    written to ``out/current-<pid>.case`` before it is read (the parent's heartbeat, and the case a crash or a
    hang leaves). Prints one JSON line; returns 1 with the (shrunk) finding saved in ``out``."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    seeds()
    current = out / f"current-{os.getpid()}.case"
    outcomes: dict[str, int] = {}

    @seed(hypothesis_seed)
    @settings(
        max_examples=count, database=None, deadline=None, phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False,
    )  # fmt: skip
    @given(case=cases(target))
    def one(case: Case) -> None:
        current.write_bytes(_case_file(case))
        outcome = run_case(case)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    try:
        one()
    except Exception as f:  # a Finding, or a group of them (the timer fired while the reader was failing)
        _save_finding(out, target, str(f), current.read_bytes())
        print(json.dumps({"cases": sum(outcomes.values()), "finding": str(f)[:1000]}), flush=True)
        return 1
    current.unlink(missing_ok=True)
    print(json.dumps({"cases": sum(outcomes.values()), "outcomes": outcomes}), flush=True)
    return 0


def _case_file(case: Case) -> bytes:
    """A case as a file: a JSON line (target, seed, edits), then its bytes (:func:`load_case` reads it)."""
    return json.dumps({"target": case.target, "seed": case.seed, "edits": case.edits}).encode() + b"\n" + case.data


def load_case(path: Path) -> Case:
    """The case a campaign saved (a finding, or the case a worker died on)."""
    head, _, data = path.read_bytes().partition(b"\n")
    meta = json.loads(head)
    return Case(meta["target"], meta["seed"], tuple(meta["edits"]), data)


def _save_finding(out: Path, target: str, message: str, case: bytes) -> Path:
    path = out / f"finding-{target}-{time.strftime('%H%M%S')}-{os.getpid()}.case"
    path.write_bytes(case)
    path.with_suffix(".txt").write_text(message)
    return path


@dataclass
class _Job:
    target: str
    count: int
    seed: int
    proc: subprocess.Popen | None = None
    log: Path | None = None


def campaign(cases_total: int, workers: int, out: Path, first_seed: int = 0, chunk: int = 2500) -> dict:
    """``cases_total`` cases, split evenly across the four targets in jobs of ``chunk`` cases (Hypothesis seeds
    ``first_seed``, ``first_seed + 1``, ...), ``workers`` worker processes at a time; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    per = cases_total // len(TARGETS)
    todo = [_Job(t, min(chunk, per - k), first_seed + len(TARGETS) * (k // chunk) + i)
            for k in range(0, per, chunk) for i, t in enumerate(TARGETS)]  # fmt: skip
    t0, counts, findings, running = time.monotonic(), dict.fromkeys(TARGETS, 0), [], []
    try:
        while todo or running:
            while todo and len(running) < workers:
                running.append(_start(todo.pop(0), out))
            time.sleep(1)
            for job in [j for j in running if j.proc.poll() is not None or _stuck(j, out)]:
                running.remove(job)
                cases, found = _finish(job, out)
                counts[job.target] += cases
                findings += found
                print(f"[{time.monotonic() - t0:6.0f} s] {job.target} seed {job.seed}: {cases} cases, "
                      f"{len(found)} findings; {sum(counts.values())} in all", flush=True)  # fmt: skip
    finally:
        for job in running:  # interrupted: no worker outlives the campaign
            job.proc.kill()
    summary = {"cases": sum(counts.values()), "by_target": counts, "findings": findings,
               "wall_seconds": round(time.monotonic() - t0, 1), "workers": workers}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _start(job: _Job, out: Path) -> _Job:
    job.log = out / f"{job.target}-{job.seed}.log"
    cmd = [sys.executable, __file__, "--worker", job.target, "--cases", str(job.count), "--seed", str(job.seed),
           "--out", str(out)]  # fmt: skip
    job.proc = subprocess.Popen(cmd, stdout=job.log.open("w"), stderr=subprocess.STDOUT)
    return job


def _stuck(job: _Job, out: Path) -> bool:
    """Whether the worker has been on one case for three case bounds (a hang the timer cannot interrupt)."""
    current = out / f"current-{job.proc.pid}.case"
    with contextlib.suppress(FileNotFoundError):
        if time.time() - current.stat().st_mtime > 3 * CASE_SECONDS:
            job.proc.kill()
            job.proc.wait()
            return True
    return False


def _finish(job: _Job, out: Path) -> tuple[int, list[str]]:
    """The cases a finished worker ran and its findings (a crash or a kill: the case it was on)."""
    lines = [json.loads(x) for x in job.log.read_text().splitlines() if x.startswith("{")]
    cases = lines[-1]["cases"] if lines else 0
    found = [lines[-1]["finding"]] if lines and "finding" in lines[-1] else []
    current = out / f"current-{job.proc.pid}.case"
    if job.proc.returncode and not found:  # it died on a case (a crash, a kill) or failed outside one
        tail = job.log.read_text()[-500:]
        message = f"{job.target} worker seed {job.seed} exit {job.proc.returncode}: {tail}"
        found.append(
            str(_save_finding(out, job.target, message, current.read_bytes())) if current.exists() else message
        )
    return cases, found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out/hostile"))
    p.add_argument("--worker", choices=TARGETS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.cases, args.seed, args.out)
    summary = campaign(args.cases, args.workers, args.out, args.seed)
    print(json.dumps(summary, indent=1))
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
