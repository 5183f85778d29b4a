"""QDQ lowering: rewrite quantize/dequantize patterns around convolutions and dense layers into the
integer operators the accelerator runs.

A QDQ model (as ``onnxruntime.quantization`` writes it) computes each layer in float between a
DequantizeLinear of its int8 inputs and a QuantizeLinear of its output. This pass replaces

    dequantize(x_q) , dequantize(w_q) [, dequantize(b_q)] -> conv2d -> [relu | clip] -> quantize(s_y)

with the accelerator's epilogue written as graph operators

    conv2d(x_q, w_q) -> add(b_q) -> mul(m, shift=s) -> clip(lo, hi) -> cast(int8, quant s_y)

where ``m / 2^s`` approximates ``s_x * s_w[c] / s_y`` per output channel with 31-bit multipliers
(:func:`choose_requantization`; the product is exact and rounded once, as the ALU's MUL does), and a
residual block ``quantize(add(dequantize(y_q), dequantize(skip_q)))`` after such a layer with
``add(mul(skip_q, m_k, shift=s_k))`` before the clip (the skip rescaled to the output scale; used as it
is when the scales agree). The same for dense. A ``quantize(op(dequantize(x)))`` with one scale
around a max pool, reshape, transpose or ReLU becomes ``op(x)`` on int8, and ``quantize(dequantize(x))``
with the same scale becomes ``x``. ``quantize(global_avg_pool(dequantize(x)))`` becomes the integer average
the accelerator's ALU runs, ``global_sum_pool(x) -> mul(m, shift=s) -> clip -> cast(int8)`` with
``m / 2^s`` approximating ``s_x / (H*W*s_y)`` (the exact product rounded once, half up, where
QuantizeLinear rounds the float mean half to even: within one step of it). Squeeze-excite's product
``quantize(mul(dequantize(x), dequantize(s)))`` of a feature map by a per-channel vector (N, C, 1, 1) becomes
``mul(x, s) -> mul(m, shift=s) -> clip -> cast(int8)``, the exact int32 product requantized by
``s_x * s_s / s_y`` (:meth:`_QdqLowering.lower_channel_mul`). A conv_transpose is lowered like a
conv2d (its weight per output channel on axis 1). ``quantize(matmul(dequantize(a_q), dequantize(b_q)))`` of
two computed int8 tensors becomes one ``dense`` per batch index, ``a[i]`` by the run-time weight ``b[i]^T``,
with the requantizing epilogue (:meth:`_QdqLowering.lower_matmul`). ``quantize(concat(...))`` of constants and
int8 values dequantized at the result's scale (a class token's rows beside the patch rows) becomes the ``concat``
of the constants quantized and the int8 values (:meth:`_QdqLowering.lower_constant_rows`). Everything else stays
in float with its quantize/dequantize nodes (the CPU fallback runs it exactly as written).
Only symmetric int8 (zero point 0) is lowered.

Invariant: the rewritten graph computes every kept value as the float-between-QDQ semantics does up to
the multiplier's relative error of 2^-31, 2^-24 for a channel product (a value within that of a rounding
boundary may round the other way; ties round half up where QuantizeLinear rounds half to even); with equal
scales it is exact. A negligible channel (a scale the multiplier cannot resolve, :meth:`_QdqLowering.requantization`)
is the zero channel with its bias: within :func:`negligible_bound` (under one step) of the model's value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from vdla.graph.attention import (
    AttentionHead,
    IntAttention,
    QdqAttention,
    attention_node,
    per_key,
    scalar_factor,
    softmax_scores,
)
from vdla.graph.epilogue import (
    FLOAT_STAGES,
    Epilogue,
    EpilogueStage,
    FloatDialect,
    Rescale,
    Walk,
    epilogue_nodes,
    intersect_bounds,
    walk,
)
from vdla.graph.ew import operand_input, operand_value
from vdla.graph.graph import Graph, Node, only_reader
from vdla.graph.interp import evaluate, evaluate_node
from vdla.graph.layernorm import IntLayerNorm, layer_norm_node
from vdla.graph.opnames import (
    ADD,
    CAST,
    CLIP,
    CONCAT,
    CONV2D,
    DENSE,
    DEQUANTIZE,
    DIV,
    GLOBAL_AVG_POOL,
    GREATER,
    LAYER_NORM,
    MATMUL,
    MAX_POOL2D,
    MUL,
    QUANTIZE,
    REFUSAL,
    RELU,
    RESHAPE,
    SLICE,
    SOFTMAX,
    TAKE,
    TRANSPOSE,
)
from vdla.graph.ops import infer_types
from vdla.graph.passes import eliminate_dead_code, fresh_name, patch_window, select_rows_first
from vdla.graph.tables import Cone, table_entries
from vdla.graph.types import TensorType, UnsupportedError
from vdla.isa import IsaError
from vdla.isa.arith import INT8_MAX, INT8_MIN, MUL_MAX_SHIFT, choose_multipliers, choose_requantization

# why a LayerNorm in integers (its parameters, its input shape) cannot run where compiled for, or None
LayerNormCheck = Callable[[IntLayerNorm, tuple[int, ...]], str | None]
# likewise for an attention block in integers (:func:`int_attention`)
AttentionCheck = Callable[["AttentionBlock"], str | None]
COMMUTING = (MAX_POOL2D, RESHAPE, TRANSPOSE, RELU)
# the layers lowered to an integer epilogue, and the weight axis of their output channels
ANCHOR_AXIS = {"conv2d": 0, "dense": 0, "conv_transpose": 1}
REL_TOL = 1e-5


@dataclass(frozen=True)
class QParams:
    """Constant quantization parameters of a quantize/dequantize node."""

    scale: np.ndarray  # flattened, one entry or one per channel
    zero_point: int
    axis: int | None

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    def same(self, other: QParams) -> bool:
        return (
            self.per_tensor
            and other.per_tensor
            and self.zero_point == other.zero_point
            and abs(float(self.scale[0]) - float(other.scale[0])) <= REL_TOL * float(self.scale[0])
        )


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(a, b)


def qparams(node: Node, params) -> QParams | None:
    """The constant scale and zero point of a quantize/dequantize node (None if computed or not one)."""
    if node.op not in (QUANTIZE, DEQUANTIZE):
        return None
    scale = operand_value(node, "scale", params)
    zp = operand_value(node, "zero_point", params)
    if scale is None or (zp is None and operand_input(node, "zero_point") is not None):
        return None
    z = np.zeros(1) if zp is None else np.asarray(zp).ravel()
    if z.size and np.any(z != z[0]):
        return None
    return QParams(np.asarray(scale, np.float64).ravel(), int(z[0]) if z.size else 0, node.attrs.get("axis"))


@dataclass
class _Tail:
    """What follows a float conv/dense up to the quantize the fused epilogue replaces."""

    nodes: list[Node]
    last: Node  # the quantize the epilogue ends at
    scale: float  # its scale
    lo: float = -np.inf
    hi: float = np.inf
    skip: str | None = None
    s_skip: float = 0.0
    bias: np.ndarray | None = None  # a float bias added by a separate node
    rounded: tuple[float, float, float] | None = None  # (scale, lo, hi) of the rounding before a rescaled add


class QdqDialect(FloatDialect):
    """The float form of the epilogue in a QDQ model (:data:`vdla.graph.epilogue.FLOAT_STAGES`): a bias is a
    float constant or the dequantization of an integer one; a residual is the per-tensor dequantization of an
    int8 value computed before the anchor; quantize -> dequantize hops may stand between the stages."""

    def __init__(self, graph: Graph, types, params: dict[str, np.ndarray]):
        super().__init__(graph, types)
        self.params = params
        self.between = (EpilogueStage("quantize", ("quantize",), self.hop),)

    def dq_of(self, value: str) -> tuple[str, QParams] | None:
        """(int8 source, params) when ``value`` is a symmetric dequantize of an int8 tensor."""
        node = self.producers.get(value)
        q = qparams(node, self.params) if node is not None else None
        if q is None or node.op != DEQUANTIZE or q.zero_point != 0:
            return None
        src = node.inputs[0]
        return (src, q) if self.types[src].dtype in ("int8", "int32") else None

    def constant(self, name: str) -> np.ndarray | None:
        dq = self.dq_of(name)
        if dq is not None and dq[0] in self.params:
            raw, scale = self.params[dq[0]].astype(np.float64), dq[1].scale
            return raw * (scale.reshape(raw.shape) if scale.size == raw.size else scale)
        return super().constant(name)

    def skip(self, other: str, w: Walk) -> dict | None:
        skip = self.dq_of(other)
        if skip is None or not skip[1].per_tensor or self.types[skip[0]].dtype != "int8":
            return None
        if self.types[skip[0]].shape != self.types[w.value].shape or not self.before(skip[0], w.anchor):
            return None  # computed after this layer: the add belongs to the epilogue of the layer computing it
        return {"skip": skip[0], "scale": float(skip[1].scale[0])}

    def keeps(self, node: Node, scale: float) -> bool:
        """Whether the quantize after ``node`` (an add or a ReLU) uses ``scale``: then fusing it into the integer
        epilogue is exact (one rounding, as the model has)."""
        q = self.only_reader(node.output)
        qp = qparams(q, self.params) if q is not None else None
        return qp is not None and q.op == QUANTIZE and qp.per_tensor and _close(float(qp.scale[0]), scale)

    def hop(self, node: Node, w: Walk) -> dict | None:
        """A per-tensor symmetric quantize in the chain. The chain goes on through its dequantize (same
        scale) into a ReLU, clip or add, unless the model rounds again at another scale after the ReLU: then,
        or with no such hop, it ends here."""
        q = qparams(node, self.params)
        if q is None or not q.per_tensor or q.zero_point != 0:
            return None
        dq = self.only_reader(node.output)
        hop = dq is not None and dq.op == DEQUANTIZE and (dqp := qparams(dq, self.params)) and dqp.same(q)
        after = self.only_reader(dq.output) if hop else None
        scale = float(q.scale[0])
        if after is None or after.op not in (RELU, CLIP, ADD):
            return {"scale": scale, "_stop": True}
        if after.op in (RELU, CLIP) and not self.keeps(after, scale):
            return {"scale": scale, "_stop": True}
        return {"scale": scale, "_next": dq.output, "dq": dq}


class _QdqLowering:
    """Finds the patterns on the original graph and rebuilds the node list once."""

    def __init__(
        self, graph: Graph, layer_norms: LayerNormCheck | None = None, attentions: AttentionCheck | None = None
    ):
        self.g = graph
        self.layer_norms = layer_norms
        self.attentions = attentions
        self.params = dict(graph.params)
        self.types = infer_types(graph)
        self.prod = graph.producers()
        self.cons = graph.consumers()
        self.removed: set[str] = set()
        self.replace: dict[str, list[Node]] = {}  # output of the last node of a pattern -> its new nodes
        self.alias: dict[str, str] = {}
        self.outputs = set(graph.outputs)
        self.dialect = QdqDialect(graph, self.types, self.params)
        self.param_types = dict(graph.param_types)  # the quantized constants' types (their scale)

    # -- helpers ----------------------------------------------------------------------------------------
    def only_consumer(self, value: str) -> Node | None:
        return self.dialect.only_reader(value)

    def dq_of(self, value: str) -> tuple[str, QParams] | None:
        return self.dialect.dq_of(value)

    def param(self, name: str, value: np.ndarray) -> str:
        key = name
        i = 0
        while key in self.params or key in self.types:
            i += 1
            key = f"{name}_{i}"
        self.params[key] = value
        return key

    # -- patterns ---------------------------------------------------------------------------------------
    def tail(self, anchor: Node) -> _Tail | None:
        """The chain after a float conv/dense that one integer epilogue computes (the float form of
        :mod:`vdla.graph.epilogue` with quantize -> dequantize hops), up to its last quantize: a bias, at most
        one residual add of a dequantized int8 skip (before any ReLU), ReLU or clip, and hops where they keep
        the scale, so that fusing them changes no rounding. A hop before the residual add at another scale
        than the sum's makes the add a rescaled residual (the model rounds twice; the epilogue does too)."""
        m = walk(FLOAT_STAGES, anchor, self.dialect)
        ends = [i for i, st in enumerate(m.steps) if st.stage == "quantize"]
        if not ends:
            return None
        steps = m.steps[: ends[-1] + 1]
        last = steps[-1].node
        nodes = [n for st in steps[:-1] for n in (st.node, st.got.get("dq")) if n is not None] + [last]
        t = _Tail(nodes, last, steps[-1].got["scale"])
        hop = None
        for st in steps:
            if st.stage == "quantize":
                hop = st.got["scale"]
            elif st.stage == "bias":
                t.bias = st.got["bias"]
            elif st.stage == "residual":
                t.skip, t.s_skip = st.got["skip"], st.got["scale"]
                if hop is not None and not (_close(hop, t.s_skip) and self.dialect.keeps(st.node, hop)):
                    t.rounded = (hop, t.lo, t.hi)  # the model rounds the layer's output at the hop's scale
            elif st.stage == "clip":
                t.lo, t.hi = intersect_bounds((t.lo, t.hi), st.got["bounds"])
        return t

    @staticmethod
    def int_bounds(lo: float, hi: float, scale: float) -> tuple[int, int]:
        qlo = INT8_MIN if lo == -np.inf else max(INT8_MIN, int(np.rint(lo / scale)))
        qhi = INT8_MAX if hi == np.inf else min(INT8_MAX, int(np.rint(hi / scale)))
        return qlo, qhi

    def lower_anchor(self, c: Node) -> None:
        """Rewrite one conv2d/dense/conv_transpose (groups 1, or a depthwise conv2d) with QDQ inputs and a
        quantized output, if it matches; its weight is quantized per tensor or per output channel
        (:data:`ANCHOR_AXIS`)."""
        if int(c.attrs.get("groups", 1)) != 1 and not is_depthwise(c, self.types):
            return
        if c.op == CONV2D and c.attrs.get("dilation", 1) not in (1, (1, 1), [1, 1]):
            return
        x, w = self.dq_of(c.inputs[0]), self.dq_of(c.inputs[1])
        if x is None or w is None or not x[1].per_tensor or self.types[x[0]].dtype != "int8":
            return
        (x_q, qx), (w_q, qw) = x, w
        axis = ANCHOR_AXIS[c.op]
        if w_q not in self.params or self.params[w_q].dtype != np.int8 or qw.axis not in (None, axis):
            return
        tail = self.tail(c)
        if tail is None:
            return
        channels = self.params[w_q].shape[axis]
        s_acc = float(qx.scale[0]) * np.broadcast_to(qw.scale, (channels,))
        bias = self.bias_q(c, s_acc, channels) if len(c.inputs) > 2 else None
        if len(c.inputs) > 2 and bias is None:
            return
        if tail.bias is not None:
            extra = np.rint(tail.bias / s_acc).astype(np.int64)
            bias = extra if bias is None else bias + extra
        base, quant = tail.last.output, (tail.scale, 0)
        where = f"{c.op} {c.output!r} (weights {w_q!r}, output {base!r})"
        s_y = tail.scale if tail.rounded is None else tail.rounded[0]
        w_q, bias, m, shift = self.requantization(w_q, axis, s_acc / s_y, bias, f"{where}, s_x * s_w[c] / s_y")
        if tail.rounded is not None:
            ep = self.rescaled(m, shift, bias, tail, where)
            new = epilogue_nodes(c, x_q, w_q, ep, base, self.param, tail.skip, quant)
        else:
            ep = Epilogue(bias, m, int(shift), clip=self.int_bounds(tail.lo, tail.hi, tail.scale))
            skip, before = tail.skip, ()
            if skip is not None and abs(tail.s_skip - tail.scale) > REL_TOL * tail.scale:
                # the skip at the output scale
                before = (self.rescaled_skip(skip, tail.s_skip, tail.scale, base, where),)
                skip = before[0].output
            new = epilogue_nodes(c, x_q, w_q, ep, base, self.param, skip, quant, before)
        self.removed.update(n.output for n in [c, *tail.nodes])
        self.replace[base] = new

    def bias_q(self, c: Node, s_acc: np.ndarray, channels: int) -> np.ndarray | None:
        """The int32 bias at the accumulator's scale (from a dequantized int32 or a float constant)."""
        b = c.inputs[2]
        dq = self.dq_of(b)
        if dq is not None and dq[0] in self.params:
            raw = self.params[dq[0]].astype(np.float64).ravel() * np.broadcast_to(dq[1].scale, (channels,))
        elif b in self.params:
            raw = self.params[b].astype(np.float64).ravel()
        else:
            return None
        q = np.rint(raw / s_acc)
        if np.any(np.abs(q) >= 2**31):
            return None
        return q.astype(np.int64)

    def requantization(
        self, w_q: str, axis: int, real: np.ndarray, bias: np.ndarray | None, where: str
    ) -> tuple[str, np.ndarray | None, np.ndarray, int]:
        """The requantization of a layer whose per-channel scales ``real`` (``s_x * s_w[c] / s_y``) the multipliers
        take (:func:`choose_requantization`): ``(weights, bias, multipliers, shift)``.

        A *negligible* channel, whose scale rounds to a zero multiplier at the layer's shift (a dead channel of
        a trained model, its weight scale near zero: 1e-30 against 1e-2), is computed as the zero channel it all
        but is: its int8 weights are dropped (a copy of ``w_q`` with the channel zeroed), its multiplier is 1 and
        its bias is carried at ``2^-shift`` of an output step, ``round(b * real * 2^shift)``. Its output then
        differs from the model's value ``(acc + b) * real`` before the final rounding by at most
        ``128 * sum|w_q[c]| * real + 2^-(shift + 1)`` output steps (:func:`negligible_bound`), so it is the
        model's rounded output or one step from it, and exactly the zero point where ``|acc + b| * real`` stays
        below half a step for every input. A bound of a step or more is refused, naming the channel."""
        r = np.asarray(real, np.float64)
        tiny = negligible_channels(r)
        if not tiny.any():
            m, shift = choose_requantization(r, where)
            return w_q, bias, m, int(shift)
        m, shift = choose_requantization(np.where(tiny, r.max(), r), where)
        w = self.params[w_q]
        bound = negligible_bound(w, axis, r, shift)
        worst = int(np.argmax(np.where(tiny, bound, -1.0)))
        if bound[worst] >= 1.0:
            raise IsaError(
                f"{where}: channel {worst}'s scale {r[worst]:.4g} is below the multiplier's resolution at shift "
                f"{shift} (the largest scale is {r.max():.4g}), and its int8 weights could still reach "
                f"{bound[worst]:.3g} output steps: it is not negligible"
            )
        b = np.zeros(r.shape, np.int64) if bias is None else np.array(bias, np.int64)
        b[tiny] = np.rint(b[tiny] * r[tiny] * 2.0**shift).astype(np.int64)
        m = np.array(m, np.int64)
        m[tiny] = 1
        live = self.param(f"{w_q}:live", zero_channels(w, axis, tiny))
        return live, (None if bias is None and not b.any() else b), m, int(shift)

    def rescaled(self, m: np.ndarray, shift: int, bias: np.ndarray | None, t: _Tail, where: str) -> Epilogue:
        """The residual add of a QDQ model that rounds the layer's output y at its scale s_y (requantized by ``m``
        and ``shift``) before adding the skip k at s_k and rounding the sum at s_out: y as usual (clamped to its
        bounds), then ``rshift(mul(y, m_y, shift=j_y) + mul(k, m_k, shift=j_k), F)`` with ``F`` fractional bits,
        so each term's rounding error stays below 2^-F of an output step. ``where`` names the layer in errors."""
        s_y, lo_y, hi_y = t.rounded
        r_y, r_k = s_y / t.scale, t.s_skip / t.scale
        frac = int(np.clip(29 - np.ceil(np.log2(128 * (r_y + r_k))), 0, 20))  # |sum| * 2^F stays below 2^29
        (m_y,), j_y = choose_requantization(r_y * 2.0**frac, f"{where}, the output's rescale s_y / s_out")
        (m_k,), j_k = choose_requantization(r_k * 2.0**frac, f"{where}, the skip's rescale s_skip / s_out")
        y_clip = self.int_bounds(lo_y, hi_y, s_y)
        rescale = Rescale(y_clip, int(m_y), int(j_y), int(m_k), int(j_k), frac)
        return Epilogue(bias, m, int(shift), "int8", rescale, self.int_bounds(t.lo, t.hi, t.scale))

    def rescaled_skip(self, skip_q: str, s_k: float, s_out: float, base: str, where: str) -> Node:
        """``mul(skip_q, m_k, shift=s_k)``: the int8 skip at the output scale, as int32."""
        (mk,), sk = choose_requantization(s_k / s_out, f"{where}, the skip {skip_q!r} rescaled: s_skip / s_out")
        return Node("mul", (skip_q,), f"{base}:skip", {"b": int(mk), "shift": int(sk)})

    def lower_matmul(self, c: Node) -> None:
        """``quantize(matmul(dequantize(a_q), dequantize(b_q)))`` of two computed int8 tensors (per-tensor,
        symmetric; a ReLU or clip between them folds into the clamp) -> one ``dense`` per batch index of the
        (broadcast) batch dimensions, ``a[i] (M, K)`` by the run-time weight ``b[i]^T (N, K)`` with the
        requantizing epilogue ``m / 2^s ~ s_a * s_b / s_y``; the (M, N) int8 results concatenated back into
        the batched output."""
        a, b = self.dq_of(c.inputs[0]), self.dq_of(c.inputs[1])
        if a is None or b is None or not (a[1].per_tensor and b[1].per_tensor):
            return
        (a_q, qa), (b_q, qb) = a, b
        if self.types[a_q].dtype != "int8" or self.types[b_q].dtype != "int8" or b_q in self.params:
            return
        tail = self.tail(c)
        if tail is None or tail.bias is not None or tail.skip is not None:
            return
        real = np.array([float(qa.scale[0]) * float(qb.scale[0]) / tail.scale])
        (m,), shift = choose_requantization(real, f"matmul {c.output!r} ({a_q!r} by {b_q!r}), s_a * s_b / s_y")
        out = self.types[c.output].shape
        mult = np.full(out[-1], int(m), np.int64)  # one per output feature, as a dense layer's epilogue holds it
        ep = Epilogue(None, mult, int(shift), clip=self.int_bounds(tail.lo, tail.hi, tail.scale))
        base, quant = tail.last.output, (tail.scale, 0)
        nodes, heads = [], []
        for i, index in enumerate(np.ndindex(*out[:-2])):
            x = self.batch_slice(a_q, index, out, f"{base}:a{i}", nodes)
            w = self.batch_slice(b_q, index, out, f"{base}:b{i}", nodes)
            nodes.append(Node("transpose", (w,), f"{base}:bT{i}", {"perm": (1, 0)}))
            dense = Node("dense", (x, f"{base}:bT{i}"), f"{base}:{i}")
            nodes += epilogue_nodes(dense, x, f"{base}:bT{i}", ep, f"{base}:{i}", self.param, quant=quant)
            heads.append(nodes[-1].output)
        if len(heads) == 1:
            nodes.append(Node("reshape", (heads[0],), base, {"shape": out}))
        else:
            rows = [f"{h}:row" for h in heads]
            nodes += [Node("reshape", (h,), r, {"shape": (1, *out[-2:])}) for h, r in zip(heads, rows, strict=True)]
            nodes += [
                Node("concat", tuple(rows), f"{base}:heads", {"axis": 0}),
                Node("reshape", (f"{base}:heads",), base, {"shape": out}),
            ]
        self.removed.update(n.output for n in [c, *tail.nodes])
        self.replace[base] = nodes

    def batch_slice(self, v: str, index: tuple[int, ...], out: tuple[int, ...], name: str, nodes: list[Node]) -> str:
        """The 2-D matrix of ``v`` (rank >= 2) at batch ``index`` of the broadcast batch ``out[:-2]``."""
        shape = self.types[v].shape
        if len(shape) == 2:
            return v
        lead = index[len(index) - (len(shape) - 2) :]
        at = tuple(i if d > 1 else 0 for i, d in zip(lead, shape[:-2], strict=True))
        nodes.append(
            Node(
                "slice",
                (v,),
                f"{name}:slice",
                {"starts": (*at, 0, 0), "stops": (*(i + 1 for i in at), *shape[-2:]), "steps": (1,) * len(shape)},
            )
        )
        nodes.append(Node("reshape", (f"{name}:slice",), name, {"shape": shape[-2:]}))
        return name

    def lower_commuting(self, q: Node) -> None:
        """``quantize(op(dequantize(x)))`` with one scale -> ``op(x)``; ``quantize(dequantize(x))`` -> x."""
        qq = qparams(q, self.params)
        if qq is None or not qq.per_tensor or q.output in self.replace or q.output in self.removed:
            return
        inner = self.prod.get(q.inputs[0])
        if inner is None or self.only_consumer(inner.output) is not q:
            return
        if inner.op == DEQUANTIZE:
            dq = self.dq_of(inner.output)
            if dq and self.types[dq[0]].dtype == "int8" and dq[1].same(qq) and q.output not in self.outputs:
                self.alias[q.output] = dq[0]
                self.removed.add(q.output)
            return
        if inner.op not in COMMUTING or len(inner.inputs) != 1:
            return
        dq = self.dq_of(inner.inputs[0])
        if dq is None or self.types[dq[0]].dtype != "int8" or not dq[1].same(qq):
            return
        self.removed.update((inner.output, q.output))
        self.replace[q.output] = [Node(inner.op, (dq[0],), q.output, dict(inner.attrs))]

    def lower_global_avg(self, q: Node) -> None:
        """``quantize(global_avg_pool(dequantize(x)))``, per-tensor and symmetric -> ``global_sum_pool(x)``,
        requantized by ``s_x / (H*W*s_y)``, clipped and cast to int8."""
        qq = qparams(q, self.params)
        inner = self.prod.get(q.inputs[0])
        if qq is None or not qq.per_tensor or qq.zero_point != 0 or q.output in self.replace:
            return
        if inner is None or inner.op != GLOBAL_AVG_POOL or self.only_consumer(inner.output) is not q:
            return
        dq = self.dq_of(inner.inputs[0])
        if dq is None or self.types[dq[0]].dtype != "int8" or not dq[1].per_tensor:
            return
        _, _, h, w = self.types[dq[0]].shape
        real = float(dq[1].scale[0]) / (h * w * float(qq.scale[0]))
        (m,), shift = choose_requantization(real, f"global_avg_pool {q.output!r} (of {dq[0]!r}), s_x / (H*W*s_y)")
        base = q.output
        self.removed.update((inner.output, q.output))
        self.replace[q.output] = requantized(Node("global_sum_pool", (dq[0],), f"{base}:sum"), m, shift, qq, base)

    def lower_channel_mul(self, q: Node) -> None:
        """``quantize(mul(dequantize(x), dequantize(s)))`` of an int8 NCHW ``x`` by an int8 per-channel vector
        ``s`` of shape (N, C, 1, 1) (squeeze-excite's product), all per-tensor and symmetric -> ``mul(x, s)``
        (int32, exact) requantized by ``s_x * s_s / s_y``, clipped and cast to int8. The multiplier is at most
        2^31 / 128 (a relative error of 2^-24): times any int8 gate it fits int32, so the accelerator multiplies
        each pixel by ``s * m`` in one MUL, the same exact product rounded once. A product of two tensors of one
        shape is left for the activation tables (hardswish's ``x * hardsigmoid(x)``)."""
        qq = qparams(q, self.params)
        inner = self.prod.get(q.inputs[0])
        if qq is None or not qq.per_tensor or qq.zero_point != 0 or q.output in self.replace:
            return
        if inner is None or inner.op != MUL or len(inner.inputs) != 2 or self.only_consumer(inner.output) is not q:
            return
        dqs = [self.dq_of(v) for v in inner.inputs]
        if any(d is None or self.types[d[0]].dtype != "int8" or not d[1].per_tensor or d[1].zero_point for d in dqs):
            return
        order = channel_product([self.types[d[0]].shape for d in dqs])
        if order is None:
            return
        (x, s_x), (s, s_s) = (dqs[i] for i in order)
        real = float(s_x.scale[0]) * float(s_s.scale[0]) / float(qq.scale[0])
        where = f"channel product {q.output!r} ({x!r} by {s!r}), s_x * s_s / s_y"
        (m,), shift = choose_multipliers(real, -INT8_MIN, MUL_MAX_SHIFT, where)  # m times any int8 gate fits int32
        base = q.output
        self.removed.update((inner.output, q.output))
        self.replace[q.output] = requantized(Node("mul", (x, s), f"{base}:product"), m, shift, qq, base)

    def lower_layer_norm(self, q: Node) -> None:
        """``quantize(layer_norm(dequantize(x)))`` over the last axis of int8 ``x``, per-tensor and symmetric, with
        constant gamma and beta -> ``layer_norm_int(x)`` (:mod:`vdla.graph.layernorm`: within 0.52 output steps of
        the float LayerNorm of the int8 input) where :meth:`IntLayerNorm.of <vdla.graph.layernorm.IntLayerNorm.of>`
        takes its row, epsilon and gamma and ``self.layer_norms`` accepts it (over (tokens, features) rows: an
        ``x`` of (1, tokens, features) is reshaped to them and the output back); else it stays in float
        (:func:`int_layer_norm` or the check names why: the model compiler's placement note)."""
        found = int_layer_norm(q, self.g, self.types, self.params)
        if isinstance(found, str) or q.output in self.replace:
            return
        ln_node, x, p, out_scale = found
        shape = self.types[x].shape
        flat = (int(np.prod(shape[:-1])), shape[-1]) if len(shape) > 2 and all(n == 1 for n in shape[:-2]) else shape
        if self.layer_norms is not None and self.layer_norms(p, flat) is not None:
            return
        rows = tuple(self.param(f"{q.output}:{k}", r) for k, r in zip(("gamma", "beta"), p.rows(), strict=True))
        self.removed.update((ln_node.output, q.output))
        if flat == shape:
            self.replace[q.output] = [layer_norm_node(x, p, q.output, rows, out_scale)]
            return
        # a batch of 1 ahead of the (tokens, features) rows: normalized as the rows, shaped back
        rows_in, rows_out = f"{q.output}:in", f"{q.output}:rows"
        self.replace[q.output] = [
            Node(RESHAPE, (x,), rows_in, {"shape": flat}),
            layer_norm_node(rows_in, p, rows_out, rows, out_scale),
            Node(RESHAPE, (rows_out,), q.output, {"shape": shape}),
        ]

    def lower_constant_rows(self, q: Node) -> None:
        """``quantize(concat(...))`` of constants and dequantized int8 values at ``q``'s scale (per tensor,
        symmetric), at least one constant (the rows of a class token beside the patch rows) -> ``concat`` of the
        constants quantized as ``q`` quantizes them and the int8 values: exact."""
        qq = qparams(q, self.params)
        inner = self.prod.get(q.inputs[0])
        if qq is None or not qq.per_tensor or qq.zero_point != 0 or q.output in self.replace:
            return
        if inner is None or inner.op != CONCAT or self.only_consumer(inner.output) is not q:
            return
        consts = [v for v in inner.inputs if v in self.params and self.params[v].dtype == np.float32]
        computed = [self.dq_of(v) for v in inner.inputs if v not in consts]
        if not consts or any(d is None or self.types[d[0]].dtype != "int8" or not d[1].same(qq) for d in computed):
            return
        scale, parts, found = float(qq.scale[0]), [], iter(computed)
        quant = self.types[computed[0][0]].quant if computed else (scale, 0)
        for v in inner.inputs:
            if v in consts:
                c = np.clip(np.rint(self.params[v].astype(np.float64) / scale), INT8_MIN, INT8_MAX).astype(np.int8)
                parts.append(self.param(f"{v}:q", c))
                self.param_types[parts[-1]] = TensorType(c.shape, "int8", quant)
            else:
                parts.append(next(found)[0])
        self.removed.update((inner.output, q.output))
        self.replace[q.output] = [Node(CONCAT, tuple(parts), q.output, dict(inner.attrs))]

    def lower_attention(self, q: Node) -> None:
        """``quantize`` of an attention block on dequantized int8 views of one value (:func:`int_attention`) ->
        ``attention_int`` (:mod:`vdla.graph.attention`) where :meth:`IntAttention.of
        <vdla.graph.attention.IntAttention.of>` takes its scales and ``self.attentions`` accepts it, the keep
        vector of a run-time mask computed beside it (``greater(mask, kept_above)`` as int8 (1, tokens): one channel a
        key, packed as the program reads it); else the block stays
        in float (the model compiler's placement note names why). The reshapes/transposes of ``q``'s int8 output
        that only it reads (a QDQ model's heads concatenated after the quantize) go into the block, which writes
        their output; a QDQ block replaces the dense layers of its ``P V`` product."""
        walked = self.views_after(q)
        after = tuple(n for n in walked if n.op in (RESHAPE, TRANSPOSE))
        out = walked[-1].output if walked else q.output
        found = int_attention(q, self.g, self.types, self.params, after)
        if not isinstance(found, str) and self.attentions is not None:
            found = self.attentions(found) or found
        if isinstance(found, str) or (q.output in self.replace and found.qdq is None):
            softmax = _qdq_softmax(q, self.prod)
            if isinstance(found, str) and softmax is not None:  # the placement note's reason
                self.replace[softmax.output] = [Node(SOFTMAX, softmax.inputs, softmax.output,
                                                     {**softmax.attrs, REFUSAL: found})]  # fmt: skip
            return
        self.replace.pop(q.output, None)
        self.removed.update(n.output for n in walked)
        nodes, keep = [], None
        if found.keep is not None:
            keep = self.param(f"{q.output}:keep", np.asarray(found.keep, np.int8))
        elif found.mask is not None:
            flat, above = f"{q.output}:mask", f"{q.output}:kept"
            keep = f"{q.output}:keep"
            nodes = [
                Node(RESHAPE, (found.mask,), flat, {"shape": (1, found.tokens)}),
                Node(GREATER, (flat,), above, {"b": found.kept_above}),
                Node(CAST, (above,), keep, {"dtype": "int8"}),
            ]
        self.removed.add(q.output)
        shape = self.types[out].shape
        flat = out if len(shape) == 2 else f"{out}:heads"  # a batch of 1 ahead: reshaped back
        nodes.append(attention_node(found.x, keep, flat, found.d, found.heads, found.scales, found.qdq))
        if flat != out:
            nodes.append(Node(RESHAPE, (flat,), out, {"shape": shape}))
        self.replace[out] = nodes

    def views_after(self, q: Node) -> list[Node]:
        """The nodes after ``q`` up to the last int8 value of its reshapes/transposes, each read only by the next
        (or through a dequantize/quantize pair at ``q``'s scale around them, as a QDQ model writes them), none a
        graph output: those views, and the pairs' nodes."""
        qq, walked, value = qparams(q, self.params), [], q.output
        while (node := self.only_consumer(value)) is not None:
            if node.op in (RESHAPE, TRANSPOSE):
                walked.append(node)
                value = node.output
                continue
            if node.op != DEQUANTIZE or qq is None or not qq.same(qparams(node, self.params)):
                break
            inner, after = [node], self.only_consumer(node.output)
            while after is not None and after.op in (RESHAPE, TRANSPOSE):
                inner.append(after)
                after = self.only_consumer(after.output)
            if len(inner) < 2 or after is None or after.op != QUANTIZE or not qq.same(qparams(after, self.params)):
                break
            walked += [*inner, after]
            value = after.output
        return walked

    def run(self) -> Graph:
        for node in self.g.nodes:
            if node.op in ANCHOR_AXIS and node.output not in self.removed:
                self.lower_anchor(node)
            elif node.op == MATMUL and node.output not in self.removed:
                self.lower_matmul(node)
        for node in self.g.nodes:
            if node.op == QUANTIZE:
                self.lower_global_avg(node)
                self.lower_channel_mul(node)
                self.lower_layer_norm(node)
                self.lower_attention(node)
                self.lower_constant_rows(node)
                self.lower_commuting(node)
        nodes: list[Node] = []
        for node in self.g.nodes:
            if node.output in self.replace:
                nodes += self.replace[node.output]
            elif node.output not in self.removed:
                nodes.append(node)
        nodes = [Node(n.op, tuple(self.resolve(i) for i in n.inputs), n.output, n.attrs) for n in nodes]
        outputs = [self.resolve(o) for o in self.g.outputs]
        graph = self.g.copy(nodes=nodes, outputs=outputs, params=self.params, param_types=self.param_types)
        return eliminate_dead_code(graph)

    def resolve(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name


LAYERS = (CONV2D, DENSE)


def negligible_channels(real: np.ndarray) -> np.ndarray:
    """The channels whose requantization scale rounds to a zero multiplier at the shift the largest scale sets
    (:func:`choose_requantization`), as a mask (none where a scale is not positive and finite or the largest does
    not fit: those are refused)."""
    r = np.asarray(real, np.float64)
    if not np.all(np.isfinite(r) & (r > 0)) or r.max() >= 2**31:
        return np.zeros(r.shape, bool)  # refused by choose_requantization, naming the layer
    shift = choose_requantization(r.max())[1]
    return np.rint(r * 2.0**shift) == 0


def zero_channels(w: np.ndarray, axis: int, mask: np.ndarray) -> np.ndarray:
    """A copy of ``w`` with the channels ``mask`` selects on ``axis`` set to zero."""
    out = w.copy()
    index = [slice(None)] * w.ndim
    index[axis] = np.asarray(mask, bool)
    out[tuple(index)] = 0
    return out


def negligible_bound(w: np.ndarray, axis: int, real: np.ndarray, shift: int) -> np.ndarray:
    """Per output channel (``axis`` of the int8 weights ``w``), in output steps: the most the weights can add,
    ``128 * sum|w[c]| * real[c]`` (an int8 input is at most 128 in magnitude), and the rounding of a bias carried
    at ``2^-shift`` of a step."""
    others = tuple(a for a in range(w.ndim) if a != axis)
    return 128.0 * np.abs(w.astype(np.int64)).sum(axis=others) * np.asarray(real, np.float64) + 2.0 ** -(shift + 1)


def _reshape_after_dq(n: Node, g: Graph, producers, consumers, types) -> Node | None:
    """The symmetric per-tensor dequantize of an int8 value that ``n`` reshapes for layers and adds alone (a residual
    stream flattened for the add in a dense layer's epilogue, :func:`~vdla.graph.passes.sink_reshapes`), or None."""
    src = producers.get(n.inputs[0]) if n.op == RESHAPE else None
    q = qparams(src, g.params) if src is not None else None
    if q is None or src.op != DEQUANTIZE or not q.per_tensor or q.zero_point != 0 or n.output in g.outputs:
        return None
    readers = consumers.get(n.output, [])
    ok = readers and all((r.op in LAYERS and r.inputs[0] == n.output) or r.op == ADD for r in readers)
    return src if ok and types[src.inputs[0]].dtype == "int8" else None


def _quantized_reshape(n: Node, g: Graph, producers, consumers) -> Node | None:
    """The reshape of a layer's output that only the per-tensor quantize ``n`` reads, or None."""
    src = producers.get(n.inputs[0]) if n.op == QUANTIZE else None
    q = qparams(n, g.params)
    if src is None or src.op != RESHAPE or q is None or not q.per_tensor or src.output in g.outputs:
        return None
    inner = producers.get(src.inputs[0])
    return src if inner is not None and inner.op in LAYERS and len(consumers.get(src.output, [])) == 1 else None


def reshapes_inside_qdq(graph: Graph) -> Graph:
    """Move the reshapes that stand between a dense/conv2d layer and its quantize/dequantize nodes to the
    int8 side (the ONNX importer flattens a batched MatMul's input to the dense layer's (M, K) and shapes its
    output back): ``reshape(dequantize(x_q))`` read only by layers and adds becomes ``dequantize(reshape(x_q))``,
    and ``quantize(reshape(layer output))`` becomes ``reshape(quantize(layer output))``. Both are exact (a
    reshape moves no value; the quantization is per tensor) and keep every value's name."""
    types, producers, consumers = infer_types(graph), graph.producers(), graph.consumers()
    taken = set(types)
    nodes: list[Node] = []
    for n in graph.nodes:
        dq = _reshape_after_dq(n, graph, producers, consumers, types)
        rs = _quantized_reshape(n, graph, producers, consumers)
        if dq is not None:
            moved = fresh_name(f"{n.output}:q", taken)
            nodes += [
                Node("reshape", (dq.inputs[0],), moved, n.attrs),
                Node("dequantize", (moved, *dq.inputs[1:]), n.output, dq.attrs),
            ]
        elif rs is not None:
            moved = fresh_name(f"{n.output}:pre", taken)
            nodes = [m for m in nodes if m.output != rs.output]
            nodes += [
                Node("quantize", (rs.inputs[0], *n.inputs[1:]), moved, n.attrs),
                Node("reshape", (moved,), n.output, rs.attrs),
            ]
        else:
            nodes.append(n)
    return graph.copy(nodes=nodes)


def same_scale_pairs(graph: Graph) -> Graph:
    """``quantize(dequantize(x))`` of int8 ``x`` with one scale and zero point (left where a reshape moved out of a
    QDQ pair, :func:`~vdla.graph.passes.sink_reshapes`) read as ``x`` itself, so that a layer's epilogue walks
    through one hop, not two, to the residual add after it. Exact: the pair gives back ``x``."""
    types, producers, params = infer_types(graph), graph.producers(), graph.params
    alias: dict[str, str] = {}
    for q in graph.nodes:
        d = producers.get(q.inputs[0]) if q.op == QUANTIZE and q.output not in graph.outputs else None
        if d is None or d.op != DEQUANTIZE or types[d.inputs[0]].dtype != "int8":
            continue
        qq, dq = qparams(q, params), qparams(d, params)
        if qq is not None and dq is not None and qq.same(dq) and types[q.output].dtype == "int8":
            alias[q.output] = alias.get(d.inputs[0], d.inputs[0])
    if not alias:
        return graph
    nodes = [Node(n.op, tuple(alias.get(i, i) for i in n.inputs), n.output, n.attrs) for n in graph.nodes]
    return eliminate_dead_code(graph.copy(nodes=[n for n in nodes if n.output not in alias]))


def requantized(node: Node, m: int, shift: int, q: QParams, base: str) -> list[Node]:
    """``node`` (an int32 sum or product) -> ``mul(m, shift) -> clip -> cast(int8)`` writing ``base`` at ``q``'s
    scale: the integer requantization the accelerator's ALU runs after a global sum or a channel product."""
    return [
        node,
        Node("mul", (node.output,), f"{base}:scaled", {"b": int(m), "shift": int(shift)}),
        Node("clip", (f"{base}:scaled",), f"{base}:clipped", {"lo": INT8_MIN, "hi": INT8_MAX}),
        Node("cast", (f"{base}:clipped",), base, {"dtype": "int8", "quant": (float(q.scale[0]), 0)}),
    ]


def is_depthwise(node: Node, types) -> bool:
    """Whether ``node`` is a depthwise conv2d: groups = input channels = output channels (weights (C, 1, kh, kw))."""
    if node.op != CONV2D:
        return False
    c, groups = types[node.inputs[0]].shape[1], int(node.attrs.get("groups", 1))
    return groups == c > 1 and tuple(types[node.inputs[1]].shape[:2]) == (c, 1)


def channel_product(shapes: list[tuple[int, ...]]) -> tuple[int, int] | None:
    """For the shapes of a product's two operands: (index of the NCHW feature map, index of the (N, C, 1, 1)
    per-channel vector) when it scales each channel of a feature map of more than one pixel, else None."""
    if len(shapes) != 2 or any(len(t) != 4 for t in shapes):
        return None
    for i in (0, 1):
        x, s = shapes[i], shapes[1 - i]
        if s == (*x[:2], 1, 1) and x[2] * x[3] > 1:
            return i, 1 - i
    return None


def int_layer_norm(
    q: Node, graph: Graph, types: dict[str, TensorType], params: Mapping[str, np.ndarray]
) -> tuple[Node, str, IntLayerNorm, float] | str:
    """The float ``layer_norm`` node that the quantize ``q`` quantizes, the int8 value ``x`` it normalizes (through
    its dequantize), its integer parameters and ``q``'s scale: ``quantize(layer_norm(dequantize(x)))`` over the
    last axis, both quantizations per-tensor and symmetric, gamma and beta constants, the layer_norm read by
    ``q`` alone; or why it is not such a LayerNorm in integers (:meth:`IntLayerNorm.of`'s refusal among them)."""
    node = graph.producers().get(q.inputs[0])
    if node is None or node.op != LAYER_NORM or len(graph.consumers().get(node.output, [])) != 1:
        return "not a quantized layer_norm"
    rank = len(types[node.inputs[0]].shape)
    axis = int(node.attrs.get("axis", -1)) % max(rank, 1)
    if axis != rank - 1:
        return f"layer_norm over axes {axis}.. of rank {rank}: the integer form normalizes the last axis only"
    d = graph.producers().get(node.inputs[0])
    dq, qq = qparams(d, params) if d is not None and d.op == DEQUANTIZE else None, qparams(q, params)
    if dq is None or qq is None or types[d.inputs[0]].dtype != "int8":
        return "layer_norm of a value that is not dequantized int8"
    if not (dq.per_tensor and qq.per_tensor) or dq.zero_point or qq.zero_point:
        return "layer_norm between quantizations that are not per-tensor and symmetric"
    n = types[node.inputs[0]].shape[-1]
    affine = [params.get(v) for v in node.inputs[1:]]
    if any(a is None for a in affine):
        return "layer_norm with a computed gamma or beta"
    gamma = affine[0] if affine else np.ones(n)
    beta = affine[1] if len(affine) > 1 else np.zeros(n)
    try:
        s_in, s_out = float(dq.scale[0]), float(qq.scale[0])
        p = IntLayerNorm.of(n, s_in, s_out, gamma, beta, float(node.attrs["epsilon"]))
    except UnsupportedError as e:
        return str(e)
    return node, d.inputs[0], p, s_out


@dataclass(frozen=True)
class _PatchTokens:
    """A QDQ model's patch embedding beside constant token rows (:func:`patch_tokens`): the ``conv2d`` and its
    input's and weight's dequantizes, the quantize of its output, the nodes from there to the ``concat`` of the
    constant rows, the ``concat``, and after it the quantize, dequantize, ``add`` of a constant and quantize."""

    conv: Node
    x_dq: Node
    w_dq: Node
    q_c: Node
    views: tuple[Node, ...]
    concat: Node
    after: tuple[Node, Node, Node, Node]

    def nodes(self) -> list[Node]:
        return [self.conv, self.q_c, *self.views, self.concat, *self.after]


def _patch_tokens_at(conv: Node, graph: Graph, types: dict[str, TensorType]) -> _PatchTokens | None:
    """The patch embedding of a QDQ model at ``conv`` (:func:`patch_tokens`), or None."""
    prod, cons, params, outputs = graph.producers(), graph.consumers(), graph.params, set(graph.outputs)

    def reader(value: str) -> Node | None:
        return only_reader(value, cons, outputs)

    x_dq, w_dq = prod.get(conv.inputs[0]), prod.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
    qx, qw = (qparams(n, params) if n is not None else None for n in (x_dq, w_dq))
    if qx is None or qw is None or x_dq.op != DEQUANTIZE or w_dq.op != DEQUANTIZE or not qx.per_tensor or qx.zero_point:
        return None
    if w_dq.inputs[0] not in params or params[w_dq.inputs[0]].dtype != np.int8 or qw.axis not in (None, 0):
        return None
    if any(v not in params for v in conv.inputs[2:]) or types[x_dq.inputs[0]].dtype != "int8":
        return None
    if patch_window(conv, types, params[w_dq.inputs[0]].shape) is None:
        return None
    q_c = reader(conv.output)
    qc = qparams(q_c, params) if q_c is not None and q_c.op == QUANTIZE else None
    if qc is None or not qc.per_tensor or qc.zero_point:
        return None
    views, node = [], reader(q_c.output)
    while node is not None and node.op in (QUANTIZE, DEQUANTIZE, RESHAPE, TRANSPOSE):
        qp = qparams(node, params) if node.op in (QUANTIZE, DEQUANTIZE) else qc
        if qp is None or not qc.same(qp):
            return None
        views.append(node)
        node = reader(node.output)
    o, _, _, _ = params[w_dq.inputs[0]].shape
    shapes = [types[v.output].shape for v in views if v.op in (RESHAPE, TRANSPOSE)]
    patches = int(np.prod(types[conv.output].shape[2:]))
    if shapes != [(1, o, patches), (1, patches, o)] or [v.op for v in views][-1] != DEQUANTIZE:
        return None
    if node is None or node.op != CONCAT or int(node.attrs.get("axis", 0)) % 3 != 1:
        return None
    if node.inputs[-1] != views[-1].output or any(v not in params for v in node.inputs[:-1]):
        return None
    after = [reader(node.output)]
    for _ in range(3):
        after.append(reader(after[-1].output) if after[-1] is not None else None)
    if [a.op if a is not None else None for a in after[:3]] != [QUANTIZE, DEQUANTIZE, ADD]:
        return None
    q_add = cons.get(after[2].output, [])
    after[3] = q_add[0] if len(q_add) == 1 and q_add[0].op == QUANTIZE else None
    pos = next((v for v in after[2].inputs if v != after[1].output), None)
    if after[3] is None or pos not in params or types[pos].shape != types[node.output].shape:
        return None
    q_cat, q_add = qparams(after[0], params), qparams(after[3], params)
    if q_cat is None or not qc.same(q_cat) or q_add is None or not q_add.per_tensor:
        return None
    return _PatchTokens(conv, x_dq, w_dq, q_c, tuple(views), node, tuple(after))


def _int8_exact(values: np.ndarray) -> tuple[np.ndarray, float] | None:
    """``values`` (float32) as int8 at one symmetric scale, exactly (a dequantized int8 constant that the import
    folded), or None."""
    v = np.asarray(values, np.float32)
    top = float(np.abs(v).max())
    if top == 0:
        return np.zeros(v.shape, np.int8), 1.0
    for scale in (np.float32(top / 127), np.float32(top / 128)):
        q = np.rint(v / scale)
        if np.abs(q).max() <= 128 and np.array_equal((q.astype(np.float32) * scale).astype(np.float32), v):
            return np.clip(q, -128, 127).astype(np.int8), float(scale)
    return None


def patch_tokens(graph: Graph) -> Graph:
    """Each patch embedding of a QDQ model beside constant token rows (onnxruntime's quantizer on a ViT: a
    ``conv2d`` of a dequantized int8 image whose stride is its kernel, its quantized output flattened and
    transposed to (1, patches, channels) through quantize/dequantize pairs at its scale, a ``concat`` of class
    token rows before it quantized at that scale, a constant added (the position embedding) and quantized) as
    the dense layer over the patches of :func:`~vdla.graph.passes.patch_rows` (its input's int8 rows moved), its
    bias and quantize, the position embedding's rows of the patches added as a dequantized int8 constant (exactly
    the model's float constant) and quantized: the two roundings the model makes, one epilogue with a rescaled
    residual; the constant rows computed here by the model's own nodes and concatenated before the last quantize
    (:meth:`_QdqLowering.lower_constant_rows`). The same values up to the integer epilogue's ties; a graph with no
    such embedding, or one whose position embedding is not an int8 constant dequantized, is returned unchanged."""
    types = infer_types(graph)
    params, taken = dict(graph.params), set(types) | set(graph.params)
    replaced: dict[str, list[Node]] = {}
    dropped: set[str] = set()
    for conv in graph.nodes:
        found = _patch_tokens_at(conv, graph, types) if conv.op == CONV2D else None
        new = _patch_token_nodes(found, graph, types, params, taken) if found is not None else None
        if new is None:
            continue
        dropped.update(n.output for n in found.nodes())
        replaced[found.after[3].output] = new
    if not replaced:
        return graph
    nodes = [m for n in graph.nodes if n.output not in dropped or n.output in replaced
             for m in replaced.get(n.output, [n])]  # fmt: skip
    return eliminate_dead_code(graph.copy(nodes=nodes, params=params))


def _patch_token_nodes(
    f: _PatchTokens, graph: Graph, types: dict[str, TensorType], params: dict[str, np.ndarray], taken: set[str]
) -> list[Node] | None:
    """The nodes replacing ``f`` (:func:`patch_tokens`), their constants added to ``params``; None where the
    position embedding is no dequantized int8 constant."""
    q_cat, dq_cat, add, q_add = f.after
    pos = next(v for v in add.inputs if v != dq_cat.output)
    x_q, w_q = f.x_dq.inputs[0], f.w_dq.inputs[0]
    _, c, h, wd = types[x_q].shape
    o, _, kh, kw = params[w_q].shape
    oh, ow = h // kh, wd // kw
    k = types[f.concat.output].shape[1] - oh * ow  # the constant rows
    exact = _int8_exact(params[pos][0, k:])
    if exact is None:
        return None
    pos_q, s_pos = exact

    def name(suffix: str) -> str:
        n = fresh_name(f"{f.conv.output}:{suffix}", taken)
        taken.add(n)
        return n

    def const(suffix: str, value: np.ndarray) -> str:
        n = name(suffix)
        params[n] = value
        return n

    split, moved, rows, x_dq, w_dq, dense = (name(s) for s in ("split", "moved", "patches", "x_dq", "w_dq", "dense"))
    w2 = const("w", params[w_q].reshape(o, c * kh * kw))
    w_scale = [const("w_scale", np.asarray(params[v], np.float32).reshape(o, 1)) if params[v].size == o else v
               for v in f.w_dq.inputs[1:]]  # fmt: skip
    nodes = [
        Node(RESHAPE, (x_q,), split, {"shape": (c, oh, kh, ow, kw)}),
        Node(TRANSPOSE, (split,), moved, {"perm": (1, 3, 0, 2, 4)}),
        Node(RESHAPE, (moved,), rows, {"shape": (oh * ow, c * kh * kw)}),
        Node(DEQUANTIZE, (rows, *f.x_dq.inputs[1:]), x_dq, dict(f.x_dq.attrs)),
        Node(DEQUANTIZE, (w2, *w_scale), w_dq, dict(f.w_dq.attrs)),
        Node(DENSE, (x_dq, w_dq), dense),
    ]
    last = dense
    if len(f.conv.inputs) > 2:
        nodes.append(Node(ADD, (dense, f.conv.inputs[2]), (last := name("biased"))))
    q_tok, dq_tok, dq_pos, summed, q_sum, dq_sum, cat, q_cat2 = (
        name(s) for s in ("q", "dq", "pos", "sum", "q_sum", "dq_sum", "cat", "rows_q")
    )
    pos_int = const("pos_q", pos_q)
    nodes += [
        Node(QUANTIZE, (last, *f.q_c.inputs[1:]), q_tok, dict(f.q_c.attrs)),
        Node(DEQUANTIZE, (q_tok, *dq_cat.inputs[1:]), dq_tok, dict(dq_cat.attrs)),
        Node(DEQUANTIZE, (pos_int,), dq_pos, {"scale": s_pos, "zero_point": 0}),
        Node(ADD, (dq_tok, dq_pos), summed),
        Node(QUANTIZE, (summed, *q_add.inputs[1:]), q_sum, dict(q_add.attrs)),
    ]
    qa = qparams(q_add, params)
    s_add = float(qa.scale[0])
    nodes.append(Node(DEQUANTIZE, (q_sum,), dq_sum, {"scale": s_add, "zero_point": qa.zero_point}))
    # the constant rows as the model computes them: its own nodes on the concatenation (token rows 0)
    cat_type = types[f.concat.output]
    rows_in = np.concatenate([*(params[v] for v in f.concat.inputs[:-1]), np.zeros((1, oh * ow, o), np.float32)], 1)
    sub = Graph({f.concat.output: cat_type}, list(f.after), [q_add.output], params, dict(graph.param_types))
    first = evaluate(sub, {f.concat.output: rows_in.astype(np.float32)})[q_add.output][:, :k]
    head = ((first[0].astype(np.float32) - qa.zero_point) * np.float32(s_add)).astype(np.float32)
    nodes += [  # (tokens, features) rows, as an accelerator layer's output is stored, then the model's shape
        Node(CONCAT, (const("rows", head), dq_sum), cat, {"axis": 0}),
        Node(QUANTIZE, (cat, *q_add.inputs[1:]), q_cat2, dict(q_add.attrs)),
        Node(RESHAPE, (q_cat2,), q_add.output, {"shape": (1, k + oh * ow, o)}),
    ]
    return nodes


def lower_qdq(
    graph: Graph, layer_norms: LayerNormCheck | None = None, attentions: AttentionCheck | None = None
) -> Graph:
    """Rewrite the QDQ patterns of ``graph`` into integer operators (see the module docstring), after moving
    each row selection of a dequantized value onto its int8 value
    (:func:`~vdla.graph.passes.select_rows_first`) and each patch embedding as token rows (:func:`patch_tokens`),
    the reshapes around its layers inside their quantization
    (:func:`reshapes_inside_qdq`) and reading each
    requantization at the same scale as its int8 input (:func:`same_scale_pairs`). ``layer_norms(p,
    shape)``: why a LayerNorm in integers (parameters ``p``, input shape ``shape``) cannot run where the graph
    is compiled for (None: it can; the model compiler's accelerator check), so that it stays in float; without
    it every one :func:`int_layer_norm` finds is lowered. ``attentions(block)`` likewise for an attention block
    (:func:`int_attention`)."""
    graph = select_rows_first(patch_tokens(graph), (DEQUANTIZE,))  # a selection of a dequantized value: of its int8
    return _QdqLowering(same_scale_pairs(reshapes_inside_qdq(graph)), layer_norms, attentions).run()


@dataclass(frozen=True)
class AttentionBlock:
    """An attention block in integers (:func:`int_attention`): int8 ``x`` (``tokens``, channels) holding every
    head's ``Q``, ``K``, ``V`` as channel views, heads of ``d`` channels (:class:`AttentionHead`: the views, and
    each head's channels of the (tokens, heads x d) output), the scales of
    :func:`~vdla.graph.attention.attention_node`, the parameters ``p``; the mask: ``keep`` a constant keep
    vector, or ``mask`` the float additive mask computed at run time (one value per key; kept where above
    ``kept_above``: half the scores' int8 range in nats below 0, or for a QDQ block midway between its two
    levels), or neither; ``p`` a QDQ model's parameters for its block (:attr:`qdq`)."""

    x: str
    tokens: int
    d: int
    heads: tuple[AttentionHead, ...]
    scales: tuple[float, float, float, float]
    p: IntAttention | QdqAttention
    kept_above: float
    keep: tuple[bool, ...] | None = None
    mask: str | None = None

    @property
    def qdq(self) -> QdqAttention | None:
        """A QDQ model's parameters (its probabilities quantized), or None."""
        return self.p if isinstance(self.p, QdqAttention) else None


# what the per-head split and the concatenation of the heads consist of: selections of elements by constant
# indices (a take with constant indices is torch's ``qkv[0]``), which int_attention replays on element indices
VIEWS = (RESHAPE, TRANSPOSE, SLICE, TAKE)


def int_attention(
    q: Node,
    graph: Graph,
    types: dict[str, TensorType],
    params: Mapping[str, np.ndarray],
    after: tuple[Node, ...] = (),
) -> AttentionBlock | str:
    """The attention block that the quantize ``q`` quantizes, in integers: ``q`` of reshapes/transposes of
    ``matmul(softmax(scores), V)``, the scores :func:`~vdla.graph.attention.softmax_scores` (``matmul(Q, K^T)``
    times a constant, quantized at their own scale, plus at most a per-key mask), ``Q``, ``K``, ``V`` dequantized
    views (reshapes, transposes, slices) of the channels of one int8 (tokens, channels) value at one scale, the
    output the heads side by side (after the reshapes/transposes of ``q``'s int8 output in ``after``, where the
    lowering moved them there); or why it is not one (``"not a quantized attention block"`` where ``q``
    quantizes something else)."""
    prod = graph.producers()
    node, out_views = prod.get(q.inputs[0]), []
    while node is not None and node.op in (RESHAPE, TRANSPOSE):
        out_views.append(node)
        node = prod.get(node.inputs[0])
    sm = prod.get(node.inputs[0]) if node is not None and node.op == MATMUL else None
    if sm is not None and sm.op == DEQUANTIZE:
        out_shape = types[after[-1].output if after else q.output].shape
        return qdq_attention(q, node, graph, types, params, [*after[::-1], *out_views], out_shape)
    scores = softmax_scores(sm, prod, types, params) if sm is not None and sm.op == SOFTMAX else None
    if scores is None:
        return _mask_refusal(sm, prod, types) or "not a quantized attention block"
    qq, sq = qparams(q, params), prod.get(scores.scaled)
    sq = qparams(sq, params) if sq is not None and sq.op == DEQUANTIZE else None
    if qq is None or sq is None or not (qq.per_tensor and sq.per_tensor) or qq.zero_point or sq.zero_point:
        return "attention whose scores or output are not quantized per tensor and symmetric"
    found = [_view_source(v, prod, types, params) for v in (scores.q, scores.k, node.inputs[1])]
    if any(isinstance(f, str) for f in found):
        return next(f for f in found if isinstance(f, str))
    if len({(f[0], round(f[2] / found[0][2], 6)) for f in found}) != 1:
        return "attention whose Q, K and V are not views of one int8 value at one scale"
    x, s_x = found[0][0], found[0][2]
    out_shape = types[after[-1].output if after else q.output].shape
    heads = _heads(found, node, [*after[::-1], *out_views], types, out_shape)
    if isinstance(heads, str):
        return heads
    tokens, d = types[x].shape[0], types[node.inputs[1]].shape[-1]
    s_s, s_y = float(sq.scale[0]), float(qq.scale[0])
    scales = (s_x * scores.scale * float(np.sqrt(d)), s_x, s_s, s_y)
    try:
        p = IntAttention.of(d, scales[0], s_x, s_x, s_s, s_y)
    except UnsupportedError as e:
        return str(e)
    span = 255 * s_s
    if scores.mask is None or scores.mask not in params:
        return AttentionBlock(x, tokens, d, heads, scales, p, -span / 2, mask=scores.mask)
    m = np.asarray(params[scores.mask], np.float64).ravel()
    if np.any((m != 0) & (m > -span)):
        return f"attention with an additive mask of values other than 0 and at most -{span:.4g} (the scores' range)"
    return AttentionBlock(x, tokens, d, heads, scales, p, -span / 2, keep=tuple(bool(v) for v in m == 0))


def _qdq_softmax(q: Node, prod: Mapping[str, Node]) -> Node | None:
    """The softmax of the QDQ attention block whose ``P V`` product ``q`` quantizes (through views), or None."""
    node = prod.get(q.inputs[0])
    while node is not None and node.op in (RESHAPE, TRANSPOSE):
        node = prod.get(node.inputs[0])
    chain = [MATMUL, DEQUANTIZE, QUANTIZE]
    for op in chain:
        if node is None or node.op != op:
            return None
        node = prod.get(node.inputs[0])
    return node if node is not None and node.op == SOFTMAX else None


def qdq_attention(
    q: Node,
    pv: Node,
    graph: Graph,
    types: dict[str, TensorType],
    params: Mapping[str, np.ndarray],
    views: list[Node],
    out_shape: tuple[int, ...],
) -> AttentionBlock | str:
    """The attention block of a QDQ model (onnxruntime's quantizer) that ``q`` quantizes, ``pv`` its ``P V``
    product reading ``dequantize(quantize(softmax(x)))`` (int8 probabilities, symmetric), ``x`` the dequantized
    end of a chain of quantize, dequantize, scalar mul/div and at most one per-key mask add from the quantized
    scores ``quantize(matmul(Q, K^T))``: its :class:`~vdla.graph.attention.QdqAttention` (the chain evaluated on
    every int8 score by the graph's own semantics, once for a kept key and once for a masked one), or why not;
    ``views`` the views from ``pv``'s output to the heads' concatenation of ``out_shape``."""
    prod = graph.producers()
    p_dq = prod[pv.inputs[0]]
    p_q = prod.get(p_dq.inputs[0])
    sm = prod.get(p_q.inputs[0]) if p_q is not None and p_q.op == QUANTIZE else None
    x = types[sm.inputs[0]] if sm is not None and sm.op == SOFTMAX else None
    if x is None or int(sm.attrs.get("axis", -1)) % max(len(x.shape), 1) != len(x.shape) - 1:
        return "not a quantized attention block"
    pp, dq_pp, qq = qparams(p_q, params), qparams(p_dq, params), qparams(q, params)
    if any(v is None or not v.per_tensor or v.zero_point for v in (pp, dq_pp, qq)) or not pp.same(dq_pp):
        return "attention whose probabilities or output are not quantized per tensor and symmetric"
    if types[p_q.output].dtype != "int8":
        return f"attention whose probabilities are {types[p_q.output].dtype}: the accelerator's P is int8"
    chain = _score_chain(sm, prod, types, params)
    if isinstance(chain, str):
        return chain
    nodes, product, mask = chain
    found = [_view_source(v, prod, types, params) for v in (*product.inputs, pv.inputs[1])]
    if any(isinstance(f, str) for f in found):
        return next(f for f in found if isinstance(f, str))
    if len({(f[0], round(f[2] / found[0][2], 6)) for f in found}) != 1:
        return "attention whose Q, K and V are not views of one int8 value at one scale"
    x_name, s_x = found[0][0], found[0][2]
    heads = _heads(found, pv, views, types, out_shape)
    if isinstance(heads, str):
        return heads
    levels = _mask_levels(mask, graph, types) if mask is not None else (0.0, None)
    if isinstance(levels, str):
        return levels
    kept, masked = (_chain_table(nodes, mask, level, graph, types) for level in levels)
    s1, s3, s_p, s_y = (float(qparams(n, params).scale[0]) for n in (nodes[0], prod[sm.inputs[0]], p_q, q))
    tokens, d = types[x_name].shape[0], types[pv.inputs[1]].shape[-1]
    try:
        p = QdqAttention.of(d, s_x * s_x / s1, kept, masked, s3, s_p, s_p * s_x / s_y)
    except (UnsupportedError, IsaError) as e:
        return str(e)
    scales = (s_x, s_x, s3, s_y)
    if mask is None:
        return AttentionBlock(x_name, tokens, d, heads, scales, p, 0.0)
    if mask in params:
        m = np.asarray(params[mask], np.float64).ravel()
        keep = tuple(bool(v) for v in m == levels[0])
        return AttentionBlock(x_name, tokens, d, heads, scales, p, 0.0, keep=keep)
    return AttentionBlock(x_name, tokens, d, heads, scales, p, (levels[0] + levels[1]) / 2, mask=mask)


def _score_chain(
    sm: Node, prod: Mapping[str, Node], types: dict[str, TensorType], params: Mapping[str, np.ndarray]
) -> tuple[list[Node], Node, str | None] | str:
    """The nodes from the quantize of ``matmul(Q, K^T)`` to the quantize ``softmax`` dequantizes (in order), that
    product and the per-key mask added on the way (None: none), or why the softmax's input is no such chain."""
    dq = prod.get(sm.inputs[0])
    node = prod.get(dq.inputs[0]) if dq is not None and dq.op == DEQUANTIZE else None
    nodes, mask, shape = [], None, types[sm.inputs[0]].shape
    while node is not None and len(nodes) < 16:
        nodes.append(node)
        src = prod.get(node.inputs[0])
        if node.op == QUANTIZE and src is not None and src.op == MATMUL:
            q1 = qparams(node, params)
            if q1 is None or not q1.per_tensor or q1.zero_point or types[node.output].dtype != "int8":
                return "attention whose scores are not quantized to int8 per tensor and symmetric"
            if types[src.output].shape != shape:
                return "attention whose scores are not the softmax's shape"
            return nodes[::-1], src, mask
        if node.op == ADD and mask is None and len(node.inputs) == 2:
            keyed = [v for v in node.inputs if per_key(types[v].shape, shape) and types[v].shape != shape]
            if len(keyed) != 1:
                return "attention with a mask of more than one value per key"
            mask = keyed[0]
            node = prod.get(node.inputs[1] if mask == node.inputs[0] else node.inputs[0])
        elif node.op in (QUANTIZE, DEQUANTIZE) and qparams(node, params) is not None:
            node = src
        elif node.op in (MUL, DIV) and scalar_factor(node, params) is not None:
            node = src
        else:
            return f"attention whose scores pass a {node.op} between their quantization and the softmax"
    return "not a quantized attention block"


def _chain_table(
    nodes: list[Node], mask: str | None, level: float | None, graph: Graph, types: dict[str, TensorType]
) -> np.ndarray | None:
    """The int8 softmax input of every int8 score (index ``s + 128``): ``nodes`` after the scores' quantize, the
    table of that cone (:func:`~vdla.graph.tables.table_entries`) with the mask a constant at ``level`` (None: no
    table)."""
    if level is None:
        return None
    if mask is not None:
        graph = graph.copy(params={**graph.params, mask: np.array([level], np.float32)})
    cone = Cone(nodes[0].output, tuple(nodes[1:]), nodes[-1].output)
    return np.roll(table_entries(graph, types, cone).astype(np.int64), 128)  # entry b -> the value's order


def _mask_levels(mask: str, graph: Graph, types: dict[str, TensorType]) -> tuple[float, float] | str:
    """A per-key mask's value at a kept key and at a masked one: a constant's two values (the larger kept), or a
    run-time mask's, computed from the one graph input it depends on (an attention mask: 1 kept, 0 masked)
    through the graph's own nodes; or why the mask has no two such levels."""
    if mask in graph.params:
        values = np.unique(np.asarray(graph.params[mask], np.float64))
        if values.size > 2:
            return f"attention with a constant mask of {values.size} values (a QDQ block takes two: kept, masked)"
        return float(values[-1]), float(values[0])
    prod, wanted, inputs = graph.producers(), {mask}, set()
    stack = [mask]
    while stack:
        node = prod.get(stack.pop())
        for v in node.inputs if node is not None else ():
            if v in graph.inputs:
                inputs.add(v)
            elif v not in graph.params and v not in wanted:
                wanted.add(v)
                stack.append(v)
    if len(inputs) != 1:
        return f"attention with a mask computed from {len(inputs)} model inputs (a QDQ block takes one)"
    name = inputs.pop()
    t = graph.inputs[name]
    sub = graph.copy(nodes=[n for n in graph.nodes if n.output in wanted], inputs={name: t}, outputs=[mask])
    levels = []
    for v in (1, 0):
        out = np.asarray(evaluate(sub, {name: np.full(t.shape, v, np.dtype(t.dtype))})[mask], np.float64)
        if out.size == 0 or np.any(out != out.ravel()[0]):
            return f"attention with a mask that is not one value per level of input {name!r}"
        levels.append(float(out.ravel()[0]))
    if not levels[0] > levels[1]:
        return f"attention with a mask whose masked keys ({levels[1]}) are not below its kept keys ({levels[0]})"
    return levels[0], levels[1]


def _mask_refusal(sm: Node | None, prod: Mapping[str, Node], types: dict[str, TensorType]) -> str | None:
    """Why a softmax over the last axis of scores plus a mask with more than one value per key (a causal or other
    per-query mask) is no integer attention block; None for any other node."""
    add = prod.get(sm.inputs[0]) if sm is not None and sm.op == SOFTMAX else None
    if add is None or add.op != ADD or len(add.inputs) != 2:
        return None
    shape = types[add.output].shape
    rows = [types[v].shape[-2:] for v in add.inputs if len(types[v].shape) >= 2]  # the scores' and the mask's
    if len(rows) != 2 or any(r != shape[-2:] for r in rows) or shape[-2] < 2:
        return None
    return (
        "attention with a mask of one value per query and key (causal or per query): the integer attention takes "
        "a mask of one value per key"
    )


def _view_source(
    value: str, prod: Mapping[str, Node], types: dict[str, TensorType], params: Mapping[str, np.ndarray]
) -> tuple[str, list[Node], float] | str:
    """The int8 (tokens, channels) value that ``value`` views through reshapes, transposes, slices and
    quantize/dequantize at one per-tensor symmetric scale: (that value, the views from it to ``value`` in order,
    the scale); or why there is none."""
    views: list[Node] = []
    src, chain, scale = None, [], None
    v = value
    while (node := prod.get(v)) is not None and node.op in (*VIEWS, QUANTIZE, DEQUANTIZE):
        if node.op == TAKE and (len(node.inputs) > 1 or any(-1 in (t or ()) for t in node.attrs["index"])):
            break  # a take that fills (index -1) does not only select
        if node.op in VIEWS:
            views.append(node)
        else:
            qp = qparams(node, params)
            if qp is None or not qp.per_tensor or qp.zero_point:
                return "attention on Q, K or V not quantized per tensor and symmetric"
            if scale is not None and not _close(scale, float(qp.scale[0])):
                return "attention on Q, K or V requantized between the projection and the product"
            scale = float(qp.scale[0])
        v = node.inputs[0]
        if types[v].dtype == "int8":
            src, chain = v, list(views)
    if src is None or scale is None or len(types[src].shape) != 2:
        return "attention on Q, K or V that are not views of an int8 (tokens, channels) value"
    return src, chain[::-1], scale


def _replay(views: list[Node], shape: tuple[int, ...], types: dict[str, TensorType]) -> np.ndarray:
    """The element indices of a value of ``shape`` after ``views``: where each element of the result comes from
    (int32: an attention block's value is far below 2^31 elements)."""
    idx = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    for node in views:
        idx = evaluate_node(node, [idx], [types[node.inputs[0]]], types[node.output])
    return idx


def _heads(
    found: list, pv: Node, out_views: list[Node], types: dict[str, TensorType], out_shape: tuple[int, ...]
) -> tuple[AttentionHead, ...] | str:
    """Each head's channel offsets of ``Q``, ``K``, ``V`` in their source and of its output in the quantized
    output (:func:`int_attention`), or why the views are not whole channel ranges of one batch."""
    x = found[0][0]
    t, c = types[x].shape
    pv_shape = types[pv.output].shape
    lead = pv_shape[:-2]
    if int(np.prod(lead[:-1])) != 1:
        return f"attention over a batch of {int(np.prod(lead[:-1]))}: the accelerator runs batch 1"
    h, d = (lead[-1] if lead else 1), pv_shape[-1]
    q, k, v = (_replay(f[1], (t, c), types).reshape(-1) for f in found)
    if any(view.size != h * t * d for view in (q, k, v)):
        return f"attention whose Q, K or V are not {h} heads of {t} tokens of the ({t}, {c}) value"
    q, v = q.reshape(h, t, d), v.reshape(h, t, d)
    k = k.reshape(h, d, t).transpose(0, 2, 1)
    base = np.arange(t * c, dtype=np.int64).reshape(t, c)
    offsets = []
    for view in (q, k, v):
        at = [int(view[i, 0, 0]) for i in range(h)]
        if any(a + d > c or not np.array_equal(view[i], base[:, a : a + d]) for i, a in enumerate(at)):
            return "attention whose Q, K or V are not channel ranges of the projection's (tokens, channels) output"
        offsets.append(at)
    out = _replay(out_views[::-1], pv_shape, types)
    pv_idx = np.arange(out.size, dtype=np.int64).reshape(h, t, d)
    if out.ndim > 2 and all(n == 1 for n in out.shape[:-2]):
        out = out.reshape(out.shape[-2:])  # a batch of 1 ahead: the block writes its (tokens, channels)
    if out.shape != (t, h * d) or int(np.prod(out_shape)) != out.size or tuple(out_shape[-2:]) != out.shape:
        return f"attention whose heads are not concatenated into ({t}, {h * d})"
    outs = []
    for i in range(h):
        at = int(np.argwhere(out == pv_idx[i, 0, 0])[0][1])
        if at + d > h * d or not np.array_equal(out[:, at : at + d], pv_idx[i]):
            return "attention whose heads are not concatenated as channel ranges of the output"
        outs.append(at)
    return tuple(AttentionHead(*views) for views in zip(*offsets, outs, strict=True))
