"""The model compiler's back end: a placed graph becomes steps, DRAM tensors, instruction streams and an image.

Layout: tensors an accelerator layer reads or writes live packed (NCHW1n16c) in DRAM; a CPU region converts
at its boundary with the JIT pack/unpack kernels; consecutive accelerator layers pass the packed tensor on
with no conversion. Memory: the DRAM activations are planned by liveness (reuse where lifetimes do not
overlap). Code: each accelerator layer is compiled (tensorizing compiler, schedule search) against its planned
addresses, and runs of consecutive accelerator steps are joined into one instruction stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from vdla.compiler import CompileError, ScheduleCache, compile_conv2d
from vdla.compiler.chain import join_programs, weight_relocator
from vdla.compiler.channel_scale import compile_channel_scale
from vdla.compiler.depthwise import compile_depthwise
from vdla.compiler.dw_pointwise import compile_dw_pointwise
from vdla.compiler.pool import compile_pool
from vdla.compiler.schedule import GATE
from vdla.compiler.search import emit_program
from vdla.compiler.spec import ChannelScaleSpec, Fusions, InputUpsample, OutputView
from vdla.config import HwConfig
from vdla.graph.copies import COPY, block_view, channel_span
from vdla.graph.graph import Graph, Node
from vdla.graph.layout import blocked_shape
from vdla.graph.opnames import (
    CONCAT,
    CONV2D,
    DENSE,
    INTERLEAVE,
    MATMUL,
    MAX_POOL2D,
    SLICE,
)
from vdla.graph.ops import OPS, infer_types, interleave_type
from vdla.graph.tables import cpu_tables
from vdla.graph.types import TensorType
from vdla.graph.verify import verify
from vdla.isa import Insn, IsaError, encode_program, validate_program
from vdla.model.artifact import AccelChain, AccelStep, Artifact, CpuStep, DramTensor
from vdla.model.lowering import LOWERINGS, compile_layer, network_macs
from vdla.model.match import (
    AccelLayer,
    PoolLayer,
    expand_refusal,
    fuse_adds,
    fuse_expands,
    fuse_gaps,
    fuse_gates,
    fuse_pointwises,
    fuse_pools,
    pointwise_refusal,
)
from vdla.model.memplan import Lifetime, plan_memory
from vdla.model.place import Placement
from vdla.runtime.device import Device
from vdla.runtime.dram import Buffer

Log = Callable[[str], None]


def _packed(t: TensorType, cfg: HwConfig, block: int) -> tuple[tuple[int, ...], tuple[int, int, int, int]]:
    """(packed shape, NCHW shape) of an activation tensor of graph type ``t`` in the blocked layout."""
    nchw = t.shape if len(t.shape) == 4 else (*t.shape, 1, 1)
    return blocked_shape(nchw, cfg.batch, block), nchw


class ModelBuilder:
    """Turns a partitioned graph into steps, DRAM tensors and an image (one use)."""

    def __init__(
        self,
        graph: Graph,
        cfg: HwConfig,
        cache: ScheduleCache | None,
        log: Log,
        fuse_depthwise: bool = True,
        fuse_adds: bool = True,
        fuse_squeeze_excite: bool = True,
    ):
        self.g, self.cfg, self.cache, self.log = graph, cfg, cache, log
        self.fuse_depthwise = fuse_depthwise  # a depthwise layer and the 1x1 conv reading it as one step
        self.fuse_adds = fuse_adds  # a residual add after a table in the conv whose output it adds
        self.fuse_squeeze_excite = fuse_squeeze_excite  # its average into the depthwise layer, its product into the 1x1
        self.memo: dict[tuple, object] = {}  # (output, fused, view, copy view, gated, averaged) -> the layer compiled
        self.fusion_log: dict[tuple[str, int], tuple[int, int] | str] = {}  # fusion_pays: (fused, apart) or why
        self.views: dict[str, tuple[str, OutputView]] = {}  # stored_interleaves: output -> (tensor, view)
        # a layer's output -> (the upsampling phase it stores, whether besides its own output) (store_phases)
        self.upsamples: dict[str, tuple[str, bool]] = {}
        self.up_candidates: dict[str, tuple[AccelLayer, str]] = {}  # upsampling -> (its phase, the 1x1 layer)
        self.up_reads: dict[str, tuple[str, InputUpsample]] = {}  # 1x1 layer -> (upsampled value, which blocks)
        self.explained: set[str] = set()  # CPU nodes a placement note explains (build_steps)
        self.types = infer_types(graph)
        self.dram: dict[str, tuple[tuple[int, ...], str]] = {}  # DRAM tensor -> (packed shape, dtype)
        self.steps: list = []
        self.programs: dict[str, list[Insn]] = {}  # accelerator step -> its instruction stream

    def dram_tensor(self, value: str, block: int) -> str:
        t = self.types[value]
        name = f"{value}@{block}"
        self.dram.setdefault(name, (_packed(t, self.cfg, block)[0], t.dtype))
        return name

    def weight_tensor(self, value: str) -> str:
        """The DRAM tensor of a dense layer's weight computed at run time: the (N, K) int8 ``value`` in the
        packed weight layout (:func:`vdla.graph.layout.pack_weights`, what ``pack_blocked`` writes with
        batch ``block_out`` and block ``block_in``)."""
        n, k = self.types[value].shape
        name = f"{value}@wgt"
        self.dram.setdefault(name, (blocked_shape((n, k, 1, 1), self.cfg.block_out, self.cfg.block_in), "int8"))
        return name

    def build_steps(self, plan: Placement) -> None:
        """CPU steps with their boundary conversions, accelerator steps, in the order of the placement's
        regions."""
        units = fuse_pools(plan.units(), self.g)
        if self.fuse_depthwise:
            units = fuse_pointwises(units, self.g, self.cfg, self.fusion_pays)
            units = fuse_expands(units, self.g, self.cfg, self.fusion_pays)
        if self.fuse_squeeze_excite:
            units = fuse_gaps(units, self.g, self.gap_pays)
            units = fuse_gates(units, self.g, self.gate_pays)
        if self.fuse_adds:
            units = fuse_adds(units, self.g, self.fusion_pays)
        if self.fuse_depthwise:
            units = self.fusion_notes(units)
        units = self.stored_interleaves(units)
        groups = plan.partition.fusion.groups  # a noted conv's group is explained by its note
        self.explained = {n.output for g in groups if g.anchor.output in plan.notes for n in g.nodes}
        accel_needs: dict[str, set[int]] = {}  # value -> blocks an accelerator layer reads it in
        self.weight_needs: set[str] = set()  # values a layer reads as its run-time weight
        for kind, unit in units:
            if kind == "accel":
                accel_needs.setdefault(unit.x, set()).add(self.cfg.block_in)
                if unit.residual:
                    accel_needs.setdefault(unit.residual, set()).add(self.cfg.block_out)
                if unit.gate is not None:
                    accel_needs.setdefault(unit.gate.residual, set()).add(self.cfg.block_out)
                if unit.w:
                    self.weight_needs.add(unit.w)
        cpu_readers: dict[str, set[str]] = {}  # value -> CPU nodes reading it
        for k, unit in units:
            if k == "cpu":
                for n in unit:
                    for i in n.inputs:
                        cpu_readers.setdefault(i, set()).add(n.output)
        graph_outputs = set(self.g.outputs)

        def host_needs(region: set[str]) -> set[str]:
            """Values a CPU node outside ``region`` or the caller of the model reads."""
            return {v for v, readers in cpu_readers.items() if readers - region} | graph_outputs

        accel_out = {unit.out for kind, unit in units if kind == "accel"} | {v for v, _ in self.views.values()}
        accel_out |= {unit.gap.out for kind, unit in units if kind == "accel" and unit.gap is not None}
        if self.weight_needs & accel_out:
            raise CompileError(f"run-time weights {sorted(self.weight_needs & accel_out)} must be packed on the host")
        self.pending: dict[str, str] = {}  # accel output -> its DRAM tensor (block_out)
        for kind, unit in units:
            if kind == "accel":
                self.steps.append(("accel", unit))
                target = self.views[unit.out][0] if unit.out in self.views else unit.out
                self.pending[unit.out] = self.pending[target] = self.dram_tensor(target, self.cfg.block_out)
                if (phase := self.copy_phase(unit.out)) is not None:  # the upsampling it stores as well
                    target = self.views[phase][0]
                    self.pending[phase] = self.pending[target] = self.dram_tensor(target, self.cfg.block_out)
                if unit.gap is not None:  # the fused average's result, a second output
                    self.pending[unit.gap.out] = self.dram_tensor(unit.gap.out, self.cfg.block_out)
            else:
                self.steps.append(("cpu", self.cpu_region(unit, accel_needs, host_needs, accel_out, plan.notes)))
        # graph outputs the accelerator produced: unpack them on the host
        tail = [o for o in self.g.outputs if o in accel_out]
        if tail:
            self.steps.append(("cpu", self.cpu_region([], accel_needs, host_needs, accel_out, {}, extra_outputs=tail)))
        # values produced on the host (graph inputs or CPU regions) that an accelerator reads directly
        # were packed by their CPU region; graph inputs read by the accelerator need a packing step
        direct = [v for v in accel_needs if v in self.g.inputs]
        if direct:
            step = self.cpu_region([], accel_needs, host_needs, accel_out, {}, extra_outputs=direct)
            self.steps.insert(0, ("cpu", step))

    def fusion_pays(self, layer: AccelLayer, apart: list[AccelLayer] | None = None) -> bool:
        """Whether the fused ``layer`` (a depthwise -> 1x1 pair, :mod:`vdla.compiler.dw_pointwise`, with its expand
        layer too, or a layer and the residual add after its table, :attr:`~vdla.compiler.spec.EpilogueSpec.post`)
        compiles and runs in fewer cycles than the layers it replaces, each as compiled on its own (timing-only
        simulator): ``apart``, or its two layers. Fused, the compute stage runs the layers' GEMMs and passes in
        turn while their outputs stay on chip: that pays where the layers apart wait for DRAM, not where GEMMs
        dominate. Each compile is kept (:meth:`compiled`): the steps take whichever form was chosen."""
        key = (layer.out, _depth(layer))
        try:
            fused = self.compiled(layer)
        except CompileError as e:
            self.fusion_log[key] = str(e)
            return False
        apart = apart or [layer.fused_before, replace(layer, depthwise=None, source=None)]
        self.fusion_log[key] = (fused.search.cycles, sum(self.compiled(u).search.cycles for u in apart))
        return self.fusion_log[key][0] < self.fusion_log[key][1]

    def fusion_notes(self, units: list) -> list:
        """The units with a note on each depthwise layer left apart from the 1x1 layer reading it, and on each fused
        depthwise -> 1x1 layer left apart from the 1x1 layer computing its input: why (the step table's note)."""
        layers = [u for k, u in units if k == "accel" and isinstance(u, AccelLayer)]
        by_x, by_out = {u.x: u for u in layers}, {u.out: u for u in layers}
        out = []
        for kind, unit in units:
            why = self.why_apart(unit, by_x, by_out) if kind == "accel" and isinstance(unit, AccelLayer) else None
            out.append((kind, replace(unit, note="; ".join(filter(None, (unit.note, why)))) if why else unit))
        return out

    def why_apart(self, layer: AccelLayer, by_x: dict, by_out: dict) -> str | None:
        """Why ``layer`` (a depthwise layer alone, or a fused pair without its expand layer) runs apart from its
        neighbour, a 1x1 convolution reading its output (or computing its input): the tensor's other readers, the
        fusion's refusal, or its cycles fused and apart (None where there is no such neighbour)."""
        if layer.dw_mode and layer.expand is None:
            pw, depth, what = by_x.get(layer.out), 1, "not fused with the 1x1 layer after it"
            if pw is None or pw.op != CONV2D or pw.spec().kh != 1:  # no 1x1 layer reads it: nothing to explain
                return None
            why = pointwise_refusal(layer, pw, self.g, self.cfg)
        elif layer.depthwise is not None and layer.depthwise.expand is None:
            ex, pw, depth, what = by_out.get(layer.depthwise.x), layer, 2, "the 1x1 layer before it not fused"
            if ex is None or ex.op != CONV2D or ex.spec().kh != 1:
                return None
            why = expand_refusal(ex, layer, self.g, self.cfg)
        else:
            return None
        logged = self.fusion_log.get((pw.out, depth))
        if why is None and isinstance(logged, tuple):
            why = f"{logged[0]:,} cycles fused, {logged[1]:,} apart"
        return f"{what}: {why or logged}" if (why or logged) else None

    def gate_pays(self, layer: AccelLayer) -> bool:
        """Whether the 1x1 convolution ``layer`` with its channel scale fused before it (``layer.gate``) is faster
        than the two apart: fused, the scaled tensor never goes to DRAM and back, but each step copies its window
        once more on the compute stage (:meth:`pool_fusion_pays`)."""
        return self.pool_fusion_pays(layer, layer.gate, replace(layer, gate=None))

    def gap_pays(self, layer: AccelLayer) -> bool:
        """Whether the depthwise ``layer`` with the global average of its output fused into its tiles
        (``layer.gap``) is faster than the two apart: fused, the output is not read back from DRAM, but each tile
        sums it on the compute stage (:meth:`pool_fusion_pays`)."""
        return self.pool_fusion_pays(layer, layer.gap, replace(layer, gap=None))

    def pool_fusion_pays(self, fused: AccelLayer, pool: PoolLayer, alone: AccelLayer) -> bool:
        """Whether ``fused`` (``alone`` with the ALU layer ``pool`` fused into it) compiles and runs in fewer
        cycles than ``alone`` and ``pool`` apart, on the timing-only simulator. Each compile is kept."""
        try:
            cycles = self.compiled(fused).search.cycles
        except CompileError:
            return False
        apart = self.compiled_alu(pool).search.cycles + self.compiled(alone).search.cycles
        return cycles < apart

    def compiled_alu(self, layer: PoolLayer, view: OutputView | None = None):
        """The ALU layer ``layer`` compiled storing through ``view``: a pooling, or a channel scale."""
        scale = isinstance(layer.spec, ChannelScaleSpec)
        return (compile_channel_scale if scale else compile_pool)(layer.spec, self.cfg, out_view=view, cache=self.cache)

    def compiled(self, layer: AccelLayer):
        """``layer`` compiled (once per output, fused layers and output view): a fused depthwise -> 1x1 pair (with
        its expand layer), a depthwise layer on the depthwise mode, or a conv2d (with its fused pool, into its
        view)."""
        copy = self.copy_of(layer.out)
        return self.compiled_with(layer, self.view_of(layer.out), copy[1] if copy else None)

    def compiled_with(self, layer: AccelLayer, view: OutputView | None, copy_view: OutputView | None = None):
        """``layer`` compiled storing through ``view`` (and ``copy_view``), once per such form (reading an upsampled
        input in place where :meth:`read_in_place` chose so)."""
        up = self.up_reads[layer.out][1] if layer.out in self.up_reads else None
        key = (layer.out, _depth(layer), view, copy_view, up, layer.gate is not None, layer.gap is not None)
        if key not in self.memo:
            self.memo[key] = self._compile(layer, view, copy_view, up)
        return self.memo[key]

    def _compile(
        self,
        layer: AccelLayer,
        view: OutputView | None,
        copy_view: OutputView | None = None,
        up: InputUpsample | None = None,
    ):
        g, options = layer.geometry, dict(config=self.cfg, cache=self.cache)
        if layer.source is not None:  # the residual add after the layer's table
            conv, pg = layer.source, layer.source.geometry
            fusions = Fusions(post=layer.epilogue, post_res=layer.post_res)
            return compile_conv2d(
                conv.in_shape, conv.weights, stride=pg.stride, padding=pg.padding, dilation=pg.dilation,
                epilogue=conv.epilogue, fusions=fusions, out_view=view, **options,
            )  # fmt: skip
        if layer.depthwise is not None:
            dw, ex = layer.depthwise, layer.depthwise.expand
            in_shape, expand = (dw.in_shape, None) if ex is None else (ex.in_shape, (ex.weights, ex.epilogue))
            return compile_dw_pointwise(
                in_shape, dw.weights, layer.weights, stride=dw.geometry.stride, padding=dw.geometry.padding,
                dw_epilogue=dw.epilogue, pw_epilogue=layer.epilogue, out_view=view, expand=expand, **options,
            )  # fmt: skip
        if layer.dw_mode:
            gap = layer.gap.spec if layer.gap is not None else None
            return compile_depthwise(
                layer.in_shape, layer.weights, stride=g.stride, padding=g.padding, epilogue=layer.epilogue, gap=gap,
                **options,
            )  # fmt: skip
        pool = layer.pool.spec.window if layer.pool is not None else None
        gate = layer.gate.spec if layer.gate is not None else None
        fusions = Fusions(pool=pool, gate=gate, up=up, copy_view=copy_view)
        return compile_conv2d(
            layer.in_shape, layer.weights, stride=g.stride, padding=g.padding, dilation=g.dilation,
            epilogue=layer.epilogue, fusions=fusions, out_view=view, **options,
        )  # fmt: skip

    def stored_interleaves(self, units: list) -> list:
        """The units without the ``interleave`` nodes whose phases the accelerator stores in place: each phase
        layer writes its strided slots of the interleaved tensor (``self.views``: phase output ->
        (interleaved value, :class:`~vdla.compiler.spec.OutputView`)), so no CPU step unpacks, interleaves and
        packs again. An interleave is stored so when every phase is a conv2d layer's output (no residual, no
        fused pool) that nothing else reads."""
        layers = {u.out: u for kind, u in units if kind == "accel"}
        consumers = self.g.consumers()
        self.views: dict[str, tuple[str, OutputView]] = {}
        self.dropped: set[str] = set()  # layers another stores for (store_phases) or made needless (store_parts)
        self.aliases: set[str] = set()  # values stored as channel blocks of a concatenation others read there
        self.readers = {n: u for kind, u in units if kind == "accel" for n in u.nodes}  # node output -> its unit
        cpu_nodes = [n for kind, unit in units if kind == "cpu" for n in unit]
        self.sliced: dict[str, tuple[str, int]] = {}  # slice -> (value, first block), filled next
        self.sliced = {n.output: v for n in cpu_nodes if (v := self.view(n, layers, consumers))}
        out = []
        for kind, unit in units:
            if kind == "cpu":
                unit = [
                    n
                    for n in unit
                    if n.output not in self.sliced
                    and not (n.op == INTERLEAVE and self.store_phases(n, layers, consumers))
                    and not (n.op == CONCAT and self.store_parts(n, layers, consumers))
                ]
                if not unit:
                    continue
            out.append((kind, unit))
        return [(kind, unit) for kind, unit in out if kind != "accel" or unit.out not in self.dropped]

    def view(self, node: Node, layers: dict[str, AccelLayer], consumers) -> tuple[str, int] | None:
        """``(value, first block)`` where the slice ``node`` is read in place (:func:`vdla.graph.copies.block_view`):
        whole channel blocks of one image of an accelerator layer's output (or of such a view), read by
        accelerator layers alone as their input or residual, no graph output. None otherwise (a CPU step slices)."""
        if node.op != SLICE or node.output in self.g.outputs or self.cfg.block_in != self.cfg.block_out:
            return None
        x, block = node.inputs[0], self.cfg.block_out
        span = channel_span(node, self.types[x].shape)
        if span is None or not block_view(span, self.types[x].shape, block) or x not in layers:
            return None
        return (x, span[0] // block) if self.operand_only(node.output, consumers) else None

    def operand_only(self, value: str, consumers) -> bool:
        """Whether every reader of ``value`` is an accelerator layer reading it as its input or residual (or a slice
        of it read in place, :meth:`view`): they may then read it wherever it is stored (:meth:`stored_at`)."""
        for reader in consumers.get(value, []):
            if reader.output in self.sliced:
                continue
            unit = self.readers.get(reader.output)
            if unit is None or value not in (unit.x, getattr(unit, "residual", None)):
                return False
        return True

    def store_phases(self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]]) -> bool:
        """Whether the phases of the interleave ``node`` can store in place; if so their views are recorded."""
        if not self.stored_alone(node, layers, consumers):
            return False
        (sh, sw), out = interleave_type([self.types[v] for v in node.inputs], node.attrs["stride"])
        full = out.shape[2:]
        phases = [layers[v] for v in node.inputs]
        if all(same_layer(phases[0], p) for p in phases[1:]):  # a nearest upsampling: computed once, stored in all
            offsets = tuple(divmod(p, sw) for p in range(len(phases)))
            self.views[phases[0].out] = (node.output, OutputView(full, offsets[0], (sh, sw), copies=offsets[1:]))
            self.dropped.update(p.out for p in phases[1:])
            reader = self.up_reader(node, phases[0], layers, consumers)
            if reader is not None:  # maybe read in place: store_parts decides
                self.up_candidates[node.output] = (phases[0], reader)
                return True
            source = self.copy_source(phases[0], layers)
            anchors = {p.nodes[0] for p in phases}
            only = source is not None and all(c.output in anchors for c in consumers.get(source, []))
            if source is None or not self.copy_pays(layers[source], phases[0], only):
                return True
            self.dropped.add(phases[0].out)
            self.upsamples[source] = (phases[0].out, not only)
            if only:  # read by the copy alone: it stores the phases as its output (else besides it, copy_view)
                self.views[source] = self.views.pop(phases[0].out)
            return True
        for p, v in enumerate(node.inputs):
            self.views[v] = (node.output, OutputView(full, divmod(p, sw), (sh, sw)))
        return True

    def copy_source(self, phase: AccelLayer, layers: dict[str, AccelLayer]) -> str | None:
        """The value whose layer can store the upsampling phase ``phase`` itself, besides its own output: the
        input of ``phase`` where ``phase`` is an exact copy (:meth:`exact_upsample`) and that input is a plain conv2d
        layer's output (no fused pool,
        residual, gate or fused layer before it), no graph output, storing no other copy. None otherwise: the
        phase stays a layer of its own."""
        source = layers.get(phase.x)
        if (
            not self.exact_upsample(phase)
            or source is None
            or not _stores_through_view(source, joins=False)
            or source.fused_before is not None
            or source.gate is not None
            or source.gap is not None
            or source.parts
            or phase.x in self.g.outputs
            or phase.x in self.upsamples
        ):
            return None
        return phase.x

    def exact_upsample(self, phase: AccelLayer) -> bool:
        """Whether the upsampling phase layer ``phase`` copies its input exactly: a 1x1 identity convolution of
        :mod:`vdla.graph.copies` between values of one quantization."""
        copy = self.g.producers()[phase.nodes[0]].attrs.get(COPY) == "upsample"
        return copy and phase.weights.shape[2:] == (1, 1) and self.types[phase.out].quant == self.types[phase.x].quant

    def copy_pays(self, source: AccelLayer, phase: AccelLayer, only: bool) -> bool:
        """Whether ``source`` storing the upsampling ``phase`` copies (as its output where ``only``, else besides it)
        compiles and runs in fewer cycles than the two layers apart (timing-only simulator): it then stores four
        times the pixels, and its compute stage doubles them, but the copy's loads, GEMMs and step are gone."""
        view = self.views[phase.out][1]
        try:
            both = self.compiled_with(source, view if only else None, None if only else view)
        except CompileError:
            return False
        apart = self.compiled_with(source, None).search.cycles + self.compiled_with(phase, view).search.cycles
        return both.search.cycles < apart

    def copy_phase(self, value: str) -> str | None:
        """The upsampling phase the layer computing ``value`` stores besides its own output (:meth:`copy_source`),
        if any; its view (``self.views``) is where :meth:`store_parts` put the phases, a concatenation's slice."""
        phase, also = self.upsamples.get(value, (None, False))
        return phase if also else None

    def copy_of(self, value: str) -> tuple[str, OutputView] | None:
        """(the tensor's value, the view) of the upsampling the layer computing ``value`` also stores, if any."""
        phase = self.copy_phase(value)
        return self.views[phase] if phase is not None else None

    def upsampling(self, value: str) -> OutputView | None:
        """The view through which the layer computing ``value`` stores a nearest upsampling of it in place of the
        copy layer (:meth:`copy_source`): besides its output, or as its output where the copy was its only reader."""
        if value not in self.upsamples:
            return None
        phase, also = self.upsamples[value]
        return self.views[phase if also else value][1]

    def stored_alone(
        self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]], joins: bool = False
    ) -> bool:
        """Whether each input of ``node`` (distinct) is the output of a layer that may store through a view
        (:func:`_stores_through_view`) that only ``node`` reads and no other view holds: a layer that may store
        into ``node``'s tensor. An interleave whose phases store in place counts too for a concatenation
        (``joins``: its phases then store into the concatenation)."""
        parts = [layers.get(v) for v in node.inputs]
        interleaved = {t for t, _ in self.views.values()} if joins else set()
        return len(set(node.inputs)) == len(node.inputs) and all(
            (v in interleaved or _stores_through_view(p, joins))
            and consumers.get(v, []) == [node]
            and v not in self.g.outputs
            and v not in self.views
            for v, p in zip(node.inputs, parts, strict=True)
        )

    def store_parts(self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]]) -> bool:
        """Whether the parts of the channel concatenation ``node`` can store in place; if so their views are
        recorded (part ``k`` writes channel blocks from the sum of the earlier parts' blocks). A concatenation
        is stored so when it joins int8 values of its own quantization along the channels, each a conv2d
        layer's output (a residual allowed, no fused pool) or a stored interleave that nothing else reads, each
        starting a channel block (all but the last of whole blocks: the last one's padding lanes are the
        concatenation's)."""
        t, bo = self.types[node.output], self.cfg.block_out
        if len(t.shape) != 4 or t.dtype != "int8" or int(node.attrs.get("axis", 0)) % 4 != 1:
            return False
        types = [self.types[v] for v in node.inputs]
        alone = self.stored_alone(node, layers, consumers, joins=True)
        if not alone or any(u.quant != t.quant for u in types) or any(u.shape[1] % bo for u in types[:-1]):
            return False
        first = 0
        for v, u in zip(node.inputs, types, strict=True):
            blocks = (first, -(-t.shape[1] // bo))  # the last part may end inside a block
            phases = [p for p, (target, _) in self.views.items() if target == v]
            for p in phases:  # an interleave's phases (or a concatenation's parts) store into their slice
                old = self.views[p][1]
                self.views[p] = (node.output, replace(old, blocks=(first + old.blocks[0], blocks[1])))
            source = self.copied(v, node, layers, consumers)
            if source is not None:  # the copy's source stores into the slice; its other readers read it there
                self.views[source] = (node.output, OutputView(t.shape[2:], blocks=blocks))
                self.aliases.add(source)
                self.dropped.add(v)
            elif not phases:
                self.views[v] = (node.output, OutputView(t.shape[2:], blocks=blocks))
            first += u.shape[1] // bo
        for v in node.inputs:
            if v in self.up_candidates:
                self.read_in_place(v)
        return True

    def copied(self, part: str, node: Node, layers: dict[str, AccelLayer], consumers) -> str | None:
        """The value the concatenation part ``part`` copies (:mod:`vdla.graph.copies` gives a part a copy where
        another node also reads it), where it can instead store into the concatenation itself: a layer's output
        that may store through a view, at the concatenation's quantization, batch 1 (a channel-block slice is
        then contiguous), no graph output, whose every other reader is an accelerator layer reading it as its
        input or residual (it reads the slice). None otherwise."""
        copy = layers.get(part)
        if (
            copy is None
            or self.g.producers()[copy.nodes[0]].attrs.get(COPY) != "concat"
            or self.types[part].shape[0] != 1
        ):
            return None
        v = copy.x
        if (
            not _stores_through_view(layers.get(v), joins=True)
            or v in self.g.outputs
            or v in self.views
            or self.types[v].quant != self.types[node.output].quant
            or self.types[v].shape != self.types[part].shape
        ):
            return None
        return v if self.operand_only(v, consumers) else None  # the copy reads v as its input too

    def up_reader(self, node: Node, phase: AccelLayer, layers: dict[str, AccelLayer], consumers) -> str | None:
        """The 1x1 layer that can read the nearest upsampling ``node`` (an interleave of ``phase`` copies) from the
        tensor it upsamples (:class:`~vdla.compiler.spec.InputUpsample`): ``node`` is read by a channel
        concatenation alone, at a channel block's start, which a plain 1x1 convolution of stride 1 without padding
        reads alone; ``phase`` an exact copy of an accelerator layer's output. None otherwise."""
        cat = consumers.get(node.output, [])
        if len(cat) != 1 or cat[0].op != CONCAT or node.output in self.g.outputs or cat[0].output in self.g.outputs:
            return None
        readers = consumers.get(cat[0].output, [])
        layer = self.readers.get(readers[0].output) if len(readers) == 1 else None
        if not isinstance(layer, AccelLayer) or layer.x != cat[0].output or not layer.plain or layer.gate:
            return None
        try:
            sp = layer.spec()
        except CompileError:
            return None
        if (sp.kh, sp.kw, sp.sh, sp.sw) != (1, 1, 1, 1) or any(sp.pad):
            return None
        at = sum(self.types[v].shape[1] for v in cat[0].inputs[: cat[0].inputs.index(node.output)])
        if at % self.cfg.block_in or not self.exact_upsample(phase) or phase.x not in layers:
            return None
        return layer.out

    def read_in_place(self, value: str) -> None:
        """The upsampling ``value`` (:meth:`up_reader`), now stored into a concatenation's slice, read in place by
        the 1x1 layer reading that concatenation instead: its copy layer dropped, nothing stored into the slice."""
        phase, reader = self.up_candidates.pop(value)
        _, view = self.views.pop(phase.out)
        self.dropped.add(phase.out)
        blocks = -(-self.types[value].shape[1] // self.cfg.block_in)
        self.up_reads[reader] = (phase.x, InputUpsample(view.blocks[0], blocks, view.step))

    def stored_at(self, value: str) -> tuple[str, int]:
        """The value whose DRAM tensor holds ``value`` (itself, or the concatenation it is stored into: the
        outermost, as :meth:`store_parts` keeps the views; for a slice, where its value is) and the channel block
        where ``value`` starts in it."""
        if value in self.sliced:
            source, first = self.sliced[value]
            target, block = self.stored_at(source)
            return target, block + first
        if value not in self.aliases:
            return value, 0
        target, view = self.views[value]
        return target, view.blocks[0]

    def view_of(self, value: str) -> OutputView | None:
        """The view through which the layer computing ``value`` stores it (:meth:`stored_interleaves`), if any."""
        return self.views[value][1] if value in self.views else None

    def read_tensor(self, value: str, block: int) -> str:
        """The DRAM tensor a layer reads ``value`` from (:meth:`stored_at`)."""
        return self.dram_tensor(self.stored_at(value)[0], block)

    def accel_reads(self, layer: AccelLayer) -> list[str]:
        reads = [self.read_tensor(layer.x, self.cfg.block_in)]
        if layer.out in self.up_reads:  # the tensor an upsampled part of its input is read from
            reads.append(self.read_tensor(self.up_reads[layer.out][0], self.cfg.block_in))
        if layer.residual:
            reads.append(self.read_tensor(layer.residual, self.cfg.block_out))
        if layer.w:
            reads.append(self.weight_tensor(layer.w))
        if layer.gate is not None:
            reads.append(self.read_tensor(layer.gate.residual, self.cfg.block_out))
        return reads

    def accel_writes(self, layer: AccelLayer | PoolLayer) -> list[str]:
        """The DRAM tensors an accelerator layer writes: its output's, a fused global average's, and that of the
        upsampling it also stores (:meth:`copy_of`)."""
        gap = [self.pending[layer.gap.out]] if layer.gap is not None else []
        copy = [self.pending[p]] if (p := self.copy_phase(layer.out)) is not None else []
        return [self.pending[layer.out]] + gap + copy

    def view_writes(self, layer: AccelLayer | PoolLayer) -> set[str]:
        """The DRAM tensors ``layer`` writes through a view: other steps write other parts of them."""
        own = {self.pending[layer.out]} if layer.out in self.views else set()
        return own | ({self.pending[p]} if (p := self.copy_phase(layer.out)) is not None else set())

    def lifetimes(self) -> list[Lifetime]:
        """Each DRAM tensor from the step writing it to the last step reading it."""
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, (kind, s) in enumerate(self.steps):
            if kind == "accel":
                reads, writes = self.accel_reads(s), self.accel_writes(s)
            else:
                reads, writes = list(s.dram_inputs.values()), list(s.dram_outputs.values())
            for t in writes:
                if t in first and not (kind == "accel" and t in self.view_writes(s)):  # views share their tensor
                    raise CompileError(f"DRAM tensor {t!r} is written twice (steps {first[t]} and {i})")
                first.setdefault(t, i)
                last[t] = max(last.get(t, i), i)
            for t in reads:
                if t not in first:
                    raise CompileError(f"step {i} reads DRAM tensor {t!r} before any step writes it")
                last[t] = max(last[t], i)
        return [
            Lifetime(t, int(np.prod(shape)) * np.dtype(dtype).itemsize, first[t], last[t])
            for t, (shape, dtype) in self.dram.items()
        ]

    def finish(self, progress: Callable[[str], None] | None = None) -> Artifact:
        """Plan DRAM, compile every accelerator layer against its addresses, and collect the image."""
        cfg = self.cfg
        lifetimes = self.lifetimes()
        plan = plan_memory(lifetimes)
        dev = Device(cfg, "sim")
        arena = dev.alloc(max(plan.total, 1))
        addr = {t: arena.addr + off for t, off in plan.offsets.items()}
        steps = []
        for kind, s in self.steps:
            if kind == "cpu":
                steps.append(s)
                continue
            if progress:
                progress(s.out)
            try:
                steps.append(compile_layer(self, s, dev, addr))
            except CompileError as e:
                shape = "x".join(map(str, self.types[s.x].shape))
                raise CompileError(f"layer {s.out!r} ({s.op} of a {shape} input): {e}") from e
        chains = self.chain(steps, dev)
        live = dev.dram._live.values()
        high = max(b.addr + b.nbytes for b in live) - dev.dram.base
        image = dev.dram.mem[:high].copy()
        tensors = {t: DramTensor(addr[t], tuple(shape), dtype) for t, (shape, dtype) in self.dram.items()}
        host = sum(t.size * np.dtype(t.dtype).itemsize for t in self.types.values())
        memory = {
            "dram_arena_bytes": plan.total,
            "dram_arena_no_reuse_bytes": plan.no_reuse,
            "image_bytes": int(image.size),
            "constants_and_code_bytes": int(image.size) - plan.total,
            "host_values_bytes": int(host),
        }
        inputs = {k: t for k, t in self.g.inputs.items()}
        outputs = {o: self.types[o] for o in self.g.outputs}
        return Artifact(cfg, inputs, outputs, steps, tensors, image, memory, {"model": self.g.name}, chains)

    @staticmethod
    def uop_reader(dev: Device):
        """``read(index, n)``: ``n`` micro-op words from ``dev``'s DRAM element ``index``."""
        return lambda index, n: dev.dram.view(index * 4, n * 4).view(np.uint32).copy()

    def relocator(self, dev: Device):
        """The weight relocator of programs whose micro-op kernels live in ``dev``'s DRAM."""
        return weight_relocator(dev.cfg, self.uop_reader(dev), lambda words: dev.array(words).addr // 4)

    def join(self, programs: list, dev: Device, hoist_uops: bool = False):
        """``programs`` joined into one stream (:func:`join_programs`, early links; ``hoist_uops``: micro-ops loaded
        ahead, for the outermost join) in ``dev``'s DRAM."""
        relocate, read = self.relocator(dev), self.uop_reader(dev)
        return join_programs(programs, self.cfg.wgt_depth, relocate, self.cfg, read, hoist_uops)

    def chain(self, steps: list, dev: Device) -> list[AccelChain]:
        """Each run of two or more consecutive accelerator steps joined into one stream in ``dev``'s DRAM."""
        cfg = self.cfg
        chains = []
        for first, count in accel_runs(steps):
            joined = self.join([self.programs[s.name] for s in steps[first : first + count]], dev, hoist_uops=True)
            try:
                validate_program(joined.insns, cfg, dev.dram.range)
            except IsaError as e:
                raise CompileError(f"joining steps {first}..{first + count - 1}: {e}") from e
            code = dev.array(np.frombuffer(encode_program(joined.insns), np.uint8))
            chains.append(AccelChain(first, count, code.addr, len(joined.insns), list(joined.starts)))
        return chains

    def emit(self, layer, low, stream, constants: dict, dev: Device, addr: dict[str, int]):
        """The layer's instruction stream bound to its planned DRAM tensors and constants: (insns, code)."""
        insns = self.bind(layer, low, stream, constants, dev, addr)
        self.programs[layer.out] = insns
        return insns, dev.array(np.frombuffer(encode_program(insns), np.uint8))

    def bind(self, layer, low, stream, constants: dict, dev: Device, addr: dict[str, int], regions=None) -> list[Insn]:
        """A program's instruction stream bound to the layer's planned DRAM tensors and its constants;
        ``regions`` (role -> (byte offset, bytes)) binds a role to a region of the layer's tensor instead."""
        need = low.tensor_bytes()
        tensors = {"inp": self.read_tensor(layer.x, self.cfg.block_in), "out": self.pending[layer.out]}
        values = {"inp": layer.x}
        if layer.residual:
            tensors["res"] = self.read_tensor(layer.residual, self.cfg.block_out)
            values["res"] = layer.residual
        if layer.w:
            tensors["wgt"] = self.weight_tensor(layer.w)
        if layer.gate is not None:
            tensors[GATE] = self.read_tensor(layer.gate.residual, self.cfg.block_out)
            values[GATE] = layer.gate.residual
        if layer.gap is not None:
            tensors["pool"] = self.pending[layer.gap.out]
        if (phase := self.copy_phase(layer.out)) is not None:
            tensors["copy"] = self.pending[phase]
        if layer.out in self.up_reads:
            values["up"] = self.up_reads[layer.out][0]
            tensors["up"] = self.read_tensor(values["up"], self.cfg.block_in)
        buffers: dict[str, Buffer] = {}
        for role, t in tensors.items():
            shape, dtype = self.dram[t]
            offset, nbytes = 0, int(np.prod(shape)) * np.dtype(dtype).itemsize
            target, first = self.stored_at(values[role]) if role in values else (None, 0)
            if target is not None and target != values[role]:  # its channel blocks of another value's tensor
                own = _packed(self.types[values[role]], self.cfg, self.cfg.block_out)[0]
                nbytes = int(np.prod(own))
                offset = first * nbytes // own[1]
            if role in (regions or {}):
                offset, nbytes = offset + regions[role][0], regions[role][1]
            if nbytes != need[role]:
                raise CompileError(
                    f"layer {layer.out!r}: {role} is {nbytes} bytes packed, the program expects {need[role]}"
                )
            buffers[role] = Buffer(dev.dram, addr[t] + offset, nbytes)
        for name, data in constants.items():
            buffers[name] = dev.array(data)
        return emit_program(low, stream, dev, buffers)

    def cpu_region(self, nodes, accel_needs, host_needs, accel_out, notes, extra_outputs=()) -> CpuStep:
        """A CPU step: ``nodes`` with unpacking of the accelerator outputs it reads and packing of the values
        an accelerator layer reads; ``extra_outputs`` are values to convert only (an accelerator output a
        graph output needs, a graph input an accelerator reads)."""
        cfg = self.cfg
        defined = {n.output for n in nodes}
        reads = [i for n in nodes for i in n.inputs if i not in defined and i not in self.g.params]
        reads = list(dict.fromkeys([*reads, *extra_outputs]))
        g_inputs: dict[str, TensorType] = {}
        pre: list[Node] = []
        dram_inputs: dict[str, str] = {}
        for v in reads:
            t = self.types[v]
            if v not in accel_out:
                g_inputs[v] = t
                continue
            dname = self.pending[v]  # read the packed accelerator output and unpack it
            shape, dtype = self.dram[dname]
            g_inputs[f"{v}@in"] = TensorType(shape, dtype)
            dram_inputs[f"{v}@in"] = dname
            nchw = _packed(t, cfg, cfg.block_out)[1]
            target = v if len(t.shape) == 4 else f"{v}@nchw"
            pre.append(Node("unpack_blocked", (f"{v}@in",), target, {"channels": nchw[1], "images": nchw[0]}))
            if len(t.shape) != 4:
                pre.append(Node("reshape", (target,), v, {"shape": list(t.shape)}))
        post: list[Node] = []
        outputs: list[str] = []
        dram_outputs: dict[str, str] = {}
        for v in dict.fromkeys([*(n.output for n in nodes), *extra_outputs]):
            if v in host_needs(defined) or (v in extra_outputs and v in accel_out):
                outputs.append(v)
            if v in accel_out:
                continue
            for block in sorted(accel_needs.get(v, ())):
                nchw = _packed(self.types[v], cfg, block)[1]
                src = v
                if len(self.types[v].shape) != 4:
                    src = f"{v}@nchw{block}"
                    post.append(Node("reshape", (v,), src, {"shape": list(nchw)}))
                out = f"{v}@out{block}"
                post.append(Node("pack_blocked", (src,), out, {"batch": cfg.batch, "block": block}))
                outputs.append(out)
                dram_outputs[out] = self.dram_tensor(v, block)
            if v in self.weight_needs:  # (N, K) -> the packed weight layout
                post.append(Node("reshape", (v,), f"{v}@oihw", {"shape": [*self.types[v].shape, 1, 1]}))
                packed = {"batch": cfg.block_out, "block": cfg.block_in}
                post.append(Node("pack_blocked", (f"{v}@oihw",), f"{v}@outwgt", packed))
                outputs.append(f"{v}@outwgt")
                dram_outputs[f"{v}@outwgt"] = self.weight_tensor(v)
        params = {p: self.g.params[p] for n in nodes for p in n.inputs if p in self.g.params}
        ptypes = {p: t for p, t in self.g.param_types.items() if p in params}
        graph = Graph(g_inputs, [*pre, *nodes, *post], outputs, params, ptypes, name=f"cpu{len(self.steps)}")
        graph = cpu_tables(graph)
        verify(graph, after="partitioning (CPU region)")
        unexplained = [n for n in nodes if n.output not in self.explained]
        note = "; ".join([*(f"{k}: {v}" for k, v in notes.items() if k in defined), *_cpu_reasons(unexplained)])
        name = nodes[-1].output if nodes else f"convert {','.join(extra_outputs)}"
        return CpuStep(name, graph, dram_inputs, dram_outputs, sum(node_macs(n, self.types) for n in nodes), note)


def accel_runs(steps: list) -> list[tuple[int, int]]:
    """(first, count) of each run of two or more consecutive accelerator steps."""
    runs, start = [], None
    for i, s in enumerate([*steps, None]):
        if isinstance(s, AccelStep):
            start = i if start is None else start
        elif start is not None:
            if i - start > 1:
                runs.append((start, i - start))
            start = None
    return runs


def node_macs(node: Node, types: dict[str, TensorType]) -> int:
    """Multiply-accumulates of a conv2d, dense or matmul node of the graph typed by ``types`` (0 for others)."""
    if node.op == CONV2D:
        n, oc, oh, ow = types[node.output].shape
        _, icg, kh, kw = types[node.inputs[1]].shape
        return network_macs(node.attrs, n * oc * oh * ow * icg * kh * kw)
    if node.op == DENSE:
        m, n = types[node.output].shape
        return m * n * types[node.inputs[1]].shape[1]
    if node.op == MATMUL:
        return int(np.prod(types[node.output].shape)) * types[node.inputs[1]].shape[-2]  # K of (..., K, N)
    return 0


HOST_OPS = ("quantize", "dequantize", "cast", "reshape", "pack_blocked", "unpack_blocked", "im2col")  # boundaries
# operators the accelerator takes in one form only, and why a CPU step holds them otherwise
ONLY_WHEN = {
    "concat": "stored in place only as a channel concat of conv2d outputs in whole channel blocks",
    "interleave": "stored in place only when its phases are conv2d layers nothing else reads",
    "table": "runs in an epilogue only right after a conv2d/dense layer's int8 output",
}


def _cpu_reasons(nodes: list[Node]) -> list[str]:
    """Why a CPU step's operators (the host's conversions aside) are not on the accelerator: the one form it
    takes them in (:data:`ONLY_WHEN`), else by the operator registry, an operator without an accelerator
    lowering (:data:`~vdla.model.lowering.LOWERINGS`) or an elementwise step outside every layer's epilogue."""
    ops = sorted({n.op for n in nodes if n.op not in HOST_OPS and n.op in OPS and n.op not in ONLY_WHEN})
    kinds = {
        "no accelerator form": [op for op in ops if not OPS[op].epilogue_step and op not in LOWERINGS],
        "not in a layer's epilogue": [op for op in ops if OPS[op].epilogue_step],
        "not taken by the accelerator here": [op for op in ops if not OPS[op].epilogue_step and op in LOWERINGS],
    }
    only = sorted({n.op for n in nodes if n.op in ONLY_WHEN})
    return [f"{op}: {ONLY_WHEN[op]}" for op in only] + [f"{', '.join(v)}: {k}" for k, v in kinds.items() if v]


def same_layer(a: AccelLayer, b: AccelLayer) -> bool:
    """Whether two layers compute the same values: the same input, weights, window and epilogue, and neither
    reads a residual or a run-time weight (the phases of a nearest upsampling)."""
    if (a.x, a.geometry, a.op, a.groups, a.pool, a.fused_before) != (
        b.x,
        b.geometry,
        b.op,
        b.groups,
        b.pool,
        b.fused_before,
    ):
        return False
    if a.residual or b.residual or a.w or b.w or not np.array_equal(a.weights, b.weights):  # parts: of the weights
        return False
    ea, eb = a.epilogue, b.epilogue
    return all(np.array_equal(getattr(ea, f), getattr(eb, f)) for f in ("bias", "multiplier", "table")) and (
        ea.shift,
        ea.residual,
        ea.rescale,
        ea.clip,
    ) == (eb.shift, eb.residual, eb.rescale, eb.clip)


def _stores_through_view(layer: AccelLayer | PoolLayer | None, joins: bool) -> bool:
    """Whether ``layer`` may store its output through an :class:`~vdla.compiler.spec.OutputView`: a conv2d's
    (not on the depthwise mode, whose stores take no view) with no fused pool, adding a residual only into a
    concatenation (``joins``); or a max pool's, into a concatenation (its channel blocks only)."""
    if isinstance(layer, PoolLayer):
        return joins and layer.op == MAX_POOL2D
    return (
        layer is not None
        and layer.op == CONV2D
        and not layer.dw_mode
        and layer.pool is None
        and (joins or not layer.residual)
    )


def _depth(layer: AccelLayer) -> int:
    """How many layers are fused before ``layer`` (its :attr:`~vdla.model.match.AccelLayer.fused_before` chain)."""
    depth, before = 0, layer.fused_before
    while before is not None:
        depth, before = depth + 1, before.fused_before
    return depth
