"""The linear layers: Conv, CausalConvWithState, Gemm, MatMul, Det, DFT and STFT (dense layers of a constant
matrix) and BatchNormalization (with constant statistics an affine map per channel, folded later into the layer
before it), and the window geometry the pools share (no ``onnx`` import here).

Conv is ``conv2d``, a 1-D one lifted to a height-1 image. Gemm, and a MatMul whose right operand is a constant
of rank 1 or 2 or a dequantized 2-D constant (a QDQ model's weight), is a ``dense`` layer (the accelerator's
GEMM) of an (N, K) weight; any other MatMul is the float32 ``matmul``. :func:`window_geometry` checks and
resolves the strides, dilations and pads (``auto_pad`` included) of a Conv or pool window.

Padding inside vdla is (top, bottom, left, right); a convolution's ONNX (top, left, bottom, right) goes through
:func:`vdla.graph.window.pads_from_onnx` exactly once, in :func:`_conv_pool_geometry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, size, unsupported
from vdla.frontend.onnx_ops.registry import FLOAT, attr, axis_of, compact, converter, ints
from vdla.graph.graph import Node
from vdla.graph.opnames import DEQUANTIZE
from vdla.graph.ops import matmul_type
from vdla.graph.window import pads_from_onnx

# ---------------------------------------------------------------------------------------------------------
# Windows and convolution


def _auto_pads(node: OnnxNode, mode: str, sizes, kernel, strides, dilations) -> list[int]:
    """ONNX-ordered pads (begins..., ends...) for auto_pad SAME_UPPER / SAME_LOWER / VALID."""
    if mode == "VALID":
        return [0] * (2 * len(sizes))
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise unsupported(node, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID", "auto_pad")
    begins, ends = [], []
    for n, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else big)
        ends.append(big if mode == "SAME_UPPER" else small)
    return begins + ends


def window_geometry(node: OnnxNode, sizes: Sequence[int], kernel: Sequence[int]) -> tuple[list, list, list]:
    """The strides, dilations and ONNX-ordered pads (begins..., ends...; auto_pad resolved) of a window of
    ``kernel`` over spatial ``sizes``, checking each attribute."""
    spatial = len(sizes)
    for name in ("strides", "dilations"):
        v = ints(node, name)
        if v is not None and (len(v) != spatial or any(i < 1 for i in v)):
            raise unsupported(node, f"{name} must be {spatial} positive integers", name)
    strides = ints(node, "strides", [1] * spatial)
    dilations = ints(node, "dilations", [1] * spatial)
    mode = str(attr(node, "auto_pad", "NOTSET"))
    if mode == "NOTSET":
        pads = ints(node, "pads", [0] * (2 * spatial))
        if len(pads) != 2 * spatial or any(p < 0 for p in pads):
            raise unsupported(node, f"pads must be {2 * spatial} non-negative integers", "pads")
    else:
        if "pads" in node.attrs and any(int(p) for p in node.attrs["pads"]):
            raise unsupported(node, "explicit pads together with auto_pad", "pads")
        pads = _auto_pads(node, mode, sizes, kernel, strides, dilations)
    return strides, dilations, pads


def _conv_pool_geometry(b: Builder, node: OnnxNode, x_shape, kernel: Sequence[int]) -> dict[str, Any]:
    """Kernel, strides, dilations and pads of a 1-D or 2-D Conv node as 2-D vdla attributes (1-D lifted to a
    height-1 image), checking each attribute."""
    rank = len(x_shape)
    if rank not in (3, 4):
        raise unsupported(node, f"only 1-D and 2-D windows are supported (input rank 3 or 4), got shape {x_shape}")
    spatial = rank - 2
    kernel = [int(k) for k in kernel]
    strides, dilations, pads = window_geometry(node, x_shape[2:], kernel)
    if spatial == 1:
        kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
        pads4 = (0, 0, pads[0], pads[1])
    else:
        pads4 = pads_from_onnx(pads)
    return {"kernel": tuple(kernel), "stride": strides, "dilation": dilations, "pads": pads4, "onnx_pads": pads}


def _lift(b: Builder, node: OnnxNode, x: str) -> str:
    """A rank-3 (N, C, L) value as (N, C, 1, L)."""
    shape = b.type_of(x).shape
    return x if len(shape) == 4 else b.reshape(node, x, (shape[0], shape[1], 1, shape[2]))


def emit_conv(b: Builder, node: OnnxNode, x: str, w: str, bias: str | None, out: str | None) -> str:
    """conv2d of vdla values ``x`` and ``w`` (rank 3 or 4) with the node's Conv attributes."""
    xs, ws = b.type_of(x).shape, b.type_of(w).shape
    if len(ws) != len(xs):
        raise unsupported(node, f"weight shape {ws} does not match input shape {xs}")
    ks = ints(node, "kernel_shape")
    if ks is not None and tuple(ks) != tuple(ws[2:]):
        raise unsupported(node, f"kernel_shape does not match the weight's kernel {ws[2:]}", "kernel_shape")
    geo = _conv_pool_geometry(b, node, xs, ws[2:])
    group = int(attr(node, "group", 1))
    if group < 1 or xs[1] % group or ws[0] % group or ws[1] != xs[1] // group:
        raise unsupported(node, f"group={group} does not fit input channels {xs[1]} and weight {ws}", "group")
    attrs = {
        "stride": compact(geo["stride"]),
        "padding": compact(geo["pads"]),
        "dilation": compact(geo["dilation"]),
        "groups": group,
    }
    inputs = [_lift(b, node, x), _lift(b, node, w)] + ([bias] if bias is not None else [])
    if len(xs) == 4:
        return b.emit(node, "conv2d", inputs, attrs, out=out, suffix="conv")
    y = b.emit(node, "conv2d", inputs, attrs, suffix="conv")
    shape = b.type_of(y).shape
    return b.reshape(node, y, (shape[0], shape[1], shape[3]), out=out)  # back to (N, C, L)


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(b: Builder, node: OnnxNode) -> None:
    for i in (0, 1, 2):
        if b.has(node, i):
            b.require_dtype(node, i, FLOAT)
    bias = b.tensor(node, 2) if b.has(node, 2) else None
    emit_conv(b, node, b.tensor(node, 0), b.tensor(node, 1), bias, node.outputs[0])


# ---------------------------------------------------------------------------------------------------------
# Dense layers


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def _gemm(b: Builder, node: OnnxNode) -> None:
    for i in (0, 1, 2):
        if b.has(node, i):
            b.require_dtype(node, i, FLOAT)
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    trans_a, trans_b = int(attr(node, "transA", 0)), int(attr(node, "transB", 0))
    a = b.tensor(node, 0)
    if len(b.type_of(a).shape) != 2 or len(b.shape(node, 1)) != 2:
        raise unsupported(node, f"A and B must be 2-D, got {b.type_of(a).shape} and {b.shape(node, 1)}")
    if trans_a:
        a = b.emit(node, "transpose", (a,), {"perm": (1, 0)}, suffix="A_T")
    out = node.outputs[0]
    has_c = b.has(node, 2) and beta != 0.0
    n = b.shape(node, 1)[0 if trans_b else 1]
    c = b.const(node, 2, "C") if has_c and b.is_const(node, 2) else None
    bias_fits = c is not None and c.shape in ((n,), (1, n))
    if b.is_const(node, 1):
        w = np.asarray(b.const(node, 1, "B"), np.float32)
        w = w if trans_b else w.T
        if alpha != 1.0:
            w = (w * np.float32(alpha)).astype(np.float32)
        wname = b.add_param(node.input(1) + ("" if trans_b else ":T"), np.ascontiguousarray(w))
        inputs = [a, wname]
        if bias_fits:
            inputs.append(b.add_param(node.input(2) + ":bias", (np.float32(beta) * c.reshape(n)).astype(np.float32)))
        y = b.emit(node, "dense", inputs, out=out if bias_fits or not has_c else None, suffix="dense")
        if bias_fits or not has_c:
            return
    else:
        w = b.tensor(node, 1)
        if not trans_b:
            w = _dense_weight(b, node, w)
        y = b.emit(node, "dense", (a, w), out=out if not has_c and alpha == 1.0 else None, suffix="dense")
        if alpha != 1.0:
            y = b.emit(node, "mul", (y,), {"b": alpha}, out=out if not has_c else None, suffix="alpha")
        if not has_c:
            return
    if c is not None:
        cs = (np.float32(beta) * c).astype(np.float32)
        if cs.size == 1 and cs.ndim <= 2:
            b.emit(node, "add", (y,), {"b": float(cs.reshape(()))}, out=out)
        else:
            b.emit(node, "add", (y, b.add_param(node.input(2) + ":beta", cs)), out=out)
        return
    cv = b.tensor(node, 2)
    if beta != 1.0:
        cv = b.emit(node, "mul", (cv,), {"b": beta}, suffix="beta")
    b.emit(node, "add", (y, cv), out=out)


def _dequantized_const(b: Builder, w: str) -> Node | None:
    """The ``dequantize`` node computing ``w`` from constants only (a QDQ model's weight), else None."""
    dq = next((n for n in reversed(b.nodes) if n.output == w), None)
    return dq if dq is not None and dq.op == DEQUANTIZE and all(i in b.params for i in dq.inputs) else None


def _dense_weight(b: Builder, node: OnnxNode, w: str) -> str:
    """The (N, K) dense weight of a computed (K, N) right operand ``w``: where ``w`` dequantizes a constant,
    the dequantization of the transposed int8 constant (so that the quantized lowering sees an int8
    weight); otherwise a transpose of ``w``."""
    dq = _dequantized_const(b, w)
    if dq is None:
        return b.emit(node, "transpose", (w,), {"perm": (1, 0)}, suffix="B_T")
    transposed = [b.add_param(f"{i}:T", np.ascontiguousarray(b.params[i].T)) for i in dq.inputs]
    attrs = dict(dq.attrs)
    if attrs.get("axis") is not None:
        attrs["axis"] = 1 - int(attrs["axis"])
    return b.emit(node, "dequantize", transposed, attrs, suffix="B_T")


def _matmul_weight(b: Builder, node: OnnxNode, sb: tuple[int, ...]) -> str | None:
    """The (N, K) dense weight of MatMul's right operand when it is a constant of rank 1 or 2 or a
    dequantized 2-D constant (a QDQ model's weight); None otherwise."""
    if b.is_const(node, 1) and len(sb) <= 2:
        bm = np.asarray(b.const(node, 1, "B"), np.float32)
        return b.add_param(node.input(1) + ":T", np.ascontiguousarray(bm.reshape(sb[0], -1).T))
    if len(sb) == 2 and _dequantized_const(b, b.tensor(node, 1)) is not None:
        return _dense_weight(b, node, b.tensor(node, 1))
    return None


def emit_dense(b: Builder, node: OnnxNode, a: str, w: str, k: int, out: str, bias: str | None = None) -> None:
    """``a (..., K) @ w.T`` for a (N, K) weight value ``w``, flattening the leading axes of ``a``."""
    shape = b.type_of(a).shape
    n = b.type_of(w).shape[0]
    final = (*shape[:-1], n)
    a2 = b.reshape(node, a, (size(shape[:-1]), k))
    inputs = [a2, w] + ([bias] if bias else [])
    if final == (size(shape[:-1]), n):
        b.emit(node, "dense", inputs, out=out)
    else:
        y = b.emit(node, "dense", inputs, suffix="dense")
        b.reshape(node, y, final, out=out)


def _matmul_shape(node: OnnxNode, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's (and ONNX's) result shape of ``a @ b``: batch dimensions broadcast, a 1-D operand's axis
    dropped."""
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError as e:
        raise unsupported(node, f"batch dimensions of {sa} and {sb} do not broadcast") from e
    return (*batch, *sa[-2:-1], *(sb[-1:] if len(sb) > 1 else ()))


# ---------------------------------------------------------------------------------------------------------
# CausalConvWithState: a depthwise causal 1-D convolution carrying its last inputs


@converter("CausalConvWithState", attrs=("activation",))
def _causal_conv_with_state(b: Builder, node: OnnxNode) -> None:
    """``y[b, c, t] = sum_j w[c, 0, j] * p[b, c, t + j] + bias[c]`` over ``p``, the past state (zeros when
    absent) joined in front of the input, then SiLU where asked; the present state is ``p``'s last ``k - 1``
    positions. The weights may be computed at run time: ``k`` slices of ``p`` times the weight's columns,
    summed in order (the kernels are short)."""
    for i in (0, 1, 2, 3):
        if b.has(node, i):
            b.require_dtype(node, i, FLOAT)
    xs, ws = b.shape(node, 0), b.shape(node, 1)
    if len(xs) != 3 or len(ws) != 3 or ws[0] != xs[1] or ws[1] != 1:
        raise unsupported(node, f"input {xs} and weight {ws} must be (B, C, L) and (C, 1, k)")
    (n, c, length), k = xs, ws[2]
    activation = str(attr(node, "activation", "none"))
    if activation not in ("none", "silu", "swish"):
        raise unsupported(node, "activation must be none, silu or swish", "activation")
    if b.has(node, 2) and b.shape(node, 2) != (c,):
        raise unsupported(node, f"bias of shape {b.shape(node, 2)} for {c} channels")
    if b.has(node, 3) and b.shape(node, 3) != (n, c, k - 1):
        raise unsupported(node, f"past_state of shape {b.shape(node, 3)} where ({n}, {c}, {k - 1}) is needed")
    x = b.tensor(node, 0)
    padded = x
    if k > 1:
        past = b.tensor(node, 3) if b.has(node, 3) else b.add_param(f"{node.outputs[0]}:zero_state",
                                                                    np.zeros((n, c, k - 1), np.float32))  # fmt: skip
        padded = b.emit(node, "concat", (past, x), {"axis": 2}, suffix="padded")
    w = b.tensor(node, 1)
    acc = None
    for j in range(k):
        window = _slice_last(b, node, padded, j, j + length, "window")
        tap = b.reshape(node, _slice_last(b, node, w, j, j + 1, "tap"), (c, 1))
        term = b.emit(node, "mul", (window, tap), suffix="tap_product")
        acc = term if acc is None else b.emit(node, "add", (acc, term), suffix="tap_sum")
    assert acc is not None
    if b.has(node, 2):
        acc = b.emit(node, "add", (acc, b.reshape(node, b.tensor(node, 2), (c, 1))), suffix="biased")
    if activation != "none":
        acc = b.emit(node, "swish", (acc,), {"alpha": 1.0}, suffix="silu")
    b.finish(node, acc, "float32")
    if len(node.outputs) > 1 and node.outputs[1] in b.used:
        if k == 1:
            raise unsupported(node, "a kernel of length 1 carries an empty present_state (vdla has no empty tensors)")
        state = _slice_last(b, node, padded, length, length + k - 1, "present_state")
        b.alias(node.outputs[1], state)


def _slice_last(b: Builder, node: OnnxNode, x: str, start: int, stop: int, what: str) -> str:
    """``x[..., start:stop]`` (no node for the whole axis)."""
    shape = b.type_of(x).shape
    if (start, stop) == (0, shape[-1]):
        return x
    rank = len(shape)
    attrs = {"starts": (0,) * (rank - 1) + (start,), "stops": (*shape[:-1], stop), "steps": (1,) * rank}
    return b.emit(node, "slice", (x,), attrs, suffix=what)


# ---------------------------------------------------------------------------------------------------------
# Det: the cofactor expansion of small matrices


@converter("Det")
def _det(b: Builder, node: OnnxNode) -> None:
    """The determinant of each (..., n, n) matrix for n up to 3, as its cofactor expansion over the entries
    (slices, products and sums); larger matrices (which need a factorization) are refused."""
    b.require_dtype(node, 0, FLOAT)
    xs = b.shape(node, 0)
    if len(xs) < 2 or xs[-1] != xs[-2] or not 1 <= xs[-1] <= 3:
        raise unsupported(node, f"input of shape {xs}: vdla computes the determinants of 1x1, 2x2 and 3x3 matrices")
    n, lead, rank = xs[-1], tuple(xs[:-2]), len(xs)
    x = b.tensor(node, 0)

    def entry(i: int, j: int) -> str:
        attrs = {"starts": (0,) * (rank - 2) + (i, j), "stops": (*lead, i + 1, j + 1), "steps": (1,) * rank}
        return b.reshape(node, b.emit(node, "slice", (x,), attrs, suffix=f"a{i}{j}"), lead)

    def mul(p: str, q: str) -> str:
        return b.emit(node, "mul", (p, q), suffix="product")

    def minor(r0: int, r1: int, c0: int, c1: int) -> str:
        return b.emit(node, "sub", (mul(entry(r0, c0), entry(r1, c1)), mul(entry(r0, c1), entry(r1, c0))),
                      suffix="minor")  # fmt: skip

    out = node.outputs[0]
    if n == 1:
        b.finish(node, entry(0, 0), "float32")
    elif n == 2:
        b.emit(node, "sub", (mul(entry(0, 0), entry(1, 1)), mul(entry(0, 1), entry(1, 0))), out=out)
    else:
        terms = [mul(entry(0, 0), minor(1, 2, 1, 2)), mul(entry(0, 1), minor(1, 2, 0, 2)),
                 mul(entry(0, 2), minor(1, 2, 0, 1))]  # fmt: skip
        first = b.emit(node, "sub", (terms[0], terms[1]), suffix="cofactors")
        b.emit(node, "add", (first, terms[2]), out=out)


# ---------------------------------------------------------------------------------------------------------
# DFT: a dense layer of a constant matrix

DFT_MAX_ENTRIES = 1 << 24  # the largest DFT matrix vdla builds (64 MiB of float32)


def dft_matrix(n_in: int, c_in: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The real matrix (n_in * c_in, n_out * c_out) of ONNX's DFT along one axis of ``n_in`` samples (or bins),
    each ``c_in`` values (1: real, 2: real and imaginary, interleaved), as numpy's ``fft`` (``ifft``, or
    ``irfft`` when ``inverse`` and ``onesided``) with ``n=length`` computes it: the input truncated or zero
    padded to ``length``, the output ``length`` complex values (``length // 2 + 1`` when ``onesided``; real ones
    for ``irfft``), in float64."""
    rows = np.arange(n_in)[:, None]
    if not inverse:
        cols = np.arange(length // 2 + 1 if onesided else length)[None, :]
        angle = 2 * np.pi * (rows * cols % length) / length
        cos, sin = np.cos(angle), np.sin(angle)
        blocks = [[cos, -sin], [sin, cos]]  # (re, im) in -> (re, im) out: x * e^(-i angle)
    elif not onesided:
        cols = np.arange(length)[None, :]
        angle = 2 * np.pi * (rows * cols % length) / length
        cos, sin = np.cos(angle) / length, np.sin(angle) / length
        blocks = [[cos, sin], [-sin, cos]]  # x * e^(+i angle) / length
    else:  # irfft: the bins k < length // 2 + 1 weighted 2, but the constant and the Nyquist ones 1
        cols = np.arange(length)[None, :]
        angle = 2 * np.pi * (rows * cols % length) / length
        weight = np.where((rows == 0) | (2 * rows == length), 1.0, 2.0) / length
        blocks = [[weight * np.cos(angle)], [-weight * np.sin(angle)]]
    used = (rows < (length // 2 + 1 if inverse and onesided else length)).astype(np.float64)
    c_out = len(blocks[0])
    m = np.zeros((n_in, c_in, cols.shape[1], c_out))
    for i in range(c_in):
        for j in range(c_out):
            m[:, i, :, j] = blocks[i][j] * used
    return m.reshape(n_in * c_in, cols.shape[1] * c_out)


@converter("DFT", attrs=("axis", "inverse", "onesided"))
def _dft(b: Builder, node: OnnxNode) -> None:
    """The DFT along one signal axis as a ``dense`` layer of a constant matrix (:func:`dft_matrix`): the axis
    moved next to the (real, imaginary) axis, both flattened, multiplied, and moved back. The length and the
    axis (opset 20's inputs 1 and 2, or the opset 17 attribute) must be constants."""
    b.require_dtype(node, 0, FLOAT)
    xs = b.shape(node, 0)
    rank = len(xs)
    if rank < 2 or xs[-1] not in (1, 2):
        raise unsupported(node, f"needs a (..., 1) real or (..., 2) complex input, got shape {xs}")
    if b.opset >= 20:
        axis = int(np.asarray(b.const(node, 2, "axis")).reshape(())) if b.has(node, 2) else -2
    else:
        axis = int(attr(node, "axis", 1))
    axis = axis_of(node, axis, rank)
    if axis == rank - 1:
        raise unsupported(node, "the axis must be a signal axis, not the last (real, imaginary) one", "axis")
    inverse, onesided = bool(int(attr(node, "inverse", 0))), bool(int(attr(node, "onesided", 0)))
    n_in, c_in = xs[axis], xs[-1]
    if b.has(node, 1):
        length = int(np.asarray(b.const(node, 1, "dft_length")).reshape(()))
    else:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    if length < 1:
        raise unsupported(node, f"dft_length {length} must be positive")
    m = dft_matrix(n_in, c_in, length, inverse, onesided)
    if m.size > DFT_MAX_ENTRIES:
        raise unsupported(node, f"a DFT of {n_in} samples to {length} is a matrix of {m.size} entries, more than "
                          f"vdla builds ({DFT_MAX_ENTRIES})")  # fmt: skip
    n_out, c_out = (length, 1) if inverse and onesided else (m.shape[1] // 2, 2)
    others = [a for a in range(rank - 1) if a != axis]
    perm = (*others, axis, rank - 1)
    x = b.tensor(node, 0)
    if perm != tuple(range(rank)):
        x = b.emit(node, "transpose", (x,), {"perm": perm}, suffix="dft_signal_last")
    lead = tuple(xs[a] for a in others)
    w = b.add_param(f"{node.outputs[0]}:dft", np.ascontiguousarray(m.T).astype(np.float32))
    y = b.emit(node, "dense", (b.reshape(node, x, (size(lead), n_in * c_in)), w), suffix="dft")
    y = b.reshape(node, y, (*lead, n_out, c_out))
    if perm == tuple(range(rank)):
        b.finish(node, y, "float32")
        return
    back = tuple(int(i) for i in np.argsort(perm))
    b.emit(node, "transpose", (y,), {"perm": back}, out=node.outputs[0])


@converter("STFT", attrs=("onesided",))
def _stft(b: Builder, node: OnnxNode) -> None:
    """The short-time Fourier transform as ONNX's reference computes it: the signal's frames (one ``take`` of
    constant indices, ``frame_step`` apart), times the window where given, then the DFT of each frame at
    ``frame_length`` as one ``dense`` layer (:func:`dft_matrix`; ``onesided``, default 1: the first
    ``frame_length // 2 + 1`` bins). frame_step and frame_length must be constants; the window may be
    computed at run time."""
    b.require_dtype(node, 0, FLOAT)
    xs = b.shape(node, 0)
    if len(xs) != 3 or xs[2] not in (1, 2):
        raise unsupported(node, f"needs a (batch, length, 1) real or (batch, length, 2) complex signal, got {xs}")
    bsz, length, c_in = xs
    step = int(np.asarray(b.const(node, 1, "frame_step")).reshape(()))
    window = b.tensor(node, 2) if b.has(node, 2) else None
    if window is not None:
        b.require_dtype(node, 2, FLOAT)
        if len(b.shape(node, 2)) != 1:
            raise unsupported(node, f"window of shape {b.shape(node, 2)}: needs one dimension")
    wsize = b.shape(node, 2)[0] if window is not None else None
    given = int(np.asarray(b.const(node, 3, "frame_length")).reshape(())) if b.has(node, 3) else None
    frame = given or wsize or length
    wsize = wsize or frame
    frames = 1 + (length - frame) // step if step >= 1 else 0
    if frames < 1 or wsize < 1:
        raise unsupported(node, f"frame_step {step} and frame_length {frame} make no frame of a {length}-long signal")
    m = dft_matrix(wsize, c_in, frame, False, bool(int(attr(node, "onesided", 1))))
    if m.size > DFT_MAX_ENTRIES:
        raise unsupported(node, f"a DFT of {frame} is a matrix of {m.size} entries, more than vdla builds")
    table = [f * step + t if f * step + t < length else -1 for f in range(frames) for t in range(wsize)]
    x = b.emit(node, "take", (b.tensor(node, 0),), {"index": (None, tuple(table), None), "value": 0.0},
               suffix="frames")  # fmt: skip
    x = b.reshape(node, x, (bsz, frames, wsize, c_in))
    if window is not None:
        x = b.emit(node, "mul", (x, b.reshape(node, window, (1, 1, wsize, 1))), suffix="windowed")
    w = b.add_param(f"{node.outputs[0]}:dft", np.ascontiguousarray(m.T).astype(np.float32))
    y = b.emit(node, "dense", (b.reshape(node, x, (bsz * frames, wsize * c_in)), w), suffix="stft")
    b.reshape(node, y, (bsz, frames, m.shape[1] // 2, 2), out=node.outputs[0])


@converter("MatMul")
def _matmul(b: Builder, node: OnnxNode) -> None:
    """A constant 1-D or 2-D right operand (or a dequantized 2-D constant) makes a dense layer (the
    accelerator's GEMM); anything else (two computed operands, batched as in attention, or a batched
    constant) the float32 matmul operator."""
    b.require_dtype(node, 0, FLOAT)
    b.require_dtype(node, 1, FLOAT)
    sa, sb = b.shape(node, 0), b.shape(node, 1)
    if not sa or not sb:
        raise unsupported(node, f"MatMul of a scalar (shapes {sa} and {sb})")
    if sa[-1] != sb[0 if len(sb) == 1 else -2]:
        raise unsupported(node, f"inner dimensions of {sa} and {sb} differ")
    final = _matmul_shape(node, sa, sb)
    a = b.tensor(node, 0)
    if len(sa) == 1:  # (K,): a row vector, its axis dropped afterwards
        a = b.reshape(node, a, (1, sa[0]))
    out = node.outputs[0]
    weight = _matmul_weight(b, node, sb)
    if weight is not None:
        if len(sa) > 1 and len(sb) == 2:  # the dense layer's own result shape
            emit_dense(b, node, a, weight, sb[0], out)
            return
        tmp = out + ":mm"
        emit_dense(b, node, a, weight, sb[0], tmp)
        b.reshape(node, b.values[tmp].name, final, out=out)
        return
    bt = b.tensor(node, 1)
    if len(sb) == 1:  # (K,): a column vector
        bt = b.reshape(node, bt, (sb[0], 1))
    y_shape = matmul_type(b.type_of(a), b.type_of(bt)).shape if len(sa) > 1 and len(sb) > 1 else None
    if y_shape == final:
        b.emit(node, "matmul", (a, bt), out=out)
        return
    y = b.emit(node, "matmul", (a, bt), suffix="matmul")
    b.reshape(node, y, final, out=out)


@converter("BatchNormalization", attrs=("epsilon", "momentum", "training_mode", "spatial"))
def _batch_norm(b: Builder, node: OnnxNode) -> None:
    """Inference: ``(x - mean) / sqrt(var + epsilon) * scale + bias`` with the given statistics (constant ones
    fold into the layer before). ``training_mode``: the batch's own mean and (biased) variance over every axis
    but the channels normalize, and the running mean/variance outputs are ``given * momentum + batch's * (1 -
    momentum)``, as ONNX's reference computes them."""
    training = bool(int(attr(node, "training_mode", 0)))
    if not int(attr(node, "spatial", 1)):
        raise unsupported(node, "spatial=0 (per-element statistics) is not supported", "spatial")
    if not training and any(o in b.used for o in node.outputs[1:] if o):
        raise unsupported(node, "the running mean/variance outputs are those of training_mode=1")
    for i in range(5):
        b.require_dtype(node, i, FLOAT)
    eps = float(attr(node, "epsilon", 1e-5))
    inputs = [b.tensor(node, i) for i in range(5)]
    if not training and all(b.is_const(node, i) for i in range(1, 5)):  # folded into the weights or a
        b.emit(node, "batch_norm", inputs, {"epsilon": eps}, out=node.outputs[0])  # multiply-add later
        return
    # computed statistics: ONNX's (x - mean) / sqrt(var + epsilon) * scale + bias, statistics along axis 1
    x, scale, bias, mean, var = inputs
    rank = len(b.type_of(x).shape)
    if rank < 2:
        raise unsupported(node, f"needs an (N, C, ...) input, got shape {b.type_of(x).shape}")
    c = b.type_of(x).shape[1]
    channels = (1, c) + (1,) * (rank - 2)
    scale, bias, mean, var = (b.reshape(node, v, channels) for v in (scale, bias, mean, var))
    if training:
        momentum = float(attr(node, "momentum", 0.9))
        over = {"kind": "mean", "axes": (0, *range(2, rank)), "keepdims": True}
        batch_mean = b.emit(node, "reduce", (x,), over, suffix="batch_mean")
        centered = b.emit(node, "sub", (x, batch_mean), suffix="centered")
        batch_var = b.emit(node, "reduce", (b.emit(node, "mul", (centered, centered), suffix="square"),), over,
                           suffix="batch_var")  # fmt: skip
        for i, given, batch in ((1, mean, batch_mean), (2, var, batch_var)):
            if len(node.outputs) > i and node.outputs[i] in b.used:
                kept = b.emit(node, "mul", (given,), {"b": momentum}, suffix="kept")
                new = b.emit(node, "mul", (batch,), {"b": 1.0 - momentum}, suffix="new")
                b.reshape(node, b.emit(node, "add", (kept, new), suffix="running"), (c,), out=node.outputs[i])
        var = batch_var
    else:
        centered = b.emit(node, "sub", (x, mean), suffix="centered")
    std = b.emit(node, "sqrt", (b.emit(node, "add", (var,), {"b": eps}, suffix="var_eps"),), suffix="std")
    normed = b.emit(node, "div", (centered, std), suffix="normalized")
    scaled = b.emit(node, "mul", (normed, scale), suffix="scaled")
    b.emit(node, "add", (scaled, bias), out=node.outputs[0])
