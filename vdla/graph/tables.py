"""Activation tables: every elementwise function of one int8 tensor tabulated: its 256-entry table.

In an int8 network, an elementwise subgraph whose only varying input is one int8 tensor ``x`` and whose result
is int8 has 256 possible inputs: SiLU (``x * sigmoid(x)`` with the quantizations between), sigmoid, tanh,
hardswish, GELU, Mish, ELU, LeakyReLU, clips, requantizations, and any chain of them. :func:`tabulate_chains`
replaces each such subgraph (a *cone*) by one ``table`` node whose entries are the subgraph itself evaluated
by the graph interpreter on the 256 values: the same float32 operators, quantizations and dequantizations as
the graph before it, so the table's result equals that graph's on every input, bit for bit.

Before tabulating, :func:`quantize_early` moves each quantization of a concatenation (or of a max pool,
a slice, a reshape, a transpose or a nearest resize) to its inputs: ``quantize(concat(dequantize(a),
dequantize(b)))`` is ``concat(quantize(dequantize(a)), quantize(dequantize(b)))`` exactly, because
quantization is elementwise and non-decreasing. Each
``quantize(dequantize(a))`` is then a requantization of ``a`` alone, which is tabulated (into the
producing layer's epilogue on the accelerator), and the concatenation runs on int8 values of one scale.

A cone grows from a *source* ``x`` (an int8 graph input or node output) through the elementwise operators of
:data:`vdla.graph.ew.EW` whose tensor operands are ``x``, values of the cone, or parameters of one element, all
of ``x``'s shape; it ends at one int8 value ``y``, every other value it computes read only inside it (and not a
graph output). Of the cones of one source, the one with the most operators is tabulated. An operator with a
per-channel constant (PRelu's slopes, a per-channel scale) is not a function of the value alone and ends the
cone there.

Invariant: the graph after the pass computes the same values as before, bit for bit
(``tests/test_tables.py``: graph interpreter, CPU JIT and onnxruntime's QDQ reference).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from vdla.graph.ew import EW
from vdla.graph.fusion import topological
from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate
from vdla.graph.opnames import CONCAT, DEQUANTIZE, MAX_POOL2D, QUANTIZE, RESHAPE, RESIZE, SLICE, TABLE, TRANSPOSE
from vdla.graph.ops import infer_types
from vdla.graph.passes import eliminate_dead_code
from vdla.graph.types import TensorType

ENTRIES = 256  # int8 inputs: the table's entries (vdla.config.LUT_ENTRIES on the accelerator)
BYTES = np.arange(ENTRIES, dtype=np.uint8).view(np.int8)  # entry b: the int8 value whose byte is b


@dataclass(frozen=True)
class Cone:
    """An elementwise function of ``source`` computed by ``nodes`` (graph order), ending at ``output``."""

    source: str
    nodes: tuple[Node, ...]
    output: str


# operators a quantization moves through to their (first) inputs: they only move, select or compare values
MOVES = (CONCAT, MAX_POOL2D, SLICE, RESHAPE, TRANSPOSE, RESIZE)


def _moves(node: Node) -> bool:
    if node.op == RESIZE:  # nearest only (no interpolation), with no fill value from outside the input
        return node.attrs.get("mode") == "nearest" and node.attrs.get("coordinate_mode") != "tf_crop_and_resize"
    return node.op in MOVES


def quantize_early(graph: Graph) -> Graph:
    """``graph`` with every ``quantize`` of the float output of an operator of :data:`MOVES` (a concat, max
    pool, slice, reshape, transpose or nearest resize) read by nothing else moved to that operator's inputs
    (repeatedly, so through a concat of pools too); an equal quantization of the same value is shared (the
    halves of a split), and a ``quantize`` of a ``dequantize`` of the same scale and zero point becomes the
    int8 value itself."""
    while True:
        moved = _move_one(graph)
        if moved is None:
            return eliminate_dead_code(graph)  # the dequantizes the moved quantizations no longer read
        graph = moved


def _move_one(graph: Graph) -> Graph | None:
    producers, readers, outputs = graph.producers(), graph.consumers(), set(graph.outputs)
    for q in graph.nodes:
        op = producers.get(q.inputs[0]) if q.op == QUANTIZE else None
        if op is None or not _moves(op) or readers.get(op.output) != [q] or op.output in outputs:
            continue
        inputs = op.inputs if op.op == CONCAT else op.inputs[:1]
        new, moved = [], []
        for k, u in enumerate(inputs):
            d = producers.get(u)
            if d is not None and d.op == DEQUANTIZE and _same_quant(d, q):
                moved.append(d.inputs[0])  # quantize(dequantize(a)) of one scale: a itself
                continue
            twin = next((r for r in readers.get(u, []) if r.op == QUANTIZE and _same_quant(r, q)), None)
            if twin is not None:  # an equal quantization of u already exists (the other half of a split)
                moved.append(twin.output)
                continue
            new.append(Node("quantize", (u,), f"{q.output}:{k}", dict(q.attrs)))
            moved.append(new[-1].output)
        rest = op.inputs[len(inputs) :]
        moved_op = Node(op.op, (*moved, *rest), q.output, dict(op.attrs))
        nodes = []
        for n in graph.nodes:
            if n is op:
                continue
            if n is q:
                nodes += [*new, moved_op]
            else:
                nodes.append(n)
        return graph.copy(_in_order(nodes))
    return None


def _in_order(nodes: list[Node]) -> list[Node]:
    """``nodes`` in a topological order, as close to the given one as it allows (a shared quantization may
    stand after a reader the move put before it)."""
    at = {n.output: i for i, n in enumerate(nodes)}
    edges = [(at[i], k) for k, n in enumerate(nodes) for i in n.inputs if i in at]
    return [nodes[i] for i in topological(range(len(nodes)), edges)]


def _same_quant(d: Node, q: Node) -> bool:
    keys = ("scale", "zero_point")
    return all(np.array_equal(np.asarray(d.attrs.get(k, 0)), np.asarray(q.attrs.get(k, 0))) for k in keys)


def tabulate_chains(graph: Graph, result: str = "int8", least: int = 1) -> Graph:
    """``graph`` with every cone (module docstring) replaced by one ``table`` node; the tables are new
    parameters named after their outputs (``<output>:table``). Sources are taken in graph order; a value a
    cone computes (its output included) starts no other cone, so the cones are disjoint and tabulating one
    changes no other value's type: the types are inferred once.

    ``result`` float32 tabulates the cones ending at a float32 value instead, of ``least`` operators or more: the
    dequantized activations of a CPU step (``dequantize -> sigmoid`` of a detector's scores), 256 float32
    entries each (:func:`cpu_tables`)."""
    types, readers = infer_types(graph), graph.consumers()
    index = {n.output: i for i, n in enumerate(graph.nodes)}
    cones: list[Cone] = []
    taken: set[str] = set()
    for source in _sources(graph, types):
        if source not in taken:
            cone = _cone(graph, types, readers, index, source, result)
            taken.update(n.output for n in cone.nodes)
            cones += [cone] if len(cone.nodes) >= max(least, 1) else []
    return _compose(_tabulate(graph, types, cones) if cones else graph)


def _compose(graph: Graph) -> Graph:
    """Each ``table`` of a table's output that nothing else reads composed into one table of the first one's
    input, its entries the two applied in turn (a requantization after an activation a layer's epilogue
    already tables: one table, one epilogue stage)."""
    prod, readers, params = graph.producers(), graph.consumers(), dict(graph.params)
    merged: dict[str, Node] = {}
    for n in graph.nodes:
        first = merged.get(n.inputs[0], prod.get(n.inputs[0])) if n.op == TABLE else None
        if first is None or first.op != TABLE or len(readers[n.inputs[0]]) != 1 or n.inputs[0] in graph.outputs:
            continue
        entries = params[n.inputs[1]][params[first.inputs[1]].view(np.uint8)]
        name = f"{n.output}:table"
        params[name] = entries
        merged[n.output] = Node("table", (first.inputs[0], name), n.output, dict(n.attrs))
    if not merged:
        return graph
    gone = {m.inputs[0] for m in graph.nodes if m.output in merged}
    nodes = [merged.get(n.output, n) for n in graph.nodes if n.output not in gone]
    read = {i for n in nodes for i in n.inputs}
    params = {k: v for k, v in params.items() if k in read}
    return graph.copy(nodes, params=params, param_types={k: t for k, t in graph.param_types.items() if k in params})


def _sources(graph: Graph, types: dict[str, TensorType]) -> list[str]:
    """The int8 values a cone may start from, in graph order."""
    values = [*graph.inputs, *(n.output for n in graph.nodes)]
    return [v for v in values if types[v].dtype == "int8" and types[v].shape]


def _scalar_param(graph: Graph, name: str, rank: int) -> bool:
    return name in graph.params and graph.params[name].size == 1 and graph.params[name].ndim <= rank


def _cone(
    graph: Graph,
    types: dict[str, TensorType],
    readers: dict[str, list[Node]],
    index: dict[str, int],
    source: str,
    result: str = "int8",
) -> Cone:
    """The largest cone of ``source`` (no nodes: there is none): grown through the readers of the values
    inside it, in graph order (a node's inputs come before it, so each is inside or not once it is seen)."""
    shape = types[source].shape
    inside, grown = {source}, []
    ready = [index[r.output] for r in readers.get(source, [])]
    heapq.heapify(ready)
    seen: set[int] = set()
    while ready:
        i = heapq.heappop(ready)
        n = graph.nodes[i]
        if i in seen or n.op not in EW or types[n.output].shape != shape:
            continue
        seen.add(i)
        tensors = [v for v in n.inputs if not _scalar_param(graph, v, len(shape))]
        if all(v in inside for v in tensors):
            grown.append(n)
            inside.add(n.output)
            for r in readers.get(n.output, []):
                heapq.heappush(ready, index[r.output])
    outputs = set(graph.outputs)
    best = Cone(source, (), source)
    for end in reversed(grown):
        if types[end.output].dtype != result:
            continue
        nodes = _ancestors(grown, end)
        own = {n.output for n in nodes}
        closed = all(
            v == end.output or (v not in outputs and all(r.output in own for r in readers.get(v, []))) for v in own
        )
        if closed and len(nodes) > len(best.nodes):
            best = Cone(source, tuple(nodes), end.output)
    return best


def _ancestors(grown: list[Node], end: Node) -> list[Node]:
    """The nodes of ``grown`` that ``end`` depends on (itself included), in graph order."""
    need, keep = {end.output}, []
    for n in reversed(grown):
        if n.output in need:
            keep.append(n)
            need.update(n.inputs)
    return keep[::-1]


def table_entries(graph: Graph, types: dict[str, TensorType], cone: Cone) -> np.ndarray:
    """The cone evaluated by the graph interpreter on the 256 int8 values (entry b: the value whose byte is
    b), in the cone's result dtype."""
    rank = len(types[cone.source].shape)
    shape = (*(1,) * (rank - 1), ENTRIES)
    used = {i for n in cone.nodes for i in n.inputs if i in graph.params}
    mini = Graph(
        {cone.source: TensorType(shape, "int8", types[cone.source].quant)},
        list(cone.nodes),
        [cone.output],
        {p: graph.params[p] for p in used},
        {p: t for p, t in graph.param_types.items() if p in used},
        name=f"{graph.name}:{cone.output}:table",
    )
    y = evaluate(mini, {cone.source: BYTES.reshape(shape)})[cone.output]
    return np.ascontiguousarray(y.reshape(ENTRIES).astype(types[cone.output].dtype))


def _tabulate(graph: Graph, types: dict[str, TensorType], cones: list[Cone]) -> Graph:
    """``graph`` with each cone's nodes replaced by its ``table`` node, where its output was computed."""
    tables, params = {}, dict(graph.params)
    for cone in cones:
        name, q = f"{cone.output}:table", types[cone.output].quant
        params[name] = table_entries(graph, types, cone)
        per_tensor = q is not None and q.axis is None and len(q.scale) == 1 and types[cone.output].dtype == "int8"
        attrs = {"quant": (q.scale[0], q.zero_point)} if per_tensor else {}
        tables[cone.output] = Node("table", (cone.source, name), cone.output, attrs)
    drop = {n.output for cone in cones for n in cone.nodes}
    nodes = [tables.get(n.output, n) for n in graph.nodes if n.output in tables or n.output not in drop]
    read = {i for n in nodes for i in n.inputs}
    params = {k: v for k, v in params.items() if k in read}
    return graph.copy(nodes, params=params, param_types={k: t for k, t in graph.param_types.items() if k in params})


def cpu_tables(graph: Graph) -> Graph:
    """A CPU step's elementwise functions of one int8 value that end in float32, of two operators or more,
    tabulated as float32 tables (a detector's ``sigmoid(dequantize(scores))``): one load an element instead of
    the float math, the same values as the graph interpreter's. A lone dequantize stays (one multiply)."""
    return tabulate_chains(graph, "float32", least=2)
