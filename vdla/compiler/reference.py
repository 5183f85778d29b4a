"""Numpy reference of the integer arithmetic the compiled layers perform (bit-exact oracle for tests).

The epilogue follows the accelerator's 32-bit ALU: each step wraps to int32, the rounding shift is
round half up, ``(v + (1 << (s - 1))) >> s`` (the CPU fallback's requantize), and the result is
clamped to int8 bounds.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from vdla.compiler.spec import Conv2dSpec


def wrap32(v: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32 range (kept as int64)."""
    return (v.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)


def conv2d_acc(x: np.ndarray, w: np.ndarray, spec: Conv2dSpec) -> np.ndarray:
    """The int32 accumulators of conv2d (N, OC, OH, OW), as int64."""
    top, bottom, left, right = spec.pad
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    win = sliding_window_view(xp, (spec.kh, spec.kw), axis=(2, 3))[:, :, :: spec.sh, :: spec.sw][
        :, :, : spec.oh, : spec.ow
    ]
    acc = np.tensordot(win, w.astype(np.float64), axes=([1, 4, 5], [1, 2, 3]))  # (N, OH, OW, OC), exact
    return wrap32(acc.transpose(0, 3, 1, 2).astype(np.int64))


def epilogue(
    acc: np.ndarray,
    bias: np.ndarray | None = None,
    multiplier: int | np.ndarray = 1,
    shift: int = 0,
    bounds: tuple[int, int] = (-128, 127),
    residual: np.ndarray | None = None,
    channel_axis: int = 1,
) -> np.ndarray:
    """clip(rshr(wrap32((acc + bias) * multiplier), shift) + residual, *bounds) as int8."""
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    v = acc.astype(np.int64)
    if bias is not None:
        v = wrap32(v + np.asarray(bias, np.int64).reshape(shape))
    m = np.asarray(multiplier, np.int64)
    v = wrap32(v * (m.reshape(shape) if m.ndim else m))
    if shift:
        v = wrap32((v + (1 << (shift - 1))) >> shift)
    if residual is not None:
        v = wrap32(v + residual.astype(np.int64))
    return np.clip(v, *bounds).astype(np.int8)


def conv2d_reference(x: np.ndarray, w: np.ndarray, spec: Conv2dSpec, **epi) -> np.ndarray:
    """conv2d followed by the epilogue (keyword arguments of :func:`epilogue`)."""
    return epilogue(conv2d_acc(x, w, spec), **epi)


def dense_reference(x: np.ndarray, w: np.ndarray, **epi) -> np.ndarray:
    """x (M, K) times w (N, K) transposed, followed by the epilogue over the N axis."""
    acc = wrap32((x.astype(np.float64) @ w.astype(np.float64).T).astype(np.int64))
    return epilogue(acc, channel_axis=1, **epi)
