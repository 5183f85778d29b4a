"""ctypes binding of the C++ simulation harness (hw/sim/harness.cpp).

A model built with assertions (the default build) stops on the first failed assertion; every call that
clocks the model then raises :class:`RtlAssertionError` naming the assertion, instead of returning.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from vdla.config import HwConfig
from vdla.runtime.backend import RunError

_SIGNATURES = {
    "vh_create": (ctypes.c_void_p, [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p]),
    "vh_destroy": (None, [ctypes.c_void_p]),
    "vh_traced": (ctypes.c_int, []),
    "vh_assertions": (ctypes.c_int, []),
    "vh_set_memory": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]),
    "vh_reset": (None, [ctypes.c_void_p]),
    "vh_write": (None, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]),
    "vh_read": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_uint32]),
    "vh_run": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64]),
    "vh_cycle": (ctypes.c_uint64, [ctypes.c_void_p]),
    "vh_trace_enable": (None, [ctypes.c_void_p, ctypes.c_int]),
    "vh_trace_len": (ctypes.c_uint64, [ctypes.c_void_p]),
    "vh_trace_copy": (None, [ctypes.c_void_p, ctypes.c_void_p]),
    "vh_bad_access": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
    "vh_stopped": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]),
}


class RtlAssertionError(RunError):
    """An assertion of the RTL failed: the model broke one of its own invariants (a bug in the RTL or in
    the harness driving it, never a property of the program). ``where`` is the assertion's file:line.
    A run error like the others (vdla derives no error from AssertionError), so the CLI reports it."""

    def __init__(self, where: str):
        self.where = where
        super().__init__(f"RTL assertion failed at {where}: {_assertion_text(where)}")


_CALL_LINES = 6  # the most lines an `ASSERT... call of the RTL spans


def _assertion_text(where: str) -> str:
    """The assertion's call (its label, property and message) from its source (best effort). ``where`` is the
    line the simulator names: the last line of the `ASSERT... macro call, whose first line is at most
    :data:`_CALL_LINES` lines above."""
    path, _, line = where.rpartition(":")
    try:
        lines = Path(path).read_text().splitlines()
        n = int(line) - 1
    except (OSError, ValueError):
        return "(source not found)"
    first = next((i for i in range(n, max(n - _CALL_LINES, -1), -1) if "`ASSERT" in lines[i]), n)
    return " ".join(text.strip() for text in lines[first : n + 1])[:300]


class Harness:
    """One Verilated accelerator with its AXI DRAM model; registers by byte offset."""

    def __init__(self, library: Path, cfg: HwConfig, wave: str | Path | None = None):
        self.lib = ctypes.CDLL(str(library))
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = res, args
        if wave is not None and not self.lib.vh_traced():
            raise ValueError("this harness library was built without waveform support")
        t = cfg.timing
        path = str(wave).encode() if wave is not None else None
        self.handle = self.lib.vh_create(t.dram_read_latency, t.dram_write_latency, t.dma_row_overhead, path)
        self._mem: np.ndarray | None = None

    def close(self) -> None:
        """Finish the waveform (if any) and free the model."""
        if self.handle:
            self.lib.vh_destroy(self.handle)
            self.handle = None

    def __del__(self) -> None:
        self.close()

    def set_memory(self, mem: np.ndarray, base: int) -> None:
        """Serve the AXI master from ``mem`` (contiguous uint8) at physical address ``base``, in place."""
        if mem.dtype != np.uint8 or not mem.flags.c_contiguous or not mem.flags.writeable:
            raise ValueError("the DRAM must be a writeable, contiguous uint8 array")
        self._mem = mem  # keep it alive while the model points into it
        self.lib.vh_set_memory(self.handle, mem.ctypes.data, base, mem.size)

    def reset(self) -> None:
        """Reset the model (and forget a failed assertion: the model runs again)."""
        self.lib.vh_reset(self.handle)

    def write(self, offset: int, value: int) -> None:
        self.lib.vh_write(self.handle, offset, value & 0xFFFFFFFF)
        self._check()

    def read(self, offset: int) -> int:
        value = self.lib.vh_read(self.handle, offset)
        self._check()
        return value

    def run(self, cycles: int) -> bool:
        """Clock up to ``cycles`` cycles; True once the interrupt line rises."""
        rc = self.lib.vh_run(self.handle, cycles)
        if rc == 2:
            self._check()
        return rc == 1

    @property
    def assertions(self) -> bool:
        """Whether the model checks the RTL's assertions (the default build) or not (the speed flavour)."""
        return bool(self.lib.vh_assertions())

    def stopped(self) -> str | None:
        """file:line of the assertion that stopped the model since its last reset, if one did."""
        where = ctypes.create_string_buffer(1024)
        if not self.lib.vh_stopped(self.handle, where, len(where)):
            return None
        return where.value.decode() or "(unknown location)"

    def _check(self) -> None:
        where = self.stopped()
        if where is not None:
            raise RtlAssertionError(where)

    @property
    def cycle(self) -> int:
        """Cycles since the last START took effect."""
        return self.lib.vh_cycle(self.handle)

    def trace(self, on: bool) -> None:
        """Record (cycle, started/completed bits) events from now on (and forget earlier ones)."""
        self.lib.vh_trace_enable(self.handle, int(on))

    def trace_events(self) -> np.ndarray:
        out = np.zeros(self.lib.vh_trace_len(self.handle), np.uint64)
        if out.size:
            self.lib.vh_trace_copy(self.handle, out.ctypes.data)
        return out

    def bad_access(self) -> int | None:
        """First DRAM address outside the region the model was asked for, if any."""
        addr = ctypes.c_uint64()
        return addr.value if self.lib.vh_bad_access(self.handle, ctypes.byref(addr)) else None
