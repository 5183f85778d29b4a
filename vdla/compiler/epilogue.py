"""The fused epilogue as ALU passes over the accumulator tile.

Every pass is one pipelined ALU instruction over the whole tile, so the epilogue costs a fixed number
of compute-stage cycles per accumulator element (:func:`cycles_per_element`): one per pass with an
immediate, ``alu_ii`` per pass reading a second accumulator operand, plus one for the accumulator
reset in front. The passes are, in order, only those the layer needs:

    ADD bias rows -> MUL multiplier -> RSHR shift (round half up) -> ADD residual -> CLIP [lo, hi]

with ReLU folded into the CLIP bounds and per-channel constants (bias, multipliers) read from rows
kept in the accumulator buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdla.compiler.spec import CompileError, EpilogueSpec
from vdla.config import Timing
from vdla.isa import AluOp

IMM_MIN, IMM_MAX = -(1 << 15), (1 << 15) - 1


@dataclass(frozen=True)
class AluPass:
    """One ALU instruction of the epilogue: ``operand`` names an accumulator region, else ``imm`` is used."""

    op: AluOp
    operand: str | None = None
    imm: int | None = None


def clip_imm(lo: int, hi: int) -> int:
    """The CLIP immediate: lo in bits [7:0], hi in bits [15:8], as a signed 16-bit value."""
    return hi * 256 + (lo & 0xFF)


def multiplier_kind(multiplier: int | np.ndarray) -> str:
    """How a multiplier is applied: "none" (1), "imm" (a scalar fitting the immediate) or "row"."""
    m = np.asarray(multiplier)
    if m.dtype.kind not in "iu":
        raise CompileError(f"the multiplier must be integer, got dtype {m.dtype}")
    if m.size and (m.min() < np.iinfo(np.int32).min or m.max() > np.iinfo(np.int32).max):
        raise CompileError("the multiplier must fit in int32 (the ALU multiplies 32-bit accumulators)")
    if m.ndim == 0:
        v = int(m)
        return "none" if v == 1 else "imm" if IMM_MIN <= v <= IMM_MAX else "row"
    return "row"


def alu_passes(epi: EpilogueSpec, mul_imm: int = 1) -> tuple[AluPass, ...]:
    """The ALU instructions of the epilogue, in execution order."""
    passes = []
    if epi.bias:
        passes.append(AluPass(AluOp.ADD, "bias"))
    if epi.multiplier == "imm":
        passes.append(AluPass(AluOp.MUL, imm=mul_imm))
    elif epi.multiplier == "row":
        passes.append(AluPass(AluOp.MUL, "mult"))
    if epi.shift:
        passes.append(AluPass(AluOp.RSHR, imm=epi.shift))
    if epi.residual:
        passes.append(AluPass(AluOp.ADD, "res"))
    passes.append(AluPass(AluOp.CLIP, imm=clip_imm(*epi.bounds)))
    return tuple(passes)


def cycles_per_element(epi: EpilogueSpec, timing: Timing, mul_imm: int = 1) -> int:
    """Compute-stage cycles the accumulator reset and the ALU passes take per accumulator element: one per
    pass with an immediate, ``alu_ii`` per pass reading a second operand from the accumulator buffer."""
    return 1 + sum(1 if p.imm is not None else timing.alu_ii for p in alu_passes(epi, mul_imm))
