"""A simulated PYNQ board for the ``pynq`` backend: the accelerator's RTL behind the real ``pynq`` API.

:class:`SimulatedBoard` is a ``pynq.Device`` subclass. PYNQ 4 discovers devices through each subclass's
``_probe_``; this one answers when the environment variable ``VDLA_PYNQ_SIM`` names a configuration (a
preset or a JSON file), so ``pynq.Device.active_device``, ``pynq.MMIO`` and ``pynq.allocate`` reach it with
no board and no change to the driver. Defining the class registers it with that discovery. It is a test
fixture, not part of vdla (it runs the Verilated RTL: a board's install never imports it): tests_pynq's conftest
imports it, and names it in ``VDLA_PYNQ_DEVICES`` for the processes the tests start, whose pynq backend imports
it as a device plugin (:func:`vdla.runtime.pynq_backend.load_device_plugins`) before it asks pynq for a device.
The driver never names it. The board it models is the configuration's (a Zynq-7000 or a Zynq UltraScale+
board, by its part) with the accelerator's bitstream loaded:

* **Registers** (capability ``REGISTER_RW``: ``MMIO`` calls ``read_registers``/``write_registers``): the
  accelerator's AXI4-Lite slave at the configuration's ``reg_base_addr`` (where hw/fpga's block design puts it)
  is the register file of the Verilated RTL (:class:`~vdla.runtime.rtl.harness.Harness`). The PS's reset of
  the logic: on a Zynq-7000 the SLCR page models the lock/unlock keys and FPGA_RST_CTRL, whose FPGA0 reset
  resets the RTL; on a Zynq UltraScale+ the PS GPIO page models bank 5's DATA, DIRM and OEN registers, whose
  pin 95 (pl_resetn0) resets the RTL when it is driven low and released. Any other address is a bus error.
* **Time**: the RTL advances only when the board is looked at. While a run is in flight, each register
  read first lets the logic run up to :data:`CYCLES_PER_READ` cycles (stopping at the interrupt), as real
  time passes between two polls of a driver; register accesses themselves take their AXI4-Lite cycles.
* **Memory** (``allocate``/``flush``/``invalidate``): buffers live in the harness's DRAM (the board's CMA
  pool, at :data:`CMA_BASE` unless ``cma_base`` says otherwise), and the CPU sees them through a write-back
  cache that is not coherent with the accelerator's port. The cache is modelled at its worst: every line of a
  buffer is cached. A CPU write reaches DRAM only when ``flush`` covers its line (only dirty lines are written
  back, 32-byte lines as on the Cortex-A9); the CPU sees an accelerator write only after ``invalidate`` covers
  its line (which discards the CPU's lines, writing back dirty lines only at an unaligned edge, as Linux does on
  ARMv7). ``allocate(..., cacheable=False)`` gives a coherent (uncached) buffer instead.
"""

from __future__ import annotations

import os

import numpy as np
import pynq
from pynq.buffer import PynqBuffer

import vdla.runtime.registers as R
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.errors import VdlaError
from vdla.runtime.dram import Buffer, Dram
from vdla.runtime.pynq_backend import (
    FPGA_RST_CTRL,
    GPIO_DATA_5,
    GPIO_DIRM_5,
    GPIO_OEN_5,
    PL_RESETN0,
    PS_GPIO_BASE,
    PS_GPIO_SPAN,
    REGISTER_SPAN,
    SLCR_BASE,
    SLCR_LOCK,
    SLCR_LOCK_KEY,
    SLCR_SPAN,
    SLCR_UNLOCK,
    SLCR_UNLOCK_KEY,
)
from vdla.runtime.rtl.harness import Harness
from vdla.runtime.rtl.verilate import build

ENV = "VDLA_PYNQ_SIM"
CMA_BASE = 0x1700_0000  # not the config's dram_base_addr: the driver's relocation is exercised
CMA_BYTES = 128 << 20
LINE = 32  # Cortex-A9 L1 / PL310 L2 cache line
CYCLES_PER_READ = 1024  # about 10 us at 100 MHz: a poll of a Python loop on the Cortex-A9
SLCR_LOCKSTA = 0x00C


class BusError(VdlaError, RuntimeError):
    """An access to an address where the simulated board has no slave (a real board would hang or fault)."""


class _Bo:
    """A buffer object: its CMA block, the CPU's cached view of it and the cache's clean copy."""

    block: Buffer | None = None

    def __init__(self, board: SimulatedBoard, nbytes: int, cacheable: bool):
        self.board = board
        self.block: Buffer | None = board.cma.alloc(-(-max(nbytes, 1) // 4096) * 4096, 4096)
        self.phys = self.block.addr
        self.dram = board.cma.view(self.phys, self.block.nbytes)  # what the accelerator sees
        self.dram[:] = 0
        if cacheable:
            self.host = np.zeros(self.block.nbytes, np.uint8)  # what the CPU sees (its cache, every line)
            self.clean = np.zeros(self.block.nbytes, np.uint8)  # the lines as last written back or filled
        else:
            self.host = self.dram

    def free(self) -> None:
        """Give the CMA block back (PynqBuffer.freebuffer, or the last reference gone)."""
        if self.block is not None:
            self.board.cma.free(self.block)
            self.block = None

    def __del__(self) -> None:
        self.free()

    def _lines(self, offset: int, size: int) -> tuple[int, int]:
        return offset // LINE * LINE, min(-(-(offset + size) // LINE) * LINE, self.host.size)

    def _write_back(self, a: int, b: int) -> None:
        """Write the dirty lines of [a, b) (line aligned) back to DRAM."""
        host, clean = self.host[a:b], self.clean[a:b]
        dirty = np.repeat((host != clean).reshape(-1, LINE).any(axis=1), LINE)
        self.dram[a:b][dirty] = host[dirty]
        clean[dirty] = host[dirty]

    def flush(self, offset: int, size: int) -> None:
        a, b = self._lines(offset, size)
        self._write_back(a, b)

    def invalidate(self, offset: int, size: int) -> None:
        a, b = self._lines(offset, size)
        if offset % LINE:
            self._write_back(a, a + LINE)
        if (offset + size) % LINE:
            self._write_back(b - LINE, b)
        self.host[a:b] = self.dram[a:b]
        self.clean[a:b] = self.dram[a:b]


class SimulatedBoard(pynq.Device):
    """A PYNQ board whose programmable logic is the accelerator's RTL in Verilator (see the module doc)."""

    _probe_priority_ = 900

    @classmethod
    def _probe_(cls) -> list[SimulatedBoard]:
        config = os.environ.get(ENV)
        return [cls(config)] if config else []

    def __init__(self, config: str | HwConfig = DEFAULT_PRESET, assertions: bool = True, cma_base: int = CMA_BASE):
        self.cfg = load_config(config)
        where = "" if cma_base == CMA_BASE else f"-cma{cma_base:x}"  # a second board: its own lock file
        super().__init__(f"vdla-sim-{self.cfg.name}{where}")
        self.capabilities = {"REGISTER_RW": True}
        self.base = self.cfg.reg_base_addr
        self.zynqmp = self.cfg.part_spec.family == "xcup"  # else a Zynq-7000
        self.mem = np.zeros(CMA_BYTES, np.uint8)
        self.cma = Dram(CMA_BYTES, cma_base, mem=self.mem)
        self.harness = Harness(build(self.cfg, assertions=assertions).library, self.cfg)
        self.harness.set_memory(self.mem, cma_base)
        self._running = False
        self._slcr = {SLCR_LOCKSTA: 1, FPGA_RST_CTRL: 0}
        # bank 5 of the PS GPIO as psu_init leaves it: pl_resetn0 an output, driven high (released)
        self._gpio = {GPIO_DATA_5: PL_RESETN0, GPIO_DIRM_5: PL_RESETN0, GPIO_OEN_5: PL_RESETN0}
        self.resets = 0  # how many times the logic was reset through the PS (the SLCR or the PS GPIO)

    # ---- pynq.Device: memory --------------------------------------------------------------------
    def allocate(self, shape, dtype, cacheable: bool = True, **kwargs) -> PynqBuffer:
        """A buffer in the CMA pool, cached (flush/invalidate needed) unless ``cacheable=False``."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        bo = _Bo(self, nbytes, cacheable)
        buf = PynqBuffer(
            shape, dtype, buffer=bo.host, device=self, device_address=bo.phys, bo=bo, coherent=not cacheable
        )
        # PynqBuffer.freebuffer hands a pooled buffer's pointer back to its allocator: that frees the block
        # (there is no mapping to unmap: ``freed`` stops freebuffer's munmap branch)
        buf.memory, buf.pointer, buf.return_to, buf.freed = self, bo, self, True
        return buf

    def return_pointer(self, bo: _Bo) -> None:
        """``PynqBuffer.freebuffer``'s call: the buffer's CMA block is free again."""
        bo.free()

    def flush(self, bo: _Bo, offset: int, ptr: int, size: int) -> None:
        """Write the CPU's dirty lines of ``size`` bytes at ``offset`` in the buffer back to DRAM."""
        bo.flush(offset, size)

    def invalidate(self, bo: _Bo, offset: int, ptr: int, size: int) -> None:
        """Drop the CPU's lines of ``size`` bytes at ``offset``, so that it reads DRAM again."""
        bo.invalidate(offset, size)

    # ---- pynq.Device: registers -----------------------------------------------------------------
    def read_registers(self, address: int, length: int) -> bytes:
        words = [self._read32(address + i) for i in range(0, length, 4)]
        return b"".join(w.to_bytes(4, "little") for w in words)[:length]

    def write_registers(self, address: int, data: bytes) -> None:
        data = bytes(data) + b"\0" * (-len(data) % 4)
        for i in range(0, len(data), 4):
            self._write32(address + i, int.from_bytes(data[i : i + 4], "little"))

    def _slave(self, address: int) -> tuple[str, int]:
        if self.base <= address < self.base + REGISTER_SPAN:
            return "accel", address - self.base
        ps, ps_base, ps_span = ("gpio", PS_GPIO_BASE, PS_GPIO_SPAN) if self.zynqmp else ("slcr", SLCR_BASE, SLCR_SPAN)
        if ps_base <= address < ps_base + ps_span:
            return ps, address - ps_base
        raise BusError(
            f"no slave at {address:#x} on the simulated {self.cfg.name} board (the accelerator's registers are at "
            f"[{self.base:#x}, {self.base + REGISTER_SPAN:#x}), the {ps.upper()} at {ps_base:#x})"
        )

    def _read32(self, address: int) -> int:
        slave, offset = self._slave(address)
        if slave == "slcr":
            return self._slcr.get(offset, 0)
        if slave == "gpio":
            return self._gpio.get(offset, 0)
        if self._running:  # time passes between two looks at the board
            if self.harness.run(CYCLES_PER_READ) or not self.harness.read(R.offset("CONTROL")) & 1:
                self._running = False
        return self.harness.read(offset)

    def _write32(self, address: int, value: int) -> None:
        slave, offset = self._slave(address)
        if slave == "slcr":
            self._write_slcr(offset, value)
            return
        if slave == "gpio":
            self._write_gpio(offset, value)
            return
        self.harness.write(offset, value)
        if offset == R.offset("CONTROL") and R.get_field(value, "CONTROL", "START"):
            self._running = True

    def _write_slcr(self, offset: int, value: int) -> None:
        if offset == SLCR_UNLOCK and value == SLCR_UNLOCK_KEY:
            self._slcr[SLCR_LOCKSTA] = 0
        elif offset == SLCR_LOCK and value == SLCR_LOCK_KEY:
            self._slcr[SLCR_LOCKSTA] = 1
        elif not self._slcr[SLCR_LOCKSTA]:  # writes to a locked SLCR are ignored
            was = self._slcr.get(offset, 0)
            self._slcr[offset] = value
            if offset == FPGA_RST_CTRL and was & 1 and not value & 1:  # FCLK_RESET0_N released
                self.harness.reset()
                self._running = False
                self.resets += 1

    def _write_gpio(self, offset: int, value: int) -> None:
        was = self._gpio.get(offset, 0)
        self._gpio[offset] = value
        driven = self._gpio[GPIO_DIRM_5] & self._gpio[GPIO_OEN_5] & PL_RESETN0
        if offset == GPIO_DATA_5 and driven and not was & PL_RESETN0 and value & PL_RESETN0:  # pl_resetn0 released
            self.harness.reset()
            self._running = False
            self.resets += 1

    def close(self) -> None:
        """Free the RTL model."""
        self.harness.close()
