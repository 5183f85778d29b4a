"""The FPGA parts vdla builds for: capacity, family, speed and the timing-closure budget.

One table, :data:`PARTS`, as FINN keeps its per-board platform table: a board preset (``vdla/presets``) names
its part, and everything that needs the part's size or speed (the preset check, ``vdla fit``, ``vdla boards``,
the Vivado flow) reads it here.

**The budget** (:data:`FAILFAST`) is Xilinx's ``report_failfast`` check (XilinxTclStore, designutils), which
FINN also applies as its default resource limits: a design past these shares often fails to place, route or
meet timing. vdla holds every preset's Yosys count within them (Yosys counts more LUTs than Vivado).

**The timing proxy.** Yosys reports no timing, so a fit reports the deepest combinational path in LUT levels
(:mod:`vdla.hw.lut_depth`) against :meth:`Part.level_budget`: the levels that fit in a clock period,

    levels = floor((1000 / clock_mhz - overhead_ns) / level_ns)

``overhead_ns`` is the clock-to-out of the launching flip-flop, the setup of the capturing one and the clock
uncertainty; ``level_ns`` is one LUT and the route to the next, at the congestion of a design near the budget.
On a -1 7-series part (``xc7``) a LUT's own delay is about 0.12 ns and a local route 0.4-0.9 ns; 1.0 ns of
overhead and 1.125 ns a level give 8 levels at 100 MHz, the target vdla's xc7z020 build has always been held
to. UltraScale+ fabric (``xcup``) is faster at the same level count: its data sheet's LUT and local routing
delays are about 60% of a 7-series' at the -1 grade and 50% at -2, and its flip-flop overhead smaller; 0.6 ns
of overhead with 0.70 ns a level (-1) or 0.60 ns (-2) gives 8 levels at 150 MHz (-1) and 9 at 166.7 MHz (-2),
and 4 at 300 MHz: VTA's 333 MHz ZU+ clock needs logic half as deep as vdla's. These are estimates to rank
designs by, not timing analysis: only Vivado's router says what closes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vdla.errors import VdlaError

# report_failfast's limits: a share of the part's capacity per resource, and of the average of the hard blocks
FAILFAST = {"LUT": 0.70, "FF": 0.50, "DSP": 0.80, "BRAM36": 0.80, "URAM": 0.80}
FAILFAST_HARD_AVERAGE = 0.70  # the average share of DSP, BRAM36 and URAM (of those the part has)
RESOURCES = ("LUT", "FF", "DSP", "BRAM36", "URAM")
HARD_BLOCKS = ("DSP", "BRAM36", "URAM")

# The families Yosys' synth_xilinx maps to: its -family name, the DSP slice, and the proxy's delays per grade
FAMILIES = {
    "xc7": {"dsp": "DSP48E1", "overhead_ns": 1.0, "level_ns": {1: 1.125, 2: 0.95}},
    "xcup": {"dsp": "DSP48E2", "overhead_ns": 0.6, "level_ns": {1: 0.70, 2: 0.60}},
}


class PartError(VdlaError, ValueError):
    """A part name that is not in :data:`PARTS`."""


@dataclass(frozen=True)
class Part:
    """One FPGA part: its capacity per resource, Yosys family, speed grade and PS-to-PL ports.

    Invariant: every key of ``capacity`` is one of :data:`RESOURCES`; a resource the part lacks has 0.
    """

    name: str
    family: str  # synth_xilinx -family
    grade: int  # speed grade (-1, -2: the boards' parts), for the timing proxy
    package: str  # the full part number the Vivado flow builds for
    capacity: dict  # resource -> count (LUT, FF, DSP, BRAM36, URAM)
    hp_width_bits: int  # the PS's high-performance AXI slave ports: the widest DRAM bus a preset can have
    addr_bits: int  # address bits of those ports

    @property
    def dsp_name(self) -> str:
        return FAMILIES[self.family]["dsp"]

    def level_budget(self, clock_mhz: float) -> int:
        """LUT levels a register-to-register path may have at ``clock_mhz`` (the module docstring's derivation)."""
        fam = FAMILIES[self.family]
        return math.floor(round((1000.0 / clock_mhz - fam["overhead_ns"]) / fam["level_ns"][self.grade], 3))

    def limits(self) -> dict[str, float]:
        """The most of each resource the budget allows (0 where the part has none)."""
        return {r: math.floor(FAILFAST[r] * self.capacity[r]) for r in RESOURCES}

    def budget(self, used: dict[str, float]) -> dict:
        """``used`` (resource -> count) against the capacity and the failfast limits: per resource its share,
        limit share and margin (limit share minus share; negative = over), the hard blocks' average, and
        ``within`` (every check met). A resource the part lacks is within only when unused."""
        rows = {}
        for r in RESOURCES:
            cap, n = self.capacity[r], float(used.get(r, 0))
            share = n / cap if cap else (0.0 if n == 0 else math.inf)
            rows[r] = {"used": n, "capacity": cap, "share": share, "limit": FAILFAST[r], "margin": FAILFAST[r] - share}
        hard = [rows[r]["share"] for r in HARD_BLOCKS if self.capacity[r]]
        avg = sum(hard) / len(hard)
        return {
            "resources": rows,
            "hard_average": {"share": avg, "limit": FAILFAST_HARD_AVERAGE, "margin": FAILFAST_HARD_AVERAGE - avg},
            "within": all(v["margin"] >= 0 for v in rows.values()) and avg <= FAILFAST_HARD_AVERAGE,
        }

    def over_budget(self, used: dict[str, float]) -> list[str]:
        """What of ``used`` is past the budget, one phrase each ("LUT 51,555 = 96.9% > 70%"); empty when within."""
        b = self.budget(used)
        out = [
            f"{r} {v['used']:,.0f} = {v['share']:.1%} of {v['capacity']:,} > {v['limit']:.0%}"
            for r, v in b["resources"].items()
            if v["margin"] < 0
        ]
        if b["hard_average"]["margin"] < 0:
            out.append(f"average of DSP/BRAM/URAM {b['hard_average']['share']:.1%} > {FAILFAST_HARD_AVERAGE:.0%}")
        return out


def _part(name, family, grade, package, lut, ff, dsp, bram36, uram, hp, addr) -> Part:
    cap = {"LUT": lut, "FF": ff, "DSP": dsp, "BRAM36": bram36, "URAM": uram}
    return Part(name, family, grade, package, cap, hp, addr)


# Capacities from Xilinx's product tables (Zynq-7000 DS190, Zynq UltraScale+ DS891, Kria K26 DS987)
PARTS: dict[str, Part] = {
    p.name: p
    for p in (
        _part("xc7z020", "xc7", 1, "xc7z020clg400-1", 53_200, 106_400, 220, 140, 0, 64, 32),
        _part("xczu3eg", "xcup", 1, "xczu3eg-sbva484-1-i", 70_560, 141_120, 360, 216, 0, 128, 49),
        _part("xck26", "xcup", 2, "xck26-sfvc784-2LV-c", 117_120, 234_240, 1_248, 144, 64, 128, 49),
        _part("xczu7ev", "xcup", 2, "xczu7ev-ffvc1156-2-e", 230_400, 460_800, 1_728, 312, 96, 128, 49),
    )
}


def get_part(name: str) -> Part:
    """The part named ``name``; an unknown name lists the known ones."""
    try:
        return PARTS[name]
    except KeyError:
        raise PartError(f"unknown part {name!r}; known parts: {', '.join(PARTS)}") from None
