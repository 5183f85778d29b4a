"""The fusion pass: cut a graph into groups that each run as one kernel.

Today's rule is the CPU fallback's stacking: runs of elementwise nodes become one loop nest, and a run
that directly follows a conv2d or dense node becomes that kernel's epilogue. The model compiler's
post-dominator fusion extends this module.
"""

from __future__ import annotations

from collections import Counter

from vdla.graph.ew import EW_OPERANDS
from vdla.graph.graph import Graph, Node


def is_elementwise(node: Node) -> bool:
    """Whether ``node`` is an elementwise step (see :data:`vdla.graph.ew.EW_OPERANDS`)."""
    return node.op in EW_OPERANDS


EPILOGUE_ANCHORS = ("conv2d", "dense")


def fuse(graph: Graph) -> list[list[Node]]:
    """Cut the graph into groups run as one kernel each.

    A node joins the previous node's group when it is elementwise, its running value is that group's
    output, and nothing else (no other node, no graph output) reads that value.
    """
    readers = Counter(name for node in graph.nodes for name in node.inputs)
    readers.update(graph.outputs)
    groups: list[list[Node]] = []
    for node in graph.nodes:
        if groups and is_elementwise(node):
            last = groups[-1]
            anchor_ok = is_elementwise(last[0]) or last[0].op in EPILOGUE_ANCHORS
            if anchor_ok and node.inputs[0] == last[-1].output and readers[last[-1].output] == 1:
                last.append(node)
                continue
        groups.append([node])
    return groups
