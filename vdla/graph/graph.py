"""The dataflow graph: named values, operator nodes in topological order, constant parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdla.graph.types import TensorType


@dataclass(frozen=True)
class Node:
    """One operator application: ``output = op(*inputs, **attrs)``; inputs and output are value names.

    Elementwise nodes take the running value as ``inputs[0]``; each operand of :data:`EW_OPERANDS` is a
    scalar attribute of that name, or else the next tensor in ``inputs[1:]``.
    """

    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Graph:
    """Topologically ordered nodes over named inputs and constant parameters."""

    inputs: dict[str, TensorType]
    nodes: list[Node]
    outputs: list[str]
    params: dict[str, np.ndarray] = field(default_factory=dict)
