"""The graph: one home for the tensor type, nodes and graphs, the operator registry (:mod:`vdla.graph.ops`,
elementwise operators in :mod:`vdla.graph.ew`), window geometry, the blocked layout, the fusion pass and
partitioning, shared by the CPU fallback and the model compiler.

Conventions defined here and nowhere else: padding order (:mod:`vdla.graph.window`), the blocked
layout of activations and weights (:mod:`vdla.graph.layout`, always from the hardware config), and
elementwise semantics (:mod:`vdla.graph.ew`; requantization is :func:`vdla.isa.arith.requantize`).
The partitioning function is :func:`vdla.graph.partition.partition` (``vdla.graph.partition`` stays the
module).
"""

from vdla.graph import ew, layout
from vdla.graph.ew import Arg, Const, EwStep, Step, is_elementwise
from vdla.graph.fusion import Fusion, Group, check_fusion, fuse_ops, post_dominators
from vdla.graph.graph import Graph, Node
from vdla.graph.partition import Partition, Region, region_graph
from vdla.graph.types import DTYPES, TensorType, UnsupportedError
from vdla.graph.window import Window, make_window, normalize_padding, pads_from_onnx

__all__ = [
    "DTYPES",
    "Arg",
    "Const",
    "EwStep",
    "Fusion",
    "Graph",
    "Group",
    "Node",
    "Partition",
    "Region",
    "Step",
    "TensorType",
    "UnsupportedError",
    "Window",
    "check_fusion",
    "ew",
    "fuse_ops",
    "is_elementwise",
    "layout",
    "make_window",
    "normalize_padding",
    "pads_from_onnx",
    "post_dominators",
    "region_graph",
]
