"""A depthwise convolution on today's GEMM core: one dense convolution per channel block, by block-diagonal
weights.

A depthwise convolution (groups = channels) computes output channel ``c`` from input channel ``c`` alone. In
the packed layout (:func:`vdla.graph.layout.pack_activation`) the channel block ``b`` of an image group ``g``
is one contiguous region of the input, of the output and of a residual. So each (group, block) is a dense
convolution of its own, of at most ``block`` channels, reading and writing those regions: its weights are the
diagonal matrices ``diag(w[b*block : (b+1)*block, 0, ky, kx])`` of every tap, its epilogue the block's slice
of the layer's (bias, per-channel multipliers; the table and clamp alike). The parts use ``block`` of the GEMM
core's ``block_in x block_out`` MACs (16 of 256 on ``pynq``): the "block-diagonal" mapping that
docs/depthwise.md costs against the others.

Invariants: the parts cover every (image group, channel block) once, in DRAM order; a part's regions are the
byte ranges :func:`region` gives in the layer's packed tensors, and its results equal the layer's channels of
that block bit for bit (each output channel sees exactly its own input channel's taps).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from vdla.compiler.spec import CompileError
from vdla.config import HwConfig
from vdla.graph.epilogue import Epilogue


@dataclass(frozen=True, eq=False)
class BlockPart:
    """One (image group, channel block) of a depthwise layer: the dense convolution that computes it."""

    group: int
    block: int
    in_shape: tuple[int, int, int, int]  # (images, channels, H, W) of the part
    weights: np.ndarray  # (c, c, kh, kw) int8, block-diagonal
    epilogue: Epilogue


def depthwise_fits(cfg: HwConfig) -> str | None:
    """Why ``cfg`` cannot run a depthwise layer by block-diagonal parts, or None: a block's input and output
    regions must hold the same channels (``block_in == block_out``)."""
    if cfg.block_in != cfg.block_out:
        return f"a depthwise layer needs block_in == block_out, config {cfg.name!r} has {cfg.block_in}, {cfg.block_out}"
    return None


def _channels(value, lo: int, hi: int):
    """A per-channel array's slice (a scalar or None as it is)."""
    return value[lo:hi] if isinstance(value, np.ndarray) and value.ndim else value


def block_epilogue(ep: Epilogue, lo: int, hi: int) -> Epilogue:
    """The epilogue of output channels ``lo:hi`` of a layer's ``ep``."""
    return replace(ep, bias=_channels(ep.bias, lo, hi), multiplier=_channels(ep.multiplier, lo, hi))


def depthwise_parts(in_shape, weights: np.ndarray, epilogue: Epilogue, cfg: HwConfig) -> list[BlockPart]:
    """The block-diagonal parts of a depthwise convolution of an NCHW ``in_shape`` input by ``weights`` of shape
    (C, 1, kh, kw) (int8); raises CompileError naming what does not fit."""
    why = depthwise_fits(cfg)
    if why:
        raise CompileError(why)
    n, c, h, w = in_shape
    if weights.shape[:2] != (c, 1):
        raise CompileError(f"depthwise weights must be ({c}, 1, kh, kw) for {c} channels, got {weights.shape}")
    blk, parts = cfg.block_out, []
    for g in range(-(-n // cfg.batch)):
        images = min(cfg.batch, n - g * cfg.batch)
        for b in range(-(-c // blk)):
            lo, hi = b * blk, min(c, (b + 1) * blk)
            diag = np.zeros((hi - lo, hi - lo, *weights.shape[2:]), np.int8)
            diag[np.arange(hi - lo), np.arange(hi - lo)] = weights[lo:hi, 0]
            parts.append(BlockPart(g, b, (images, hi - lo, h, w), diag, block_epilogue(epilogue, lo, hi)))
    return parts


def region(part: BlockPart, channels: int, hw: tuple[int, int], cfg: HwConfig) -> tuple[int, int]:
    """(byte offset, bytes) of ``part``'s region in an int8 tensor of ``channels`` and ``hw`` pixels packed by
    ``cfg`` (the input with its H x W, the output and a residual with theirs)."""
    blocks = -(-channels // cfg.block_out)
    size = hw[0] * hw[1] * cfg.batch * cfg.block_out
    return (part.group * blocks + part.block) * size, size
