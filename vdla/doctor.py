"""``vdla doctor``: what a board (or any machine) has for running vdla artifacts, and what an artifact needs.

:func:`diagnose` returns :class:`Finding` s: the machine and Python; numpy, llvmlite and pynq; the overlay
(the ``.bit`` and ``.hwh`` files) and the accelerator in the loaded bitstream (ID and CONFIG_HASH, read by the
``pynq`` backend's own check); the CMA pool (``/proc/meminfo``); and for an artifact: its signature (unsigned,
signed by a key this machine trusts or not, or failing: refused), the CPU targets it carries and where its CPU
steps would run here, the config hash against the bitstream's, and the memory it needs against what the board
has. Every problem names the command that fixes it. Needs numpy only (pynq
where present); reading the accelerator's registers happens only with a bitstream loaded by pynq.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from vdla.config import board_presets
from vdla.cpu_fallback.native import HOST, TARGETS, NativeCodeError, machine, target_for_machine
from vdla.errors import VdlaError

OK, NOTE, PROBLEM = "ok", "note", "problem"
MIB = 1 << 20
MIN_NUMPY = (1, 26)


@dataclass(frozen=True)
class Finding:
    """One check: ``status`` is ``ok``, ``note`` (worth knowing, nothing to fix) or ``problem`` (then ``fix``
    is the command or action that fixes it)."""

    item: str
    status: str
    detail: str
    fix: str = ""


def _version(module: str) -> str | None:
    """The installed version of ``module``'s package (None: not installed)."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except ImportError:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return getattr(__import__(module), "__version__", "unknown")


def check_python() -> list[Finding]:
    """The machine, Python, numpy, llvmlite."""
    here = target_for_machine(machine())
    target = f"CPU target {here.name}" if here else f"no --cpu-target of vdla runs here (known: {', '.join(TARGETS)})"
    found = [
        Finding("machine", OK if here else NOTE, f"{platform.machine()} ({platform.system()}), {target}"),
        Finding("python", OK, f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"),
    ]
    numpy = _version("numpy")
    if numpy is None:
        found.append(Finding("numpy", PROBLEM, "not installed", "pip install 'vdla[cli]' (numpy and rich)"))
    else:
        old = tuple(int(p) for p in numpy.split(".")[:2] if p.isdigit()) < MIN_NUMPY
        fix = f"pip install 'numpy>={MIN_NUMPY[0]}.{MIN_NUMPY[1]}'" if old else ""
        found.append(Finding("numpy", PROBLEM if old else OK, numpy, fix))
    llvm = _version("llvmlite")
    jit = (
        f"llvmlite {llvm}: the JIT runs CPU steps an artifact has no code for" if llvm else "llvmlite is not installed"
    )
    found.append(Finding("llvmlite", NOTE if llvm is None else OK, jit + ("" if llvm else " (not needed on a board)")))
    return found


def meminfo(text: str | None = None) -> dict[str, int]:
    """``/proc/meminfo`` in bytes (empty where there is none)."""
    if text is None:
        try:
            text = Path("/proc/meminfo").read_text()
        except OSError:
            return {}
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def check_board(mem: dict[str, int], overlay: Path | None) -> list[Finding]:
    """pynq, the overlay's files, the CMA pool."""
    found = []
    pynq = _version("pynq")
    board = "CmaTotal" in mem
    if pynq:
        found.append(Finding("pynq", OK, pynq))
    elif board:
        fix = "source /etc/profile.d/pynq_venv.sh (the PYNQ image's Python has pynq), or pip install pynq"
        found.append(Finding("pynq", PROBLEM, "not installed (needed by --backend pynq)", fix))
    else:
        found.append(Finding("pynq", NOTE, "not installed (needed by --backend pynq, on a board)"))
    if overlay is not None:
        missing = [p.name for p in (overlay, overlay.with_suffix(".hwh")) if not p.is_file()]
        boards = ", ".join(c.name for c in board_presets())
        fix = f"copy vdla.bit and vdla.hwh (make -C hw/fpga/<board>: {boards}; docs/deploy-pynq.md) to {overlay.parent}"
        detail = f"{overlay} and its .hwh" + (f": missing {', '.join(missing)}" if missing else "")
        found.append(Finding("overlay", PROBLEM if missing else OK, detail, fix if missing else ""))
    if board:
        cma = f"CMA pool {mem['CmaTotal'] / MIB:.0f} MiB, {mem.get('CmaFree', 0) / MIB:.0f} MiB free"
        found.append(Finding("CMA", OK if mem["CmaTotal"] else PROBLEM, cma, "" if mem["CmaTotal"] else _CMA_FIX))
    else:
        found.append(
            Finding("CMA", NOTE, "no CMA pool in /proc/meminfo (not a board: the sim and rtl backends need none)")
        )
    return found


_TRUST_FIX = "sign it (vdla compile --sign KEY) and trust the key (vdla trust add PUBKEY), or vdla run --trust-native"
_CMA_FIX = "raise the kernel's cma= boot argument (PYNQ images reserve 128 MiB or more), or free pynq.allocate buffers"


def check_artifact(path: Path, mem: dict[str, int], dram_bytes: int) -> tuple[list[Finding], object | None]:
    """The artifact: readable, its CPU code (which runs here), its memory against the board's; returns the
    findings and the artifact (None if unreadable)."""
    from vdla.model.artifact import load_artifact
    from vdla.model.executor import choose_cpu_kernels
    from vdla.model.trust import SignatureError

    try:
        artifact = load_artifact(path)
    except SignatureError as e:
        fix = "do not run it: get the artifact again from whoever signed it"
        return [Finding("artifact", PROBLEM, f"{path}: refused", fix), Finding("signature", PROBLEM, str(e), fix)], None
    except (VdlaError, OSError) as e:
        return [Finding("artifact", PROBLEM, str(e), f"vdla compile MODEL.onnx -o {path.name} (again)")], None
    found = [Finding("artifact", OK, f"{path}: config {artifact.config.name!r} (hash {artifact.config.hash:#010x})")]
    found.append(check_trust(artifact))
    carried = ", ".join(artifact.cpu_code) or "none"
    here = target_for_machine(machine())
    cpu_steps = sum(s.kind == "cpu" for s in artifact.steps)
    notes: list[str] = []
    try:
        if here is not None and here.name in artifact.cpu_code:
            artifact.cpu_code[here.name].check()  # corrupt code is a problem, trusted or not (a hash: nothing runs)
        where, _ = choose_cpu_kernels(artifact, "auto", False, notes.append) if cpu_steps else ("none", None)
    except NativeCodeError as e:
        found.append(Finding("CPU code", PROBLEM, f"carries {carried}: {e}", _compile_fix(here)))
    else:
        how = {
            "native": f"its {here.name if here else ''} code (no LLVM needed)",
            "jit": "the JIT (llvmlite)",
            "reference": "numpy reference kernels (slow)",
            "none": "nothing: the artifact has no CPU steps",
        }[where]
        status = PROBLEM if where == "reference" else OK
        untrusted = here is not None and here.name in artifact.cpu_code and where in ("jit", "reference")
        fix = "" if where != "reference" else _TRUST_FIX if untrusted else _compile_fix(here)
        if untrusted:
            how += f" (its {here.name} code is not trusted: see signature)"
        found.append(Finding("CPU code", status, f"carries {carried}; {cpu_steps} CPU steps run here on {how}", fix))
    need = artifact.image.size
    region = f"the DRAM region ({dram_bytes / MIB:.0f} MiB, Device(..., dram_bytes=...))"
    if need > dram_bytes:
        fix = f"Device(artifact.config, backend='pynq', dram_bytes={-(-need // MIB)} << 20)"
        found.append(Finding("memory", PROBLEM, f"the image needs {need / MIB:.1f} MiB, more than {region}", fix))
    elif "CmaFree" in mem and dram_bytes > mem["CmaFree"]:
        detail = (
            f"{region} is larger than the CMA pool's free {mem['CmaFree'] / MIB:.0f} MiB (image {need / MIB:.1f} MiB)"
        )
        found.append(Finding("memory", PROBLEM, detail, _CMA_FIX))
    else:
        free = f", CMA free {mem['CmaFree'] / MIB:.0f} MiB" if "CmaFree" in mem else ""
        found.append(Finding("memory", OK, f"image {need / MIB:.1f} MiB in {region}{free}"))
    return found, artifact


def check_trust(artifact) -> Finding:
    """The artifact's signature (as loaded: one that failed was refused) against this machine's trusted keys:
    ok when signed by a trusted key, a note otherwise (its native code then loads only with --trust-native)."""
    from vdla.model.trust import describe, distrust_reason

    sig = artifact.signature
    if distrust_reason(sig) is None:
        return Finding("signature", OK, f"{describe(sig)}: its native code loads here")
    if not artifact.cpu_code:
        return Finding("signature", NOTE, f"{describe(sig)}: it carries no native code, so nothing needs trust")
    hint = (
        "vdla compile --sign KEY signs it"
        if sig is None
        else "vdla trust add its key if you know the key is of someone you trust"
    )
    return Finding("signature", NOTE, f"{describe(sig)}: its native code loads only with --trust-native ({hint})")


def _compile_fix(here) -> str:
    target = here.name if here else HOST
    return f"vdla compile MODEL.onnx --cpu-target {target} (on the development machine, with the aot extra)"


def check_bitstream(config, overlay: Path | None) -> Finding:
    """The accelerator in the loaded bitstream against ``config`` (the pynq backend's identity check)."""
    from vdla.runtime.pynq_backend import PynqBackend

    try:
        backend = PynqBackend(config, overlay=str(overlay) if overlay else None)
    except (VdlaError, OSError, RuntimeError) as e:
        load = f"python3 -c \"import pynq; pynq.Overlay('{overlay or 'vdla.bit'}')\""
        fix = f"{load} with the overlay built for config {config.name!r} (vdla info --config {config.name})"
        return Finding("bitstream", PROBLEM, str(e), fix)
    backend.close()
    return Finding(
        "bitstream", OK, f"accelerator of config {config.name!r} (hash {config.hash:#010x}) at {backend.base_addr:#x}"
    )


def diagnose(
    artifact: Path | None = None,
    overlay: Path | None = None,
    dram_bytes: int | None = None,
    meminfo_text: str | None = None,
) -> list[Finding]:
    """Every check (see the module docstring); the accelerator's registers are read only where pynq is
    installed and a board (or pynq's simulated one) is present."""
    from vdla.runtime.pynq_backend import DEFAULT_DRAM_BYTES

    mem = meminfo(meminfo_text)
    found = check_python() + check_board(mem, overlay)
    art = None
    if artifact is not None:
        more, art = check_artifact(artifact, mem, dram_bytes or DEFAULT_DRAM_BYTES)
        found += more
    if _version("pynq") is not None and ("CmaTotal" in mem or overlay is not None):
        from vdla.config import load_config

        found.append(check_bitstream(art.config if art is not None else load_config("pynq"), overlay))
    return found
