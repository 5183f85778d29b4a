"""Transposed convolution: ONNX ConvTranspose -> vdla ``conv_transpose`` (no ``onnx`` import here).

A 1-D ConvTranspose is lifted to a height-1 image, like Conv. The padding ONNX derives from ``auto_pad``
and ``output_shape`` is resolved here into vdla's (top, bottom, left, right) pads, where a negative pad
extends the output (the positions no input reaches then hold the bias):

* explicit ``pads`` are taken as they are; with ``output_shape`` too, the end pads make the output that size;
* without ``pads``, ``SAME_UPPER`` / ``SAME_LOWER`` split the total padding that makes the output
  ``output_shape`` (default: input x stride), the odd unit at the end for ``SAME_UPPER`` and at the
  beginning otherwise; ``NOTSET`` / ``VALID`` pad nothing at the beginning and let ``output_shape``, when
  given, set the end.

This is the ONNX reference implementation's reading of the attributes.
"""

from __future__ import annotations

from collections.abc import Sequence

from vdla.frontend.builder import Builder, OnnxNode, unsupported
from vdla.frontend.onnx_ops.registry import FLOAT, attr, compact, converter, ints
from vdla.graph.window import pads_from_onnx

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _axis_ints(node: OnnxNode, name: str, spatial: int, default: int, minimum: int) -> list[int]:
    v = ints(node, name, [default] * spatial)
    if len(v) != spatial or any(i < minimum for i in v):
        raise unsupported(node, f"{name} must be {spatial} integers >= {minimum}", name)
    return v


def _output_shape(node: OnnxNode, spatial: int) -> list[int] | None:
    v = ints(node, "output_shape")
    if v is None:
        return None
    v = v[2:] if len(v) == spatial + 2 else v
    if len(v) != spatial or any(i < 1 for i in v):
        raise unsupported(node, f"output_shape must give the {spatial} spatial sizes (each >= 1)", "output_shape")
    return v


def transposed_pads(
    node: OnnxNode, sizes: Sequence[int], kernel: Sequence[int], strides, dilations, output_padding
) -> list[int]:
    """ONNX-ordered pads (begins..., ends...) of a ConvTranspose node, resolved as the module docstring says
    (ends may be negative)."""
    spatial = len(sizes)
    mode = str(attr(node, "auto_pad", "NOTSET"))
    if mode not in AUTO_PADS:
        raise unsupported(node, f"auto_pad must be one of {', '.join(AUTO_PADS)}", "auto_pad")
    full = [
        (n - 1) * s + (k - 1) * d + 1 + op for n, s, k, d, op in zip(sizes, strides, kernel, dilations, output_padding)
    ]
    shape = _output_shape(node, spatial)
    if "pads" in node.attrs:
        pads = ints(node, "pads")
        if len(pads) != 2 * spatial or any(p < 0 for p in pads):
            raise unsupported(node, f"pads must be {2 * spatial} non-negative integers", "pads")
        begins = pads[:spatial]
        if shape is None:
            return pads
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        shape = shape or [n * s for n, s in zip(sizes, strides)]
        totals = [f - o for f, o in zip(full, shape)]
        begins = [t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in totals]
    else:
        begins = [0] * spatial
        shape = shape or full
    return begins + [f - b - o for f, b, o in zip(full, begins, shape)]


@converter(
    "ConvTranspose",
    attrs=("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"),
)
def _conv_transpose(b: Builder, node: OnnxNode) -> None:
    for i in (0, 1, 2):
        if b.has(node, i):
            b.require_dtype(node, i, FLOAT)
    xs, ws = b.shape(node, 0), b.shape(node, 1)
    if len(xs) not in (3, 4):
        raise unsupported(node, f"only 1-D and 2-D transposed convolutions are supported (input rank 3 or 4), got {xs}")
    if len(ws) != len(xs):
        raise unsupported(node, f"weight shape {ws} does not match input shape {xs}")
    spatial = len(xs) - 2
    ks = ints(node, "kernel_shape")
    if ks is not None and tuple(ks) != tuple(ws[2:]):
        raise unsupported(node, f"kernel_shape does not match the weight's kernel {ws[2:]}", "kernel_shape")
    group = int(attr(node, "group", 1))
    if group < 1 or xs[1] % group or ws[0] != xs[1]:
        raise unsupported(node, f"group={group} does not fit input channels {xs[1]} and weight {ws}", "group")
    strides = _axis_ints(node, "strides", spatial, 1, 1)
    dilations = _axis_ints(node, "dilations", spatial, 1, 1)
    output_padding = _axis_ints(node, "output_padding", spatial, 0, 0)
    for s, d, op in zip(strides, dilations, output_padding):
        if op >= max(s, d):
            raise unsupported(node, "each output_padding must be below its stride or dilation", "output_padding")
    pads = transposed_pads(node, xs[2:], ws[2:], strides, dilations, output_padding)
    if spatial == 1:
        strides, dilations, output_padding = [1, *strides], [1, *dilations], [0, *output_padding]
        pads4 = (0, 0, pads[0], pads[1])
    else:
        pads4 = pads_from_onnx(pads)
    attrs = {
        "stride": compact(strides),
        "padding": pads4,
        "dilation": compact(dilations),
        "output_padding": compact(output_padding),
        "groups": group,
    }
    x, w = b.tensor(node, 0), b.tensor(node, 1)
    if spatial == 1:
        x = b.reshape(node, x, (xs[0], xs[1], 1, xs[2]))
        w = b.reshape(node, w, (ws[0], ws[1], 1, ws[2]))
    inputs = [x, w] + ([b.tensor(node, 2)] if b.has(node, 2) else [])
    if spatial == 2:
        b.emit(node, "conv_transpose", inputs, attrs, out=node.outputs[0])
        return
    y = b.emit(node, "conv_transpose", inputs, attrs, suffix="conv_transpose")
    shape = b.type_of(y).shape
    b.reshape(node, y, (shape[0], shape[1], shape[3]), out=node.outputs[0])
