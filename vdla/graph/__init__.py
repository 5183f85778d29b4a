"""The graph: one home for the tensor type, nodes and graphs, elementwise steps, window geometry,
the blocked layout and the fusion pass, shared by the CPU fallback and the model compiler.

Conventions defined here and nowhere else: padding order (:mod:`vdla.graph.window`), the blocked
layout of activations and weights (:mod:`vdla.graph.layout`, always from the hardware config), and
elementwise semantics (:mod:`vdla.graph.ew`; requantization is :func:`vdla.isa.arith.requantize`).
"""

from vdla.graph import ew, layout
from vdla.graph.ew import Arg, Const, EwStep, Step
from vdla.graph.fusion import fuse, is_elementwise
from vdla.graph.graph import Graph, Node
from vdla.graph.types import DTYPES, TensorType, UnsupportedError
from vdla.graph.window import Window, make_window, normalize_padding, pads_from_onnx

__all__ = [
    "DTYPES",
    "Arg",
    "Const",
    "EwStep",
    "Graph",
    "Node",
    "Step",
    "TensorType",
    "UnsupportedError",
    "Window",
    "ew",
    "fuse",
    "is_elementwise",
    "layout",
    "make_window",
    "normalize_padding",
    "pads_from_onnx",
]
