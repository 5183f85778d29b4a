"""Dynamic quantization converters: DynamicQuantizeLinear, MatMulInteger and ConvInteger (what onnxruntime's
``quantize_dynamic`` writes), exactly, from operators the registry already defines (no ``onnx`` import here).

* ``DynamicQuantizeLinear(x) -> (y, y_scale, y_zero_point)`` is ONNX's formula as a chain of float32 steps:
  ``lo = min(min(x), 0)``, ``hi = max(max(x), 0)``, ``scale = (hi - lo) / 255`` (1 when ``hi == lo``, as
  onnxruntime does), ``zp = round_half_even(clip(-lo / scale, 0, 255))``, then the ``quantize`` operator with
  the scale and zero point as tensor inputs. Every step is float32 IEEE arithmetic in the same order as the
  specification, so the three outputs are bit-exact; they run on the CPU (their scale is known only at run
  time).
* ``MatMulInteger`` and ``ConvInteger`` compute ``sum (a - za)(b - zb)`` in int32. vdla holds uint8 as int8
  ``v - 128`` and shifts zero points with it, so ``a - za`` is the same in either encoding, and the sum is
  expanded into int8 x int8 products the registry's ``dense``/``conv2d`` compute exactly (int32
  accumulators) and int32 corrections: ``P - zb * sum(a) - za * (sum(b) - n * zb)``, where ``sum(a)`` is the
  product with a weight of ones and ``sum(b) - n * zb`` a constant when ``b`` and ``zb`` are (for a
  convolution it depends on the output position: ``n`` counts the taps inside the input, padding taps add
  ``(za - za)(b - zb) = 0`` as ONNX and onnxruntime pad with the zero point).

Invariant: the int32 results equal ONNX's for any int32-representable sum. Zero points are per tensor for
the left operand / input, per tensor or per output column / channel for the weight; their dtype is their
operand's. Anything else is refused naming the node and the input. With ``--calib``, the model compiler
first turns the dequantized patterns back into float operators (:func:`vdla.frontend.dynamic.dequantize_dynamic`),
so that vdla's own static quantization places them on the accelerator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, size, unsupported
from vdla.frontend.onnx_ops.linear import emit_conv
from vdla.frontend.onnx_ops.registry import FLOAT, converter

_INT8 = ("int8", "uint8")


def _step(b: Builder, node: OnnxNode, op: str, inputs: tuple[str, ...], suffix: str, /, **attrs: Any) -> str:
    return b.emit(node, op, inputs, attrs, suffix=suffix)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(b: Builder, node: OnnxNode) -> None:
    """y = saturate(round(x / scale) + zp) in uint8 (held as int8 ``v - 128``), scale and zp from x's range."""
    b.require_dtype(node, 0, FLOAT)
    x = b.tensor(node, 0)
    axes = tuple(range(len(b.type_of(x).shape)))
    red = {"axes": axes, "keepdims": False}
    lo = _step(b, node, "reduce", (x,), "min", kind="min", **red)
    hi = _step(b, node, "reduce", (x,), "max", kind="max", **red)
    lo = _step(b, node, "min", (lo,), "lo", b=0.0)
    hi = _step(b, node, "max", (hi,), "hi", b=0.0)
    rng = _step(b, node, "sub", (hi, lo), "range")
    flat = _step(b, node, "equal", (rng,), "flat", b=0.0)
    s = _step(b, node, "div", (rng,), "s", b=255.0)
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    scale = b.emit(node, "where", (flat, s), {"a": 1.0}, out=outs[1] or None, suffix="scale")
    ratio = _step(b, node, "div", (lo, scale), "ratio")
    izp = _step(b, node, "neg", (ratio,), "izp")
    zpf = _step(b, node, "round", (_step(b, node, "clip", (izp,), "zpc", lo=0.0, hi=255.0),), "zpr")
    shifted = _step(b, node, "sub", (zpf,), "zps", b=128.0)
    zp = b.emit(node, "cast", (shifted,), {"dtype": "int8"}, out=outs[2] or None, suffix="zp", uint8=True)
    b.emit(node, "quantize", (x, scale, zp), out=outs[0], uint8=True)


def _zero_point(
    b: Builder, node: OnnxNode, i: int, of: int, channels: int | None = None, shape: tuple[int, ...] = ()
) -> int | str:
    """Zero point input ``i`` of operand ``of`` in vdla's int8 encoding: an int when one constant (absent: 0 of
    the operand's dtype), else an int32 value: a scalar, or ``channels`` values shaped ``shape``."""
    dt = b.dtype(node, of)
    shift = 128 if dt == "uint8" else 0
    if not b.has(node, i):
        return -shift
    zdt = b.dtype(node, i)
    if zdt != dt:
        raise unsupported(node, f"zero point input {i} {node.input(i)!r} is {zdt}, its operand {node.input(of)!r} {dt}")
    zs = b.shape(node, i)
    if b.is_const(node, i):
        c = np.asarray(b.const(node, i, "zero point"), np.int64).ravel() - shift
        if c.size == 1 or (c.size and np.all(c == c[0])):
            return int(c[0])
    if size(zs) == 1 and len(zs) <= 1:
        t = b.reshape(node, b.tensor(node, i), ())
    elif channels is not None and zs == (channels,):
        t = b.reshape(node, b.tensor(node, i), shape)
    else:
        per = f"one value, or {channels} (one per output column/channel)" if channels else "one value"
        raise unsupported(node, f"zero point input {i} {node.input(i)!r} has shape {zs}: vdla takes {per}")
    return _step(b, node, "cast", (t,), f"zp{i}", dtype="int32")


def _operands(b: Builder, node: OnnxNode) -> None:
    for i in (0, 1):
        b.require_dtype(node, i, _INT8)


def _scaled(b: Builder, node: OnnxNode, value: str, zp: int | str) -> str | None:
    """``zp * value`` in int32 (None when ``zp`` is the constant 0)."""
    if isinstance(zp, int):
        return None if zp == 0 else _step(b, node, "mul", (_as_int32(b, node, value),), "zpmul", b=zp)
    return _step(b, node, "mul", (_as_int32(b, node, value), zp), "zpmul")


def _subtract(b: Builder, node: OnnxNode, y: str, term: str | None, out: str | None = None) -> str:
    if term is None:
        return y if out is None else b.emit(node, "add", (y,), {"b": 0}, out=out)
    return b.emit(node, "sub", (y, term), out=out, suffix="corr")


def _as_int32(b: Builder, node: OnnxNode, x: str) -> str:
    return x if b.type_of(x).dtype == "int32" else _step(b, node, "cast", (x,), "i32", dtype="int32")


@converter("MatMulInteger")
def _matmul_integer(b: Builder, node: OnnxNode) -> None:
    """``(A - za) @ (B - zb)`` in int32 for A (..., M, K) and a 2-D B (K, N)."""
    _operands(b, node)
    sa, sb = b.shape(node, 0), b.shape(node, 1)
    if len(sa) < 2 or len(sb) != 2 or sa[-1] != sb[0]:
        raise unsupported(node, f"MatMulInteger takes A (..., M, K) and a 2-D B (K, N), got {sa} and {sb}")
    k, n = sb
    za = _zero_point(b, node, 2, 0, None)
    zb = _zero_point(b, node, 3, 1, n, (1, n))
    a2 = b.reshape(node, b.tensor(node, 0), (size(sa[:-1]), k))
    wt = _weight_t(b, node)
    p = _step(b, node, "dense", (a2, wt), "dense")
    ones = b.add_param(node.name + ":ones", np.ones((1, k), np.int8))
    y = _subtract(b, node, p, _scaled(b, node, _step(b, node, "dense", (a2, ones), "rowsum"), zb))
    y = _subtract(b, node, y, _scaled(b, node, _b_term(b, node, wt, ones, zb, k), za))
    b.reshape(node, _as_int32(b, node, y), (*sa[:-1], n), out=node.outputs[0])


def _weight_t(b: Builder, node: OnnxNode) -> str:
    """B transposed to the (N, K) weight of a dense layer: a parameter when constant."""
    if b.is_const(node, 1):
        bq = np.ascontiguousarray(b.const(node, 1, "B").T)
        return b.add_param(node.input(1) + ":T", b.param_array(node, 1, bq))
    return _step(b, node, "transpose", (b.tensor(node, 1),), "T", perm=(1, 0))


def _b_term(b: Builder, node: OnnxNode, wt: str, ones: str, zb: int | str, k: int) -> str:
    """``sum_k b[k, n] - K * zb[n]`` as an int32 (1, N) value: a constant when B and zb are."""
    if wt in b.params and isinstance(zb, int):
        col = b.params[wt].astype(np.int64).sum(axis=1) - k * zb
        return b.add_param(node.name + ":colsum", col.reshape(1, -1).astype(np.int32))
    col = _step(b, node, "dense", (ones, wt), "colsum")
    return col if isinstance(zb, int) and zb == 0 else _subtract(b, node, col, _k_times(b, node, zb, k))


def _k_times(b: Builder, node: OnnxNode, zb: int | str, k: int) -> str:
    """``K * zb`` as an int32 value broadcasting against a (1, N) value."""
    if isinstance(zb, str):
        return _step(b, node, "mul", (zb,), "kz", b=k)
    return b.add_param(node.name + ":kzb", np.full((), k * zb, np.int32))


@converter("ConvInteger", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv_integer(b: Builder, node: OnnxNode) -> None:
    """``conv(x - zx, w - zw)`` in int32, padding contributing 0 (the input padded with its zero point)."""
    _operands(b, node)
    xs, ws = b.shape(node, 0), b.shape(node, 1)
    if len(ws) not in (3, 4) or len(xs) != len(ws):
        raise unsupported(node, f"ConvInteger takes a 1-D or 2-D convolution, got x {xs} and w {ws}")
    zx = _zero_point(b, node, 2, 0, None)
    chan = (1, ws[0]) + (1,) * (len(xs) - 2)
    zw = _zero_point(b, node, 3, 1, ws[0], chan)
    x, w = b.tensor(node, 0), b.tensor(node, 1)
    p = emit_conv(b, node, x, w, None, None)
    group = int(node.attrs.get("group", 1))
    jshape = (1 if group == 1 else ws[0], *ws[1:])
    ones_w = b.add_param(node.name + ":ones_w", np.ones(jshape, np.int8))
    y = _subtract(b, node, p, _scaled(b, node, emit_conv(b, node, x, ones_w, None, None), zw))
    if zx != 0:
        y = _subtract(b, node, y, _scaled(b, node, _w_term(b, node, xs, w, ones_w, zw), zx))
    b.emit(node, "add", (_as_int32(b, node, y),), {"b": 0}, out=node.outputs[0])


def _w_term(b: Builder, node: OnnxNode, xs: tuple[int, ...], w: str, ones_w: str, zw: int | str) -> str:
    """``sum over the taps inside the input of (w - zw)``, per output channel and position (int32)."""
    ones_x = b.add_param(node.name + ":ones_x", np.ones((1, *xs[1:]), np.int8))
    t = emit_conv(b, node, ones_x, w, None, None)
    zterm = _scaled(b, node, emit_conv(b, node, ones_x, ones_w, None, None), zw)
    return _subtract(b, node, t, zterm)
