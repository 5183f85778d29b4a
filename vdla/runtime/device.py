"""The device: a hardware configuration, a backend, and the DRAM region programs run against."""

from __future__ import annotations

import numpy as np

from vdla.config import HwConfig, load_config
from vdla.isa import Insn, encode_program
from vdla.runtime.backend import Backend, RunResult, make_backend
from vdla.runtime.commands import CommandBuilder
from vdla.runtime.dram import Buffer


class Device:
    """An accelerator behind one backend (``sim``, ``rtl`` or ``pynq``) with its DRAM allocator.

    >>> dev = Device("pynq")
    >>> a = dev.array(np.zeros((4, 16), np.int8))
    >>> cmd = dev.commands()
    """

    def __init__(self, config: str | HwConfig | None = None, backend: str | Backend = "sim", **options):
        self.cfg = load_config(config)
        self.backend = make_backend(backend, self.cfg, **options) if isinstance(backend, str) else backend
        self.dram = self.backend.make_dram()

    def alloc(self, nbytes: int, align: int = 4096) -> Buffer:
        """Allocate a DRAM buffer with a physical address."""
        return self.dram.alloc(nbytes, align)

    def array(self, data: np.ndarray, align: int = 4096) -> Buffer:
        """Allocate a buffer holding a copy of ``data``."""
        data = np.ascontiguousarray(data)
        buf = self.alloc(max(data.nbytes, 1), align)
        buf.write(data)
        return buf

    def commands(self) -> CommandBuilder:
        """A fresh command builder for one program."""
        return CommandBuilder(self)

    def run_program(
        self, insns: list[Insn], max_cycles: int | None = None, timeline: bool = False, functional: bool = True
    ) -> RunResult:
        """Place a finished program in DRAM and run it on the backend (``functional=False``: timing only, see
        :class:`~vdla.runtime.backend.Backend`); the program's buffer is freed afterwards."""
        code = encode_program(insns)
        buf = self.alloc(len(code))
        try:
            buf.write(np.frombuffer(code, np.uint8))
            return self.backend.run(
                self.dram, buf.addr, len(insns), max_cycles=max_cycles, timeline=timeline, functional=functional
            )
        finally:
            buf.free()
