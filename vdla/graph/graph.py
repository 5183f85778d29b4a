"""The dataflow graph: named values, operator nodes in topological order, constant parameters."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdla.graph.types import TensorType, UnsupportedError


@dataclass(frozen=True)
class Node:
    """One operator application: ``output = op(*inputs, **attrs)``; inputs and output are value names.

    Elementwise nodes take the running value as ``inputs[0]``; each operand of the operator's
    :class:`~vdla.graph.ew.EwDef` is a scalar attribute of that name, or else the next tensor in ``inputs[1:]``.
    """

    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Graph:
    """Topologically ordered nodes over named inputs and constant parameters.

    Every value has a name: a graph input, a parameter (a constant array, with an optional type in
    ``param_types`` where it carries quantization) or the output of exactly one node. ``name`` names
    the model in dumps and errors.
    """

    inputs: dict[str, TensorType]
    nodes: list[Node]
    outputs: list[str]
    params: dict[str, np.ndarray] = field(default_factory=dict)
    param_types: dict[str, TensorType] = field(default_factory=dict)
    name: str = "graph"

    def producers(self) -> dict[str, Node]:
        """The node producing each node output."""
        return {n.output: n for n in self.nodes}

    def consumers(self) -> dict[str, list[Node]]:
        """The nodes reading each value, in graph order."""
        readers: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                readers.setdefault(i, []).append(n)
        return readers

    def copy(self, nodes: list[Node] | None = None, **changes: Any) -> Graph:
        """A shallow copy (arrays shared) with other nodes or fields."""
        fields_ = dict(
            inputs=dict(self.inputs),
            nodes=list(self.nodes if nodes is None else nodes),
            outputs=list(self.outputs),
            params=dict(self.params),
            param_types=dict(self.param_types),
            name=self.name,
        )
        fields_.update(changes)
        return Graph(**fields_)


def only_reader(value: str, consumers: dict[str, list[Node]], outputs: Iterable[str] = ()) -> Node | None:
    """The one node reading ``value``, or None where several or none do or ``value`` is one of ``outputs``."""
    readers = consumers.get(value, [])
    return readers[0] if len(readers) == 1 and value not in outputs else None


def reshaped(shape: tuple[int, ...], target: Sequence[int]) -> tuple[int, ...]:
    """``target`` with a -1 entry resolved, checked to keep the element count of ``shape``."""
    bad = UnsupportedError("reshape", f"cannot reshape {shape} to {tuple(target)}")
    if list(target).count(-1) > 1 or any(d == 0 or d < -1 for d in target):
        raise bad
    size, known = math.prod(shape), math.prod(d for d in target if d != -1)
    out = tuple(size // known if d == -1 else d for d in target)
    if math.prod(out) != size:
        raise bad
    return out


class DisjointSets:
    """Union-find over hashable items: each item's set is named by its root (:meth:`find`, with path
    compression); an item seen first by :meth:`find` is a set of its own."""

    def __init__(self, items: Iterable[Hashable] = ()) -> None:
        self.parent: dict[Hashable, Hashable] = {i: i for i in items}

    def find(self, item: Hashable) -> Hashable:
        root = self.parent.setdefault(item, item)
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[item] != root:
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, child: Hashable, target: Hashable) -> tuple[Hashable, Hashable]:
        """Join ``child``'s set into ``target``'s; returns their roots before (equal: already one set)."""
        child, target = self.find(child), self.find(target)
        if child != target:
            self.parent[child] = target
        return child, target

    def sets(self) -> dict[Hashable, list[Hashable]]:
        """Every set's items by its root, in the order the items were first seen."""
        out: dict[Hashable, list[Hashable]] = {}
        for item in self.parent:
            out.setdefault(self.find(item), []).append(item)
        return out
