"""One attention head in integers, as the accelerator computes it (issue 53, docs/transformers.md): the integer
parameters of ``softmax(Q K^T / sqrt(d) + mask) V`` on int8 ``Q``, ``K``, ``V`` derived from the calibrated
scales (:class:`IntAttention`); the integer reference itself is :func:`vdla.graph.oracle.attention_int`.

The method, for int8 ``Q``, ``K``, ``V`` (T, d) and a per-key mask:

1. the scores ``s = clamp(MUL(Q K^T + B, M_s) >> shift_s)`` to int8: ``1/sqrt(d)`` and the scales in the
   multiplier, ``B`` the mask's bias per key (0, or :attr:`IntAttention.mask_bias`, which takes any score to
   -128);
2. ``e(s) = round(EXP_ONE exp(score_scale (s - 127)))``, ``e(-128) = 0`` (no row maximum: the 15-bit exp
   table of the measurements), held as two int8 planes ``hi = RSHR(e, 8)`` in [0, 127] and ``lo = e - 256 hi``
   in [-128, 127] (:func:`exp_planes`): ``EXP_ONE = 2^15 - 129`` is the largest top value whose high plane
   fits int8;
3. ``U = 256 (hi V) + lo V`` and the row sum ``Z = 256 sum(hi) + sum(lo)``, exact in int32 for T up to
   :data:`MAX_TOKENS`;
4. ``Z = m 2^k`` (``k`` by a binary search of the leading one, :data:`K_STEPS`), ``r ~ 2^(2 FRAC) / m`` from the
   linear seed :data:`SEED` by :data:`ITERATIONS` Newton steps ``r (2 - m r)``;
5. ``v_scale / out_scale = a`` folded into ``r``: ``q = MUL(r, M_o) >> shift_o ~ r a 2^-H``; the output
   ``clamp(MUL(MUL(U, q) >> FRAC, 2^(30 - k)) >> (30 - H))`` to int8, ``U a / Z`` rounded once more: the shift by
   the lane's ``k`` as a MUL by a power of two (two per-query MULs, no shift by a lane's amount over the
   output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vdla.graph.types import UnsupportedError
from vdla.isa.arith import choose_requantization

EXP_BITS = 15  # the exp table's precision: two int8 planes
EXP_ONE = (1 << EXP_BITS) - 129  # e(127): RSHR(e, 8) <= 127, the high plane fits int8
MAX_TOKENS = 511  # T EXP_ONE 128 < 2^31: U and Z exact in int32
ACC_BOUND = 128 * 128  # |q k| of one int8 product: a score's accumulator is within d ACC_BOUND
FRAC = 29  # fractional bits of m in [1, 2) and r in (1/2, 1]: 2^(FRAC + 1) fits int32
SEED = (24 / 17, 8 / 17)  # r0 = 24/17 - 8/17 m: within 1/17 of 1/m on [1, 2)
ITERATIONS = 2  # relative error of r: 1/17 -> 3.5e-3 -> 1.2e-5
K_STEPS = (16, 8, 4, 2, 1)  # the binary search of k: Z < 2^31
P_BITS = 30  # the power of two 2^(P_BITS - k) that shifts the output by k (k <= 23: Z < 2^24)


@dataclass(frozen=True)
class IntAttention:
    """The integer parameters of one attention head of width ``d`` (module docstring). Frozen: the cache key of
    its program.

    ``score_multiplier``/``score_shift``: ``q_scale k_scale / (sqrt(d) score_scale)``; ``exp``: the 256 15-bit
    exp values by int8 score (index ``s + 128``); ``mask_shift``: a masked key's bias is ``-2^mask_shift``, which
    takes every accumulator to a score of -128; ``out_multiplier``/``out_shift``: ``a 2^-out_exponent``, ``a =
    v_scale / out_scale``, ``out_exponent = H`` the least keeping it below 1/2 (so that ``MUL(U, q) >> FRAC``, at
    most ``128 a 2^(k - H)``, fits int32; it has ``k - H`` fractional bits of the output step).
    Invariant (checked by :meth:`of`): every intermediate fits int32 for T up to :data:`MAX_TOKENS`."""

    d: int
    score_multiplier: int
    score_shift: int
    exp: tuple[int, ...]
    mask_shift: int
    out_multiplier: int
    out_shift: int
    out_exponent: int

    @classmethod
    def of(
        cls, d: int, q_scale: float, k_scale: float, v_scale: float, score_scale: float, out_scale: float
    ) -> IntAttention:
        """The parameters of a head of width ``d`` on int8 ``Q``, ``K``, ``V`` at their scales, the scores
        requantized to int8 at ``score_scale`` and the output at ``out_scale``; raises :class:`UnsupportedError`
        naming the limit where the exp table would underflow (``score_scale * 255 > ln(2^15)``) or a scale does
        not fit."""
        if d < 1:
            raise UnsupportedError("attention", f"a head of {d} channels")
        span, most = score_scale * 255, EXP_BITS * math.log(2)
        if not span <= most:
            raise UnsupportedError(
                "attention", f"scores at scale {score_scale:.4g} span {span:.4g} nats: the 15-bit exp table keeps "
                f"at most ln(2^15) = {most:.4g} (a score scale up to {most / 255:.4g})"
            )  # fmt: skip
        real = q_scale * k_scale / (math.sqrt(d) * score_scale)
        if d * ACC_BOUND * real >= 1 << 30:
            raise UnsupportedError("attention", f"a score multiplier of {real:.4g} overflows int32 on {d} channels")
        m_s, sh_s = choose_requantization(real, "attention scores")
        a = v_scale / out_scale
        h = max(0, math.floor(math.log2(a)) + 2)  # a 2^-h in [1/4, 1/2)
        if h > P_BITS:
            raise UnsupportedError("attention", f"an output ratio v_scale / out_scale of {a:.4g} beyond 2^{P_BITS - 1}")
        m_o, sh_o = choose_requantization(a / (1 << h), "attention output")
        bias = d * ACC_BOUND + math.ceil(256 / real)  # every accumulator minus it scores below -128
        mask = math.ceil(math.log2(bias))
        return cls(d, int(m_s[0]), sh_s, exp_table(score_scale), mask, int(m_o[0]), sh_o, h)

    @property
    def mask_bias(self) -> int:
        """The accumulator bias of a masked key."""
        return -(1 << self.mask_shift)


def exp_table(score_scale: float) -> tuple[int, ...]:
    """``e(s) = round(EXP_ONE exp(score_scale (s - 127)))`` for the int8 scores ``s`` (index ``s + 128``), 0 for
    ``s = -128`` (a masked or clipped score)."""
    s = np.arange(-128, 128)
    e = np.rint(EXP_ONE * np.exp(score_scale * (s - 127)))
    e[0] = 0
    return tuple(int(v) for v in e)


def exp_planes(e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """15-bit ``e`` (at most :data:`EXP_ONE`) as two int8 planes ``(hi, lo)``, ``e = 256 hi + lo``: ``hi = RSHR(e,
    8)`` in [0, 127], ``lo`` in [-128, 127]."""
    e = np.asarray(e, np.int64)
    hi = (e + 128) >> 8
    return hi.astype(np.int8), (e - 256 * hi).astype(np.int8)


def key_bias(p: IntAttention, keep: np.ndarray | None, tokens: int) -> np.ndarray:
    """The per-key accumulator bias of ``tokens`` keys: 0 where ``keep`` (default: every key) is true, else
    :attr:`IntAttention.mask_bias`."""
    k = np.ones(tokens, bool) if keep is None else np.asarray(keep).astype(bool).ravel()
    if k.shape != (tokens,):
        raise UnsupportedError("attention", f"a key mask of {k.size} values for {tokens} keys")
    return np.where(k, 0, p.mask_bias).astype(np.int64)
