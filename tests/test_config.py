import json

import pytest

from vdla.config import ConfigError, from_dict, load_config, preset_names
from vdla.hw.rtlgen import PACKAGE_PATH, generated_files


def test_presets_and_peaks():
    assert {"pynq-z2", "aup-zu3", "kv260", "zcu104", "osdi18"} <= set(preset_names())
    pynq = load_config()
    assert pynq.name == "pynq-z2" and load_config("pynq") == pynq  # the old name is an alias
    assert (pynq.batch, pynq.block_in, pynq.block_out) == (1, 16, 16)
    # the build within Xilinx's timing-closure budget on the xc7z020 (benchmarks/fit/pynq-z2.json)
    assert (pynq.inp_buff_bytes, pynq.wgt_buff_bytes, pynq.acc_buff_bytes, pynq.uop_buff_bytes) == (
        32 << 10,
        128 << 10,
        128 << 10,
        16 << 10,
    )
    assert not (pynq.depthwise_mode or pynq.out_multiplier or pynq.src_out) and pynq.alu_passes == 2
    assert pynq.macs_per_cycle == 256 and pynq.peak_gops == pytest.approx(51.2)
    assert (pynq.inp_depth, pynq.wgt_depth, pynq.acc_depth, pynq.uop_depth) == (2048, 512, 2048, 4096)
    assert (pynq.uop_dst_bits, pynq.uop_src_bits, pynq.uop_wgt_bits) == (11, 11, 9)
    assert pynq.bus_bytes == 8
    osdi = load_config("osdi18")
    assert osdi.clock_mhz == 200 and osdi.peak_gops == pytest.approx(102.4) and osdi.wgt_depth == 128
    assert pynq.hash != osdi.hash


def test_config_from_file_and_errors(tmp_path):
    d = load_config("pynq").to_dict()
    d["name"], d["block_in"] = "b8", 8
    path = tmp_path / "b8.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="buffer depths need 11\\+12\\+10 micro-op bits > 32"):
        load_config(str(path))
    d["inp_buff_bytes"], d["wgt_buff_bytes"] = 16 << 10, 128 << 10
    path.write_text(json.dumps(d))
    assert load_config(str(path)).inp_elem_bytes == 8
    with pytest.raises(ConfigError, match="no preset or file named 'nope'"):
        load_config("nope")
    with pytest.raises(ConfigError, match="block_out must be a positive power of two"):
        from_dict({**d, "block_out": 12})
    with pytest.raises(ConfigError, match="unknown config keys: \\['extra'\\]"):
        from_dict({**d, "extra": 1})
    with pytest.raises(ConfigError, match="unknown timing keys"):
        from_dict({**d, "timing": {"warp": 9}})
    with pytest.raises(ConfigError, match="missing config keys: \\['batch'\\]"):
        from_dict({k: v for k, v in d.items() if k != "batch"})
    pynq = load_config("pynq").to_dict()
    without = {
        k: v for k, v in pynq.items() if k not in ("description", "depthwise_mode", "out_multiplier", "alu_lanes")
    }
    assert from_dict(without).depthwise_mode and from_dict(without).dw_supported  # optional keys, defaults
    assert from_dict(without).out_multiplier and from_dict(without).alu_passes == 1
    assert load_config("pynq").alu_passes == 2 and from_dict({**pynq, "alu_lanes": 16}).alu_passes == 1
    with pytest.raises(ConfigError, match="alu_lanes must be 0 or 16 .* or 8 .*, got 4"):
        from_dict({**pynq, "alu_lanes": 4})
    with pytest.raises(ConfigError, match="alu_lanes must be an integer, got True"):
        from_dict({**pynq, "alu_lanes": True})
    with pytest.raises(ConfigError, match="alu_lanes 8 .* set out_multiplier false"):
        from_dict({**pynq, "out_multiplier": True})
    with pytest.raises(ConfigError, match="out_multiplier must be true or false, got 'yes'"):
        from_dict({**pynq, "out_multiplier": "yes"})
    assert not from_dict({**pynq, "depthwise_mode": False}).dw_supported
    assert not from_dict(d).dw_supported  # block_in 8 != block_out 16: no mode, whatever the key says
    with pytest.raises(ConfigError, match="depthwise_mode must be true or false, got 1"):
        from_dict({**pynq, "depthwise_mode": 1})
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(str(bad))


@pytest.mark.parametrize("path", list(generated_files()), ids=lambda p: p.name)
def test_generated_files_are_up_to_date(path):
    """Every checked-in generated file (the RTL package, docs/registers.md) is what `vdla gen-rtl` writes."""
    assert path.read_text() == generated_files()[path], f"{path} is stale: run `vdla gen-rtl`"


def test_generated_package_is_the_default_configuration():
    text = PACKAGE_PATH.read_text()
    assert f"CONFIG_HASH = 32'h{load_config().hash:08x};" in " ".join(text.split())
