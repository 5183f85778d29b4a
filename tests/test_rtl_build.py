"""The RTL build: generated headers are fresh, the register map is consistent, unsupported configurations
are refused with a reason, builds are cached, and the built model identifies its configuration."""

from __future__ import annotations

import pytest

from vdla.config import load_config
from vdla.hw_header import ISA_VERSION
from vdla.runtime import registers as R
from vdla.runtime.rtl import RtlBackend, RtlBuildError, build
from vdla.runtime.rtl.build import build_dir, check_config
from vdla.runtime.rtl.headers import GENERATED


@pytest.mark.parametrize("path", list(GENERATED), ids=lambda p: p.name)
def test_generated_files_are_up_to_date(path):
    assert path.read_text() == GENERATED[path](), f"{path} is stale: run `python -m vdla.runtime.rtl.headers`"


def test_register_map_is_consistent():
    offsets = [r.offset for r in R.REGS] + [R.offset(name) + k for name, _, _ in R.COUNTERS for k in (0, 4)]
    assert len(offsets) == len(set(offsets)) and all(o % 4 == 0 and o < 1 << R.ADDR_BITS for o in offsets)
    assert max(r.offset for r in R.REGS) < R.COUNTER_BASE
    codes = [c for c, _ in R.ERRORS.values()]
    assert len(codes) == len(set(codes)) and max(codes) < 16
    for f in R.FIELDS:
        assert any(r.name == f.reg for r in R.REGS) and f.lsb + f.width <= 32
    with pytest.raises(KeyError, match="no register named 'NOPE'"):
        R.offset("NOPE")


def test_unsupported_configurations_are_refused():
    cfg = load_config()
    with pytest.raises(RtlBuildError, match="bus_width_bits=128"):
        check_config(cfg.__class__(**{**cfg.to_dict(), "bus_width_bits": 128, "timing": cfg.timing}))
    with pytest.raises(RtlBuildError, match="timing alu_ii=1 is below the RTL's minimum 2"):
        check_config(cfg.with_timing(alu_ii=1))
    with pytest.raises(RtlBuildError, match="gemm_pipeline=3"):
        build(cfg.with_timing(gemm_pipeline=3))


def test_builds_are_cached_and_keyed_by_the_configuration(rtl_library):
    cfg = load_config()
    again = build(cfg)
    assert again.cached and again.library == rtl_library
    assert build_dir(cfg.with_timing(dram_read_latency=40)) != build_dir(cfg)
    assert build_dir(cfg, trace=True) != build_dir(cfg)


def test_model_identifies_its_configuration(rtl_library):
    backend = RtlBackend(load_config())
    ident = backend.harness.read(R.offset("ID"))
    assert ident >> 16 == R.ID_MAGIC and ident & 0xFFFF == ISA_VERSION
    assert backend.harness.read(R.offset("CONFIG_HASH")) == load_config().hash
    backend.close()


def test_cli_commands(rtl_library, capsys):
    from vdla.cli import build_parser

    parser = build_parser()  # rtl-build and fit from vdla.runtime.rtl.cli, calibrate from vdla.experiments
    args = parser.parse_args(["rtl-build", "--config", "pynq"])
    assert args.func(args) == 0
    assert f"{rtl_library} (cached)" in capsys.readouterr().out
    assert parser.parse_args(["calibrate", "--json", "x.json"]).json == "x.json"
    assert parser.parse_args(["fit"]).config == "pynq"
