"""Numpy references for every kernel, written from the operator semantics (not from the generated code).

``reference(spec, *arrays)`` computes what ``get_kernel(spec)(*arrays)`` must return.
"""

from __future__ import annotations

from functools import singledispatch

import numpy as np

from vdla.cpu_fallback.specs import (
    ChainSpec,
    ConcatSpec,
    CpuConv2dSpec,
    CpuDenseSpec,
    GlobalAvgPoolSpec,
    PackSpec,
    PadSpec,
    Pool2dSpec,
    SoftmaxSpec,
    Spec,
    TransposeSpec,
    UnpackSpec,
)
from vdla.graph import layout, oracle
from vdla.graph.ew import Arg, EwStep, step_result_dtype
from vdla.graph.types import INT_RANGE, is_float
from vdla.isa.arith import MAX_SHIFT, requantize, rounding_shift, wrap32


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
    if op == "rshift":
        return wrap32(rounding_shift(v, np.clip(np.asarray(ops[0], np.int64), 0, MAX_SHIFT))).astype(np.int32)
    if op == "requantize":
        m, shift = ops
        return requantize(
            v, m, np.clip(np.asarray(shift, np.int64), 0, MAX_SHIFT), int(step.attr("lo")), int(step.attr("hi"))
        )
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


@reference.register
def _(spec: Pool2dSpec, x: np.ndarray) -> np.ndarray:
    oh, ow = spec.out.shape[2:]
    fl = is_float(x.dtype.name)
    if spec.kind == "max":
        fill = -np.inf if fl else INT_RANGE[x.dtype.name][0]
        return oracle.windows(x, spec.window, fill).max(axis=(4, 5))[:, :, :oh, :ow].astype(x.dtype)
    total = oracle.windows(x.astype(np.float64 if fl else np.int64), spec.window, 0).sum(axis=(4, 5))[:, :, :oh, :ow]
    if spec.count_include_pad:
        count = np.full((oh, ow), spec.window.kernel[0] * spec.window.kernel[1])
    else:
        count = oracle.windows(np.ones((1, 1, *x.shape[2:]), np.int64), spec.window, 0).sum(axis=(4, 5))[0, 0, :oh, :ow]
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
    return layout.pack_activation(x, spec.batch, spec.block)


@reference.register
def _(spec: UnpackSpec, x: np.ndarray) -> np.ndarray:
    return layout.unpack_activation(x, spec.images, spec.channels)


@reference.register
def _(spec: ConcatSpec, *arrays: np.ndarray) -> np.ndarray:
    return np.concatenate(arrays, axis=spec.axis)


@reference.register
def _(spec: PadSpec, x: np.ndarray) -> np.ndarray:
    return np.pad(x, spec.pads, constant_values=spec.value)


def _with_epilogue(spec: CpuDenseSpec | CpuConv2dSpec, acc: np.ndarray, operands: tuple[np.ndarray, ...]) -> np.ndarray:
    return chain(spec.epilogue, [acc, *operands]) if spec.epilogue else acc


@reference.register
def _(spec: CpuDenseSpec, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    return _with_epilogue(spec, oracle.dense(x, w), operands)


@reference.register
def _(spec: CpuConv2dSpec, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    return _with_epilogue(spec, oracle.conv2d(x, w, spec.window, spec.groups), operands)
