"""The fused epilogue: accumulator init, ALU passes, the residual GEMM and the requantizing OUT mirror.

Only the passes cost compute-stage cycles (:func:`cycles_per_element`, by :func:`vdla.cycles.alu_ii`): one per
accumulator element for an ALU pass with an immediate, for one reading a per-channel row (held across the
tile's pixels, :func:`vdla.cycles.holds_src`; a MUL then pipelined, :mod:`vdla.isa.pipe`) and for the residual
GEMM; ``alu_ii`` for an ALU pass reading an operand that changes with every element (the residual in the
accumulators).

* init: the first GEMM of each tile carries ``init``, so every accumulator starts from its bias row (the
  EPI ``bias_base`` plus the output-channel loop index) or from zero in the cycle of its first
  multiply-accumulate. Integer addition wraps modulo 2^32, so adding the bias first gives the same
  int32 as adding it last.
* passes, only those the layer needs, after the last GEMM::

      (none)                                        (EPI req mul: the OUT mirror multiplies and clamps)
      MUL row multiplier, shift                     (EPI req: the OUT mirror clamps)
      MUL row multiplier, shift -> GEMM residual    (EPI req, shift 0: the OUT mirror clamps the sum)
      MUL row multiplier, shift -> ADD residual     (the same, the residual tile in the accumulators)
      MUL row multiplier, shift -> CLIP -> MUL row m_y, shift_y [-> GEMM copy of the residual]
          -> MUL residual by row m_k, shift_k -> ADD residual [-> RSHR frac -> CLIP]
                                                    (a rescaled residual; EPI req: shift frac)
      [MUL imm multiplier] [-> RSHR shift] [-> GEMM or ADD residual] [-> CLIP, for bounds the mirror cannot clamp]

  A row multiplier's MUL forms the exact 64-bit product and rounds it right by the layer's shift in the
  same pass, so a requantization keeps a 31-bit multiplier whatever the accumulator's size; an
  immediate multiplier (16 bits, no shift) keeps the product's low 32 bits.

  An int8 residual is added in one of two forms, which the schedule picks (``Schedule.res_inp``):

  - *GEMM residual* (``res_inp``): the load stage LOADs the residual tile into the thread's INP share,
    overlapped with compute like the inputs, and a GEMM against the identity weights
    (:mod:`vdla.compiler.identity`, one WGT element kept at the top of the WGT buffer) adds it to the
    accumulators after the requantizing MUL or RSHR: 1 compute cycle per element. A rescaled residual comes
    through INP the same way and an ``init`` GEMM against the identity block copies it into the accumulators
    (under an EPI of the layer's mode without the bias row), where the ALU multiplies and adds it.
  - *ALU residual*: a compute-stage LOAD ACC_8BIT (or ACC, for int32) brings the tile into the accumulator
    buffer next to the output tile and an ALU ADD reads it as a second operand: about 2 + ``alu_ii``
    compute cycles per element, and the LOAD waits for the DRAM read channel. It is the only form of an
    int32 residual and of configs with ``block_in != block_out``, and the fallback of tiles whose INP share
    cannot hold the residual.

  Integer addition wraps modulo 2^32 in the GEMM as in the ALU ADD, so both forms give the same int32 sum.

  With EPI ``req`` every accumulator write also writes its OUT row as the rounding right shift clamped
  to [-128, 127], or [0, 127] with ReLU, so the usual requantization costs no pass at all; other bounds
  use the ALU. With EPI ``mul`` (configs with ``out_multiplier``) the mirror first multiplies a GEMM's writes
  by the multiplier rows and rounds by the layer's shift, so a per-channel requantization costs no pass
  either, only a slot per channel block of each GEMM (:func:`vdla.cycles.out_mul_cycles`): the layer's
  last GEMM must then write the final sums (no residual, pool or ALU pair copy after it, :func:`out_mul_fits`;
  GEMMs reading OUT may follow: they read the finished int8 results).
  Per-channel constants (bias, multipliers) are rows kept in the accumulator buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from vdla.compiler.spec import CompileError, EpilogueSpec, mirror_relu
from vdla.config import Timing
from vdla.graph.epilogue import Epilogue
from vdla.isa import AluOp, clip_imm
from vdla.isa.arith import MAX_SHIFT


@dataclass(frozen=True)
class AluPass:
    """One ALU instruction of the epilogue: ``operand`` names an accumulator region, else ``imm`` is used;
    ``shift`` rounds a MUL's product (with an operand region only)."""

    op: AluOp
    operand: str | None = None
    imm: int | None = None
    shift: int = 0
    dst: str = "acc"  # "res": the pass updates the residual tile
    gemm: bool = False  # a GEMM of the INP residual tile against the identity weights: adding it to the
    # accumulators, or (dst "res") copying it into the residual tile's accumulators (init, from zero)

    @property
    def holds_row(self) -> bool:
        """Whether its second operand is the same for every pixel of a channel block (a per-channel row, or none):
        its kernel keeps the channel-block loop outer, so the ALU reads the row once per block and holds it
        (:func:`vdla.cycles.holds_src`). The residual tile changes with every element."""
        return self.operand != "res"

    @property
    def pipelined(self) -> bool:
        """Whether its iterations issue one a cycle: a MUL by a per-channel row (:mod:`vdla.isa.pipe`; the
        command builder sets ``pipe`` on its kernel, one micro-op over the channel block's pixels)."""
        return self.op == AluOp.MUL and self.imm is None and self.holds_row


@dataclass(frozen=True)
class OutMode:
    """How accumulator writes fill the OUT mirror that STOREs read: requantized (``req``) or truncated."""

    req: bool = False
    relu: bool = False
    shift: int = 0
    lut: bool = False  # then looked up in the layer's activation table (the last write of each element counts)
    mul: int | None = None  # the shift of the per-channel multiplier the mirror applies first (EPI mul), if it does


def power_of_two_shift(multiplier, shift: int) -> tuple[int | np.ndarray, int]:
    """``(1, shift - k)`` for one scalar multiplier ``2^k`` with ``k <= shift`` and ``shift - k`` within the EPI/RSHR
    range: ``mul_shift(x, 2^k, shift)`` is exactly ``rounding_shift(x, shift - k)``, which costs no ALU pass.
    Anything else is returned as it is."""
    m = np.asarray(multiplier)
    if m.dtype.kind in "iu" and m.ndim == 0 and int(m) > 0:  # per-channel arrays keep their shape checks
        k = int(m).bit_length() - 1
        if int(m) == 1 << k and k <= shift and shift - k <= MAX_SHIFT:
            return 1, shift - k
    return multiplier, shift


def normalize(ep: Epilogue) -> Epilogue:
    """``ep`` as the compiler runs it: a scalar power-of-two multiplier without a rescaled residual folded into
    its shift (:func:`power_of_two_shift`: a rounding shift costs no ALU pass)."""
    if ep.rescale is not None:
        return ep
    multiplier, shift = power_of_two_shift(ep.multiplier, ep.shift)
    return replace(ep, multiplier=multiplier, shift=shift)


def out_mul_fits(epi: EpilogueSpec) -> bool:
    """Whether the OUT mirror can apply the layer's per-channel multiplier itself (EPI ``mul``, on configs with
    ``out_multiplier``), so that the epilogue has no ALU pass: a multiplier row followed by nothing but the
    mirror's clamp and table (no residual, pool or other bounds). The mirror multiplies a GEMM's writes only, so
    the layer's last GEMM must write its final results (the caller checks the rest of its stream)."""
    return epi.multiplier == "row" and not epi.residual and not epi.rescale and not epi.pool and out_mode(epi).req


def out_mode(epi: EpilogueSpec, out_mul: bool = False) -> OutMode:
    """Requantize in the OUT mirror when the final clamp is int8's, or ReLU's [0, 127]: with the layer's shift
    when nothing follows it, with shift 0 when the ALU passes shift and add a residual (the mirror then only
    clamps), with ``frac`` after a rescaled residual. With ``out_mul`` (where :func:`out_mul_fits`) the mirror
    also multiplies by the multiplier rows, rounding by the layer's shift."""
    relu = mirror_relu(epi.bounds)
    lut = epi.table
    if out_mul and out_mul_fits(epi):
        return OutMode(req=True, relu=relu, lut=lut, mul=epi.shift)
    if relu is None:
        return OutMode(lut=lut)
    if epi.rescale:
        return OutMode(req=True, relu=relu, shift=epi.rescale[4], lut=lut)
    if epi.residual:  # the passes shift before the add; the mirror clamps the sum the ADD or residual GEMM writes
        return OutMode(req=True, relu=relu, lut=lut)
    return OutMode(req=True, relu=relu, shift=0 if epi.multiplier == "row" else epi.shift, lut=lut)


def residual_gemm_fits(epi: EpilogueSpec) -> bool:
    """Whether the layer's residual can be added by a GEMM against the identity weights: an int8 residual added
    as it is (not the rescaled form, which multiplies the residual first). The config must also satisfy
    :func:`vdla.compiler.identity.identity_fits`."""
    return epi.residual == "int8" and not epi.rescale


def residual_inp_fits(epi: EpilogueSpec) -> bool:
    """Whether the layer's int8 residual can come through INP on the load stage (``Schedule.res_inp``): a GEMM
    against the identity weights adds it as it is (:func:`residual_gemm_fits`), or copies a rescaled one into the
    accumulators for the ALU to multiply and add (in place of a compute-stage LOAD ACC_8BIT)."""
    return epi.residual == "int8"


def alu_passes(
    epi: EpilogueSpec, mul_imm: int = 1, residual_gemm: bool = False, out_mul: bool = False
) -> tuple[AluPass, ...]:
    """The passes after the last GEMM, in execution order; with ``residual_gemm`` the residual add is a GEMM
    (``AluPass.gemm``) instead of an ALU ADD (only where :func:`residual_gemm_fits`); with ``out_mul`` none where
    the OUT mirror multiplies (:func:`out_mul_fits`)."""
    if residual_gemm and not residual_inp_fits(epi):
        raise CompileError(f"a {epi.residual} residual cannot come through INP")
    if out_mul and out_mul_fits(epi):
        return ()
    if epi.rescale:
        return _rescale_passes(epi, residual_gemm)
    passes = []
    if epi.multiplier == "imm":
        passes.append(AluPass(AluOp.MUL, imm=mul_imm))
    elif epi.multiplier == "row":
        passes.append(AluPass(AluOp.MUL, "mult", shift=epi.shift))
    req = out_mode(epi).req
    if req and not epi.residual:
        return tuple(passes)
    if epi.shift and epi.multiplier != "row":
        passes.append(AluPass(AluOp.RSHR, imm=epi.shift))
    if epi.residual:
        passes.append(AluPass(AluOp.ADD, "res", gemm=residual_gemm))
    if not req:
        passes.append(AluPass(AluOp.CLIP, imm=clip_imm(*epi.bounds)))
    return tuple(passes)


def _rescale_passes(epi: EpilogueSpec, residual_gemm: bool = False) -> tuple[AluPass, ...]:
    """The rescaled residual's passes; ``residual_gemm``: the residual tile copied from INP by a GEMM first."""
    lo, hi, shift_y, shift_k, frac = epi.rescale
    passes = [
        AluPass(AluOp.MUL, "mult", shift=epi.shift),
        AluPass(AluOp.CLIP, imm=clip_imm(lo, hi)),
        AluPass(AluOp.MUL, "mult_y", shift=shift_y),
        *[AluPass(AluOp.ADD, "res", dst="res", gemm=True)] * residual_gemm,
        AluPass(AluOp.MUL, "mult_k", shift=shift_k, dst="res"),
        AluPass(AluOp.ADD, "res"),
    ]
    if not out_mode(epi).req:
        passes += [AluPass(AluOp.RSHR, imm=frac)] * bool(frac) + [AluPass(AluOp.CLIP, imm=clip_imm(*epi.bounds))]
    return tuple(passes)


def pool_commutes(multiplier, shift: int) -> str | None:
    """Why a max pool may not be taken before the requantization by ``multiplier`` (scalar or per channel) and
    ``shift``, or None when it may: the MUL must be non-decreasing and never wrap, ``0 <= m <= 2^shift`` (the
    rounded product then lies between 0 and the accumulator); shifts and clamps always are."""
    m = np.asarray(multiplier, np.int64)
    if m.size and m.min() < 0:
        return f"a negative multiplier ({int(m.min())}) reverses the order of the values"
    if m.size and m.max() > 1 << shift:
        return f"a multiplier of {int(m.max())} with shift {shift} may wrap its int32 product (at most 2^{shift} fits)"
    return None


def cycles_per_element(
    epi: EpilogueSpec,
    timing: Timing,
    mul_imm: int = 1,
    residual_gemm: bool = False,
    out_mul: bool = False,
    passes: int = 1,
) -> int:
    """Compute-stage cycles the epilogue's passes take per accumulator element, by the cycle model's rule
    (:func:`vdla.cycles.alu_ii`): one per ALU pass with an immediate or a per-channel row (held across the
    pixels; its one read per channel block is left out) and for the residual GEMM, ``alu_ii`` per ALU pass
    reading the residual tile (init and requantization are free; the ALU residual's LOAD is not counted);
    ``passes``: :attr:`vdla.config.HwConfig.alu_passes` (a half-width ALU)."""
    from vdla.cycles import alu_ii

    return sum(
        1
        if p.gemm
        else alu_ii(
            timing,
            p.op,
            use_imm=p.imm is not None,
            same_src=p.holds_row,
            pipe=p.pipelined,
            passes=passes,
        )
        for p in alu_passes(epi, mul_imm, residual_gemm, out_mul)
    )
