"""The model compiler: ONNX in, a deployable :class:`~vdla.model.artifact.Artifact` out.

Pipeline (each pass verified in debug mode, dumped with ``dump=DIR``):

1. import (``vdla.frontend.onnx``) and simplification (identities, batch-norm folding, constants, dead
   code);
2. QDQ lowering (``vdla.graph.qdq``): quantized layers become the accelerator's integer epilogue; a first
   convolution over few channels becomes an im2col on the host and a 1x1 convolution (``vdla.graph.im2col``);
3. fusion and partitioning (:func:`place`): the post-dominator fusion of ``vdla.graph.fusion`` groups
   each conv2d/dense with the ops that follow it; ``vdla.graph.partition`` offers every group to the
   accelerator, which runs a conv2d/dense and the epilogue chain it expresses (the rest of the group is
   split off to the CPU); everything else runs on the CPU, connected CPU groups stacked into one region;
4. layout: tensors an accelerator layer reads or writes live packed (NCHW1n16c) in DRAM; a CPU region
   converts at its boundary with the JIT pack/unpack kernels; consecutive accelerator layers pass the
   packed tensor on with no conversion;
5. memory planning of the DRAM activations (liveness-based reuse) and compilation of each accelerator
   layer (tensorizing compiler, schedule search) against the planned addresses;
6. the artifact: DRAM image, instruction streams, CPU region graphs, manifest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from vdla.compiler import CompileError, ScheduleCache, compile_conv2d
from vdla.compiler.chain import join_programs, weight_relocator
from vdla.compiler.fused_pool import FusedPool
from vdla.compiler.pool import PoolLowering, PoolSpec, compile_pool
from vdla.compiler.search import emit_program
from vdla.compiler.spec import Conv2dSpec
from vdla.config import HwConfig, load_config
from vdla.graph import dump as gdump
from vdla.graph.calibrate import DEFAULT_PERCENTILE
from vdla.graph.fusion import EPILOGUE_ANCHORS, Group, fuse_ops
from vdla.graph.graph import Graph, Node
from vdla.graph.im2col import im2col_convs
from vdla.graph.layout import blocked_shape
from vdla.graph.ops import infer_types
from vdla.graph.partition import ACCEL, Capability, Partition, partition
from vdla.graph.qdq import lower_qdq
from vdla.graph.quantize import QuantReport, quantize_model
from vdla.graph.types import TensorType
from vdla.graph.verify import verify
from vdla.isa import Insn, IsaError, encode_program, validate_program
from vdla.model.artifact import AccelChain, AccelStep, Artifact, CpuStep, DramTensor
from vdla.model.memplan import Lifetime, plan_memory
from vdla.runtime.device import Device
from vdla.runtime.dram import Buffer

Log = Callable[[str], None]


@dataclass
class AccelLayer:
    """A conv2d/dense with the epilogue chain the accelerator runs: which graph values it reads and
    writes and the arguments of :func:`vdla.compiler.compile_conv2d`."""

    op: str
    nodes: list[str]  # outputs of the chain's nodes, anchor first
    x: str
    out: str
    in_shape: tuple[int, int, int, int]  # NCHW the compiler sees (dense: (M, K, 1, 1))
    weights: np.ndarray  # OIHW int8
    kwargs: dict = field(default_factory=dict)
    residual: str | None = None
    pool: PoolLayer | None = None  # a max pool of the output fused into the tiles (its output is ``out``)


POOL_ANCHORS = ("max_pool2d", "global_sum_pool")


@dataclass(frozen=True)
class PoolLayer:
    """A pooling the accelerator's ALU runs (:mod:`vdla.compiler.pool`): the graph values it reads and
    writes and its spec. A global average is ``global_sum_pool -> mul -> clip -> cast`` [-> reshape to
    (N, C), which leaves the packed bytes as they are]."""

    op: str
    nodes: tuple[str, ...]
    x: str
    out: str
    spec: PoolSpec
    residual: None = None


def _known_nonneg(value: str, graph: Graph) -> bool:
    """Whether ``value`` is >= 0 by construction: a ReLU, or a clip with a non-negative lower bound (through
    a cast)."""
    node = graph.producers().get(value)
    if node is not None and node.op == "cast":
        node = graph.producers().get(node.inputs[0])
    if node is None:
        return False
    lo = node.attrs.get("lo")
    return node.op == "relu" or (node.op == "clip" and isinstance(lo, int) and lo >= 0)


def fuse_pool(conv: AccelLayer, pool: PoolLayer, graph: Graph) -> AccelLayer | None:
    """``conv`` with the max pool ``pool`` of its output fused into its tiles (:mod:`vdla.compiler.fused_pool`),
    or None where that is not exact or not possible: the pool must be the output's only reader and
    :meth:`~vdla.compiler.fused_pool.FusedPool.for_layer` take the layer."""
    if conv.op != "conv2d" or pool.op != "max_pool2d" or pool.x != conv.out or conv.residual:
        return None
    if conv.out in graph.outputs or len(graph.consumers().get(conv.out, [])) != 1:
        return None
    kw = conv.kwargs
    try:
        sp = Conv2dSpec.make(conv.in_shape, conv.weights.shape[0], conv.weights.shape[2:], kw["stride"], kw["padding"])
        FusedPool.for_layer(
            pool.spec.window, (sp.oh, sp.ow), kw.get("multiplier", 1), kw.get("shift", 0), None, kw.get("rescale")
        )
    except CompileError:
        return None
    return replace(conv, nodes=[*conv.nodes, *pool.nodes], out=pool.out, pool=pool)


def fuse_pools(units: list[tuple[str, AccelLayer | PoolLayer | list[Node]]], graph: Graph) -> list:
    """The placement's units with each accelerator max pool fused into the convolution before it where
    :func:`fuse_pool` allows."""
    out: list = []
    for kind, unit in units:
        prev = out[-1][1] if out and out[-1][0] == "accel" else None
        if kind == "accel" and isinstance(unit, PoolLayer) and isinstance(prev, AccelLayer):
            fused = fuse_pool(prev, unit, graph)
            if fused is not None:
                out[-1] = ("accel", fused)
                continue
        out.append((kind, unit))
    return out


def match_pool(anchor: Node, graph: Graph, types: dict[str, TensorType], consumers, cfg: HwConfig) -> PoolLayer | str:
    """The pooling layer anchored at ``anchor`` (a max pool, or a global sum with its requantization), or the
    reason it stays on the CPU. A max pool pads with the int8 minimum unless its input is known >= 0."""
    x = anchor.inputs[0]
    if types[x].dtype != "int8":
        return f"a {types[x].dtype} pool (the ALU pools int8 activations: quantize the model)"
    a, shape = anchor.attrs, types[x].shape
    try:
        if anchor.op == "max_pool2d":
            pad_min = not _known_nonneg(x, graph)
            spec = PoolSpec.make(shape, a["kernel"], a.get("stride"), a.get("padding", 0), "max", pad_min=pad_min)
            nodes = [anchor.output]
        else:
            chain = _requant_chain(anchor, graph, consumers)
            if isinstance(chain, str):
                return chain
            nodes, (m, shift, lo, hi) = chain
            spec = PoolSpec.global_avg(shape, m, shift, (lo, hi))
        PoolLowering(spec, cfg).check_minimal()
    except CompileError as e:
        return str(e)
    return PoolLayer(anchor.op, tuple(nodes), x, nodes[-1], spec)


def _requant_chain(anchor: Node, graph: Graph, consumers) -> tuple[list[str], tuple[int, int, int, int]] | str:
    """``global_sum_pool -> mul(m, shift) -> clip -> cast(int8)`` [-> reshape to (N, C)]: the node outputs and
    (m, shift, lo, hi), or why not."""
    outputs = set(graph.outputs)
    want = ("mul", "clip", "cast", "reshape")
    nodes, node = [anchor.output], _chain_next(anchor.output, consumers, outputs)
    while node is not None and len(nodes) <= 4 and node.op == want[len(nodes) - 1] and node.inputs[0] == nodes[-1]:
        nodes.append(node.output)
        node = _chain_next(node.output, consumers, outputs)
    by_op = {graph.producers()[v].op: graph.producers()[v] for v in nodes}
    mul, clip, cast = by_op.get("mul"), by_op.get("clip"), by_op.get("cast")
    if len(nodes) < 4 or "b" not in mul.attrs or np.ndim(mul.attrs["b"]) or cast.attrs.get("dtype") != "int8":
        return "a global sum without its requantization (mul by a scalar, clip, cast to int8) runs on the CPU"
    reshape = by_op.get("reshape")
    if reshape is not None and len(reshape.attrs["shape"]) != 2:
        nodes.pop()  # only the (N, C) view keeps the packed bytes
    lo, hi = clip.attrs.get("lo"), clip.attrs.get("hi")
    if not (isinstance(lo, int) and isinstance(hi, int)):
        return "a global sum clipped to computed bounds"
    return nodes, (int(mul.attrs["b"]), int(mul.attrs.get("shift", 0)), lo, hi)


def _chain_next(value: str, consumers: dict[str, list[Node]], outputs: set[str]) -> Node | None:
    readers = consumers.get(value, [])
    return readers[0] if len(readers) == 1 and value not in outputs else None


def _scaled_skip(value: str | None, graph: Graph, types: dict[str, TensorType], consumers) -> Node | None:
    """The ``mul(k, m_k, shift)`` of an int8 residual ``k`` that produces ``value`` for one add only (the
    skip term of a rescaled residual), else None."""
    node = graph.producers().get(value) if value is not None else None
    if node is None or node.op != "mul" or "b" not in node.attrs or "shift" not in node.attrs:
        return None
    if len(consumers.get(value, [])) != 1 or types[node.inputs[0]].dtype != "int8":
        return None
    return node


def match_accel(anchor: Node, graph: Graph, types: dict[str, TensorType], consumers, cfg: HwConfig) -> AccelLayer | str:
    """The accelerator layer anchored at ``anchor``, or the reason it stays on the CPU."""
    x, w = anchor.inputs[0], anchor.inputs[1]
    if len(anchor.inputs) > 2:
        return "a float bias (the accelerator adds an int32 bias after quantization)"
    if types[x].dtype != "int8" or w not in graph.params or graph.params[w].dtype != np.int8:
        return "not quantized to int8 (run a QDQ model, or quantize with --calib)"
    conv = anchor.op == "conv2d"
    a = anchor.attrs
    if conv and (int(a.get("groups", 1)) != 1):
        return f"groups={a.get('groups')} (the GEMM intrinsic reduces over all input channels)"
    kwargs: dict = {"stride": a.get("stride", 1), "padding": a.get("padding", 0), "dilation": a.get("dilation", 1)}
    weights = graph.params[w] if conv else graph.params[w][:, :, None, None]
    in_shape = types[x].shape if conv else (*types[x].shape, 1, 1)
    chain, residual, stage, lo, hi = [anchor.output], None, 0, -128, 127
    outputs = set(graph.outputs)
    node = _chain_next(anchor.output, consumers, outputs)
    while node is not None and node.inputs[0] == chain[-1]:
        other = node.inputs[1] if len(node.inputs) > 1 else None
        if node.op == "add" and stage < 1 and other in graph.params and "b" not in node.attrs:
            kwargs["bias"] = graph.params[other].ravel().astype(np.int64)
            stage = 1
        elif node.op == "mul" and stage < 2 and (other in graph.params or "b" in node.attrs):
            m = graph.params[other].ravel() if other else np.asarray(node.attrs["b"])
            kwargs["multiplier"] = int(m[0]) if m.size > 1 and np.all(m == m[0]) else (int(m) if m.ndim == 0 else m)
            kwargs["shift"] = int(node.attrs.get("shift", 0))  # the MUL rounds its exact product
            stage = 3 if kwargs["shift"] else 2
        elif node.op == "rshift" and stage < 3 and "shift" in node.attrs:
            kwargs["shift"] = int(node.attrs["shift"])
            stage = 3
        elif node.op == "add" and stage < 4 and other is not None and other not in graph.params and other != chain[-1]:
            if types[other].dtype not in ("int8", "int32") or types[other].shape != types[chain[-1]].shape:
                return f"a residual of type {types[other]} (int8 or int32 of the output's shape fits)"
            residual, stage = other, 4
        elif node.op in ("clip", "relu") and stage not in (6, 9):
            if node.op == "relu":
                lo = max(lo, 0)
            elif isinstance(node.attrs.get("lo"), int) and isinstance(node.attrs.get("hi"), int):
                lo, hi = max(lo, node.attrs["lo"]), min(hi, node.attrs["hi"])
            else:
                break
            stage = 9 if stage >= 7 else 5
        elif node.op == "mul" and stage == 5 and residual is None and "b" in node.attrs and "shift" in node.attrs:
            rescale = [lo, hi, int(node.attrs["shift"]), 0, 0]  # the layer's own rounding ends: y is int8
            mults = [int(node.attrs["b"]), 0]
            lo, hi, stage = -128, 127, 6
        elif node.op == "add" and stage == 6 and (skip := _scaled_skip(other, graph, types, consumers)) is not None:
            residual, mults[1], rescale[3] = skip.inputs[0], int(skip.attrs["b"]), int(skip.attrs["shift"])
            chain.append(skip.output)
            stage = 7
        elif node.op == "rshift" and stage == 7 and "shift" in node.attrs:
            rescale[4], stage = int(node.attrs["shift"]), 8
        elif node.op == "cast" and node.attrs.get("dtype") == "int8" and stage not in (6, 7):
            chain.append(node.output)
            kwargs["clip"] = (lo, hi)
            if residual is not None:
                kwargs["residual"] = types[residual].dtype
            if stage >= 7:
                kwargs.update(rescale=tuple(rescale), rescale_multipliers=tuple(mults))
            return AccelLayer(anchor.op, chain, x, node.output, tuple(in_shape), weights, kwargs, residual)
        else:
            break
        chain.append(node.output)
        node = _chain_next(node.output, consumers, outputs)
    return "its epilogue is not bias -> multiplier -> shift -> [rescaled] residual -> clip -> int8"


@dataclass(frozen=True)
class Placement:
    """Where the model runs: the partition of its fused groups (:func:`vdla.graph.partition.partition`)
    and the accelerator layer of each accelerator region.

    Invariants: ``layers`` holds one layer per accelerator region of ``partition`` (by region index),
    whose ``nodes`` are the region's nodes; ``notes`` says, for every conv2d/dense on the CPU (by its
    output), why the accelerator does not run it.
    """

    partition: Partition
    layers: Mapping[int, AccelLayer]
    notes: Mapping[str, str]

    def units(self) -> list[tuple[str, AccelLayer | list[Node]]]:
        """The regions in order: ``("accel", layer)`` or ``("cpu", nodes)``."""
        regions = self.partition.regions
        return [(r.target, self.layers[r.index] if r.target == ACCEL else list(r.nodes)) for r in regions]


def _accel_capability(
    graph: Graph, types: dict[str, TensorType], cfg: HwConfig, found: dict[str, AccelLayer]
) -> Capability:
    """The accelerator's capability hook: a group anchored at a conv2d/dense is offered to
    :func:`match_accel`; the accelerator claims the anchor and the epilogue chain it expresses (the rest
    of the group goes to the CPU) when the compiler takes the layer's shape; the layer is kept in
    ``found`` by its anchor's output. A group anchored at a max pool or a global sum is offered to
    :func:`match_pool`."""
    consumers = graph.consumers()

    def can(group: Group) -> str | tuple[str, ...]:
        anchor = group.anchor
        if anchor.op in POOL_ANCHORS:
            p = match_pool(anchor, graph, types, consumers, cfg)
            if isinstance(p, PoolLayer):
                found[anchor.output] = p
                return p.nodes
            return p
        if anchor.op not in EPILOGUE_ANCHORS:
            return f"{anchor.op} runs on the CPU"
        m = match_accel(anchor, graph, types, consumers, cfg)
        if isinstance(m, str):
            return m
        try:
            sh = m.weights.shape
            Conv2dSpec.make(m.in_shape, sh[0], sh[2:], m.kwargs["stride"], m.kwargs["padding"], m.kwargs["dilation"])
        except CompileError as e:
            return str(e)
        found[anchor.output] = m
        return tuple(m.nodes)

    return can


def place(graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> Placement:
    """Fuse ``graph`` by the post-dominator rules (:func:`vdla.graph.fusion.fuse_ops`) and partition the
    groups between the accelerator and the CPU (:func:`vdla.graph.partition.partition`): each accelerator
    region is one :class:`AccelLayer`, the CPU regions stack consecutive CPU groups."""
    found: dict[str, AccelLayer] = {}
    part = partition(graph, fuse_ops(graph, types), _accel_capability(graph, types, cfg, found))
    layers = {r.index: found[part.fusion.groups[r.groups[0]].anchor.output] for r in part.on(ACCEL)}
    for r in part.on(ACCEL):
        if set(layers[r.index].nodes) != {n.output for n in r.nodes}:
            raise CompileError(f"accelerator region {r.label} does not hold exactly its layer's nodes")
    anchors = {n.output for n in graph.nodes if n.op in EPILOGUE_ANCHORS + POOL_ANCHORS}
    return Placement(part, layers, {v: why for v, why in part.notes().items() if v in anchors})


def _packed(t: TensorType, cfg: HwConfig, block: int) -> tuple[tuple[int, ...], tuple[int, int, int, int]]:
    """(packed shape, NCHW shape) of an activation tensor of graph type ``t`` in the blocked layout."""
    nchw = t.shape if len(t.shape) == 4 else (*t.shape, 1, 1)
    return blocked_shape(nchw, cfg.batch, block), nchw


class ModelBuilder:
    """Turns a partitioned graph into steps, DRAM tensors and an image (one use)."""

    def __init__(self, graph: Graph, cfg: HwConfig, cache: ScheduleCache | None, log: Log):
        self.g, self.cfg, self.cache, self.log = graph, cfg, cache, log
        self.types = infer_types(graph)
        self.dram: dict[str, tuple[tuple[int, ...], str]] = {}  # DRAM tensor -> (packed shape, dtype)
        self.steps: list = []
        self.programs: dict[str, list[Insn]] = {}  # accelerator step -> its instruction stream

    def dram_tensor(self, value: str, block: int) -> str:
        t = self.types[value]
        name = f"{value}@{block}"
        self.dram.setdefault(name, (_packed(t, self.cfg, block)[0], t.dtype))
        return name

    def build_steps(self, plan: Placement) -> None:
        """CPU steps with their boundary conversions, accelerator steps, in the order of the placement's
        regions."""
        units = fuse_pools(plan.units(), self.g)
        accel_needs: dict[str, set[int]] = {}  # value -> blocks an accelerator layer reads it in
        for kind, unit in units:
            if kind == "accel":
                accel_needs.setdefault(unit.x, set()).add(self.cfg.block_in)
                if unit.residual:
                    accel_needs.setdefault(unit.residual, set()).add(self.cfg.block_out)
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

        accel_out = {unit.out for kind, unit in units if kind == "accel"}
        self.pending: dict[str, str] = {}  # accel output -> its DRAM tensor (block_out)
        for kind, unit in units:
            if kind == "accel":
                self.steps.append(("accel", unit))
                self.pending[unit.out] = self.dram_tensor(unit.out, self.cfg.block_out)
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

    def accel_reads(self, layer: AccelLayer) -> list[str]:
        reads = [self.dram_tensor(layer.x, self.cfg.block_in)]
        if layer.residual:
            reads.append(self.dram_tensor(layer.residual, self.cfg.block_out))
        return reads

    def lifetimes(self) -> list[Lifetime]:
        """Each DRAM tensor from the step writing it to the last step reading it."""
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, (kind, s) in enumerate(self.steps):
            if kind == "accel":
                reads, writes = self.accel_reads(s), [self.pending[s.out]]
            else:
                reads, writes = list(s.dram_inputs.values()), list(s.dram_outputs.values())
            for t in writes:
                if t in first:
                    raise CompileError(f"DRAM tensor {t!r} is written twice (steps {first[t]} and {i})")
                first[t], last[t] = i, max(last.get(t, i), i)
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
                steps.append(self.compile_layer(s, dev, addr))
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

    def chain(self, steps: list, dev: Device) -> list[AccelChain]:
        """Each run of two or more consecutive accelerator steps joined into one stream in ``dev``'s DRAM."""
        cfg = self.cfg
        relocate = weight_relocator(
            cfg,
            lambda index, n: dev.dram.view(index * 4, n * 4).view(np.uint32).copy(),
            lambda words: dev.array(words).addr // 4,
        )
        chains = []
        for first, count in accel_runs(steps):
            joined = join_programs(
                [self.programs[s.name] for s in steps[first : first + count]], cfg.wgt_depth, relocate
            )
            try:
                validate_program(joined.insns, cfg, dev.dram.range)
            except IsaError as e:
                raise CompileError(f"joining steps {first}..{first + count - 1}: {e}") from e
            code = dev.array(np.frombuffer(encode_program(joined.insns), np.uint8))
            chains.append(AccelChain(first, count, code.addr, len(joined.insns), list(joined.starts)))
        return chains

    def compile_layer(self, layer: AccelLayer | PoolLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
        """Compile one accelerator layer and emit its instruction stream against the planned tensors."""
        if isinstance(layer, PoolLayer):
            return self.compile_pool(layer, dev, addr)
        kwargs = dict(layer.kwargs)
        if layer.pool is not None:
            win = layer.pool.spec.window
            kwargs["max_pool"] = (win.kernel, win.stride, win.pads)
        compiled = compile_conv2d(layer.in_shape, layer.weights, config=self.cfg, cache=self.cache, **kwargs)
        insns, code = self.emit(layer, compiled.lowering, compiled.stream, compiled.constants, dev, addr)
        sp = compiled.spec
        desc = {
            "op": layer.op + "+max_pool2d" * (layer.pool is not None),
            "input": list(sp.out_shape[:1]) + [sp.c, sp.h, sp.w],
            "output": [*sp.out_shape[:2], *compiled.lowering.out_hw],
            "kernel": [sp.kh, sp.kw],
            "stride": [sp.sh, sp.sw],
            "schedule": compiled.schedule.describe(),
            "epilogue": compiled.epilogue.key(),
        }
        out = [self.pending[layer.out]]
        return AccelStep(layer.out, code.addr, len(insns), sp.macs, self.accel_reads(layer), out, desc)

    def compile_pool(self, layer: PoolLayer, dev: Device, addr: dict[str, int]) -> AccelStep:
        """A pooling on the ALU (:mod:`vdla.compiler.pool`), its schedule timed on the simulator."""
        compiled = compile_pool(layer.spec, self.cfg)
        insns, code = self.emit(layer, compiled.lowering, compiled.stream, compiled.constants, dev, addr)
        sp = layer.spec
        desc = {
            "op": "global_avg_pool" if layer.op == "global_sum_pool" else layer.op,
            "input": list(sp.shape),
            "output": list(sp.out_shape),
            "kernel": list(sp.window.kernel),
            "stride": list(sp.window.stride),
            "schedule": compiled.schedule.describe(),
            "epilogue": f"pad {'int8 min' if sp.pad_min else 'zero (input >= 0)'}" if sp.op == "max" else "requant",
        }
        out = [self.pending[layer.out]]
        return AccelStep(layer.out, code.addr, len(insns), 0, self.accel_reads(layer), out, desc)

    def emit(self, layer, low, stream, constants: dict, dev: Device, addr: dict[str, int]):
        """The layer's instruction stream bound to its planned DRAM tensors and constants: (insns, code)."""
        need = low.tensor_bytes()
        tensors = {"inp": self.dram_tensor(layer.x, self.cfg.block_in), "out": self.pending[layer.out]}
        if layer.residual:
            tensors["res"] = self.dram_tensor(layer.residual, self.cfg.block_out)
        buffers: dict[str, Buffer] = {}
        for role, t in tensors.items():
            shape, dtype = self.dram[t]
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if nbytes != need[role]:
                raise CompileError(
                    f"layer {layer.out!r}: {role} is {nbytes} bytes packed, the program expects {need[role]}"
                )
            buffers[role] = Buffer(dev.dram, addr[t], nbytes)
        for name, data in constants.items():
            buffers[name] = dev.array(data)
        insns = emit_program(low, stream, dev, buffers)
        self.programs[layer.out] = insns
        return insns, dev.array(np.frombuffer(encode_program(insns), np.uint8))

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
        params = {p: self.g.params[p] for n in nodes for p in n.inputs if p in self.g.params}
        ptypes = {p: t for p, t in self.g.param_types.items() if p in params}
        graph = Graph(g_inputs, [*pre, *nodes, *post], outputs, params, ptypes, name=f"cpu{len(self.steps)}")
        verify(graph, after="partitioning (CPU region)")
        note = "; ".join(f"{k}: {v}" for k, v in notes.items() if k in defined)
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
    if node.op == "conv2d":
        n, oc, oh, ow = types[node.output].shape
        _, icg, kh, kw = types[node.inputs[1]].shape
        return n * oc * oh * ow * icg * kh * kw
    if node.op == "dense":
        m, n = types[node.output].shape
        return m * n * types[node.inputs[1]].shape[1]
    if node.op == "matmul":
        return int(np.prod(types[node.output].shape)) * types[node.inputs[1]].shape[-2]  # K of (..., K, N)
    return 0


@dataclass
class CompileReport:
    """What compilation did: pass timings, placement notes, the artifact's memory figures."""

    seconds: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    placement: dict[str, str] = field(default_factory=dict)
    quantization: QuantReport | None = None  # profile-guided quantization of a float model (``calib``)


def compile_graph_model(
    graph: Graph,
    config: str | HwConfig = "pynq",
    cache: ScheduleCache | None = None,
    dump: str | Path | None = None,
    log: Log | None = None,
    passes: list[tuple[str, Callable[[Graph], Graph]]] | None = None,
) -> tuple[Artifact, CompileReport]:
    """Compile a graph (already imported) to an artifact: ``passes`` (name, function) run first, then QDQ
    lowering, partitioning, layout, memory planning and the accelerator layers."""
    cfg = load_config(config)
    if cfg.block_in != cfg.block_out:
        raise CompileError(
            f"config {cfg.name!r} has block_in={cfg.block_in} != block_out={cfg.block_out}: the model compiler "
            "passes packed activations from layer to layer and needs square blocks"
        )
    report = CompileReport()
    log = log or (lambda msg: None)
    step = 0

    def after(name: str, g: Graph, t0: float, placement: dict | None = None, groups: Mapping | None = None) -> Graph:
        nonlocal step
        report.seconds[name] = time.perf_counter() - t0
        types = verify(g, after=name)
        if dump is not None:
            gdump.write(dump, step, name, g, types, placement, groups)
        step += 1
        return g

    graph = after("input", graph, time.perf_counter())
    # the first convolution's kernel window folded into its reduction (vdla.graph.im2col)
    im2col = ("im2col", lambda g: im2col_convs(g, cfg.block_in))
    for name, fn in [*(passes or []), ("lower_qdq", lower_qdq), im2col]:
        t0 = time.perf_counter()
        graph = after(name, fn(graph), t0)
    t0 = time.perf_counter()
    types = infer_types(graph)
    plan = place(graph, types, cfg)
    report.placement = dict(plan.partition.placement)
    report.notes = dict(plan.notes)
    after("partition", graph, t0, report.placement, plan.partition.fusion.group_of)
    t0 = time.perf_counter()
    builder = ModelBuilder(graph, cfg, cache, log)
    builder.build_steps(plan)
    n_accel = sum(k == "accel" for k, _ in builder.steps)
    artifact = builder.finish(progress=lambda name: log(f"compiling accelerator layer {name} ({n_accel} in all)"))
    report.seconds["accelerator layers"] = time.perf_counter() - t0
    artifact.meta["compile_seconds"] = sum(report.seconds.values())
    return artifact, report


def _load_calib(calib: str | Path | Mapping[str, np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
    """Calibration arrays by input name: an .npz path, a mapping or one array (for a single-input model),
    checked against the model's inputs by :func:`vdla.graph.calibrate.check_calibration`."""
    if isinstance(calib, np.ndarray):
        return {"calib": calib}
    if isinstance(calib, str | Path):
        try:
            with np.load(calib) as npz:
                return {k: npz[k] for k in npz.files}
        except (OSError, ValueError, AttributeError) as e:
            raise CompileError(f"{calib}: not a readable .npz of calibration arrays ({e})") from e
    if not isinstance(calib, Mapping):
        raise CompileError(
            f"calib must be an .npz path, a dict of arrays by input name or one array, got {type(calib).__name__}"
        )
    return dict(calib)


def calibration_runner(log: Log) -> Callable[[Graph], Callable] | None:
    """The CPU fallback's JIT as the calibration runner (None: the numpy interpreter, where llvmlite is
    missing)."""
    try:
        from vdla.cpu_fallback import compile_graph
    except ImportError:
        log("llvmlite is not installed: calibration runs on the numpy interpreter (pip install 'vdla[jit]')")
        return None
    return lambda graph: compile_graph(graph).run


def compile_model(
    model,
    calib: str | Path | Mapping[str, np.ndarray] | np.ndarray | None = None,
    config: str | HwConfig = "pynq",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    dump: str | Path | None = None,
    cache: ScheduleCache | None = None,
    log: Log | None = None,
    calibration: str = "percentile",
    percentile: float = DEFAULT_PERCENTILE,
    keep_float: Iterable[str] = (),
    quant_report: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    align_residuals: bool = True,
    power_of_two: bool = False,
) -> tuple[Artifact, CompileReport]:
    """Compile an ONNX model (path or ``onnx.ModelProto``) or a :class:`Graph` to an artifact.

    A float model with ``calib`` (an .npz path or a dict: one float array per model input, samples along
    the first axis; a single-input model also takes the array itself) is quantized to int8 first
    (:func:`vdla.graph.quantize.quantize_model`): scales by ``calibration`` (``minmax``, ``percentile`` at
    ``percentile``, or ``entropy``), the nodes named in ``keep_float`` left in float32, ``progress(done,
    total)`` called per calibration batch, the report in ``CompileReport.quantization`` and, with
    ``quant_report``, written there as JSON; ``align_residuals`` gives residual skips their sum's scale (an
    exact int8 add in the epilogue); ``power_of_two`` takes power-of-two scales (VTA's scheme: free
    requantization, per-tensor weights). A QDQ model keeps its own scales: ``calib`` for one is
    refused. Without ``calib`` a float model runs in float on the CPU.
    """
    from vdla.graph.passes import simplify

    t0 = time.perf_counter()
    if isinstance(model, Graph):
        graph = model
    else:
        from vdla.frontend.onnx import import_onnx

        graph = import_onnx(model, input_shapes)
    import_s = time.perf_counter() - t0
    quantized = any(n.op in ("quantize", "dequantize") for n in graph.nodes)
    passes: list[tuple[str, Callable[[Graph], Graph]]] = [("simplify", simplify)]
    found: list[QuantReport] = []
    if calib is not None:
        if quantized:
            raise CompileError(
                "the model is already quantized (QDQ): it keeps the scales it carries; drop the calibration data"
            )
        arrays = _load_calib(calib)
        runner = calibration_runner(log or (lambda msg: None))

        def quantize(g: Graph) -> Graph:
            qgraph, qreport = quantize_model(
                g, arrays, calibration, percentile, keep_float, runner, progress, align_residuals, power_of_two
            )
            found.append(qreport)
            return qgraph

        passes.append(("quantize", quantize))
    elif tuple(keep_float):
        raise CompileError("keep_float needs calibration data (calib): without it a float model runs all in float")
    artifact, report = compile_graph_model(graph, config, cache, dump, log, passes=passes)
    report.seconds = {"import": import_s, **report.seconds}
    report.quantization = found[0] if found else None
    if report.quantization is not None and quant_report is not None:
        Path(quant_report).write_text(json.dumps(report.quantization.to_dict(), indent=2))
    artifact.meta["compile_seconds"] = sum(report.seconds.values())
    artifact.meta["quantized"] = quantized or report.quantization is not None
    return artifact, report
