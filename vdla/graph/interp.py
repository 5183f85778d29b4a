"""The numpy interpreter of the graph: every node evaluated by its operator's numpy semantics.

It is the reference a compiled model is checked against (the same graph, run op by op in numpy), the
constant folder's evaluator, and the CPU path of last resort where llvmlite is not installed. It computes
exactly what the operator definitions say (:attr:`vdla.graph.ops.OpDef.evaluate`: an elementwise
operator's expression on numpy, the oracle of :mod:`vdla.graph.oracle` for the others), with the
accelerator's integer arithmetic (:mod:`vdla.isa.arith`) for integer ops.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from vdla.graph.graph import Graph, Node
from vdla.graph.ops import OPS, infer_types
from vdla.graph.types import TensorType, UnsupportedError


def evaluate_node(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    """The value of ``node`` on input arrays ``args`` (of types ``types``); ``out`` is its output type."""
    opdef = OPS.get(node.op)
    if opdef is None:
        raise UnsupportedError(node.op, f"the interpreter has no rule for node {node.output!r}")
    return opdef.evaluate(node, args, types, out)


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray], keep: bool = False) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (one array per graph input); returns the outputs, or every value if
    ``keep``."""
    types = infer_types(graph)
    env: dict[str, np.ndarray] = dict(graph.params)
    for name, t in graph.inputs.items():
        if name not in feeds:
            raise UnsupportedError("evaluate", f"missing input {name!r}")
        a = np.asarray(feeds[name])
        if a.shape != t.shape or a.dtype.name != t.dtype:
            raise UnsupportedError("evaluate", f"input {name!r} must be {t}, got {a.dtype.name}{list(a.shape)}")
        env[name] = a
    for node in graph.nodes:
        args = [env[i] for i in node.inputs]
        env[node.output] = evaluate_node(node, args, [types[i] for i in node.inputs], types[node.output])
    return env if keep else {o: env[o] for o in graph.outputs}
