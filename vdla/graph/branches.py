"""Branches chosen at run time: which values a run needs only when a condition holds.

An ``If`` on a condition computed at run time is imported as both branches and one ``where(cond, then, else)``
per output (:meth:`vdla.frontend.onnx.OnnxImporter.runtime_if`). A *select* is any ``where`` whose condition
is one computed bool value: it reads its second input only when the condition is true, its third only when
it is false. A value's *guard* is the conjunction of conditions under which some reader needs it: a branch's
values are guarded by their ``If``'s condition (a nested ``If``'s by both), everything else by nothing. A run
may skip every node whose guard does not hold; the model compiler cuts the steps there
(:func:`vdla.graph.fusion.split_by_guard`, :func:`vdla.graph.partition.partition`) and the executor skips the
steps of the branch not taken (:meth:`vdla.model.executor.Module.run`).

Guards are sound by construction: a value read by several nodes is guarded by what their requirements have in
common (the intersection of their conditions), so a value some reader needs unconditionally is never skipped.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from vdla.graph.graph import Graph, Node
from vdla.graph.opnames import WHERE
from vdla.graph.types import TensorType

Literal = tuple[str, bool]
"""A condition value and the truth it must have."""
Guard = tuple[Literal, ...]
"""A conjunction of literals, sorted; ``()`` holds always."""


def select_condition(node: Node, types: Mapping[str, TensorType], params: Mapping) -> str | None:
    """The condition of ``node`` when it is a select (a ``where`` of one computed bool value choosing between two
    tensors, as an ``If`` is imported), else None."""
    if node.op != WHERE or node.inputs[0] in params or "a" in node.attrs or "b" in node.attrs:
        return None  # a choice held as a scalar attribute (a guard against a zero scale, ...) is no branch
    t = types[node.inputs[0]]
    return node.inputs[0] if t.dtype == "bool" and int(np.prod(t.shape)) == 1 else None


def choice_inputs(node: Node) -> dict[int, bool]:
    """A select's tensor inputs after the condition, by index, and the truth under which each is read: ``a``
    (read when true), then ``b``, each unless the node holds it as a scalar attribute (as ``where``'s
    operands are taken, :func:`vdla.graph.ew.node_steps`)."""
    tensors = [truth for name, truth in (("a", True), ("b", False)) if name not in node.attrs]
    return {k + 1: truth for k, truth in enumerate(tensors[: len(node.inputs) - 1])}


def guards(graph: Graph, types: Mapping[str, TensorType]) -> dict[str, Guard]:
    """The guard of every node's output (see the module docstring); a node no one reads is guarded by nothing."""
    need: dict[str, frozenset[Literal]] = {o: frozenset() for o in graph.outputs}
    for node in reversed(graph.nodes):
        own = need.setdefault(node.output, frozenset())
        cond = select_condition(node, types, graph.params)
        chosen = choice_inputs(node) if cond is not None else {}
        for k, v in enumerate(node.inputs):
            lit = ((cond, chosen[k]),) if k in chosen else ()
            req = own.union(lit)
            need[v] = need[v] & req if v in need else req
    return {n.output: tuple(sorted(need[n.output])) for n in graph.nodes}


def common(guards_of: list[Guard]) -> Guard:
    """The guard under which a step holding values of these guards runs: what they have in common."""
    if not guards_of:
        return ()
    first, *rest = (set(g) for g in guards_of)
    return tuple(sorted(first.intersection(*rest)))


def holds(guard: Guard, values: Mapping[str, np.ndarray]) -> tuple[bool, str]:
    """Whether ``guard`` holds for the run's host ``values``, and why not: the first condition computed with the
    other truth (``"c is false"``), else the first not computed (a nested branch's condition, in a branch not
    taken: the guard does not hold either)."""
    for cond, want in guard:
        if cond in values and bool(np.asarray(values[cond]).reshape(-1)[0]) != want:
            return False, f"{cond} is {str(not want).lower()}"
    missing = [cond for cond, _ in guard if cond not in values]
    return (False, f"{missing[0]} not computed") if missing else (True, "")
