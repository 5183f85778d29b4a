"""Tensor layouts of the accelerator and the packing functions between them and NCHW/OIHW.

* activations NCHW -> ``(N/b, C/c, H, W, b, c)`` ("NCHW1n16c" on the default 16x16 core): one INP
  element holds ``b`` images x ``c`` channels of one pixel; N and C are zero padded up to the blocks.
* weights OIHW -> ``(O/o, I/i, KH, KW, o, i)`` ("OIHW16o16i"): one WGT element is an o x i block.
* per-channel vectors (bias, multipliers) -> ``(C/o, b, o)`` int32: one ACC element per channel
  block, the value repeated over the batch lanes.
"""

from __future__ import annotations

import numpy as np


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(N, C, H, W) -> (ceil(N/batch), ceil(C/block), H, W, batch, block), zero padded."""
    n, c, h, w = x.shape
    ng, cb = _ceil(n, batch), _ceil(c, block)
    padded = np.zeros((ng * batch, cb * block, h, w), x.dtype)
    padded[:n, :c] = x
    return np.ascontiguousarray(padded.reshape(ng, batch, cb, block, h, w).transpose(0, 2, 4, 5, 1, 3))


def unpack_activation(packed: np.ndarray, n: int, c: int) -> np.ndarray:
    """Inverse of :func:`pack_activation`: (N/b, C/c, H, W, b, c) -> (n, c, H, W)."""
    ng, cb, h, w, batch, block = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 5, 2, 3).reshape(ng * batch, cb * block, h, w)[:n, :c])


def pack_weights(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """(O, I, KH, KW) -> (ceil(O/block_out), ceil(I/block_in), KH, KW, block_out, block_in), zero padded."""
    o, i, kh, kw = w.shape
    ob, ib = _ceil(o, block_out), _ceil(i, block_in)
    padded = np.zeros((ob * block_out, ib * block_in, kh, kw), w.dtype)
    padded[:o, :i] = w
    return np.ascontiguousarray(padded.reshape(ob, block_out, ib, block_in, kh, kw).transpose(0, 2, 4, 5, 1, 3))


def unpack_weights(packed: np.ndarray, o: int, i: int) -> np.ndarray:
    """Inverse of :func:`pack_weights`."""
    ob, ib, kh, kw, bo, bi = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 5, 2, 3).reshape(ob * bo, ib * bi, kh, kw)[:o, :i])


def pack_channels(v: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(C,) per-channel values -> (ceil(C/block), batch, block) int32 accumulator rows."""
    c = v.shape[0]
    padded = np.zeros(_ceil(c, block) * block, np.int32)
    padded[:c] = v
    return np.ascontiguousarray(np.broadcast_to(padded.reshape(-1, 1, block), (len(padded) // block, batch, block)))
