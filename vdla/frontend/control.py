"""ONNX control flow (If, Loop, Scan) rewritten as plain ONNX nodes that the importer converts one by one.

Everything here works on protos: a subgraph's nodes are copied with every name it defines (its inputs,
initializers and node outputs) prefixed, so that the copies of one body (the iterations of a Loop, the two
branches of an If) never share a value; names the subgraph reads from the outer scope keep their names and
resolve to the outer values. Initializers of a subgraph become Constant nodes. Imported by
:mod:`vdla.frontend.onnx` alone (the onnx package is imported on first use through it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

MAX_ITERATIONS = 1024  # a Loop or Scan unrolled at import runs at most this many iterations
MAX_UNROLLED_NODES = 20_000  # and its copies of the body hold at most this many nodes in all


@dataclass
class Copy:
    """One renamed copy of a subgraph: its nodes (initializers first, as Constant nodes), and its formal
    inputs and outputs under their new names."""

    nodes: list[onnx.NodeProto]
    inputs: list[str]
    outputs: list[str]


def defined_names(g: onnx.GraphProto) -> list[str]:
    """Every value name ``g`` defines itself: inputs, initializers and node outputs."""
    names = [i.name for i in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output if o]


def _rename_node(n: onnx.NodeProto, names: Mapping[str, str], prefix: str) -> onnx.NodeProto:
    """``n`` with its inputs and outputs renamed by ``names``, and the same within its subgraphs (where a
    name they define themselves is not renamed)."""
    out = onnx.NodeProto()
    out.CopyFrom(n)
    out.name = prefix + (n.name or n.output[0])
    out.input[:] = [names.get(i, i) for i in n.input]
    out.output[:] = [names.get(o, o) for o in n.output]
    for a in out.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            _rename_refs(sub, names)
    return out


def _rename_refs(g: onnx.GraphProto, names: Mapping[str, str]) -> None:
    """Rename, in place, the outer-scope names that subgraph ``g`` (and its own subgraphs) reads."""
    own = set(defined_names(g))
    inner = {k: v for k, v in names.items() if k not in own}
    for n in g.node:
        n.input[:] = [inner.get(i, i) for i in n.input]
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                _rename_refs(sub, inner)
    for o in g.output:
        o.name = inner.get(o.name, o.name)


def copy_graph(g: onnx.GraphProto, prefix: str) -> Copy:
    """A copy of ``g`` with every name it defines prefixed by ``prefix`` (see the module docstring)."""
    names = {name: prefix + name for name in defined_names(g)}
    consts = [helper.make_node("Constant", [], [names[t.name]], name=prefix + t.name, value=t) for t in g.initializer]
    nodes = consts + [_rename_node(n, names, prefix) for n in g.node]
    return Copy(nodes, [names[i.name] for i in g.input], [names.get(o.name, o.name) for o in g.output])


def subgraph(proto: onnx.NodeProto, name: str) -> onnx.GraphProto:
    """The graph attribute ``name`` of ``proto``."""
    return next(a.g for a in proto.attribute if a.name == name)


def attr(proto: onnx.NodeProto, name: str, default: object) -> object:
    """The value of attribute ``name`` of ``proto``, ``default`` when absent."""
    for a in proto.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def constant(name: str, value: np.ndarray | int | bool, dtype: type | None = None) -> onnx.NodeProto:
    """A Constant node giving ``name`` the value ``value``."""
    array = np.asarray(value, dtype=dtype)
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(array, name))


def identity(src: str, dst: str) -> onnx.NodeProto:
    return helper.make_node("Identity", [src], [dst], name=dst)


def unsqueeze(src: str, dst: str, axis: int, opset: int) -> list[onnx.NodeProto]:
    """``src`` with a new axis of length 1 at ``axis``, in the form of ``opset``."""
    if opset < 13:
        return [helper.make_node("Unsqueeze", [src], [dst], name=dst, axes=[axis])]
    return [
        constant(dst + "/axes", [axis], np.int64),
        helper.make_node("Unsqueeze", [src, dst + "/axes"], [dst], name=dst),
    ]


def stack(parts: Iterable[str], dst: str, axis: int, opset: int) -> list[onnx.NodeProto]:
    """The tensors ``parts`` stacked along a new axis ``axis`` (Unsqueeze each, Concat): a scan output."""
    nodes, names = [], []
    for k, p in enumerate(parts):
        names.append(f"{dst}/part{k}")
        nodes += unsqueeze(p, names[-1], axis, opset)
    return [*nodes, helper.make_node("Concat", names, [dst], name=dst, axis=axis)]


def take(src: str, dst: str, index: int, axis: int) -> list[onnx.NodeProto]:
    """Slice ``index`` of ``src`` along ``axis``, the axis removed (Gather of a scalar index)."""
    return [
        constant(dst + "/index", index, np.int64),
        helper.make_node("Gather", [src, dst + "/index"], [dst], name=dst, axis=axis),
    ]
