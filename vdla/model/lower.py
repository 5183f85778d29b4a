"""The model compiler's back end: a placed graph becomes steps, DRAM tensors, instruction streams and an image.

Layout: tensors an accelerator layer reads or writes live packed (NCHW1n16c) in DRAM; a CPU region converts
at its boundary with the JIT pack/unpack kernels; consecutive accelerator layers pass the packed tensor on
with no conversion. Memory: the DRAM activations are planned by liveness (reuse where lifetimes do not
overlap). Code: each accelerator layer is compiled (tensorizing compiler, schedule search) against its planned
addresses, and runs of consecutive accelerator steps are joined into one instruction stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from vdla.compiler import CompileError, ScheduleCache, compile_conv2d
from vdla.compiler.channel_scale import compile_channel_scale
from vdla.compiler.conv_lowering import GATE
from vdla.compiler.depthwise import compile_depthwise
from vdla.compiler.dw_pointwise import compile_dw_pointwise
from vdla.compiler.pool import compile_pool
from vdla.compiler.search import emit_program
from vdla.compiler.spec import ChannelScaleSpec, Fusions, InputUpsample, OutputView
from vdla.compiler.stream import join_programs, weight_relocator
from vdla.config import HwConfig
from vdla.graph.branches import Guard, common
from vdla.graph.graph import Graph
from vdla.graph.layout import blocked_shape, pack_activation
from vdla.graph.ops import infer_types
from vdla.isa import Insn, IsaError, encode_program, validate_program
from vdla.model.artifact import AccelStep, AccelStream, Artifact, CpuStep, DramTensor
from vdla.model.cpu_regions import CpuRegions
from vdla.model.fusion_choice import FusionChoices, fusion_depth
from vdla.model.lifetimes import TensorLifetimes
from vdla.model.lowering import compile_layer
from vdla.model.match import (
    AccelLayer,
    PoolLayer,
    fuse_adds,
    fuse_expands,
    fuse_gaps,
    fuse_gates,
    fuse_pointwises,
    fuse_pools,
)
from vdla.model.memplan import plan_memory
from vdla.model.place import Placement
from vdla.model.prefetch import prefetch_schedules
from vdla.model.views import StoredViews, packed
from vdla.runtime.device import Device
from vdla.runtime.dram import Buffer

Log = Callable[[str], None]


class ModelBuilder(FusionChoices, StoredViews, TensorLifetimes, CpuRegions):
    """Turns a partitioned graph into steps, DRAM tensors and an image (one use): the coordinator of the
    fusion choices (:mod:`vdla.model.fusion_choice`), the output views (:mod:`vdla.model.views`), the tensor
    lifetimes (:mod:`vdla.model.lifetimes`), the CPU regions (:mod:`vdla.model.cpu_regions`) and the layers'
    lowerings (:mod:`vdla.model.lowering`), holding their state."""

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
        self.rows: dict[str, tuple[str, int]] = {}  # store_rows: output -> (concatenation, byte offset)
        # DRAM tensors the image holds, outside the arena: their packed contents (constant rows, residuals)
        self.image_tensors: dict[str, np.ndarray] = {}
        # a layer's output -> (the upsampling phase it stores, whether besides its own output) (store_phases)
        self.upsamples: dict[str, tuple[str, bool]] = {}
        self.up_candidates: dict[str, tuple[AccelLayer, str]] = {}  # upsampling -> (its phase, the 1x1 layer)
        self.up_reads: dict[str, tuple[str, InputUpsample]] = {}  # 1x1 layer -> (upsampled value, which blocks)
        self.explained: set[str] = set()  # CPU nodes a placement note explains (build_steps)
        self.types = infer_types(graph)
        self.dram: dict[str, tuple[tuple[int, ...], str]] = {}  # DRAM tensor -> (packed shape, dtype)
        self.steps: list = []
        self.guard_of: Mapping[str, Guard] = {}  # node output -> its guard (vdla.graph.branches), if any
        self.when: dict[str, Guard] = {}  # accelerator step -> its guard
        self.programs: dict[str, list[Insn]] = {}  # accelerator step -> its instruction stream

    def dram_tensor(self, value: str, block: int) -> str:
        t = self.types[value]
        name = f"{value}@{block}"
        self.dram.setdefault(name, (packed(t, self.cfg, block)[0], t.dtype))
        return name

    def packed_constant(self, value: str) -> np.ndarray:
        """The int8 parameter ``value`` (a constant residual) packed as an accelerator layer reads it."""
        nchw = packed(self.types[value], self.cfg, self.cfg.block_out)[1]
        data = self.g.params[value].astype(np.int8).reshape(nchw)
        return pack_activation(data, self.cfg.batch, self.cfg.block_out)

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
        self.guard_of = plan.guards
        groups = plan.partition.fusion.groups  # a noted conv's group is explained by its note
        self.explained = {n.output for g in groups if g.anchor.output in plan.notes for n in g.nodes}
        accel_needs: dict[str, set[int]] = {}  # value -> blocks an accelerator layer reads it in
        self.weight_needs: set[str] = set()  # values a layer reads as its run-time weight
        for kind, unit in units:
            if kind == "accel":
                accel_needs.setdefault(unit.x, set()).add(self.cfg.block_in)
                if unit.residual in self.g.params:  # a constant residual: a tensor of the image
                    tensor = self.dram_tensor(unit.residual, self.cfg.block_out)
                    self.image_tensors[tensor] = self.packed_constant(unit.residual)
                elif unit.residual:
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
        accel_out |= {v for v, _ in self.rows.values()}
        accel_out |= {unit.gap.out for kind, unit in units if kind == "accel" and unit.gap is not None}
        if self.weight_needs & accel_out:
            raise CompileError(f"run-time weights {sorted(self.weight_needs & accel_out)} must be packed on the host")
        self.pending: dict[str, str] = {}  # accel output -> its DRAM tensor (block_out)
        for kind, unit in units:
            if kind == "accel":
                self.steps.append(("accel", unit))
                self.when[unit.out] = self.guard(unit.nodes)
                target = self.views[unit.out][0] if unit.out in self.views else unit.out
                target = self.rows[unit.out][0] if unit.out in self.rows else target
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

    def guard(self, nodes: Iterable[str]) -> Guard:
        """The guard of a step computing ``nodes``: what their guards have in common."""
        return common([self.guard_of.get(v, ()) for v in nodes])

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
        key = (layer.out, fusion_depth(layer), view, copy_view, up, layer.gate is not None, layer.gap is not None)
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

    def finish(self, progress: Callable[[str], None] | None = None) -> Artifact:
        """Plan DRAM, compile every accelerator layer against its addresses, and collect the image."""
        cfg = self.cfg
        lifetimes = self.lifetimes()
        plan = plan_memory(lifetimes)
        dev = Device(cfg, "sim")
        arena = dev.alloc(max(plan.total, 1))
        addr = {t: arena.addr + off for t, off in plan.offsets.items()}
        addr.update({t: dev.array(data).addr for t, data in self.image_tensors.items()})
        steps = []
        layers = [s for kind, s in self.steps if kind == "accel"]
        with prefetch_schedules(lambda layer: compile_layer(self, layer, dev, addr), layers, self.cache_file):
            for kind, s in self.steps:
                if kind == "cpu":
                    steps.append(s)
                    continue
                if progress:
                    progress(s.out)
                steps.append(replace(self.compiled_step(s, dev, addr), when=self.when.get(s.out, ())))
        steps = computed_guards(steps, set(self.g.inputs))
        streams = self.joined_streams(steps, dev)
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
        return Artifact(cfg, inputs, outputs, steps, tensors, image, memory, {"model": self.g.name}, streams)

    @property
    def cache_file(self) -> Path | None:
        """The schedule cache's file (None without a cache): what :func:`prefetch_schedules` fills."""
        return None if self.cache is None else self.cache.path

    def compiled_step(self, layer: AccelLayer | PoolLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
        """The accelerator step of ``layer`` against its planned addresses; an error names the layer."""
        try:
            return compile_layer(self, layer, dev, addr)
        except CompileError as e:
            shape = "x".join(map(str, self.types[layer.x].shape))
            raise CompileError(f"layer {layer.out!r} ({layer.op} of a {shape} input): {e}") from e

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

    def joined_streams(self, steps: list, dev: Device) -> list[AccelStream]:
        """Each run of two or more consecutive accelerator steps of one guard joined into one stream in ``dev``'s
        DRAM."""
        cfg = self.cfg
        streams = []
        for first, count in accel_runs(steps):
            joined = self.join([self.programs[s.name] for s in steps[first : first + count]], dev, hoist_uops=True)
            try:
                validate_program(joined.insns, cfg, dev.dram.range)
            except IsaError as e:
                raise CompileError(f"joining steps {first}..{first + count - 1}: {e}") from e
            code = dev.array(np.frombuffer(encode_program(joined.insns), np.uint8))
            streams.append(AccelStream(first, count, code.addr, len(joined.insns), list(joined.starts)))
        return streams

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
        if layer.out in self.rows:  # its rows of a concatenation with constant rows
            values["out"] = layer.out
        if layer.residual:
            role = getattr(layer, "residual_role", "res")
            tensors[role] = self.read_tensor(layer.residual, self.cfg.block_out)
            values[role] = layer.residual
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
            if target is not None and target != values[role]:  # its bytes of another value's tensor (a view)
                offset, nbytes = first, int(np.prod(packed(self.types[values[role]], self.cfg, self.cfg.block_out)[0]))
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


def accel_runs(steps: list) -> list[tuple[int, int]]:
    """(first, count) of each run of two or more consecutive accelerator steps of one guard (a run skips or
    runs a stream whole)."""
    runs, start = [], None
    for i, s in enumerate([*steps, None]):
        if start is not None and not (isinstance(s, AccelStep) and s.when == steps[start].when):
            if i - start > 1:
                runs.append((start, i - start))
            start = None
        if isinstance(s, AccelStep) and start is None:
            start = i
    return runs


def computed_guards(steps: list, inputs: set[str]) -> list:
    """``steps`` with each guard kept to the conditions the host holds when the step comes (graph inputs and
    the host outputs of earlier CPU steps): a condition computed later (or on the accelerator) cannot decide,
    so the step runs whatever it is. Normally every condition is (the partition orders a branch after its
    condition's CPU step)."""
    host, out = set(inputs), []
    for s in steps:
        kept = tuple(lit for lit in s.when if lit[0] in host)
        out.append(s if kept == s.when else replace(s, when=kept))
        if isinstance(s, CpuStep):
            host.update(v for v in s.graph.outputs if v not in s.dram_outputs)
    return out
