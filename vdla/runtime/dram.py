"""The accelerator's view of host memory: one contiguous, physically addressed DRAM region.

Like a CMA region on a PYNQ board, buffers are allocated inside it and carry physical addresses; the
instruction stream refers to them by address. Every backend runs against a :class:`Dram`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdla.errors import VdlaError


class DramError(VdlaError, ValueError):
    """A DRAM request outside the region, an allocation that does not fit, or a misaligned buffer."""


@dataclass(eq=False)
class Buffer:
    """A block of DRAM with a physical address, readable and writable as numpy arrays."""

    dram: Dram
    addr: int
    nbytes: int

    def view(self, dtype=np.uint8, shape=None) -> np.ndarray:
        """A numpy view of the buffer's bytes (no copy)."""
        arr = self.dram.view(self.addr, self.nbytes).view(dtype)
        return arr if shape is None else arr.reshape(shape)

    def write(self, array: np.ndarray, offset: int = 0) -> None:
        """Copy an array's bytes into the buffer at a byte offset."""
        data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        if offset < 0 or offset + data.size > self.nbytes:
            raise DramError(f"write of {data.size} bytes at offset {offset} overflows a {self.nbytes}-byte buffer")
        self.dram.view(self.addr + offset, data.size)[:] = data

    def read(self, dtype=np.uint8, shape=None) -> np.ndarray:
        """A copy of the buffer's contents."""
        return self.view(dtype, shape).copy()

    def elem(self, elem_bytes: int, offset: int = 0) -> int:
        """The buffer's address in units of an element size (the ISA's dram_base)."""
        addr = self.addr + offset
        if addr % elem_bytes:
            raise DramError(f"buffer address {addr:#x} is not aligned to the {elem_bytes}-byte element size")
        return addr // elem_bytes

    def free(self) -> None:
        self.dram.free(self)


class Dram:
    """A byte-addressed DRAM region [base, base + size) with a first-fit allocator."""

    def __init__(self, size: int, base: int = 0, mem: np.ndarray | None = None):
        self.size, self.base = size, base
        self.mem = np.zeros(size, dtype=np.uint8) if mem is None else mem
        self._free: list[tuple[int, int]] = [(0, size)]  # (offset, length), sorted
        self._live: dict[int, Buffer] = {}

    @property
    def range(self) -> tuple[int, int]:
        return self.base, self.base + self.size

    def alloc(self, nbytes: int, align: int = 4096) -> Buffer:
        """Allocate a buffer aligned to ``align`` bytes (a page by default, as CMA does)."""
        if nbytes <= 0:
            raise DramError(f"cannot allocate {nbytes} bytes")
        for i, (off, length) in enumerate(self._free):
            start = -(-(self.base + off) // align) * align - self.base
            if start + nbytes <= off + length:
                return self._take(i, start, nbytes)
        raise DramError(
            f"out of DRAM: no free block of {nbytes} bytes (region {self.size} bytes, "
            f"{sum(n for _, n in self._free)} free)"
        )

    def reserve(self, addr: int, nbytes: int) -> Buffer:
        """Allocate the buffer at exactly [addr, addr + nbytes), which must be free."""
        off = addr - self.base
        for i, (start, length) in enumerate(self._free):
            if start <= off and off + nbytes <= start + length and nbytes > 0:
                return self._take(i, off, nbytes)
        raise DramError(
            f"cannot reserve [{addr:#x}, {addr + nbytes:#x}): not inside one free block of the region "
            f"[{self.base:#x}, {self.base + self.size:#x})"
        )

    def _take(self, i: int, start: int, nbytes: int) -> Buffer:
        """Carve [start, start + nbytes) (region offsets) out of free block ``i``."""
        off, length = self._free[i]
        pieces = [(off, start - off), (start + nbytes, off + length - start - nbytes)]
        self._free[i : i + 1] = [p for p in pieces if p[1] > 0]
        buf = self._live[start] = Buffer(self, self.base + start, nbytes)
        return buf

    def free(self, buf: Buffer) -> None:
        off = buf.addr - self.base
        if self._live.get(off) is not buf:
            raise DramError(f"buffer at {buf.addr:#x} is not allocated")
        del self._live[off]
        blocks = sorted(self._free + [(off, buf.nbytes)])
        merged = [blocks[0]]
        for o, n in blocks[1:]:
            if merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((o, n))
        self._free = merged

    def view(self, addr: int, nbytes: int) -> np.ndarray:
        """A view of ``nbytes`` bytes at physical address ``addr``, bounds-checked."""
        off = addr - self.base
        if off < 0 or nbytes < 0 or off + nbytes > self.size:
            raise DramError(
                f"DRAM access [{addr:#x}, {addr + nbytes:#x}) outside the region "
                f"[{self.base:#x}, {self.base + self.size:#x})"
            )
        return self.mem[off : off + nbytes]
