"""Micro-ops: 32-bit (dst, src, wgt) index triples whose field widths follow the buffer depths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdla.config import HwConfig
from vdla.isa.instructions import IsaError


@dataclass(frozen=True)
class Uop:
    """One micro-op: ACC index, INP (GEMM) or ACC (ALU) source index, WGT index."""

    dst: int
    src: int
    wgt: int = 0


def uop_layout(cfg: HwConfig) -> tuple[tuple[str, int, int], ...]:
    """(name, lsb, width) of the three micro-op fields for this configuration."""
    d, s, w = cfg.uop_dst_bits, cfg.uop_src_bits, cfg.uop_wgt_bits
    return (("dst", 0, d), ("src", d, s), ("wgt", d + s, w))


def encode_uops(uops: list[Uop] | np.ndarray, cfg: HwConfig) -> np.ndarray:
    """Encode micro-ops (Uop records or an (n, 3) int array) as uint32 words."""
    arr = np.asarray([(u.dst, u.src, u.wgt) for u in uops] if isinstance(uops, list) else uops, dtype=np.int64).reshape(
        -1, 3
    )
    word = np.zeros(len(arr), dtype=np.uint64)
    for col, (name, lsb, width) in enumerate(uop_layout(cfg)):
        v = arr[:, col]
        bad = (v < 0) | (v >= 1 << width)
        if bad.any():
            i = int(np.argmax(bad))
            raise IsaError(f"micro-op {i}: {name}={int(v[i])} does not fit in {width} bits")
        word |= v.astype(np.uint64) << np.uint64(lsb)
    return word.astype(np.uint32)


def decode_uops(words: np.ndarray, cfg: HwConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode uint32 micro-op words into (dst, src, wgt) int64 index arrays."""
    w = np.asarray(words, dtype=np.int64)
    return tuple((w >> lsb) & ((1 << width) - 1) for _, lsb, width in uop_layout(cfg))
