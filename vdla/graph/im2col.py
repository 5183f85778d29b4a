"""The first convolution packed: a conv2d over few input channels becomes an ``im2col`` on the host and
a 1x1 convolution whose reduction runs over (channel, kernel row, kernel column).

The accelerator reduces over blocks of ``block_in`` input channels for every kernel tap, so a layer with
``c < block_in`` channels pays for ``ceil(c / block_in) * kh * kw`` blocks per output where only
``ceil(c * kh * kw / block_in)`` carry work: ResNet-18's first convolution (3 channels, 7x7, stride 2) does
49 blocks of which 46 are padding, against 10 after the rewrite. :func:`im2col_convs` rewrites

    conv2d(x, w[O, C, KH, KW], stride, padding, dilation)
    ->  conv2d(im2col(x, kernel, stride, padding, dilation), w.reshape(O, C*KH*KW, 1, 1))

which computes the same int32 accumulators bit for bit (the same products summed in another order,
modulo 2^32): ``im2col`` puts input channel ``c`` under tap ``(ky, kx)`` on channel ``(c*KH + ky)*KW + kx``,
exactly the order of the reshaped OIHW weight, and writes zeros where the tap falls in the padding, which
is what conv2d's padding means (on the lowered int8 graph of :mod:`vdla.graph.qdq` that is the real zero:
only symmetric int8, zero point 0, is lowered). The blocked layout pads ``C*KH*KW`` up to a multiple of
``block_in`` with zero channels (and the weights with zero rows), so the padding costs no graph node.

The window may also be the kernel's rows alone (:func:`im2col_window`): ``im2col`` over ``(KH, 1)`` and a
``1 x KW`` convolution over its output, whose kernel columns stay taps the accelerator reads from INP
again for neighbouring outputs. That is chosen where it needs no more reduction blocks than the whole
window, since the host's tensor is then about ``KW / stride`` times smaller: a stem over paired rows
(:mod:`vdla.graph.rowpair`), 3 channels x 5 rows, packs 15 channels into one block for 3 taps, the same 3
blocks as 45 channels but a third of the bytes.

A conv is rewritten only where it pays and costs no extra conversion: its input is int8 and computed on
the host from a graph input by elementwise steps (the model's quantized image, so the im2col joins the CPU
step that quantizes and packs it), its weights are an int8 parameter, groups is 1, and the packed
reduction needs fewer blocks (:func:`im2col_window`). Everything else is left as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from vdla.graph.ew import is_elementwise
from vdla.graph.graph import Graph, Node
from vdla.graph.opnames import CONV2D
from vdla.graph.ops import infer_types
from vdla.graph.passes import fresh_name
from vdla.graph.types import TensorType
from vdla.graph.window import make_window


def reduction_blocks(c: int, kh: int, kw: int, block: int) -> tuple[int, int]:
    """GEMM reduction blocks per output element of a ``c``-channel ``kh`` x ``kw`` convolution: (as it is,
    ``ceil(c / block) * kh * kw``; after im2col, ``ceil(c * kh * kw / block)``). The second is never larger."""
    return math.ceil(c / block) * kh * kw, math.ceil(c * kh * kw / block)


def im2col_window(c: int, kh: int, kw: int, block: int) -> tuple[int, int] | None:
    """The window ``(rows, columns)`` an im2col of a ``c``-channel ``kh`` x ``kw`` convolution takes:
    ``(kh, 1)`` (the kernel rows alone) where that needs no more reduction blocks than ``(kh, kw)``, else
    ``(kh, kw)``; None where neither needs fewer blocks than the convolution as it is."""
    before, full = reduction_blocks(c, kh, kw, block)
    rows = math.ceil(c * kh / block) * kw
    if min(rows, full) >= before:
        return None
    return (kh, 1) if rows <= full else (kh, kw)


def computed_on_host(value: str, graph: Graph) -> bool:
    """Whether ``value`` is a graph input or computed from one by elementwise nodes whose other tensor
    operands are parameters (a quantize of the image, a normalization): the host computes it before any
    accelerator layer runs, in the CPU step that packs it for the accelerator."""
    producers = graph.producers()
    while value not in graph.inputs:
        node = producers.get(value)
        if node is None or not is_elementwise(node) or any(i not in graph.params for i in node.inputs[1:]):
            return False
        value = node.inputs[0]
    return True


def _window(node: Node, types: Mapping[str, TensorType], graph: Graph):
    a = node.attrs
    x, w = types[node.inputs[0]], graph.params[node.inputs[1]]
    return make_window(
        "conv2d", x.shape[2:], w.shape[2:], a.get("stride", 1), a.get("dilation", 1), a.get("padding", 0)
    )[0]


def applies(node: Node, graph: Graph, types: Mapping[str, TensorType], block: int) -> bool:
    """Whether :func:`im2col_convs` rewrites ``node`` (see the module docstring)."""
    if node.op != CONV2D or int(node.attrs.get("groups", 1)) != 1:
        return False
    x, w = node.inputs[0], node.inputs[1]
    if types[x].dtype != "int8" or w not in graph.params or graph.params[w].dtype != np.int8:
        return False
    _, c, kh, kw = graph.params[w].shape
    return im2col_window(c, kh, kw, block) is not None and computed_on_host(x, graph)


def im2col_convs(graph: Graph, block: int) -> Graph:
    """Rewrite every conv2d that :func:`applies` (``block``: the accelerator's ``block_in``) as an im2col
    and a 1x1 conv2d of the reshaped weights; the conv keeps its output name and its bias input, so its
    epilogue and readers are untouched. Weights no other node reads are dropped."""
    types = infer_types(graph)
    taken = set(types)
    params, param_types = dict(graph.params), dict(graph.param_types)
    nodes: list[Node] = []
    replaced: set[str] = set()
    for node in graph.nodes:
        if not applies(node, graph, types, block):
            nodes.append(node)
            continue
        x, w, *bias = node.inputs
        win = _window(node, types, graph)
        o, c, kh, kw = params[w].shape
        _, cols_ = im2col_window(c, kh, kw, block)
        whole = cols_ == kw  # else the kernel rows alone: the columns stay the conv's taps
        (top, bottom, left, right), (sh, sw), (dh, dw) = win.pads, win.stride, win.dilation
        cols = fresh_name(f"{node.output}:im2col", taken)
        attrs = {
            "kernel": [kh, cols_],
            "stride": [sh, sw if whole else 1],
            "padding": [top, bottom, left, right] if whole else [top, bottom, 0, 0],
            "dilation": [dh, dw if whole else 1],
        }
        nodes.append(Node("im2col", (x,), cols, attrs))
        w2 = fresh_name(f"{w}:im2col", taken)
        params[w2] = np.ascontiguousarray(params[w].reshape(o, -1, 1, 1 if whole else kw))
        if w in param_types:
            param_types[w2] = TensorType(params[w2].shape, param_types[w].dtype, param_types[w].quant)
        rest = {k: v for k, v in node.attrs.items() if k not in ("stride", "padding", "dilation", "groups")}
        if not whole:
            rest.update(stride=[1, sw], padding=[0, 0, left, right], dilation=[1, dw])
        nodes.append(Node("conv2d", (cols, w2, *bias), node.output, rest))
        replaced.add(w)
    read = {i for n in nodes for i in n.inputs}
    for w in replaced - read:
        params.pop(w)
        param_types.pop(w, None)
    return graph.copy(nodes=nodes, params=params, param_types=param_types)
