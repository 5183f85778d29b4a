"""Lowering an affine loop nest onto a micro-kernel: a micro-op list plus the two hardware loop levels.

A GEMM or ALU instruction runs ``for o < iter_out: for i < iter_in: for uop in kernel`` with every
index advanced by per-loop factors. Given a nest of axes, each with an extent and a (dst, src, wgt)
stride, :func:`lower_nest` merges axes that are contiguous in every operand, puts the two axes with
the largest extents (whose strides fit the factor fields) on the hardware loops and enumerates the
rest as micro-ops, so that one instruction covers the whole nest with the fewest micro-ops. With
``pin_outer`` the first axis goes on the outer loop whatever its extent (an ``init`` GEMM steps through
the bias rows with the outer loop index).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from vdla.compiler.spec import CompileError
from vdla.config import HwConfig
from vdla.isa.instructions import ALU_FIELDS, GEMM_FIELDS

Nest = tuple[tuple[int, tuple[int, int, int]], ...]
_WIDTH = {name: width for name, _, width in GEMM_FIELDS}
# the iteration counts both instructions take on both levels (the ALU's iter_in is the narrowest)
_ITER_BITS = min(width for name, _, width in GEMM_FIELDS + ALU_FIELDS if name.startswith("iter_"))


@dataclass(frozen=True)
class Limits:
    """Field limits of the loop instructions: the largest iteration count, factors and kernel size."""

    max_iter: int
    max_factor: tuple[int, int, int]  # dst, src, wgt
    max_uops: int

    @classmethod
    def of(cls, cfg: HwConfig) -> Limits:
        """The ISA's loop-field widths (the narrowest iteration field of GEMM and ALU) and the config's UOP buffer
        depth."""
        return cls(
            max_iter=(1 << _ITER_BITS) - 1,
            max_factor=tuple((1 << _WIDTH[f"{f}_factor_out"]) - 1 for f in ("dst", "src", "wgt")),
            max_uops=cfg.uop_depth,
        )


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

    def indices(self, field: int) -> np.ndarray:
        """(uops, iter_out * iter_in) array of the field's index (0 dst, 1 src, 2 wgt) at every iteration."""
        fo, fi = self.factors(field)
        steps = (np.arange(self.iter_out)[:, None] * fo + np.arange(self.iter_in)[None, :] * fi).reshape(-1)
        return self.uops[:, field][:, None] + steps[None, :]

    def keep(self, mask: np.ndarray) -> MicroKernel:
        """The kernel with the micro-ops ``mask`` selects (at least one), its loops as they are."""
        uops = self.uops[mask]
        uops.setflags(write=False)
        return MicroKernel(uops, self.iter_out, self.iter_in, self.factor_out, self.factor_in)

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


def fits_loop(axis: tuple[int, tuple[int, int, int]], limits: Limits) -> bool:
    """Whether an axis' extent and strides fit a hardware loop level."""
    ext, strides = axis
    return ext <= limits.max_iter and all(s <= m for s, m in zip(strides, limits.max_factor))


def plan_loops(nest: Nest, limits: Limits) -> tuple[int | None, int | None]:
    """Indices (outer, inner) of the axes put on the hardware loops (None: unused level)."""
    ok = [k for k, axis in enumerate(nest) if fits_loop(axis, limits)]
    best: tuple[int | None, int | None] = (None, None)
    best_size = 1
    for pair in itertools.combinations(ok, 2):
        size = nest[pair[0]][0] * nest[pair[1]][0]
        if size > best_size:
            best, best_size = pair, size
    if best == (None, None) and ok:
        best = (max(ok, key=lambda k: nest[k][0]), None)
    return best


def _plan(nest: Nest, limits: Limits, pin_outer: bool) -> tuple[Nest, tuple, tuple, Nest]:
    """(outer level, inner level, micro-op axes) of a nest; a level is (extent, strides)."""
    unused = (1, (0, 0, 0))
    if pin_outer:
        first, nest = nest[0], merge_axes(nest[1:], limits.max_iter)
        if not fits_loop(first, limits):
            raise CompileError(f"the pinned outer axis {first} does not fit a hardware loop")
        ok = [k for k, axis in enumerate(nest) if fits_loop(axis, limits)]
        inner = max(ok, key=lambda k: nest[k][0]) if ok else None
        outer_level = first if first[0] > 1 else unused
        return (
            outer_level,
            nest[inner] if inner is not None else unused,
            tuple(ax for k, ax in enumerate(nest) if k != inner),
        )
    nest = merge_axes(nest, limits.max_iter)
    outer, inner = plan_loops(nest, limits)
    return (
        nest[outer] if outer is not None else unused,
        nest[inner] if inner is not None else unused,
        tuple(ax for k, ax in enumerate(nest) if k not in (outer, inner)),
    )


def uop_count(nest: Nest, limits: Limits, pin_outer: bool = False) -> int:
    """Micro-ops :func:`lower_nest` would emit for this nest."""
    return int(np.prod([e for e, _ in _plan(nest, limits, pin_outer)[2]], dtype=np.int64))


@lru_cache(maxsize=4096)
def lower_nest(nest: Nest, base: tuple[int, int, int], limits: Limits, pin_outer: bool = False) -> MicroKernel:
    """One micro-kernel executing every point of ``nest`` (offset by ``base``)."""
    (no, fo), (ni, fi), rest = _plan(nest, limits, pin_outer)
    uops = np.array([base], np.int64)
    for ext, strides in rest:
        uops = (uops[:, None, :] + np.arange(ext)[None, :, None] * np.array(strides)[None, None, :]).reshape(-1, 3)
    if len(uops) > limits.max_uops:
        raise CompileError(
            f"a micro-kernel of {len(uops)} micro-ops exceeds the UOP buffer ({limits.max_uops}); use a smaller tile"
        )
    uops.setflags(write=False)
    return MicroKernel(uops, no, ni, tuple(fo), tuple(fi))
