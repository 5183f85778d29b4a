"""Kernel signatures of the CPU fallback: one frozen, hashable ``*Spec`` per operator kernel.

A signature holds only shapes, dtypes and compile-time attributes: it is the key of the kernel cache
and the input of the code generator; its :meth:`Spec.evaluate` is what the kernel computes, in numpy (the
oracle's semantics). Factories (``make_*``) validate a request and raise
:class:`~vdla.graph.types.UnsupportedError` naming the operator. Value types, elementwise steps and
window geometry come from :mod:`vdla.graph`; the blocked layout from :mod:`vdla.graph.layout`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

import vdla.graph.oracle as oracle
from vdla.graph.ew import Arg, Const, EwStep, operand_fits, step_result_dtype
from vdla.graph.layout import blocked_shape, pack_activation, unpack_activation
from vdla.graph.ops import (
    SCATTER_REDUCTIONS,
    RecurrenceAttrs,
    TransposedWindow,
    concat_type,
    grid_sample_type,
    im2col_type,
    interleave_type,
    matmul_type,
    nll_type,
    norm_type,
    one_hot_type,
    pad_type,
    pool_window,
    recurrence_attrs,
    recurrence_type,
    reduce_type,
    resize_type,
    scan_type,
    slice_type,
    softmax_type,
    take_fill,
    take_type,
    topk_type,
    transpose_type,
    transposed_window,
)
from vdla.graph.types import TensorType, UnsupportedError, is_float
from vdla.graph.window import Window, make_window


def contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` itself if C-contiguous, else a C-contiguous copy (unlike ascontiguousarray, keeps 0-d arrays)."""
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _need(op: str, cond: bool, message: str) -> None:
    if not cond:
        raise UnsupportedError(op, message)


class Spec(ABC):
    """The signature of one CPU kernel: a frozen, hashable dataclass of shapes, dtypes and compile-time
    attributes, with the kernel's output type ``out``.

    Invariant: ``spec.evaluate(*arrays)``, on the kernel's inputs in :func:`spec_inputs` order, is what the
    kernel for ``spec`` returns. It is the operator's numpy semantics, from :mod:`vdla.graph.oracle` (written
    from the operator definitions, never from the generated code): the tests and ``vdla cpu-bench`` check the
    kernels against it. Every kernel spec defines it (an abstract method: a spec without one cannot be made).
    """

    @abstractmethod
    def evaluate(self, *arrays: np.ndarray) -> np.ndarray:
        """The kernel's output on ``arrays``, computed in numpy."""


@dataclass(frozen=True)
class ChainSpec(Spec):
    """A stack of elementwise steps run as one loop nest over the broadcast shape of all inputs."""

    inputs: tuple[TensorType, ...]
    steps: tuple[EwStep, ...]
    out: TensorType

    def evaluate(self, *arrays: np.ndarray) -> np.ndarray:
        """The steps applied with numpy broadcasting; ``arrays[0]`` is the primary input."""
        return oracle.chain(self.steps, self.inputs, list(arrays), self.out.shape, self.out.dtype)


def broadcast_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError as e:
        raise UnsupportedError(op, f"shapes {shapes} do not broadcast together") from e


def make_chain(inputs: tuple[TensorType, ...], steps: tuple[EwStep, ...], op: str = "chain") -> ChainSpec:
    """Validate a chain (dtype rules, broadcasting) and derive its output type."""
    _need(op, len(steps) > 0, "a chain needs at least one step")
    shape = broadcast_shape(op, [t.shape for t in inputs])
    dtype = inputs[0].dtype
    for step in steps:
        for o in step.operands:
            if isinstance(o, Arg):
                _need(step.op, 0 <= o.index < len(inputs), f"operand refers to missing input {o.index}")
        dtype = step_result_dtype(step, dtype, inputs)
    return ChainSpec(inputs, steps, TensorType(shape, dtype))


# ---------------------------------------------------------------------------------------------------------
# Other operators


@dataclass(frozen=True)
class Pool2dSpec(Spec):
    """Max, average or Lp pooling of an NCHW tensor (average excludes padding unless count_include_pad;
    Lp is ``(sum |x|^p)^(1/p)`` over the window's input elements)."""

    x: TensorType
    kind: str
    window: Window
    count_include_pad: bool
    out: TensorType
    p: int = 2

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return oracle.pool2d(x, self.window, self.kind, self.count_include_pad, self.p)


def make_pool2d(
    x: TensorType, kind: str, kernel, stride=None, padding=0, count_include_pad: bool = False, dilation=1, p: int = 2
) -> Pool2dSpec:
    win, out = pool_window(f"{kind}_pool2d", x, kernel, stride, padding, dilation, kind, p)
    return Pool2dSpec(x, kind, win, count_include_pad, out.plain, p if kind == "lp" else 2)


@dataclass(frozen=True)
class GlobalAvgPoolSpec(Spec):
    """Mean over H and W of an NCHW tensor, output (N, C, 1, 1); int8 rounds half up. Without ``mean``, the
    int32 sum of an int8 tensor (``global_sum_pool``)."""

    x: TensorType
    out: TensorType
    mean: bool = True

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return oracle.global_avg_pool(x) if self.mean else oracle.global_sum_pool(x)


def make_global_avg_pool(x: TensorType, mean: bool = True) -> GlobalAvgPoolSpec:
    op = "global_avg_pool" if mean else "global_sum_pool"
    _need(op, len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    _need(op, x.dtype in ("int8", "float32") if mean else x.dtype == "int8", f"dtype {x.dtype} is not supported")
    return GlobalAvgPoolSpec(x, TensorType((*x.shape[:2], 1, 1), x.dtype if mean else "int32"), mean)


class SameTypeOut(Spec):
    """A kernel whose output has the type of its input ``x`` (the specs below with an ``x`` field)."""

    x: TensorType

    @property
    def out(self) -> TensorType:
        return self.x


@dataclass(frozen=True)
class SoftmaxSpec(Spec):
    """Softmax (or log-softmax, or hardmax: ``kind``) along one axis of a float32 tensor; with ``scale``, the
    softmax of an int8 tensor dequantized by ``scale`` (the zero point cancels): ``exp(scale * (q - max q))``
    from a 256-entry table, normalised (a detector's box distributions, read from the accelerator)."""

    x: TensorType
    axis: int
    kind: str = "softmax"
    scale: float | None = None

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        if self.scale is not None:  # exp(scale * (q - max q)) in float64, as the table holds it
            x = x.astype(np.float64) * self.scale
        return oracle.softmax(x, self.axis, self.kind)

    @property
    def out(self) -> TensorType:
        return self.x if self.scale is None else TensorType(self.x.shape, "float32")


def make_softmax(x: TensorType, axis: int = -1, kind: str = "softmax", scale: float | None = None) -> SoftmaxSpec:
    if scale is None:
        axis, _ = softmax_type(kind, x, axis)
        return SoftmaxSpec(x.plain, axis, kind)
    op = "softmax of int8"
    _need(op, x.dtype == "int8" and kind == "softmax", f"takes an int8 tensor to a softmax, got {x} ({kind})")
    _need(op, math.isfinite(scale) and scale > 0, f"the scale must be positive and finite, got {scale}")
    axis, _ = softmax_type(kind, TensorType(x.shape, "float32"), axis)
    return SoftmaxSpec(x.plain, axis, kind, float(scale))


@dataclass(frozen=True)
class TransposeSpec(Spec):
    """Generic axis permutation (out.shape[i] = x.shape[perm[i]])."""

    x: TensorType
    perm: tuple[int, ...]
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.transpose(self.perm))


def make_transpose(x: TensorType, perm: tuple[int, ...]) -> TransposeSpec:
    perm, out = transpose_type(x, perm)
    return TransposeSpec(x, perm, out.plain)


@dataclass(frozen=True)
class PackSpec(Spec):
    """NCHW -> the blocked layout (N/bn, C/B, H, W, bn, B) of :mod:`vdla.graph.layout`, zero padding
    images up to a multiple of ``batch`` and channels up to a multiple of ``block``."""

    x: TensorType
    batch: int
    block: int
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return pack_activation(x, self.batch, self.block)


@dataclass(frozen=True)
class UnpackSpec(Spec):
    """The blocked layout (N/bn, C/B, H, W, bn, B) -> NCHW with ``images`` images and ``channels``
    channels (padding dropped)."""

    x: TensorType
    images: int
    channels: int
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return unpack_activation(x, self.images, self.channels)


def make_pack(x: TensorType, batch: int, block: int) -> PackSpec:
    """Pack signature; ``batch`` and ``block`` come from the hardware config (``activation_blocks``)."""
    op = "pack_blocked"
    _need(op, len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    _need(op, batch >= 1 and block >= 1, f"batch and block must be positive, got {batch} and {block}")
    return PackSpec(x, batch, block, TensorType(blocked_shape(x.shape, batch, block), x.dtype))


def make_unpack(x: TensorType, channels: int, images: int | None = None) -> UnpackSpec:
    """Unpack signature; ``images`` defaults to every image slot (N/bn * bn)."""
    op = "unpack_blocked"
    _need(op, len(x.shape) == 6, f"expects (N/bn, C/B, H, W, bn, B), got shape {x.shape}")
    nb, cb, h, w, bn, b = x.shape
    images = nb * bn if images is None else images
    _need(op, (cb - 1) * b < channels <= cb * b, f"{channels} channels do not match {cb} blocks of {b}")
    _need(op, (nb - 1) * bn < images <= nb * bn, f"{images} images do not match {nb} blocks of {bn}")
    return UnpackSpec(x, images, channels, TensorType((images, channels, h, w), x.dtype))


@dataclass(frozen=True)
class ConcatSpec(Spec):
    inputs: tuple[TensorType, ...]
    axis: int
    out: TensorType

    def evaluate(self, *arrays: np.ndarray) -> np.ndarray:
        return np.concatenate(arrays, axis=self.axis)


def make_concat(inputs: tuple[TensorType, ...], axis: int) -> ConcatSpec:
    axis, out = concat_type(inputs, axis)
    return ConcatSpec(inputs, axis, out.plain)


@dataclass(frozen=True)
class Im2colSpec(Spec):
    """NCHW -> (N, C*KH*KW, OH, OW): every kernel tap of every input channel becomes a channel, zero where
    the tap falls in the padding (:func:`vdla.graph.ops.im2col_type`, :func:`vdla.graph.oracle.im2col`).
    With ``packed`` (batch, block), the result is written straight in the accelerator's blocked layout, as
    ``pack_blocked`` of it would be: the input step of a model whose first layer runs on im2col."""

    x: TensorType
    window: Window
    out: TensorType
    packed: tuple[int, int] | None = None

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        cols = oracle.im2col(x, self.window)
        return cols if self.packed is None else pack_activation(cols, *self.packed)


def make_im2col(x: TensorType, kernel, stride=1, padding=0, dilation=1, packed=None) -> Im2colSpec:
    win, out = im2col_type(x, kernel, stride, padding, dilation)
    if packed is None:
        return Im2colSpec(x, win, out.plain)
    plain = make_pack(out.plain, *packed)
    return Im2colSpec(x, win, plain.out, (plain.batch, plain.block))


@dataclass(frozen=True)
class PadSpec(Spec):
    """Constant padding: ``pads[i] = (before, after)`` for each axis."""

    x: TensorType
    pads: tuple[tuple[int, int], ...]
    value: int | float
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return np.pad(x, self.pads, constant_values=self.value)


def make_pad(x: TensorType, pads, value: int | float = 0) -> PadSpec:
    op = "pad"
    pads, out = pad_type(x, pads)
    if is_float(x.dtype):
        _need(op, not math.isnan(value), f"pad value must be a number, got {value}")  # an infinity is copied
        value = float(value)
    else:
        _need(op, float(value).is_integer() and operand_fits(Const(int(value)), x.dtype, ()), f"bad value {value}")
        value = int(value)
    return PadSpec(x, pads, value, out.plain)


@dataclass(frozen=True)
class SliceSpec(Spec):
    """Strided slicing: output index ``o`` along axis ``i`` reads input index ``starts[i] + o * steps[i]``
    (steps may be negative; every index lies inside the input, see :func:`vdla.graph.ops.slice_type`)."""

    x: TensorType
    starts: tuple[int, ...]
    steps: tuple[int, ...]
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        index = tuple(
            slice(a, a + n * s if a + n * s >= 0 else None, s)
            for a, s, n in zip(self.starts, self.steps, self.out.shape, strict=True)
        )
        return np.ascontiguousarray(x[index])


def make_slice(x: TensorType, starts, stops, steps) -> SliceSpec:
    ranges, out = slice_type(x, starts, stops, steps)
    return SliceSpec(x, tuple(r.start for r in ranges), tuple(r.step for r in ranges), out.plain)


@dataclass(frozen=True)
class ResizeSpec(Spec):
    """ONNX Resize, nearest (any dtype), linear or cubic (float32), to ``out.shape``: one
    :class:`~vdla.graph.oracle.ResizeFilter` per axis, ``scales`` the coordinate transformation's per-axis
    factors (:func:`vdla.graph.oracle.resize_taps`), ``extrapolation_value`` what tf_crop_and_resize reads
    outside the input."""

    x: TensorType
    filters: tuple[oracle.ResizeFilter, ...]
    scales: tuple[float, ...]
    extrapolation_value: float
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return oracle.resize(x, self.filters, self.scales, self.out.shape, self.extrapolation_value)


def make_resize(
    x: TensorType, mode: str, coordinate_mode: str, nearest_mode: str, scales, sizes, **options
) -> ResizeSpec:
    """Resize signature; ``options``: cubic_coeff_a, exclude_outside, antialias, roi, extrapolation_value
    (:func:`vdla.graph.ops.resize_type`)."""
    scales = tuple(float(s) for s in scales)
    filters, out = resize_type(x, mode, coordinate_mode, nearest_mode, scales, sizes, **options)
    fill = float(options.get("extrapolation_value", 0.0))
    return ResizeSpec(x, filters, scales, fill if is_float(x.dtype) else int(fill), out.plain)


@dataclass(frozen=True)
class TakeSpec(Spec):
    """Per-axis gather (:func:`vdla.graph.ops.take_type`): output index ``o`` along axis ``i`` reads input
    index ``index[i][o]`` (``None``: the whole axis), ``-1`` reading the fill: ``value``, or the one element
    of the second input ``fill`` when there is one."""

    x: TensorType
    index: tuple[tuple[int, ...] | None, ...]
    value: int | float
    out: TensorType
    fill: TensorType | None = None

    def evaluate(self, x: np.ndarray, *fill: np.ndarray) -> np.ndarray:
        return oracle.take(x, self.index, fill[0].reshape(-1)[0] if fill else self.value)


def make_take(x: TensorType, fill: TensorType | None = None, *, index, value: int | float = 0) -> TakeSpec:
    tables, out = take_type(x, index, value)
    if fill is not None:
        take_fill(x, fill)
    return TakeSpec(x, tables, float(value) if is_float(x.dtype) else int(value), out.plain, fill)


@dataclass(frozen=True)
class GatherSpec(Spec):
    """``out.flat[k] = x.flat[index.flat[k]]`` with int32 offsets, clamped into ``[0, x.size)`` (constant ones
    were checked by the type rule; computed ones may stray)."""

    x: TensorType
    index: TensorType
    out: TensorType

    def evaluate(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        return oracle.gather(x, index)


def make_gather(x: TensorType, index: TensorType) -> GatherSpec:
    _need("gather", index.dtype == "int32", f"offsets must be int32, got {index.dtype}")
    return GatherSpec(x, index, TensorType(index.shape, x.dtype))


@dataclass(frozen=True)
class TableSpec(Spec):
    """``out.flat[k] = table[byte(x.flat[k])]``: an int8 or float32 function of an int8 tensor as its 256-entry
    table."""

    x: TensorType
    table: TensorType
    out: TensorType

    def evaluate(self, x: np.ndarray, entries: np.ndarray) -> np.ndarray:
        return oracle.table(x, entries)


def make_table(x: TensorType, table: TensorType, quant: object = None) -> TableSpec:
    _need("table", x.dtype == "int8", f"the input must be int8, got {x.dtype}")
    ok = table.dtype in ("int8", "float32") and table.size == 256
    _need("table", ok, f"the table must be 256 int8 or float32 entries, got {table}")
    return TableSpec(x.plain, table.plain, TensorType(x.shape, table.dtype))


@dataclass(frozen=True)
class ScatterSpec(Spec):
    """``x`` with each update applied in order at its flat offset (clamped into ``x``: computed offsets may
    stray): replaced or reduced (add, mul, max, min)."""

    x: TensorType
    index: TensorType
    updates: TensorType
    reduction: str

    @property
    def out(self) -> TensorType:
        return self.x

    def evaluate(self, x: np.ndarray, index: np.ndarray, updates: np.ndarray) -> np.ndarray:
        return oracle.scatter(x, index, updates, self.reduction)


def make_scatter(x: TensorType, index: TensorType, updates: TensorType, reduction: str = "none") -> ScatterSpec:
    op = "scatter"
    _need(op, reduction in SCATTER_REDUCTIONS, f"reduction {reduction!r} is not one of {SCATTER_REDUCTIONS}")
    _need(op, x.dtype in ("float32", "int32") and updates.dtype == x.dtype, f"dtypes {x.dtype}, {updates.dtype}")
    _need(op, index.dtype == "int32" and index.shape == updates.shape, f"offsets {index} for updates {updates}")
    return ScatterSpec(x.plain, index, updates, reduction)


@dataclass(frozen=True)
class OneHotSpec(Spec):
    """OneHot of ``indices`` with (off, on) ``values`` (:func:`vdla.graph.ops.one_hot_type`)."""

    indices: TensorType
    values: TensorType
    depth: int
    axis: int
    out: TensorType

    def evaluate(self, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
        return oracle.one_hot(indices, values, self.depth, self.axis)


def make_one_hot(indices: TensorType, values: TensorType, depth: int, axis: int) -> OneHotSpec:
    return OneHotSpec(indices, values.plain, depth, axis, one_hot_type(indices, values, depth, axis).plain)


@dataclass(frozen=True)
class GridSampleSpec(Spec):
    """ONNX GridSample of float32 ``x`` at the float32 ``grid`` (:func:`vdla.graph.ops.grid_sample_type`)."""

    x: TensorType
    grid: TensorType
    mode: str
    padding_mode: str
    align_corners: bool
    out: TensorType

    def evaluate(self, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
        return oracle.grid_sample(x, grid, self.mode, self.padding_mode, self.align_corners)


def make_grid_sample(
    x: TensorType, grid: TensorType, mode: str = "linear", padding_mode: str = "zeros", align_corners: bool = False
) -> GridSampleSpec:
    out = grid_sample_type(x, grid, mode, padding_mode, align_corners)
    return GridSampleSpec(x, grid, mode, padding_mode, bool(align_corners), out)


@dataclass(frozen=True)
class MatMulSpec(Spec):
    """float32 ``a @ b`` with numpy's batch broadcasting: ``(..., M, K) x (..., K, N) -> (..., M, N)``."""

    a: TensorType
    b: TensorType
    out: TensorType

    def evaluate(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return oracle.matmul(a, b)


def make_matmul(a: TensorType, b: TensorType) -> MatMulSpec:
    return MatMulSpec(a, b, matmul_type(a, b))


def _epilogue(op: str, acc: TensorType, inputs: tuple[TensorType, ...], steps: tuple[EwStep, ...]):
    if not steps:
        return None
    chain = make_chain((acc, *inputs), steps, op)
    _need(op, chain.out.shape == acc.shape, f"epilogue operands broadcast the output beyond {acc.shape}")
    return chain


def _with_epilogue(epilogue: ChainSpec | None, acc: np.ndarray, operands: tuple[np.ndarray, ...]) -> np.ndarray:
    """The accumulators ``acc`` through the epilogue chain (its input 0), whose other inputs are ``operands``."""
    return epilogue.evaluate(acc, *operands) if epilogue else acc


@dataclass(frozen=True)
class CpuDenseSpec(Spec):
    """``out[m, n] = sum_k x[m, k] * w[n, k]`` (int8 -> int32 or float32), then an optional epilogue chain.

    The epilogue's input 0 is the accumulator; its other inputs follow ``x`` and ``w`` in the kernel call.
    """

    x: TensorType
    w: TensorType
    acc: TensorType
    epilogue: ChainSpec | None

    @property
    def out(self) -> TensorType:
        return self.epilogue.out if self.epilogue else self.acc

    def evaluate(self, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        return _with_epilogue(self.epilogue, oracle.dense(x, w), operands)


def _acc_dtype(op: str, x: TensorType, w: TensorType) -> str:
    _need(
        op,
        x.dtype == w.dtype and x.dtype in ("int8", "float32"),
        f"unsupported dtypes x={x.dtype}, w={w.dtype}",
    )
    return "int32" if x.dtype == "int8" else "float32"


def make_dense(x: TensorType, w: TensorType, epilogue_inputs: tuple[TensorType, ...] = (), epilogue=()) -> CpuDenseSpec:
    op = "dense"
    acc_dtype = _acc_dtype(op, x, w)
    ok = len(x.shape) == 2 and len(w.shape) == 2 and x.shape[1] == w.shape[1]
    _need(op, ok, f"expects x (M, K) and w (N, K), got {x.shape} and {w.shape}")
    acc = TensorType((x.shape[0], w.shape[0]), acc_dtype)
    return CpuDenseSpec(x, w, acc, _epilogue(op, acc, epilogue_inputs, tuple(epilogue)))


@dataclass(frozen=True)
class CpuConv2dSpec(Spec):
    """Direct NCHW x OIHW convolution with groups (depthwise when groups == C), then an optional epilogue."""

    x: TensorType
    w: TensorType
    window: Window
    groups: int
    acc: TensorType
    epilogue: ChainSpec | None

    @property
    def out(self) -> TensorType:
        return self.epilogue.out if self.epilogue else self.acc

    def evaluate(self, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        return _with_epilogue(self.epilogue, oracle.conv2d(x, w, self.window, self.groups), operands)


def make_conv2d(
    x: TensorType,
    w: TensorType,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    epilogue_inputs: tuple[TensorType, ...] = (),
    epilogue=(),
) -> CpuConv2dSpec:
    op = "conv2d"
    acc_dtype = _acc_dtype(op, x, w)
    _need(op, len(x.shape) == 4 and len(w.shape) == 4, f"expects NCHW x and OIHW w, got {x.shape}, {w.shape}")
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    _need(op, groups >= 1 and c % groups == 0 and oc % groups == 0, f"groups={groups} must divide C and O")
    _need(op, icg == c // groups, f"weight has {icg} input channels per group, expected {c // groups}")
    win, (oh, ow) = make_window(op, (h, wd), (kh, kw), stride, dilation, padding)
    acc = TensorType((n, oc, oh, ow), acc_dtype)
    return CpuConv2dSpec(x, w, win, groups, acc, _epilogue(op, acc, epilogue_inputs, tuple(epilogue)))


@dataclass(frozen=True)
class CpuConvTransposeSpec(Spec):
    """Direct grouped transposed convolution: NCHW ``x``, ``w`` (C, O/groups, KH, KW), an optional bias (O,)
    of the accumulator's dtype; int8 -> int32 (wrapping) or float32."""

    x: TensorType
    w: TensorType
    bias: TensorType | None
    window: TransposedWindow
    groups: int
    out: TensorType

    def evaluate(self, x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
        win = self.window
        acc = oracle.conv_transpose(x, w, win.stride, win.dilation, win.pads, self.out.shape[2:], self.groups)
        return oracle.add_bias(acc, *bias)


def make_conv_transpose(
    x: TensorType,
    w: TensorType,
    bias: TensorType | None = None,
    stride=1,
    padding=0,
    dilation=1,
    output_padding=0,
    groups: int = 1,
) -> CpuConvTransposeSpec:
    op = "conv_transpose"
    acc_dtype = _acc_dtype(op, x, w)
    _need(
        op, len(x.shape) == 4 and len(w.shape) == 4, f"expects NCHW x and (C, O/g, KH, KW) w, got {x.shape}, {w.shape}"
    )
    n, c = x.shape[:2]
    _need(op, groups >= 1 and c % groups == 0 and w.shape[0] == c, f"groups={groups} does not fit {x.shape}, {w.shape}")
    oc = w.shape[1] * groups
    _need(op, bias is None or (bias.shape == (oc,) and bias.dtype == acc_dtype), f"bias must be {acc_dtype} ({oc},)")
    win, (oh, ow) = transposed_window(x.shape[2:], w.shape[2:], stride, dilation, padding, output_padding)
    return CpuConvTransposeSpec(x, w, bias, win, int(groups), TensorType((n, oc, oh, ow), acc_dtype))


@dataclass(frozen=True)
class InterleaveSpec(Spec):
    """``sh * sw`` NCHW phases of one type interleaved into (N, C, J*sh, I*sw)
    (:func:`vdla.graph.oracle.interleave`)."""

    inputs: tuple[TensorType, ...]
    stride: tuple[int, int]
    out: TensorType

    def evaluate(self, *phases: np.ndarray) -> np.ndarray:
        return oracle.interleave(list(phases), self.stride)


def make_interleave(inputs: tuple[TensorType, ...], stride) -> InterleaveSpec:
    stride, out = interleave_type(inputs, stride)
    return InterleaveSpec(tuple(t.plain for t in inputs), stride, out.plain)


# ---------------------------------------------------------------------------------------------------------
# Reductions on any axes, normalizations, scans and selections


@dataclass(frozen=True)
class ReduceSpec(Spec):
    """``x`` reduced over ``axes`` by ``kind`` (:data:`vdla.graph.ops.REDUCE_KINDS`); the output keeps the
    order of the remaining elements (with or without the reduced axes as size 1: ``out.shape``)."""

    x: TensorType
    kind: str
    axes: tuple[int, ...]
    select_last_index: bool
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return oracle.reduce(x, self.kind, self.axes, self.select_last_index).reshape(self.out.shape)


def make_reduce(x: TensorType, kind: str, axes, keepdims: bool = True, select_last_index: bool = False) -> ReduceSpec:
    axes, out = reduce_type(x, kind, axes, keepdims)
    return ReduceSpec(x.plain, kind, axes, bool(select_last_index) and kind in ("argmax", "argmin"), out.plain)


@dataclass(frozen=True)
class NormSpec(SameTypeOut):
    """Layer (``layer_norm``) or RMS (``rms_norm``) normalization of float32 ``x`` over the axes from
    ``axis`` on, then the optional scale and bias (``affine``: their types, broadcasting to ``x``)."""

    x: TensorType
    affine: tuple[TensorType, ...]
    kind: str
    axis: int
    epsilon: float

    def evaluate(self, x: np.ndarray, *affine: np.ndarray) -> np.ndarray:
        return oracle.normalize(x, self.axis, self.epsilon, self.kind == "layer_norm", *affine)


def make_norm(x: TensorType, *affine: TensorType, kind: str, axis: int = -1, epsilon: float) -> NormSpec:
    axis, _ = norm_type(kind, (x, *affine), axis)
    return NormSpec(x.plain, tuple(t.plain for t in affine), kind, axis, float(epsilon))


@dataclass(frozen=True)
class CumSumSpec(SameTypeOut):
    """Cumulative sum (``product``: product) along ``axis``, ``exclusive`` of each element itself, from the end
    when ``reverse``."""

    x: TensorType
    axis: int
    exclusive: bool
    reverse: bool
    product: bool = False

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return oracle.cumsum(x, self.axis, self.exclusive, self.reverse, self.product)


def make_cumsum(
    x: TensorType, axis: int, exclusive: bool = False, reverse: bool = False, product: bool = False
) -> CumSumSpec:
    axis, _ = scan_type(x, axis)
    return CumSumSpec(x.plain, axis, bool(exclusive), bool(reverse), bool(product))


@dataclass(frozen=True)
class TopKSpec(Spec):
    """The ``k`` largest (or smallest) entries along ``axis`` in order (ties: the lower index first; NaN is
    the largest): their values, or with ``indices`` their int32 indices."""

    x: TensorType
    k: int
    axis: int
    largest: bool
    indices: bool
    out: TensorType

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        values, index = oracle.topk(x, self.k, self.axis, self.largest)
        return index if self.indices else values


def make_topk(x: TensorType, k: int, axis: int = -1, largest: bool = True, indices: bool = False) -> TopKSpec:
    axis, out = topk_type(x, int(k), axis, bool(indices))
    return TopKSpec(x.plain, int(k), axis, bool(largest), bool(indices), out.plain)


@dataclass(frozen=True)
class TriluSpec(SameTypeOut):
    """The upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two axes, zero elsewhere."""

    x: TensorType
    upper: bool
    k: int

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return oracle.trilu(x, self.upper, self.k)


def make_trilu(x: TensorType, upper: bool = True, k: int = 0) -> TriluSpec:
    _need("trilu", len(x.shape) >= 2, f"needs a tensor of rank 2 or more, got shape {x.shape}")
    return TriluSpec(x.plain, bool(upper), int(k))


@dataclass(frozen=True)
class NllLossSpec(Spec):
    """Per-element negative log-likelihood ``-x[n, t, d] * weight[t]`` at int32 targets (0 at ``ignore_index``,
    NaN outside the classes), over (N, C, D) viewed inputs."""

    x: TensorType
    target: TensorType
    weight: TensorType | None
    ignore_index: int | None
    out: TensorType

    def evaluate(self, x: np.ndarray, target: np.ndarray, *weight: np.ndarray) -> np.ndarray:
        return oracle.nll_loss(x, target, *weight, ignore_index=self.ignore_index)


def make_nll_loss(
    x: TensorType, target: TensorType, weight: TensorType | None = None, ignore_index: int | None = None
) -> NllLossSpec:
    out = nll_type([x, target, *([weight] if weight is not None else [])])
    ignore = None if ignore_index is None else int(ignore_index)
    return NllLossSpec(x.plain, target.plain, None if weight is None else weight.plain, ignore, out)


@dataclass(frozen=True)
class RecurrenceSpec(Spec):
    """ONNX's RNN, GRU or LSTM after the input projection (:func:`vdla.graph.ops.recurrence_type`): inputs
    gates, R, Rb, lengths, h0 (and c0, P for the LSTM); the output holds Y, then Y_h (and Y_c)."""

    inputs: tuple[TensorType, ...]
    attrs: RecurrenceAttrs
    out: TensorType

    def evaluate(self, *arrays: np.ndarray) -> np.ndarray:
        a = self.attrs
        return oracle.recurrence(
            a.cell, *arrays, reverse=a.reverse, activations=a.activations,
            linear_before_reset=a.linear_before_reset, input_forget=a.input_forget,
        )  # fmt: skip


def make_recurrence(*inputs: TensorType, **attrs: object) -> RecurrenceSpec:
    """The recurrence's kernel for ``inputs``; ``attrs`` are the node's (cell, directions, activations,
    clip, linear_before_reset, input_forget)."""
    a = recurrence_attrs(attrs)
    out = recurrence_type(inputs, a)
    return RecurrenceSpec(tuple(t.plain for t in inputs), a, out)


def spec_inputs(spec: Spec) -> tuple[TensorType, ...]:
    """Types of the arrays a kernel for ``spec`` takes, in call order (the output comes last)."""
    if isinstance(spec, ChainSpec | ConcatSpec | InterleaveSpec | RecurrenceSpec):
        return spec.inputs
    if isinstance(spec, CpuDenseSpec | CpuConv2dSpec):
        return (spec.x, spec.w, *(spec.epilogue.inputs[1:] if spec.epilogue else ()))
    if isinstance(spec, MatMulSpec):
        return (spec.a, spec.b)
    if isinstance(spec, CpuConvTransposeSpec):
        return (spec.x, spec.w) if spec.bias is None else (spec.x, spec.w, spec.bias)
    if isinstance(spec, GatherSpec):
        return (spec.x, spec.index)
    if isinstance(spec, TableSpec):
        return (spec.x, spec.table)
    if isinstance(spec, TakeSpec) and spec.fill is not None:
        return (spec.x, spec.fill)
    if isinstance(spec, ScatterSpec):
        return (spec.x, spec.index, spec.updates)
    if isinstance(spec, GridSampleSpec):
        return (spec.x, spec.grid)
    if isinstance(spec, OneHotSpec):
        return (spec.indices, spec.values)
    if isinstance(spec, NormSpec):
        return (spec.x, *spec.affine)
    if isinstance(spec, NllLossSpec):
        return (spec.x, spec.target, *([spec.weight] if spec.weight is not None else []))
    return (spec.x,)


_OP_NAMES = {
    ChainSpec: "chain",
    GlobalAvgPoolSpec: "global_avg_pool",
    TransposeSpec: "transpose",
    PackSpec: "pack_blocked",
    UnpackSpec: "unpack_blocked",
    ConcatSpec: "concat",
    PadSpec: "pad",
    Im2colSpec: "im2col",
    SliceSpec: "slice",
    ResizeSpec: "resize",
    TakeSpec: "take",
    GatherSpec: "gather",
    TableSpec: "table",
    ScatterSpec: "scatter",
    GridSampleSpec: "grid_sample",
    OneHotSpec: "one_hot",
    MatMulSpec: "matmul",
    CpuDenseSpec: "dense",
    CpuConv2dSpec: "conv2d",
    CpuConvTransposeSpec: "conv_transpose",
    InterleaveSpec: "interleave",
    ReduceSpec: "reduce",
    CumSumSpec: "cumsum",
    TopKSpec: "topk",
    TriluSpec: "trilu",
    NllLossSpec: "nll_loss",
    RecurrenceSpec: "recurrence",
}


def spec_op(spec: Spec) -> str:
    """Operator name of a spec, used in kernel names and error messages."""
    if isinstance(spec, Pool2dSpec):
        return f"{spec.kind}_pool2d"
    if isinstance(spec, SoftmaxSpec | NormSpec):
        return spec.kind
    return _OP_NAMES[type(spec)]
