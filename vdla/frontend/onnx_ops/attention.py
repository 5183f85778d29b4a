"""Converters lowering Einsum, Attention, LinearAttention and RotaryEmbedding to vdla's primitives at import:
transpose, reshape, slice, concat, the float32 ``matmul``, ``reduce``, ``softmax`` and elementwise nodes (no
``onnx`` import here).

The lowerings keep ONNX's semantics (its reference implementation's order of operations, within float32
rounding); what vdla cannot lower (an Einsum diagonal, inputs that do not fit the attributes) is refused at
import naming the node, the attribute or input and its value. Masks, padding lengths and position ids may be
constants or computed at run time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, size, unsupported
from vdla.frontend.onnx_ops.registry import FLOAT, attr, converter

# ---------------------------------------------------------------------------------------------------------
# Einsum


@dataclass(frozen=True)
class _Term:
    """An operand of the contraction: its vdla value and one letter per axis."""

    value: str
    letters: str


def _einsum_terms(node: OnnxNode, equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The operand subscripts and the output subscripts of ``equation``, an ellipsis replaced by one digit
    per broadcast axis (right-aligned across operands); a repeated subscript (a diagonal) is refused."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks) or not re.fullmatch(r"[a-zA-Z.,]*(->[a-zA-Z.]*)?", eq):
        raise unsupported(node, f"equation {equation!r} does not fit {len(ranks)} operands", "equation")
    widest = 0
    for t, rank in zip(terms, ranks, strict=True):
        named = len(t.replace("...", ""))
        if t.count("...") > 1 or t.replace("...", "").count(".") or ("..." not in t and named != rank):
            raise unsupported(node, f"subscripts {t!r} do not fit an operand of rank {rank}", "equation")
        widest = max(widest, rank - named if "..." in t else 0)
    digits = "0123456789"[:widest]

    def expand(t: str, rank: int) -> str:
        n = rank - len(t.replace("...", ""))
        return t.replace("...", digits[widest - n :]) if "..." in t else t

    terms = [expand(t, r) for t, r in zip(terms, ranks, strict=True)]
    if not arrow:  # implicit output: the subscripts seen once, the broadcast axes first, then alphabetically
        once = sorted(c for c in set("".join(terms)) if "".join(terms).count(c) == 1 and c not in digits)
        out = digits + "".join(once)
    else:
        out = rhs.replace("...", digits)
    for t in [*terms, out]:
        if len(set(t)) != len(t):
            raise unsupported(node, f"equation {equation!r}: a repeated subscript (a diagonal) is not supported",
                              "equation")  # fmt: skip
    if not set(out) <= set("".join(terms)):
        raise unsupported(node, f"equation {equation!r}: output subscripts missing from the operands", "equation")
    return terms, out


def _arrange(b: Builder, node: OnnxNode, t: _Term, order: str) -> _Term:
    """``t`` transposed to the subscript order ``order`` (no node when already so)."""
    if t.letters == order:
        return t
    perm = tuple(t.letters.index(c) for c in order)
    return _Term(b.emit(node, "transpose", (t.value,), {"perm": perm}, suffix="einsum_order"), order)


def _sum_out(b: Builder, node: OnnxNode, t: _Term, keep: set[str]) -> _Term:
    """``t`` summed over its subscripts outside ``keep``."""
    axes = tuple(i for i, c in enumerate(t.letters) if c not in keep)
    if not axes:
        return t
    value = b.emit(node, "reduce", (t.value,), {"kind": "sum", "axes": axes, "keepdims": False}, suffix="einsum_sum")
    return _Term(value, "".join(c for c in t.letters if c in keep))


def _contract(b: Builder, node: OnnxNode, a: _Term, c: _Term, keep: set[str], sizes: dict[str, int]) -> _Term:
    """The product of ``a`` and ``c`` summed over their shared subscripts outside ``keep``, as one batched
    matmul: ``(batch, a only, summed) x (batch, summed, c only)``."""
    batch = [x for x in a.letters if x in c.letters and x in keep]
    summed = [x for x in a.letters if x in c.letters and x not in keep]
    a_only = [x for x in a.letters if x not in c.letters]
    c_only = [x for x in c.letters if x not in a.letters]
    dims = lambda letters: [sizes[x] for x in letters]  # noqa: E731
    nb, m, k, n = (math.prod(dims(g)) for g in (batch, a_only, summed, c_only))
    lhs = _arrange(b, node, a, "".join(batch + a_only + summed))
    rhs = _arrange(b, node, c, "".join(batch + summed + c_only))
    lhs3 = b.reshape(node, lhs.value, (nb, m, k))
    rhs3 = b.reshape(node, rhs.value, (nb, k, n))
    y = b.emit(node, "matmul", (lhs3, rhs3), suffix="einsum_matmul")
    letters = batch + a_only + c_only
    return _Term(b.reshape(node, y, tuple(dims(letters))), "".join(letters))


@converter("Einsum", attrs=("equation",))
def _einsum(b: Builder, node: OnnxNode) -> None:
    """Every subscript summed as early as possible, then the operands contracted left to right, each pair as
    one batched float32 matmul, and the result transposed to the output's order."""
    n = len(node.inputs)
    for i in range(n):
        b.require_dtype(node, i, FLOAT)
    equation = str(attr(node, "equation", ""))
    letters, out = _einsum_terms(node, equation, [len(b.shape(node, i)) for i in range(n)])
    sizes: dict[str, int] = {}
    for i, t in enumerate(letters):
        for c, d in zip(t, b.shape(node, i), strict=True):
            if sizes.setdefault(c, d) != d:
                raise unsupported(node, f"equation {equation!r}: subscript {c!r} has sizes {sizes[c]} and {d} "
                                  "(broadcasting is not supported)", "equation")  # fmt: skip
    terms = [_Term(b.tensor(node, i), t) for i, t in enumerate(letters)]

    def needed(after: int) -> set[str]:
        return set(out).union(*(set(t.letters) for t in terms[after:]))

    acc = _sum_out(b, node, terms[0], needed(1))
    for i in range(1, n):
        operand = _sum_out(b, node, terms[i], needed(i + 1) | set(acc.letters))
        acc = _contract(b, node, acc, operand, needed(i + 1), sizes)
    acc = _arrange(b, node, acc, out)
    b.finish(node, b.reshape(node, acc.value, tuple(sizes[c] for c in out)), "float32")


# ---------------------------------------------------------------------------------------------------------
# Attention (opset 23: scaled dot-product attention with masks, a KV cache and grouped-query heads)

_ATTENTION_ATTRS = ("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                    "softmax_precision", "left_window_size", "right_window_size")  # fmt: skip
NEG_INF = np.float32(-np.inf)


@dataclass(frozen=True)
class _Heads:
    """Q, K and V as (B, H, S, D) values, the head counts and sequence lengths (``past``: the cached keys)."""

    q: str
    k: str
    v: str
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    past: int


def _int_attr(node: OnnxNode, name: str, default: int, allowed: Sequence[int] | None = None, low: int = 0) -> int:
    v = int(attr(node, name, default))
    if (allowed is not None and v not in allowed) or (allowed is None and v < low):
        raise unsupported(node, f"{name} must be {list(allowed) if allowed else f'>= {low}'}", name)
    return v


def _split_heads(b: Builder, node: OnnxNode, x: str, heads: int, what: str) -> str:
    """A (B, S, H * D) value as (B, H, S, D)."""
    bsz, seq, hidden = b.type_of(x).shape
    if hidden % heads:
        attr_name = "q_num_heads" if what == "Q" else "kv_num_heads"
        raise unsupported(node, f"{what}'s hidden size {hidden} does not split into {heads} heads", attr_name)
    x4 = b.reshape(node, x, (bsz, seq, heads, hidden // heads))
    return b.emit(node, "transpose", (x4,), {"perm": (0, 2, 1, 3)}, suffix=f"{what}_heads")


def _heads(b: Builder, node: OnnxNode) -> _Heads:
    """Q, K and V in (B, H, S, D) form, the past keys and values concatenated in front of K and V."""
    for i in (0, 1, 2, 4, 5):  # (the mask, input 3, may be bool too: _mask)
        if b.has(node, i):
            b.require_dtype(node, i, FLOAT)
    ranks = {len(b.shape(node, i)) for i in (0, 1, 2)}
    if ranks not in ({3}, {4}):
        raise unsupported(node, f"Q, K and V must all be 3-D or all 4-D, got ranks {sorted(ranks)}")
    q, k, v = (b.tensor(node, i) for i in (0, 1, 2))
    if ranks == {3}:
        if "q_num_heads" not in node.attrs or "kv_num_heads" not in node.attrs:
            raise unsupported(node, "3-D inputs need the q_num_heads and kv_num_heads attributes")
        qh, kvh = _int_attr(node, "q_num_heads", 0, low=1), _int_attr(node, "kv_num_heads", 0, low=1)
        q = _split_heads(b, node, q, qh, "Q")
        k, v = (_split_heads(b, node, t, kvh, w) for t, w in ((k, "K"), (v, "V")))
    for name, i in (("q_num_heads", 0), ("kv_num_heads", 1)):
        if name in node.attrs and int(node.attrs[name]) != b.type_of((q, k)[i]).shape[1]:
            raise unsupported(node, f"does not match the input's {b.type_of((q, k)[i]).shape[1]} heads", name)
    (bsz, qh, s, dq), (_, kvh, _, dk) = b.type_of(q).shape, b.type_of(k).shape
    if dq != dk or qh % kvh or b.type_of(v).shape[:2] != (bsz, kvh) or b.type_of(v).shape[2] != b.type_of(k).shape[2]:
        raise unsupported(node, f"Q {b.type_of(q).shape}, K {b.type_of(k).shape}, V {b.type_of(v).shape}: "
                          "heads, head sizes or lengths do not fit (Q heads a multiple of K/V heads)")  # fmt: skip
    past = 0
    if b.has(node, 4) != b.has(node, 5):
        raise unsupported(node, "past_key and past_value go together")
    if b.has(node, 4):
        pk, pv = b.tensor(node, 4), b.tensor(node, 5)
        past = b.type_of(pk).shape[2]
        k = b.emit(node, "concat", (pk, k), {"axis": 2}, suffix="present_key")
        v = b.emit(node, "concat", (pv, v), {"axis": 2}, suffix="present_value")
    return _Heads(q, k, v, bsz, qh, kvh, s, past)


def _allowed_keys(node: OnnxNode, h: _Heads, kv_len: int, nonpad: np.ndarray | None) -> np.ndarray | None:
    """The additive bias (0 or -inf) of the causal, sliding-window and padding masks, (S, L) or (B, 1, S, L)
    per batch; None when every key is allowed. A query at position ``i + offset`` (the offset: the cached
    length, or per batch ``nonpad_kv_seqlen - S``) sees key ``j`` when ``j <= i + offset`` (causal) and
    within the window, and ``j < nonpad_kv_seqlen``."""
    i = np.arange(h.q_len).reshape(-1, 1)
    j = np.arange(kv_len).reshape(1, -1)
    offset: int | np.ndarray = h.past
    if nonpad is not None:
        offset = nonpad.reshape(-1, 1, 1) - h.q_len
    diff = i + offset - j  # (S, L) or (B, S, L)
    allowed = np.ones(diff.shape, bool)
    if int(attr(node, "is_causal", 0)):
        allowed &= diff >= 0
    left, right = int(attr(node, "left_window_size", -1)), int(attr(node, "right_window_size", -1))
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    if nonpad is not None:
        allowed = allowed & (j < nonpad.reshape(-1, 1, 1))
    if allowed.all():
        return None
    bias = np.where(allowed, np.float32(0), NEG_INF).astype(np.float32)
    return bias if bias.ndim == 2 else bias.reshape(bias.shape[0], 1, h.q_len, kv_len)


def _mask(b: Builder, node: OnnxNode, h: _Heads, kv_len: int) -> str | np.ndarray | None:
    """The attention mask as an additive float bias padded with -inf to the key length (a constant stays an
    array): a float mask as it is, a bool mask (True: the key is attended) as 0 where True, -inf where False."""
    if not b.has(node, 3):
        return None
    boolean = b.require_dtype(node, 3, (*FLOAT, "bool")) == "bool"
    shape = b.shape(node, 3)
    if not shape or shape[-1] > kv_len:
        raise unsupported(node, f"attn_mask of shape {shape} for {kv_len} keys")
    try:  # once padded to the key length
        np.broadcast_shapes((*shape[:-1], kv_len), (h.batch, h.q_heads, h.q_len, kv_len))
    except ValueError as e:
        raise unsupported(node, f"attn_mask of shape {shape} does not broadcast to the scores") from e
    pad = (*shape[:-1], kv_len - shape[-1])
    if b.is_const(node, 3):
        mask = np.asarray(b.const(node, 3, "attn_mask"))
        mask = np.where(mask, np.float32(0), NEG_INF) if boolean else mask.astype(np.float32)
        return np.concatenate([mask, np.full(pad, NEG_INF)], -1)
    mask = b.tensor(node, 3)
    if boolean:
        mask = b.emit(node, "where", (mask,), {"a": 0.0, "b": float(NEG_INF)}, suffix="mask_bias")
    if pad[-1]:
        fill = b.add_param(f"{node.input(3)}:padding", np.full(pad, NEG_INF, np.float32))
        mask = b.emit(node, "concat", (mask, fill), {"axis": len(shape) - 1}, suffix="mask_padded")
    return mask


@dataclass(frozen=True)
class _Bias:
    """The additive bias of the scores (mask + causal/window/padding) as ONNX defines it (``raw``), and the
    one added before the softmax (``safe``): where a query row may be fully masked (all -inf), its bias is
    raised to a finite floor there and its probabilities are multiplied by ``keep`` (0 on such rows, else 1),
    so that the row's probabilities are zeros (ONNX's rule) instead of softmax's NaN. Elsewhere the floor is
    -inf and ``keep`` 1: the values are untouched."""

    raw: str
    safe: str
    keep: str | None


def _allowed_keys_at_run_time(b: Builder, node: OnnxNode, h: _Heads, kv_len: int) -> str:
    """The additive bias (0 or -inf, (B, 1, S, L)) of :func:`_allowed_keys` for a ``nonpad_kv_seqlen`` (B,)
    computed or fed at run time: ``diff = i - S - j + nonpad[b]`` and ``j < nonpad[b]`` compared in int32."""
    b.require_dtype(node, 6, ("int32", "int64"))
    if b.shape(node, 6) != (h.batch,):
        raise unsupported(node, f"nonpad_kv_seqlen of shape {b.shape(node, 6)} for a batch of {h.batch}")
    out = node.outputs[0]
    lengths = b.reshape(node, b.tensor(node, 6), (h.batch, 1, 1, 1))
    i = np.arange(h.q_len, dtype=np.int32).reshape(1, 1, -1, 1)
    j = np.arange(kv_len, dtype=np.int32).reshape(1, 1, 1, -1)
    keys = b.add_param(f"{out}:key_positions", j)
    allowed = b.emit(node, "less", (keys, lengths), suffix="unpadded")  # (B, 1, 1, L)
    tests = []
    if int(attr(node, "is_causal", 0)):
        tests.append(("greater_equal", 0))
    left, right = int(attr(node, "left_window_size", -1)), int(attr(node, "right_window_size", -1))
    if left >= 0:
        tests.append(("less_equal", left))
    if right >= 0:
        tests.append(("greater_equal", -right))
    if tests:
        diff = b.emit(node, "add", (b.add_param(f"{out}:query_offsets", i - h.q_len - j), lengths), suffix="diff")
        for op, bound in tests:
            allowed = b.emit(node, "bit_and", (b.emit(node, op, (diff,), {"b": bound}, suffix="window"), allowed),
                             suffix="allowed")  # fmt: skip
    return b.emit(node, "where", (allowed,), {"a": 0.0, "b": float(NEG_INF)}, suffix="allowed_bias")


def _bias(b: Builder, node: OnnxNode, h: _Heads, kv_len: int) -> _Bias | None:
    if b.has(node, 6) and h.past:
        raise unsupported(node, "nonpad_kv_seqlen cannot be combined with past_key/past_value")
    lengths = None  # the padding lengths' bias when they are known only at run time
    if b.has(node, 6) and not b.is_const(node, 6):
        lengths, fixed = _allowed_keys_at_run_time(b, node, h, kv_len), None
    else:
        nonpad = b.const(node, 6, "nonpad_kv_seqlen") if b.has(node, 6) else None
        fixed = _allowed_keys(node, h, kv_len, None if nonpad is None else np.asarray(nonpad, np.int64))
    mask = _mask(b, node, h, kv_len)
    out = node.outputs[0]
    if lengths is None and (isinstance(mask, np.ndarray) or mask is None):  # constant: the fully masked rows
        bias = mask if fixed is None else fixed if mask is None else (mask + fixed).astype(np.float32)  # are known
        if bias is None:
            return None
        raw = b.add_param(f"{out}:bias", bias)
        masked = np.isneginf(bias.max(axis=-1, keepdims=True))
        if not masked.any():
            return _Bias(raw, raw, None)
        safe = b.add_param(f"{out}:safe_bias", np.where(masked, np.float32(0), bias).astype(np.float32))
        return _Bias(raw, safe, b.add_param(f"{out}:keep", (~masked).astype(np.float32)))
    if isinstance(mask, np.ndarray):
        mask = b.add_param(f"{out}:mask", mask)
    if fixed is not None:
        mask = b.emit(node, "add", (mask, b.add_param(f"{out}:fixed_bias", fixed)), suffix="bias")
    if lengths is not None:
        mask = lengths if mask is None else b.emit(node, "add", (mask, lengths), suffix="bias")
    # at run time: w = min(max(m, -FLT_MAX) - m, 1) is 1 where the row maximum m is -inf, else 0 (exactly)
    rank = len(b.type_of(mask).shape)
    row_max = b.emit(node, "reduce", (mask,), {"kind": "max", "axes": (rank - 1,), "keepdims": True}, suffix="row_max")
    finite = b.emit(node, "max", (row_max,), {"b": float(np.finfo(np.float32).min)}, suffix="row_max_finite")
    gap = b.emit(node, "sub", (finite, row_max), suffix="masked_gap")
    w = b.emit(node, "min", (gap,), {"b": 1.0}, suffix="row_masked")
    minus_one = b.add_param(f"{out}:minus_one", np.full((1,) * rank, -1, np.float32))
    floor = b.emit(node, "div", (minus_one, w), suffix="bias_floor")  # -1 / 0 = -inf: no floor
    safe = b.emit(node, "max", (mask, floor), suffix="safe_bias")
    keep = b.emit(node, "add", (b.emit(node, "mul", (w,), {"b": -1.0}, suffix="neg_masked"),), {"b": 1.0},
                  suffix="keep_rows")  # fmt: skip
    return _Bias(mask, safe, keep)


def _grouped(b: Builder, node: OnnxNode, x: str, h: _Heads, kv: bool) -> str:
    """For grouped-query attention, ``x`` (B, H, ...) viewed as (B, H_kv, G, ...) (Q-side, ``kv`` False) or
    (B, H_kv, 1, ...) (K/V side): query head ``i`` reads key/value head ``i // G`` (ONNX's repeat)."""
    if h.q_heads == h.kv_heads:
        return x
    shape = b.type_of(x).shape
    groups = 1 if kv else h.q_heads // h.kv_heads
    return b.reshape(node, x, (shape[0], h.kv_heads, groups, *shape[2:]))


def _merge_groups(b: Builder, node: OnnxNode, x: str, h: _Heads) -> str:
    shape = b.type_of(x).shape
    return x if len(shape) == 4 else b.reshape(node, x, (shape[0], h.q_heads, *shape[3:]))


@converter("Attention", attrs=_ATTENTION_ATTRS)
def _attention(b: Builder, node: OnnxNode) -> None:
    """``softmax(Q K^T * scale (softcapped) + bias) V`` as transposes, reshapes, two batched matmuls, adds
    and a softmax; the present key/value (past concatenated with the new) and the QK output of every
    ``qk_matmul_output_mode`` where read, as ONNX's reference computes them (modes 0 and 1: the scaled,
    softcapped product; 2: plus the bias; 3: the probabilities). The softmax runs in float32 whatever
    ``softmax_precision`` names (the inputs are float32)."""
    h = _heads(b, node)
    mode = _int_attr(node, "qk_matmul_output_mode", 0, (0, 1, 2, 3))
    _int_attr(node, "is_causal", 0, (0, 1))
    for name in ("left_window_size", "right_window_size"):
        _int_attr(node, name, -1, low=-1)
    head = b.type_of(h.q).shape[3]
    scale = float(attr(node, "scale", 1.0 / math.sqrt(head)))
    softcap = float(attr(node, "softcap", 0.0))
    if not (math.isfinite(scale) and scale > 0):
        raise unsupported(node, "scale must be positive and finite", "scale")
    if not (math.isfinite(softcap) and softcap >= 0):
        raise unsupported(node, "softcap must be non-negative and finite", "softcap")
    bias = _bias(b, node, h, b.type_of(h.k).shape[2])
    q = b.emit(node, "mul", (h.q,), {"b": scale}, suffix="q_scaled")
    kt = b.emit(node, "transpose", (h.k,), {"perm": (0, 1, 3, 2)}, suffix="k_transposed")
    qk = b.emit(node, "matmul", (_grouped(b, node, q, h, False), _grouped(b, node, kt, h, True)), suffix="qk")
    scores = _merge_groups(b, node, qk, h)
    if softcap > 0:  # softcap * tanh(scores / softcap), before the mask so that -inf stays -inf
        t = b.emit(node, "tanh", (b.emit(node, "div", (scores,), {"b": softcap}, suffix="capped"),), suffix="tanh")
        scores = b.emit(node, "mul", (t,), {"b": softcap}, suffix="softcapped")
    qk_out = scores  # modes 0 and 1: the (softcapped) scaled product, as ONNX's reference
    if bias is not None:
        biased = b.emit(node, "add", (scores, bias.safe), suffix="scores")
        if mode == 2:
            qk_out = biased if bias.safe == bias.raw else b.emit(node, "add", (scores, bias.raw), suffix="qk_bias")
        scores = biased
    probs = b.emit(node, "softmax", (scores,), {"axis": 3}, suffix="probs")
    if bias is not None and bias.keep is not None:
        probs = b.emit(node, "mul", (probs, bias.keep), suffix="probs_kept")
    if mode == 3:
        qk_out = probs
    y = b.emit(node, "matmul", (_grouped(b, node, probs, h, False), _grouped(b, node, h.v, h, True)), suffix="pv")
    y = _merge_groups(b, node, y, h)
    if len(b.shape(node, 0)) == 3:
        y = b.emit(node, "transpose", (y,), {"perm": (0, 2, 1, 3)}, suffix="y_heads")
        bsz, seq = b.shape(node, 0)[:2]
        y = b.reshape(node, y, (bsz, seq, size(b.type_of(y).shape[2:])))
    for i, value in enumerate((y, h.k, h.v, qk_out)):
        if i == 0 or (len(node.outputs) > i and node.outputs[i] in b.used):
            b.alias(node.outputs[i], value)


# ---------------------------------------------------------------------------------------------------------
# LinearAttention (opset 27): the recurrence unrolled over the sequence

_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _step(b: Builder, node: OnnxNode, x: str, axis: int, i: int, shape: Sequence[int], what: str) -> str:
    """``x``'s element ``i`` along ``axis`` (kept, length 1), reshaped to ``shape``."""
    xs = b.type_of(x).shape
    starts = [0] * len(xs)
    stops = list(xs)
    starts[axis], stops[axis] = i, i + 1
    attrs = {"starts": tuple(starts), "stops": tuple(stops), "steps": (1,) * len(xs)}
    return b.reshape(node, b.emit(node, "slice", (x,), attrs, suffix=what), tuple(shape))


def _per_head(b: Builder, node: OnnxNode, i: int, heads: int, what: str) -> str:
    """Input ``i`` (B, T, H * D) as (B, H, T, D)."""
    bsz, seq, hidden = b.shape(node, i)
    x = b.reshape(node, b.tensor(node, i), (bsz, seq, heads, hidden // heads))
    return b.emit(node, "transpose", (x,), {"perm": (0, 2, 1, 3)}, suffix=what)


@converter("LinearAttention", attrs=("chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"))
def _linear_attention(b: Builder, node: OnnxNode) -> None:
    """The recurrence of every time step as ONNX's reference runs it, unrolled at import (the sequence length is
    fixed): per step the state (B, H_kv, d_k, d_v) decays by ``exp(decay)`` (gated rules), the value is
    corrected by the state's read-out times ``beta`` (delta rules), the outer product ``k v^T`` is added, and
    ``scale * q^T S`` is the output (query heads grouped over the key/value heads). ``chunk_size`` is a tuning
    hint with no effect on the result."""
    rule = str(attr(node, "update_rule", "gated_delta"))
    if rule not in _UPDATE_RULES:
        raise unsupported(node, f"update_rule must be one of {', '.join(_UPDATE_RULES)}", "update_rule")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for i in range(6):
        if b.has(node, i):
            b.require_dtype(node, i, FLOAT)
    for i, name, needed in ((4, "decay", gating), (5, "beta", delta)):
        if b.has(node, i) != needed:
            raise unsupported(node, f"update_rule {rule!r} {'needs' if needed else 'takes no'} {name} input")
    if "q_num_heads" not in node.attrs or "kv_num_heads" not in node.attrs:
        raise unsupported(node, "needs the q_num_heads and kv_num_heads attributes")
    qh, kvh = _int_attr(node, "q_num_heads", 0, low=1), _int_attr(node, "kv_num_heads", 0, low=1)
    shapes = [b.shape(node, i) for i in (0, 1, 2)]
    if qh % kvh or any(len(s) != 3 for s in shapes) or len({s[:2] for s in shapes}) != 1:
        raise unsupported(node, f"query, key, value {shapes} must be (B, T, H * D) with q_num_heads a multiple of "
                          "kv_num_heads")  # fmt: skip
    bsz, seq = shapes[0][:2]
    if shapes[0][2] % qh or shapes[1][2] % kvh or shapes[2][2] % kvh or shapes[0][2] // qh != shapes[1][2] // kvh:
        raise unsupported(node, f"query, key, value {shapes} do not split into {qh} and {kvh} heads of one key size")
    dk, dv, groups = shapes[0][2] // qh, shapes[2][2] // kvh, qh // kvh
    scale = float(attr(node, "scale", 0.0)) or 1.0 / math.sqrt(dk)
    if not math.isfinite(scale):
        raise unsupported(node, "scale must be finite", "scale")
    out = node.outputs[0]
    q = b.reshape(node, _per_head(b, node, 0, qh, "q_heads"), (bsz, kvh, groups, seq, dk))
    k, v = _per_head(b, node, 1, kvh, "k_heads"), _per_head(b, node, 2, kvh, "v_heads")
    decay = beta = None
    if gating:
        last = b.shape(node, 4)[-1] if len(b.shape(node, 4)) == 3 else -1
        if b.shape(node, 4)[:2] != (bsz, seq) or last not in (kvh, kvh * dk):
            raise unsupported(node, f"decay of shape {b.shape(node, 4)}: needs ({bsz}, {seq}, {kvh} or {kvh * dk})")
        decay = _per_head(b, node, 4, kvh, "decay_heads")  # (B, H_kv, T, 1 or d_k)
        decay = b.emit(node, "exp", (decay,), suffix="decay_factor")
    if delta:
        last = b.shape(node, 5)[-1] if len(b.shape(node, 5)) == 3 else -1
        if b.shape(node, 5)[:2] != (bsz, seq) or last not in (kvh, 1):
            raise unsupported(node, f"beta of shape {b.shape(node, 5)}: needs ({bsz}, {seq}, {kvh} or 1)")
        beta = _per_head(b, node, 5, last, "beta_heads")  # (B, H_kv or 1, T, 1)
    state_shape = (bsz, kvh, dk, dv)
    if b.has(node, 3):
        if b.shape(node, 3) != state_shape:
            raise unsupported(node, f"past_state of shape {b.shape(node, 3)} where {state_shape} is needed")
        state = b.tensor(node, 3)
    else:
        state = b.add_param(f"{out}:zero_state", np.zeros(state_shape, np.float32))
    outputs = []
    for i in range(seq):
        k_t = _step(b, node, k, 2, i, (bsz, kvh, 1, dk), "k_t")
        v_t = _step(b, node, v, 2, i, (bsz, kvh, 1, dv), "v_t")
        if decay is not None:
            width = b.type_of(decay).shape[3]
            state = b.emit(node, "mul", (state, _step(b, node, decay, 2, i, (bsz, kvh, width, 1), "g_t")),
                           suffix="decayed")  # fmt: skip
        if beta is not None:
            read = b.emit(node, "matmul", (k_t, state), suffix="retrieved")
            beta_t = _step(b, node, beta, 2, i, (bsz, b.type_of(beta).shape[1], 1, 1), "beta_t")
            v_t = b.emit(node, "mul", (b.emit(node, "sub", (v_t, read), suffix="v_error"), beta_t), suffix="v_delta")
        outer = b.emit(node, "matmul", (b.reshape(node, k_t, (bsz, kvh, dk, 1)), v_t), suffix="kv_outer")
        state = b.emit(node, "add", (state, outer), suffix="state")
        q_t = _step(b, node, q, 3, i, (bsz, kvh, groups, dk), "q_t")
        o_t = b.emit(node, "mul", (b.emit(node, "matmul", (q_t, state), suffix="read"),), {"b": scale}, suffix="o_t")
        outputs.append(b.reshape(node, o_t, (bsz, kvh, groups, 1, dv)))
    y = outputs[0] if len(outputs) == 1 else b.emit(node, "concat", outputs, {"axis": 3}, suffix="outputs")
    y = b.emit(node, "transpose", (b.reshape(node, y, (bsz, qh, seq, dv)),), {"perm": (0, 2, 1, 3)}, suffix="y_t")
    b.reshape(node, y, (bsz, seq, qh * dv), out=out)
    if len(node.outputs) > 1 and node.outputs[1] in b.used:
        b.alias(node.outputs[1], state)


# ---------------------------------------------------------------------------------------------------------
# RotaryEmbedding (opset 23)


def _last_axis(b: Builder, node: OnnxNode, x: str, start: int, stop: int, step: int = 1, what: str = "rotary") -> str:
    """``x[..., start:stop:step]`` (no node for the whole axis)."""
    shape = b.type_of(x).shape
    if (start, stop, step) == (0, shape[-1], 1):
        return x
    rank = len(shape)
    attrs = {"starts": (0,) * (rank - 1) + (start,), "stops": (*shape[:-1], stop), "steps": (1,) * (rank - 1) + (step,)}
    return b.emit(node, "slice", (x,), attrs, suffix=what)


def _gather_rows(b: Builder, node: OnnxNode, cache: str, positions: np.ndarray) -> str:
    """``cache[positions]`` of a (max_positions, R/2) cache for constant (B, S) positions: runs of consecutive
    positions are slices of the cache, concatenated."""
    flat = positions.reshape(-1)
    if flat.min() < 0 or flat.max() >= b.type_of(cache).shape[0]:
        raise unsupported(
            node, f"position_ids {flat.tolist()[:8]} outside the cache's {b.type_of(cache).shape[0]} rows"
        )
    runs: list[tuple[int, int]] = []
    for p in flat.tolist():
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    width = b.type_of(cache).shape[1]
    parts = [
        b.emit(node, "slice", (cache,), {"starts": (lo, 0), "stops": (hi, width), "steps": (1, 1)}, suffix="cache_rows")
        for lo, hi in runs
    ]
    rows = parts[0] if len(parts) == 1 else b.emit(node, "concat", parts, {"axis": 0}, suffix="cache_rows")
    return b.reshape(node, rows, (*positions.shape, width))


def _gather_rows_at_run_time(b: Builder, node: OnnxNode, cache: str) -> str:
    """``cache[position_ids]`` of a (max_positions, R/2) cache for (B, S) positions computed or fed at run
    time: one ``gather`` of the flat offsets ``mod(position, max_positions) * R/2 + column`` (int32; a
    position outside the cache, undefined in ONNX, wraps)."""
    b.require_dtype(node, 3, ("int32", "int64"))
    ps = b.shape(node, 3)
    rows, width = b.type_of(cache).shape
    if len(ps) != 2:
        raise unsupported(node, f"position_ids must be (batch, sequence), got shape {ps}")
    out = node.outputs[0]
    wrapped = b.emit(node, "mod", (b.tensor(node, 3),), {"b": rows}, suffix="positions")
    scaled = b.emit(node, "mul", (wrapped,), {"b": width}, suffix="row_offsets")
    placed = b.reshape(node, scaled, (*ps, 1))
    columns = b.add_param(f"{out}:cache_columns", np.arange(width, dtype=np.int32).reshape(1, 1, width))
    offsets = b.emit(node, "add", (placed, columns), suffix="cache_offsets")
    return b.emit(node, "gather", (cache, offsets), suffix="cache_rows")


@converter("RotaryEmbedding", attrs=("interleaved", "num_heads", "rotary_embedding_dim"))
def _rotary_embedding(b: Builder, node: OnnxNode) -> None:
    """The first ``rotary_embedding_dim`` features of each head rotated pairwise (halves, or even/odd pairs when
    ``interleaved``) by the cached cos/sin of the token's position: slices, four products, a difference, a
    sum and concatenations; the cache rows of constant position_ids are gathered at import, of position_ids
    computed at run time by one gather."""
    for i in (0, 1, 2):
        b.require_dtype(node, i, FLOAT)
    xs = b.shape(node, 0)
    x = b.tensor(node, 0)
    if len(xs) == 3:  # (B, S, H * D) -> (B, S, H, D); the caches broadcast as (B, S, 1, R/2)
        heads = _int_attr(node, "num_heads", 0, low=1)
        if xs[2] % heads:
            raise unsupported(node, f"hidden size {xs[2]} does not split into {heads} heads", "num_heads")
        x = b.reshape(node, x, (*xs[:2], heads, xs[2] // heads))
    elif len(xs) != 4:
        raise unsupported(node, f"needs a 3-D or 4-D input, got shape {xs}")
    head = b.type_of(x).shape[3]
    rot = _int_attr(node, "rotary_embedding_dim", 0) or head
    if rot > head or rot % 2:
        raise unsupported(node, f"must be even and at most the head size {head}", "rotary_embedding_dim")
    caches = [b.tensor(node, i) for i in (1, 2)]
    if b.has(node, 3) and b.is_const(node, 3):
        positions = np.asarray(b.const(node, 3, "position_ids"), np.int64)
        caches = [_gather_rows(b, node, c, positions) for c in caches]
    elif b.has(node, 3):
        caches = [_gather_rows_at_run_time(b, node, c) for c in caches]
    for c in caches:
        if b.type_of(c).shape != (xs[0], xs[1 if len(xs) == 3 else 2], rot // 2):
            raise unsupported(node, f"cos/sin cache of shape {b.type_of(c).shape} for rotary dimension {rot}")
    bsz, seq = b.type_of(caches[0]).shape[:2]
    cache_shape = (bsz, seq, 1, rot // 2) if len(xs) == 3 else (bsz, 1, seq, rot // 2)
    cos, sin = (b.reshape(node, c, cache_shape) for c in caches)
    x_rot = _last_axis(b, node, x, 0, rot)
    if int(attr(node, "interleaved", 0)):
        x1, x2 = (_last_axis(b, node, x_rot, k, rot, 2) for k in (0, 1))
    else:
        x1, x2 = (_last_axis(b, node, x_rot, k * rot // 2, (k + 1) * rot // 2) for k in (0, 1))
    real = b.emit(node, "sub", (b.emit(node, "mul", (x1, cos), suffix="x1_cos"), b.emit(node, "mul", (x2, sin),
                  suffix="x2_sin")), suffix="real")  # fmt: skip
    imag = b.emit(node, "add", (b.emit(node, "mul", (x1, sin), suffix="x1_sin"), b.emit(node, "mul", (x2, cos),
                  suffix="x2_cos")), suffix="imag")  # fmt: skip
    if int(attr(node, "interleaved", 0)):
        pairs = [b.reshape(node, t, (*b.type_of(t).shape, 1)) for t in (real, imag)]
        rotated = b.emit(node, "concat", pairs, {"axis": 4}, suffix="rotated")
        rotated = b.reshape(node, rotated, b.type_of(x_rot).shape)
    else:
        rotated = b.emit(node, "concat", (real, imag), {"axis": 3}, suffix="rotated")
    if rot < head:
        rotated = b.emit(node, "concat", (rotated, _last_axis(b, node, x, rot, head)), {"axis": 3}, suffix="joined")
    b.finish(node, b.reshape(node, rotated, xs), "float32")
