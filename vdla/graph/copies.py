"""Data movement as GEMMs against 0/1 weights: the accelerator adds, selects, repeats and joins int8 tensors.

A convolution whose weights are 0 and 1 moves values without changing them: with the identity block an int8
input comes out as it went in (the accumulator holds the integer, and a requantization by exactly 1 writes it
back). So the operators that stood between accelerator layers on the CPU become accelerator layers, each in
the QDQ form that :func:`vdla.graph.qdq.lower_qdq` already lowers (and whose rounding it keeps):

* a **residual add after an activation**, ``quantize(add(dequantize(a), dequantize(b)))`` left in float by the
  lowering (no layer's epilogue took it): a 1x1 convolution of ``a`` by the identity, rounded at ``a``'s own
  scale (exactly ``a``), then ``b`` added as a rescaled residual and the sum rounded once;
* a **channel slice** (a split) of an int8 NCHW tensor: a 1x1 convolution by the selection matrix;
* a **nearest upsampling** by integer factors: a transposed convolution by the identity repeated over a
  ``f_h x f_w`` window with that stride (its stride phases store straight into the result,
  :mod:`vdla.graph.convt`);
* a **channel concatenation**: parts of whole channel blocks that are not already a plain convolution's output
  read by the concatenation alone get a copy (a 1x1 identity convolution) that stores into its slice of the
  result (``vdla.model.lower``); parts that are not whole blocks are joined by a chain of selection
  convolutions, each adding the previous one's result as a residual of the same scale.

Every such convolution carries the attribute ``copy`` (what it moves): it counts no multiply-accumulates of the
network (:func:`vdla.model.lower.node_macs`), though its GEMM cycles are counted like any layer's.

Invariant: the rewritten graph computes every value as before, bit for bit (each rewrite is exact in float:
products by 1 and sums with 0; the QDQ lowering then rounds as the model does), ``tests/test_copies.py``.
"""

from __future__ import annotations

import numpy as np

from vdla.graph.graph import Graph, Node
from vdla.graph.ops import RESIZE_OPTIONS, infer_types, resize_type
from vdla.graph.oracle import resize as oracle_resize
from vdla.graph.passes import eliminate_dead_code, fresh_name
from vdla.graph.qdq import qparams
from vdla.graph.types import TensorType

COPY = "copy"  # the attribute naming what a 0/1 convolution moves


class _Rewriter:
    """Collects the replacement nodes of one pass over the graph (each keyed by the node it replaces)."""

    def __init__(self, graph: Graph, block: int):
        self.g, self.block = graph, block
        self.types = infer_types(graph)
        self.prod, self.cons = graph.producers(), graph.consumers()
        self.params = dict(graph.params)
        self.taken = set(self.types) | set(self.params)
        self.replace: dict[str, list[Node]] = {}

    def name(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def scale(self, value: str) -> float | None:
        """The per-tensor scale of an int8 NCHW value quantized symmetrically (None otherwise)."""
        t = self.types[value]
        q = t.quant
        ok = len(t.shape) == 4 and t.dtype == "int8" and q is not None and len(q.scale) == 1 and q.zero_point == 0
        return float(q.scale[0]) if ok else None

    def weights(self, base: str, w: np.ndarray) -> str:
        """A dequantized int8 0/1 weight parameter (scale 1): its float value is ``w`` exactly."""
        raw = self.name(f"{base}:w")
        self.params[raw] = w.astype(np.int8)
        return self.dq(raw, 1.0, f"{base}:wf", self.pending)

    def dq(self, value: str, scale: float, base: str, nodes: list[Node]) -> str:
        out = self.name(base)
        nodes.append(Node("dequantize", (value,), out, {"scale": scale, "zero_point": 0}))
        return out

    def q(self, value: str, scale: float, out: str, nodes: list[Node]) -> str:
        nodes.append(Node("quantize", (value,), out, {"scale": scale, "zero_point": 0}))
        return out

    def move(self, op: str, x: str, w: np.ndarray, what: str, base: str, attrs: dict | None = None) -> str:
        """``op(dequantize(x), dequantize(w))`` (float): the conv or transposed conv that moves ``x``."""
        self.pending: list[Node] = []
        wf = self.weights(base, w)
        xf = self.dq(x, self.scale(x), f"{base}:xf", self.pending)
        out = self.name(f"{base}:moved")
        self.pending.append(Node(op, (xf, wf), out, {**(attrs or {}), COPY: what}))
        return out

    # -- the rewrites -------------------------------------------------------------------------------------
    def add(self, node: Node) -> None:
        """``quantize(add(dequantize(a), dequantize(b)))`` -> the identity conv of ``a`` rounded at ``a``'s scale,
        plus ``b`` (the lowering's rescaled residual)."""
        if len(node.inputs) != 2 or node.attrs:
            return
        srcs = [self.dq_source(v) for v in node.inputs]
        q = self.only_quantize(node.output)
        if None in srcs or q is None or self.types[srcs[0]].shape != self.types[srcs[1]].shape:
            return
        if not self.pays(srcs, q.output):
            return
        a, b = srcs
        s_a, c = self.scale(a), self.types[a].shape[1]
        base = node.output
        conv = self.move("conv2d", a, np.eye(c)[:, :, None, None], "add", base)
        nodes = self.pending
        y = self.dq(self.q(conv, s_a, self.name(f"{base}:y"), nodes), s_a, f"{base}:yf", nodes)
        nodes.append(Node("add", (y, node.inputs[1]), node.output))
        self.replace[node.output] = nodes

    def slice(self, node: Node) -> None:
        """A slice of channels ``[start, stop)`` (step 1, every pixel) -> the selection conv."""
        x = node.inputs[0]
        s = self.scale(x)
        if s is None or len(node.inputs) != 1 or not self.pays([x], node.output):
            return
        shape = self.types[x].shape
        a = node.attrs
        starts, stops, steps = (list(a[k]) for k in ("starts", "stops", "steps"))
        spatial = all(starts[i] == 0 and stops[i] >= shape[i] for i in (0, 2, 3))
        if not spatial or any(st != 1 for st in steps):
            return
        lo, hi = starts[1], min(stops[1], shape[1])
        sel = np.eye(shape[1])[lo:hi, :, None, None]
        conv = self.move("conv2d", x, sel, "slice", node.output)
        self.replace[node.output] = [*self.pending, *self.requantized(conv, s, node.output)]

    def resize(self, node: Node) -> None:
        """A nearest resize that repeats each pixel ``f_h x f_w`` times -> the identity transposed conv of
        stride ``(f_h, f_w)`` over an ``f_h x f_w`` window."""
        x = node.inputs[0]
        s = self.scale(x)
        pays = s is not None and len(node.inputs) == 1 and self.pays([x], node.output)
        factors = self.repeats(node) if pays else None
        if factors is None:
            return
        c = self.types[x].shape[1]
        w = np.broadcast_to(np.eye(c)[:, :, None, None], (c, c, *factors))
        conv = self.move("conv_transpose", x, w, "upsample", node.output, {"stride": factors})
        self.replace[node.output] = [*self.pending, *self.requantized(conv, s, node.output)]

    def concat(self, node: Node) -> None:
        """A channel concatenation of int8 parts of the result's scale (see the module docstring)."""
        out = self.types[node.output]
        s = self.scale(node.output)
        if s is None or int(node.attrs.get("axis", 0)) % 4 != 1:
            return
        if any(self.scale(v) is None or not np.isclose(self.scale(v), s, rtol=1e-6, atol=0) for v in node.inputs):
            return
        if not self.pays([self.source(v) for v in node.inputs], node.output):
            return
        sizes = [self.types[v].shape[1] for v in node.inputs]
        if all(c % self.block == 0 for c in sizes):
            self.copy_parts(node, s)
        else:
            self.chain(node, s, sizes, out.shape[1])

    def copy_parts(self, node: Node, s: float) -> None:
        """Each part that is not a plain layer's output read by this concatenation alone -> its copy. A part
        that requantizes or tables another value is copied from that value, the function applied by the copy's
        epilogue."""
        nodes, parts, seen = [], [], set()
        for v in node.inputs:
            if v in seen or not self.plain_layer_output(v, node):
                nodes += self.copy_of(v, s, f"{node.output}:part")
                v = nodes[-1].output
            seen.add(v)
            parts.append(v)
        if nodes:
            self.replace[node.output] = [*nodes, Node("concat", tuple(parts), node.output, dict(node.attrs))]

    def copy_of(self, v: str, s: float, base: str) -> list[Node]:
        """The nodes of a copy of ``v`` (int8 at scale ``s``) by the identity conv: of the value ``v``
        requantizes (``quantize(dequantize(src))``, the copy rounding at ``s``), of the value a table maps
        (the table applied after the copy), when ``v``'s function cannot stand in an epilogue (its source has
        other readers), else of ``v`` itself."""
        node = self.prod.get(v)
        src, table = v, None
        if node is not None and node.op == "quantize" and self.shared(self.dq_source(node.inputs[0])):
            src = self.dq_source(node.inputs[0])
        elif node is not None and node.op == "table" and self.shared(node.inputs[0]):
            src, table = node.inputs[0], node
        c = self.types[src].shape[1]
        conv = self.move("conv2d", src, np.eye(c)[:, :, None, None], "concat", base)
        nodes = [*self.pending, *self.requantized(conv, s if table is None else self.scale(src), self.name(base))]
        if table is not None:
            nodes.append(Node("table", (nodes[-1].output, *table.inputs[1:]), self.name(base), dict(table.attrs)))
        return nodes

    def chain(self, node: Node, s: float, sizes: list[int], total: int) -> None:
        """Parts not of whole blocks: part ``k`` placed at its channels by a selection conv, the previous parts'
        result added as a residual of the same scale (a part requantizing a value other layers read is selected
        from that value, the requantization in the selection's epilogue)."""
        nodes, first, prev = [], 0, None
        for k, (v, c) in enumerate(zip(node.inputs, sizes, strict=True)):
            v = self.source(v) if self.shared(self.source(v)) else v  # a requantization: in the epilogue
            sel = np.zeros((total, c, 1, 1))
            sel[first + np.arange(c), np.arange(c)] = 1
            first += c
            conv = self.move("conv2d", v, sel, "concat", f"{node.output}:join{k}")
            nodes += self.pending
            if prev is not None:
                prev_f = self.dq(prev, s, f"{node.output}:joinf{k}", nodes)
                summed = self.name(f"{node.output}:joinsum{k}")
                nodes.append(Node("add", (conv, prev_f), summed))
                conv = summed
            last = k == len(sizes) - 1
            prev = self.q(conv, s, node.output if last else self.name(f"{node.output}:joined{k}"), nodes)
        self.replace[node.output] = nodes

    # -- helpers ------------------------------------------------------------------------------------------
    def requantized(self, value: str, s: float, out: str) -> list[Node]:
        return [Node("quantize", (value,), out, {"scale": s, "zero_point": 0})]

    def dq_source(self, value: str) -> str | None:
        """The int8 NCHW value ``value`` dequantizes (per tensor, symmetric, the value's own scale)."""
        node = self.prod.get(value)
        q = qparams(node, self.params) if node is not None else None
        if q is None or node.op != "dequantize" or not q.per_tensor or q.zero_point != 0:
            return None
        src = node.inputs[0]
        s = self.scale(src)
        return src if s is not None and np.isclose(s, float(q.scale[0]), rtol=1e-6, atol=0) else None

    def pays(self, sources: list[str], result: str) -> bool:
        """Whether moving on the accelerator keeps data there: every source computed there (:meth:`on_accel`)
        and the result not read by a reshape or transpose (a reordering the CPU would do anyway)."""
        readers = self.cons.get(result, [])
        return all(self.on_accel(v) for v in sources) and not any(n.op in ("reshape", "transpose") for n in readers)

    def on_accel(self, v: str) -> bool:
        """Whether ``v`` is computed on the accelerator when this pass is done: an integer epilogue's output
        (``cast``), a max pool of such a value, a table or requantization of one, or a value this pass moves."""
        node = self.prod.get(v)
        if node is None:
            return False
        if v in self.replace or node.op == "cast" or (node.op == "quantize" and node.inputs[0] in self.replace):
            return True
        if node.op == "quantize":
            return self.source(v) != v and self.on_accel(self.source(v))
        return node.op in ("table", "max_pool2d") and self.on_accel(node.inputs[0])

    def source(self, v: str) -> str:
        """The int8 value ``v`` requantizes (``quantize(dequantize(src))``), else ``v``."""
        node = self.prod.get(v)
        src = self.dq_source(node.inputs[0]) if node is not None and node.op == "quantize" else None
        return src if src is not None else v

    def shared(self, src: str | None) -> bool:
        """Whether ``src`` has more readers than one (a function of it then stands alone, not in an epilogue)."""
        readers = {n.output for n in self.cons.get(src, [])} if src is not None else set()
        return len(readers) > 1 or src in self.g.outputs

    def only_quantize(self, value: str) -> Node | None:
        readers = self.cons.get(value, [])
        q = qparams(readers[0], self.params) if len(readers) == 1 else None
        ok = q is not None and readers[0].op == "quantize" and q.per_tensor and q.zero_point == 0
        return readers[0] if ok and value not in self.g.outputs else None

    def plain_layer_output(self, v: str, concat: Node) -> bool:
        """Whether ``v`` is a conv2d layer's int8 output (its epilogue without a residual, an activation table
        allowed) that only ``concat`` reads: a layer that may store into its slice of the result."""
        if self.cons.get(v, []) != [concat] or v in self.g.outputs:
            return False
        node = self.prod.get(v)
        if node is not None and node.op == "table":
            node = self.prod.get(node.inputs[0])
            if node is None or len(self.cons.get(node.output, [])) != 1:
                return False
        while node is not None and node.op in ("cast", "clip", "mul", "add", "rshift"):
            if node.op == "rshift" or (node.op == "add" and node.inputs[1] not in self.params):
                return False  # a residual
            node = self.prod.get(node.inputs[0])
        return node is not None and node.op == "conv2d"

    def repeats(self, node: Node) -> tuple[int, int] | None:
        """(f_h, f_w) when the resize repeats each pixel of an NCHW tensor that many times, checked by
        resizing the pixel indices with the node's own attributes (None otherwise)."""
        a, (n, c, h, w) = node.attrs, self.types[node.inputs[0]].shape
        out = self.types[node.output].shape
        if a.get("mode") != "nearest" or out[:2] != (n, c) or out[2] % h or out[3] % w:
            return None
        fh, fw = out[2] // h, out[3] // w
        index = np.arange(h * w, dtype=np.float32).reshape(1, 1, h, w)
        sizes, scales = (1, 1, *out[2:]), a["scales"]
        options = {k: a[k] for k in RESIZE_OPTIONS if k in a}
        t = TensorType(index.shape, "float32")
        filters, _ = resize_type(t, "nearest", a["coordinate_mode"], a["nearest_mode"], scales, sizes, **options)
        got = oracle_resize(index, filters, scales, sizes, float(a.get("extrapolation_value", 0.0)))
        want = np.repeat(np.repeat(index, fh, axis=2), fw, axis=3)
        return (fh, fw) if np.array_equal(got, want) else None


REWRITES = {"add": _Rewriter.add, "slice": _Rewriter.slice, "resize": _Rewriter.resize, "concat": _Rewriter.concat}


def accelerator_copies(graph: Graph, block: int) -> Graph:
    """The graph with the adds, channel slices, nearest upsamplings and channel concatenations of int8 tensors
    rewritten as 0/1 convolutions in QDQ form (see the module docstring); ``block`` is the accelerator's
    channel block. Run :func:`vdla.graph.qdq.lower_qdq` after it."""
    rw = _Rewriter(graph, block)
    for node in graph.nodes:
        if node.op in REWRITES:
            REWRITES[node.op](rw, node)
    if not rw.replace:
        return graph
    nodes = [m for n in graph.nodes for m in rw.replace.get(n.output, [n])]
    return eliminate_dead_code(graph.copy(nodes=nodes, params=rw.params))
