"""Pooling converters: MaxPool, AveragePool, LpPool (1-D, 2-D and N-D windows with strides, dilations,
explicit or automatic padding, ceil mode) and the global pools (no ``onnx`` import here).

vdla's pooling operators (``max_pool2d``, ``avg_pool2d``, ``lp_pool2d``) pool the last two axes of an NCHW
tensor. Invariants of the mapping:

* a 1-D pool is a 2-D pool of the (N, C, 1, L) view; an N-D pool (N >= 3) pools the last two spatial axes
  of the (N, C * D..., H, W) view, then each remaining spatial axis ``i`` with a (k_i, 1) window over the
  (1, outer, D_i, inner) view. This is exact because every one of these pools is separable over a box:
  the maximum of maxima, the mean of means (the valid taps of a window form a box, so its count is the
  product of the per-axis counts), ``(sum (sum |x|^p))^(1/p)`` for Lp;
* ceil mode is extra padding at the end of an axis (ONNX's output size: the last window starts inside
  the input or its leading pad), which max pooling fills with -inf and average and Lp pooling leave out.
  An average that counts the padding (count_include_pad=1) with such an extension pads the input with
  zeros first, as ONNX's reference does, so that only the explicit pads are counted;
* padding inside vdla is (top, bottom, left, right): each 2-D pool's ONNX-ordered pads go through
  :func:`vdla.graph.window.pads_from_onnx`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, size, unsupported
from vdla.frontend.onnx_ops.linear import window_geometry
from vdla.frontend.onnx_ops.registry import FLOAT, attr, compact, converter, ints
from vdla.graph.window import pads_from_onnx

KINDS = {"MaxPool": "max", "AveragePool": "avg", "LpPool": "lp"}
WINDOW_ATTRS = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides")


@dataclass(frozen=True)
class AxisWindow:
    """The window along one spatial axis: kernel, stride, dilation, padding before and after (ceil mode
    included) and how much of the padding after is ceil mode's extension (never counted)."""

    kernel: int
    stride: int
    dilation: int
    before: int
    after: int
    extension: int = 0


def ceil_extension(n: int, w: AxisWindow) -> int:
    """Padding ceil mode adds after an axis of size ``n``: ONNX's output size is
    ``ceil((n + pads - (k - 1) d - 1) / s) + 1``, less the last window if it would start past the input and
    its leading pad."""
    span = n + w.before + w.after - (w.kernel - 1) * w.dilation - 1
    out = -(-span // w.stride) + 1
    if (out - 1) * w.stride >= n + w.before:
        out -= 1
    return max(0, (out - 1) * w.stride - span)


def pool_axes(node: OnnxNode, xs: Sequence[int]) -> list[AxisWindow]:
    """The per-axis windows of a pooling node over input shape ``xs`` (N, C, spatial...), checking each
    attribute."""
    spatial = len(xs) - 2
    kernel = ints(node, "kernel_shape")
    if kernel is None or len(kernel) != spatial or any(k < 1 for k in kernel):
        raise unsupported(node, f"kernel_shape must give {spatial} positive sizes", "kernel_shape")
    strides, dilations, pads = window_geometry(node, xs[2:], kernel)
    axes = [
        AxisWindow(k, s, d, pads[i], pads[spatial + i])
        for i, (k, s, d) in enumerate(zip(kernel, strides, dilations, strict=True))
    ]
    if not int(attr(node, "ceil_mode", 0)):
        return axes
    extended = []
    for n, w in zip(xs[2:], axes, strict=True):
        e = ceil_extension(n, w)
        extended.append(replace(w, after=w.after + e, extension=e))
    return extended


def _pool2d(b: Builder, node: OnnxNode, x: str, kind: str, rows: AxisWindow, cols: AxisWindow,
            extra: dict[str, Any], out: str | None, uint8: bool) -> str:  # fmt: skip
    """One vdla 2-D pooling of the last two axes of the 4-D value ``x``."""
    attrs = {
        "kernel": (rows.kernel, cols.kernel),
        "stride": compact((rows.stride, cols.stride)),
        "dilation": compact((rows.dilation, cols.dilation)),
        "padding": compact(pads_from_onnx((rows.before, cols.before, rows.after, cols.after))),
        **extra,
    }
    return b.emit(node, f"{kind}_pool2d", (x,), attrs, out=out, suffix="pool", uint8=uint8)


def _pool_nd(b: Builder, node: OnnxNode, x: str, kind: str, axes: list[AxisWindow], extra: dict[str, Any],
             out: str, uint8: bool) -> None:  # fmt: skip
    """Pool the spatial axes of ``x`` (N, C, spatial...) by ``axes`` as 2-D pools of views (module doc)."""
    xs = b.type_of(x).shape
    unit = AxisWindow(1, 1, 1, 0, 0)
    if len(axes) == 1:
        y = _pool2d(b, node, b.reshape(node, x, (xs[0], xs[1], 1, xs[2])), kind, unit, axes[0], extra, None, uint8)
        b.reshape(node, y, (xs[0], xs[1], b.type_of(y).shape[3]), out=out, uint8=uint8)
        return
    if len(axes) == 2:
        _pool2d(b, node, x, kind, axes[0], axes[1], extra, out, uint8)
        return
    view = (xs[0], size(xs[1:-2]), xs[-2], xs[-1])
    y = _pool2d(b, node, b.reshape(node, x, view), kind, axes[-2], axes[-1], extra, None, uint8)
    oh, ow = b.type_of(y).shape[2:]
    shape = [*xs[:-2], oh * ow]
    for axis in range(len(xs) - 3, 1, -1):  # the other spatial axes, innermost first
        view = (1, size(shape[:axis]), shape[axis], size(shape[axis + 1 :]))
        y = _pool2d(b, node, b.reshape(node, y, view), kind, axes[axis - 2], unit, extra, None, uint8)
        shape[axis] = b.type_of(y).shape[2]
    b.reshape(node, y, (*shape[:-1], oh, ow), out=out, uint8=uint8)


def _include_pad_extensions(b: Builder, node: OnnxNode, x: str, axes: list[AxisWindow]) -> tuple[str, list[AxisWindow]]:
    """For an average that counts the explicit padding while ceil mode extends it: the input padded with
    zeros (explicit pads only), and windows whose remaining padding is the uncounted extension."""
    pairs = ((0, 0), (0, 0), *((w.before, w.after - w.extension) for w in axes))
    xp = b.emit(node, "pad", (x,), {"pads": pairs, "value": 0.0}, suffix="pad")
    return xp, [replace(w, before=0, after=w.extension) for w in axes]


@converter("MaxPool", attrs=(*WINDOW_ATTRS, "storage_order"))
@converter("AveragePool", attrs=(*WINDOW_ATTRS, "count_include_pad"))
@converter("LpPool", attrs=(*WINDOW_ATTRS, "p"))
def _pool(b: Builder, node: OnnxNode) -> None:
    """Max pooling of float32, int8 and uint8 (storage_order only orders the refused Indices output);
    average and Lp pooling of float32."""
    kind = KINDS[node.op_type]
    dt = b.require_dtype(node, 0, ("float32", "int8", "uint8") if kind == "max" else FLOAT)
    if len(node.outputs) > 1 and node.outputs[1] in b.used:
        raise unsupported(node, "the Indices output of MaxPool is not supported (vdla has no int64 tensors)")
    xs = b.shape(node, 0)
    if len(xs) < 3:
        raise unsupported(node, f"needs an (N, C, spatial...) input, got shape {xs}")
    axes = pool_axes(node, xs)
    x = b.tensor(node, 0)
    extra: dict[str, Any] = {}
    if kind == "lp":
        p = attr(node, "p", 2)
        if not isinstance(p, int) or p < 1:
            raise unsupported(node, "p must be a positive integer", "p")
        extra["p"] = p
    if kind == "avg" and int(attr(node, "count_include_pad", 0)):
        if any(w.extension for w in axes):
            x, axes = _include_pad_extensions(b, node, x, axes)
        else:
            extra["count_include_pad"] = True
    _pool_nd(b, node, x, kind, axes, extra, node.outputs[0], dt == "uint8")


def global_pool(b: Builder, node: OnnxNode, x: str, out: str, kind: str, p: int = 2) -> str:
    """Max, mean or Lp norm over every axis after the first two of ``x``, keeping them as size-1 axes: a
    vdla pool of the (N, C, 1, spatial) view."""
    xs = b.type_of(x).shape
    if len(xs) < 3:
        raise unsupported(node, f"needs an (N, C, ...) input with spatial axes, got shape {xs}")
    four = xs if len(xs) == 4 else (xs[0], xs[1], 1, size(xs[2:]))
    x4 = b.reshape(node, x, four)
    final = (*xs[:2], *([1] * (len(xs) - 2)))
    direct = final == (*four[:2], 1, 1)
    uint8 = b.values[node.inputs[0]].uint8 if node.inputs else False
    if kind == "avg":
        y = b.emit(node, "global_avg_pool", (x4,), out=out if direct else None, suffix="pool")
    else:
        attrs = {"kernel": tuple(four[2:]), "stride": 1, "padding": 0, **({"p": p} if kind == "lp" else {})}
        y = b.emit(node, f"{kind}_pool2d", (x4,), attrs, out=out if direct else None, suffix="pool", uint8=uint8)
    return y if direct else b.reshape(node, y, final, out=out, uint8=uint8)


@converter("GlobalAveragePool", "GlobalMaxPool")
@converter("GlobalLpPool", attrs=("p",))
def _global(b: Builder, node: OnnxNode) -> None:
    kind = {"GlobalAveragePool": "avg", "GlobalMaxPool": "max", "GlobalLpPool": "lp"}[node.op_type]
    b.require_dtype(node, 0, ("float32", "int8", "uint8") if kind == "max" else FLOAT)
    p = attr(node, "p", 2)
    if not isinstance(p, int) or p < 1:
        raise unsupported(node, "p must be a positive integer", "p")
    global_pool(b, node, b.tensor(node, 0), node.outputs[0], kind, p)


@converter("MaxUnpool", attrs=("kernel_shape", "pads", "strides"))
def _max_unpool(b: Builder, node: OnnxNode) -> None:
    """Zeros of the unpooled shape (each spatial axis ``(in - 1) * stride + kernel - pads``) with ``X``'s values
    written at the flat indices ``I`` (MaxPool's Indices, computed at run time or constant): one ``scatter``,
    whose kernel clamps an index outside the output. A larger ``output_shape`` pads that result with zeros at
    the end of each axis, as ONNX's reference does."""
    b.require_dtype(node, 0, FLOAT)
    b.require_dtype(node, 1, ("int32", "int64"))
    xs = b.shape(node, 0)
    nd = len(xs) - 2
    kernel = [int(v) for v in attr(node, "kernel_shape", [])]
    strides = [int(v) for v in attr(node, "strides", [1] * nd)]
    pads = [int(v) for v in attr(node, "pads", [0] * 2 * nd)]
    if nd < 1 or len(kernel) != nd or len(strides) != nd or len(pads) != 2 * nd or b.shape(node, 1) != xs:
        raise unsupported(node, f"X {xs}, I {b.shape(node, 1)}: kernel_shape, strides and pads must describe the "
                          "spatial axes, I have X's shape")  # fmt: skip
    spatial = [(xs[2 + d] - 1) * strides[d] + kernel[d] - pads[d] - pads[nd + d] for d in range(nd)]
    inferred = [*xs[:2], *spatial]
    shape = [int(v) for v in np.asarray(b.const(node, 2, "output_shape")).ravel()] if b.has(node, 2) else inferred
    if min(inferred) < 1 or len(shape) != len(xs) or any(o < i for o, i in zip(shape, inferred, strict=True)):
        raise unsupported(node, f"output shape {shape} is smaller than the unpooled {inferred}")
    out = node.outputs[0]
    zeros = b.add_param(f"{out}:zeros", np.zeros(size(inferred), np.float32))
    flat = lambda v: b.reshape(node, v, (size(xs),))  # noqa: E731
    y = b.emit(node, "scatter", (zeros, flat(b.tensor(node, 1)), flat(b.tensor(node, 0))), suffix="unpooled")
    if shape == inferred:
        b.reshape(node, y, tuple(shape), out=out)
        return
    y = b.reshape(node, y, tuple(inferred))
    grow = tuple((0, o - i) for o, i in zip(shape, inferred, strict=True))
    b.emit(node, "pad", (y,), {"pads": grow, "value": 0.0}, out=out)
