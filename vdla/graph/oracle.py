"""Numpy oracle of the graph's operators: convolution, dense, the fused integer epilogue, elementwise
steps, pooling, softmax and resize.

The one definition of these semantics, written from the operator definitions (not from any generated
code): the accelerator's compiled layers, the CPU fallback's kernels and the simulator are all
checked against it. Integer accumulation wraps to int32 like the hardware's accumulators; floats
accumulate in float64 and round to float32 once.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import vdla.graph.attention as att
import vdla.graph.layernorm as ln
from vdla.graph.attention import IntAttention, QdqAttention
from vdla.graph.epilogue import Epilogue
from vdla.graph.ew import EW, Arg, EwStep, StepTypes, step_result_dtype
from vdla.graph.ewmath import Math
from vdla.graph.layernorm import IntLayerNorm
from vdla.graph.types import INT_RANGE, TensorType, UnsupportedError, is_float
from vdla.graph.window import Window
from vdla.isa.arith import MAX_SHIFT, MUL_MAX_SHIFT, mul_shift, requantize, rounding_shift, shift_lanes, wrap32


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


def im2col(x: np.ndarray, window: Window) -> np.ndarray:
    """NCHW ``x`` -> (N, C*KH*KW, OH, OW): channel ``(c*KH + ky)*KW + kx`` is input channel ``c`` under
    kernel tap ``(ky, kx)`` at every window position, zero in the padding. ``conv2d(x, w, window)`` equals
    ``conv2d(im2col(x, window), w.reshape(O, -1, 1, 1))`` (a 1x1 convolution, stride 1, no padding)."""
    n, c = x.shape[:2]
    win = windows(x, window)  # (N, C, OH, OW, KH, KW)
    oh, ow, kh, kw = win.shape[2:]
    return np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * kh * kw, oh, ow)


def dense(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (M, K) times w (N, K) transposed -> (M, N) accumulators: int32 for integer inputs, else float32."""
    return _accumulated(x.astype(np.float64) @ w.astype(np.float64).T, x.dtype.kind in "iu")


def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    stride: tuple[int, int],
    dilation: tuple[int, int],
    pads: tuple[int, int, int, int],
    out_hw: tuple[int, int],
    groups: int = 1,
) -> np.ndarray:
    """NCHW x (C, O/groups, KH, KW) grouped transposed convolution -> (N, O, OH, OW) accumulators (int32 for
    integer inputs, else float32): input pixel ``(iy, ix)`` under tap ``(ky, kx)`` adds ``x * w`` to output
    ``(iy*sh + ky*dh - top, ix*sw + kx*dw - left)``; ``pads`` (top, bottom, left, right) crop the full
    output (a negative pad extends it with zeros), ``out_hw`` is its size after the crop and output padding."""
    n, c, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    (sh, sw), (dh, dw), (top, _, left, _) = stride, dilation, pads
    icg = c // groups
    full = np.zeros((n, groups, ocg, (h - 1) * sh + (kh - 1) * dh + 1, (wd - 1) * sw + (kw - 1) * dw + 1))
    xg = x.astype(np.float64).reshape(n, groups, icg, h, wd)
    wg = w.astype(np.float64).reshape(groups, icg, ocg, kh, kw)
    for ky in range(kh):
        for kx in range(kw):
            rows = slice(ky * dh, ky * dh + (h - 1) * sh + 1, sh)
            cols = slice(kx * dw, kx * dw + (wd - 1) * sw + 1, sw)
            full[:, :, :, rows, cols] += np.einsum("ngchw,gco->ngohw", xg, wg[..., ky, kx])
    full = full.reshape(n, groups * ocg, *full.shape[3:])
    acc = np.zeros((n, groups * ocg, *out_hw))
    (oh, ow), (fh, fw) = out_hw, full.shape[2:]
    y0, y1, x0, x1 = max(top, 0), min(top + oh, fh), max(left, 0), min(left + ow, fw)
    if y0 < y1 and x0 < x1:
        acc[:, :, y0 - top : y1 - top, x0 - left : x1 - left] = full[:, :, y0:y1, x0:x1]
    return _accumulated(acc, x.dtype.kind in "iu")


def add_bias(acc: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    """Accumulators ``acc`` (N, C, ...) plus the optional per-channel ``bias`` (C,) of their dtype: int32 wraps
    like the hardware's accumulators, float32 adds in float32. No bias: ``acc`` itself."""
    if not bias:
        return acc
    b = bias[0].reshape((1, -1) + (1,) * (acc.ndim - 2))
    if acc.dtype == np.int32:
        return wrap32(acc.astype(np.int64) + b.astype(np.int64)).astype(np.int32)
    return (acc + b.astype(np.float32)).astype(np.float32)


def interleave(phases: list[np.ndarray], stride: tuple[int, int]) -> np.ndarray:
    """Phases (N, C, J, I), row-major over (py, px), -> (N, C, J*sh, I*sw): phase (py, px) at rows
    ``j*sh + py`` and columns ``i*sw + px``."""
    sh, sw = stride
    n, c, j, i = phases[0].shape
    stacked = np.stack(phases).reshape(sh, sw, n, c, j, i)
    return np.ascontiguousarray(stacked.transpose(2, 3, 4, 0, 5, 1)).reshape(n, c, j * sh, i * sw)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's ``a @ b`` of float operands (batch dimensions broadcast), summed in float64 -> float32."""
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def epilogue(
    acc: np.ndarray, ep: Epilogue | None = None, residual: np.ndarray | None = None, channel_axis: int = 1
) -> np.ndarray:
    """The accelerator's fused epilogue ``ep`` (:class:`vdla.graph.epilogue.Epilogue`; none: a truncation to
    int8) on int32 accumulators, every step wrapping to int32 like its ALU:
    ``clip(mul_shift(acc + bias, multiplier, shift) + residual, *clip)`` as int8 (the product exact, rounded
    once); with a rescaled residual ``y = clip(mul_shift(acc + bias, m, shift), *y_clip)``, then
    ``clip(rounding_shift(mul_shift(y, m_y, shift_y) + mul_shift(residual, m_k, shift_k), frac), *clip)``.

    The bias and an array multiplier are per channel along ``channel_axis``.
    """
    ep = ep or Epilogue()
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    v = acc.astype(np.int64)
    if ep.bias is not None:
        v = wrap32(v + np.asarray(ep.bias, np.int64).reshape(shape))

    def per_channel(m):
        m = np.asarray(m, np.int64)
        return m.reshape(shape) if m.ndim else m

    v = mul_shift(v, per_channel(ep.multiplier), ep.shift)
    r = ep.rescale
    if r is not None:
        v = mul_shift(np.clip(v, *r.y_clip), per_channel(r.y_multiplier), r.y_shift)
        v = wrap32(v + mul_shift(residual, per_channel(r.skip_multiplier), r.skip_shift))
        return np.clip(rounding_shift(v, r.frac), *ep.clip).astype(np.int8)
    if residual is not None:
        v = wrap32(v + residual.astype(np.int64))
    return np.clip(v, *ep.clip).astype(np.int8)


def conv2d_oracle(
    x: np.ndarray, w: np.ndarray, spec, ep: Epilogue | None = None, residual: np.ndarray | None = None
) -> np.ndarray:
    """conv2d of a layer ``spec`` (anything with a ``window``) followed by :func:`epilogue`."""
    return epilogue(conv2d(x, w, spec.window), ep, residual)


def dense_oracle(
    x: np.ndarray, w: np.ndarray, ep: Epilogue | None = None, residual: np.ndarray | None = None
) -> np.ndarray:
    """dense followed by :func:`epilogue` over the output-feature axis."""
    return epilogue(dense(x, w), ep, residual, channel_axis=1)


# ---------------------------------------------------------------------------------------------------------
# Elementwise steps


def round_half_up_div(total: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """floor(total / count + 1/2) on integers."""
    return (2 * total.astype(np.int64) + count) // (2 * np.asarray(count, np.int64))


def cast(x: np.ndarray, dtype: str) -> np.ndarray:
    """Saturating cast; float to int rounds half to even; to bool is ``x != 0``."""
    if is_float(dtype) or dtype == "bool" or x.dtype == np.bool_:
        return (x != 0) if dtype == "bool" else x.astype(dtype)
    src = np.rint(x.astype(np.float64)) if x.dtype.kind == "f" else x.astype(np.int64)
    return np.clip(src, *INT_RANGE[dtype]).astype(dtype)


def convert(x: np.ndarray, dtype: str) -> np.ndarray:
    """C's conversion (ONNX Cast): float to integer truncates toward zero (saturating, NaN to 0), integers
    keep their low bits (wrap); to bool is ``x != 0``."""
    if dtype == "bool":
        return x != 0
    if x.dtype.kind != "f" or is_float(dtype):
        return x.astype(dtype)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(x), 0, np.clip(np.trunc(x.astype(np.float64)), *INT_RANGE[dtype])).astype(dtype)


class NumpyMath(Math[np.ndarray]):
    """The numpy backend of :class:`~vdla.graph.ewmath.Math`: every elementwise operator's numpy semantics
    is its expression evaluated here, on arrays of the operator's dtypes (numpy's int32 wrap-around, float32
    IEEE arithmetic, :mod:`vdla.isa.arith` for the fixed-point primitives)."""

    def f32(self, v):
        return np.asarray(v, np.float32)

    def i32(self, v):
        return np.asarray(v, np.int32)

    def like(self, value, x):
        return x.dtype.type(value)

    def cast(self, v, dtype):
        return cast(v, dtype)

    def convert(self, v, dtype):
        return convert(v, dtype)

    def bitcast(self, v, dtype):
        return np.ascontiguousarray(v).view(dtype)

    def narrow(self, v, dtype):
        return v.astype(dtype)

    def add(self, a, b):
        return np.add(a, b)

    def sub(self, a, b):
        return np.subtract(a, b)

    def mul(self, a, b):
        return np.multiply(a, b)

    def div(self, a, b):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.divide(a, b)

    def maximum(self, a, b):
        return np.maximum(a, b)

    def minimum(self, a, b):
        return np.minimum(a, b)

    def neg(self, a):
        return np.negative(a)

    def abs(self, a):
        return np.abs(a)

    def fma(self, a, b, c):
        """The float64 product of two float32 values is exact: one rounding of the sum to float64, then
        to float32."""
        return (np.asarray(a, np.float64) * b + c).astype(np.float32)

    def fmod(self, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.fmod(a, b)

    def less(self, a, b):
        return np.less(a, b)

    def equal(self, a, b):
        return np.equal(a, b)

    def select(self, cond, a, b):
        return np.where(cond, a, b)

    def bit_and(self, a, b):
        return np.bitwise_and(a, b)

    def bit_or(self, a, b):
        return np.bitwise_or(a, b)

    def bit_xor(self, a, b):
        return np.bitwise_xor(a, b)

    def bit_not(self, a):
        return np.invert(a)

    def shift_left(self, a, s):
        return np.left_shift(a, s)

    def shift_right(self, a, s):
        return np.right_shift(a, s)

    def exp(self, x):
        with np.errstate(over="ignore"):
            return np.exp(x)

    def log(self, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)

    def tanh(self, x):
        return np.tanh(x)

    def sqrt(self, x):
        with np.errstate(invalid="ignore"):
            return np.sqrt(x)

    def rint(self, x):
        return np.rint(x)

    def function(self, name, x):
        return _ufunc(_FUNCTIONS[name], x)

    def pow(self, x, y):
        """numpy's float32 power; an integer exponent in float64 (exact), rounded to float32 once."""
        y = np.asarray(y)
        return _ufunc(np.power, x, y if y.dtype.kind == "f" else y.astype(np.float64)).astype(np.float32)

    def mul_shift(self, x, multiplier, shift):
        return mul_shift(x, np.asarray(multiplier, np.int64), shift).astype(np.int32)

    def rounding_shift(self, x, shift):
        return wrap32(rounding_shift(x, np.clip(np.asarray(shift, np.int64), 0, MAX_SHIFT))).astype(np.int32)

    def requantize(self, x, multiplier, shift, lo, hi):
        return requantize(x, multiplier, np.clip(np.asarray(shift, np.int64), 0, MUL_MAX_SHIFT), lo, hi)


_FUNCTIONS = {"floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
              "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
              "acosh": np.arccosh, "atanh": np.arctanh}  # fmt: skip


def _ufunc(fn, *args: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return fn(*args)


NUMPY = NumpyMath()


def ew_step(step: EwStep, v: np.ndarray, dtype: str, ops: list, out: str) -> np.ndarray:
    """One elementwise step on ``v`` (of dtype ``dtype``) with resolved operand values ``ops``: its
    operator's expression (:class:`vdla.graph.ew.EwDef`) on numpy; the result has dtype ``out``
    (:func:`vdla.graph.ew.step_result_dtype`)."""
    return EW[step.op].expr(NUMPY, v, tuple(ops), StepTypes(step, dtype, out))


FLOAT_KEY_MASK = 0x7FFFFFFF


def float_keys(x: np.ndarray) -> np.ndarray:
    """float32 -> int32 keys ordered as the floats are (-0.0 just below +0.0, NaNs beyond the infinities):
    the bits, with a negative float's magnitude bits flipped. Its own inverse on the bits."""
    bits = np.ascontiguousarray(x, np.float32).view(np.int32)
    return bits ^ ((bits >> 31) & FLOAT_KEY_MASK)


def key_floats(keys: np.ndarray) -> np.ndarray:
    """The float32 values of :func:`float_keys` keys."""
    keys = np.asarray(keys).astype(np.int32)
    return (keys ^ ((keys >> 31) & FLOAT_KEY_MASK)).view(np.float32)


def quantize_thresholds(step: EwStep, scale: float, zero_point: int) -> np.ndarray | None:
    """The quantize step float32 -> int8 as 257 int32 key thresholds ``t``: for every non-NaN ``x``,
    ``quantize(x) = -129 + #{i : float_keys(x) >= t[i]}`` (``t[0]`` the least key, ``t[256]`` the greatest).
    Each threshold is the least key quantizing to ``i - 128`` or more, found by bisection on this oracle, so
    the tables are exact by construction. None where the step is not monotone from -128 at -inf to 127 at
    +inf (a scale that is not positive and finite)."""
    if not (np.isfinite(scale) and scale > 0):
        return None

    def q(keys: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return ew_step(step, key_floats(keys), "float32", [scale, zero_point], "int8").astype(np.int64)

    ninf, pinf = float_keys(np.array([-np.inf, np.inf], np.float32)).tolist()
    if q(np.array([ninf, pinf])).tolist() != [-128, 127]:
        return None
    want = np.arange(-127, 128)
    lo, hi = np.full(want.shape, ninf, np.int64), np.full(want.shape, pinf, np.int64)  # q(lo) < want <= q(hi)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        up = q(mid) >= want
        hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
    info = np.iinfo(np.int32)
    return np.concatenate([[info.min], hi, [info.max]]).astype(np.int32)


def chain(steps, types, arrays: list[np.ndarray], out_shape: tuple[int, ...], out_dtype: str) -> np.ndarray:
    """Apply resolved elementwise ``steps`` with numpy broadcasting; ``arrays[0]`` is the primary input and
    ``types`` the types of ``arrays``."""
    v, dtype = arrays[0], types[0].dtype
    for step in steps:
        ops = [arrays[o.index] if isinstance(o, Arg) else o.value for o in step.operands]
        out = step_result_dtype(step, dtype, tuple(types))
        v, dtype = ew_step(step, v, dtype, ops, out), out
    return np.broadcast_to(v, out_shape).astype(out_dtype, order="C")  # a copy (0-d stays 0-d)


# ---------------------------------------------------------------------------------------------------------
# Pooling and softmax


def pool2d(x: np.ndarray, window: Window, kind: str, count_include_pad: bool = False, p: int = 2) -> np.ndarray:
    """Max, average or Lp pooling of NCHW ``x``; int8 averages round half up, padding excluded unless asked
    (the average's divisor); Lp is ``(sum |x|^p)^(1/p)`` over the window's input elements, in float64."""
    fl = is_float(x.dtype.name)
    if kind == "max":
        fill = -np.inf if fl else INT_RANGE[x.dtype.name][0]
        return windows(x, window, fill).max(axis=(4, 5)).astype(x.dtype)
    if kind == "lp":
        total = windows(np.abs(x.astype(np.float64)) ** p, window, 0).sum(axis=(4, 5))
        return (total ** (1.0 / p)).astype(np.float32)
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


def global_sum_pool(x: np.ndarray) -> np.ndarray:
    """Sum over H and W of int8 ``x`` as int32, keeping (N, C, 1, 1)."""
    return x.astype(np.int64).sum(axis=(2, 3), keepdims=True).astype(np.int32)


def softmax(x: np.ndarray, axis: int = -1, kind: str = "softmax") -> np.ndarray:
    """Softmax of float ``x`` along ``axis``, computed in float64; ``log_softmax`` its logarithm
    (``x - max - log(sum(exp(x - max)))``), ``hardmax`` the one-hot of the first maximum (the first NaN, as
    numpy's argmax)."""
    if kind == "hardmax":
        first = np.expand_dims(np.argmax(x, axis=axis), axis)
        return (np.arange(x.shape[axis]).reshape([-1] + [1] * (x.ndim - 1 - axis % x.ndim)) == first).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x.astype(np.float64) - x.max(axis=axis, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=axis, keepdims=True)
        if kind == "log_softmax":
            with np.errstate(divide="ignore"):
                return (shifted - np.log(total)).astype(np.float32)
        return (e / total).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# Resize


def resize_coordinates(
    n_in: int, n_out: int, scale: float, coordinate_mode: str, roi: tuple[float, float] = (0.0, 1.0)
) -> np.ndarray:
    """Input coordinate (float64) of every output index along one axis, ONNX Resize's
    ``coordinate_transformation_mode``; ``scale`` is the axis's factor, and ``scale * n_in`` the resized
    length before flooring (what ONNX's align_corners, pytorch_half_pixel and half_pixel_symmetric use);
    ``roi`` the (start, end) of the region tf_crop_and_resize reads, as fractions of the axis."""
    x = np.arange(n_out, dtype=np.float64)
    length = float(scale) * n_in
    if coordinate_mode == "align_corners":
        return np.zeros(n_out) if length == 1 else x * (n_in - 1) / (length - 1)
    if coordinate_mode == "asymmetric":
        return x / scale
    if coordinate_mode == "pytorch_half_pixel":
        return np.full(n_out, -0.5) if length == 1 else (x + 0.5) / scale - 0.5
    if coordinate_mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if coordinate_mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / length)
        return offset + (x + 0.5) / scale - 0.5
    if coordinate_mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if coordinate_mode == "tf_crop_and_resize":
        start, end = (float(r) for r in roi)
        if length == 1:
            return np.full(n_out, (end - start) * (n_in - 1) / 2 + start * (n_in - 1))
        return x * (end - start) * (n_in - 1) / (length - 1) + start * (n_in - 1)
    raise UnsupportedError("resize", f"coordinate transformation {coordinate_mode!r} unknown")


_ROUND_UP = {  # nearest mode -> whether a fractional coordinate with this fraction goes to the next index
    "round_prefer_floor": lambda f: f > 0.5,
    "round_prefer_ceil": lambda f: f >= 0.5,
    "floor": lambda f: np.zeros_like(f, bool),
    "ceil": lambda f: f > 0,
}


def cubic_weights(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a`` at distances ``d`` (zero from 2 on)."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


@dataclass(frozen=True)
class ResizeFilter:
    """How one axis is resized: ``mode`` (nearest, linear, cubic), the coordinate transformation, the
    nearest rounding, Keys' ``cubic_coeff_a``, ``exclude_outside`` (taps outside the input get no weight,
    the others are renormalised), ``antialias`` (a linear or cubic filter widened by 1/scale when
    downsampling) and ``roi`` (tf_crop_and_resize's region)."""

    mode: str
    coordinate_mode: str
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    roi: tuple[float, float] = (0.0, 1.0)


def resize_taps(n_in: int, n_out: int, scale: float, f: ResizeFilter) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The taps of one axis: output index ``o`` is ``sum_k w[o, k] * input[i[o, k]]`` (``i`` and ``w`` of shape
    (n_out, taps), indices clamped to the axis as ONNX's edge padding does; weights float64), or the
    extrapolation value where ``inside[o]`` is false (tf_crop_and_resize reading outside the input). Nearest
    has one tap of weight 1, linear two, cubic four, antialiased downsampling ``2 ceil(support / scale)``. An
    axis of unchanged size with a scale of 1 is left alone whatever the coordinate transformation (as ONNX's
    reference and onnxruntime do; tf_half_pixel_for_nn would shift it by half a pixel)."""
    if n_out == n_in and math.isclose(scale, 1.0) and f.coordinate_mode != "tf_crop_and_resize":
        return np.arange(n_in)[:, None], np.ones((n_in, 1)), np.ones(n_in, bool)
    xo = resize_coordinates(n_in, n_out, scale, f.coordinate_mode, f.roi)
    inside = (xo >= 0) & (xo <= n_in - 1) if f.coordinate_mode == "tf_crop_and_resize" else np.ones(n_out, bool)
    fl = np.floor(xo)
    frac = xo - fl
    base = fl.astype(np.int64)
    if f.mode == "nearest":
        i0 = np.clip(base + _ROUND_UP[f.nearest_mode](frac), 0, n_in - 1)
        return i0[:, None], np.ones((n_out, 1)), inside
    support = 1 if f.mode == "linear" else 2
    s = min(float(scale), 1.0) if f.antialias else 1.0
    reach = math.ceil(support / s)
    offsets = np.arange(1 - reach, reach + 1)
    d = (offsets[None, :] - frac[:, None]) * s
    w = np.clip(1 - np.abs(d), 0, 1) if f.mode == "linear" else cubic_weights(d, f.cubic_coeff_a)
    if f.antialias:
        w = w / w.sum(axis=1, keepdims=True)
    idx = base[:, None] + offsets[None, :]
    if f.exclude_outside:
        w = np.where((idx >= 0) & (idx < n_in), w, 0.0)
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(idx, 0, n_in - 1), w, inside


def resize(x: np.ndarray, filters, scales, sizes, extrapolation_value: float = 0.0) -> np.ndarray:
    """ONNX Resize of ``x`` to shape ``sizes`` with one :class:`ResizeFilter` per axis, one axis at a time
    (separable, as the ONNX reference); linear and cubic interpolate in float64 and round to float32 once."""
    nearest = filters[0].mode == "nearest"
    v = x if nearest else x.astype(np.float64)
    outside = np.zeros((1,) * x.ndim, bool)
    for axis, (n_in, n_out, scale, f) in enumerate(zip(x.shape, sizes, scales, filters, strict=True)):
        idx, w, inside = resize_taps(n_in, int(n_out), float(scale), f)
        shape = [1] * x.ndim
        shape[axis] = -1
        outside = outside | ~inside.reshape(shape)
        if nearest:
            v = np.take(v, idx[:, 0], axis)
            continue
        v = sum(np.take(v, idx[:, k], axis) * w[:, k].reshape(shape) for k in range(idx.shape[1]))
    out = np.array(v.astype(x.dtype), order="C")
    out[np.broadcast_to(outside, out.shape)] = extrapolation_value
    return out


# ---------------------------------------------------------------------------------------------------------
# Indexing


def take(x: np.ndarray, index, value: float | int = 0) -> np.ndarray:
    """Per-axis gather: output index ``o`` along axis ``i`` reads input index ``index[i][o]`` (``None``: the
    whole axis), ``-1`` reading ``value``."""
    v = x
    fill = np.zeros((1,) * x.ndim, bool)
    for axis, t in enumerate(index):
        if t is None:
            continue
        t = np.asarray(t, np.int64)
        v = np.take(v, np.maximum(t, 0), axis=axis)
        shape = [1] * x.ndim
        shape[axis] = -1
        fill = fill | (t < 0).reshape(shape)
    out = np.array(v, dtype=x.dtype, order="C")
    out[np.broadcast_to(fill, out.shape)] = value
    return out


def gather(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``out.flat[k] = x.flat[index.flat[k]]``, shaped like ``index``; offsets outside ``[0, x.size)`` (only
    computed ones can be) are clamped into it."""
    return np.ascontiguousarray(x.reshape(-1)[np.clip(index.astype(np.int64), 0, x.size - 1)])


def table(x: np.ndarray, entries: np.ndarray) -> np.ndarray:
    """A function of int8 ``x`` as its table: ``entries[b]`` for each element whose two's-complement byte is
    ``b`` (int8 entries: the accelerator's activation table, EPI ``lut``; float32 ones on the CPU)."""
    return np.ascontiguousarray(entries.reshape(-1)[np.asarray(x, np.int8).view(np.uint8)])


def one_hot(indices: np.ndarray, values: np.ndarray, depth: int, axis: int) -> np.ndarray:
    """``values[1]`` where the index (float ones truncated toward zero, as ONNX casts them to int64; negative
    ones counted from ``depth``) equals the position along the new axis ``axis``, else ``values[0]``; NaN and
    indices outside [-depth, depth) are all off."""
    if indices.dtype.kind == "f":
        far = float(1 << 62)
        idx = np.nan_to_num(np.trunc(indices.astype(np.float64)), nan=-far, posinf=far, neginf=-far)
        idx = np.clip(idx, -far, far).astype(np.int64)
    else:
        idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    positions = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(idx, axis) == positions
    return np.ascontiguousarray(np.where(hot, values[1], values[0]).astype(values.dtype))


_SCATTER_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scatter(x: np.ndarray, index: np.ndarray, updates: np.ndarray, reduction: str = "none") -> np.ndarray:
    """``x`` with every update applied in order at its flat offset: replaced (the last of repeated offsets
    wins) or combined by the reduction (integer sums and products wrap to int32); offsets outside ``[0,
    x.size)`` (only computed ones can be) are clamped into it."""
    out = np.array(x, order="C").reshape(-1)
    flat, upd = np.clip(index.reshape(-1).astype(np.int64), 0, x.size - 1), updates.reshape(-1)
    if reduction == "none":
        last = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
        out[flat[last]] = upd[last]
    else:
        with np.errstate(over="ignore"):
            _SCATTER_UFUNC[reduction].at(out, flat, upd)
    return out.reshape(x.shape)


# ---------------------------------------------------------------------------------------------------------
# Grid sampling


def grid_borders(size: int, align_corners: bool) -> tuple[float, float]:
    """The extent of an axis of ``size`` pixels in GridSample's unnormalised coordinates: pixel centres
    (align_corners) or pixel edges."""
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def grid_reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Coordinates outside [lo, hi] reflected by the near border until inside (GridSample's reflection)."""
    span = hi - lo
    below, above = v < lo, v > hi
    dx = np.where(below, lo - v, np.where(above, v - hi, 0.0))
    n = np.floor(dx / span) if span > 0 else np.zeros_like(dx)
    r = dx - n * span
    even = n % 2 == 0
    return np.where(below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), v))


def grid_axis_taps(
    g: np.ndarray, size: int, mode: str, padding_mode: str, align_corners: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The taps of one spatial axis for normalised grid coordinates ``g`` (float32, any shape): input indices
    (clamped into the axis), weights (float64) and whether each tap reads the input (zeros padding reads 0
    outside), each of shape ``g.shape + (taps,)``. ONNX GridSample's arithmetic: the unnormalised
    coordinate in float32, nearest rounds half to even, a coordinate outside the axis's extent is clamped
    (border) or reflected (reflection), then each tap index is fetched under the padding mode."""
    one, two, s = np.float32(1), np.float32(2), np.float32(size)
    u = ((g + one) / two * (s - one) if align_corners else ((g + one) * s - one) / two).astype(np.float64)
    if mode == "nearest":
        u = np.rint(u)
    lo, hi = grid_borders(size, align_corners)
    if padding_mode == "border":
        u = np.where((u < lo) | (u > hi), np.clip(u, 0, size - 1), u)
    elif padding_mode == "reflection":
        u = grid_reflect(u, lo, hi)
    if mode == "nearest":
        idx, w = np.trunc(u).astype(np.int64)[..., None], np.ones(u.shape + (1,))
    else:
        base = np.floor(u)
        t = (u - base)[..., None]
        offsets = np.arange(2) if mode == "linear" else np.arange(-1, 3)
        idx = base.astype(np.int64)[..., None] + offsets
        w = 1 - np.abs(offsets - t) if mode == "linear" else cubic_weights(offsets - t, -0.75)
    if padding_mode == "zeros":
        reads = (idx >= 0) & (idx < size)
    else:
        reads = np.ones(idx.shape, bool)
        if padding_mode == "reflection":
            idx = np.trunc(grid_reflect(idx.astype(np.float64), lo, hi)).astype(np.int64)
    return np.clip(idx, 0, size - 1), w, reads


def grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: bool) -> np.ndarray:
    """ONNX GridSample of ``x`` (N, C, spatial...) at ``grid`` (N, out spatial..., r), whose last axis holds
    normalised coordinates innermost axis first (x, y[, z]); interpolated in float64, rounded once."""
    r = x.ndim - 2
    taps = [grid_axis_taps(grid[..., r - 1 - a], x.shape[2 + a], mode, padding_mode, align_corners) for a in range(r)]
    lead = np.arange(x.shape[0]).reshape((-1,) + (1,) * r)
    xf = np.moveaxis(x.astype(np.float64), 1, -1)  # (N, spatial..., C)
    total = np.zeros(grid.shape[:-1] + (x.shape[1],))
    for pick in itertools.product(*(range(t[0].shape[-1]) for t in taps)):
        weight = np.ones(grid.shape[:-1])
        index = [lead]
        for (idx, w, reads), k in zip(taps, pick, strict=True):
            weight = weight * np.where(reads[..., k], w[..., k], 0.0)
            index.append(idx[..., k])
        values = xf[tuple(index)]
        total += np.where(weight[..., None] != 0, values * weight[..., None], 0.0)
    return np.ascontiguousarray(np.moveaxis(total, -1, 1)).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# Reductions on any axes, normalizations, scans and selections


def _extreme_index(x: np.ndarray, axis: int, kind: str, last: bool) -> np.ndarray:
    """The index of the maximum (``argmax``) or minimum along ``axis``, keeping it: the first one (NaN
    counting as the extreme, as numpy's argmax), or with ``last`` the last one."""
    pick = np.argmax if kind == "argmax" else np.argmin
    if not last:
        return np.expand_dims(pick(x, axis=axis), axis).astype(np.int32)
    flipped = pick(np.flip(x, axis), axis=axis)
    return np.expand_dims(x.shape[axis] - 1 - flipped, axis).astype(np.int32)


def reduce(x: np.ndarray, kind: str, axes: tuple[int, ...], select_last_index: bool = False) -> np.ndarray:
    """``x`` reduced over ``axes`` (kept as size 1) by ``kind`` (:data:`vdla.graph.ops.REDUCE_KINDS`).

    Floats accumulate in float64 and round to float32 once: ``l1`` sums ``|x|``, ``l2`` is the square root
    of the sum of squares, ``log_sum_exp`` is ``m + log(sum(exp(x - m)))`` with ``m`` the maximum where it
    is finite (0 elsewhere); max and min propagate NaN. int32 sums and products wrap like the int32
    arithmetic of ONNX; argmax/argmin give int32 indices (:func:`_extreme_index`).
    """
    if kind in ("argmax", "argmin"):
        return _extreme_index(x, axes[0], kind, select_last_index) if axes else np.zeros(x.shape, np.int32)
    if kind in ("max", "min"):
        return (np.max if kind == "max" else np.min)(x, axis=axes, keepdims=True)
    if x.dtype.kind in "iu":  # sum, prod: exact in int64 modulo 2^64, then wrapped to int32
        with np.errstate(over="ignore"):
            v = (np.sum if kind == "sum" else np.prod)(x.astype(np.int64), axis=axes, keepdims=True)
        return wrap32(v).astype(np.int32)
    v = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if kind == "log_sum_exp":
            m = v.max(axis=axes, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            return (np.log(np.exp(v - m).sum(axis=axes, keepdims=True)) + m).astype(np.float32)
        if kind == "prod":
            return v.prod(axis=axes, keepdims=True).astype(np.float32)
        term = {"l1": np.abs(v), "l2": v * v, "sum_square": v * v}.get(kind, v)
        total = term.sum(axis=axes, keepdims=True)
        post = {
            "mean": lambda t: t / math.prod(x.shape[a] for a in axes),
            "l2": np.sqrt,
            "log_sum": np.log,
        }.get(kind, lambda t: t)
        return post(total).astype(np.float32)


def normalize(
    x: np.ndarray, axis: int, epsilon: float, center: bool = True, scale: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """Layer normalization of float ``x`` over the axes from ``axis`` on, in float64, rounded once:
    ``(x - mean) / sqrt(var + epsilon) * scale + bias`` (``var`` the mean of squared deviations); without
    ``center`` (RMS normalization) ``x / sqrt(mean(x^2) + epsilon) * scale + bias``. ``scale`` and ``bias``
    broadcast to ``x`` as numpy's."""
    v = x.astype(np.float64)
    axes = tuple(range(axis, x.ndim))
    with np.errstate(all="ignore"):
        if center:
            v = v - v.mean(axis=axes, keepdims=True)
        y = v / np.sqrt((v * v).mean(axis=axes, keepdims=True) + np.float64(np.float32(epsilon)))
        if scale is not None:
            y = y * scale.astype(np.float64)
        if bias is not None:
            y = y + bias.astype(np.float64)
    return y.astype(np.float32)


def layer_norm_int(q: np.ndarray, p: IntLayerNorm) -> np.ndarray:
    """LayerNorm over the last axis of int8 ``q`` (rows of ``p.n`` values) -> int8, step by step as the
    accelerator computes it (:mod:`vdla.graph.layernorm`): the exact int32 statistics, ``k`` and ``1/sqrt`` by
    Newton in fixed point, the normalized value, gamma and beta per channel, the requantization."""
    if q.shape[-1] != p.n:
        raise UnsupportedError("layer_norm", f"rows of {q.shape[-1]} values, the parameters' {p.n}")
    d, v = layer_norm_stats(q, p.prescale, p.epsilon)
    k = rsqrt_exponent(v)
    z = mul_shift(d, rsqrt_scaled(rsqrt_fixed(v, k), k, p.prescale), ln.Z_SHIFT)
    w = mul_shift(z, np.asarray(p.multipliers, np.int64), p.gamma_shift) + np.asarray(p.biases, np.int64)
    return requantize(w, 1, ln.OUT_FRAC)


def layer_norm_stats(q: np.ndarray, prescale: int, epsilon: int) -> tuple[np.ndarray, np.ndarray]:
    """``(d, V)`` of int8 rows ``q`` (last axis, ``n`` values): ``d = n q - S1`` and ``V = max(SHR(n S2 - S1^2,
    -2 prescale) + epsilon, 1)``, ``S1``/``S2`` the row sums of ``q`` and of its squares (keepdims)."""
    n = q.shape[-1]
    x = np.asarray(q, np.int64)
    s1 = x.sum(axis=-1, keepdims=True)
    s2 = (x * x).sum(axis=-1, keepdims=True)
    d = mul_shift(x, n) - s1
    v = shift_lanes(mul_shift(s2, n) - mul_shift(s1, s1), -2 * prescale) + epsilon
    return wrap32(d), np.maximum(wrap32(v), 1)


def rsqrt_exponent(v: np.ndarray) -> np.ndarray:
    """``k = floor(log2(v) / 2)`` of positive int32 ``v`` by the ALU's binary search: for each step ``b`` of
    :data:`~vdla.graph.layernorm.K_STEPS`, ``c2 = 2b min(v >> 2b, 1)``, ``v >>= c2`` (a lane's own amount),
    ``k += c2 >> 1``."""
    w, k = np.asarray(v, np.int64), np.zeros(np.shape(v), np.int64)
    for b in ln.K_STEPS:
        c2 = mul_shift(np.minimum(shift_lanes(w, 2 * b), 1), 2 * b)
        w = shift_lanes(w, c2)
        k = k + shift_lanes(c2, 1)
    return k


def rsqrt_scaled(y: np.ndarray, k: np.ndarray, prescale: int) -> np.ndarray:
    """``RSHR(y, max(k, j) - j)`` (``j`` = ``prescale``) as the ALU computes it: ``MUL(y, 2^(30 - max(k, j))) >> (30 -
    j)``, ``y`` times ``2^(j - k)`` rounded once, half up; ``k < j`` only where the row is constant (``d = 0``)."""
    return mul_shift(y, np.left_shift(1, 30 - np.maximum(k, prescale)), 30 - prescale)


def rsqrt_fixed(v: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``y ~ 2^FRAC / sqrt(m)``, ``m = v 4^-k`` in [1, 4) held negated as ``-SHR(v, 2k - FRAC)``: the seed, then
    Newton's ``y <- MUL(y, 3 + MUL(-m, MUL(y, y) >> F) >> F) >> (F + 1)`` (``F`` = FRAC, each product rounded
    once, half up)."""
    f = ln.FRAC
    neg_m = mul_shift(shift_lanes(v, 2 * k - f), -1)
    y = np.full(np.shape(v), ln.SEED[0] << (f - ln.SEED[1]), np.int64)
    for _ in range(ln.ITERATIONS):
        t = (3 << f) + mul_shift(neg_m, mul_shift(y, y, f), f)
        y = mul_shift(y, t, f + 1)
    return y


def attention_int(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, p: IntAttention, keep: np.ndarray | None = None
) -> np.ndarray:
    """One attention head on int8 ``q``, ``k``, ``v`` (T, d) -> int8 (T, d), step by step as the accelerator
    computes it (:mod:`vdla.graph.attention`): the int8 scores with the mask's bias (``keep``: per key, default
    every key), their exp as two int8 planes, ``U`` and the row sums ``Z`` from the planes, ``1 / Z`` by Newton
    in fixed point, the output requantized."""
    t, d = q.shape
    if q.shape != k.shape or q.shape != v.shape or d != p.d:
        raise UnsupportedError("attention", f"q, k, v of shapes {q.shape}, {k.shape}, {v.shape} for a head of {p.d}")
    hi, lo = attention_exp(q, k, p, keep)
    (u_hi, z_hi), (u_lo, z_lo) = attention_sums(hi, v), attention_sums(lo, v)
    u, z = wrap32(shift_lanes(u_hi, -8) + u_lo), wrap32(shift_lanes(z_hi, -8) + z_lo)
    return attention_divide(u, z, p.out_multiplier, p.out_shift, p.out_exponent)


def attention_exp(
    q: np.ndarray, k: np.ndarray, p: IntAttention, keep: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The exp planes ``(hi, lo)`` (T, T) int8 of the scores ``clamp(MUL(q k^T + bias, M_s) >> shift_s)``."""
    acc = wrap32(dense(q, k) + att.key_bias(p, keep, k.shape[0])[None, :])
    s = requantize(acc, p.score_multiplier, p.score_shift).astype(np.int64)
    return att.exp_planes(np.asarray(p.exp, np.int64)[s + 128])


def attention_sums(plane: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(plane V, the plane's row sums)`` in int32 (the GEMMs against ``V^T`` and the ones block)."""
    x = plane.astype(np.int64)
    return wrap32(x @ v.astype(np.int64)), wrap32(x.sum(axis=-1, keepdims=True))


def attention_divide(
    u: np.ndarray, z: np.ndarray, multiplier: int, shift: int, exponent: int, iterations: int = att.ITERATIONS
) -> np.ndarray:
    """int8 ``U / Z`` times ``a``, ``a 2^-H = multiplier 2^-shift`` (``H`` = ``exponent``): ``Z = m 2^k`` (``Z`` at
    least 1), ``r ~ 1/m`` by ``iterations`` Newton steps, then ``q = MUL(r, multiplier) >> shift`` (``r a
    2^-H``), ``clamp(MUL(MUL(U, q) >> FRAC, 2^(30 - k)) >> (30 - H))``."""
    z = np.maximum(z, 1)
    k = reciprocal_exponent(z)
    r = reciprocal_fixed(shift_lanes(z, k - att.FRAC), iterations)
    q = mul_shift(r, multiplier, shift)
    power = shift_lanes(1 << att.P_BITS, k)
    return requantize(mul_shift(u, q, att.FRAC), power, att.P_BITS - exponent)


def attention_qdq(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, p: QdqAttention, keep: np.ndarray | None = None
) -> np.ndarray:
    """One attention head of a QDQ model on int8 ``q``, ``k``, ``v`` (T, d) -> int8 (T, d), step by step as the
    accelerator computes it (:class:`~vdla.graph.attention.QdqAttention`): the int8 scores, the softmax input by
    table (``keep``: per key, the kept table where true, else the masked one), ``d = x - max`` (or ``x - 127``),
    the 22-bit exp,
    the row sums, the int8 probabilities by the division, ``P V`` requantized."""
    t, d = q.shape
    if q.shape != k.shape or q.shape != v.shape or d != p.d:
        raise UnsupportedError("attention", f"q, k, v of shapes {q.shape}, {k.shape}, {v.shape} for a head of {p.d}")
    probs = attention_qdq_probs(requantize(dense(q, k), p.score_multiplier, p.score_shift), p, keep)
    return requantize(dense(probs, v.T), p.out_multiplier, p.out_shift)


def attention_qdq_probs(s: np.ndarray, p: QdqAttention, keep: np.ndarray | None = None) -> np.ndarray:
    """The int8 probabilities (T, T) of int8 scores ``s`` (:func:`attention_qdq`)."""
    s = np.asarray(s, np.int64) + 128
    x = np.asarray(p.kept, np.int64)[s]
    if keep is not None and p.masked is not None:
        kept = np.asarray(keep).astype(bool).ravel()[None, :]
        x = np.where(kept, x, np.asarray(p.masked, np.int64)[s])
    e = np.asarray(p.exp, np.int64)[x - (127 if p.fixed else x.max(axis=-1, keepdims=True)) + 255]
    z = e.sum(axis=-1, keepdims=True)
    return attention_divide(e, z, p.prob_multiplier, p.prob_shift, p.prob_exponent, att.QDQ_ITERATIONS)


def reciprocal_exponent(z: np.ndarray) -> np.ndarray:
    """``k = floor(log2(z))`` of positive int32 ``z`` by the ALU's binary search: for each step ``b`` of
    :data:`~vdla.graph.attention.K_STEPS`, ``c = b min(z >> b, 1)``, ``z >>= c`` (a lane's own amount),
    ``k += c``."""
    w, k = np.asarray(z, np.int64), np.zeros(np.shape(z), np.int64)
    for b in att.K_STEPS:
        c = mul_shift(np.minimum(shift_lanes(w, b), 1), b)
        w = shift_lanes(w, c)
        k = k + c
    return k


def reciprocal_fixed(m: np.ndarray, iterations: int = att.ITERATIONS) -> np.ndarray:
    """``r ~ 2^(2 FRAC) / m`` of ``m`` in [2^FRAC, 2^(FRAC + 1)): the linear seed ``C1 - MUL(m, C2) >> F``, then
    Newton's ``r <- MUL(r, 2^(F + 1) + MUL(-m, r) >> F) >> F`` (``F`` = FRAC, each product rounded once)."""
    f = att.FRAC
    c1, c2 = (round(c * (1 << f)) for c in att.SEED)
    neg_m = mul_shift(m, -1)
    r = c1 - mul_shift(m, c2, f)
    for _ in range(iterations):
        r = mul_shift(r, (2 << f) + mul_shift(neg_m, r, f), f)
    return r


def cumsum(
    x: np.ndarray, axis: int, exclusive: bool = False, reverse: bool = False, product: bool = False
) -> np.ndarray:
    """Cumulative sum (``product``: product) along ``axis`` in ``x``'s dtype (float32 accumulated in order, one
    rounding per step as numpy's; int32 wrapping); ``exclusive`` leaves each element out of its own sum
    (product), which starts at 0 (1), ``reverse`` accumulates from the end."""
    v = np.flip(x, axis) if reverse else x
    scan = np.cumprod if product else np.cumsum
    if x.dtype.kind in "iu":
        with np.errstate(over="ignore"):  # int64 wraps modulo 2^64, so modulo 2^32 too
            c = wrap32(scan(v.astype(np.int64), axis=axis)).astype(x.dtype)
    else:
        with np.errstate(all="ignore"):
            c = scan(v, axis=axis, dtype=x.dtype)
    if exclusive:
        c = np.roll(c, 1, axis)
        c[(slice(None),) * axis + (0,)] = 1 if product else 0
    return np.ascontiguousarray(np.flip(c, axis) if reverse else c)


def topk(x: np.ndarray, k: int, axis: int, largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (or smallest) entries along ``axis`` in order, ties broken by the lower index, NaN
    counting as larger than any number (numpy's sort order; ONNX's reference), and their int32 indices."""
    index = np.indices(x.shape)[axis]
    order = np.lexsort((-index if largest else index, x), axis=axis)
    if largest:
        order = np.flip(order, axis)
    order = order[(slice(None),) * axis + (slice(0, k),)]
    return np.ascontiguousarray(np.take_along_axis(x, order, axis)), np.ascontiguousarray(order.astype(np.int32))


def trilu(x: np.ndarray, upper: bool = True, k: int = 0) -> np.ndarray:
    """``x`` with the elements outside the upper (``j - i >= k``) or lower (``j - i <= k``) triangle of its
    last two axes set to zero."""
    i = np.arange(x.shape[-2]).reshape(-1, 1)
    j = np.arange(x.shape[-1]).reshape(1, -1)
    keep = (j - i >= k) if upper else (j - i <= k)
    return np.where(keep, x, np.zeros((), x.dtype))


def nll_loss(
    x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None, ignore_index: int | None = None
) -> np.ndarray:
    """Per element ``-x[n, t, d...] * weight[t]`` (weight 1 when absent) in float32, ``t = target[n, d...]``;
    0 where ``t == ignore_index``, NaN where ``t`` lies outside ``[0, C)``."""
    c = x.shape[1]
    t = target.astype(np.int64)
    inside = (t >= 0) & (t < c)
    picked = np.take_along_axis(x, np.expand_dims(np.clip(t, 0, c - 1), 1), axis=1)[:, 0]
    w = np.ones(c, np.float32) if weight is None else weight.astype(np.float32)
    loss = (-picked * w[np.clip(t, 0, c - 1)]).astype(np.float32)
    loss = np.where(inside, loss, np.float32(np.nan))
    if ignore_index is not None:
        loss = np.where(t == int(ignore_index), np.float32(0), loss)
    return loss.astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# Recurrent cells (ONNX RNN, GRU, LSTM): the recurrence over input gates projected beforehand

RNN_GATES = {"rnn": 1, "gru": 3, "lstm": 4}  # gate blocks of H per cell: RNN (h), GRU (z, r, h), LSTM (i, o, f, c)
RNN_ACTIVATIONS = {"rnn": 1, "gru": 2, "lstm": 3}  # activation slots per direction: f; f, g; f, g, h
RNN_STATES = {"rnn": 1, "gru": 1, "lstm": 2}  # state rows after the sequence: Y_h; Y_h, Y_c


def activate(steps: tuple[EwStep, ...], x: np.ndarray) -> np.ndarray:
    """A recurrent cell's activation (its clip first, when it has one): float32 elementwise ``steps``."""
    return chain(steps, (TensorType(x.shape, "float32"),), [x], x.shape, "float32")


def _cell(cell: str, x: np.ndarray, h: np.ndarray, c: np.ndarray, r: np.ndarray, rb: np.ndarray,
          p: np.ndarray | None, acts: tuple[tuple[EwStep, ...], ...], lbr: bool, coupled: bool):  # fmt: skip
    """One step of ``cell`` for every batch item: (new h, new c) from the projected gates ``x`` (B, G*H)."""
    n = h.shape[1]
    if cell == "rnn":
        return activate(acts[0], x + h @ r.T + rb), c
    if cell == "gru":
        zr = x[:, : 2 * n] + h @ r[: 2 * n].T + rb[: 2 * n]
        z, rg = activate(acts[0], zr[:, :n]), activate(acts[0], zr[:, n:])
        rh, rbh = r[2 * n :], rb[2 * n :]
        inner = rg * (h @ rh.T + rbh) if lbr else (rg * h) @ rh.T + rbh
        hh = activate(acts[1], x[:, 2 * n :] + inner)
        return (np.float32(1) - z) * hh + z * h, c
    a = x + h @ r.T + rb
    ai, ao, af, ac = (a[:, k * n : (k + 1) * n] for k in range(4))
    pi, po, pf = (np.zeros(n, np.float32),) * 3 if p is None else (p[k * n : (k + 1) * n] for k in range(3))
    i = activate(acts[0], ai + pi * c)
    f = np.float32(1) - i if coupled else activate(acts[0], af + pf * c)
    c = f * c + i * activate(acts[1], ac)
    o = activate(acts[0], ao + po * c)
    return o * activate(acts[2], c), c


def recurrence(
    cell: str,
    gates: np.ndarray,
    r: np.ndarray,
    rb: np.ndarray,
    lens: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray | None = None,
    p: np.ndarray | None = None,
    *,
    reverse: tuple[bool, ...],
    activations: tuple[tuple[EwStep, ...], ...],
    linear_before_reset: bool = False,
    input_forget: bool = False,
) -> np.ndarray:
    """ONNX's RNN, GRU or LSTM over input gates already projected (``gates`` (T, B, D, G*H) = X W^T + Wb):
    the states ``(T + S, D, B, H)``: rows 0..T-1 are Y (each direction's hidden state at each step, zero at
    and after a batch item's length), row T is Y_h (the last state: after step len-1 forward, after step 0 in
    reverse) and, for the LSTM, row T+1 is Y_c (both zero for a length 0, as onnxruntime gives them). Lengths
    are clamped to [0, T]; ``activations`` holds the cell's slots for each direction in turn, each a float32
    chain (a clip first where the model clips).
    Computed in float32, every batch item at once."""
    t_n, b_n, d_n, _ = gates.shape
    n = r.shape[-1]
    k = RNN_ACTIVATIONS[cell]
    out = np.zeros((t_n + RNN_STATES[cell], d_n, b_n, n), np.float32)
    lens = np.clip(lens.astype(np.int64), 0, t_n)
    rows = np.arange(b_n)
    for d in range(d_n):
        h = h0[d].astype(np.float32)
        c = np.zeros_like(h) if c0 is None else c0[d].astype(np.float32)
        pd = None if p is None else p[d]
        for s in range(t_n):
            active = s < lens
            t = np.where(active, lens - 1 - s if reverse[d] else s, 0)
            acts = activations[d * k : (d + 1) * k]
            h2, c2 = _cell(cell, gates[t, rows, d], h, c, r[d], rb[d], pd, acts, linear_before_reset, input_forget)
            h, c = np.where(active[:, None], h2, h), np.where(active[:, None], c2, c)
            out[t[active], d, rows[active]] = h[active]
        ran = (lens > 0)[:, None]
        out[t_n, d] = np.where(ran, h, np.float32(0))
        if cell == "lstm":
            out[t_n + 1, d] = np.where(ran, c, np.float32(0))
    return out
