"""The timing proxy of `vdla fit`: LUT levels of the deepest path, on small netlists whose depth is known."""

from __future__ import annotations

import pytest

from vdla.hw.lut_depth import DSP_ADD_LEVELS, DSP_MULT_LEVELS, TARGET_LEVELS, NetlistError, longest_path

IN, OUT = "input", "output"


def _cell(kind: str, pins: dict[str, tuple[str, list[int]]]) -> dict:
    return {
        "type": kind,
        "port_directions": {p: d for p, (d, _) in pins.items()},
        "connections": {p: bits for p, (_, bits) in pins.items()},
    }


def _ff(d: int, q: int) -> dict:
    return _cell("FDRE", {"C": (IN, [1]), "D": (IN, [d]), "Q": (OUT, [q])})


def _lut(kind: str, ins: list[int], out: int) -> dict:
    return _cell(kind, {**{f"I{i}": (IN, [b]) for i, b in enumerate(ins)}, "O": (OUT, [out])})


def _carry(s: int, ci: int | str, o: int) -> dict:
    return _cell(
        "CARRY4",
        {"S": (IN, [s, "0", "0", "0"]), "DI": (IN, ["0"] * 4), "CI": (IN, [ci]), "CO": (OUT, [o, 90, 91, 92])},
    )


def _netlist(cells: dict, names: dict[str, int]) -> dict:
    return {"modules": {"top": {"ports": {}, "cells": cells, "netnames": {n: {"bits": [b]} for n, b in names.items()}}}}


def test_luts_count_a_carry_chain_once_and_muxes_not_at_all():
    # src_q -> LUT -> CARRY4 (S) -> CARRY4 (CI) -> LUT -> MUXF7 -> dst_q: 1 + 1 + 0 + 1 + 0 = 3 levels;
    # a side path src_q -> LUT -> LUT -> short_q: 2 levels; a LUT RAM read (address -> data) -> LUT: 2 levels
    cells = {
        "ff_src": _ff(2, 10),
        "l1": _lut("LUT3", [10, 10, 10], 11),
        "c1": _carry(11, "0", 12),
        "c2": _carry(3, 12, 13),
        "l2": _lut("LUT6", [13, 10, 10, 10, 10, 10], 14),
        "m7": _cell("MUXF7", {"I0": (IN, [14]), "I1": (IN, [10]), "S": (IN, [10]), "O": (OUT, [15])}),
        "ff_dst": _ff(15, 16),
        "s1": _lut("LUT2", [10, 10], 20),
        "s2": _lut("INV", [20], 21),
        "ff_short": _ff(21, 22),
        "ram": _cell(
            "RAM32M",
            {"ADDRA": (IN, [10] * 5), "DIA": (IN, [21, 21]), "WE": (IN, [10]), "DOA": (OUT, [30, 31])},
        ),
        "l3": _lut("LUT2", [30, 31], 32),
        "ff_ram": _ff(32, 33),
    }
    names = {"src_q": 10, "sum": 13, "dst_q": 16, "short_q": 22}
    path = longest_path(_netlist(cells, names), "top")
    assert path.levels == 3 and path.meets_target
    assert [s.cell for s in path.steps] == ["l1", "c1", "c2", "l2", "m7"]
    assert path.start == "FDRE ff_src -> src_q"
    assert path.end == "FDRE ff_dst (-> dst_q).D"
    assert path.to_dict()["levels"] == 3 and path.unknown == ()


def test_a_long_chain_misses_the_target():
    n = TARGET_LEVELS + 1
    cells = {"ff_a": _ff(5, 100)}
    for i in range(n):
        cells[f"l{i}"] = _lut("LUT1", [100 + i], 101 + i)
    cells["ff_b"] = _ff(100 + n, 200)
    path = longest_path(_netlist(cells, {}), "top")
    assert path.levels == n and not path.meets_target and len(path.steps) == n


def _dsp(regs: dict[str, int], pins: dict[str, tuple[str, list[int]]]) -> dict:
    cell = _cell("DSP48E1", {"CLK": (IN, [1]), **pins})
    cell["parameters"] = {r: format(v, "032b") for r, v in regs.items()} | {"USE_MULT": "MULTIPLY"}
    return cell


def test_a_dsp_counts_its_unregistered_stages():
    mult, add = DSP_MULT_LEVELS, DSP_ADD_LEVELS
    regs = {"AREG": 0, "BREG": 0, "CREG": 0, "MREG": 0, "PREG": 0}
    # ff -> LUT -> DSP (A to P, no registers) -> DSP (PCIN to P) -> LUT -> ff: 1 + mult + add + add + 1
    cells = {
        "ff_a": _ff(5, 10),
        "l0": _lut("LUT1", [10], 11),
        "m0": _dsp(regs, {"A": (IN, [11, "0"]), "B": (IN, [10]), "P": (OUT, [12]), "PCOUT": (OUT, [13])}),
        "m1": _dsp(regs, {"A": (IN, [10]), "PCIN": (IN, [13]), "P": (OUT, [14])}),
        "l1": _lut("LUT1", [14], 15),
        "ff_b": _ff(15, 16),
    }
    path = longest_path(_netlist(cells, {"a_q": 10, "b_q": 16}), "top")
    assert path.levels == 2 + mult + 2 * add
    assert [s.cell for s in path.steps] == ["l0", "m0", "m1", "l1"]
    assert path.start == "FDRE ff_a -> a_q" and path.end == "FDRE ff_b (-> b_q).D"
    # with its registers on, the DSP cuts the path: A ends at M (after the multiply), P starts after the
    # post-adder, and a registered P is a plain boundary
    cells["m0"] = _dsp(regs | {"MREG": 1}, {"A": (IN, [11]), "P": (OUT, [12]), "PCOUT": (OUT, [13])})
    cells["m1"] = _dsp(regs | {"PREG": 1}, {"PCIN": (IN, [13]), "P": (OUT, [14])})
    path = longest_path(_netlist(cells, {"a_q": 10, "b_q": 16}), "top")
    assert path.levels == 1 + mult and path.end == "DSP48E1 m0.A"
    cells["m1"]["parameters"]["PREG"] = format(0, "032b")
    cells["m0"]["connections"]["A"] = ["0"]
    path = longest_path(_netlist(cells, {"b_q": 16}), "top")
    assert path.levels == add + add + 1 and path.start.startswith("DSP48E1 m0")  # M -> P, PCIN -> P, LUT


def test_loops_and_unknown_cells_are_reported():
    loop = {"a": _lut("LUT1", [2], 3), "b": _lut("LUT1", [3], 2), "ff": _ff(3, 4)}
    with pytest.raises(NetlistError, match="combinational loop"):
        longest_path(_netlist(loop, {}), "top")
    with pytest.raises(NetlistError, match="no module 'nope'"):
        longest_path(_netlist(loop, {}), "nope")
    odd = {"ff": _ff(3, 2), "x": _cell("MYSTERY", {"I": (IN, [2]), "O": (OUT, [3])}), "s": _cell("$scopeinfo", {})}
    assert longest_path(_netlist(odd, {}), "top").unknown == ("MYSTERY",)


def test_the_deepest_path_of_each_unit():
    cells = {
        "a": _ff(5, 10),
        "l0": _lut("LUT1", [10], 11),
        "l1": _lut("LUT1", [11], 12),
        "b": _ff(12, 13),  # u_x.u_y.z_q: 2 levels
        "l2": _lut("LUT1", [10], 14),
        "c": _ff(14, 15),  # q: 1 level, in the top module
        "d": _ff(10, 16),  # a name Yosys made up: 0 levels
    }
    names = {"u_x.u_y.u_z.z_q": 13, "q": 15, "$auto$ff.cc:1$2": 16, "a_q": 10}
    path = longest_path(_netlist(cells, names), "top")
    assert path.units == (("u_x.u_y", 2), ("(top)", 1), ("(unnamed)", 0))
    assert path.to_dict()["by_unit"] == {"u_x.u_y": 2, "(top)": 1, "(unnamed)": 0}
    ends = path.to_dict()["by_unit_ends"]
    assert list(ends) == ["u_x.u_y", "(top)", "(unnamed)"]
    assert ends["u_x.u_y"] == {"start": "FDRE a -> a_q", "end": "FDRE b (-> u_x.u_y.u_z.z_q).D"}
    assert ends["(top)"]["end"] == "FDRE c (-> q).D"


def test_ultrascale_plus_cells_count_as_their_7_series_counterparts():
    """DSP48E2 as DSP48E1 (the same pins and register parameters), CARRY8 as CARRY4 (one level entering at S,
    none along CI), MUXF9 free; RAMB36E2, RAMB18E2 and URAM288 read into registers: boundaries."""
    mult, add = DSP_MULT_LEVELS, DSP_ADD_LEVELS
    regs = {"AREG": 0, "BREG": 0, "CREG": 0, "MREG": 0, "PREG": 0}
    dsp = _dsp(regs, {"A": (IN, [11]), "P": (OUT, [12])})
    dsp["type"] = "DSP48E2"
    carry8 = _cell("CARRY8", {"S": (IN, [12] + ["0"] * 7), "CI": (IN, ["0"]), "CO": (OUT, [13] + [80] * 7)})
    carry8b = _cell("CARRY8", {"S": (IN, ["0"] * 8), "CI": (IN, [13]), "CI_TOP": (IN, [10]), "CO": (OUT, [14])})
    mux9 = _cell("MUXF9", {"I0": (IN, [14]), "I1": (IN, [10]), "S": (IN, [10]), "O": (OUT, [15])})
    cells = {
        "ff_a": _ff(5, 10),
        "l0": _lut("LUT1", [10], 11),
        "m0": dsp,
        "c0": carry8,
        "c1": carry8b,
        "m9": mux9,
        "ff_b": _ff(15, 16),
    }
    path = longest_path(_netlist(cells, {"a_q": 10, "b_q": 16}), "top")
    assert path.levels == 1 + mult + add + 1 and path.unknown == ()
    assert [s.cell for s in path.steps] == ["l0", "m0", "c0", "c1", "m9"]
    for kind, out_pin in (("RAMB36E2", "DOUTBDOUT"), ("RAMB18E2", "DOUTBDOUT"), ("URAM288", "DOUT_B")):
        ram = {
            "ff_a": _ff(5, 10),
            "l0": _lut("LUT1", [10], 11),
            "l1": _lut("LUT1", [11], 12),
            "mem": _cell(kind, {"ADDR_B": (IN, [12]), out_pin: (OUT, [20])}),
            "l2": _lut("LUT1", [20], 21),
            "ff_b": _ff(21, 22),
        }
        path = longest_path(_netlist(ram, {}), "top")
        assert path.levels == 2 and path.end == f"{kind} mem.ADDR_B" and path.unknown == (), kind
