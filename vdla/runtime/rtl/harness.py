"""ctypes binding of the C++ simulation harness (hw/sim/harness.cpp)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from vdla.config import HwConfig

_SIGNATURES = {
    "vh_create": (ctypes.c_void_p, [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p]),
    "vh_destroy": (None, [ctypes.c_void_p]),
    "vh_traced": (ctypes.c_int, []),
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
}


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
        self.lib.vh_reset(self.handle)

    def write(self, offset: int, value: int) -> None:
        self.lib.vh_write(self.handle, offset, value & 0xFFFFFFFF)

    def read(self, offset: int) -> int:
        return self.lib.vh_read(self.handle, offset)

    def run(self, cycles: int) -> bool:
        """Clock up to ``cycles`` cycles; True once the interrupt line rises."""
        return bool(self.lib.vh_run(self.handle, cycles))

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
