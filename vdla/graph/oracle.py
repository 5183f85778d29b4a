"""Numpy oracle of the graph's compute operators: convolution, dense and the fused integer epilogue.

The one reference of these semantics, written from the operator definitions (not from any generated
code): the accelerator's compiled layers, the CPU fallback's kernels and the simulator are all
checked against it. Integer accumulation wraps to int32 like the hardware's accumulators; floats
accumulate in float64 and round to float32 once.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from vdla.graph.ew import Arg, EwStep, step_result_dtype
from vdla.graph.types import INT_RANGE, is_float
from vdla.graph.window import Window
from vdla.isa.arith import INT8_MAX, INT8_MIN, MAX_SHIFT, requantize, rounding_shift, wrap32


def windows(x: np.ndarray, window: Window, fill: float | int = 0) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) view of the padded ``x`` under every window position."""
    (kh, kw), (sh, sw), (dh, dw) = window.kernel, window.stride, window.dilation
    top, bottom, left, right = window.pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))[..., ::dh, ::dw]
    oh, ow = window.out_size(*x.shape[2:])
    return win[:, :, ::sh, ::sw][:, :, :oh, :ow]


def _accumulated(acc: np.ndarray, integer: bool) -> np.ndarray:
    """float64 sums -> int32 (wrapping, exact: int8 products sum far below 2^53) or float32."""
    return wrap32(np.rint(acc).astype(np.int64)).astype(np.int32) if integer else acc.astype(np.float32)


def conv2d(x: np.ndarray, w: np.ndarray, window: Window, groups: int = 1) -> np.ndarray:
    """NCHW x OIHW grouped convolution -> (N, O, OH, OW) accumulators: int32 for integer inputs, else float32."""
    n, c = x.shape[:2]
    oc, icg, kh, kw = w.shape
    win = windows(x.astype(np.float64), window)  # (N, C, OH, OW, KH, KW)
    oh, ow = win.shape[2:4]
    win = win.reshape(n, groups, icg, oh, ow, kh, kw)
    wg = w.astype(np.float64).reshape(groups, oc // groups, icg, kh, kw)
    acc = np.stack([np.tensordot(win[:, g], wg[g], axes=([1, 4, 5], [1, 2, 3])) for g in range(groups)], axis=1)
    acc = acc.transpose(0, 1, 4, 2, 3).reshape(n, oc, oh, ow)  # (N, G, OH, OW, O/G) -> (N, O, OH, OW)
    return _accumulated(acc, x.dtype.kind in "iu")


def dense(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (M, K) times w (N, K) transposed -> (M, N) accumulators: int32 for integer inputs, else float32."""
    return _accumulated(x.astype(np.float64) @ w.astype(np.float64).T, x.dtype.kind in "iu")


def epilogue(
    acc: np.ndarray,
    bias: np.ndarray | None = None,
    multiplier: int | np.ndarray = 1,
    shift: int = 0,
    bounds: tuple[int, int] = (INT8_MIN, INT8_MAX),
    residual: np.ndarray | None = None,
    channel_axis: int = 1,
    pre_shift: int = 0,
) -> np.ndarray:
    """The accelerator's fused epilogue on int32 accumulators, every step wrapping to int32 like its ALU:
    ``clip(rounding_shift(wrap32(rounding_shift(acc + bias, pre_shift) * multiplier), shift) + residual,
    *bounds)`` as int8.

    ``bias`` and an array ``multiplier`` are per channel along ``channel_axis``.
    """
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    v = acc.astype(np.int64)
    if bias is not None:
        v = wrap32(v + np.asarray(bias, np.int64).reshape(shape))
    v = wrap32(rounding_shift(v, pre_shift))
    m = np.asarray(multiplier, np.int64)
    v = wrap32(v * (m.reshape(shape) if m.ndim else m))
    v = wrap32(rounding_shift(v, shift))
    if residual is not None:
        v = wrap32(v + residual.astype(np.int64))
    return np.clip(v, *bounds).astype(np.int8)


def conv2d_reference(x: np.ndarray, w: np.ndarray, spec, **epi) -> np.ndarray:
    """conv2d of a layer ``spec`` (anything with a ``window``) followed by :func:`epilogue`."""
    return epilogue(conv2d(x, w, spec.window), **epi)


def dense_reference(x: np.ndarray, w: np.ndarray, **epi) -> np.ndarray:
    """dense followed by :func:`epilogue` over the output-feature axis."""
    return epilogue(dense(x, w), channel_axis=1, **epi)


# ---------------------------------------------------------------------------------------------------------
# Elementwise steps


def round_half_up_div(total: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """floor(total / count + 1/2) on integers."""
    return (2 * total.astype(np.int64) + count) // (2 * np.asarray(count, np.int64))


def quantize(x: np.ndarray, scale, zero_point) -> np.ndarray:
    """onnx QuantizeLinear to int8: round half to even of x / scale, plus zero point, saturated."""
    q = np.rint(x / np.asarray(scale, np.float32)) + np.asarray(zero_point, np.float32)
    return np.clip(q, -128, 127).astype(np.int8)


def dequantize(x: np.ndarray, scale, zero_point) -> np.ndarray:
    return (x.astype(np.int32) - np.asarray(zero_point, np.int32)).astype(np.float32) * np.asarray(scale, np.float32)


def cast(x: np.ndarray, dtype: str) -> np.ndarray:
    """Saturating cast; float to int rounds half to even."""
    if is_float(dtype):
        return x.astype(np.float32)
    src = np.rint(x.astype(np.float64)) if x.dtype.kind == "f" else x.astype(np.int64)
    return np.clip(src, *INT_RANGE[dtype]).astype(dtype)


def ew_step(step: EwStep, v: np.ndarray, dtype: str, ops: list, out: str) -> np.ndarray:
    """One elementwise step on ``v`` (of dtype ``dtype``) with resolved operand values ``ops``; the result
    has dtype ``out`` (:func:`vdla.graph.ew.step_result_dtype`)."""
    op = step.op
    fl = is_float(dtype)
    if op in ("add", "sub", "mul", "max", "min"):
        a, b = (v, np.asarray(ops[0], np.float32)) if fl else (v.astype(np.int32), np.asarray(ops[0], np.int32))
        fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[op]
        return fn(a, b)
    if op == "relu":
        return np.maximum(v, v.dtype.type(0))
    if op == "clip":
        if fl:
            return np.minimum(np.maximum(v, np.float32(ops[0])), np.float32(ops[1]))
        return np.minimum(np.maximum(v.astype(np.int64), ops[0]), ops[1]).astype(out)
    if op == "sigmoid":
        with np.errstate(over="ignore"):
            return np.float32(1) / (np.float32(1) + np.exp(-v))
    if op in ("tanh", "exp"):
        with np.errstate(over="ignore"):
            return getattr(np, op)(v)
    if op == "quantize":
        return quantize(v, *ops)
    if op == "dequantize":
        return dequantize(v, *ops)
    if op == "rshift":
        return wrap32(rounding_shift(v, np.clip(np.asarray(ops[0], np.int64), 0, MAX_SHIFT))).astype(np.int32)
    if op == "requantize":
        m, shift = ops
        return requantize(
            v, m, np.clip(np.asarray(shift, np.int64), 0, MAX_SHIFT), int(step.attr("lo")), int(step.attr("hi"))
        )
    return cast(v, out)


def chain(steps, types, arrays: list[np.ndarray], out_shape: tuple[int, ...], out_dtype: str) -> np.ndarray:
    """Apply resolved elementwise ``steps`` with numpy broadcasting; ``arrays[0]`` is the primary input and
    ``types`` the types of ``arrays``."""
    v, dtype = arrays[0], types[0].dtype
    for step in steps:
        ops = [arrays[o.index] if isinstance(o, Arg) else o.value for o in step.operands]
        out = step_result_dtype(step, dtype, tuple(types))
        v, dtype = ew_step(step, v, dtype, ops, out), out
    return np.ascontiguousarray(np.broadcast_to(v, out_shape)).astype(out_dtype)


# ---------------------------------------------------------------------------------------------------------
# Pooling and softmax


def pool2d(x: np.ndarray, window: Window, kind: str, count_include_pad: bool = False) -> np.ndarray:
    """Max or average pooling of NCHW ``x``; int8 averages round half up, padding excluded unless asked."""
    fl = is_float(x.dtype.name)
    if kind == "max":
        fill = -np.inf if fl else INT_RANGE[x.dtype.name][0]
        return windows(x, window, fill).max(axis=(4, 5)).astype(x.dtype)
    total = windows(x.astype(np.float64 if fl else np.int64), window, 0).sum(axis=(4, 5))
    if count_include_pad:
        count = np.full(total.shape[2:], window.kernel[0] * window.kernel[1])
    else:
        count = windows(np.ones((1, 1, *x.shape[2:]), np.int64), window, 0).sum(axis=(4, 5))[0, 0]
    return (total / count).astype(np.float32) if fl else round_half_up_div(total, count).astype(np.int8)


def global_avg_pool(x: np.ndarray) -> np.ndarray:
    """Mean over H and W, keeping (N, C, 1, 1); int8 rounds half up."""
    if is_float(x.dtype.name):
        return x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(np.float32)
    return round_half_up_div(x.astype(np.int64).sum(axis=(2, 3), keepdims=True), x.shape[2] * x.shape[3]).astype(
        np.int8
    )


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of float ``x`` along ``axis``, computed in float64."""
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)
