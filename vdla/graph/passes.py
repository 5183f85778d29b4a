"""Graph simplification passes: each takes a :class:`Graph` and returns a new one computing the same
outputs (under the same names), which :func:`vdla.graph.verify.verify` accepts.

* :func:`remove_identities`: nodes that compute their input unchanged (a reshape to the same shape, the
  identity permutation, zero padding, a one-input concatenation, a cast to the same type) are dropped;
  their readers read the input instead;
* :func:`fold_batch_norm`: a ``batch_norm`` right after a float conv2d or dense whose output nothing
  else reads, with constant weights and statistics, is folded into the weights and bias; any other
  ``batch_norm`` with constant statistics becomes a per-channel ``mul`` and ``add`` with (1, C, 1, ...)
  parameters (one with computed statistics stays: the CPU path refuses it; the ONNX frontend writes those
  out with sqrt and div);
* :func:`fold_constants`: a node whose inputs are all parameters is evaluated (:mod:`vdla.graph.interp`)
  and becomes a parameter, except a ``dequantize`` producing the weight of a conv2d, conv_transpose, dense
  or matmul: that int8 weight is what the quantized lowering (:mod:`vdla.graph.qdq`) consumes;
* :func:`fuse_layer_norm`: layer normalization written out (mean, deviation, squared by a product or a
  ``pow`` of 2, mean, plus epsilon, square root, division, then optionally times a scale and plus a bias)
  becomes one ``layer_norm`` node;
* :func:`patch_rows`: a patch embedding (a conv2d whose stride is its kernel, flattened and transposed to
  (1, patches, channels): a ViT's tokens) becomes a dense layer over the patches as rows, the tokens token-major
  as every dense layer stores them;
* :func:`sink_reshapes`: a reshape of a (rows, columns) value keeping the columns as its last axis (a
  MatMul flattened into a dense layer, unflattened) moves after the elementwise nodes reading it over
  constants of one element, of the last axis or of the value's shape (its bias add, activation,
  quantizations, a position embedding's add), and a reshape of a reshape reads the first one's input, so the
  dense layer's bias, activation and the next layer's flattening meet it with no reshape between;
* :func:`merge_projections`: float dense layers over one input (the same value, or reshapes of it to one
  shape), each feeding a product of two computed values (attention's separate query, key and value
  projections; after :func:`sink_reshapes`, each bias add right after its layer), become one dense layer with
  their weights and biases side by side, each former output a slice of its columns (the form an attention export
  with one QKV projection has);
* :func:`constant_rows_first`: a row-wise node reading a concatenation of constant tokens (a class token, a
  distillation token) and one computed value along the tokens computes the constant rows at compile time and
  the computed ones alone (the position embedding's add, the first LayerNorm), the concatenation after it, as
  (rows, columns) values;
* :func:`select_rows_first`: a ``take`` or ``slice`` of whole rows moves before the row-wise nodes computing its
  input (a LayerNorm over the last axis, elementwise nodes over constants the rows share, a per-tensor
  quantization) and before a reshape adding leading axes of one, so those nodes compute the selected rows alone
  (a classifier's class token normalized alone, selected from the last layer's (tokens, features) output);
* :func:`eliminate_dead_code`: nodes and parameters no graph output depends on are dropped;
* :func:`simplify`: identities, constants, batch norms, layer norms, patch embeddings, reshapes, projections,
  constant rows, selections, dead code (constants before batch norms: their statistics may be constant
  expressions, e.g. dequantized in a QDQ model), each verified when asked (or with ``VDLA_VERIFY=1``).

Graph inputs and graph output names never change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from vdla.graph.ew import EW
from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate_node
from vdla.graph.opnames import (
    ADD,
    BATCH_NORM,
    CAST,
    CONCAT,
    CONV2D,
    CONV_TRANSPOSE,
    DENSE,
    DEQUANTIZE,
    DIV,
    GLOBAL_AVG_POOL,
    LAYER_NORM,
    MATMUL,
    MUL,
    PAD,
    POW,
    QUANTIZE,
    REDUCE,
    RESHAPE,
    RMS_NORM,
    SLICE,
    SQRT,
    SUB,
    TAKE,
    TRANSPOSE,
)
from vdla.graph.ops import infer, infer_types, norm_type
from vdla.graph.types import TensorType, UnsupportedError
from vdla.graph.verify import maybe_verify
from vdla.graph.window import make_window

Pass = Callable[[Graph], Graph]


def _rename_inputs(nodes: list[Node], alias: dict[str, str]) -> list[Node]:
    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    return [Node(n.op, tuple(resolve(i) for i in n.inputs), n.output, n.attrs) for n in nodes]


def is_identity(node: Node, types: dict[str, TensorType]) -> bool:
    """Whether ``node`` returns its first input unchanged (same shape, dtype and values)."""
    x = types[node.inputs[0]] if node.inputs else None
    out = types.get(node.output)
    if x is None or out is None or x != out:
        return False
    a = node.attrs
    if node.op == RESHAPE:
        return True
    if node.op == TRANSPOSE:
        return tuple(a["perm"]) == tuple(range(len(x.shape)))
    if node.op == PAD:
        return all(int(p) == 0 for pair in a["pads"] for p in pair)
    if node.op == CONCAT:
        return len(node.inputs) == 1
    if node.op == CAST:
        return a.get("dtype") == x.dtype and "quant" not in a
    return False


def remove_identities(graph: Graph) -> Graph:
    """Drop identity nodes (see :func:`is_identity`). One defining a graph output is kept unless its
    input comes from a node that can take the output's name (no graph input, parameter or other output)."""
    types = infer_types(graph)
    outputs = set(graph.outputs)
    producers = graph.producers()
    alias: dict[str, str] = {}  # removed output -> its input
    rename: dict[str, str] = {}  # node output -> the graph output name it takes
    for node in graph.nodes:
        if not is_identity(node, types):
            continue
        src = node.inputs[0]
        while src in alias:
            src = alias[src]
        if node.output not in outputs:
            alias[node.output] = src
        elif src in producers and src not in outputs and src not in rename:
            rename[src] = node.output
            alias[node.output] = src
    nodes = [n for n in graph.nodes if n.output not in alias]
    nodes = _rename_inputs(nodes, alias)
    nodes = [
        Node(n.op, tuple(rename.get(i, i) for i in n.inputs), rename.get(n.output, n.output), n.attrs) for n in nodes
    ]
    return graph.copy(nodes=nodes)


def _channel_shape(rank: int) -> tuple[int, ...]:
    return (1, -1) + (1,) * (rank - 2)


def _bn_factors(node: Node, params: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (k, shift) of ``y = x * k + shift`` in float64, or None if a statistic is computed."""
    stats = node.inputs[1:]
    if not all(s in params for s in stats):
        return None
    scale, bias, mean, var = (params[s].astype(np.float64) for s in stats)
    k = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
    return k, bias - mean * k


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first name not in ``taken`` (which it joins)."""
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold inference batch norms into the preceding float conv2d/dense, or rewrite them as mul + add."""
    types = infer_types(graph)
    producers = graph.producers()
    readers = Counter(i for n in graph.nodes for i in n.inputs)
    readers.update(graph.outputs)
    params = dict(graph.params)
    taken = set(types) | set(graph.params)
    replaced: dict[str, list[Node]] = {}  # output of a node -> the nodes that take its place
    dropped: set[str] = set()
    for bn in graph.nodes:
        if bn.op != BATCH_NORM:
            continue
        factors = _bn_factors(bn, params)
        x = bn.inputs[0]
        rank = len(types[x].shape)
        prev = producers.get(x)
        foldable = (
            factors is not None
            and prev is not None
            and prev.op in (CONV2D, DENSE)
            and readers[x] == 1
            and types[x].dtype == "float32"
            and prev.inputs[1] in params
            and (len(prev.inputs) < 3 or prev.inputs[2] in params)
            and prev.output not in dropped
        )
        if foldable:
            k, shift = factors
            w = params[prev.inputs[1]].astype(np.float64)
            w = w * k.reshape((-1,) + (1,) * (w.ndim - 1))
            b = params[prev.inputs[2]].astype(np.float64) if len(prev.inputs) > 2 else 0.0
            wname = fresh_name(f"{bn.output}:weight", taken)
            bname = fresh_name(f"{bn.output}:bias", taken)
            params[wname] = w.astype(np.float32)
            params[bname] = (b * k + shift).astype(np.float32)
            dropped.add(prev.output)
            replaced[bn.output] = [Node(prev.op, (prev.inputs[0], wname, bname), bn.output, dict(prev.attrs))]
            continue
        if factors is None:  # computed statistics (the ONNX frontend writes those out itself): left as it is
            continue
        k, shift = factors
        kname = fresh_name(f"{bn.output}:scale", taken)
        sname = fresh_name(f"{bn.output}:shift", taken)
        params[kname] = k.astype(np.float32).reshape(_channel_shape(rank))
        params[sname] = shift.astype(np.float32).reshape(_channel_shape(rank))
        scaled = fresh_name(f"{bn.output}:scaled", taken)
        replaced[bn.output] = [Node("mul", (x, kname), scaled), Node("add", (scaled, sname), bn.output)]
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.output in dropped:
            continue
        nodes += replaced.get(n.output, [n])
    return graph.copy(nodes=nodes, params=params)


def fold_constants(graph: Graph) -> Graph:
    """Evaluate every node whose inputs are all parameters into a parameter (see the module docstring
    for the quantized weights kept as nodes)."""
    keep: set[str] = set()
    for n in graph.nodes:
        if n.op in (CONV2D, CONV_TRANSPOSE, DENSE, MATMUL) and len(n.inputs) > 1:
            keep.add(n.inputs[1])
    producers = graph.producers()
    keep = {v for v in keep if v in producers and producers[v].op == DEQUANTIZE}
    types = infer_types(graph)
    params = dict(graph.params)
    param_types = dict(graph.param_types)
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.inputs and n.output not in keep and all(i in params for i in n.inputs):
            value = evaluate_node(n, [params[i] for i in n.inputs], [types[i] for i in n.inputs], types[n.output])
            params[n.output] = np.ascontiguousarray(value).reshape(value.shape)  # a 0-d value stays 0-d
            if types[n.output].quant is not None:
                param_types[n.output] = types[n.output]
            continue
        nodes.append(n)
    return graph.copy(nodes=nodes, params=params, param_types=param_types)


def _mean_axes(node: Node | None, types: dict[str, TensorType]) -> tuple[int, ...] | None:
    """The axes a float mean keeping its reduced axes (``reduce`` or ``global_avg_pool``) averages over."""
    if node is None or types[node.output].dtype != "float32":
        return None
    a = node.attrs
    if node.op == REDUCE and a.get("kind") == "mean" and a.get("keepdims", True):
        rank = len(types[node.inputs[0]].shape)
        return tuple(sorted(int(i) % rank for i in a["axes"]))
    return (2, 3) if node.op == GLOBAL_AVG_POOL else None


def _epsilon(node: Node | None, value: str, params: dict[str, np.ndarray]) -> float | None:
    """The finite, non-negative epsilon an ``add`` adds to ``value``: its scalar attribute or a one-element
    parameter; None for anything else."""
    if node is None or node.op != ADD or value not in node.inputs:
        return None
    others = [i for i in node.inputs if i != value]
    if not others and "b" in node.attrs:
        eps = float(node.attrs["b"])
    elif len(others) == 1 and others[0] in params and params[others[0]].size == 1:
        eps = float(params[others[0]].reshape(()))
    else:
        return None
    return eps if np.isfinite(eps) and eps >= 0 else None


class _Uses:
    """Who reads each value: :meth:`only` is the one node (of operator ``op``) reading a value that is no
    graph output."""

    def __init__(self, graph: Graph) -> None:
        self.readers = graph.consumers()
        self.outputs = set(graph.outputs)

    def only(self, value: str, op: str) -> Node | None:
        nodes = self.readers.get(value, [])
        ok = len(nodes) == 1 and nodes[0].op == op and value not in self.outputs
        return nodes[0] if ok else None


def _squares(node: Node | None, value: str, params: dict[str, np.ndarray]) -> bool:
    """Whether ``node`` squares ``value``: ``value * value``, or ``value ** 2`` (an exporter's Pow, the
    exponent an attribute or a one-element parameter)."""
    if node is None or node.inputs[0] != value:
        return False
    if node.op == MUL:
        return node.inputs == (value, value)
    if node.op != POW:
        return False
    if len(node.inputs) == 1:
        return float(node.attrs.get("y", 0)) == 2.0
    e = params.get(node.inputs[1])
    return len(node.inputs) == 2 and e is not None and e.size == 1 and float(e.reshape(())) == 2.0


def _layer_norm_chain(div: Node, producers: dict[str, Node], types: dict[str, TensorType], uses: _Uses, params):
    """The nodes ``mean, d = x - mean, d * d, mean, + eps, sqrt, d / sqrt`` ending at ``div``, with ``x``,
    the axes and epsilon, when each intermediate is read by the next step only; else None."""
    if div.op != DIV or len(div.inputs) != 2:
        return None
    d, std = (producers.get(i) for i in div.inputs)
    if d is None or std is None or d.op != SUB or std.op != SQRT or len(d.inputs) != 2:
        return None
    x, mean = d.inputs[0], producers.get(d.inputs[1])
    axes = _mean_axes(mean, types)
    if not axes or mean.inputs[0] != x or axes != tuple(range(axes[0], len(types[x].shape))):
        return None
    ve = producers.get(std.inputs[0])
    var = producers.get(ve.inputs[0]) if ve is not None else None
    sq = producers.get(var.inputs[0]) if var is not None else None
    if not _squares(sq, d.output, params) or _mean_axes(var, types) != axes:
        return None
    eps = _epsilon(ve, var.output, params)
    d_readers = {n.output for n in uses.readers[d.output]}
    if eps is None or d_readers != {sq.output, div.output} or d.output in uses.outputs:
        return None
    chain = [mean, d, sq, var, ve, std, div]
    singly_read = all(uses.only(a.output, b.op) is b for a, b in zip(chain, chain[1:], strict=False) if a is not d)
    return (chain, x, axes, eps) if singly_read else None


def _layer_norm_match(
    div: Node, producers: dict[str, Node], types: dict[str, TensorType], uses: _Uses, params: dict[str, np.ndarray]
) -> tuple[list[Node], Node] | None:
    """The nodes of a layer normalization ending at ``div``, extended by the multiplication with a scale
    tensor and then the addition of a bias tensor where they follow (and broadcast to ``x``), and the
    ``layer_norm`` node computing the same value; None where ``div`` ends none."""
    found = _layer_norm_chain(div, producers, types, uses, params)
    if found is None:
        return None
    chain, x, axes, eps = found
    affine: list[str] = []
    for op in (MUL, ADD):  # the scale, then the bias
        nxt = uses.only(chain[-1].output, op)
        others = [i for i in nxt.inputs if i != chain[-1].output] if nxt is not None else []
        if len(others) != 1 or len(nxt.inputs) != 2:
            break
        try:
            norm_type(LAYER_NORM, [types[i] for i in (x, *affine, others[0])], axes[0])
        except UnsupportedError:
            break
        affine.append(others[0])
        chain.append(nxt)
    return chain, Node(LAYER_NORM, (x, *affine), chain[-1].output, {"axis": axes[0], "epsilon": eps})


def fuse_layer_norm(graph: Graph) -> Graph:
    """Each layer normalization written out as ``d = x - mean(x)``, ``d * d`` (or ``d ** 2``), its mean,
    ``+ epsilon``, ``sqrt``, ``d / that`` (the means over the same trailing axes, keeping them; every
    intermediate read by the next step only), then optionally ``* scale`` and ``+ bias`` (tensors
    broadcasting to ``x``), becomes one ``layer_norm`` node with the same float semantics (computed in
    float64, rounded once)."""
    types = infer_types(graph)
    uses = _Uses(graph)
    producers = graph.producers()
    dropped: set[str] = set()
    fused: dict[str, Node] = {}
    for node in graph.nodes:
        match = _layer_norm_match(node, producers, types, uses, graph.params) if node.output not in dropped else None
        if match is None:
            continue
        chain, ln = match
        dropped.update(n.output for n in chain)
        fused[ln.output] = ln
    if not fused:
        return graph
    nodes = [fused.get(n.output, n) for n in graph.nodes if n.output not in dropped or n.output in fused]
    return graph.copy(nodes=nodes)


def _row_operand(value: str, params: dict[str, np.ndarray], rank: int, last: int) -> np.ndarray | None:
    """The constant ``value`` as an operand of rank at most ``rank`` broadcasting along the last axis only
    (one element, or ``last`` elements on the last axis), or None where it is not such a constant."""
    p = params.get(value)
    if p is None or (p.size != 1 and (p.ndim == 0 or p.shape[-1] != last or p.size != last)):
        return None
    return p if p.ndim <= rank else p.reshape(p.shape[-1:] if p.size == last else ())


def _sink_one(graph: Graph, types: dict[str, TensorType], producers: dict[str, Node], node: Node) -> Graph | None:
    """``graph`` with the elementwise or row-wise ``node`` computed before the reshapes it reads and one reshape
    after it (:func:`sink_reshapes`; ``types`` gains the new values'), or None where it cannot be: a tensor
    input that is neither such a reshape (all of one (rows, columns) input shape, keeping the columns), nor a
    value of the node's output shape (reshaped to (rows, columns) before it), nor a constant of one element, of
    the last axis or of the output's shape."""
    shapes = {
        (types[producers[v].inputs[0]].shape, types[v].shape)
        for v in node.inputs
        if v in producers and producers[v].op == RESHAPE
    }
    if not _sinks(node, types) or len(shapes) != 1:
        return None
    ((x, y),) = shapes
    if len(x) != 2 or not y or x[-1] != y[-1] or types[node.output].shape != y:
        return None
    params, inputs, flattened = dict(graph.params), [], []
    for v in node.inputs:
        if v in producers and producers[v].op == RESHAPE and types[producers[v].inputs[0]].shape == x:
            inputs.append(producers[v].inputs[0])
            continue
        if v not in params and types[v].shape == y:  # the residual stream: reshaped to (rows, columns) here
            flat = fresh_name(f"{v}{FLAT}", set(params) | set(types))
            flattened.append(Node(RESHAPE, (v,), flat, {"shape": x}))
            types[flat] = TensorType(x, types[v].dtype, types[v].quant)
            inputs.append(flat)
            continue
        p = _row_operand(v, params, len(x), x[-1])
        if p is None and v in params and params[v].shape == y:  # a constant of the value's shape, reshaped too
            p = params[v].reshape(x)
        if p is None:
            return None
        if p is not params[v]:
            v = fresh_name(f"{v}:row", set(params) | set(types))
            params[v] = p
        inputs.append(v)
    flat = fresh_name(f"{node.output}{FLAT}", set(params) | set(types))
    attrs = dict(node.attrs, axis=len(x) - 1) if node.op in ROW_WISE else dict(node.attrs)
    moved = Node(node.op, tuple(inputs), flat, attrs)
    for v in inputs:  # the new values' types: the reshaped constants' and the moved node's
        if v not in types:
            types[v] = TensorType.of(params[v], v)
    types[flat] = infer(moved, [types[v] for v in inputs], params)
    nodes = list(graph.nodes)
    at = nodes.index(node)
    nodes[at : at + 1] = [moved, Node(RESHAPE, (flat,), node.output, {"shape": y})]
    for r in flattened:  # right after the value it reshapes: computed as early as that value (a layer's skip)
        src = producers.get(r.inputs[0])
        nodes.insert(nodes.index(src) + 1 if src is not None else 0, r)
    return graph.copy(nodes=nodes, params=params)


FLAT = ":flat"  # the suffix of a value sink_reshapes computes on (rows, columns) instead of the value's shape
ROW_WISE = (LAYER_NORM, RMS_NORM)  # functions of each row of their normalized axes (sink_reshapes: the last)


def _sinks(node: Node, types: dict[str, TensorType]) -> bool:
    """Whether :func:`sink_reshapes` may move ``node`` before a reshape keeping the last axis: an elementwise
    node, or a LayerNorm/RMSNorm over the last axis alone."""
    if node.op in ROW_WISE:
        rank = len(types[node.inputs[0]].shape)
        return rank > 0 and int(node.attrs.get("axis", -1)) % rank == rank - 1
    return node.op in EW


VIEWS_AND_SCALES = (RESHAPE, TRANSPOSE, SLICE, TAKE, MUL, DIV, ADD)  # between a projection and its product


def _projection(node: Node, graph: Graph, producers: dict[str, Node]) -> tuple | None:
    """(source, shape) of a float dense layer ``node`` with a constant weight (and bias, if it has one), whose
    input is ``source`` itself (shape None) or its reshape to ``shape``; None for any other node."""
    if node.op != DENSE or not all(i in graph.params and i not in graph.param_types for i in node.inputs[1:]):
        return None
    r = producers.get(node.inputs[0])
    return (r.inputs[0], tuple(r.attrs["shape"])) if r is not None and r.op == RESHAPE else (node.inputs[0], None)


def _bias_add(dense: Node, graph: Graph, readers: dict[str, list[Node]], uses: Counter) -> Node | None:
    """The add of a constant bias of the dense layer's columns that alone reads the output of ``dense`` (one
    without a bias input), or None."""
    found = readers.get(dense.output, [])
    if len(dense.inputs) > 2 or uses[dense.output] != 1 or len(found) != 1:
        return None
    add, width = found[0], graph.params[dense.inputs[1]].shape[0]
    b = graph.params.get(add.inputs[1]) if add.op == ADD and len(add.inputs) == 2 else None
    return add if add.inputs[0] == dense.output and b is not None and b.shape == (width,) else None


def _feeds_product(value: str, graph: Graph, readers: dict[str, list[Node]]) -> bool:
    """Whether ``value`` reaches a matmul of two computed values through views and elementwise nodes with
    constant operands only (a query, key or value on its way to attention's products)."""
    todo, seen = [value], set()
    while todo:
        v = todo.pop()
        for n in readers.get(v, []):
            if n.op == MATMUL and not any(i in graph.params for i in n.inputs):
                return True
            if n.op in VIEWS_AND_SCALES and all(i in graph.params for i in n.inputs[1:]) and n.output not in seen:
                seen.add(n.output)
                todo.append(n.output)
    return False


def merge_projections(graph: Graph) -> Graph:
    """Merge the float dense layers over one input that each feed a product of two computed values (module
    docstring): one dense layer with the weights (and biases, zero where one has none) concatenated along the
    output columns, each former output (the dense layer's, or its bias add's) a slice of those columns, under
    its own name. Exact: the columns of a product are the products of the weight's rows."""
    producers, readers = graph.producers(), graph.consumers()
    uses = Counter(i for n in graph.nodes for i in n.inputs)
    uses.update(graph.outputs)
    groups: dict[tuple, list[tuple[Node, Node | None]]] = {}
    for n in graph.nodes:
        source = _projection(n, graph, producers)
        add = _bias_add(n, graph, readers, uses) if source else None
        if source and _feeds_product((add or n).output, graph, readers):
            groups.setdefault(source, []).append((n, add))
    groups = {k: g for k, g in groups.items() if len(g) > 1}
    return _merged(graph, list(groups.values())) if groups else graph


def _bias(dense: Node, add: Node | None, params: dict[str, np.ndarray]) -> np.ndarray | None:
    """The bias of a projection: its dense layer's bias input, its bias add's constant, or None."""
    if len(dense.inputs) > 2:
        return params[dense.inputs[2]]
    return params[add.inputs[1]] if add is not None else None


def _merged(graph: Graph, groups: list[list[tuple[Node, Node | None]]]) -> Graph:
    """``graph`` with each group of (dense, bias add) pairs replaced by one dense layer, its bias add and slices,
    placed where the group's first dense layer is."""
    types = infer_types(graph)
    params, taken = dict(graph.params), set(types) | set(graph.params)
    dropped, placed = set(), {}
    for group in groups:
        first = group[0][0]
        ws = [graph.params[d.inputs[1]] for d, _ in group]
        bs = [_bias(d, a, graph.params) for d, a in group]
        w_name = fresh_name(f"{first.output}:merged_w", taken)
        params[w_name] = np.concatenate(ws, axis=0)
        out = fresh_name(f"{first.output}:merged", taken)
        nodes = [Node(DENSE, (first.inputs[0], w_name), out, dict(first.attrs))]
        if any(b is not None for b in bs):
            b_name = fresh_name(f"{first.output}:merged_b", taken)
            params[b_name] = np.concatenate([np.zeros(w.shape[0], w.dtype) if b is None else b for b, w in zip(bs, ws)])
            biased = fresh_name(f"{first.output}:merged_add", taken)
            nodes.append(Node(ADD, (out, b_name), biased))
            out = biased
        rows, lo = types[first.output].shape[0], 0
        for (d, a), w in zip(group, ws):
            stop = lo + w.shape[0]
            nodes.append(
                Node(SLICE, (out,), (a or d).output, {"starts": [0, lo], "stops": [rows, stop], "steps": [1, 1]})
            )
            lo = stop
            dropped.update(n.output for n in (d, a) if n is not None)
        placed[first.output] = nodes
    kept = []
    for n in graph.nodes:
        if n.output in placed:
            kept += placed[n.output]
        elif n.output not in dropped:
            kept.append(n)
    return eliminate_dead_code(graph.copy(nodes=kept, params=params))


def sink_reshapes(graph: Graph) -> Graph:
    """Each elementwise node, or row-wise node (a ``layer_norm``/``rms_norm`` over the last axis alone), whose
    tensor inputs are reshapes of one (rows, columns) shape (a dense layer's, a flattened MatMul's) keeping the
    columns as the last axis, tensors of the node's own output shape (the residual stream beside a dense layer's
    output: reshaped to (rows, columns) where they are read), or constants of one element, of the last axis or
    of the node's output shape (reshaped too),
    computed before the reshapes, one reshape after it, repeatedly (a bias add, then a GELU written out with its
    diamond; a residual add, then its LayerNorm); then each reshape of a reshape reads the first one's input (a
    reshape to the same shape then is an identity, :func:`remove_identities`), and the reshapes no longer read
    are dropped. Exact: an elementwise function of each element and its column, and a function of each row of
    the last axis, commute with a reshape that keeps the columns (row-major: each row stays one row)."""
    types, moved = infer_types(graph), None
    while True:
        producers = graph.producers()
        for n in graph.nodes:
            moved = _sink_one(graph, types, producers, n) if _sinks(n, types) else None
            if moved is not None:
                break
        if moved is None:
            break
        graph = moved
    return _merge_reshapes(graph)


def _merge_reshapes(graph: Graph) -> Graph:
    """``graph`` with each reshape of a reshape reading the first one's input (a reshape to the same shape then
    an identity, :func:`remove_identities`), identities and what no output reads dropped."""
    producers = graph.producers()
    nodes = []
    for n in graph.nodes:
        first = producers.get(n.inputs[0]) if n.op == RESHAPE else None
        while first is not None and first.op == RESHAPE:
            n = Node(n.op, first.inputs, n.output, dict(n.attrs))
            first = producers.get(n.inputs[0])
        nodes.append(n)
    return eliminate_dead_code(remove_identities(graph.copy(nodes=nodes)))


def patch_window(conv: Node, types: dict[str, TensorType], w_shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(OH, OW) of a ``conv2d`` of one image whose stride is its kernel, groups 1, no padding or dilation, tiling
    its input exactly (a patch embedding), or None."""
    x, a = types[conv.inputs[0]].shape, conv.attrs
    if conv.op != CONV2D or int(a.get("groups", 1)) != 1 or len(x) != 4 or x[0] != 1:
        return None
    try:
        win, (oh, ow) = make_window("conv2d", x[2:], w_shape[2:], a.get("stride", 1), a.get("dilation", 1),
                                    a.get("padding", 0))  # fmt: skip
    except UnsupportedError:
        return None
    if (
        win.stride != win.kernel
        or win.dilation != (1, 1)
        or any(win.pads)
        or x[2:] != (oh * win.kernel[0], ow * win.kernel[1])
    ):
        return None
    return oh, ow


def _patch_conv(node: Node, graph: Graph, types: dict[str, TensorType]) -> tuple[Node, Node] | None:
    """The reshape to (1, C, OH*OW) and the transpose to (1, OH*OW, C) reading the conv2d ``node`` one after the
    other, alone, where ``node`` is a patch embedding: a float conv2d of one image, constant weights (and bias),
    groups 1, no padding or dilation, its stride its kernel, tiling its input exactly; else None."""
    if node.op != CONV2D or len(node.inputs) < 2:
        return None
    x, w = node.inputs[:2]
    if w not in graph.params or types[x].dtype != "float32" or any(v not in graph.params for v in node.inputs[1:]):
        return None
    window = patch_window(node, types, graph.params[w].shape)
    if window is None:
        return None
    oh, ow = window
    consumers = graph.consumers()
    flat = consumers.get(node.output, [])
    if len(flat) != 1 or flat[0].op != RESHAPE or node.output in graph.outputs:
        return None
    rows = consumers.get(flat[0].output, [])
    c = types[node.output].shape[1]
    if types[flat[0].output].shape != (1, c, oh * ow) or len(rows) != 1 or rows[0].op != TRANSPOSE:
        return None
    if tuple(rows[0].attrs["perm"]) != (0, 2, 1) or flat[0].output in graph.outputs:
        return None
    return flat[0], rows[0]


def patch_rows(graph: Graph) -> Graph:
    """Each patch embedding (:func:`_patch_conv`: a conv2d whose stride is its kernel, its output flattened and
    transposed to (1, patches, channels), a ViT's tokens) computed as a dense layer over the patches as rows,
    ``reshape(transpose(reshape(x, (C, OH, KH, OW, KW)), (OH, OW, C, KH, KW)), (OH*OW, C*KH*KW))``, and the
    bias added, reshaped to (1, patches, channels): the tokens come out token-major, as every dense layer stores
    them, and the layout moves run on the input. Exact: each output is the same sum of the same products."""
    types = infer_types(graph)
    params, taken = dict(graph.params), set(types)
    replaced: dict[str, list[Node]] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        found = _patch_conv(node, graph, types)
        if found is None:
            continue
        flat, rows = found
        x, w = node.inputs[:2]
        _, c, h, wd = types[x].shape
        o, _, kh, kw = params[w].shape
        oh, ow = h // kh, wd // kw
        names = [fresh_name(f"{node.output}:{k}", taken) for k in ("split", "moved", "patches", "w", "dense")]
        taken.update(names)
        split, moved, patches, weight, dense = names
        params[weight] = params[w].reshape(o, c * kh * kw)
        new = [
            Node(RESHAPE, (x,), split, {"shape": (c, oh, kh, ow, kw)}),
            Node(TRANSPOSE, (split,), moved, {"perm": (1, 3, 0, 2, 4)}),
            Node(RESHAPE, (moved,), patches, {"shape": (oh * ow, c * kh * kw)}),
            Node(DENSE, (patches, weight), dense),
        ]
        if len(node.inputs) > 2:
            biased = fresh_name(f"{node.output}:biased", taken)
            taken.add(biased)
            new.append(Node(ADD, (dense, node.inputs[2]), biased))
            dense = biased
        new.append(Node(RESHAPE, (dense,), rows.output, {"shape": (1, oh * ow, o)}))
        replaced[rows.output] = new
        dropped.update((node.output, flat.output))
    if not replaced:
        return graph
    nodes = [m for n in graph.nodes if n.output not in dropped for m in replaced.get(n.output, [n])]
    return eliminate_dead_code(graph.copy(nodes=nodes, params=params))


def _constant_parts(node: Node | None, graph: Graph, types: dict[str, TensorType]) -> int | None:
    """The index of the one computed input of the ``concat`` ``node`` when every other input is a constant and
    the axis is not the last (token rows beside a class token, a distillation token), else None."""
    if node is None or node.op != CONCAT:
        return None
    rank = len(types[node.output].shape)
    if rank < 2 or int(node.attrs.get("axis", 0)) % rank == rank - 1:
        return None
    computed = [i for i, v in enumerate(node.inputs) if v not in graph.params]
    return computed[0] if len(computed) == 1 and len(set(node.inputs)) == len(node.inputs) else None


def _split_one(graph: Graph, types: dict[str, TensorType], producers: dict[str, Node], node: Node) -> Graph | None:
    """``graph`` with the row-wise ``node`` reading a concatenation of constants and one computed value
    (:func:`_constant_parts`) computed on the computed part alone and at compile time on the constants, its
    output their concatenation (:func:`constant_rows_first`), or None."""
    tensors = {v for v in node.inputs if v not in graph.params}
    if len(tensors) != 1 or not _sinks(node, types) or types[node.output].dtype != "float32":
        return None  # float nodes only: a QDQ model's quantizations keep their place
    (cat,) = tensors
    src = producers.get(cat)
    k = _constant_parts(src, graph, types)
    out = types[node.output].shape
    if k is None or types[cat].shape != out or (node.op not in ROW_WISE and "axis" in node.attrs):
        return None
    axis = int(src.attrs.get("axis", 0)) % len(out)
    params, taken = dict(graph.params), set(types) | set(graph.params)
    parts, first = [], 0
    for i, v in enumerate(src.inputs):
        size = types[v].shape[axis]
        inputs = [v if u == cat else _rows_of(params, u, len(out), axis, first, size, taken) for u in node.inputs]
        first += size
        if i == k:
            moved = Node(node.op, tuple(inputs), fresh_name(f"{node.output}{COMPUTED}", taken), dict(node.attrs))
            taken.add(moved.output)
            parts.append(moved)
            continue
        value = evaluate_node(node, [params[u] for u in inputs], [TensorType.of(params[u], u) for u in inputs],
                              TensorType(types[v].shape, types[node.output].dtype))  # fmt: skip
        name = fresh_name(f"{node.output}:const{i}", taken)
        taken.add(name)
        params[name] = np.ascontiguousarray(value)
        parts.append(name)
    moved = next(p for p in parts if isinstance(p, Node))
    joined = Node(CONCAT, tuple(p.output if isinstance(p, Node) else p for p in parts), node.output, dict(src.attrs))
    nodes = list(graph.nodes)
    at = nodes.index(node)
    nodes[at : at + 1] = [moved, joined]
    return eliminate_dead_code(graph.copy(nodes=nodes, params=params))


def _rows_of(params: dict, name: str, rank: int, axis: int, first: int, size: int, taken: set[str]) -> str:
    """The constant ``name`` (an operand of a node of rank ``rank``) on rows ``first .. first + size - 1`` of
    ``axis``: itself where it does not vary along the axis, else its slice (a new parameter)."""
    p = params[name]
    at = axis - rank + p.ndim
    if at < 0 or p.shape[at] == 1:
        return name
    rows = fresh_name(f"{name}:rows{first}", taken)
    taken.add(rows)
    params[rows] = np.ascontiguousarray(np.take(p, range(first, first + size), axis=at))
    return rows


def _flatten_concat(
    node: Node, graph: Graph, types: dict[str, TensorType], producers: dict[str, Node], params: dict
) -> Node | None:
    """The reshape ``node`` to (rows, columns) of a concatenation of constants and reshapes of (rows, columns)
    values along the rows' axis (leading axes of one), as one concatenation along axis 0 of the constants reshaped
    (new parameters in ``params``) and the values themselves, or None."""
    cat = producers.get(node.inputs[0]) if node.op == RESHAPE else None
    y = types[node.output].shape
    if cat is None or cat.op != CONCAT or len(y) != 2:
        return None
    shape = types[cat.output].shape
    axis = int(cat.attrs.get("axis", 0)) % len(shape)
    if axis != len(shape) - 2 or any(d != 1 for d in shape[:-2]):
        return None
    inputs = []
    for v in cat.inputs:
        src = producers.get(v)
        if v in graph.params:
            inputs.append(v)
            continue
        if src is not None and src.op == RESHAPE and types[src.inputs[0]].shape == types[v].shape[-2:]:
            inputs.append(src.inputs[0])
        else:
            return None
    for i, v in enumerate(inputs):
        if v in graph.params:
            inputs[i] = fresh_name(f"{v}{FLAT}", set(params) | set(types))
            params[inputs[i]] = graph.params[v].reshape(-1, y[1])
    return Node(CONCAT, tuple(inputs), node.output, {"axis": 0})


COMPUTED = ":computed"  # the suffix of a value constant_rows_first computes on the computed rows alone


def constant_rows_first(graph: Graph) -> Graph:
    """Each row-wise node (an elementwise node over constants, a LayerNorm/RMSNorm over the last axis) reading a
    concatenation, along an axis other than the last, of constants and one computed value (a ViT's class token, a
    DeiT's class and distillation tokens, before the patch rows) computed on the computed rows alone, and at
    compile time, in float, on the constant ones; its output the concatenation of the two. Repeatedly: the
    position embedding's add, then the first LayerNorm, so that the rows that do not depend on the input are
    constants of each tensor holding them (their LayerNorm computed from the float rows, not from their
    quantization). Then :func:`sink_reshapes`, and a reshape to (rows, columns) of such a concatenation of
    reshaped (rows, columns) values concatenates the values along axis 0. Exact: a row-wise function of a
    concatenation along the rows is the concatenation of its values on each part."""
    types = infer_types(graph)
    while True:
        moved, producers = None, graph.producers()
        for n in graph.nodes:
            moved = _split_one(graph, types, producers, n)
            if moved is not None:
                break
        if moved is None:
            break
        graph = moved
        types = infer_types(graph)
    graph = sink_reshapes(graph)
    types = infer_types(graph)
    params = dict(graph.params)
    producers = graph.producers()
    nodes = [_flatten_concat(n, graph, types, producers, params) or n for n in graph.nodes]
    return _merge_reshapes(graph.copy(nodes=nodes, params=params))


SELECTIONS = (TAKE, SLICE)  # per-axis selections select_rows_first moves
ROWS = ":rows"  # the suffix of a value select_rows_first computes on the selected rows alone


def row_selections(graph: Graph) -> dict[str, Node]:
    """Each value :func:`select_rows_first` computes on selected rows (``<value>:rows``) -> the selection node whose
    rows it holds: a selection's output, and each row-wise node's reading one."""
    found: dict[str, Node] = {}
    for n in graph.nodes:
        if n.output.endswith(ROWS):
            src = n if n.op in SELECTIONS else next((found[i] for i in n.inputs if i in found), None)
            if src is not None:
                found[n.output] = src
    return found


def selected_axes(node: Node, shape: tuple[int, ...]) -> set[int] | None:
    """The axes of an input of ``shape`` along which the ``take`` (no fill entries, no fill tensor) or ``slice``
    ``node`` selects (the others kept whole, in order), or None where ``node`` is no such selection."""
    if node.op == TAKE and len(node.inputs) == 1 and len(node.attrs["index"]) == len(shape):
        tables = node.attrs["index"]
        if any(t is not None and min(t) < 0 for t in tables):
            return None
        return {
            a
            for a, (t, d) in enumerate(zip(tables, shape, strict=True))
            if t is not None and tuple(t) != tuple(range(d))
        }
    if node.op == SLICE:
        ranges = zip(node.attrs["starts"], node.attrs["stops"], node.attrs["steps"], strict=True)
        return {a for a, (lo, hi, st) in enumerate(ranges) if range(lo, hi, st) != range(shape[a])}
    return None


def _selection_tail(node: Node, k: int) -> dict:
    """The attributes of the selection ``node`` without its first ``k`` axes (kept whole)."""
    if node.op == TAKE:
        return dict(node.attrs, index=tuple(node.attrs["index"])[k:])
    return dict(node.attrs, **{a: tuple(node.attrs[a])[k:] for a in ("starts", "stops", "steps")})


def _commutes(node: Node, axes: set[int], types: dict[str, TensorType], params: dict[str, np.ndarray]) -> str | None:
    """The one tensor input of ``node`` when selecting ``axes`` of its output is selecting them of that input and
    applying ``node`` to the selection (a row-wise node), else None: a ``layer_norm``/``rms_norm`` over the last
    axis alone, ``axes`` not holding it; an elementwise node of one tensor input of the output's shape and
    constants none of ``axes`` varies along (one element, or of lower rank; per-axis attributes only with
    one-element constants)."""
    out = types[node.output].shape
    tensors = {v for v in node.inputs if v not in params}
    if len(tensors) != 1 or types[next(iter(tensors))].shape != out:
        return None
    if node.op in ROW_WISE:
        return next(iter(tensors)) if _sinks(node, types) and len(out) - 1 not in axes else None
    if node.op not in EW:
        return None
    consts = [params[v] for v in node.inputs if v in params]
    if "axis" in node.attrs and any(c.size != 1 for c in consts):
        return None
    rank = len(out)
    flat = all(a < rank - c.ndim or c.shape[a - rank + c.ndim] == 1 for c in consts for a in axes)
    return next(iter(tensors)) if flat else None


def _passes_on(value: str, axes: set[int], graph: Graph, types: dict[str, TensorType]) -> bool:
    """Whether a selection of ``axes`` of ``value`` moves on before the node computing it (read by one node alone):
    a selection moves before a ``quantize`` only so, that it reaches an int8 value beyond (a QDQ model's
    ``quantize(layer_norm(dequantize(x)))``) and never stays between a value and its quantization (a residual sum
    the previous layer's epilogue computes and quantizes)."""
    src, alone = graph.producers().get(value), len(graph.consumers().get(value, [])) == 1
    return src is not None and alone and src.op != RESHAPE and _commutes(src, axes, types, graph.params) is not None


def _select_one(
    graph: Graph, types: dict[str, TensorType], node: Node, through: tuple[str, ...] | None
) -> Graph | None:
    """``graph`` with the selection ``node`` moved one node earlier (:func:`select_rows_first`), or None."""
    producers, consumers = graph.producers(), graph.consumers()
    x = node.inputs[0]
    src = producers.get(x)
    axes = selected_axes(node, types[x].shape)
    readers = consumers.get(x, [])
    if src is None or not axes or any(r.op not in SELECTIONS for r in readers) or x in graph.outputs:
        return None
    if through is not None and src.op not in through:
        return None
    taken = set(types) | set(graph.params)
    if src.op == RESHAPE:  # a reshape adding leading ones: the selection of the reshaped value's own axes
        k = len(types[x].shape) - len(types[src.inputs[0]].shape)
        if k < 0 or types[x].shape[k:] != types[src.inputs[0]].shape or min(axes) < k:
            return None
        inner = Node(node.op, (src.inputs[0],), fresh_name(f"{src.inputs[0]}{ROWS}", taken), _selection_tail(node, k))
        moved = [inner, Node(RESHAPE, (inner.output,), node.output, {"shape": types[node.output].shape})]
    else:
        u = _commutes(src, axes, types, graph.params)
        if u is None or (src.op == QUANTIZE and not _passes_on(u, axes, graph, types)):
            return None
        inner = Node(node.op, (u,), fresh_name(f"{u}{ROWS}", taken), dict(node.attrs))
        inputs = tuple(inner.output if v == u else v for v in src.inputs)
        moved = [inner, Node(src.op, inputs, node.output, dict(src.attrs))]
    types[inner.output] = infer(inner, [types[inner.inputs[0]]], graph.params)
    nodes = [n for n in graph.nodes if n is not src or len(readers) > 1]  # kept for the other selections
    at = nodes.index(node)
    nodes[at : at + 1] = moved
    return graph.copy(nodes=nodes)


def select_rows_first(graph: Graph, through: tuple[str, ...] | None = None) -> Graph:
    """Each ``take`` or ``slice`` (:func:`selected_axes`) of a value only selections read computed before the node
    producing that value (a copy of that node for each selection, where several read it: DeiT's class and
    distillation tokens each normalized alone), repeatedly: before a row-wise node (:func:`_commutes`: a
    LayerNorm/RMSNorm over the last axis selecting other axes, an elementwise node over constants that do not vary
    along the selected axes, a quantization per tensor: a ``quantize`` only where the selection moves on past the
    node before it, :func:`_passes_on`) and before a reshape adding leading axes of size one (the selection of the
    input's axes, reshaped). The class token a classifier reads (``take`` of token 0 after the final LayerNorm) is
    then normalized alone, and selected straight from the last layer's (tokens, features) output. ``through``: the
    operators a selection may move before (default: all those above; :func:`vdla.graph.qdq.lower_qdq` moves one
    before a ``dequantize`` alone, onto the int8 value). Exact: a function of each row selects with its rows."""
    types = infer_types(graph)
    while True:
        moved = None
        for n in graph.nodes:
            moved = _select_one(graph, types, n, through) if n.op in SELECTIONS else None
            if moved is not None:
                break
        if moved is None:
            return _merge_reshapes(graph)
        graph = moved


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes and parameters that no graph output depends on (graph inputs stay: they are the
    interface)."""
    live = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if node.output in live:
            kept.append(node)
            live.update(node.inputs)
    params = {k: v for k, v in graph.params.items() if k in live}
    param_types = {k: v for k, v in graph.param_types.items() if k in live}
    return graph.copy(nodes=kept[::-1], params=params, param_types=param_types)


PASSES: tuple[tuple[str, Pass], ...] = (
    ("remove_identities", remove_identities),
    ("fold_constants", fold_constants),  # first: batch-norm statistics may be computed from constants
    ("fold_batch_norm", fold_batch_norm),
    ("fuse_layer_norm", fuse_layer_norm),
    ("patch_rows", patch_rows),  # before sink_reshapes: the patch embedding's bias add meets its rows
    ("sink_reshapes", sink_reshapes),
    ("merge_projections", merge_projections),  # after sink_reshapes: each projection's bias add right after it
    ("constant_rows_first", constant_rows_first),  # after sink_reshapes: the constant rows beside dense rows
    ("select_rows_first", select_rows_first),  # after sink_reshapes: the LayerNorm on (tokens, features)
    ("eliminate_dead_code", eliminate_dead_code),
)


def simplify(graph: Graph, verify: bool | None = None) -> Graph:
    """Run :data:`PASSES` in order; with ``verify`` (default: ``VDLA_VERIFY=1``) the graph is verified
    after each, an error naming the pass that broke an invariant."""
    graph = maybe_verify(graph, "the input of simplify", verify)
    for name, fn in PASSES:
        graph = maybe_verify(fn(graph), name, verify)
    return graph
