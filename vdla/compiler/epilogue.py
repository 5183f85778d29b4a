"""The fused epilogue: accumulator init, ALU passes and the requantizing OUT mirror.

Only the ALU passes cost compute-stage cycles (:func:`cycles_per_element`): one per accumulator element
for a pass with an immediate, ``alu_ii`` for a pass reading a second accumulator operand.

* init: the first GEMM of each tile carries ``init``, so every accumulator starts from its bias row (the
  EPI ``bias_base`` plus the output-channel loop index) or from zero in the cycle of its first
  multiply-accumulate. Integer addition wraps modulo 2^32, so adding the bias first gives the same
  int32 as adding it last.
* passes, only those the layer needs, after the last GEMM::

      [RSHR pre_shift ->] MUL multiplier                                  (EPI req: the OUT mirror requantizes)
      [RSHR pre_shift ->] MUL multiplier -> RSHR shift -> ADD residual -> CLIP   (otherwise: truncates)

  The optional pre-shift rounds (acc + bias) right before the multiply, so that a larger (more precise)
  multiplier keeps the product within 32 bits.

  With EPI ``req`` every accumulator write also writes its OUT row as the rounding right shift clamped
  to [-128, 127], or [0, 127] with ReLU, so the usual requantization costs no pass at all; other bounds
  and residual adds use the ALU. Per-channel constants (bias, multipliers) are rows kept in the
  accumulator buffer.
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


@dataclass(frozen=True)
class OutMode:
    """How accumulator writes fill the OUT mirror that STOREs read: requantized (``req``) or truncated."""

    req: bool = False
    relu: bool = False
    shift: int = 0


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


def out_mode(epi: EpilogueSpec) -> OutMode:
    """Requantize in the OUT mirror when the final clamp is int8's, or ReLU's [0, 127], and no residual is
    added after the shift."""
    relu = {(-128, 127): False, (0, 127): True}.get(tuple(epi.bounds))
    if relu is None or epi.residual:
        return OutMode()
    return OutMode(req=True, relu=relu, shift=epi.shift)


def alu_passes(epi: EpilogueSpec, mul_imm: int = 1) -> tuple[AluPass, ...]:
    """The ALU instructions after the last GEMM, in execution order."""
    passes = []
    if epi.pre_shift:
        passes.append(AluPass(AluOp.RSHR, imm=epi.pre_shift))
    if epi.multiplier == "imm":
        passes.append(AluPass(AluOp.MUL, imm=mul_imm))
    elif epi.multiplier == "row":
        passes.append(AluPass(AluOp.MUL, "mult"))
    if out_mode(epi).req:
        return tuple(passes)
    if epi.shift:
        passes.append(AluPass(AluOp.RSHR, imm=epi.shift))
    if epi.residual:
        passes.append(AluPass(AluOp.ADD, "res"))
    passes.append(AluPass(AluOp.CLIP, imm=clip_imm(*epi.bounds)))
    return tuple(passes)


def cycles_per_element(epi: EpilogueSpec, timing: Timing, mul_imm: int = 1) -> int:
    """Compute-stage cycles the epilogue's ALU passes take per accumulator element: one per pass with an
    immediate, ``alu_ii`` per pass reading a second accumulator operand (init and requantization are free)."""
    return sum(1 if p.imm is not None else timing.alu_ii for p in alu_passes(epi, mul_imm))
