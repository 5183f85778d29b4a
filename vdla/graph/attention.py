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
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vdla.graph.ew import operand_value
from vdla.graph.graph import Node
from vdla.graph.opnames import ADD, ATTENTION_INT, DEQUANTIZE, DIV, MATMUL, MUL, QUANTIZE, SOFTMAX
from vdla.graph.types import TensorType, UnsupportedError
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


# ---------------------------------------------------------------------------------------------------------
# The attention of a QDQ model (onnxruntime's quantizer): its probabilities quantized to int8 before ``P V``

QDQ_EXP_BITS = 22  # e(0) = 2^22: Z of up to MAX_TOKENS keys fits int32; three int8 planes
QDQ_ITERATIONS = 3  # Newton steps of 1 / m: the relative error of r at the fixed point's 2^-FRAC
QDQ_PLANES = 3  # e = 2^16 p0 + 2^8 p1 + p2: p0 in [0, 64], p1 and p2 in [-128, 127]
QDQ_FIXED_SPAN = 6 * math.log(2)  # a softmax input spanning at most this (nats): e(x - 127) keeps 16 bits or more


@dataclass(frozen=True)
class QdqAttention:
    """The integer parameters of one attention head of a QDQ model, where the scores pass a chain of
    quantize/dequantize steps (the product's own quantization, the scale, the additive mask, each requantized)
    and the softmax's probabilities are quantized to int8 at ``p_scale`` before ``P V``. Frozen: the cache key of
    its program.

    The method: ``s = clamp(MUL(Q K^T, M_s) >> shift_s)`` (int8, the product quantized as the model's dense
    layers are); ``x = kept[s]`` (``masked[s]`` for a masked key): the int8 softmax input, the chain of float
    steps evaluated on every int8 ``s`` as the reference evaluates it; ``d = x - max(x)`` over the row (``fixed``:
    ``d = x - 127``, where the input spans at most :data:`QDQ_FIXED_SPAN`), in [-255, 0]; ``e = exp[d + 255] =
    round(2^22 exp(softmax_scale d))``; ``Z`` the row sum; ``P = clamp(MUL(MUL(e,
    q) >> FRAC, 2^(30 - k)) >> (30 - H))`` with ``Z = m 2^k`` and ``q ~ 2^FRAC a 2^-H / m``, ``a = 1 / p_scale``
    (the division of :class:`IntAttention`, with :data:`QDQ_ITERATIONS` Newton steps): ``e a / Z`` rounded half
    up; the output ``clamp(MUL(P V, M_o) >> shift_o)``.
    Invariant (checked by :meth:`of`): every intermediate fits int32 for T up to :data:`MAX_TOKENS`."""

    d: int
    score_multiplier: int
    score_shift: int
    kept: tuple[int, ...]
    masked: tuple[int, ...] | None
    exp: tuple[int, ...]
    prob_multiplier: int
    prob_shift: int
    prob_exponent: int
    out_multiplier: int
    out_shift: int
    fixed: bool

    @classmethod
    def of(
        cls,
        d: int,
        score_scale: float,
        kept: np.ndarray,
        masked: np.ndarray | None,
        softmax_scale: float,
        p_scale: float,
        pv_scale: float,
    ) -> QdqAttention:
        """The parameters of a head of width ``d``: ``score_scale`` the product's real requantization
        (``q_scale k_scale / s_scale``), ``kept``/``masked`` the 256 int8 softmax inputs by int8 score (index ``s +
        128``), ``softmax_scale`` the softmax input's scale, ``p_scale`` the probabilities', ``pv_scale`` the
        output's real requantization (``p_scale v_scale / out_scale``); raises :class:`UnsupportedError` naming a
        scale that does not fit."""
        if d < 1:
            raise UnsupportedError("attention", f"a head of {d} channels")
        if not (softmax_scale > 0 and math.isfinite(softmax_scale)):
            raise UnsupportedError("attention", f"a softmax input scale of {softmax_scale}")
        if d * ACC_BOUND * score_scale >= 1 << 30:
            raise UnsupportedError("attention", f"a score scale of {score_scale:.4g} overflows int32 on {d} channels")
        m_s, sh_s = choose_requantization(score_scale, "attention scores")
        a = 1.0 / p_scale
        h = max(0, math.floor(math.log2(a)) + 2)
        if not 1 <= a < 1 << 16:
            raise UnsupportedError("attention", f"probabilities at scale {p_scale:.4g}: 1/scale beyond [1, 2^16)")
        m_p, sh_p = choose_requantization(a / (1 << h), "attention probabilities")
        if 128 * d * pv_scale >= 1 << 30:
            raise UnsupportedError("attention", f"an output scale of {pv_scale:.4g} overflows int32 on {d} channels")
        m_o, sh_o = choose_requantization(pv_scale, "attention output")
        tables = [tuple(int(v) for v in np.asarray(t, np.int64).ravel()) for t in (kept, masked) if t is not None]
        if any(len(t) != 256 or min(t) < -128 or max(t) > 127 for t in tables):
            raise UnsupportedError("attention", "softmax input tables of 256 int8 values")
        exp = qdq_exp_table(softmax_scale)
        fixed = 255 * softmax_scale <= QDQ_FIXED_SPAN
        return cls(d, int(m_s[0]), sh_s, tables[0], tables[1] if masked is not None else None, exp,
                   int(m_p[0]), sh_p, h, int(m_o[0]), sh_o, fixed)  # fmt: skip

    def attrs(self) -> dict:
        """The fields as an ``attention_int`` node's ``qdq`` attribute (:func:`attention_node`)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_attrs(cls, a: Mapping) -> QdqAttention:
        """The parameters an :meth:`attrs` dict holds (lists, from JSON, as tuples)."""
        return cls(**{k: tuple(v) if isinstance(v, list | tuple) else v for k, v in a.items()})


def qdq_exp_table(softmax_scale: float) -> tuple[int, ...]:
    """``round(2^22 exp(softmax_scale d))`` for ``d`` in [-255, 0] (index ``d + 255``)."""
    d = np.arange(-255, 1, dtype=np.float64)
    return tuple(int(v) for v in np.rint(np.exp(softmax_scale * d) * (1 << QDQ_EXP_BITS)))


def qdq_exp_ranges(exp: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The exp table as two tables indexed by int8 (index ``j + 128``) so that ``e(d) = near[clamp(d)] +
    far[clamp(d + 128)]`` (``clamp`` to [-128, 127]) for ``d`` in [-255, 0] and anything below: ``near[j] =
    e(j)`` for ``j`` in [-127, 0], ``far[j] = e(j - 128)`` for ``j`` in [-127, 0]; 0 elsewhere (``d <= -256``, a
    padded key's, is 0)."""
    e = np.asarray(exp, np.int64)
    near, far = np.zeros(256, np.int64), np.zeros(256, np.int64)
    j = np.arange(-127, 1)
    near[j + 128] = e[j + 255]
    far[j + 128] = e[j - 128 + 255]
    return near, far


def qdq_planes(table: np.ndarray) -> np.ndarray:
    """A 22-bit table as :data:`QDQ_PLANES` int8 planes (planes, 256): ``t = 2^16 p0 + 2^8 p1 + p2``, the lower two
    in [-128, 127] (each rounded to the nearest, the high plane in [0, 64])."""
    t = np.asarray(table, np.int64)
    lo = ((t + 128) & 255) - 128
    mid = ((((t - lo) >> 8) + 128) & 255) - 128
    hi = (t - lo - (mid << 8)) >> 16
    return np.stack([hi, mid, lo]).astype(np.int8)


def key_bias(p: IntAttention, keep: np.ndarray | None, tokens: int) -> np.ndarray:
    """The per-key accumulator bias of ``tokens`` keys: 0 where ``keep`` (default: every key) is true, else
    :attr:`IntAttention.mask_bias`."""
    k = np.ones(tokens, bool) if keep is None else np.asarray(keep).astype(bool).ravel()
    if k.shape != (tokens,):
        raise UnsupportedError("attention", f"a key mask of {k.size} values for {tokens} keys")
    return np.where(k, 0, p.mask_bias).astype(np.int64)


# ---------------------------------------------------------------------------------------------------------
# The attention block in a graph: ``softmax(Q K^T * scale [+ mask]) V`` over the per-head views of one value


@dataclass(frozen=True)
class Scores:
    """The float scores of an attention block, as read by its ``softmax`` over the last axis: ``scaled`` the value
    ``matmul(Q, K^T) * scale`` (a ``mul`` or ``div`` of the product by a constant scalar, or of ``Q`` before it,
    as the ONNX ``Attention`` import writes it), ``mask`` the additive mask added to it (one value per key,
    broadcast over the heads and queries; None: no mask), ``product`` the ``Q K^T`` matmul and ``q``, ``k`` the
    values it multiplies (``Q`` before its scaling)."""

    scaled: str
    mask: str | None
    scale: float
    product: Node
    q: str
    k: str


def softmax_scores(
    softmax: Node, producers: Mapping[str, Node], types: Mapping[str, TensorType], params: Mapping[str, np.ndarray]
) -> Scores | None:
    """The scores ``softmax`` reads where it is an attention block's (a softmax over the last axis of
    ``scale * matmul(Q, K^T)`` plus at most one per-key mask), following dequantize/quantize pairs at one scale
    between the product and the softmax; None where it is not."""
    x = types[softmax.inputs[0]]
    if softmax.op != SOFTMAX or int(softmax.attrs.get("axis", -1)) % max(len(x.shape), 1) != len(x.shape) - 1:
        return None
    value, mask = softmax.inputs[0], None
    node = producers.get(value)
    if node is not None and node.op == ADD and len(node.inputs) == 2:
        a, b = node.inputs
        keyed = [v for v in (a, b) if per_key(types[v].shape, x.shape)]
        if len(keyed) != 1 or types[keyed[0]].shape == x.shape:
            return None
        mask = keyed[0]
        value = b if mask == a else a
    node = _through_qdq(value, producers)
    factor = scalar_factor(node, params)
    product = producers.get(node.inputs[0]) if factor is not None else node
    if product is None or product.op != MATMUL or types[product.output].shape != x.shape:
        return None
    q, k = product.inputs
    on_q = scalar_factor(producers.get(q), params)
    if on_q is not None:
        q = producers[q].inputs[0]
    return Scores(value, mask, (factor or 1.0) * (on_q or 1.0), product, q, k)


def scalar_factor(node: Node | None, params: Mapping[str, np.ndarray]) -> float | None:
    """The positive constant factor of a ``mul`` (or ``div``: its inverse) of one value by a scalar, or None."""
    if node is None or node.op not in (MUL, DIV) or len(node.inputs) != 1 + ("b" not in node.attrs):
        return None
    b = operand_value(node, "b", params)
    if b is None or np.asarray(b).size != 1 or not float(np.asarray(b).ravel()[0]) > 0:
        return None
    factor = float(np.asarray(b).ravel()[0])
    return factor if node.op == MUL else 1.0 / factor


def per_key(shape: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to the ``scores`` shape with one value per key (the last axis)."""
    if len(shape) > len(scores) or not shape or shape[-1] != scores[-1]:
        return False
    return all(s == 1 for s in shape[:-1])


def _through_qdq(value: str, producers: Mapping[str, Node]) -> Node | None:
    """The producer of ``value``, looking through a ``quantize -> dequantize`` pair (the calibrated scores)."""
    node = producers.get(value)
    if node is not None and node.op == DEQUANTIZE:
        q = producers.get(node.inputs[0])
        if q is not None and q.op == QUANTIZE:
            return producers.get(q.inputs[0])
    return node


@dataclass(frozen=True)
class AttentionHead:
    """One head's views: ``Q``, ``K``, ``V`` the channels from ``q_at``, ``k_at``, ``v_at`` of the input, its
    output the channels from ``out_at`` of the output."""

    q_at: int
    k_at: int
    v_at: int
    out_at: int


def attention_node(
    x: str,
    keep: str | None,
    out: str,
    d: int,
    heads: tuple[AttentionHead, ...],
    scales: tuple[float, float, float, float],
    qdq: QdqAttention | None = None,
) -> Node:
    """The ``attention_int`` node over int8 ``x`` (tokens, channels) into ``out`` (tokens, out channels): heads of
    ``d`` channels, their views (:class:`AttentionHead`), ``scales`` (``Q``'s: the input's times the scores'
    factor times ``sqrt(d)``; the input's; the scores'; the output's) from which :meth:`IntAttention.of` derives
    every integer parameter, or a QDQ model's parameters ``qdq`` (attribute ``qdq``), and ``keep`` the per-key
    keep vector (int8 or bool, nonzero kept; None: every key)."""
    views = tuple((h.q_at, h.k_at, h.v_at, h.out_at) for h in heads)
    attrs = {"head": d, "heads": views, "scales": tuple(float(s) for s in scales), "quant": (float(scales[3]), 0)}
    if qdq is not None:
        attrs["qdq"] = qdq.attrs()
    return Node(ATTENTION_INT, (x,) if keep is None else (x, keep), out, attrs)


def node_heads(node: Node) -> tuple[AttentionHead, ...]:
    """The heads of an ``attention_int`` node."""
    return tuple(AttentionHead(*h) for h in node.attrs["heads"])


def node_params(node: Node) -> IntAttention | QdqAttention:
    """The integer parameters of an ``attention_int`` node's heads (:func:`attention_node`)."""
    if "qdq" in node.attrs:
        return QdqAttention.from_attrs(node.attrs["qdq"])
    q_scale, x_scale, score_scale, out_scale = node.attrs["scales"]
    return IntAttention.of(int(node.attrs["head"]), q_scale, x_scale, x_scale, score_scale, out_scale)
