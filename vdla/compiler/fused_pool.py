"""A max pool fused into a convolution's output tiles: the pooled tensor is the only one stored.

ResNet's first convolution is followed by a 3x3 stride-2 max pool. Run as two layers, the convolution writes
its 112x112 output to DRAM and the pool reads it back, copies it into the accumulators and reduces it
(:mod:`vdla.compiler.pool`). Fused, the pool's ALU passes run on each convolution tile where the GEMMs left
it, and only the pooled tile is requantized and stored.

Order of operations. The pool takes the window maximum of the *accumulators* (bias included), and the
epilogue (multiplier, shift, clamp: :mod:`vdla.compiler.epilogue_passes`) then runs on the pooled elements only, a
quarter of them for a stride of 2. This is exact because every step of that epilogue is non-decreasing, so
``max(f(a), f(b)) == f(max(a, b))``: a rounding shift, a clamp, and a multiplier ``0 <= m < 2^shift`` whose
rounded product always fits int32 (no wrap; :func:`vdla.compiler.epilogue_passes.pool_commutes` checks the values).

Geometry (per axis, kernel ``k``, stride ``s``, padding before ``p``; checked by :meth:`FusedPool.make`):
``s <= k < 2s``, ``p == k - s``, and the convolution's extent ``n`` is a multiple of ``s`` with ``n / s``
pooled outputs. Then pooled row ``i`` *owns* convolution rows ``[i*s, i*s + s)`` (its taps ``p..k-1``) and
*carries* the last ``p`` rows owned by pooled row ``i - 1`` (taps ``0..p-1``; padding for ``i = 0``). A
tile of ``toh`` convolution rows (a multiple of ``s``, every column) holds the rows its pooled rows own. The
carried rows of its first pooled row belong to the previous row tile of the same output channels, whose
accumulators the next tile of that thread may already have reset (virtual threads take turns with their
reduction steps); so every tile but an image's last row tile copies its last ``p`` rows into the *carry
region* (``p`` rows of every output-channel block, below the per-channel rows, shared by the threads) after
reading the rows its predecessor left there. The compute stage runs in program order and a tile's last step
comes after its predecessor's and before its successor's, whatever the thread count and tile order: each
channel block's carry rows are written by one row tile and read by the next. Padded taps are not read at all
(the maximum is over the taps inside the input), which is what a max pool's padding means.

Passes, per tile, on the last reduction step after the GEMMs (two-operand ALU instructions):

* rows, in place at each pooled row's first owned row ``i*s``: MAX with its other owned rows, then with its
  carried rows (in the tile, or from the carry region), then the tile's last rows copied into the carry
  region (ADD with reset); the rows written in place are never read as another pooled row's tap (``k < 2s``);
* columns, into a dense pooled region after the tile: the first owned column copied (ADD with reset), MAX
  with the other owned columns, then with the carried columns for every pooled column but the first.

Invariant: the stored tensor is ``max_pool(epilogue(conv + bias))`` bit for bit
(:func:`vdla.graph.oracle.pool2d` of :func:`vdla.graph.oracle.epilogue`).
"""

from __future__ import annotations

from dataclasses import dataclass

from vdla.compiler.blocks import Alu
from vdla.compiler.epilogue_passes import normalize, pool_commutes
from vdla.compiler.microcode import Limits, MicroKernel, lower_nest
from vdla.compiler.spec import CompileError, multiplier_kind
from vdla.graph.epilogue import Epilogue
from vdla.graph.window import Window
from vdla.isa import AluOp


def _kernel(nest, base: tuple[int, int], limits: Limits) -> MicroKernel:
    """A two-operand ALU kernel over ``nest`` ((extent, (dst stride, src stride)), outer first)."""
    return lower_nest(tuple((e, (d, s, 0)) for e, (d, s) in nest if e > 1), (*base, 0), limits)


@dataclass(frozen=True)
class FusedPool:
    """A max pool of ``window`` over a convolution output of ``conv_hw`` rows and columns, in its tiles."""

    window: Window
    conv_hw: tuple[int, int]

    @classmethod
    def make(cls, window: Window, conv_hw: tuple[int, int]) -> FusedPool:
        """A checked fused pool; raises CompileError naming the condition that fails (module docstring)."""
        if window.dilation != (1, 1):
            raise CompileError(f"a fused max pool takes dilation 1, got {window.dilation}")
        for axis, name in enumerate(("rows", "columns")):
            k, s, n = window.kernel[axis], window.stride[axis], conv_hw[axis]
            p = window.pad_before(axis)
            if not s <= k < 2 * s or p != k - s:
                raise CompileError(
                    f"a max pool fuses into the convolution's tiles when stride <= kernel < 2 x stride and the "
                    f"padding before is kernel - stride; along its {name} kernel {k}, stride {s}, padding {p}"
                )
            if n % s or window.out_size(*conv_hw)[axis] != n // s:
                raise CompileError(
                    f"a fused max pool needs the convolution's {n} {name} to be {s} per pooled output: "
                    f"the pool has {window.out_size(*conv_hw)[axis]}"
                )
        return cls(window, tuple(conv_hw))

    @classmethod
    def for_layer(cls, window: Window, conv_hw: tuple[int, int], ep: Epilogue) -> FusedPool:
        """The fused pool of a layer with epilogue ``ep``; raises CompileError naming why it would not be exact
        (the epilogue must be non-decreasing) or does not fit the tiles (:meth:`make`)."""
        if ep.residual or ep.rescale is not None:
            raise CompileError("a max pool cannot be fused before the requantization of a layer adding a residual")
        if not ep.table_is_monotonic():
            raise CompileError("a max pool cannot be fused before an activation table that is not non-decreasing")
        ep = normalize(ep)
        kind = multiplier_kind(ep.multiplier, ep.shift)
        if kind == "imm":
            raise CompileError("a max pool cannot be fused before an immediate multiplier: its product wraps")
        if kind == "row" and (why := pool_commutes(ep.multiplier, ep.shift)):
            raise CompileError(f"the max pool cannot be fused before the requantization: {why}")
        return cls.make(window, conv_hw)

    @property
    def out_hw(self) -> tuple[int, int]:
        return self.window.out_size(*self.conv_hw)

    @property
    def stride(self) -> tuple[int, int]:
        return self.window.stride

    def pooled_rows(self, conv_rows: int) -> int:
        return conv_rows // self.stride[0]

    def acc_elems(self, toc: int, toh: int) -> int:
        """Accumulator elements of the pooled region of a full-size tile (it follows the convolution tile)."""
        return toc * self.pooled_rows(toh) * self.out_hw[1]

    def carry_elems(self, blocks: int) -> int:
        """Accumulator elements of the carry region of ``blocks`` output-channel blocks."""
        return blocks * self.window.pad_before(0) * self.conv_hw[1]

    def passes(
        self, noc: int, noh: int, acc: int, carry: int, rows: tuple[bool, bool], out: int, limits: Limits
    ) -> list[Alu]:
        """The pool's ALU passes over ``noc`` channel blocks of a tile of ``noh`` convolution rows at ``acc``
        (block, row, column), into the pooled region at ``out`` (block, pooled row, pooled column); ``carry``
        is the blocks' carry region (block, row, column) and ``rows`` whether the tile reads it (it does not
        start the image) and writes it (it does not end the image)."""
        (sh, sw), ow, owp = self.stride, self.conv_hw[1], self.out_hw[1]
        top, left = self.window.pad_before(0), self.window.pad_before(1)
        read, write = rows
        nph, blk = self.pooled_rows(noh), noh * ow
        own = ((noc, (blk, blk)), (nph, (sh * ow, sh * ow)), (ow, (1, 1)))
        ops = [Alu(AluOp.MAX, _kernel(own, (acc, acc + u * ow), limits)) for u in range(1, sh)]
        for v in range(1, top + 1):
            if nph > 1:  # carried rows inside the tile
                nest = ((noc, (blk, blk)), (nph - 1, (sh * ow, sh * ow)), (ow, (1, 1)))
                ops.append(Alu(AluOp.MAX, _kernel(nest, (acc + sh * ow, acc + (sh - v) * ow), limits)))
            if read:  # the first pooled row's, left by the previous row tile
                nest = ((noc, (blk, top * ow)), (ow, (1, 1)))
                ops.append(Alu(AluOp.MAX, _kernel(nest, (acc, carry + (top - v) * ow), limits)))
        if write and top:  # the tile's last rows, for the next row tile
            nest = ((noc, (top * ow, blk)), (top * ow, (1, 1)))
            ops.append(Alu(AluOp.ADD, _kernel(nest, (carry, acc + (noh - top) * ow), limits), reset=True))
        cols = ((noc, (nph * owp, blk)), (nph, (owp, sh * ow)), (owp, (1, sw)))
        ops.append(Alu(AluOp.ADD, _kernel(cols, (out, acc), limits), reset=True))
        ops += [Alu(AluOp.MAX, _kernel(cols, (out, acc + u), limits)) for u in range(1, sw)]
        if owp > 1:
            carried = (*cols[:2], (owp - 1, (1, sw)))
            ops += [Alu(AluOp.MAX, _kernel(carried, (out + 1, acc + sw - v), limits)) for v in range(1, left + 1)]
        return ops
