"""The fused epilogue as ALU passes over the accumulator tile.

Every pass is one pipelined ALU instruction over the whole tile, so the epilogue costs a fixed number
of compute-stage cycles per accumulator element (:func:`cycles_per_element`): one per pass with an
immediate or with reset (the destination reads as zero: one accumulator read), ``alu_ii`` per pass
reading both the destination and a second accumulator operand. The passes are, in order, only those
the layer needs:

    init  ->  GEMMs  ->  MUL multiplier  ->  REQ shift (+ReLU)                   (no residual, int8/ReLU bounds)
                     ->  MUL multiplier  ->  RSHR shift -> ADD residual -> CLIP  (otherwise)

``init`` copies the bias rows into the accumulators (ALU ADD with reset: ACC = 0 + bias) before the
first GEMM, or resets them (GEMM reset) without a bias; integer addition wraps modulo 2^32, so adding
the bias first gives the same int32 as adding it last. REQ is the rounding shift and the clip to
[-128, 127] or (ReLU) [0, 127] in one pass; other bounds use RSHR + CLIP, with ReLU folded into the
CLIP bounds. Per-channel constants (bias, multipliers) are read from rows kept in the accumulator
buffer.
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
    reset: bool = False  # the destination reads as zero: ACC = op(0, operand)


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


def req_imm(shift: int, bounds: tuple[int, int]) -> int | None:
    """The REQ immediate (shift in bits [4:0], ReLU in bit 5) for these clip bounds, None if REQ cannot
    produce them (REQ clamps to [-128, 127], or [0, 127] with ReLU)."""
    relu = {(-128, 127): 0, (0, 127): 0x20}.get(tuple(bounds))
    return None if relu is None else shift | relu


def alu_passes(epi: EpilogueSpec, mul_imm: int = 1) -> tuple[AluPass, ...]:
    """The ALU instructions of the epilogue, in execution order; a leading pass with ``reset`` is the
    accumulator init before the GEMMs (otherwise a GEMM reset initialises them)."""
    passes = []
    if epi.bias:
        passes.append(AluPass(AluOp.ADD, "bias", reset=True))
    if epi.multiplier == "imm":
        passes.append(AluPass(AluOp.MUL, imm=mul_imm))
    elif epi.multiplier == "row":
        passes.append(AluPass(AluOp.MUL, "mult"))
    req = None if epi.residual else req_imm(epi.shift, epi.bounds)
    if req is not None:
        passes.append(AluPass(AluOp.REQ, imm=req))
        return tuple(passes)
    if epi.shift:
        passes.append(AluPass(AluOp.RSHR, imm=epi.shift))
    if epi.residual:
        passes.append(AluPass(AluOp.ADD, "res"))
    passes.append(AluPass(AluOp.CLIP, imm=clip_imm(*epi.bounds)))
    return tuple(passes)


def cycles_per_element(epi: EpilogueSpec, timing: Timing, mul_imm: int = 1) -> int:
    """Compute-stage cycles the accumulator init and the ALU passes take per accumulator element: one for
    a GEMM reset (without an init pass), one per pass with an immediate or a reset, ``alu_ii`` per pass
    reading the destination and a second operand from the accumulator buffer."""
    passes = alu_passes(epi, mul_imm)
    gemm_reset = 0 if passes and passes[0].reset else 1
    return gemm_reset + sum(1 if p.imm is not None or p.reset else timing.alu_ii for p in passes)
