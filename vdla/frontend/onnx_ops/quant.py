"""Quantization converters: QuantizeLinear, DequantizeLinear, QLinearConv and QLinearMatMul (no ``onnx`` import
here).

vdla quantizes to int8: a uint8 tensor is held as int8 ``value - 128``, so a uint8 zero point is shifted by
-128 with it. A scale and a zero point become scalar attributes of the ``quantize``/``dequantize`` node when
they are constant per tensor, else tensor inputs (per-axis constants as parameters shaped to broadcast along
the axis); scales must be positive and finite. Dequantization gives float32, from int8, uint8, or int32 with a
zero point of 0; blocked quantization is refused.

QLinearConv and QLinearMatMul become their QDQ form: the operands dequantized, the float convolution
(:func:`vdla.frontend.onnx_ops.linear.emit_conv`) or product (a dense layer when the right operand is a 2-D
constant, :func:`vdla.frontend.onnx_ops.linear.emit_dense`), the result quantized.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, broadcast_to_axis, size, unsupported
from vdla.frontend.onnx_ops.linear import emit_conv, emit_dense
from vdla.frontend.onnx_ops.registry import FLOAT, attr, converter


def _qoperands(
    b: Builder, node: OnnxNode, x: str, scale_i: int, zp_i: int, axis: int | None, q_dtype: str
) -> tuple[list[str], dict[str, Any]]:
    """Tensor inputs and attributes of a quantize/dequantize node: the scale and zero point as scalar
    attributes when constant per tensor, else as tensors shaped to broadcast along ``axis``; a uint8 zero
    point shifted by -128 (the int8 encoding of uint8)."""
    xs = b.type_of(x).shape
    b.require_dtype(node, scale_i, FLOAT)
    s_shape = b.shape(node, scale_i)
    rank = len(xs)
    if size(s_shape) == 1 and len(s_shape) <= 1:
        per_axis = False
    elif len(s_shape) == 1 and axis is not None and s_shape[0] == xs[axis]:
        per_axis = True
    else:
        raise unsupported(node, f"scale of shape {s_shape} for input {xs}: one scale, or one per slice along axis")
    attrs: dict[str, Any] = {"axis": axis} if per_axis else {}
    inputs: list[str] = []
    shift = 128 if q_dtype == "uint8" else 0
    for name, i in (("scale", scale_i), ("zero_point", zp_i)):
        v = b.value(node, i) if b.has(node, i) else None
        if v is None:  # absent zero point: 0 of the quantized type
            attrs[name] = -shift
            continue
        if name == "zero_point":
            b.require_dtype(node, i, (q_dtype,))
            if size(v.shape) != (xs[axis] if per_axis else 1):
                raise unsupported(node, f"zero point shape {v.shape} does not match the scale's {s_shape}")
        if v.const is not None:
            c = np.asarray(v.const).ravel()
            if name == "scale":
                if not np.all(np.isfinite(c)) or np.any(c <= 0):
                    raise unsupported(node, f"scales must be positive and finite, got {c[:8].tolist()}")
                c = c.astype(np.float32)
            else:
                c = c.astype(np.int64) - shift
            if c.size == 1 or (name == "zero_point" and np.all(c == c[0])):
                attrs[name] = float(c[0]) if name == "scale" else int(c[0])
                continue
            arr = broadcast_to_axis(c.astype(np.float32 if name == "scale" else np.int8), rank, axis)
            inputs.append(b.add_param(f"{node.input(i)}:axis{axis}", arr))
            continue
        t = b.tensor(node, i)  # a computed uint8 zero point is already held as value - 128
        if per_axis:
            t = b.reshape(node, t, broadcast_to_axis(np.zeros(xs[axis]), rank, axis).shape)
        elif rank < len(b.type_of(t).shape):
            t = b.reshape(node, t, ())
        inputs.append(t)
    return inputs, attrs


def _qaxis_of(b: Builder, node: OnnxNode, rank: int, axis_attr: int | None = None) -> int | None:
    """The normalized quantization axis, None when out of range (it only matters for per-axis scales)."""
    axis = int(attr(node, "axis", 1) if axis_attr is None else axis_attr)
    return axis % rank if -rank <= axis < rank else None


def _check_block(node: OnnxNode) -> None:
    if int(attr(node, "block_size", 0)):
        raise unsupported(node, "blocked quantization is not supported", "block_size")


_ONNX_INT = {"int8", "uint8"}


def _quantize(
    b: Builder, node: OnnxNode, x: str, scale_i: int, zp_i: int, out: str | None, axis_attr: int | None = None
) -> str:
    _check_block(node)
    if b.has(node, zp_i):
        q_dtype = b.dtype(node, zp_i)
    else:
        q_dtype = str(attr(node, "output_dtype", "uint8") or "uint8")
    if q_dtype not in _ONNX_INT:
        where = "output_dtype" if "output_dtype" in node.attrs else None
        raise unsupported(node, f"quantization to {q_dtype}: vdla quantizes to int8 (and uint8 as int8)", where)
    axis = _qaxis_of(b, node, len(b.type_of(x).shape), axis_attr)
    inputs, attrs = _qoperands(b, node, x, scale_i, zp_i, axis, q_dtype)
    return b.emit(node, "quantize", (x, *inputs), attrs, out=out, suffix="quantize", uint8=q_dtype == "uint8")


def _dequantize(
    b: Builder, node: OnnxNode, x_i: int, scale_i: int, zp_i: int, out: str | None, axis_attr: int | None = None
) -> str:
    _check_block(node)
    if str(attr(node, "output_dtype", "float32") or "float32") != "float32":
        raise unsupported(node, "vdla dequantizes to float32", "output_dtype")
    dt = b.require_dtype(node, x_i, ("int8", "uint8", "int32"))
    x = b.tensor(node, x_i)
    if dt == "int32" and b.has(node, zp_i):
        zp = b.value(node, zp_i).const
        if zp is None or np.any(zp != 0):
            raise unsupported(node, "an int32 input needs a zero point of 0")
    axis = _qaxis_of(b, node, len(b.type_of(x).shape), axis_attr)
    inputs, attrs = _qoperands(b, node, x, scale_i, zp_i if dt != "int32" else 99, axis, dt)
    if dt == "int32":
        attrs["zero_point"] = 0
    return b.emit(node, "dequantize", (x, *inputs), attrs, out=out, suffix="dequantize")


@converter("QuantizeLinear", attrs=("axis", "saturate", "block_size", "output_dtype", "precision"))
def _quantize_linear(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    _quantize(b, node, b.tensor(node, 0), 1, 2, node.outputs[0])


@converter("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"))
def _dequantize_linear(b: Builder, node: OnnxNode) -> None:
    _dequantize(b, node, 0, 1, 2, node.outputs[0])


@converter("QLinearConv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _qlinear_conv(b: Builder, node: OnnxNode) -> None:
    # inputs: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B
    x = _dequantize(b, node, 0, 1, 2, None, axis_attr=1)
    w = _dequantize(b, node, 3, 4, 5, None, axis_attr=0)
    bias = None
    if b.has(node, 8):
        b.require_dtype(node, 8, ("int32",))
        sx = b.const(node, 1, "x_scale (with a bias)")
        sw = b.const(node, 4, "w_scale (with a bias)")
        scale = (np.asarray(sx, np.float32).ravel() * np.asarray(sw, np.float32).ravel()).astype(np.float32)
        bname = b.tensor(node, 8)
        sname = b.add_param(node.input(8) + ":scale", scale) if scale.size > 1 else None
        attrs = {"zero_point": 0, **({"axis": 0} if sname else {"scale": float(scale[0])})}
        bias = b.emit(node, "dequantize", (bname, *([sname] if sname else [])), attrs, suffix="bias")
    y = emit_conv(b, node, x, w, bias, None)
    _quantize(b, node, y, 6, 7, node.outputs[0], axis_attr=1)


@converter("QLinearMatMul")
def _qlinear_matmul(b: Builder, node: OnnxNode) -> None:
    # inputs: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp; b's scales are per column (axis 1)
    a = _dequantize(b, node, 0, 1, 2, None, axis_attr=-1)
    sa, sb = b.type_of(a).shape, b.shape(node, 3)
    if len(sb) < 2 or not sa:
        raise unsupported(
            node, f"QLinearMatMul needs a right operand of rank 2 or more and a non-scalar left, got {sa}, {sb}"
        )
    if (
        b.is_const(node, 3) and len(sb) == 2
    ):  # (K, N) constant -> a (N, K) weight with per-row scales, like a dense layer
        bq = b.const(node, 3, "b")
        shifted = b.param_array(node, 3, np.ascontiguousarray(bq.T))
        wq = b.add_param(node.input(3) + ":T", shifted)
        wt = b.temp(wq, uint8=b.is_uint8(node, 3))
        tnode = OnnxNode(node.name, node.op_type, (*node.inputs[:3], wt, *node.inputs[4:]), node.outputs, node.attrs)
        w = _dequantize(b, tnode, 3, 4, 5, None, axis_attr=0)
        tmp = node.outputs[0] + ":mm"
        emit_dense(b, node, a, w, sb[0], tmp)
        y = b.values[tmp].name
    else:
        bf = _dequantize(b, node, 3, 4, 5, None, axis_attr=len(sb) - 1)  # per-column scales: the last axis
        y = b.emit(node, "matmul", (a, bf), suffix="matmul")
    _quantize(b, node, y, 6, 7, node.outputs[0], axis_attr=-1)
