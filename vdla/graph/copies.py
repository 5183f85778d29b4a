"""Data movement as GEMMs against 0/1 weights: the accelerator adds, selects, repeats and joins int8 tensors.

A convolution whose weights are 0 and 1 moves values without changing them: with the identity block an int8
input comes out as it went in (the accumulator holds the integer, and a requantization by exactly 1 writes it
back). So the operators that stood between accelerator layers on the CPU become accelerator layers, each in
the QDQ form that :func:`vdla.graph.qdq.lower_qdq` already lowers (and whose rounding it keeps). A move is
made only where the data stays on the accelerator (:meth:`_Rewriter.pays`):

* a **residual add after an activation**, ``quantize(add(dequantize(a), dequantize(b)))`` left in float by the
  lowering (no layer's epilogue took it): a 1x1 convolution of ``a`` by the identity, rounded at ``a``'s own
  scale (exactly ``a``), then ``b`` added as a rescaled residual and the sum rounded once;
* a **channel slice** (a split) of an int8 NCHW tensor: a slice of whole channel blocks of a value computed on
  the accelerator (batch 1) stays as it is, a *view*: the layers reading it read its channel blocks where the
  value is stored (``vdla.model.lower``), so nothing is computed or moved. Concatenation parts that are such
  slices putting their value back together in order are that value (:func:`join_slices`: a C2f block's split
  halves, so its first layer stores once into the concatenation). Other slices: where a conv2d layer's output
  is read by channel slices alone, that layer computed again for each slice's channels (no extra MAC);
  otherwise a 1x1 convolution by the selection matrix;
* a **nearest upsampling** by integer factors: a transposed convolution by the identity repeated over a
  ``f_h x f_w`` window with that stride (its stride phases store straight into the result,
  :mod:`vdla.graph.convt`);
* a **channel shuffle** (``reshape -> transpose -> reshape`` of an int8 NCHW tensor that only permutes its
  channels, found by running the three nodes on channel and pixel indices): a 1x1 convolution by the
  permutation matrix; a channel slice of a shuffled value selects straight from the value before the shuffle
  (the slice's rows of the permutation);
* a **channel concatenation**: where every part starts a channel block (all but the last whole blocks), parts
  that are not already a plain convolution's output read by the concatenation alone get a copy (a 1x1 identity
  convolution) that stores into its slice of the result (``vdla.model.lower``; the last part's padding lanes
  are the result's); otherwise the parts are joined by selection convolutions in turn, each adding the
  previous one's result as a residual of the same scale.

Every such convolution carries the attribute ``copy`` (what it moves): it counts no multiply-accumulates of the
network (:func:`vdla.model.cpu_regions.node_macs`), though its GEMM cycles are counted like any layer's.

Invariant: the rewritten graph computes every value as before, bit for bit (each rewrite is exact in float:
products by 1 and sums with 0; the QDQ lowering then rounds as the model does), ``tests/test_copies.py``.
"""

from __future__ import annotations

import numpy as np

from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate_node
from vdla.graph.opnames import (
    ADD,
    CAST,
    CLIP,
    CONCAT,
    CONV2D,
    DEQUANTIZE,
    MAX_POOL2D,
    MUL,
    QUANTIZE,
    RESHAPE,
    RESIZE,
    RSHIFT,
    SLICE,
    TABLE,
    TRANSPOSE,
)
from vdla.graph.ops import RESIZE_OPTIONS, infer_types, resize_type
from vdla.graph.oracle import resize as oracle_resize
from vdla.graph.passes import eliminate_dead_code, fresh_name
from vdla.graph.qdq import qparams
from vdla.graph.types import TensorType

COPY = "copy"  # the attribute naming what a 0/1 convolution moves


def dense_conv(node: Node) -> bool:
    """Whether ``node`` is a conv2d of one group: a layer whose output channels may be sliced or stored into a
    channel-block view (a depthwise layer runs as parts of its own, :mod:`vdla.compiler.blockdiag`)."""
    return node.op == CONV2D and int(node.attrs.get("groups", 1)) == 1


EPILOGUE = (CAST, CLIP, MUL, ADD, RSHIFT)  # the integer epilogue's operators (vdla.graph.epilogue)


class _Rewriter:
    """Collects the replacement nodes of one pass over the graph (each keyed by the node it replaces)."""

    def __init__(self, graph: Graph, block: int):
        self.g, self.block = graph, block
        self.types = infer_types(graph)
        self.prod, self.cons = graph.producers(), graph.consumers()
        self.params = dict(graph.params)
        self.taken = set(self.types) | set(self.params)
        self.replace: dict[str, list[Node]] = {}
        self.shuffled: dict[str, tuple[str, np.ndarray]] = {}  # a shuffle's output -> (its input, permutation)
        self.probed: dict[str, tuple[str, np.ndarray] | None] = {}  # shuffle_of's answers, by node output
        self.in_place: set[str] = set()  # concatenations whose parts all store in place (vdla.model.lower)
        self.viewed: set[str] = set()  # channel slices left as views of their input (vdla.model.lower)

    def name(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def scale(self, value: str) -> float | None:
        """The per-tensor scale of an int8 NCHW value quantized symmetrically (None otherwise)."""
        t = self.types[value]
        q = t.quant
        ok = len(t.shape) == 4 and t.dtype == "int8" and q is not None and len(q.scale) == 1 and q.zero_point == 0
        return float(q.scale[0]) if ok else None

    def dq(self, value: str, scale: float, base: str, nodes: list[Node]) -> str:
        out = self.name(base)
        nodes.append(Node("dequantize", (value,), out, {"scale": scale, "zero_point": 0}))
        return out

    def q(self, value: str, scale: float, out: str, nodes: list[Node]) -> str:
        nodes.append(Node("quantize", (value,), out, {"scale": scale, "zero_point": 0}))
        return out

    def move(
        self, op: str, x: str, w: np.ndarray, what: str, base: str, attrs: dict | None = None
    ) -> tuple[list[Node], str]:
        """The nodes of ``op(dequantize(x), dequantize(w))`` (float; ``w`` an int8 0/1 parameter of scale 1, so
        its float value is ``w`` exactly): the conv or transposed conv that moves ``x``, and its output."""
        raw = self.name(f"{base}:w")
        self.params[raw] = w.astype(np.int8)
        nodes: list[Node] = []
        wf = self.dq(raw, 1.0, f"{base}:wf", nodes)
        xf = self.dq(x, self.scale(x), f"{base}:xf", nodes)
        out = self.name(f"{base}:moved")
        nodes.append(Node(op, (xf, wf), out, {**(attrs or {}), COPY: what}))
        return nodes, out

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
        nodes, conv = self.move("conv2d", a, np.eye(c)[:, :, None, None], "add", base)
        y = self.dq(self.q(conv, s_a, self.name(f"{base}:y"), nodes), s_a, f"{base}:yf", nodes)
        nodes.append(Node("add", (y, node.inputs[1]), node.output))
        self.replace[node.output] = nodes

    def slice(self, node: Node) -> None:
        """A slice of channels ``[start, stop)`` (step 1, every pixel) -> the layer computing only those channels
        (:meth:`split_layer`), else the selection conv (of a shuffle's input where it slices a shuffle)."""
        x = node.inputs[0]
        s = self.scale(x)
        span = self.channels(node)
        if s is None or len(node.inputs) != 1 or span is None or not self.pays([x], node.output):
            return
        if x not in self.shuffled and (self.view(node, span) or self.split_layer(node, span)):
            return
        src, rows = self.shuffled.get(x, (x, np.arange(self.types[x].shape[1])))
        sel = np.eye(self.types[x].shape[1])[rows[span[0] : span[1]], :, None, None]
        nodes, conv = self.move("conv2d", self.read_from(src), sel, "slice", node.output)
        self.q(conv, s, node.output, nodes)
        self.replace[node.output] = nodes

    def channels(self, node: Node) -> tuple[int, int] | None:
        """``(start, stop)`` of a slice of an NCHW tensor's channels alone (step 1, every pixel), else None."""
        return channel_span(node, self.types[node.inputs[0]].shape)

    def view(self, node: Node, span: tuple[int, int]) -> bool:
        """Whether the slice stays a view (:func:`block_view`) of a value computed on the accelerator. Not where
        the layer computing the value may be split instead (:meth:`split_layer`: only slices read it) and a
        slice is requantized (a concatenation part at another scale): the split layers' own epilogues then
        requantize, where a view would need a copy to."""
        x = node.inputs[0]
        if node.output in self.g.outputs or not block_view(span, self.types[x].shape, self.block):
            return False
        readers = self.cons.get(x, [])
        splits = all(r.op == SLICE for r in readers) and self.layer_chain(x) is not None
        if not self.on_accel(x) or (splits and any(self.requantized(r.output) for r in readers)):
            return False
        self.viewed.add(node.output)
        return True

    def requantized(self, v: str) -> bool:
        """Whether a reader of ``v`` maps it to another int8 value: a table, or ``quantize(dequantize(v))``."""
        for r in self.cons.get(v, []):
            if r.op == TABLE or any(self.dq_source_of(q) == v for q in self.cons.get(r.output, [])):
                return True
        return False

    def split_layer(self, node: Node, span: tuple[int, int]) -> bool:
        """Where the sliced value is a conv2d layer's output that only channel slices read (a C2f block's
        split): the layer's epilogue chain again for the slice's channels alone (weights, bias and multipliers
        sliced), so the split costs nothing. False where the chain holds a residual or a reader is no slice."""
        x = node.inputs[0]
        readers = self.cons.get(x, [])
        if x in self.g.outputs or any(r.op != SLICE or self.channels(r) is None for r in readers):
            return False
        chain = self.layer_chain(x)
        if chain is None:
            return False
        lo, hi = span
        nodes, renamed = [], {}
        for n in chain:
            inputs = [renamed.get(i, i) for i in n.inputs]
            for k, i in enumerate(n.inputs):
                p = self.params.get(i)
                axis = 0 if n.op == CONV2D else 1
                if p is not None and p.ndim == 4 and p.shape[axis] > 1:
                    inputs[k] = self.name(f"{node.output}:{i}")
                    self.params[inputs[k]] = np.take(p, np.arange(lo, hi), axis=axis)
            out = node.output if n is chain[-1] else self.name(f"{node.output}:{n.op}")
            renamed[n.output] = out
            nodes.append(Node(n.op, tuple(inputs), out, dict(n.attrs)))
        self.replace[node.output] = nodes
        return True

    def layer_chain(self, v: str) -> list[Node] | None:
        """The nodes from a conv2d to its int8 output ``v`` (an activation table allowed), each read only by the
        next, with no operand but parameters: None otherwise (a residual, a float step)."""
        chain, node = self.walk_back(v, ("table", *EPILOGUE))
        inner = chain[1:]  # each read only by the next; v itself may have several readers
        if any(i not in self.params for n in chain for i in n.inputs[1:]) or any(
            len(self.cons[n.output]) != 1 for n in inner
        ):
            return None
        if (
            node is None
            or not dense_conv(node)
            or len(self.cons[node.output]) != 1
            or node.inputs[1] not in self.params
        ):
            return None
        return [node, *reversed(chain)]

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
        nodes, conv = self.move("conv_transpose", self.read_from(x), w, "upsample", node.output, {"stride": factors})
        self.q(conv, s, node.output, nodes)
        self.replace[node.output] = nodes

    def shuffle(self, node: Node) -> None:
        """A channel shuffle ending at the reshape ``node`` -> the 1x1 conv by its permutation matrix."""
        found = self.shuffle_of(node)
        if found is None or not self.pays([found[0]], node.output):
            return
        x, perm = found
        nodes, conv = self.move(
            "conv2d", self.read_from(x), np.eye(len(perm))[perm, :, None, None], "shuffle", node.output
        )
        self.q(conv, self.scale(x), node.output, nodes)
        self.replace[node.output] = nodes
        self.shuffled[node.output] = (x, perm)

    def shuffle_of(self, node: Node) -> tuple[str, np.ndarray] | None:
        """For the last reshape of ``reshape -> transpose -> reshape`` (each intermediate read by the next
        alone) of an int8 NCHW value ``x`` that only permutes ``x``'s channels: (x, perm) with output channel
        ``j`` = input channel ``perm[j]``, found by running the three nodes on an index tensor; else None.
        Probed once per node (:meth:`pays` asks again for each reader)."""
        if node.output not in self.probed:
            self.probed[node.output] = self.probe_shuffle(node)
        return self.probed[node.output]

    def probe_shuffle(self, node: Node) -> tuple[str, np.ndarray] | None:
        chain = [node]
        for op in (TRANSPOSE, RESHAPE):
            prev = self.prod.get(chain[-1].inputs[0])
            if prev is None or prev.op != op or [n.output for n in self.cons[prev.output]] != [chain[-1].output]:
                return None
            chain.append(prev)
        x = chain[-1].inputs[0]
        shape = self.types[x].shape
        if node.op != RESHAPE or self.scale(x) is None or self.types[node.output].shape != shape:
            return None
        n, c, h, w = shape
        index = value = np.arange(n * c * h * w, dtype=np.int32).reshape(shape)
        for m in reversed(chain):
            value = evaluate_node(m, [value], [TensorType(value.shape, "int32")], self.types[m.output])
        perm = value[0, :, 0, 0] // (h * w) % c
        moved = value - (perm - np.arange(c))[None, :, None, None] * h * w  # each channel back at its own place
        return (x, perm) if np.array_equal(moved, index) else None

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
        if all(c % self.block == 0 for c in sizes[:-1]):  # each part starts a channel block
            self.copy_parts(node, s)
        else:
            self.select_parts(node, s, sizes, out.shape[1])

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
        else:
            self.in_place.add(node.output)

    def copy_of(self, v: str, s: float, base: str) -> list[Node]:
        """The nodes of a copy of ``v`` (int8 at scale ``s``) by the identity conv: of the value ``v``
        requantizes (``quantize(dequantize(src))``, the copy rounding at ``s``), of the value a table maps
        (the table applied after the copy), when ``v``'s function cannot be in its source's epilogue
        (:meth:`alone`), else of ``v`` itself."""
        node, src, table = self.prod.get(v), self.read_from(v), None
        if src == v and node is not None and node.op == TABLE and self.alone(node.inputs[0]):
            src, table = node.inputs[0], node
        c = self.types[src].shape[1]
        nodes, conv = self.move("conv2d", src, np.eye(c)[:, :, None, None], "concat", base)
        self.q(conv, s if table is None else self.scale(src), self.name(base), nodes)
        if table is not None:
            nodes.append(Node("table", (nodes[-1].output, *table.inputs[1:]), self.name(base), dict(table.attrs)))
        return nodes

    def select_parts(self, node: Node, s: float, sizes: list[int], total: int) -> None:
        """Parts not of whole blocks: part ``k`` placed at its channels by a selection conv, the previous parts'
        result added as a residual of the same scale (a part requantizing a value other layers read is selected
        from that value, the requantization in the selection's epilogue)."""
        nodes, first, prev = [], 0, None
        for k, (v, c) in enumerate(zip(node.inputs, sizes, strict=True)):
            v = self.read_from(v)
            sel = np.zeros((total, c, 1, 1))
            sel[first + np.arange(c), np.arange(c)] = 1
            first += c
            moved, conv = self.move("conv2d", v, sel, "concat", f"{node.output}:join{k}")
            nodes += moved
            if prev is not None:
                prev_f = self.dq(prev, s, f"{node.output}:joinf{k}", nodes)
                summed = self.name(f"{node.output}:joinsum{k}")
                nodes.append(Node("add", (conv, prev_f), summed))
                conv = summed
            last = k == len(sizes) - 1
            prev = self.q(conv, s, node.output if last else self.name(f"{node.output}:joined{k}"), nodes)
        self.replace[node.output] = nodes

    # -- helpers ------------------------------------------------------------------------------------------
    def dq_source(self, value: str) -> str | None:
        """The int8 NCHW value ``value`` dequantizes (per tensor, symmetric, the value's own scale)."""
        node = self.prod.get(value)
        q = qparams(node, self.params) if node is not None else None
        if q is None or node.op != DEQUANTIZE or not q.per_tensor or q.zero_point != 0:
            return None
        src = node.inputs[0]
        s = self.scale(src)
        return src if s is not None and np.isclose(s, float(q.scale[0]), rtol=1e-6, atol=0) else None

    def pays(self, sources: list[str], result: str) -> bool:
        """Whether moving on the accelerator keeps data there: every source computed there (:meth:`on_accel`)
        and the result not read by a reshape or transpose (a reordering the CPU would do anyway)."""
        readers = self.cons.get(result, [])
        reorders = [n for n in readers if n.op in (RESHAPE, TRANSPOSE) and not self.starts_shuffle(n)]
        return all(self.on_accel(v) for v in sources) and not reorders

    def starts_shuffle(self, node: Node) -> bool:
        """Whether ``node`` is the first reshape of a channel shuffle (:meth:`shuffle_of`)."""
        nxt = self.cons.get(node.output, [])
        last = self.cons.get(nxt[0].output, []) if len(nxt) == 1 else []
        return node.op == RESHAPE and len(last) == 1 and self.shuffle_of(last[0]) is not None

    def on_accel(self, v: str) -> bool:
        """Whether ``v`` is computed on the accelerator when this pass is done: an integer epilogue's output
        (``cast``), a max pool of such a value, a table or requantization of one, a value this pass moves, a
        concatenation whose parts store in place, or a channel slice left as a view of such a value."""
        node = self.prod.get(v)
        if node is None:
            return False
        if v in self.replace or v in self.in_place or v in self.viewed or node.op == CAST:
            return True
        if node.op == QUANTIZE and node.inputs[0] in self.replace:
            return True
        if node.op == QUANTIZE:
            return self.source(v) != v and self.on_accel(self.source(v))
        return node.op in (TABLE, MAX_POOL2D) and self.on_accel(node.inputs[0])

    def source(self, v: str) -> str:
        """The int8 value ``v`` requantizes (``quantize(dequantize(src))``), else ``v``."""
        node = self.prod.get(v)
        src = self.dq_source(node.inputs[0]) if node is not None and node.op == QUANTIZE else None
        return src if src is not None else v

    def read_from(self, v: str) -> str:
        """The value ``v`` requantizes where that requantization cannot be in its source's epilogue
        (:meth:`alone`: the move then reads the source and requantizes in its own), else ``v``."""
        return self.source(v) if self.alone(self.source(v)) else v

    def alone(self, src: str | None) -> bool:
        """Whether a function of ``src`` (a requantization, a table) cannot be the last stage of the epilogue
        that computes ``src``: ``src`` has other readers, is a graph output, or is not a layer's int8 output."""
        if src is None:
            return False
        readers = {n.output for n in self.cons.get(src, [])}
        node = self.prod.get(src)
        return len(readers) > 1 or src in self.g.outputs or node is None or node.op != CAST

    def only_quantize(self, value: str) -> Node | None:
        readers = self.cons.get(value, [])
        q = qparams(readers[0], self.params) if len(readers) == 1 else None
        ok = q is not None and readers[0].op == QUANTIZE and q.per_tensor and q.zero_point == 0
        return readers[0] if ok and value not in self.g.outputs else None

    def plain_layer_output(self, v: str, concat: Node) -> bool:
        """Whether ``v`` is a conv2d layer's int8 output (a residual, a requantization or an activation table
        in its epilogue allowed; a value this pass moves counts) that only ``concat`` reads: a layer that may
        store into its slice of the result."""
        if self.cons.get(v, []) != [concat] or v in self.g.outputs:
            return False
        node = self.prod.get(v)
        src = node.inputs[0] if node is not None and node.op == TABLE else self.dq_source_of(node)
        if src is None:
            return self.layer_output(v)
        readers = self.cons.get(src, [])
        alone = len(readers) == 1 and len(self.cons.get(readers[0].output, [])) <= 1 and src not in self.g.outputs
        return alone and self.layer_output(src)  # the function is the last stage of src's epilogue

    def dq_source_of(self, node: Node | None) -> str | None:
        """The int8 source of a requantization ``quantize(dequantize(src))`` (None for any other node)."""
        return self.dq_source(node.inputs[0]) if node is not None and node.op == QUANTIZE else None

    def layer_output(self, v: str) -> bool:
        """Whether ``v`` is the int8 output of a conv2d layer (or of the stride phases of one transposed
        convolution, which store into a concatenation alike): a moved slice or upsampling, a moved add's
        quantization, or the end of an integer epilogue."""
        node = self.prod.get(v)
        if node is not None and node.op in (SLICE, RESIZE) and v in self.replace:
            return True
        if node is not None and node.op == QUANTIZE and node.inputs[0] in self.replace:
            return True
        anchor = self.walk_back(v, EPILOGUE)[1]
        return anchor is not None and dense_conv(anchor)

    def walk_back(self, v: str, ops: tuple[str, ...]) -> tuple[list[Node], Node | None]:
        """The nodes of ``ops`` that compute ``v`` along their first inputs (from ``v`` back), and the node
        before them (the anchor of an integer epilogue; None at a graph input)."""
        chain, node = [], self.prod.get(v)
        while node is not None and node.op in ops:
            chain.append(node)
            node = self.prod.get(node.inputs[0])
        return chain, node

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


def channel_span(node: Node, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """``(start, stop)`` of the slice ``node`` of an NCHW tensor of ``shape`` when it slices the channels alone
    (step 1, every pixel), else None."""
    starts, stops, steps = (list(node.attrs[k]) for k in ("starts", "stops", "steps"))
    spatial = len(shape) == 4 and all(starts[i] == 0 and stops[i] >= shape[i] for i in (0, 2, 3))
    return (starts[1], min(stops[1], shape[1])) if spatial and all(st == 1 for st in steps) else None


def block_view(span: tuple[int, int], shape: tuple[int, ...], block: int) -> bool:
    """Whether channels ``span`` of an NCHW value of ``shape`` are whole channel blocks of one image: then they
    lie contiguous in the value's packed layout, and a reader may read them in place."""
    lo, hi = span
    return shape[0] == 1 and lo % block == 0 and (hi % block == 0 or hi == shape[1]) and hi > lo


def join_slices(graph: Graph) -> Graph:
    """The graph with each run of concatenation parts that are channel slices of one value, covering its channels
    in order at its quantization, replaced by that value: exact, the slices put back together. The slices'
    other readers keep them (views where they are whole blocks); those only the concatenation read are
    dropped."""
    types, prod = infer_types(graph), graph.producers()

    def piece(v: str) -> tuple[str, int, int] | None:
        node = prod.get(v)
        if node is None or node.op != SLICE or v in graph.outputs:
            return None
        span = channel_span(node, types[node.inputs[0]].shape)
        return None if span is None else (node.inputs[0], *span)

    def joined(node: Node) -> list[str]:
        parts, k = [], 0
        while k < len(node.inputs):
            first, run = piece(node.inputs[k]), 1
            if first is not None and first[1] == 0:
                x, _, stop = first
                while stop < types[x].shape[1] and k + run < len(node.inputs):
                    nxt = piece(node.inputs[k + run])
                    if nxt is None or nxt[:2] != (x, stop):
                        break
                    stop, run = nxt[2], run + 1
                if stop == types[x].shape[1] and types[x].quant == types[node.output].quant:
                    parts.append(x)
                    k += run
                    continue
            parts.append(node.inputs[k])
            k += 1
        return parts

    nodes, changed = [], False
    for node in graph.nodes:
        if node.op == CONCAT and int(node.attrs.get("axis", 0)) % 4 == 1:
            parts = joined(node)
            if len(parts) != len(node.inputs):
                node, changed = Node(node.op, tuple(parts), node.output, dict(node.attrs)), True
        nodes.append(node)
    return eliminate_dead_code(graph.copy(nodes=nodes)) if changed else graph


REWRITES = {
    "add": _Rewriter.add,
    "slice": _Rewriter.slice,
    "resize": _Rewriter.resize,
    "concat": _Rewriter.concat,
    "reshape": _Rewriter.shuffle,
}


def accelerator_copies(graph: Graph, block: int) -> Graph:
    """The graph with the adds, channel slices, nearest upsamplings and channel concatenations of int8 tensors
    rewritten as 0/1 convolutions in QDQ form (see the module docstring); ``block`` is the accelerator's
    channel block. Run :func:`vdla.graph.qdq.lower_qdq` after it."""
    graph = join_slices(graph)
    rw = _Rewriter(graph, block)
    for node in graph.nodes:
        if node.op in REWRITES:
            REWRITES[node.op](rw, node)
    if not rw.replace:
        return graph
    nodes = [m for n in graph.nodes for m in rw.replace.get(n.output, [n])]
    return eliminate_dead_code(graph.copy(nodes=nodes, params=rw.params))
