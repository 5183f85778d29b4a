"""The accelerator's lowerings: for each operator the accelerator runs, one typed definition of how a group
anchored at it becomes a layer (``match``), how the layer compiles into a step (``compile``) and what the step
table calls it (``describe``).

As in TVM's operator registry, where higher layers attach attributes to operators, the lowerings live in the
model compiler and are keyed by the operator names of :mod:`vdla.graph.opnames` (:data:`LOWERINGS`); the graph
registry knows only what lies below (:attr:`vdla.graph.ew.EwDef.epilogue_step`). Placing an operator on the
accelerator is adding one :class:`AccelLowering`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from vdla.compiler import CompileError, compile_conv2d
from vdla.compiler.attention import AttentionHeads
from vdla.compiler.attention_qdq import compile_attention_programs
from vdla.compiler.blockdiag import region
from vdla.compiler.epilogue_passes import normalize
from vdla.compiler.layer_norm import compile_layer_norm
from vdla.compiler.run import scratch_arrays
from vdla.compiler.spec import EpilogueSpec, OutputView
from vdla.config import HwConfig
from vdla.graph.copies import COPY
from vdla.graph.graph import Graph, Node
from vdla.graph.opnames import (
    ATTENTION_INT,
    CONV2D,
    DENSE,
    GLOBAL_AVG_POOL,
    GLOBAL_SUM_POOL,
    LAYER_NORM,
    LAYER_NORM_INT,
    MAX_POOL2D,
    MUL,
    SOFTMAX,
)
from vdla.graph.rowpair import MACS, PAIRED, PHASED
from vdla.graph.types import TensorType
from vdla.isa import encode_program
from vdla.model.artifact import AccelStep
from vdla.model.match import (
    CHANNEL_SCALE,
    AccelLayer,
    PoolLayer,
    match_accel,
    match_attention,
    match_layer_norm,
    match_pool,
    match_scale,
)
from vdla.runtime.device import Device

Layer = AccelLayer | PoolLayer


class StepBuilder(Protocol):
    """What a lowering's ``compile`` uses of the model builder (:class:`vdla.model.lower.ModelBuilder`, which
    this module does not import: the builder dispatches here): the graph and configuration, the planned DRAM
    tensors (``pending``: a layer's output -> its tensor), the layers compiled during fusion, the output views,
    and the binding of a program to the tensors."""

    g: Graph
    cfg: HwConfig
    cache: Any
    pending: dict[str, str]
    programs: dict[str, list]
    up_reads: dict[str, tuple[str, Any]]

    def compiled(self, layer: AccelLayer) -> Any: ...
    def compiled_alu(self, layer: PoolLayer, view: OutputView | None = None) -> Any: ...
    def emit(self, layer: Layer, low, stream, constants: dict, dev: Device, addr: dict[str, int]) -> tuple: ...
    def bind(
        self, layer: Layer, low, stream, constants: dict, dev: Device, addr: dict[str, int], regions=None
    ) -> list: ...
    def join(self, programs: list, dev: Device, hoist_uops: bool = False) -> Any: ...
    def view_of(self, value: str) -> OutputView | None: ...
    def upsampling(self, value: str) -> OutputView | None: ...
    def accel_reads(self, layer: Layer) -> list[str]: ...
    def accel_writes(self, layer: Layer) -> list[str]: ...


@dataclass(frozen=True)
class AccelLowering:
    """How the accelerator runs the groups anchored at one operator.

    * ``match(anchor, graph, types, cfg)``: the layer of the group anchored at ``anchor`` (with the epilogue
      chain it takes), or the reason it stays on the CPU;
    * ``compile(builder, layer, dev, addr)``: the layer compiled against the planned DRAM tensors (``addr``)
      of ``builder``, its instruction stream emitted on ``dev``: the step;
    * ``describe(layer)``: the operator text of the step table (the fusions it holds, ``+``-joined).

    Invariant: ``compile`` takes every layer ``match`` returns, and every fusion of it the model builder makes.
    """

    match: Callable[[Node, Graph, dict[str, TensorType], HwConfig], Layer | str]
    compile: Callable[[StepBuilder, Layer, Device, dict[str, int]], AccelStep]
    describe: Callable[[Layer], str]


def lowering_of(layer: Layer) -> AccelLowering:
    """The lowering that compiles ``layer``: its anchor operator's (a channel scale is anchored at a ``mul``)."""
    return LOWERINGS[MUL if layer.op == CHANNEL_SCALE else layer.op]


def compile_layer(b: StepBuilder, layer: Layer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """Compile one accelerator layer by its lowering and emit its instruction stream against the planned tensors."""
    return lowering_of(layer).compile(b, layer, dev, addr)


def describe_conv(layer: AccelLayer) -> str:
    """The step table's operator of a convolution layer: its fusions, ``+``-joined in the order they run."""
    if layer.parts:
        return "depthwise_conv2d" if layer.groups > 1 else layer.op
    if layer.dw_mode:
        return "depthwise_conv2d" + "+global_avg_pool" * (layer.gap is not None)
    if layer.depthwise is not None:
        return "conv2d+" * (layer.depthwise.expand is not None) + "depthwise_conv2d+conv2d"
    op = "channel_scale+" * (layer.gate is not None) + layer.op + "+max_pool2d" * (layer.pool is not None)
    return op + "+add" * (layer.source is not None)


def describe_alu(layer: PoolLayer) -> str:
    """The step table's operator of an ALU layer (a global sum's is the average it computes, a LayerNorm in
    integers the LayerNorm)."""
    return {GLOBAL_SUM_POOL: GLOBAL_AVG_POOL, LAYER_NORM_INT: LAYER_NORM, ATTENTION_INT: "attention"}.get(
        layer.op, layer.op
    )


def compile_conv(b: StepBuilder, layer: AccelLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """A convolution layer: as block-diagonal parts, on the depthwise mode, as a fused depthwise -> 1x1 pair, or
    on the GEMM core (with its fused channel scale, max pool or residual add), its schedule timed on the
    simulator."""
    if layer.parts:
        return compile_parts(b, layer, dev, addr)
    if layer.dw_mode:
        return compile_depthwise(b, layer, dev, addr)
    if layer.depthwise is not None:
        return compile_dw_pointwise(b, layer, dev, addr)
    compiled = b.compiled(layer)
    insns, code = b.emit(layer, compiled.lowering, compiled.stream, compiled.constants, dev, addr)
    schedule = "residual add fused, " * (layer.source is not None) + "channel scale fused, " * (layer.gate is not None)
    schedule += compiled.schedule.describe()
    desc = conv_desc(layer.source or layer, compiled, schedule)
    if layer.source is not None:
        desc["input"] = list(layer.source.in_shape)
    return conv_step(b, layer, insns, code, compiled.spec.macs, desc)


def conv_desc(layer: AccelLayer, compiled, schedule: str) -> dict:
    """The output shape, kernel, stride, ``schedule`` and epilogue of a convolution layer ``compiled`` (its last
    part, for one of parts) as the tables show them."""
    sp = compiled.spec
    return {
        "output": [layer.in_shape[0], sp.oc if not layer.parts else layer.in_shape[1], *compiled.lowering.out_hw],
        "kernel": [sp.kh, sp.kw],
        "stride": [sp.sh, sp.sw],
        "schedule": schedule,
        "epilogue": compiled.epilogue.key(),
    }


def conv_step(b: StepBuilder, layer: AccelLayer, insns, code, macs: int, desc: dict) -> AccelStep:
    """The step of a convolution layer (``desc``: its shapes and schedule, :func:`conv_desc`) as the tables
    show it (its operator by :func:`describe_conv`), with the layer's note; a 0/1 convolution that moves
    values (:data:`~vdla.graph.copies.COPY`) counts no MAC of the network."""
    desc = {"op": describe_conv(layer), "input": list(layer.in_shape), **desc}
    attrs = b.g.producers()[layer.nodes[0]].attrs
    paired = f"{attrs[PAIRED]} paired: two rows side by side as channels" if PAIRED in attrs else None
    if PHASED in attrs:
        paired += f"; the {attrs[PHASED]}'s pairs start at row -1"
    up = b.upsampling(layer.out)
    also = f"stores its nearest upsampling by {up.step[0]}x{up.step[1]}" if up else None
    read = b.up_reads.get(layer.out)
    if read:
        (fh, fw), value = read[1].factor, read[0]
        read = f"reads the nearest upsampling by {fh}x{fw} of {value!r} in place (no copy stored)"
    note = "; ".join(n for n in (layer.note, paired, also, read) if n)
    if note:
        desc["note"] = note
    if attrs.get(COPY):
        desc["copy"] = attrs[COPY]
    if up:
        desc["also"] = "upsample"  # the copy layer it stands in for (ModelBuilder.copy_source)
    macs = network_macs(attrs, macs)
    return AccelStep(layer.out, code.addr, len(insns), macs, b.accel_reads(layer), b.accel_writes(layer), desc)


def compile_parts(b: StepBuilder, layer: AccelLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """A depthwise or block-diagonal layer as its parts (:mod:`vdla.compiler.blockdiag`), each compiled by
    :func:`compile_part` (the schedule searched once per part shape), joined into one stream."""
    schedules: dict[tuple, object] = {}
    programs, compiled = [], None
    for part in layer.parts:
        compiled, insns = compile_part(b, layer, part, schedules.get(part.in_shape), dev, addr)
        schedules.setdefault(part.in_shape, compiled.schedule)
        programs.append(insns)
    joined = b.join(programs, dev)
    b.programs[layer.out] = joined.insns
    code = dev.array(np.frombuffer(encode_program(joined.insns), np.uint8))
    n, c = layer.in_shape[:2]
    sp, depthwise = compiled.spec, layer.groups > 1
    macs = n * c * sp.oh * sp.ow * sp.kh * sp.kw * (1 if depthwise else c)
    schedule = f"{len(programs)} block-diagonal parts, {compiled.schedule.describe()}"
    return conv_step(b, layer, joined.insns, code, macs, conv_desc(layer, compiled, schedule))


def compile_depthwise(b: StepBuilder, layer: AccelLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """A depthwise layer on the depthwise mode (:mod:`vdla.compiler.depthwise`), its schedule timed on the
    simulator."""
    compiled = b.compiled(layer)
    insns, code = b.emit(layer, compiled.lowering, compiled.stream, compiled.constants, dev, addr)
    sp = compiled.spec
    desc = {
        "output": list(sp.out_shape),
        "kernel": [sp.k, sp.k],
        "stride": [sp.stride, sp.stride],
        "schedule": f"depthwise mode, {'global average fused, ' * bool(layer.gap)}{compiled.schedule.describe()}",
        "epilogue": EpilogueSpec.of(normalize(layer.epilogue)).key(),
    }
    return conv_step(b, layer, insns, code, sp.macs, desc)


def compile_dw_pointwise(b: StepBuilder, layer: AccelLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """A depthwise layer and the 1x1 convolution reading it, fused (:mod:`vdla.compiler.dw_pointwise`), with the
    1x1 expand layer before them where it is fused too, its schedule timed on the simulator."""
    expand = layer.depthwise.expand is not None
    compiled = b.compiled(layer)
    insns, code = b.emit(layer, compiled.lowering, compiled.stream, compiled.constants, dev, addr)
    sp, pw = compiled.spec, compiled.pw_spec
    desc = {
        "input": list(compiled.in_shape),
        "output": [pw.n, pw.oc, pw.oh, pw.ow],
        "kernel": [sp.k, sp.k],
        "stride": [sp.stride, sp.stride],
        "schedule": f"{'1x1 -> ' * expand}depthwise -> 1x1 fused, {compiled.schedule.describe()}",
        "epilogue": compiled.epilogue.key(),
    }
    return conv_step(b, layer, insns, code, compiled.macs, desc)


def compile_part(b: StepBuilder, layer: AccelLayer, part, schedule, dev: Device, addr: dict[str, int]):
    """One part of a parts layer, compiled (with ``schedule`` where it fits, else searched) to read its regions
    of the layer's input and residual and to store through a view selecting its channel block of the output
    (or of the tensor the layer's own view stores into): (the compiled part, its bound program)."""
    g, cfg, (_, c, h, w) = layer.geometry, b.cfg, layer.in_shape
    own = -(-c // cfg.block_out)
    sp = layer.spec()  # the output's height and width (a depthwise layer's: one channel's)
    full = b.view_of(layer.out) or OutputView((sp.oh, sp.ow))
    total = full.out_blocks(own)
    view = replace(full, blocks=(full.blocks[0] + part.block, total))
    options = dict(stride=g.stride, padding=g.padding, epilogue=part.epilogue, out_view=view, config=cfg)
    try:
        compiled = compile_conv2d(part.in_shape, part.weights, schedule=schedule, cache=b.cache, **options)
    except CompileError:
        if schedule is None:
            raise
        compiled = compile_conv2d(part.in_shape, part.weights, cache=b.cache, **options)
    regions = {
        "inp": region(part, own, (h, w), cfg),
        "res": region(part, own, (sp.oh, sp.ow), cfg),
        "out": region(part, total, full.full_hw, cfg, whole=True),
    }
    insns = b.bind(layer, compiled.lowering, compiled.stream, compiled.constants, dev, addr, regions)
    return compiled, insns


def compile_alu(b: StepBuilder, layer: PoolLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """A pooling or channel scale on the ALU (:meth:`~vdla.model.lower.ModelBuilder.compiled_alu`), its
    schedule timed on the simulator."""
    compiled = b.compiled_alu(layer, b.view_of(layer.out))
    insns, code = b.emit(layer, compiled.lowering, compiled.stream, compiled.constants, dev, addr)
    sp = layer.spec
    desc = {
        "op": describe_alu(layer),
        "input": list(sp.shape),
        "output": list(sp.out_shape),
        "kernel": list(sp.window.kernel),
        "stride": list(sp.window.stride),
        "schedule": compiled.schedule.describe(),
        "epilogue": "requant",
    }
    if layer.op == MAX_POOL2D:
        desc["epilogue"] = f"pad {'int8 min' if sp.pad_min else 'zero (input >= 0)'}"
    out = [b.pending[layer.out]]
    return AccelStep(layer.out, code.addr, len(insns), 0, b.accel_reads(layer), out, desc)


def compile_norm(b: StepBuilder, layer: PoolLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """A LayerNorm over (tokens, features) rows on the ALU and the GEMM core (:mod:`vdla.compiler.layer_norm`),
    reading and writing the dense layers' token-major layout (a resident program's chunks go through DRAM as
    weight tiles too: its scratch tensor)."""
    if b.view_of(layer.out) is not None:
        raise CompileError(f"layer_norm {layer.out!r}: the program stores its whole output, not into a view")
    compiled = compile_layer_norm(layer.spec, b.cfg, b.cache)
    low = compiled.lowering
    insns, code = b.emit(layer, low, compiled.stream, {**low.constants(), **scratch_arrays(low)}, dev, addr)
    shape = [*layer.spec.shape, 1, 1]  # NCHW as a dense layer's rows are described
    threads = f"{low.threads} virtual threads" if low.threads > 1 else "1 thread"
    tiles = f"tiles of {low.r} token{'s' * (low.r > 1)}"
    if compiled.order:
        threads = f"{compiled.order.threads} virtual threads"
        squares = "S2 by the Gram GEMM" if compiled.order.gram else "S2 by SQR"
        tiles = f"every token resident, chunks of {low.lanes}, {squares}"
    desc = {
        "op": describe_alu(layer),
        "input": shape,
        "output": shape,
        "kernel": [1, 1],
        "stride": [1, 1],
        "schedule": f"{tiles}, {threads}",
        "epilogue": "requant",
    }
    return AccelStep(layer.out, code.addr, len(insns), 0, b.accel_reads(layer), [b.pending[layer.out]], desc)


def compile_attention_block(b: StepBuilder, layer: PoolLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
    """An attention block (:func:`vdla.model.match.match_attention`): the heads' one program
    (:func:`~vdla.compiler.attention.compile_attention_heads`), or where its setups do not fit the buffers (or
    for a QDQ model's block, :mod:`vdla.compiler.attention_qdq`) each head's program in turn
    (:func:`~vdla.compiler.attention_qdq.compile_attention_programs`), bound to the QKV tensor, the concatenated
    output and a run-time keep vector, joined into one stream; the scratch tensors (``K``/``V`` tiles, ``V^T``,
    ``O^T``, the exp planes) are constants of the image."""
    if b.view_of(layer.out) is not None:
        raise CompileError(f"attention {layer.out!r}: the heads store their whole output, not into a view")
    compiled_heads = compile_attention_programs(layer.spec, b.cfg, b.cache)
    together = isinstance(compiled_heads[0].lowering, AttentionHeads)
    programs = []
    for compiled in compiled_heads:
        low = compiled.lowering
        constants = {**low.constants(), **scratch_arrays(low)}
        if layer.residual is None:
            constants["keep"] = low.keep_vector(None)
        programs.append(b.bind(layer, low, compiled.stream, constants, dev, addr))
    joined = b.join(programs, dev)
    b.programs[layer.out] = joined.insns
    code = dev.array(np.frombuffer(encode_program(joined.insns), np.uint8))
    first = layer.spec[0]
    tokens, d = first.tokens, first.d
    desc = {
        "op": describe_alu(layer),
        "input": [tokens, first.views[0], 1, 1],
        "output": [tokens, first.views[4], 1, 1],
        "kernel": [1, 1],
        "stride": [1, 1],
        "schedule": f"{len(layer.spec)} heads of {d}, "
        + ("each head's setup beside the previous head's tiles" if together else "one after the other")
        + (", run-time key mask" if layer.residual else ", constant key mask" if first.keep else ""),
        "epilogue": "requant",
    }
    macs = 2 * len(layer.spec) * tokens * tokens * d
    return AccelStep(layer.out, code.addr, len(joined.insns), macs, b.accel_reads(layer), [b.pending[layer.out]], desc)


def network_macs(attrs: dict, macs: int) -> int:
    """The multiply-accumulates of the network a convolution node (``attrs``) computes, ``macs`` as its shapes
    count them: none for a 0/1 convolution moving values (:data:`~vdla.graph.copies.COPY`), the count it keeps for
    one rewritten with zero taps (:data:`vdla.graph.rowpair.MACS`)."""
    return 0 if attrs.get(COPY) else int(attrs.get(MACS, macs))


CONVOLUTION = AccelLowering(match_accel, compile_conv, describe_conv)
POOL = AccelLowering(match_pool, compile_alu, describe_alu)
CHANNEL_SCALING = AccelLowering(match_scale, compile_alu, describe_alu)
NORMALIZATION = AccelLowering(match_layer_norm, compile_norm, describe_alu)  # a float layer_norm: the reason only
ATTENTION = AccelLowering(match_attention, compile_attention_block, describe_alu)  # a float softmax: the reason only
# operator -> its accelerator lowering (the operators the accelerator runs as a layer of their own)
LOWERINGS: dict[str, AccelLowering] = {
    CONV2D: CONVOLUTION,
    DENSE: CONVOLUTION,
    MAX_POOL2D: POOL,
    GLOBAL_SUM_POOL: POOL,
    MUL: CHANNEL_SCALING,
    LAYER_NORM_INT: NORMALIZATION,
    LAYER_NORM: NORMALIZATION,
    ATTENTION_INT: ATTENTION,
    SOFTMAX: ATTENTION,
}
