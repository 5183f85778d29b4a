"""The RTL build: the generated package, the register map is consistent, unsupported configurations are
refused with a reason, builds are cached (with and without assertions), and the built model identifies its
configuration. (tests/test_config.py checks that the generated files are fresh.)"""

from __future__ import annotations

import re

import pytest

from vdla.config import DEFAULT_PRESET, ConfigError, from_dict, load_config
from vdla.hw.rtlgen import PACKAGE_PATH, generate, package_source
from vdla.hw.toolchain import rtl_sources
from vdla.isa import ISA_VERSION
from vdla.runtime import registers as R
from vdla.runtime.rtl import RtlBackend, RtlBuildError, build
from vdla.runtime.rtl.verilate import build_dir, check_config


def test_package_per_configuration(tmp_path):
    """`vdla gen-rtl -o` writes another preset's package; the checked-in one is only the default's; no
    module includes a header (the package is the one place for widths and codes), and a module's own macro
    is undefined in the file that defines it (vdla_sram's port body: a file-local text, not a shared constant)."""
    [path] = generate("block8", tmp_path / "vdla_pkg.sv")
    text = path.read_text()
    assert text == package_source(load_config("block8")) and "localparam int BLOCK_IN = 8;" in " ".join(text.split())
    with pytest.raises(ConfigError, match=f"checked-in package is the '{DEFAULT_PRESET}' preset's"):
        generate("block8")
    assert PACKAGE_PATH not in rtl_sources()
    for src in rtl_sources():
        text = src.read_text()
        assert "`include" not in text, src.name
        for name in re.findall(r"`define\s+(\w+)", text):
            assert f"`undef {name}" in text, f"{src.name}: `define {name} is not undefined in the file"


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
    check_config(load_config("kv260"))  # a 128-bit bus, 49-bit addresses
    narrow = load_config("block8").to_dict() | {"part": "xck26", "bus_width_bits": 128, "axi_addr_bits": 49}
    with pytest.raises(RtlBuildError, match="inp elements of 8 bytes are not whole bus beats"):
        check_config(from_dict(narrow))
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
    assert build_dir(cfg, assertions=False) != build_dir(cfg)


@pytest.mark.slow  # a second Verilator build of the whole design: make test-all and CI
def test_speed_flavour_has_no_assertions(rtl_library):
    backend = RtlBackend(load_config(), assertions=False)
    assert not backend.harness.assertions and backend.library != rtl_library
    assert backend.harness.read(R.offset("CONFIG_HASH")) == load_config().hash
    backend.close()


def test_model_identifies_its_configuration(rtl_library):
    backend = RtlBackend(load_config())
    assert backend.harness.assertions  # the tests' model checks the RTL's assertions
    ident = backend.harness.read(R.offset("ID"))
    assert ident >> 16 == R.ID_MAGIC and ident & 0xFFFF == ISA_VERSION
    assert backend.harness.read(R.offset("CONFIG_HASH")) == load_config().hash
    backend.close()


def test_cli_commands(rtl_library, capsys):
    from vdla.cli import build_parser

    parser = build_parser()  # gen-rtl, rtl-build and fit from vdla.hw.cli, cycle-agreement from the experiments
    args = parser.parse_args(["rtl-build", "--config", "pynq"])
    assert args.func(args) == 0
    assert f"{rtl_library} (cached)" in capsys.readouterr().out
    assert parser.parse_args(["cycle-agreement", "--json", "x.json"]).json == "x.json"
    assert parser.parse_args(["fit"]).config == DEFAULT_PRESET
