"""Splitting a dense on-chip region into the fewest 2-D DRAM transfers (LOAD/STORE instructions).

The region is a box of axes (outer to inner), dense in SRAM in that order, each axis with its own
DRAM element stride. Inner axes contiguous in DRAM merge into the row (``x``); the next axis becomes
the rows (``y``, with its DRAM stride) when the fields allow it; every remaining outer index is one
more instruction. Outer axes whose rows continue at the same stride join the rows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from vdla.isa.instructions import MEM_FIELDS

_WIDTH = {name: width for name, _, width in MEM_FIELDS}
MAX_X = (1 << _WIDTH["x_size"]) - 1
MAX_Y = (1 << _WIDTH["y_size"]) - 1
MAX_STRIDE = (1 << _WIDTH["x_stride"]) - 1


@dataclass(frozen=True)
class Transfer:
    """One 2-D transfer: ``y`` rows of ``x`` elements, rows ``stride`` apart in DRAM, dense in SRAM."""

    sram: int
    offset: int
    y: int
    x: int
    stride: int


def plan_transfers(sram: int, offset: int, axes: list[tuple[int, int]]) -> list[Transfer]:
    """Transfers covering ``axes`` = [(extent, DRAM stride)] (outer to inner) from ``offset``/``sram``."""
    sram_strides = [1] * len(axes)
    for k in range(len(axes) - 2, -1, -1):
        sram_strides[k] = sram_strides[k + 1] * axes[k + 1][0]
    live = [(e, s, ss) for (e, s), ss in zip(axes, sram_strides) if e > 1]
    x, k = 1, len(live)
    while k and live[k - 1][1] == x and x * live[k - 1][0] <= MAX_X:
        x *= live[k - 1][0]
        k -= 1
    y, stride = 1, x
    if k and live[k - 1][1] <= MAX_STRIDE:
        stride = live[k - 1][1]
        while k and live[k - 1][1] == y * stride and y * live[k - 1][0] <= MAX_Y:  # rows at a uniform stride
            y *= live[k - 1][0]
            k -= 1
    outer = live[:k]
    out = []
    for idx in itertools.product(*(range(e) for e, _, _ in outer)):
        d = sum(i * s for i, (_, s, _) in zip(idx, outer))
        m = sum(i * ss for i, (_, _, ss) in zip(idx, outer))
        out.append(Transfer(sram + m, offset + d, y, x, stride))
    return out
