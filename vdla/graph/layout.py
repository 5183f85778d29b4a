"""The blocked tensor layouts of the accelerator and the numpy packing between them and NCHW/OIHW.

The one definition of the layout, used by the compiler, the CPU fallback's pack/unpack kernels and
their references; the block sizes always come from the hardware config (``cfg.batch``,
``cfg.block_in``, ``cfg.block_out``: see :func:`activation_blocks`).

* activations NCHW -> ``(N/b, C/c, H, W, b, c)`` ("NCHW1n16c" on the default 16x16 core): one INP
  element holds ``b`` images x ``c`` channels of one pixel; N and C are zero padded up to the blocks.
* weights OIHW -> ``(O/o, I/i, KH, KW, o, i)`` ("OIHW16o16i"): one WGT element is an o x i block.
* per-channel vectors (bias, multipliers) -> ``(C/o, b, o)`` int32: one ACC element per channel
  block, the value repeated over the batch lanes.
"""

from __future__ import annotations

import numpy as np

from vdla.config import HwConfig


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def activation_blocks(cfg: HwConfig) -> tuple[int, int]:
    """(batch, channel) block sizes of the activation layout under ``cfg``."""
    return cfg.batch, cfg.block_in


def blocked_shape(shape: tuple[int, int, int, int], b0: int, b1: int) -> tuple[int, int, int, int, int, int]:
    """(D0, D1, H, W) -> (ceil(D0/b0), ceil(D1/b1), H, W, b0, b1): the shape of the blocked tensor."""
    d0, d1, h, w = shape
    return _ceil(d0, b0), _ceil(d1, b1), h, w, b0, b1


def _pack(x: np.ndarray, b0: int, b1: int) -> np.ndarray:
    """(D0, D1, H, W) -> (ceil(D0/b0), ceil(D1/b1), H, W, b0, b1), zero padded."""
    d0, d1, h, w = x.shape
    g0, g1 = blocked_shape(x.shape, b0, b1)[:2]
    padded = np.zeros((g0 * b0, g1 * b1, h, w), x.dtype)
    padded[:d0, :d1] = x
    return np.ascontiguousarray(padded.reshape(g0, b0, g1, b1, h, w).transpose(0, 2, 4, 5, 1, 3))


def _unpack(packed: np.ndarray, d0: int, d1: int) -> np.ndarray:
    """Inverse of :func:`_pack`, dropping the padding: -> (d0, d1, H, W)."""
    g0, g1, h, w, b0, b1 = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 5, 2, 3).reshape(g0 * b0, g1 * b1, h, w)[:d0, :d1])


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(N, C, H, W) -> (ceil(N/batch), ceil(C/block), H, W, batch, block), zero padded."""
    return _pack(x, batch, block)


def unpack_activation(packed: np.ndarray, n: int, c: int) -> np.ndarray:
    """Inverse of :func:`pack_activation`: (N/b, C/c, H, W, b, c) -> (n, c, H, W)."""
    return _unpack(packed, n, c)


def pack_weights(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """(O, I, KH, KW) -> (ceil(O/block_out), ceil(I/block_in), KH, KW, block_out, block_in), zero padded."""
    return _pack(w, block_out, block_in)


def unpack_weights(packed: np.ndarray, o: int, i: int) -> np.ndarray:
    """Inverse of :func:`pack_weights`."""
    return _unpack(packed, o, i)


def pack_channels(v: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(C,) per-channel values -> (ceil(C/block), batch, block) int32 accumulator rows."""
    c = v.shape[0]
    padded = np.zeros(_ceil(c, block) * block, np.int32)
    padded[:c] = v
    return np.ascontiguousarray(np.broadcast_to(padded.reshape(-1, 1, block), (len(padded) // block, batch, block)))
