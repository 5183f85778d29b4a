"""The per-unit costs of `vdla fit` (vdla.hw.units): registers and hard blocks by their RTL source and net names,
LUTs by the units they feed, on a small netlist whose attribution is known."""

from __future__ import annotations

import pytest

from vdla.hw.fit import LUTRAM_LUTS
from vdla.hw.units import TOP_UNIT, unit_costs

IN, OUT = "input", "output"


def _cell(kind: str, pins: dict, src: str = "") -> dict:
    return {
        "type": kind,
        "attributes": {"src": src} if src else {},
        "port_directions": {p: d for p, (d, _) in pins.items()},
        "connections": {p: bits for p, (_, bits) in pins.items()},
    }


def _scope(module: str) -> dict:
    return {
        "type": "$scopeinfo",
        "parameters": {"TYPE": "module"},
        "attributes": {"module_hdlname": module},
        "connections": {},
    }


def _ff(d: int, q: int, src: str) -> dict:
    return _cell("FDRE", {"C": (IN, [1]), "D": (IN, [d]), "Q": (OUT, [q])}, src + "|/share/xilinx/ff_map.v:68.41")


def _lut(ins: list[int], out: int) -> dict:
    return _cell("LUT2", {**{f"I{i}": (IN, [b]) for i, b in enumerate(ins)}, "O": (OUT, [out])})


def test_cells_are_charged_to_their_own_instance():
    cells = {
        "u_alu": _scope("vdla_alu"),
        "u_a": _scope("vdla_fifo"),
        "u_b": _scope("vdla_fifo"),
        # the ALU has one instance: its source file is enough
        "$auto$ff.cc:1$1": _ff(20, 10, "vdla_alu.sv:5.1-9.2"),
        "$auto$maccmap$1": _cell("DSP48E2", {"A": (IN, [10]), "P": (OUT, [11])}, "vdla_alu.sv:7.1-7.9"),
        # two FIFOs: the register's name says which
        "$auto$ff.cc:1$2": _ff(21, 12, "vdla_fifo.sv:3.1-4.2"),
        "$auto$ff.cc:1$3": _ff(22, 13, "vdla_fifo.sv:3.1-4.2"),
        # a memory keeps its hierarchical name; a top-level register is the top's
        "u_b.mem_q.0.0": _cell("RAM32M16", {"ADDRA": (IN, [12]), "DOA": (OUT, [14])}, "/share/xilinx/lutrams.v:1"),
        "$auto$ff.cc:1$4": _ff(23, 15, "vdla_top.sv:1.1-2.2"),
        # LUTs: l1 feeds the ALU's register alone, l2 both FIFOs' (shared: half each), l0 feeds l1 and l2
        "l0": _lut([10, 13], 30),
        "l1": _lut([30, 14], 20),
        "l2": _lut([30, 11], 31),
        "l3": _lut([31], 21),
        "l4": _lut([31], 22),
        "l5": _lut([15], 23),
        "obuf": _cell("OBUF", {"I": (IN, [15]), "O": (OUT, [40])}),
    }
    names = {"u_alu.res_q": 10, "u_a.head_q": 12, "u_b.head_q": 13, "count_q": 15, "u_b.mem_q_out": 14}
    netlist = {
        "modules": {
            "vdla_top": {
                "ports": {"o": {"direction": "output", "bits": [40]}},
                "cells": cells,
                "netnames": {n: {"bits": [b]} for n, b in names.items()},
            }
        }
    }
    units = unit_costs(netlist, "vdla_top", LUTRAM_LUTS)
    # l1: u_alu; l2 -> l3 (u_a) and l4 (u_b): half each; l0 -> l1 and l2: u_alu, u_a, u_b, a third each
    assert units["u_alu"] == {"LUT": round(1 + 1 / 3, 1), "FF": 1, "DSP": 1, "BRAM36": 0, "URAM": 0}
    assert units["u_a"] == {"LUT": round(1 + 0.5 + 1 / 3, 1), "FF": 1, "DSP": 0, "BRAM36": 0, "URAM": 0}
    assert units["u_b"] == {"LUT": round(1 + 0.5 + 1 / 3 + 8, 1), "FF": 1, "DSP": 0, "BRAM36": 0, "URAM": 0}
    assert units[TOP_UNIT] == {"LUT": 1, "FF": 1, "DSP": 0, "BRAM36": 0, "URAM": 0}
    assert sum(u["LUT"] for u in units.values()) == pytest.approx(6 + 8, abs=0.2)  # 6 LUTs, a RAM32M16's 8
    assert list(units)[0] == "u_b"  # most LUTs first
