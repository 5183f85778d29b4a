"""The graph verifier: the invariants every pass must keep, checked after each pass in tests and in
debug mode (``VDLA_VERIFY=1`` or ``verify=True`` where a pipeline takes it).

Invariants: every node names a known operator with the right number of inputs; nodes are in
topological order (each input is a graph input, a parameter or the output of an earlier node); every
value is defined exactly once; every graph output is defined; every node's type rule accepts its
inputs (so every value has a type, quantization included).
"""

from __future__ import annotations

import os

from vdla.errors import VdlaError
from vdla.graph.graph import Graph
from vdla.graph.ops import OPS, infer
from vdla.graph.types import TensorType, UnsupportedError


class GraphError(VdlaError, ValueError):
    """A graph broke an invariant: the message names the pass that left it so and the node."""


def debug_enabled() -> bool:
    """Whether pipelines verify after every pass without being asked (``VDLA_VERIFY=1``)."""
    return os.environ.get("VDLA_VERIFY", "") not in ("", "0")


def verify(graph: Graph, after: str = "construction") -> dict[str, TensorType]:
    """Check the invariants of ``graph`` and return the type of every value.

    Raises :class:`GraphError` naming ``after`` (the pass that produced the graph) and the first node at
    fault, with the node's operator, inputs and the broken invariant.
    """

    def fail(where: str, message: str) -> GraphError:
        return GraphError(f"graph {graph.name!r} after {after}: {where}: {message}")

    types: dict[str, TensorType] = {}
    for name, t in graph.inputs.items():
        types[name] = t
    for name, value in graph.params.items():
        if name in types:
            raise fail(f"parameter {name!r}", "also defined as a graph input")
        try:
            types[name] = graph.param_types.get(name) or TensorType.of(value, name)
        except UnsupportedError as e:
            raise fail(f"parameter {name!r}", str(e)) from e
    for i, node in enumerate(graph.nodes):
        where = f"node {i} {node.op!r} -> {node.output!r}"
        if node.op not in OPS:
            raise fail(where, "unknown operator")
        undefined = [v for v in node.inputs if v not in types]
        if undefined:
            raise fail(where, f"reads {undefined}, not defined before it (inputs, parameters or earlier nodes)")
        if node.output in types:
            raise fail(where, f"redefines {node.output!r}")
        try:
            types[node.output] = infer(node, [types[v] for v in node.inputs], graph.params)
        except UnsupportedError as e:
            raise fail(where, f"type rule: {e}") from e
    missing = [o for o in graph.outputs if o not in types]
    if missing:
        raise fail("outputs", f"{missing} are not defined")
    return types


def maybe_verify(graph: Graph, after: str, enabled: bool | None = None) -> Graph:
    """``verify`` when asked (or in debug mode); returns ``graph`` for chaining passes."""
    if enabled or (enabled is None and debug_enabled()):
        verify(graph, after)
    return graph
