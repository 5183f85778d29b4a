"""The DRAM tensors each step reads and writes, and their lifetimes for the memory plan
(:class:`TensorLifetimes`, a part of :class:`vdla.model.lower.ModelBuilder`).
"""

from __future__ import annotations

import numpy as np

from vdla.compiler import CompileError
from vdla.model.match import AccelLayer, PoolLayer
from vdla.model.memplan import Lifetime


class TensorLifetimes:
    """The model builder's tensor lifetimes (a mixin of :class:`~vdla.model.lower.ModelBuilder`, whose planned
    tensors it reads: ``steps``, ``pending``, ``dram``, ``views``)."""

    def accel_reads(self, layer: AccelLayer) -> list[str]:
        reads = [self.read_tensor(layer.x, self.cfg.block_in)]
        if layer.out in self.up_reads:  # the tensor an upsampled part of its input is read from
            reads.append(self.read_tensor(self.up_reads[layer.out][0], self.cfg.block_in))
        if layer.residual:
            reads.append(self.read_tensor(layer.residual, self.cfg.block_out))
        if layer.w:
            reads.append(self.weight_tensor(layer.w))
        if layer.gate is not None:
            reads.append(self.read_tensor(layer.gate.residual, self.cfg.block_out))
        return reads

    def accel_writes(self, layer: AccelLayer | PoolLayer) -> list[str]:
        """The DRAM tensors an accelerator layer writes: its output's, a fused global average's, and that of the
        upsampling it also stores (:meth:`copy_of`)."""
        gap = [self.pending[layer.gap.out]] if layer.gap is not None else []
        copy = [self.pending[p]] if (p := self.copy_phase(layer.out)) is not None else []
        return [self.pending[layer.out]] + gap + copy

    def view_writes(self, layer: AccelLayer | PoolLayer) -> set[str]:
        """The DRAM tensors ``layer`` writes through a view: other steps write other parts of them."""
        own = {self.pending[layer.out]} if layer.out in self.views else set()
        return own | ({self.pending[p]} if (p := self.copy_phase(layer.out)) is not None else set())

    def lifetimes(self) -> list[Lifetime]:
        """Each DRAM tensor of the arena from the step writing it to the last step reading it (the tensors the image
        holds, ``image_tensors``, live outside it for the whole run)."""
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, (kind, s) in enumerate(self.steps):
            if kind == "accel":
                reads, writes = self.accel_reads(s), self.accel_writes(s)
            else:
                reads, writes = list(s.dram_inputs.values()), list(s.dram_outputs.values())
            for t in writes:
                if t in first and not (kind == "accel" and t in self.view_writes(s)):  # views share their tensor
                    raise CompileError(f"DRAM tensor {t!r} is written twice (steps {first[t]} and {i})")
                first.setdefault(t, i)
                last[t] = max(last.get(t, i), i)
            for t in reads:
                if t in self.image_tensors:  # the image holds it: no step writes it first
                    continue
                if t not in first:
                    raise CompileError(f"step {i} reads DRAM tensor {t!r} before any step writes it")
                last[t] = max(last[t], i)
        return [
            Lifetime(t, int(np.prod(shape)) * np.dtype(dtype).itemsize, first[t], last[t])
            for t, (shape, dtype) in self.dram.items()
            if t not in self.image_tensors
        ]
