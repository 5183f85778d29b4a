"""Lowering an affine loop nest onto a micro-kernel: a micro-op list plus the two hardware loop levels.

A GEMM or ALU instruction runs ``for o < iter_out: for i < iter_in: for uop in kernel`` with every
index advanced by per-loop factors. Given a nest of axes, each with an extent and a (dst, src, wgt)
stride, :func:`lower_nest` merges axes that are contiguous in every operand, puts the two axes with
the largest extents (whose strides fit the factor fields) on the hardware loops and enumerates the
rest as micro-ops, so that one instruction covers the whole nest with the fewest micro-ops.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from vdla.compiler.spec import CompileError
from vdla.config import HwConfig
from vdla.isa.instructions import GEMM_FIELDS

Nest = tuple[tuple[int, tuple[int, int, int]], ...]
_WIDTH = {name: width for name, _, width in GEMM_FIELDS}


@dataclass(frozen=True)
class Limits:
    """Field limits of the loop instructions: the largest iteration count, factors and kernel size."""

    max_iter: int
    max_factor: tuple[int, int, int]  # dst, src, wgt
    max_uops: int

    @classmethod
    def of(cls, cfg: HwConfig) -> Limits:
        """The ISA's loop-field widths and the config's UOP buffer depth."""
        return cls(max_iter=(1 << _WIDTH["iter_out"]) - 1,
                   max_factor=tuple((1 << _WIDTH[f"{f}_factor_out"]) - 1 for f in ("dst", "src", "wgt")),
                   max_uops=cfg.uop_depth)


@dataclass(frozen=True, eq=False)
class MicroKernel:
    """Micro-ops ``uops`` (n, 3) of (dst, src, wgt) and the two loop levels around them."""

    uops: np.ndarray
    iter_out: int
    iter_in: int
    factor_out: tuple[int, int, int]
    factor_in: tuple[int, int, int]

    @property
    def iterations(self) -> int:
        return self.iter_out * self.iter_in * len(self.uops)

    def factors(self, field: int) -> tuple[int, int]:
        """(outer, inner) factor of one field (0 dst, 1 src, 2 wgt)."""
        return self.factor_out[field], self.factor_in[field]


def merge_axes(nest: Nest, max_extent: int) -> Nest:
    """Drop unit axes and fuse each axis into its inner neighbour when contiguous in every operand."""
    out: list[tuple[int, tuple[int, ...]]] = []
    for ext, strides in nest:
        if ext == 1:
            continue
        if out:
            pe, ps = out[-1]
            if all(p == ext * s for p, s in zip(ps, strides)) and pe * ext <= max_extent:
                out[-1] = (pe * ext, strides)
                continue
        out.append((ext, tuple(strides)))
    return tuple(out)


def plan_loops(nest: Nest, limits: Limits) -> tuple[int | None, int | None]:
    """Indices (outer, inner) of the axes put on the hardware loops (None: unused level)."""
    ok = [k for k, (ext, strides) in enumerate(nest)
          if ext <= limits.max_iter and all(s <= m for s, m in zip(strides, limits.max_factor))]
    best: tuple[int | None, int | None] = (None, None)
    best_size = 1
    for pair in itertools.combinations(ok, 2):
        size = nest[pair[0]][0] * nest[pair[1]][0]
        if size > best_size:
            best, best_size = pair, size
    if best == (None, None) and ok:
        best = (max(ok, key=lambda k: nest[k][0]), None)
    return best


def uop_count(nest: Nest, limits: Limits) -> int:
    """Micro-ops :func:`lower_nest` would emit for this nest."""
    nest = merge_axes(nest, limits.max_iter)
    loops = plan_loops(nest, limits)
    return int(np.prod([e for k, (e, _) in enumerate(nest) if k not in loops], dtype=np.int64))


@lru_cache(maxsize=4096)
def lower_nest(nest: Nest, base: tuple[int, int, int], limits: Limits) -> MicroKernel:
    """One micro-kernel executing every point of ``nest`` (offset by ``base``)."""
    nest = merge_axes(nest, limits.max_iter)
    outer, inner = plan_loops(nest, limits)
    rest = [(e, s) for k, (e, s) in enumerate(nest) if k not in (outer, inner)]
    uops = np.array([base], np.int64)
    for ext, strides in rest:
        uops = (uops[:, None, :] + np.arange(ext)[None, :, None] * np.array(strides)[None, None, :]).reshape(-1, 3)
    if len(uops) > limits.max_uops:
        raise CompileError(f"a micro-kernel of {len(uops)} micro-ops exceeds the UOP buffer ({limits.max_uops}); "
                           "use a smaller tile")
    uops.setflags(write=False)

    def level(k: int | None) -> tuple[int, tuple[int, int, int]]:
        return (1, (0, 0, 0)) if k is None else nest[k]

    (no, fo), (ni, fi) = level(outer), level(inner)
    return MicroKernel(uops, no, ni, tuple(fo), tuple(fi))
