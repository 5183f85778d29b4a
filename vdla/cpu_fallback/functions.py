"""One function per CPU operator: JIT-compile (cached by signature) for the arguments, then run. The
elementwise operators' functions are made from their definitions (:func:`elementwise_function`).

Inputs go through ``np.ascontiguousarray`` (free for contiguous arrays; a copy otherwise). Every function
takes ``out=`` to write into a preallocated C-contiguous array that does not overlap the inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from vdla.cpu_fallback.jit import get_kernel
from vdla.cpu_fallback.specs import (
    Spec,
    contiguous,
    make_concat,
    make_conv2d,
    make_conv_transpose,
    make_cumsum,
    make_dense,
    make_gather,
    make_global_avg_pool,
    make_grid_sample,
    make_im2col,
    make_matmul,
    make_norm,
    make_pack,
    make_pad,
    make_pool2d,
    make_reduce,
    make_resize,
    make_scatter,
    make_slice,
    make_softmax,
    make_take,
    make_topk,
    make_transpose,
    make_trilu,
    make_unpack,
)
from vdla.cpu_fallback.stacking import resolve_steps, run_chain
from vdla.graph import ew
from vdla.graph.ew import Step
from vdla.graph.types import TensorType, UnsupportedError

Out = np.ndarray | None


def _arr(op: str, x: object) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise UnsupportedError(op, f"expected a numpy array, got {type(x).__name__}")
    return contiguous(x)


def _run(spec: Spec, arrays: Sequence[np.ndarray], out: Out) -> np.ndarray:
    return get_kernel(spec)(*arrays, out=out)


# -- elementwise ------------------------------------------------------------------------------------------


def elementwise(x: np.ndarray, steps: Sequence[Step], out: Out = None) -> np.ndarray:
    """Run a chain of :mod:`ew` steps on ``x`` as one fused kernel."""
    return run_chain(_arr("chain", x), steps, out)


@cache
def elementwise_function(name: str) -> Callable[..., np.ndarray]:
    """``functions.<name>(x, ..., out=None)``: ``elementwise(x, [ew.<name>(...)], out)``, one per elementwise operator,
    the arguments after ``x`` those of its step constructor (:func:`vdla.graph.ew.step_constructor`: operands,
    then attributes). Raises AttributeError when no elementwise operator has that name."""
    make = ew.step_constructor(name)
    P = inspect.Parameter
    params = [P("x", P.POSITIONAL_OR_KEYWORD), *inspect.signature(make).parameters.values()]

    def run(x: np.ndarray, *args: Any, out: Out = None, **kwargs: Any) -> np.ndarray:
        return elementwise(x, [make(*args, **kwargs)], out)

    run.__name__ = run.__qualname__ = name
    run.__signature__ = inspect.Signature([*params, P("out", P.KEYWORD_ONLY, default=None)])
    run.__doc__ = f"``elementwise(x, [ew.{name}(...)], out)``: {make.__doc__}"
    return run


def __getattr__(name: str) -> Callable[..., np.ndarray]:
    """The elementwise operators: ``functions.relu(x)``, ``functions.requantize(x, m, s)``, ...
    (:func:`elementwise_function`)."""
    try:
        return elementwise_function(name)
    except AttributeError as e:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}: {e}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *(d.api for d in ew.EW.values())})


# -- dense and convolution --------------------------------------------------------------------------------


def _epilogue(op: str, bias: np.ndarray | None, shape: tuple[int, ...], epilogue: Sequence[Step]):
    steps = ([ew.add(_arr(op, bias).reshape(shape))] if bias is not None else []) + list(epilogue)
    return resolve_steps(None, steps)


def dense(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    epilogue: Sequence[Step] = (),
    out: Out = None,
) -> np.ndarray:
    """``x (M, K) @ w (N, K)^T (+ bias (N,))`` then ``epilogue`` steps, fused (int8 accumulates in int32)."""
    x, w = _arr("dense", x), _arr("dense", w)
    r = _epilogue("dense", bias, (1, -1), epilogue)
    spec = make_dense(TensorType.of(x, "dense"), TensorType.of(w, "dense"), r.operand_types, r.steps)
    return _run(spec, [x, w, *(contiguous(a) for a in r.operands)], out)


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    epilogue: Sequence[Step] = (),
    out: Out = None,
) -> np.ndarray:
    """Direct NCHW conv with OIHW weights (grouped/depthwise), + bias (O,), then fused ``epilogue`` steps.

    int8 x int8 accumulates in int32 (symmetric quantization: no zero points; requantize in the epilogue).
    ``padding`` is an int, (ph, pw) or (top, left, bottom, right).
    """
    x, w = _arr("conv2d", x), _arr("conv2d", w)
    r = _epilogue("conv2d", bias, (1, -1, 1, 1), epilogue)
    spec = make_conv2d(
        TensorType.of(x, "conv2d"),
        TensorType.of(w, "conv2d"),
        stride,
        padding,
        dilation,
        groups,
        r.operand_types,
        r.steps,
    )
    return _run(spec, [x, w, *(contiguous(a) for a in r.operands)], out)


def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride=1,
    padding=0,
    dilation=1,
    output_padding=0,
    groups: int = 1,
    out: Out = None,
) -> np.ndarray:
    """Transposed convolution of NCHW ``x`` by ``w`` (C, O/groups, KH, KW) + bias (O,): int8 -> int32,
    float32 -> float32. ``padding`` is an int, (ph, pw) or (top, bottom, left, right)."""
    x, w = _arr("conv_transpose", x), _arr("conv_transpose", w)
    arrays = [x, w] + ([] if bias is None else [_arr("conv_transpose", bias)])
    types = [TensorType.of(a, "conv_transpose") for a in arrays]
    spec = make_conv_transpose(
        *types, stride=stride, padding=padding, dilation=dilation, output_padding=output_padding, groups=groups
    )
    return _run(spec, arrays, out)


def matmul(a: np.ndarray, b: np.ndarray, *, out: Out = None) -> np.ndarray:
    """float32 ``a @ b`` of two tensors of rank >= 2, batch dimensions broadcast like numpy's."""
    a, b = _arr("matmul", a), _arr("matmul", b)
    return _run(make_matmul(TensorType.of(a, "matmul"), TensorType.of(b, "matmul")), [a, b], out)


# -- pooling and softmax ----------------------------------------------------------------------------------


def max_pool2d(x: np.ndarray, kernel, stride=None, padding=0, *, dilation=1, out: Out = None) -> np.ndarray:
    x = _arr("max_pool2d", x)
    spec = make_pool2d(TensorType.of(x, "max_pool2d"), "max", kernel, stride, padding, dilation=dilation)
    return _run(spec, [x], out)


def avg_pool2d(
    x: np.ndarray, kernel, stride=None, padding=0, count_include_pad: bool = False, *, dilation=1, out: Out = None
) -> np.ndarray:
    """Average pooling; int8 results round half up."""
    x = _arr("avg_pool2d", x)
    spec = make_pool2d(TensorType.of(x, "avg_pool2d"), "avg", kernel, stride, padding, count_include_pad, dilation)
    return _run(spec, [x], out)


def lp_pool2d(x: np.ndarray, kernel, stride=None, padding=0, p: int = 2, *, dilation=1, out: Out = None) -> np.ndarray:
    """float32 ``(sum |x|^p)^(1/p)`` over each window's input elements."""
    x = _arr("lp_pool2d", x)
    spec = make_pool2d(TensorType.of(x, "lp_pool2d"), "lp", kernel, stride, padding, dilation=dilation, p=p)
    return _run(spec, [x], out)


def global_avg_pool(x: np.ndarray, *, out: Out = None) -> np.ndarray:
    x = _arr("global_avg_pool", x)
    return _run(make_global_avg_pool(TensorType.of(x, "global_avg_pool")), [x], out)


def softmax(x: np.ndarray, axis: int = -1, kind: str = "softmax", *, out: Out = None) -> np.ndarray:
    """Softmax along ``axis``; ``kind`` ``log_softmax`` its logarithm, ``hardmax`` the one-hot of the first
    maximum."""
    x = _arr(kind, x)
    return _run(make_softmax(TensorType.of(x, kind), axis, kind), [x], out)


# -- reductions, normalizations, scans, selections --------------------------------------------------------


def reduce(
    x: np.ndarray, kind: str, axes: Sequence[int], keepdims: bool = True, select_last_index: bool = False,
    *, out: Out = None,
) -> np.ndarray:  # fmt: skip
    """``x`` reduced over ``axes`` by ``kind`` (:data:`vdla.graph.ops.REDUCE_KINDS`: sum, mean, max, ...,
    argmax/argmin giving int32 indices)."""
    x = _arr("reduce", x)
    return _run(make_reduce(TensorType.of(x, "reduce"), kind, axes, keepdims, select_last_index), [x], out)


def normalize(
    x: np.ndarray, scale: np.ndarray | None = None, bias: np.ndarray | None = None, *, axis: int = -1,
    epsilon: float = 1e-5, kind: str = "layer_norm", out: Out = None,
) -> np.ndarray:  # fmt: skip
    """Layer (``layer_norm``) or RMS (``rms_norm``) normalization over the axes from ``axis`` on, times the
    scale plus the bias (broadcasting to ``x``)."""
    arrays = [_arr(kind, a) for a in (x, scale, bias) if a is not None]
    types = [TensorType.of(a, kind) for a in arrays]
    return _run(make_norm(*types, kind=kind, axis=axis, epsilon=epsilon), arrays, out)


def cumsum(
    x: np.ndarray, axis: int, exclusive: bool = False, reverse: bool = False, product: bool = False, *, out: Out = None
) -> np.ndarray:
    x = _arr("cumsum", x)
    return _run(make_cumsum(TensorType.of(x, "cumsum"), axis, exclusive, reverse, product), [x], out)


def topk(x: np.ndarray, k: int, axis: int = -1, largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (smallest) entries along ``axis`` in order and their int32 indices."""
    x = _arr("topk", x)
    t = TensorType.of(x, "topk")
    return _run(make_topk(t, k, axis, largest, False), [x], None), _run(make_topk(t, k, axis, largest, True), [x], None)


def trilu(x: np.ndarray, upper: bool = True, k: int = 0, *, out: Out = None) -> np.ndarray:
    x = _arr("trilu", x)
    return _run(make_trilu(TensorType.of(x, "trilu"), upper, k), [x], out)


# -- layout -----------------------------------------------------------------------------------------------


def transpose(x: np.ndarray, perm: Sequence[int], *, out: Out = None) -> np.ndarray:
    x = _arr("transpose", x)
    return _run(make_transpose(TensorType.of(x, "transpose"), tuple(perm)), [x], out)


def pack_blocked(x: np.ndarray, batch: int, block: int, *, out: Out = None) -> np.ndarray:
    """NCHW -> the accelerator's blocked layout (N/batch, C/block, H, W, batch, block), zero padded;
    ``batch`` and ``block`` are the config's (:func:`vdla.graph.layout.activation_blocks`)."""
    x = _arr("pack_blocked", x)
    return _run(make_pack(TensorType.of(x, "pack_blocked"), batch, block), [x], out)


def unpack_blocked(x: np.ndarray, channels: int, images: int | None = None, *, out: Out = None) -> np.ndarray:
    """The blocked layout -> NCHW with ``channels`` channels and ``images`` images (default: all slots)."""
    x = _arr("unpack_blocked", x)
    return _run(make_unpack(TensorType.of(x, "unpack_blocked"), channels, images), [x], out)


def concat(arrays: Sequence[np.ndarray], axis: int = 0, *, out: Out = None) -> np.ndarray:
    arrays = [_arr("concat", a) for a in arrays]
    return _run(make_concat(tuple(TensorType.of(a, "concat") for a in arrays), axis), arrays, out)


def pad(x: np.ndarray, pads: Sequence[tuple[int, int]], value: int | float = 0, *, out: Out = None) -> np.ndarray:
    """Constant padding, ``pads[i] = (before, after)`` per axis."""
    x = _arr("pad", x)
    return _run(make_pad(TensorType.of(x, "pad"), pads, value), [x], out)


def im2col(x: np.ndarray, kernel, stride=1, padding=0, dilation=1, *, out: Out = None) -> np.ndarray:
    """NCHW -> (N, C*KH*KW, OH, OW): channel ``(c*KH + ky)*KW + kx`` is input channel ``c`` under kernel tap
    ``(ky, kx)``, zero in the padding (``padding`` as :func:`vdla.graph.window.normalize_padding` takes it)."""
    x = _arr("im2col", x)
    return _run(make_im2col(TensorType.of(x, "im2col"), kernel, stride, padding, dilation), [x], out)


def strided_slice(
    x: np.ndarray, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int], *, out: Out = None
) -> np.ndarray:
    """``x[start:stop:step, ...]`` with one ``range(start, stop, step)`` per axis, each selecting at least one
    index inside the axis (a negative step walks backwards; stop -1 then ends at index 0)."""
    x = _arr("slice", x)
    return _run(make_slice(TensorType.of(x, "slice"), starts, stops, steps), [x], out)


def resize(
    x: np.ndarray,
    sizes: Sequence[int],
    scales: Sequence[float] | None = None,
    mode: str = "nearest",
    coordinate_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    *,
    out: Out = None,
    **options,
) -> np.ndarray:
    """ONNX Resize of ``x`` to shape ``sizes``: ``mode`` nearest (any dtype), linear or cubic (float32), the
    coordinate transformation and nearest rounding of ONNX; ``scales`` default to ``sizes / x.shape``;
    ``options``: cubic_coeff_a, exclude_outside, antialias, roi, extrapolation_value."""
    x = _arr("resize", x)
    if scales is None:
        scales = [n / d for n, d in zip(sizes, x.shape, strict=False)]  # a length mismatch is named below
    spec = make_resize(TensorType.of(x, "resize"), mode, coordinate_mode, nearest_mode, scales, sizes, **options)
    return _run(spec, [x], out)


# -- indexing ---------------------------------------------------------------------------------------------


def take(x: np.ndarray, index, value: int | float = 0, *, out: Out = None) -> np.ndarray:
    """Per-axis gather: output index ``o`` along axis ``i`` reads ``x``'s index ``index[i][o]`` (``None``: the
    whole axis), ``-1`` reading ``value``."""
    x = _arr("take", x)
    return _run(make_take(TensorType.of(x, "take"), index=index, value=value), [x], out)


def _offsets(op: str, x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Flat offsets as int32, each checked to lie in ``x`` (the kernels do not check at run time)."""
    o = np.asarray(offsets)
    if o.dtype.kind not in "iu" or not np.all((o >= 0) & (o < x.size)):
        raise UnsupportedError(op, f"offsets must be integers in [0, {x.size}) for an input of shape {x.shape}")
    return np.ascontiguousarray(o, np.int32)


def gather(x: np.ndarray, offsets: np.ndarray, *, out: Out = None) -> np.ndarray:
    """``out.flat[k] = x.flat[offsets.flat[k]]``, shaped like ``offsets``."""
    x = _arr("gather", x)
    o = _offsets("gather", x, offsets)
    return _run(make_gather(TensorType.of(x, "gather"), TensorType.of(o, "gather")), [x, o], out)


def scatter(
    x: np.ndarray, offsets: np.ndarray, updates: np.ndarray, reduction: str = "none", *, out: Out = None
) -> np.ndarray:
    """``x`` with ``updates.flat[k]`` applied in order at flat offset ``offsets.flat[k]``: replacing the
    element (reduction none) or combined with it (add, mul, max, min)."""
    x, updates = _arr("scatter", x), _arr("scatter", updates)
    o = _offsets("scatter", x, offsets)
    spec = make_scatter(*(TensorType.of(a, "scatter") for a in (x, o, updates)), reduction)
    return _run(spec, [x, o, updates], out)


def grid_sample(
    x: np.ndarray,
    grid: np.ndarray,
    mode: str = "linear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
    *,
    out: Out = None,
) -> np.ndarray:
    """ONNX GridSample of float32 ``x`` (N, C, spatial...) at ``grid`` (N, out spatial..., r)."""
    x, grid = _arr("grid_sample", x), _arr("grid_sample", grid)
    spec = make_grid_sample(TensorType.of(x, "grid_sample"), TensorType.of(grid, "grid_sample"), mode, padding_mode,
                            align_corners)  # fmt: skip
    return _run(spec, [x, grid], out)
