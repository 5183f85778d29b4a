"""Which layers the accelerator runs: a conv2d/dense with the epilogue it expresses, a pooling, or a channel
scale (squeeze-excite's product) on the ALU.

A layer is recognised once, on the lowered (integer) graph: its anchor's checks here, its epilogue by the
one grammar of :mod:`vdla.graph.epilogue` (:func:`~vdla.graph.epilogue.match_integer`). A matcher returns the
layer, or the reason it stays on the CPU (a string the placement notes carry to the user).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from vdla.compiler import CompileError
from vdla.compiler.attention import AttentionSpec
from vdla.compiler.attention_qdq import attention_lowering
from vdla.compiler.blockdiag import BlockPart, block_parts, check_parts, is_block_diagonal, parts_refusal
from vdla.compiler.channel_scale import ChannelScaleLowering
from vdla.compiler.depthwise import mode_refusal
from vdla.compiler.dw_pointwise import dw_pointwise_refusal
from vdla.compiler.fused_pool import FusedPool
from vdla.compiler.layer_norm import LayerNormLowering, LayerNormSpec
from vdla.compiler.pool import PoolSpec, pool_lowering
from vdla.compiler.spec import ChannelScaleSpec, Conv2dSpec
from vdla.config import HwConfig
from vdla.graph import attention as att
from vdla.graph.copies import COPY
from vdla.graph.epilogue import Epilogue, match_integer
from vdla.graph.graph import Graph, Node, only_reader
from vdla.graph.layernorm import IntLayerNorm
from vdla.graph.opnames import (
    ATTENTION_INT,
    CAST,
    CLIP,
    CONV2D,
    DENSE,
    DEQUANTIZE,
    GLOBAL_SUM_POOL,
    LAYER_NORM,
    LAYER_NORM_INT,
    MATMUL,
    MAX_POOL2D,
    MUL,
    QUANTIZE,
    REFUSAL,
    RELU,
    RESHAPE,
    SLICE,
    SOFTMAX,
    TAKE,
    TRANSPOSE,
)
from vdla.graph.qdq import (
    AttentionBlock,
    channel_product,
    int_attention,
    int_layer_norm,
    is_depthwise,
)
from vdla.graph.types import TensorType


@dataclass(frozen=True)
class ConvGeometry:
    """The window of a conv2d layer as the compiler takes it (a dense layer: a 1x1 convolution)."""

    stride: int | tuple[int, int] = 1
    padding: int | tuple[int, ...] = 0
    dilation: int | tuple[int, int] = 1


@dataclass(frozen=True, eq=False)
class AccelLayer:
    """A conv2d/dense with the epilogue the accelerator runs: the graph values it reads and writes, its
    input shape, weights, window and epilogue (the arguments of :func:`vdla.compiler.compile_conv2d`).

    Invariant: ``nodes`` are the node outputs the layer computes, the anchor first; ``residual`` is the value
    the epilogue adds exactly when ``epilogue.residual`` names its dtype; ``pool`` is a max pool of the
    output fused into the tiles (its output is then ``out``); ``w`` names the int8 value a dense layer's weight
    is computed as at run time (``weights`` is then its OIHW shape, and a CPU step packs it for the layer);
    ``groups`` equals the channels of a depthwise conv2d (``weights`` (C, 1, kh, kw)); ``parts``, where not empty:
    the layer runs as these block-diagonal parts (:mod:`vdla.compiler.blockdiag`), a depthwise one or one whose
    dense weights are block-diagonal, built and checked once, at placement; a depthwise layer without parts
    runs on the GEMM core's depthwise mode (:mod:`vdla.compiler.depthwise`, ``dw_mode``); ``note``: why the
    layer runs as it does where the step table should say so (a depthwise layer the mode refused);
    ``depthwise``: a depthwise layer on the mode fused before this 1x1 convolution
    (:mod:`vdla.compiler.dw_pointwise`), whose ``expand`` may be the 1x1 expand convolution fused before it (the
    whole inverted residual block one step); ``source``: the conv2d layer whose tabled output this residual add
    (an identity convolution, :mod:`vdla.graph.copies`) reads on chip (:attr:`~vdla.compiler.spec.Fusions.post`).
    At most one of ``depthwise``, ``expand`` and ``source`` is set (:attr:`fused_before`). With a ``depthwise``
    or a ``source``, the layer's input ``x`` is the first fused layer's (a ``depthwise`` with an ``expand``: the
    expand's), whose outputs never reach DRAM; ``expand`` is set only on the ``depthwise`` of a 1x1 layer, which
    keeps its own ``x`` (the expand's output); ``post_res``: the
    ``source``'s output is the add's residual, and ``residual`` names the add's input instead; ``gate``:
    squeeze-excite's channel scale of the input fused before this 1x1 convolution
    (:attr:`~vdla.compiler.spec.Fusions.gate`): ``x`` is then the scale's input, its gate the scale's
    ``residual``, and the scaled tensor never reaches DRAM; ``gap``: a global average of this depthwise layer's
    output fused into its tiles (:mod:`vdla.compiler.depthwise`), whose result (``gap.out``) is the layer's second
    output."""

    op: str
    nodes: tuple[str, ...]
    x: str
    out: str
    in_shape: tuple[int, int, int, int]  # NCHW the compiler sees (dense: (M, K, 1, 1))
    weights: np.ndarray | tuple[int, int, int, int]  # OIHW int8, or the shape of run-time weights
    geometry: ConvGeometry
    epilogue: Epilogue
    residual: str | None = None
    pool: PoolLayer | None = None
    w: str | None = None
    groups: int = 1
    parts: tuple[BlockPart, ...] = ()
    note: str = ""
    depthwise: AccelLayer | None = None
    expand: AccelLayer | None = None
    source: AccelLayer | None = None
    post_res: bool = False
    gate: PoolLayer | None = None
    gap: PoolLayer | None = None

    def spec(self) -> Conv2dSpec:
        """The layer's shape as the compiler checks it (raises CompileError naming what does not fit); for a
        depthwise layer, the geometry of one channel's convolution."""
        g = self.geometry
        sh = self.weights if self.w is not None else self.weights.shape
        n, c, h, w = self.in_shape
        in_shape, oc = (self.in_shape, sh[0]) if self.groups == 1 else ((n, 1, h, w), 1)
        return Conv2dSpec.make(in_shape, oc, sh[2:], g.stride, g.padding, g.dilation)

    @property
    def plain(self) -> bool:
        """Whether the layer is a conv2d of one group with constant weights and no parts, fused pool or layer fused
        before it (what each fusion takes, adding its own conditions)."""
        fused = self.parts or self.w or self.pool or self.fused_before
        return self.op == CONV2D and self.groups == 1 and not fused

    @property
    def fused_before(self) -> AccelLayer | None:
        """The layer fused before this one, whose output stays on chip: its ``depthwise``, ``expand`` or
        ``source`` layer (None where there is none)."""
        return self.depthwise or self.expand or self.source

    @property
    def dw_mode(self) -> bool:
        """Whether the layer runs on the depthwise mode (:func:`vdla.compiler.depthwise.compile_depthwise`)."""
        return self.groups != 1 and not self.parts


CHANNEL_SCALE = "channel_scale"  # the op of a PoolLayer that is a channel scale (mul(x, s) -> requantization)


@dataclass(frozen=True)
class PoolLayer:
    """A layer the accelerator's ALU runs: a pooling (:mod:`vdla.compiler.pool`), a channel scale
    (:mod:`vdla.compiler.channel_scale`) or a LayerNorm over (tokens, features) rows
    (:mod:`vdla.compiler.layer_norm`, op ``layer_norm_int``, read and written in a dense layer's token-major layout):
    the graph values it reads and writes and its spec. A global average is
    ``global_sum_pool -> mul -> clip -> cast`` [-> reshape to (N, C), which leaves the packed bytes as they are];
    a channel scale ``mul(x, s) -> mul -> clip -> cast``, whose per-channel ``s`` it reads as ``residual``
    (packed like a layer's output)."""

    op: str
    nodes: tuple[str, ...]
    x: str
    out: str
    spec: PoolSpec | ChannelScaleSpec | LayerNormSpec | tuple[AttentionSpec, ...]
    residual: str | None = None
    residual_role: str = "res"  # the program's name of the tensor ``residual`` is bound to
    w: None = None  # what an accelerator unit may carry, never a pool's: run-time weights,
    gate: None = None  # a fused channel scale,
    gap: None = None  # a fused global average


def _known_nonneg(value: str, graph: Graph) -> bool:
    """Whether ``value`` is >= 0 by construction: a ReLU, or a clip with a non-negative lower bound (through
    a cast)."""
    node = graph.producers().get(value)
    if node is not None and node.op == CAST:
        node = graph.producers().get(node.inputs[0])
    if node is None:
        return False
    lo = node.attrs.get("lo")
    return node.op == RELU or (node.op == CLIP and isinstance(lo, int) and lo >= 0)


def fuse_pool(conv: AccelLayer, pool: PoolLayer, graph: Graph) -> AccelLayer | None:
    """``conv`` with the max pool ``pool`` of its output fused into its tiles (:mod:`vdla.compiler.fused_pool`),
    or None where that is not exact or not possible: the pool must be the output's only reader and
    :meth:`~vdla.compiler.fused_pool.FusedPool.for_layer` take the layer."""
    if (
        conv.op != CONV2D
        or conv.groups != 1
        or conv.parts
        or pool.op != MAX_POOL2D
        or pool.x != conv.out
        or conv.residual
    ):
        return None
    if conv.out in graph.outputs or len(graph.consumers().get(conv.out, [])) != 1:
        return None
    try:
        sp = conv.spec()
        FusedPool.for_layer(pool.spec.window, (sp.oh, sp.ow), conv.epilogue)
    except CompileError:
        return None
    return replace(conv, nodes=(*conv.nodes, *pool.nodes), out=pool.out, pool=pool)


def fuse_pools(units: list[tuple[str, AccelLayer | PoolLayer | list[Node]]], graph: Graph) -> list:
    """The placement's units with each accelerator max pool fused into the convolution before it where
    :func:`fuse_pool` allows."""
    return _fuse_adjacent(units, lambda prev, unit: isinstance(unit, PoolLayer) and fuse_pool(prev, unit, graph))


def _fuse_adjacent(
    units: list,
    fuse: Callable[[AccelLayer | PoolLayer, AccelLayer | PoolLayer], AccelLayer | None],
    pays: Callable[[AccelLayer], bool] | None = None,
    first: type = AccelLayer,
) -> list:
    """``units`` with each accelerator unit after an accelerator unit of type ``first`` (a convolution layer, or
    an ALU layer) replaced, together with it, by ``fuse(that unit, unit)`` where it returns a layer (a falsy value:
    the two stay apart) and ``pays`` (if given) accepts it."""
    out: list = []
    for kind, unit in units:
        prev = out[-1][1] if out and out[-1][0] == "accel" else None
        fused = fuse(prev, unit) if kind == "accel" and isinstance(prev, first) else None
        if fused and (pays is None or pays(fused)):
            out[-1] = ("accel", fused)
        else:
            out.append((kind, unit))
    return out


def pointwise_refusal(dw: AccelLayer, pw: AccelLayer, graph: Graph, cfg: HwConfig) -> str | None:
    """Why the 1x1 convolution ``pw`` cannot run fused after the depthwise layer ``dw`` (:func:`fuse_pointwise`), or
    None: ``dw`` runs on the depthwise mode, ``pw`` is a conv2d with constant weights, no parts and no fused pool,
    the only reader of ``dw``'s output (not a graph output), and
    :class:`~vdla.compiler.dw_pointwise.DwPointwiseLowering` takes the pair on ``cfg``."""
    if not dw.dw_mode or dw.expand:
        return "the depthwise layer runs as block-diagonal parts" if dw.parts else "it is no depthwise layer alone"
    if pw.x != dw.out:
        return f"the layer after it reads {pw.x!r}, not its output"
    if not pw.plain:
        return f"the layer after it is no plain convolution ({pw.op} with parts, run-time weights or a fusion)"
    readers = graph.consumers().get(dw.out, [])
    if dw.out in graph.outputs or len(readers) != 1:
        return f"its output is also read by {', '.join(sorted({n.op for n in readers} - {pw.op}) or ['the caller'])}"
    g = dw.geometry
    return dw_pointwise_refusal(dw.in_shape, dw.weights, g.stride, g.padding, dw.epilogue, pw.weights, pw.epilogue, cfg)


def fuse_pointwise(dw: AccelLayer, pw: AccelLayer, graph: Graph, cfg: HwConfig) -> AccelLayer | None:
    """The 1x1 convolution ``pw`` with the depthwise layer ``dw`` whose output it reads fused before it
    (:mod:`vdla.compiler.dw_pointwise`), or None where :func:`pointwise_refusal` names why not."""
    if pointwise_refusal(dw, pw, graph, cfg):
        return None
    return replace(pw, nodes=(*dw.nodes, *pw.nodes), x=dw.x, depthwise=dw)


def expand_refusal(ex: AccelLayer, pair: AccelLayer, graph: Graph, cfg: HwConfig) -> str | None:
    """Why the 1x1 convolution ``ex`` cannot run fused before the depthwise -> 1x1 layer ``pair`` whose depthwise
    input it computes (:func:`fuse_expand`), or None: ``ex`` is a plain conv2d (no parts, pool, residual, run-time
    weights or fusion of its own) whose output only the depthwise layer reads (not a graph output), and
    :class:`~vdla.compiler.dw_pointwise.DwPointwiseLowering` takes the block on ``cfg``."""
    dw = pair.depthwise
    if dw is None or not dw.dw_mode or dw.expand is not None or dw.x != ex.out:
        return "it is no fused depthwise -> 1x1 layer reading the 1x1 layer's output"
    if not ex.plain or ex.residual:
        return "the layer before it is no plain convolution (parts, a pool, a residual, run-time weights or a fusion)"
    readers = graph.consumers().get(ex.out, [])
    if ex.out in graph.outputs or len(readers) != 1:
        return f"the 1x1 layer's output is also read by {', '.join(sorted({n.op for n in readers})) or 'the caller'}"
    g, expand = dw.geometry, (ex.weights, ex.epilogue)
    args = (ex.in_shape, dw.weights, g.stride, g.padding, dw.epilogue, pair.weights, pair.epilogue, cfg, expand)
    return dw_pointwise_refusal(*args)


def fuse_expand(ex: AccelLayer, pair: AccelLayer, graph: Graph, cfg: HwConfig) -> AccelLayer | None:
    """The fused depthwise -> 1x1 layer ``pair`` with the 1x1 convolution ``ex`` computing its depthwise input fused
    before it (the expand layer of an inverted residual block, :mod:`vdla.compiler.dw_pointwise`), or None where
    :func:`expand_refusal` names why not."""
    if expand_refusal(ex, pair, graph, cfg):
        return None
    block = replace(pair.depthwise, nodes=(*ex.nodes, *pair.depthwise.nodes), expand=ex)
    return replace(pair, nodes=(*ex.nodes, *pair.nodes), x=ex.x, depthwise=block)


def fuse_gate(scale: PoolLayer, conv: AccelLayer, graph: Graph) -> AccelLayer | None:
    """The 1x1 convolution ``conv`` with the channel scale ``scale`` of its input (squeeze-excite's product) fused
    before it, or None where that is not possible: ``conv`` is a plain conv2d (no parts, pool, run-time weights or
    fusion of its own) and the only reader of the scale's output (not a graph output). The compiler refuses the
    rest, naming why (:meth:`~vdla.compiler.conv_lowering.ConvLowering.gate_refusal`)."""
    if scale.op != CHANNEL_SCALE or not conv.plain or conv.gate or conv.x != scale.out or scale.out in graph.outputs:
        return None
    if len(graph.consumers().get(scale.out, [])) != 1:
        return None
    return replace(conv, nodes=(*scale.nodes, *conv.nodes), x=scale.x, gate=scale)


def fuse_gap(dw: AccelLayer, pool: PoolLayer, graph: Graph) -> AccelLayer | None:
    """The depthwise layer ``dw`` with the global average ``pool`` of its output fused into its tiles, or None
    where that is not possible: ``dw`` runs alone on the depthwise mode (no fusion of its own) and ``pool`` is a
    global average reading its output. Other readers of the output still read it from DRAM."""
    if not dw.dw_mode or dw.expand is not None or dw.gap is not None or pool.op != GLOBAL_SUM_POOL or pool.x != dw.out:
        return None
    return replace(dw, nodes=(*dw.nodes, *pool.nodes), gap=pool)


def fuse_gaps(units: list, graph: Graph, pays: Callable[[AccelLayer], bool]) -> list:
    """The placement's units with each global average fused into the depthwise layer before it where
    :func:`fuse_gap` allows and ``pays(fused layer)`` (it compiles, and runs faster than the two apart)."""
    return _fuse_adjacent(units, lambda prev, unit: isinstance(unit, PoolLayer) and fuse_gap(prev, unit, graph), pays)


def fuse_gates(units: list, graph: Graph, pays: Callable[[AccelLayer], bool]) -> list:
    """The placement's units with each channel scale fused into the 1x1 convolution after it where
    :func:`fuse_gate` allows and ``pays(fused layer)`` (it compiles, and runs faster than the two apart)."""

    def fuse(scale: PoolLayer, unit) -> AccelLayer | None:
        return isinstance(unit, AccelLayer) and fuse_gate(scale, unit, graph)

    return _fuse_adjacent(units, fuse, pays, first=PoolLayer)


def fuse_add(conv: AccelLayer, add: AccelLayer, graph: Graph) -> AccelLayer | None:
    """The residual add ``add`` with the conv2d layer ``conv`` whose output it reads (as its input or its residual)
    fused before it, the add applied to the tabled results on chip (:attr:`~vdla.compiler.spec.EpilogueSpec.post`),
    or None where that is not possible: ``add`` is a residual add moved onto the accelerator
    (:mod:`vdla.graph.copies`: an identity convolution with a residual), ``conv`` a plain conv2d (no parts,
    depthwise mode, pool, residual or run-time weights) whose output only ``add`` reads (not a graph output)."""
    if add.op != CONV2D or add.fused_before or add.pool or add.w or not add.residual:
        return None
    if graph.producers()[add.nodes[0]].attrs.get(COPY) != "add":
        return None
    c = add.in_shape[1]
    if not isinstance(add.weights, np.ndarray) or not np.array_equal(add.weights[:, :, 0, 0], np.eye(c)):
        return None
    if not conv.plain or conv.residual or conv.gate:
        return None
    readers = graph.consumers().get(conv.out, [])
    if conv.out in graph.outputs or len(readers) != 1 or readers[0].output not in add.nodes:
        return None
    if (add.x == conv.out) == (add.residual == conv.out):
        return None
    other = add.residual if add.x == conv.out else add.x
    nodes = (*conv.nodes, *add.nodes)
    return replace(add, nodes=nodes, x=conv.x, residual=other, parts=(), source=conv, post_res=add.x != conv.out)


def fuse_adds(units: list, graph: Graph, pays: Callable[[AccelLayer], bool]) -> list:
    """The placement's units with each residual add fused into the conv2d layer before it where :func:`fuse_add`
    allows and ``pays(fused layer)`` (it compiles, and runs faster than the two layers apart)."""
    return _fuse_adjacent(units, lambda prev, unit: isinstance(unit, AccelLayer) and fuse_add(prev, unit, graph), pays)


def fuse_pointwises(units: list, graph: Graph, cfg: HwConfig, pays: Callable[[AccelLayer], bool]) -> list:
    """The placement's units with each depthwise layer fused into the 1x1 convolution after it where
    :func:`fuse_pointwise` allows and ``pays(fused layer)`` (it runs faster than its two layers apart)."""

    def fuse(prev: AccelLayer, unit) -> AccelLayer | None:
        return isinstance(unit, AccelLayer) and fuse_pointwise(prev, unit, graph, cfg)

    return _fuse_adjacent(units, fuse, pays)


def fuse_expands(units: list, graph: Graph, cfg: HwConfig, pays: Callable[[AccelLayer, list], bool]) -> list:
    """The placement's units with each 1x1 expand layer fused into the depthwise -> 1x1 layer after it where
    :func:`fuse_expand` allows and ``pays(block, apart)`` (it runs faster than the units it replaces, ``apart``).
    A depthwise layer and 1x1 convolution left apart are fused as a pair for the block first."""
    out: list = []
    for kind, unit in units:
        tail = []  # the accelerator units right before this one, up to two, in order
        for k, u in reversed(out[-2:]):
            if k != "accel" or not isinstance(u, AccelLayer):
                break
            tail.insert(0, u)
        if kind == "accel" and tail and isinstance(unit, AccelLayer):
            pair = fuse_pointwise(tail[-1], unit, graph, cfg) if len(tail) == 2 else None
            if pair is not None:  # ex, dw, pw: all three
                block, apart = fuse_expand(tail[0], pair, graph, cfg), [tail[0], tail[1], unit]
            else:  # ex, then the fused pair
                block, apart = fuse_expand(tail[-1], unit, graph, cfg), [tail[-1], unit]
            if block is not None and pays(block, apart):
                del out[-(len(apart) - 1) :]
                out.append(("accel", block))
                continue
        out.append((kind, unit))
    return out


def match_pool(anchor: Node, graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> PoolLayer | str:
    """The pooling layer anchored at ``anchor`` (a max pool, or a global sum with its requantization), or the
    reason it stays on the CPU. A max pool pads with the int8 minimum unless its input is known >= 0."""
    x = anchor.inputs[0]
    if types[x].dtype != "int8":
        return f"a {types[x].dtype} pool (the ALU pools int8 activations: quantize the model)"
    a, shape = anchor.attrs, types[x].shape
    try:
        if anchor.op == MAX_POOL2D:
            if a.get("dilation", 1) not in (1, (1, 1)):
                return f"a max pool with dilation {a['dilation']} (the ALU pools dense windows)"
            pad_min = not _known_nonneg(x, graph)
            spec = PoolSpec.make(shape, a["kernel"], a.get("stride"), a.get("padding", 0), "max", pad_min=pad_min)
            nodes = [anchor.output]
        else:
            chain = _requant_chain(anchor, graph)
            if isinstance(chain, str):
                return chain
            nodes, (m, shift, lo, hi) = chain
            spec = PoolSpec.global_avg(shape, m, shift, (lo, hi))
        pool_lowering(spec, cfg).check_minimal()
    except CompileError as e:
        return str(e)
    return PoolLayer(anchor.op, tuple(nodes), x, nodes[-1], spec)


def match_scale(anchor: Node, graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> PoolLayer | str:
    """The channel scale anchored at the product ``anchor`` (``mul(x, s)`` of an int8 feature map by an int8
    (N, C, 1, 1) vector, requantized: what :meth:`vdla.graph.qdq._QdqLowering.lower_channel_mul` writes), or
    the reason it stays on the CPU. Any other elementwise anchor is not a layer of its own."""
    order = channel_product([types[v].shape for v in anchor.inputs]) if anchor.op == MUL else None
    if order is None or any(types[v].dtype != "int8" for v in anchor.inputs) or anchor.attrs.get("shift"):
        return f"{anchor.op}: not in a layer's epilogue"
    x, s = (anchor.inputs[i] for i in order)
    chain = _requant_chain(anchor, graph)
    if isinstance(chain, str):
        return "a channel product without its requantization (mul by a scalar, clip, cast to int8) runs on the CPU"
    nodes, (m, shift, lo, hi) = chain
    try:
        spec = ChannelScaleSpec.make(types[x].shape, m, shift, (lo, hi))
        ChannelScaleLowering(spec, cfg).check_minimal()
    except CompileError as e:
        return str(e)
    return PoolLayer(CHANNEL_SCALE, tuple(nodes), x, nodes[-1], spec, residual=s)


def layer_norm_refusal(p: IntLayerNorm, shape: tuple[int, ...], cfg: HwConfig) -> str | None:
    """Why the accelerator cannot run a LayerNorm in integers of parameters ``p`` over an int8 input of
    ``shape`` on ``cfg`` (:mod:`vdla.compiler.layer_norm`), or None: the input must be (tokens, features), a dense
    layer's rows, and :class:`~vdla.compiler.layer_norm.LayerNormLowering` take it (batch 1, whole blocks of
    features, ACC room for a tile)."""
    if len(shape) != 2:
        return f"layer_norm of a {'x'.join(map(str, shape))} input: the accelerator normalizes (tokens, features) rows"
    try:
        LayerNormLowering(LayerNormSpec(shape[0], p), cfg)
    except CompileError as e:
        return str(e)
    return None


def match_layer_norm(anchor: Node, graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> PoolLayer | str:
    """The LayerNorm on the accelerator anchored at ``anchor``, a ``layer_norm_int`` of int8 (tokens, features)
    (what :func:`vdla.graph.qdq.lower_qdq` writes for ``quantize(layer_norm(dequantize(x)))``); or the reason it
    stays on the CPU: for a float ``layer_norm``, why the QDQ lowering left it in float."""
    x = anchor.inputs[0]
    if anchor.op == LAYER_NORM:
        readers = graph.consumers().get(anchor.output, [])
        q = readers[0] if len(readers) == 1 and readers[0].op == QUANTIZE else None
        if q is None:
            read = ", ".join(sorted({r.op for r in readers})) or "the caller"
            return f"layer_norm: its output is read by {read}, not quantized right after it"
        found = int_layer_norm(q, graph, types, graph.params)
        if not isinstance(found, str):
            found = layer_norm_refusal(found[2], types[x].shape, cfg) or "the QDQ lowering left it in float"
        return found if found.startswith("layer_norm") else f"layer_norm: {found}"
    spec = LayerNormSpec(types[x].shape[0], IntLayerNorm.of_node(anchor, graph.params))
    why = layer_norm_refusal(spec.ln, types[x].shape, cfg)
    return why or PoolLayer(LAYER_NORM_INT, (anchor.output,), x, anchor.output, spec)


def attention_specs(
    tokens: int,
    heads: tuple[att.AttentionHead, ...],
    p: att.IntAttention,
    in_channels: int,
    keep: tuple[bool, ...] | None,
    runtime_mask: bool,
) -> tuple[AttentionSpec, ...]:
    """One :class:`~vdla.compiler.attention.AttentionSpec` a head of an attention block: its views of the input
    of ``in_channels`` and of the concatenated output."""
    out = len(heads) * p.d
    return tuple(
        AttentionSpec(tokens, p, in_channels, h.q_at, h.k_at, h.v_at, out, h.out_at, keep, runtime_mask)
        for h in heads
    )  # fmt: skip


def attention_refusal(block: AttentionBlock, in_channels: int, cfg: HwConfig) -> str | None:
    """Why the accelerator cannot run the attention block ``block`` (:func:`vdla.graph.qdq.int_attention`) over an
    input of ``in_channels`` on ``cfg`` (:mod:`vdla.compiler.attention`: batch 1, whole channel blocks, the
    tokens' limits), or None."""
    specs = attention_specs(block.tokens, block.heads, block.p, in_channels, block.keep, block.mask is not None)
    return _lowering_refusal(specs, cfg)


def _lowering_refusal(specs: tuple[AttentionSpec, ...], cfg: HwConfig) -> str | None:
    """Why the head lowering (:func:`~vdla.compiler.attention.attention_lowering`) refuses a head of ``specs`` on
    ``cfg``, or None."""
    try:
        for spec in specs:
            attention_lowering(spec, cfg)
    except CompileError as e:
        return str(e)
    return None


def match_attention(anchor: Node, graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> PoolLayer | str:
    """The attention block on the accelerator anchored at ``anchor``, an ``attention_int`` (what
    :func:`vdla.graph.qdq.lower_qdq` writes for a quantized attention block): its heads' programs one after the
    other, reading the QKV value's channel views and writing their channel blocks of the output, a run-time keep
    vector read as the program's ``keep`` tensor; or the reason it stays on the CPU: for a float ``softmax``, why
    the QDQ lowering left its attention block in float."""
    if anchor.op == SOFTMAX:
        if not _weights_a_product(anchor, graph.consumers()):
            return "softmax: no accelerator form outside an attention block (softmax(Q K^T) V)"
        why = _attention_reason(anchor, graph, types, cfg)
        return why if why.startswith("attention") else f"attention: {why}"
    x = anchor.inputs[0]
    keep = anchor.inputs[1] if len(anchor.inputs) > 1 else None
    constant = keep is not None and keep in graph.params
    mask = tuple(bool(v) for v in np.asarray(graph.params[keep]).ravel()) if constant else None
    p = att.node_params(anchor)
    specs = attention_specs(types[x].shape[0], att.node_heads(anchor), p, types[x].shape[1], mask,
                            keep is not None and not constant)  # fmt: skip
    why = _lowering_refusal(specs, cfg)
    if why is not None:
        return why
    runtime = None if constant else keep
    return PoolLayer(ATTENTION_INT, (anchor.output,), x, anchor.output, specs, runtime, "keep")


def _weights_a_product(softmax: Node, consumers: dict[str, list[Node]]) -> bool:
    """Whether the probabilities of ``softmax`` reach a product with a computed operand (a ``matmul``, or the
    ``dense`` layers with run-time weights a QDQ model's ``P V`` lowers to, a head each) through quantizations and
    views only: an attention block's softmax, not a decode's."""
    through = (QUANTIZE, DEQUANTIZE, RESHAPE, TRANSPOSE, SLICE, TAKE)
    frontier = [softmax]
    for _ in range(6):
        frontier = [r for n in frontier for r in consumers.get(n.output, [])]
        if any(r.op in (MATMUL, DENSE) for r in frontier):
            return True
        frontier = [r for r in frontier if r.op in through]
    return False


def _attention_reason(softmax: Node, graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> str:
    """Why the attention block of a float ``softmax`` stays on the CPU: :func:`vdla.graph.qdq.int_attention`'s
    reason (of an onnxruntime QDQ model's block too, its probabilities quantized) or the accelerator's."""
    if REFUSAL in softmax.attrs:  # a QDQ model's block: why its lowering left it
        return str(softmax.attrs[REFUSAL])
    consumers = graph.consumers()
    node = only_reader(softmax.output, consumers)
    node = node if node is not None and node.op == MATMUL else None
    chain = []  # the matmul's readers up to the quantize and the views of its int8 output after it
    while node is not None and (not chain or node.op in (RESHAPE, TRANSPOSE, QUANTIZE)):
        chain.append(node)
        node = only_reader(node.output, consumers)
    q = next((n for n in chain if n.op == QUANTIZE), None)
    if q is None:
        return "its output is not quantized (vdla's quantizer leaves it in float)"
    found = int_attention(q, graph, types, graph.params, tuple(chain[chain.index(q) + 1 :]))
    if isinstance(found, str):
        return found
    return attention_refusal(found, types[found.x].shape[1], cfg) or "the QDQ lowering left it in float"


def _requant_chain(anchor: Node, graph: Graph) -> tuple[list[str], tuple[int, int, int, int]] | str:
    """``anchor -> mul(m, shift) -> clip -> cast(int8)`` [-> reshape to (N, C)] after a global sum or a channel
    product: the node outputs and (m, shift, lo, hi), or why not."""
    consumers, outputs = graph.consumers(), set(graph.outputs)
    want = (MUL, CLIP, CAST, RESHAPE)
    nodes, node = [anchor.output], only_reader(anchor.output, consumers, outputs)
    while node is not None and len(nodes) <= 4 and node.op == want[len(nodes) - 1] and node.inputs[0] == nodes[-1]:
        nodes.append(node.output)
        node = only_reader(node.output, consumers, outputs)
    by_op = {graph.producers()[v].op: graph.producers()[v] for v in nodes}
    mul, clip, cast = by_op.get(MUL), by_op.get(CLIP), by_op.get(CAST)
    if len(nodes) < 4 or "b" not in mul.attrs or np.ndim(mul.attrs["b"]) or cast.attrs.get("dtype") != "int8":
        return "a global sum without its requantization (mul by a scalar, clip, cast to int8) runs on the CPU"
    reshape = by_op.get(RESHAPE)
    if reshape is not None and len(reshape.attrs["shape"]) != 2:
        nodes.pop()  # only the (N, C) view keeps the packed bytes
    lo, hi = clip.attrs.get("lo"), clip.attrs.get("hi")
    if not (isinstance(lo, int) and isinstance(hi, int)):
        return "a global sum clipped to computed bounds"
    return nodes, (int(mul.attrs["b"]), int(mul.attrs.get("shift", 0)), lo, hi)


def match_accel(anchor: Node, graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> AccelLayer | str:
    """The accelerator layer anchored at the conv2d/dense ``anchor``, or the reason it stays on the CPU. A
    depthwise conv2d (groups = channels, one weight channel per group) is a layer of block-diagonal parts."""
    x, w = anchor.inputs[0], anchor.inputs[1]
    if len(anchor.inputs) > 2:
        return "a float bias (the accelerator adds an int32 bias after quantization)"
    runtime = anchor.op == DENSE and w not in graph.params and types[w].dtype == "int8"
    if types[x].dtype != "int8" or not (runtime or (w in graph.params and graph.params[w].dtype == np.int8)):
        return "not quantized to int8 (run a QDQ model, or quantize with --calib)"
    conv = anchor.op == CONV2D
    a = anchor.attrs
    groups = int(a.get("groups", 1)) if conv else 1
    if groups != 1 and not is_depthwise(anchor, types):
        return f"groups={groups} of {types[x].shape[1]} channels (the GEMM core runs dense or depthwise convolutions)"
    found = match_integer(anchor, graph, types)
    if isinstance(found, str):
        return found
    geometry = ConvGeometry(a.get("stride", 1), a.get("padding", 0), a.get("dilation", 1))
    if runtime:
        weights = (*types[w].shape, 1, 1)
    else:
        weights = graph.params[w] if conv else graph.params[w][:, :, None, None]
    in_shape = types[x].shape if conv else (*types[x].shape, 1, 1)
    layer = AccelLayer(
        anchor.op, found.nodes, x, found.output, tuple(in_shape), weights, geometry, found.epilogue, found.residual
    )
    if runtime:
        return replace(layer, w=w)
    layer = replace(layer, groups=groups)
    found = _runs_as_parts(layer, cfg)
    if isinstance(found, str):
        return found
    parts, note = found
    return replace(layer, parts=parts, note=note)


def _runs_as_parts(layer: AccelLayer, cfg: HwConfig) -> tuple[tuple[BlockPart, ...], str] | str:
    """The block-diagonal parts ``layer`` runs as (:mod:`vdla.compiler.blockdiag`) and the step table's note:
    none for a depthwise layer the depthwise mode takes (:func:`~vdla.compiler.depthwise.mode_refusal`), else
    its parts with the mode's refusal, or why it cannot run as either; a conv2d's whose dense weights are
    block-diagonal where its parts fit (else none: it runs in its dense form)."""
    depthwise = layer.groups != 1
    g = layer.geometry
    if depthwise:
        why = mode_refusal(layer.in_shape, layer.weights, g.stride, g.padding, g.dilation, layer.epilogue, cfg)
        if why is None:
            return (), ""
    if not depthwise and (
        layer.op != CONV2D
        or parts_refusal(cfg)
        or layer.epilogue.row_mask is not None  # the parts' epilogues are channel slices: no rows to mask
        or not is_block_diagonal(layer.weights, cfg.block_out)
    ):
        return (), ""
    try:
        parts = block_parts(layer.in_shape, layer.weights, layer.epilogue, cfg)
        check_parts(parts, layer.weights.shape[2:], g.stride, g.padding, cfg)
    except CompileError as e:
        return f"depthwise mode: {why}; depthwise parts: {e}" if depthwise else ((), "")
    return tuple(parts), f"block-diagonal parts, not the depthwise mode: {why}" if depthwise else ""
