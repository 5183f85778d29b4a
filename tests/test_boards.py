"""The board presets: their parts, the checks a preset passes before anything is built from it, the
timing-closure budget and the level budget, and the commands that show them (`vdla boards`, `vdla info`)."""

from __future__ import annotations

import json

import pytest

from vdla.cli import main
from vdla.config import ConfigError, board_presets, from_dict, load_config, preset_names
from vdla.parts import PARTS, PartError, get_part

BOARDS = {"pynq-z2": "xc7z020", "aup-zu3": "xczu3eg", "kv260": "xck26", "zcu104": "xczu7ev"}


def test_every_board_has_a_preset_on_its_part():
    assert {c.name: c.part for c in board_presets()} == BOARDS
    for cfg in board_presets():
        part = cfg.part_spec
        assert cfg.bus_width_bits == part.hp_width_bits  # each board's full HP port
        assert cfg.axi_addr_bits == part.addr_bits
        assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 16, 16)
        assert cfg.part_spec.level_budget(cfg.clock_mhz) >= 8  # the clock the proxy supports for 8-level logic
    assert load_config("pynq").name == "pynq-z2" and load_config("pynq").boards == ("PYNQ-Z2", "PYNQ-Z1")
    assert load_config("zcu104").reg_base_addr == 0xA000_0000 and load_config("pynq-z2").reg_base_addr == 0x43C0_0000


def test_level_budget_derivation():
    """8 levels at 100 MHz on the -1 xc7z020 (the target vdla's build has always had); ZU+ -1 at 150 MHz and -2
    at 166.7 MHz allow 8 and 9; VTA's 333 MHz allows 3 on -2."""
    assert get_part("xc7z020").level_budget(100) == 8
    assert get_part("xczu3eg").level_budget(150) == 8
    assert get_part("xck26").level_budget(1500 / 9) == 9
    assert get_part("xczu7ev").level_budget(333) == 4
    assert get_part("xc7z020").level_budget(200) == 3


def test_failfast_budget_on_the_issue_figures():
    """The xc7z020 build as it stood (51,555 LUT, 205 DSP, 128 BRAM36) is over the budget on all three."""
    part = get_part("xc7z020")
    assert part.limits() == {"LUT": 37_240, "FF": 53_200, "DSP": 176, "BRAM36": 112, "URAM": 0}
    over = part.over_budget({"LUT": 51_555, "FF": 20_843, "DSP": 205, "BRAM36": 128})
    assert [o.split()[0] for o in over] == ["LUT", "DSP", "BRAM36", "average"], over
    assert "96.9%" in over[0]
    within = part.budget({"LUT": 37_000, "FF": 20_000, "DSP": 150, "BRAM36": 100})
    assert within["within"] and within["hard_average"]["share"] == pytest.approx((150 / 220 + 100 / 140) / 2)
    assert not part.budget({"LUT": 37_000, "DSP": 170, "BRAM36": 110})["within"]  # each under, the average over
    assert not part.budget({"URAM": 1})["within"]  # a resource the part lacks
    with pytest.raises(PartError, match="unknown part 'xc7z045'; known parts: xc7z020, xczu3eg"):
        get_part("xc7z045")


def test_preset_refusals_name_the_field():
    d = load_config("pynq-z2").to_dict()
    cases = [
        ({"part": "xc7z045"}, "part: unknown part 'xc7z045'; known parts"),
        ({"clock_mhz": "fast"}, "clock_mhz must be a number, got 'fast'"),
        ({"clock_mhz": 0}, "clock_mhz must be between 1 and 1000"),
        ({"batch": 1.0}, "batch must be an integer, got 1.0"),
        ({"batch": True}, "batch must be an integer, got True"),
        ({"boards": "PYNQ-Z2"}, "boards must be a list of strings"),
        ({"bus_width_bits": 128}, "bus_width_bits 128 is wider than the xc7z020's 64-bit HP ports"),
        ({"axi_addr_bits": 49}, "axi_addr_bits must be between 32 and the xc7z020's 32"),
        ({"reg_base_addr": "0xZZ"}, "reg_base_addr must be an integer, got '0xZZ'"),
        ({"reg_base_addr": 0x43C0_0010}, "reg_base_addr 0x43c00010 must be 4 KiB aligned"),
        ({"dram_base_addr": 0xF800_0000}, "DRAM window 0xf8000000 \\+ 0x10000000 must be"),
        ({"timing": {"gemm_setup": -1}}, "timing.gemm_setup must be a non-negative integer"),
        ({"timing": [1]}, "timing must be an object"),
        ({"block_in": 32, "block_out": 32, "alu_lanes": 0}, "does not fit the xc7z020: DSP needs about 653 of 220"),
        ({"uram_buffers": ["wgt"]}, "uram_buffers \\['wgt'\\]: the xc7z020 has no UltraRAM"),
        ({"uram_buffers": "wgt"}, "uram_buffers must be a list of strings, got 'wgt'"),
    ]
    for change, message in cases:
        with pytest.raises(ConfigError, match=message):
            from_dict({**d, **change})
    with pytest.raises(ConfigError, match="no preset or file named 'zcu102'; presets: .*kv260.*aliases: pynq"):
        load_config("zcu102")


def test_uram_buffers_name_known_buffers_on_parts_with_uram():
    d = load_config("zcu104").to_dict()
    for bad in (["weights"], ["wgt", "wgt"]):
        with pytest.raises(ConfigError, match=r"uram_buffers must name each buffer at most once, of inp, wgt, acc"):
            from_dict({**d, "uram_buffers": bad})
    with pytest.raises(ConfigError, match="uram_buffers \\['acc'\\]: the xczu3eg has no UltraRAM"):
        from_dict({**load_config("aup-zu3").to_dict(), "uram_buffers": ["acc"]})
    cfg = from_dict({**d, "uram_buffers": ["wgt", "out"]})
    assert cfg.uram_buffers == ("wgt", "out") and cfg.in_uram("out_src") and not cfg.in_uram("acc")
    assert cfg.hash == load_config("zcu104").hash  # where a buffer is built does not change what runs
    from vdla.hw.rtlgen import package_source

    text = package_source(cfg)
    assert "localparam bit WGT_URAM             = 1'b1;" in text and "ACC_URAM             = 1'b0" in text


def test_presets_in_hex_and_defaults(tmp_path):
    """Addresses may be written in hex; a preset file from before the board keys is the PYNQ-Z1/Z2's."""
    text = tmp_path / "p.json"
    d = json.loads(json.dumps(load_config("pynq-z2").to_dict()))
    for k in ("part", "boards", "reg_base_addr", "axi_addr_bits"):
        d.pop(k)
    d["name"], d["dram_base_addr"] = "mine", "0x20000000"
    text.write_text(json.dumps(d))
    cfg = load_config(str(text))
    assert (cfg.part, cfg.dram_base_addr, cfg.axi_addr_bits, cfg.reg_base_addr) == (
        "xc7z020",
        0x2000_0000,
        32,
        0x43C0_0000,
    )
    zu = from_dict({**d, "part": "xczu7ev"})
    assert zu.axi_addr_bits == 49  # the part's, when the preset does not say


def test_hard_block_estimate_counts_each_buffer():
    """BRAM36: 32 Kbit of data per block at the widest aspect (64 bits x 512); the OUT buffer twice where GEMMs
    read OUT rows; a buffer in UltraRAM one URAM288 per 64 bits of width and 4K words of depth. The committed fits
    hold it to Yosys' count (tests/test_fit_records.py)."""
    from full_units import FULL

    assert FULL.buffers()["wgt"] == (2048, 1024) and "out_src" in FULL.buffers()
    assert FULL.hard_block_estimate() == {"DSP": 205, "BRAM36": 8 + 64 + 32 + 8 + 8 + 8, "URAM": 0}
    cfg = load_config("pynq-z2")  # the build within the timing-closure budget: Yosys counts 173 and 84
    assert cfg.buffers()["wgt"] == (2048, 512) and "out_src" not in cfg.buffers()
    assert cfg.hard_block_estimate() == {"DSP": 173, "BRAM36": 8 + 32 + 32 + 8 + 4, "URAM": 0}
    assert load_config("block8").hard_block_estimate()["BRAM36"] < 40
    zu = from_dict({**load_config("zcu104").to_dict(), "uram_buffers": ["wgt", "acc"]})
    assert zu.hard_block_estimate()["BRAM36"] == 8 + 8 + 8 + 8 and zu.hard_block_estimate()["URAM"] == 32 + 8


def test_vdla_boards_and_info(capsys):
    assert main(["boards", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["preset"] for r in rows] == list(BOARDS)
    assert rows[1]["boards"] == ["AUP-ZU3", "Ultra96-V2"] and rows[1]["peak_gops"] == 64.0  # 2 x 256 MACs at 125 MHz
    assert main(["boards"]) == 0
    assert "kv260" in capsys.readouterr().out
    assert main(["info", "--config", "kv260", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["config"]["part"] == "xck26" and info["part"]["LUT levels at the clock"] == 10
    assert "URAM 64" in info["part"]["capacity"]
    assert main(["info", "--config", "no-such-board"]) == 2
    assert "presets: " in capsys.readouterr().out


def test_every_part_is_used_or_documented():
    assert set(BOARDS.values()) <= set(PARTS)
    assert set(preset_names()) >= set(BOARDS)


def test_rtl_families():
    """kv260 and zcu104 simulate one design (tests/rtl_presets.py: they differ in clock, name and where ACC is
    built), which the RTL tests build once; aup-zu3 (a half-width ALU) and pynq-z2 (another bus) are designs of
    their own."""
    from rtl_presets import ZU_PRESETS, ZU_RTL, rtl_representatives, simulated_design

    assert len(ZU_PRESETS) == 3 and ZU_RTL == ["kv260", "aup-zu3"]
    assert simulated_design("zcu104") == simulated_design("kv260") != simulated_design("aup-zu3")
    assert rtl_representatives(["pynq-z2", *ZU_PRESETS]) == ["pynq-z2", "aup-zu3", "kv260"]
