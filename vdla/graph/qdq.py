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
QuantizeLinear rounds the float mean half to even: within one step of it). Everything else stays in float
with its quantize/dequantize nodes (the CPU fallback runs it exactly as written).
Only symmetric int8 (zero point 0) is lowered.

Invariant: the rewritten graph computes every kept value as the float-between-QDQ semantics does up to
the multiplier's relative error of 2^-31 (a value within that of a rounding boundary may round the other
way; ties round half up where QuantizeLinear rounds half to even); with equal scales it is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vdla.graph.ew import operand_input, operand_value
from vdla.graph.graph import Graph, Node
from vdla.graph.ops import infer_types
from vdla.graph.passes import eliminate_dead_code
from vdla.isa.arith import INT8_MAX, INT8_MIN, choose_requantization

COMMUTING = ("max_pool2d", "reshape", "transpose", "relu")
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
    if node.op not in ("quantize", "dequantize"):
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

    nodes: list[Node] = field(default_factory=list)
    lo: float = -np.inf
    hi: float = np.inf
    activated: bool = False
    skip: str | None = None
    s_skip: float = 0.0
    bias: np.ndarray | None = None  # a float bias added by a separate node
    hop: float | None = None  # the scale of the last quantize -> dequantize hop passed
    last: Node | None = None
    scale: float = 0.0
    rounded: tuple[float, float, float] | None = None  # (scale, lo, hi) of the rounding before a rescaled add


class _Rewriter:
    """Finds the patterns on the original graph and rebuilds the node list once."""

    def __init__(self, graph: Graph):
        self.g = graph
        self.params = dict(graph.params)
        self.types = infer_types(graph)
        self.prod = graph.producers()
        self.cons = graph.consumers()
        self.removed: set[str] = set()
        self.replace: dict[str, list[Node]] = {}  # output of the last node of a pattern -> its new nodes
        self.alias: dict[str, str] = {}
        self.outputs = set(graph.outputs)
        self.index = {n.output: i for i, n in enumerate(graph.nodes)}

    # -- helpers ----------------------------------------------------------------------------------------
    def only_consumer(self, value: str) -> Node | None:
        readers = self.cons.get(value, [])
        return readers[0] if len(readers) == 1 and value not in self.outputs else None

    def dq_of(self, value: str) -> tuple[str, QParams] | None:
        """(int8 source, params) when ``value`` is a symmetric dequantize of an int8 tensor."""
        node = self.prod.get(value)
        q = qparams(node, self.params) if node is not None else None
        if q is None or node.op != "dequantize" or q.zero_point != 0:
            return None
        src = node.inputs[0]
        return (src, q) if self.types[src].dtype in ("int8", "int32") else None

    def param(self, name: str, value: np.ndarray) -> str:
        key = name
        i = 0
        while key in self.params or key in self.types:
            i += 1
            key = f"{name}_{i}"
        self.params[key] = value
        return key

    # -- patterns ---------------------------------------------------------------------------------------
    def tail(self, value: str, anchor: int) -> _Tail | None:
        """The chain after a float conv/dense output ``value`` that one integer epilogue computes: ReLU or
        clip, at most one residual add of a dequantized int8 skip (before any ReLU), and quantizations in
        between (``quantize -> dequantize`` hops) where they keep the scale, so that fusing them changes no
        rounding; the chain ends at the last such quantize. An add joins the
        epilogue of the layer computed last (node index ``anchor`` here), whose skip is then ready."""
        t = _Tail()
        last_q: Node | None = None
        while True:
            node = self.only_consumer(value)
            if node is None or node.inputs[0] != value and node.op != "add":
                break
            if node.op in ("relu", "clip") and node.inputs[0] == value:
                if node.op == "relu":
                    t.lo = max(t.lo, 0.0)
                else:
                    lo, hi = operand_value(node, "lo", self.params), operand_value(node, "hi", self.params)
                    if lo is None or hi is None:
                        break
                    t.lo, t.hi = max(t.lo, float(lo)), min(t.hi, float(hi))
                t.activated = True
            elif node.op == "add" and not t.nodes and t.bias is None and self.float_param(node, value) is not None:
                t.bias = self.float_param(node, value)  # a separate bias add right after the layer
            elif node.op == "add" and t.skip is None and not t.activated and len(node.inputs) == 2:
                other = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
                skip = self.dq_of(other)
                if skip is None or not skip[1].per_tensor or self.types[skip[0]].dtype != "int8":
                    break
                if self.types[skip[0]].shape != self.types[value].shape:
                    break
                if self.index.get(skip[0], -1) > anchor:  # the skip is computed after this layer: the add
                    break  # belongs to the epilogue of the layer computing the other operand
                if t.hop is not None and not (_close(t.hop, float(skip[1].scale[0])) and self.add_keeps(node, t.hop)):
                    # the model rounds the layer's output at the hop's scale, then the sum at the add's:
                    # the epilogue does both roundings (a rescaled residual)
                    t.rounded, t.lo, t.hi = (t.hop, t.lo, t.hi), -np.inf, np.inf
                t.skip, t.s_skip = skip[0], float(skip[1].scale[0])
            elif node.op == "quantize":
                q = qparams(node, self.params)
                if q is None or not q.per_tensor or q.zero_point != 0:
                    break
                t.nodes.append(node)
                last_q = node
                snap = (t.lo, t.hi, t.skip, t.s_skip, t.rounded, len(t.nodes))
                dq = self.only_consumer(node.output)
                hop = dq is not None and dq.op == "dequantize" and (dqp := qparams(dq, self.params)) and dqp.same(q)
                after = self.only_consumer(dq.output) if hop else None
                if not hop or after is None or after.op not in ("relu", "clip", "add"):
                    break
                if after.op in ("relu", "clip") and not self.add_keeps(after, float(q.scale[0])):
                    break  # the model rounds at this scale, then again at another after the ReLU: stop here
                t.nodes.append(dq)
                t.hop = float(q.scale[0])
                value = dq.output
                continue
            else:
                break
            t.nodes.append(node)
            value = node.output
        if last_q is None:
            return None
        t.lo, t.hi, t.skip, t.s_skip, t.rounded, n = snap  # the state when the last quantize was reached
        t.nodes = t.nodes[:n]
        t.last = last_q
        t.scale = float(self.qparam_of(last_q).scale[0])
        return t

    @staticmethod
    def int_bounds(lo: float, hi: float, scale: float) -> tuple[int, int]:
        qlo = INT8_MIN if lo == -np.inf else max(INT8_MIN, int(np.rint(lo / scale)))
        qhi = INT8_MAX if hi == np.inf else min(INT8_MAX, int(np.rint(hi / scale)))
        return qlo, qhi

    def lower_anchor(self, c: Node) -> None:
        """Rewrite one conv2d/dense with QDQ inputs and a quantized output, if it matches."""
        conv = c.op == "conv2d"
        if conv and (int(c.attrs.get("groups", 1)) != 1 or c.attrs.get("dilation", 1) not in (1, (1, 1), [1, 1])):
            return
        x, w = self.dq_of(c.inputs[0]), self.dq_of(c.inputs[1])
        if x is None or w is None or not x[1].per_tensor or self.types[x[0]].dtype != "int8":
            return
        (x_q, qx), (w_q, qw) = x, w
        if w_q not in self.params or self.params[w_q].dtype != np.int8 or qw.axis not in (None, 0):
            return
        tail = self.tail(c.output, self.index[c.output])
        if tail is None:
            return
        channels = self.params[w_q].shape[0]
        s_acc = float(qx.scale[0]) * np.broadcast_to(qw.scale, (channels,))
        bias = self.bias_q(c, s_acc, channels) if len(c.inputs) > 2 else None
        if len(c.inputs) > 2 and bias is None:
            return
        if tail.bias is not None:
            extra = np.rint(tail.bias / s_acc).astype(np.int64)
            bias = extra if bias is None else bias + extra
        s_out, lo, hi, last = tail.scale, tail.lo, tail.hi, tail.last
        skip_q, s_k = tail.skip, tail.s_skip
        if tail.rounded is not None:
            new = self.rescaled_nodes(c, x_q, w_q, bias, s_acc, conv, tail)
        else:
            m, shift = choose_requantization(s_acc / s_out)
            new = self.epilogue_nodes(c, x_q, w_q, bias, (m, shift), conv, skip_q, s_k, s_out, lo, hi, last)
        self.removed.update(n.output for n in [c, *tail.nodes])
        self.replace[last.output] = new

    def add_keeps(self, add: Node, scale: float) -> bool:
        """Whether the quantize after ``add`` (or a ReLU) uses ``scale``: then fusing it into the integer
        epilogue is exact (one rounding, as the model has)."""
        q = self.only_consumer(add.output)
        qp = qparams(q, self.params) if q is not None else None
        return qp is not None and q.op == "quantize" and qp.per_tensor and _close(float(qp.scale[0]), scale)

    def float_param(self, node: Node, value: str) -> np.ndarray | None:
        """The constant ``node`` adds to ``value`` when it is one float per channel (a bias): a float
        parameter, or the dequantization of an integer one."""
        if len(node.inputs) != 2:
            return None
        other = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
        shape = self.types[value].shape
        dq = self.dq_of(other)
        if dq is not None and dq[0] in self.params:
            raw, scale = self.params[dq[0]].astype(np.float64), dq[1].scale
            p = raw * (scale.reshape(raw.shape) if scale.size == raw.size else scale)
        elif other in self.params and self.params[other].dtype == np.float32:
            p = self.params[other].astype(np.float64)
        else:
            return None
        if p.ndim > len(shape):
            return None
        aligned = (1,) * (len(shape) - p.ndim) + p.shape
        if aligned[1] != shape[1] or any(d != 1 for i, d in enumerate(aligned) if i != 1):
            return None
        return p.ravel()

    def qparam_of(self, node: Node) -> QParams:
        q = qparams(node, self.params)
        assert q is not None  # checked by the matchers
        return q

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

    def epilogue_nodes(self, c, x_q, w_q, bias, requant, conv, skip_q, s_k, s_out, lo, hi, last) -> list[Node]:
        """conv2d/dense -> add(bias) -> mul(m, shift) -> [add(skip)] -> clip -> cast, named after ``last``."""
        m, shift = requant
        base, shape = last.output, ((1, -1, 1, 1) if conv else (1, -1))
        acc = f"{base}:acc"
        nodes = [Node(c.op, (x_q, w_q), acc, {k: v for k, v in c.attrs.items() if k not in ("groups", "dilation")})]
        if bias is not None:
            b = self.param(f"{base}:bias", bias.astype(np.int32).reshape(shape))
            nodes.append(Node("add", (nodes[-1].output, b), f"{base}:biased"))
        mult = self.param(f"{base}:mult", m.astype(np.int32).reshape(shape))
        nodes.append(Node("mul", (nodes[-1].output, mult), f"{base}:shifted", {"shift": int(shift)}))
        if skip_q is not None:
            shifted = nodes[-1].output
            skip = skip_q
            if abs(s_k - s_out) > REL_TOL * s_out:  # rescale the skip to the output scale (int32)
                nodes += self.rescaled_skip(skip_q, s_k, s_out, base)
                skip = nodes[-1].output
            nodes.append(Node("add", (shifted, skip), f"{base}:sum"))
        qlo, qhi = self.int_bounds(lo, hi, s_out)
        nodes.append(Node("clip", (nodes[-1].output,), f"{base}:clipped", {"lo": qlo, "hi": qhi}))
        nodes.append(Node("cast", (nodes[-1].output,), base, {"dtype": "int8", "quant": (s_out, 0)}))
        return nodes

    def rescaled_nodes(self, c: Node, x_q: str, w_q: str, bias, s_acc: np.ndarray, conv: bool, t: _Tail) -> list[Node]:
        """The residual add of a QDQ model that rounds the layer's output y at its scale s_y before adding the
        skip k at s_k and rounding the sum at s_out: y as usual (clamped to its bounds), then
        ``rshift(mul(y, m_y, shift=j_y) + mul(k, m_k, shift=j_k), F)`` with ``F`` fractional bits, so each
        term's rounding error stays below 2^-F of an output step."""
        s_y, lo_y, hi_y = t.rounded
        m, shift = choose_requantization(s_acc / s_y)
        nodes = self.epilogue_nodes(c, x_q, w_q, bias, (m, shift), conv, None, 0.0, s_y, lo_y, hi_y, t.last)[:-2]
        base = t.last.output
        ylo, yhi = self.int_bounds(lo_y, hi_y, s_y)
        nodes.append(Node("clip", (nodes[-1].output,), f"{base}:y", {"lo": ylo, "hi": yhi}))
        r_y, r_k = s_y / t.scale, t.s_skip / t.scale
        frac = int(np.clip(29 - np.ceil(np.log2(128 * (r_y + r_k))), 0, 20))  # |sum| * 2^F stays below 2^29
        (m_y,), j_y = choose_requantization(r_y * 2.0**frac)
        (m_k,), j_k = choose_requantization(r_k * 2.0**frac)
        qlo, qhi = self.int_bounds(t.lo, t.hi, t.scale)
        return nodes + [
            Node("mul", (nodes[-1].output,), f"{base}:y_scaled", {"b": int(m_y), "shift": int(j_y)}),
            Node("mul", (t.skip,), f"{base}:skip", {"b": int(m_k), "shift": int(j_k)}),
            Node("add", (f"{base}:y_scaled", f"{base}:skip"), f"{base}:sum"),
            Node("rshift", (f"{base}:sum",), f"{base}:rounded", {"shift": frac}),
            Node("clip", (f"{base}:rounded",), f"{base}:clipped", {"lo": qlo, "hi": qhi}),
            Node("cast", (f"{base}:clipped",), base, {"dtype": "int8", "quant": (t.scale, 0)}),
        ]

    def rescaled_skip(self, skip_q: str, s_k: float, s_out: float, base: str) -> list[Node]:
        """``mul(skip_q, m_k, shift=s_k)``: the int8 skip at the output scale, as int32."""
        (mk,), sk = choose_requantization(s_k / s_out)
        return [Node("mul", (skip_q,), f"{base}:skip", {"b": int(mk), "shift": int(sk)})]

    def lower_commuting(self, q: Node) -> None:
        """``quantize(op(dequantize(x)))`` with one scale -> ``op(x)``; ``quantize(dequantize(x))`` -> x."""
        qq = qparams(q, self.params)
        if qq is None or not qq.per_tensor or q.output in self.replace or q.output in self.removed:
            return
        inner = self.prod.get(q.inputs[0])
        if inner is None or self.only_consumer(inner.output) is not q:
            return
        if inner.op == "dequantize":
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
        if inner is None or inner.op != "global_avg_pool" or self.only_consumer(inner.output) is not q:
            return
        dq = self.dq_of(inner.inputs[0])
        if dq is None or self.types[dq[0]].dtype != "int8" or not dq[1].per_tensor:
            return
        _, _, h, w = self.types[dq[0]].shape
        (m,), shift = choose_requantization(float(dq[1].scale[0]) / (h * w * float(qq.scale[0])))
        base = q.output
        self.removed.update((inner.output, q.output))
        self.replace[q.output] = [
            Node("global_sum_pool", (dq[0],), f"{base}:sum"),
            Node("mul", (f"{base}:sum",), f"{base}:scaled", {"b": int(m), "shift": int(shift)}),
            Node("clip", (f"{base}:scaled",), f"{base}:clipped", {"lo": INT8_MIN, "hi": INT8_MAX}),
            Node("cast", (f"{base}:clipped",), base, {"dtype": "int8", "quant": (float(qq.scale[0]), 0)}),
        ]

    def run(self) -> Graph:
        for node in self.g.nodes:
            if node.op in ("conv2d", "dense") and node.output not in self.removed:
                self.lower_anchor(node)
        for node in self.g.nodes:
            if node.op == "quantize":
                self.lower_global_avg(node)
                self.lower_commuting(node)
        nodes: list[Node] = []
        for node in self.g.nodes:
            if node.output in self.replace:
                nodes += self.replace[node.output]
            elif node.output not in self.removed:
                nodes.append(node)
        nodes = [Node(n.op, tuple(self.resolve(i) for i in n.inputs), n.output, n.attrs) for n in nodes]
        outputs = [self.resolve(o) for o in self.g.outputs]
        return eliminate_dead_code(self.g.copy(nodes=nodes, outputs=outputs, params=self.params))

    def resolve(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name


def lower_qdq(graph: Graph) -> Graph:
    """Rewrite the QDQ patterns of ``graph`` into integer operators (see the module docstring)."""
    return _Rewriter(graph).run()
