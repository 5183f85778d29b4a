"""LayerNorm in integers, as the accelerator's ALU computes it (issue 53, docs/transformers.md): the integer
parameters of one ``layer_norm`` over the last axis of an int8 tensor, derived from its float attributes and
the calibrated scales (:class:`IntLayerNorm`); the integer reference itself is
:func:`vdla.graph.oracle.layer_norm_int`.

The method (chosen by measurement, ``benchmarks/transformer_ops.py``), for a row ``q`` of ``n`` int8 values:

1. the row sums ``S1 = sum q`` (a GEMM against a ones block) and ``S2 = sum q^2`` (the squares by MUL, added up by
   ADD and the ALU's lane sum LSUM), exact in int32;
2. ``d = n q - S1`` (``n`` times the deviation, exact) and ``V = max(4^j (n S2 - S1^2) + E, 1)``: ``4^j n^2``
   times the variance plus ``E``, the epsilon in these units, ``j`` the largest that keeps it below 2^31 (0 for
   rows of 182 to :data:`MAX_ROW`);
3. ``V = m 4^k``: ``k`` by a binary search of the leading one with SHR by immediates and by a lane's own amount
   (:data:`K_STEPS`), ``m`` in [1, 4) with :data:`FRAC` fractional bits by SHR by the lane's ``2k - FRAC``;
4. ``y ~ 1/sqrt(m)``: the seed :data:`SEED` then :data:`ITERATIONS` Newton steps ``y (3 - m y^2) / 2``, each
   product MUL with its rounding shift;
5. ``z = MUL(d, RSHR(y, k - j)) >> Z_SHIFT``, the normalized value with :data:`Z_FRAC` fractional bits (the row's
   ``y`` scaled by ``2^(j - k)`` once, per row, so that ``z`` is one product an element);
6. ``REQ(MUL(z, M_c) >> gamma_shift + B_c, OUT_FRAC)``: gamma as per-channel multipliers ``M_c`` and beta as
   per-channel biases ``B_c`` at ``OUT_FRAC`` fractional bits of the output step, requantized to int8.

A constant row (variance 0) has ``d = 0``: its output is ``beta`` requantized, whatever ``E``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vdla.graph.graph import Node
from vdla.graph.opnames import LAYER_NORM_INT
from vdla.graph.types import UnsupportedError
from vdla.isa.arith import MUL_MAX_SHIFT

MAX_ROW = 362  # n^2 2^14 < 2^31: n S2 - S1^2 fits int32
FRAC = 29  # fractional bits of m and y: m < 4 and 3 (Newton's constant) fit int32
SEED = (45, 6)  # y0 = 45 / 2^6 = 0.703125, within 41% of 1/sqrt(m) for m in [1, 4)
ITERATIONS = 4  # relative error of y: 0.41 -> 0.28 -> 0.11 -> 0.017 -> 4e-4 at worst
K_STEPS = (8, 4, 2, 1)  # the binary search of k: V < 2^31 = 4^15.5, so k <= 15
Z_SHIFT = 18  # MUL(d, RSHR(y, k - j)) >> 18 = z 2^Z_FRAC; the product < 2^(17 + FRAC) fits MUL's 64 bits
Z_FRAC = FRAC - Z_SHIFT  # fractional bits of the normalized value z
OUT_FRAC = 8  # fractional bits of the output step before the final REQ
INT32_MAX = (1 << 31) - 1
# the arithmetic's error against the float LayerNorm of the int8 input, in output steps before the rounding (beside
# the rounding's 0.5): the relative error of 1/sqrt (Newton's 4e-4 at most, and RSHR(y, k - j)'s rounding: y >= 2^28,
# k - j <= 15, so 2^-14) on the value, and the fixed point's 0.02
RSQRT_ERROR, FIXED_ERROR = 4e-4 + 2.0**-14, 0.02
Z_MAX = math.sqrt(MAX_ROW)  # |z| <= sqrt(n - 1): a normalized value's bound


@dataclass(frozen=True)
class IntLayerNorm:
    """The integer parameters of one LayerNorm over rows of ``n`` int8 values (module docstring). Frozen: the
    cache key of its program.

    ``prescale``/``epsilon``: ``V`` is held times ``4^prescale`` (the largest that fits int32, so that the
    epsilon keeps its precision on short rows), ``E = round(4^prescale n^2 epsilon / in_scale^2)``;
    ``multipliers``/``gamma_shift``: ``M_c`` with ``M_c 2^-gamma_shift ~ gamma_c / out_scale 2^(OUT_FRAC -
    Z_FRAC)``; ``biases``: ``B_c ~ beta_c / out_scale 2^OUT_FRAC``. Invariant (checked by :meth:`of`): every
    intermediate fits int32."""

    n: int
    prescale: int
    epsilon: int
    multipliers: tuple[int, ...]
    gamma_shift: int
    biases: tuple[int, ...]

    @classmethod
    def of(
        cls, n: int, in_scale: float, out_scale: float, gamma: np.ndarray, beta: np.ndarray, epsilon: float
    ) -> IntLayerNorm:
        """The parameters of a LayerNorm of ``n`` features with float ``gamma``/``beta`` (``n`` values each),
        its int8 input at ``in_scale`` and output at ``out_scale``; raises :class:`UnsupportedError` naming
        the limit a row, the epsilon or gamma and beta exceed."""
        if not 1 <= n <= MAX_ROW:
            raise UnsupportedError("layer_norm", f"a row of {n} values: the integer statistics take 1 to {MAX_ROW}")
        j, e = prescale(n, float(np.float32(epsilon)) / (in_scale * in_scale))
        g = _row(gamma, n, "gamma") / out_scale
        b = _row(beta, n, "beta") / out_scale * (1 << OUT_FRAC)
        m, shift = gamma_multipliers(g * 2.0 ** (OUT_FRAC - Z_FRAC))
        if Z_MAX * np.abs(g).max() * (1 << OUT_FRAC) + np.abs(b).max() + 1 >= INT32_MAX:
            raise UnsupportedError(
                "layer_norm", f"gamma / out_scale up to {np.abs(g).max():.4g} and beta / out_scale up to "
                f"{np.abs(b).max() / (1 << OUT_FRAC):.4g} overflow int32 at {OUT_FRAC} fractional bits"
            )  # fmt: skip
        return cls(n, j, e, tuple(int(v) for v in m), shift, tuple(int(v) for v in np.rint(b)))

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The multipliers and the biases as int32 rows (a ``layer_norm_int`` node's constant inputs)."""
        return np.asarray(self.multipliers, np.int32), np.asarray(self.biases, np.int32)

    @classmethod
    def of_node(cls, node: Node, params: Mapping[str, np.ndarray]) -> IntLayerNorm:
        """The parameters a ``layer_norm_int`` node carries (:func:`layer_norm_node`): its attributes and its
        multiplier and bias rows (constants)."""
        a, m, b = node.attrs, *(np.asarray(params[v]).ravel() for v in node.inputs[1:3])
        return cls(m.size, int(a["prescale"]), int(a["epsilon"]), tuple(int(v) for v in m), int(a["gamma_shift"]),
                   tuple(int(v) for v in b))  # fmt: skip


def layer_norm_node(x: str, p: IntLayerNorm, out: str, rows: tuple[str, str], out_scale: float) -> Node:
    """The ``layer_norm_int`` node of ``p`` over the last axis of int8 ``x`` into ``out`` (int8 at ``out_scale``,
    zero point 0): its inputs ``x`` and the int32 multiplier and bias rows, named ``rows`` (the caller adds them
    as constants, :meth:`IntLayerNorm.rows`), its scalars as attributes."""
    attrs = {"prescale": p.prescale, "epsilon": p.epsilon, "gamma_shift": p.gamma_shift, "quant": (out_scale, 0)}
    return Node(LAYER_NORM_INT, (x, *rows), out, attrs)


def rounding_band(steps: np.ndarray) -> np.ndarray:
    """How far from a rounding tie (in output steps) the float LayerNorm's value ``steps`` (its output over the
    output scale) may lie where the integer form rounds it the other way: the arithmetic's error bound."""
    return RSQRT_ERROR * np.abs(steps) + FIXED_ERROR


def prescale(n: int, eps: float) -> tuple[int, int]:
    """``(j, E)``: the largest ``j`` in [0, 15] with ``4^j n^2 var + E`` within int32 for every int8 row (``var``
    at most ``(255 / 2)^2``), ``E = round(4^j n^2 eps)`` (``eps`` the epsilon in the input's units squared);
    raises where even ``j = 0`` overflows."""
    for j in range(15, -1, -1):
        e = round(4.0**j * n * n * eps)
        if (n * n * 255 * 255 << 2 * j) // 4 + e <= INT32_MAX:
            return j, int(e)
    raise UnsupportedError(
        "layer_norm", f"epsilon {eps:.4g} in the input's units squared: n^2 ((255/2)^2 + epsilon) must fit int32 "
        f"(n = {n}); a larger input scale or a shorter row"
    )  # fmt: skip


def _row(v: np.ndarray, n: int, what: str) -> np.ndarray:
    """``v`` as float64 of ``n`` values (one broadcast to all); raises naming ``what``."""
    a = np.asarray(v, np.float64).ravel()
    if a.size == 1:
        a = np.full(n, a[0])
    if a.size != n or not np.all(np.isfinite(a)):
        raise UnsupportedError("layer_norm", f"{what} must be {n} finite values, got {v!r:.60}")
    return a


def gamma_multipliers(real: np.ndarray) -> tuple[np.ndarray, int]:
    """Signed int32 multipliers ``M`` and the largest shift in [0, MUL_MAX_SHIFT] with ``M 2^-shift`` closest
    to ``real`` and every ``|M| < 2^31`` (a zero gamma is multiplier 0)."""
    top = float(np.abs(real).max())
    if top == 0:
        return np.zeros(real.shape, np.int64), 0
    shift = min(MUL_MAX_SHIFT, max(0, math.floor(math.log2(INT32_MAX / top))))
    while shift > 0 and np.abs(np.rint(real * 2.0**shift)).max() > INT32_MAX:
        shift -= 1
    m = np.rint(real * 2.0**shift)
    if np.abs(m).max() > INT32_MAX:
        raise UnsupportedError("layer_norm", f"a gamma multiplier of {top:.4g} does not fit int32")
    return m.astype(np.int64), shift
