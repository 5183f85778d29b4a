"""Numpy oracle of the graph's compute operators: convolution, dense and the fused integer epilogue.

The one reference of these semantics, written from the operator definitions (not from any generated
code): the accelerator's compiled layers, the CPU fallback's kernels and the simulator are all
checked against it. Integer accumulation wraps to int32 like the hardware's accumulators; floats
accumulate in float64 and round to float32 once.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from vdla.graph.window import Window
from vdla.isa.arith import INT8_MAX, INT8_MIN, rounding_shift, wrap32


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
) -> np.ndarray:
    """The accelerator's fused epilogue on int32 accumulators, every step wrapping to int32 like its ALU:
    ``clip(rounding_shift(wrap32((acc + bias) * multiplier), shift) + residual, *bounds)`` as int8.

    ``bias`` and an array ``multiplier`` are per channel along ``channel_axis``.
    """
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    v = acc.astype(np.int64)
    if bias is not None:
        v = wrap32(v + np.asarray(bias, np.int64).reshape(shape))
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
