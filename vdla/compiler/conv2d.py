"""Compiled operators: conv2d and dense (matmul) with a fused epilogue, ready to run on any backend.

Compiling validates the layer, packs the weights and per-channel constants once, picks a schedule
(searched and cached, or given) and lowers it to the round-robin, synchronised block stream. Running
binds that stream to DRAM buffers on a device, executes it and unpacks the int8 result.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from vdla.compiler.cache import ScheduleCache
from vdla.compiler.conv_lowering import GATE, POST, ConvLowering
from vdla.compiler.epilogue_passes import normalize
from vdla.compiler.fused_pool import FusedPool
from vdla.compiler.identity import EYE, identity_weights
from vdla.compiler.run import LayerRun, run_bound
from vdla.compiler.schedule import Schedule
from vdla.compiler.search import SearchResult, build_stream, emit_program, search
from vdla.compiler.spec import MASK, ROWS, TABLE, CompileError, Conv2dSpec, EpilogueSpec, Fusions, OutputView
from vdla.config import DEFAULT_PRESET, HwConfig, config_mismatch, load_config
from vdla.graph.epilogue import Epilogue
from vdla.graph.layout import pack_activation, pack_channels, pack_weights, unpack_activation
from vdla.isa import Insn
from vdla.runtime.device import Device

RESIDUAL_DTYPES = {"int8": np.int8, "int32": np.int32}


def _int_array(name: str, v, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(v)
    if a.dtype.kind not in "iu":
        raise CompileError(f"{name} must be integer, got dtype {a.dtype}")
    if a.shape != shape:
        raise CompileError(f"{name} has shape {a.shape}, expected {shape}")
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        raise CompileError(f"{name} must fit in int32")
    return a.astype(np.int32)


def rows_tensor(constants: dict[str, np.ndarray], names: list[str], name: str = ROWS) -> None:
    """Replace the per-channel rows ``names`` of ``constants`` by one tensor ``name``: them in that order, as
    the layer's accumulators hold them (:meth:`ConvLowering.rows_loads`)."""
    if names:
        constants[name] = np.concatenate([constants.pop(n) for n in names])


def _constants(ep: Epilogue, spec: EpilogueSpec, oc: int, cfg: HwConfig) -> dict[str, np.ndarray]:
    """The epilogue's per-channel rows packed for the accumulator buffer: the bias (one per channel), the
    multipliers (one per channel, or a scalar repeated)."""
    rows = {} if ep.bias is None else {"bias": np.asarray(ep.bias)}
    mults = {"mult": ep.multiplier} if spec.multiplier == "row" else {}
    if ep.rescale is not None:
        mults.update(mult_y=ep.rescale.y_multiplier, mult_k=ep.rescale.skip_multiplier)
    rows.update({k: np.full(oc, m) if np.ndim(m) == 0 else np.asarray(m) for k, m in mults.items()})
    names = {"mult": "multiplier", "mult_y": "rescale y_multiplier", "mult_k": "rescale skip_multiplier"}
    return {k: pack_channels(_int_array(names.get(k, k), v, (oc,)), cfg.batch, cfg.block_out) for k, v in rows.items()}


def zero_blocks(weights: np.ndarray, cfg: HwConfig) -> np.ndarray:
    """(output-channel blocks, input-channel blocks, taps) bool: which WGT blocks of OIHW ``weights`` are all zero."""
    o, i, kh, kw = weights.shape
    bo, bi = cfg.block_out, cfg.block_in
    padded = np.zeros((-(-o // bo) * bo, -(-i // bi) * bi, kh * kw), bool)
    padded[:o, :i] = weights.reshape(o, i, kh * kw) != 0
    return ~padded.reshape(-1, bo, padded.shape[1] // bi, bi, kh * kw).any(axis=(1, 3))


def mask_blocks(row_mask: np.ndarray, rows: tuple[int, ...], cfg: HwConfig) -> np.ndarray:
    """The WGT blocks of a row mask (C, H) bool: for each masked row in ``rows``, each output-channel block's
    diagonal block, 1 where the lane's channel is kept (padding lanes 0), shape (len(rows) * blocks, bo, bi)."""
    c, bo = row_mask.shape[0], cfg.block_out
    blocks = -(-c // bo)
    keep = np.zeros((len(rows), blocks * bo), np.int8)
    keep[:, :c] = ~row_mask[:, list(rows)].T
    eye = np.eye(bo, cfg.block_in, dtype=np.int8)
    return (keep.reshape(-1, bo)[:, :, None] * eye[None]).astype(np.int8)


class CompiledConv2d:
    """A conv2d layer and its epilogue compiled for one hardware config (see :func:`compile_conv2d`)."""

    def __init__(
        self,
        spec: Conv2dSpec,
        weights: np.ndarray | tuple[int, ...],
        cfg: HwConfig,
        epilogue: Epilogue,
        *,
        fusions: Fusions | None = None,
        view: OutputView | None = None,
        vthreads: int | str = "auto",
        schedule: Schedule | None = None,
        cache: ScheduleCache | None = None,
    ):
        t0 = time.perf_counter()
        f = fusions or Fusions()
        if f.pool is not None:
            FusedPool.for_layer(f.pool, (spec.oh, spec.ow), epilogue)
        if f.gate is not None and f.gate.shape != (spec.n, spec.c, spec.h, spec.w):
            raise CompileError(
                f"a gated input is a channel scale of the layer's input {(spec.n, spec.c, spec.h, spec.w)}, "
                f"got a scale of {f.gate.shape}"
            )
        runtime = isinstance(weights, tuple)  # the shape of weights that reach DRAM at run time
        got = (np.dtype(np.int8), weights) if runtime else (weights.dtype, weights.shape)
        if got != (np.dtype(np.int8), spec.weight_shape):
            raise CompileError(f"weights must be int8 of shape {spec.weight_shape} (OIHW), got {got[0]} {got[1]}")
        ep, post_ep = normalize(epilogue), normalize(f.post) if f.post is not None else None
        self.fusions = f if post_ep is None else replace(f, post=post_ep)  # as the compiler runs them
        self.epilogue = EpilogueSpec.of(ep, self.fusions)
        self.spec, self.cfg = spec, cfg
        imm = int(ep.multiplier) if self.epilogue.multiplier == "imm" else 1
        post_imm = int(post_ep.multiplier) if post_ep is not None and self.epilogue.post.multiplier == "imm" else 1
        zero = None if runtime else zero_blocks(weights, cfg)
        self.lowering = ConvLowering(
            spec, self.epilogue, cfg, imm, view, post_imm, copy_view=f.copy_view, up=f.up, zero=zero
        )
        self.constants = {} if runtime else {"wgt": pack_weights(weights, cfg.block_out, cfg.block_in)}
        self.constants.update(_constants(ep, self.epilogue, spec.oc, cfg))
        if post_ep is not None:  # the post add's rows, and the identity block its GEMM reads
            rows = _constants(post_ep, self.epilogue.post, spec.oc, cfg)
            self.constants.update({POST + k: v for k, v in rows.items()}, **{EYE: identity_weights(cfg)})
        if f.gate is not None:  # the scale's multiplier row, and the identity block the window's copy reads
            mul = pack_channels(np.full(cfg.block_out, f.gate.multiplier, np.int32), cfg.batch, cfg.block_out)
            self.constants.update({GATE + "mul": mul, EYE: identity_weights(cfg)})
        if self.epilogue.mask:  # per masked row, each channel block's diagonal block: 1 where the lane is kept
            self.constants[MASK] = mask_blocks(np.asarray(ep.row_mask, bool), self.epilogue.mask, cfg)
        if ep.table is not None:  # entry b at byte b: LUT elements of out_elem_bytes entries
            self.constants[TABLE] = np.asarray(ep.table, np.int8).reshape(cfg.lut_depth, cfg.batch, cfg.block_out)
        rows_tensor(self.constants, self.lowering.row_names)
        need = sum(self.lowering.tensor_bytes().values())
        if need > cfg.dram_bytes:
            raise CompileError(
                f"the layer's tensors need {need} bytes of DRAM, config {cfg.name!r} has {cfg.dram_bytes}"
            )
        if schedule is None:
            self.search: SearchResult | None = search(self.lowering, vthreads, cache)
            schedule = self.search.schedule
        else:
            self.lowering.check_minimal(schedule.vthreads)
            self.search = None
        self.schedule = schedule
        if schedule.res_inp or self.lowering.pair_gemm:  # the identity block the residual or pair GEMM reads
            self.constants[EYE] = identity_weights(cfg)
        self.stream = build_stream(self.lowering, schedule)
        self.compile_seconds = time.perf_counter() - t0

    def run(
        self,
        dev: Device,
        x: np.ndarray,
        residual: np.ndarray | None = None,
        max_cycles: int | None = None,
        timeline: bool = False,
        weights: np.ndarray | None = None,
        gate: np.ndarray | None = None,
        up: np.ndarray | None = None,
    ) -> LayerRun:
        """Run on ``dev``: x is (N, C, H, W) int8; ``residual`` (N, OC, OH, OW) if the layer adds one;
        ``weights`` (OIHW int8) exactly when the layer was compiled for weights given at run time; ``gate``
        (N, C, 1, 1) int8 exactly when it was compiled with a gated input (:attr:`Fusions.gate`); ``up`` (N,
        channels of the upsampled blocks, H / fh, W / fw) int8 exactly when it reads an upsampled input in place
        (:attr:`Fusions.up`: x's channels of those blocks are then not read)."""
        sp, cfg = self.spec, self.cfg
        if (weights is None) != ("wgt" in self.constants):
            raise CompileError("weights are given at run time exactly when the layer was compiled with their shape")
        if dev.cfg.hash != cfg.hash:
            raise CompileError(config_mismatch(cfg, dev.cfg))
        if x.dtype != np.int8 or x.shape != (sp.n, sp.c, sp.h, sp.w):
            raise CompileError(f"input must be int8 of shape {(sp.n, sp.c, sp.h, sp.w)}, got {x.dtype} {x.shape}")
        arrays = dict(self.constants, inp=pack_activation(x, cfg.batch, cfg.block_in))
        if weights is not None:
            if weights.dtype != np.int8 or weights.shape != sp.weight_shape:
                raise CompileError(f"weights must be int8 {sp.weight_shape}, got {weights.dtype} {weights.shape}")
            arrays["wgt"] = pack_weights(weights, cfg.block_out, cfg.block_in)
        if (gate is None) != (self.fusions.gate is None):
            raise CompileError("a gate is given at run time exactly when the layer was compiled with a gated input")
        if gate is not None:
            if gate.dtype != np.int8 or gate.shape != self.fusions.gate.gate_shape:
                want = self.fusions.gate.gate_shape
                raise CompileError(f"the gate must be int8 of shape {want}, got {gate.dtype} {gate.shape}")
            arrays[GATE] = pack_activation(gate, cfg.batch, cfg.block_out)
        low, extra = self.lowering, {}
        if (up is None) != (low.up is None):
            raise CompileError("an upsampled input is given exactly when the layer was compiled to read one")
        if up is not None:
            (fh, fw), blocks = low.up.factor, low.up.blocks
            hw = (sp.h // fh, sp.w // fw)
            if up.dtype != np.int8 or up.ndim != 4 or (up.shape[0], *up.shape[2:]) != (sp.n, *hw):
                raise CompileError(f"the upsampled input must be int8 of shape {(sp.n, 'C', *hw)}, got {up.shape}")
            if -(-up.shape[1] // cfg.block_in) != blocks:
                raise CompileError(f"the upsampled input has {up.shape[1]} channels, not {blocks} channel blocks")
            arrays["up"] = pack_activation(up, cfg.batch, cfg.block_in)
        kind = self.epilogue.residual or (self.epilogue.post.residual if self.epilogue.post else None)
        if kind:
            want = RESIDUAL_DTYPES[kind]
            if residual is None or residual.dtype != want or residual.shape != sp.out_shape:
                got = None if residual is None else (residual.dtype, residual.shape)
                raise CompileError(f"the layer adds a {kind} residual of shape {sp.out_shape}, got {got}")
            arrays["res"] = pack_activation(residual, cfg.batch, cfg.block_out)
        elif residual is not None:
            raise CompileError("the layer was compiled without a residual input")
        shape = (*low.stored_shape(low.view), cfg.batch, cfg.block_out)
        if low.copy_view is not None:  # the copy tensor, returned whole and unpacked as LayerRun.extra["copy"]
            extra["copy"] = (*low.stored_shape(low.copy_view), cfg.batch, cfg.block_out)
        packed, result = run_bound(
            dev, low, self.stream, arrays, shape, extra, max_cycles=max_cycles, timeline=timeline
        )
        copies = {k: unpack_activation(v, sp.n, v.shape[1] * cfg.block_out) for k, v in extra.items()}
        if low.view is not None:  # this layer's pixels of the larger tensor
            (y0, x0), (sy, sx), (oh, ow) = low.view.offset, low.view.step, low.out_hw
            b0 = low.view.blocks[0]
            packed = packed[:, b0 : b0 + low.ob, y0 : y0 + (oh - 1) * sy + 1 : sy, x0 : x0 + (ow - 1) * sx + 1 : sx]
        return LayerRun(unpack_activation(np.ascontiguousarray(packed), sp.n, sp.oc), result, copies)

    def program(self, dev: Device | None = None) -> list[Insn]:
        """The instruction stream (against scratch buffers), e.g. for disassembly."""
        return emit_program(self.lowering, self.stream, dev or Device(self.cfg))


def compile_conv2d(
    input_shape: tuple[int, int, int, int],
    weights: np.ndarray | tuple[int, int, int, int],
    *,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    epilogue: Epilogue | None = None,
    fusions: Fusions | None = None,
    out_view: OutputView | None = None,
    config=DEFAULT_PRESET,
    vthreads: int | str = "auto",
    schedule: Schedule | None = None,
    cache: ScheduleCache | None = None,
) -> CompiledConv2d:
    """Compile conv2d(x, weights) and its ``epilogue`` (:class:`vdla.graph.epilogue.Epilogue`: bias,
    requantization, residual, clamp; the int32 accumulator truncated to int8 without one) for inputs of
    ``input_shape`` (NCHW) on ``config``, with what ``fusions`` fuses into the layer
    (:class:`~vdla.compiler.spec.Fusions`: a max pool of the output, a residual add after its table, a channel scale
    of its input, an upsampled input read in place, a copy of the output stored through a view). The schedule is
    searched (``vthreads`` virtual threads or "auto", results kept in ``cache``) unless given. ``out_view`` stores
    the output pixels into a larger tensor (:class:`~vdla.compiler.spec.OutputView`: one phase of an interleave;
    the run returns the layer's own pixels). ``weights`` given as a shape (a tuple) are computed at run time: the
    program loads them from the DRAM tensor bound as ``wgt``, packed by :func:`vdla.graph.layout.pack_weights`,
    and the layer has no weight constant."""
    shape = weights if isinstance(weights, tuple) else weights.shape
    spec = Conv2dSpec.make(input_shape, shape[0], shape[2:], stride, padding, dilation, groups)
    if len(shape) != 4 or shape[1] != spec.c:
        raise CompileError(f"weights {shape} do not match {spec.c} input channels (OIHW)")
    options = dict(fusions=fusions, view=out_view, vthreads=vthreads, schedule=schedule, cache=cache)
    return CompiledConv2d(spec, weights, load_config(config), epilogue or Epilogue(), **options)


class CompiledDense:
    """dense(x, w) = x @ w.T for x (M, K), w (N, K), as a 1x1 conv2d over M/batch pixels per batch lane."""

    def __init__(self, m: int, conv: CompiledConv2d):
        self.m, self.conv = m, conv

    def _to_nchw(self, a: np.ndarray) -> np.ndarray:
        b, width = self.conv.cfg.batch, self.conv.spec.w
        padded = np.zeros((b * width, a.shape[1]), a.dtype)
        padded[: self.m] = a
        return np.ascontiguousarray(padded.reshape(b, width, -1).transpose(0, 2, 1)[:, :, None, :])

    def run(
        self,
        dev: Device,
        x: np.ndarray,
        residual: np.ndarray | None = None,
        max_cycles: int | None = None,
        timeline: bool = False,
        weights: np.ndarray | None = None,
    ) -> LayerRun:
        """x is (M, K) int8; ``residual`` (M, N) if the layer adds one; ``weights`` (N, K) int8 when compiled
        for weights given at run time. Returns (M, N) int8."""
        if x.ndim != 2 or x.shape[0] != self.m:
            raise CompileError(f"dense input must be ({self.m}, K), got {x.shape}")
        res = None if residual is None else self._to_nchw(residual)
        w = None if weights is None else weights[:, :, None, None]
        run = self.conv.run(dev, self._to_nchw(x), res, max_cycles, timeline, w)
        out = run.out[:, :, 0, :].transpose(0, 2, 1).reshape(-1, run.out.shape[1])[: self.m]
        return LayerRun(np.ascontiguousarray(out), run.result)


def compile_dense(m: int, weights: np.ndarray | tuple[int, int], *, config=DEFAULT_PRESET, **kwargs) -> CompiledDense:
    """Compile x (m, K) @ weights (N, K).T + epilogue (keyword arguments of :func:`compile_conv2d`); weights
    given as their shape (N, K) are computed at run time (see :func:`compile_conv2d`)."""
    cfg = load_config(config)
    shape = weights if isinstance(weights, tuple) else weights.shape
    if len(shape) != 2:
        raise CompileError(f"dense weights must be (N, K), got {shape}")
    if m < 1:
        raise CompileError(f"dense needs at least one row, got m={m}")
    width = -(-m // cfg.batch)
    w4 = (*shape, 1, 1) if isinstance(weights, tuple) else weights[:, :, None, None]
    conv = compile_conv2d((cfg.batch, shape[1], 1, width), w4, config=cfg, **kwargs)
    return CompiledDense(m, conv)
