"""Block-diagonal convolutions on today's GEMM core: one dense convolution per channel block.

A depthwise convolution (groups = channels) computes output channel ``c`` from input channel ``c`` alone. In
the packed layout (:func:`vdla.graph.layout.pack_activation`) the channel block ``b`` of an image group ``g``
is one contiguous region of the input, of the output and of a residual. So each (group, block) is a dense
convolution of its own, of at most ``block`` channels, reading and writing those regions: its weights are the
diagonal matrices ``diag(w[b*block : (b+1)*block, 0, ky, kx])`` of every tap, its epilogue the block's slice
of the layer's (bias, per-channel multipliers; the table and clamp alike). The parts use ``block`` of the GEMM
core's ``block_in x block_out`` MACs (16 of 256 on ``pynq``): the "block-diagonal" mapping that
docs/depthwise.md costs against the others. A dense convolution whose weights are block-diagonal (every
off-diagonal ``block x block`` block zero at every tap: the identity convolutions that move values between
layers, :mod:`vdla.graph.copies`) runs as the same parts, its diagonal blocks as their weights: C/block
times fewer GEMMs than the dense form.

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
    """One (image group, channel block) of a depthwise or block-diagonal layer: the dense convolution that
    computes it."""

    group: int
    block: int
    in_shape: tuple[int, int, int, int]  # (images, channels, H, W) of the part
    weights: np.ndarray  # (c, c, kh, kw) int8, block-diagonal
    epilogue: Epilogue


def parts_refusal(cfg: HwConfig) -> str | None:
    """Why ``cfg`` cannot run a layer as block-diagonal parts, or None: a block's input and output
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


def is_block_diagonal(weights: np.ndarray, block: int) -> bool:
    """Whether dense OIHW ``weights`` of more than one channel block are block-diagonal: as many output as input
    channels, every off-diagonal ``block x block`` block zero at every tap."""
    oc, c = weights.shape[:2]
    if oc != c or c <= block:
        return False
    blocks = np.arange(c) // block
    return not np.any(weights[blocks[:, None] != blocks[None, :]])


def block_parts(in_shape, weights: np.ndarray, epilogue: Epilogue, cfg: HwConfig) -> list[BlockPart]:
    """The block-diagonal parts of a convolution of an NCHW ``in_shape`` input by int8 ``weights``: depthwise
    (C, 1, kh, kw), or dense (C, C, kh, kw) and block-diagonal; raises CompileError naming what does not fit."""
    why = parts_refusal(cfg)
    if why:
        raise CompileError(why)
    n, c, h, w = in_shape
    depthwise = weights.shape[:2] == (c, 1)
    if not depthwise and not is_block_diagonal(weights, cfg.block_out):
        raise CompileError(f"weights {weights.shape} are neither depthwise nor block-diagonal over {c} channels")
    blk, parts = cfg.block_out, []
    for g in range(-(-n // cfg.batch)):
        images = min(cfg.batch, n - g * cfg.batch)
        for b in range(-(-c // blk)):
            lo, hi = b * blk, min(c, (b + 1) * blk)
            if depthwise:
                diag = np.zeros((hi - lo, hi - lo, *weights.shape[2:]), np.int8)
                diag[np.arange(hi - lo), np.arange(hi - lo)] = weights[lo:hi, 0]
            else:
                diag = np.ascontiguousarray(weights[lo:hi, lo:hi])
            parts.append(BlockPart(g, b, (images, hi - lo, h, w), diag, block_epilogue(epilogue, lo, hi)))
    return parts


def check_parts(parts: list[BlockPart], kernel, stride, padding, cfg: HwConfig) -> None:
    """Raise CompileError, naming the limit, when a part's smallest tile does not fit the buffers (the conv2d
    compiler's own check, :meth:`~vdla.compiler.conv_lowering.ConvLowering.check_minimal`), so that placement keeps
    such a layer on the CPU with the reason."""
    from vdla.compiler.conv_lowering import ConvLowering
    from vdla.compiler.epilogue_passes import normalize
    from vdla.compiler.spec import Conv2dSpec, EpilogueSpec

    for part in {p.in_shape: p for p in parts}.values():  # one part of each shape
        sp = Conv2dSpec.make(part.in_shape, part.in_shape[1], kernel, stride, padding)
        ConvLowering(sp, EpilogueSpec.of(normalize(part.epilogue)), cfg).check_minimal(1)


def region(part: BlockPart, blocks: int, hw: tuple[int, int], cfg: HwConfig, whole: bool = False) -> tuple[int, int]:
    """(byte offset, bytes) of ``part``'s region in an int8 tensor of ``blocks`` channel blocks of ``hw`` pixels
    packed by ``cfg`` (the input with its H x W, a residual with the output's); ``whole``: the part's image
    group with all its channel blocks (an output, whose part the part's view selects)."""
    size = hw[0] * hw[1] * cfg.batch * cfg.block_out
    if whole:
        return part.group * blocks * size, blocks * size
    return (part.group * blocks + part.block) * size, size
