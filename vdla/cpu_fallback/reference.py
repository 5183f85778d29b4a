"""Numpy references for every kernel, written from the operator semantics (not from the generated code).

``reference(spec, *arrays)`` computes what ``get_kernel(spec)(*arrays)`` must return.
"""

from __future__ import annotations

from functools import singledispatch

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from vdla.cpu_fallback.ir import (
    INT_RANGE,
    Arg,
    ChainSpec,
    ConcatSpec,
    Conv2dSpec,
    DenseSpec,
    EwStep,
    GlobalAvgPoolSpec,
    PackSpec,
    PadSpec,
    Pool2dSpec,
    SoftmaxSpec,
    Spec,
    TransposeSpec,
    UnpackSpec,
    is_float,
    step_result_dtype,
)


def round_half_up_div(total: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """floor(total / count + 1/2) on integers."""
    return (2 * total.astype(np.int64) + count) // (2 * np.asarray(count, np.int64))


def requantize(x: np.ndarray, multiplier, shift, lo: int = -128, hi: int = 127) -> np.ndarray:
    """saturate(round_half_up((x * m) >> s)) to [lo, hi] as int8, computed in int64."""
    s = np.clip(np.asarray(shift, np.int64), 0, 62)
    v = x.astype(np.int64) * np.asarray(multiplier, np.int64)
    return np.clip((v + ((1 << s) >> 1)) >> s, lo, hi).astype(np.int8)


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


def _step(step: EwStep, v: np.ndarray, dtype: str, ops: list, out: str) -> np.ndarray:
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
    if op == "requantize":
        return requantize(v, *ops, int(step.attr("lo")), int(step.attr("hi")))
    return cast(v, out)


def chain(spec: ChainSpec, arrays: list[np.ndarray]) -> np.ndarray:
    """Apply the chain's steps with numpy broadcasting; ``arrays[0]`` is the primary input."""
    v, dtype = arrays[0], spec.inputs[0].dtype
    for step in spec.steps:
        ops = [arrays[o.index] if isinstance(o, Arg) else o.value for o in step.operands]
        out = step_result_dtype(step, dtype, spec.inputs)
        v, dtype = _step(step, v, dtype, ops, out), out
    return np.ascontiguousarray(np.broadcast_to(v, spec.out.shape)).astype(spec.out.dtype)


@singledispatch
def reference(spec: Spec, *arrays: np.ndarray) -> np.ndarray:
    """Expected output of the kernel for ``spec`` on ``arrays``."""
    raise TypeError(f"no reference for {type(spec).__name__}")


@reference.register
def _(spec: ChainSpec, *arrays: np.ndarray) -> np.ndarray:
    return chain(spec, list(arrays))


def _windows(x: np.ndarray, spec_window, fill) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) view of the padded input under every window position."""
    (kh, kw), (sh, sw), (dh, dw) = spec_window.kernel, spec_window.stride, spec_window.dilation
    pt, pl, pb, pr = spec_window.pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))[..., ::dh, ::dw]
    return win[:, :, ::sh, ::sw]


@reference.register
def _(spec: Pool2dSpec, x: np.ndarray) -> np.ndarray:
    oh, ow = spec.out.shape[2:]
    fl = is_float(x.dtype.name)
    if spec.kind == "max":
        fill = -np.inf if fl else INT_RANGE[x.dtype.name][0]
        return _windows(x, spec.window, fill).max(axis=(4, 5))[:, :, :oh, :ow].astype(x.dtype)
    total = _windows(x.astype(np.float64 if fl else np.int64), spec.window, 0).sum(axis=(4, 5))[:, :, :oh, :ow]
    if spec.count_include_pad:
        count = np.full((oh, ow), spec.window.kernel[0] * spec.window.kernel[1])
    else:
        count = _windows(np.ones((1, 1, *x.shape[2:]), np.int64), spec.window, 0).sum(axis=(4, 5))[0, 0, :oh, :ow]
    return (total / count).astype(np.float32) if fl else round_half_up_div(total, count).astype(np.int8)


@reference.register
def _(spec: GlobalAvgPoolSpec, x: np.ndarray) -> np.ndarray:
    count = x.shape[2] * x.shape[3]
    if is_float(x.dtype.name):
        return x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(np.float32)
    return round_half_up_div(x.astype(np.int64).sum(axis=(2, 3), keepdims=True), count).astype(np.int8)


@reference.register
def _(spec: SoftmaxSpec, x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=spec.axis, keepdims=True))
    return (e / e.sum(axis=spec.axis, keepdims=True)).astype(np.float32)


@reference.register
def _(spec: TransposeSpec, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(spec.perm))


@reference.register
def _(spec: PackSpec, x: np.ndarray) -> np.ndarray:
    n, cb, h, w, _, b = spec.out.shape
    padded = np.zeros((n, cb * b, h, w), x.dtype)
    padded[:, : x.shape[1]] = x
    return np.ascontiguousarray(padded.reshape(n, cb, b, h, w).transpose(0, 1, 3, 4, 2)[:, :, :, :, None, :])


@reference.register
def _(spec: UnpackSpec, x: np.ndarray) -> np.ndarray:
    n, cb, h, w, _, b = x.shape
    return np.ascontiguousarray(
        x[:, :, :, :, 0, :].transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)[:, : spec.channels]
    )


@reference.register
def _(spec: ConcatSpec, *arrays: np.ndarray) -> np.ndarray:
    return np.concatenate(arrays, axis=spec.axis)


@reference.register
def _(spec: PadSpec, x: np.ndarray) -> np.ndarray:
    return np.pad(x, spec.pads, constant_values=spec.value)


def _accumulate(acc: np.ndarray, fl: bool) -> np.ndarray:
    """float64 -> float32, or int64 -> int32 wrapping like an int32 accumulator."""
    return acc.astype(np.float32) if fl else acc.astype(np.int64).astype(np.int32)


def _with_epilogue(spec: DenseSpec | Conv2dSpec, acc: np.ndarray, operands: tuple[np.ndarray, ...]) -> np.ndarray:
    return chain(spec.epilogue, [acc, *operands]) if spec.epilogue else acc


@reference.register
def _(spec: DenseSpec, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    fl = is_float(x.dtype.name)
    wide = np.float64 if fl else np.int64
    acc = _accumulate(x.astype(wide) @ w.astype(wide).T, fl)
    return _with_epilogue(spec, acc, operands)


@reference.register
def _(spec: Conv2dSpec, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    fl = is_float(x.dtype.name)
    wide = np.float64 if fl else np.int64
    n, c = x.shape[:2]
    oc, icg, kh, kw = w.shape
    g = spec.groups
    oh, ow = spec.acc.shape[2:]
    win = _windows(x.astype(wide), spec.window, 0)[:, :, :oh, :ow]
    win = win.reshape(n, g, icg, oh, ow, kh, kw)
    acc = np.einsum("ngcyxhw,gochw->ngoyx", win, w.astype(wide).reshape(g, oc // g, icg, kh, kw))
    return _with_epilogue(spec, _accumulate(acc.reshape(n, oc, oh, ow), fl), operands)
