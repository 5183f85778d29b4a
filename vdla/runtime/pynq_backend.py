"""The ``pynq`` backend: the accelerator on a PYNQ board, driven through the PYNQ library.

It drives every board preset (``vdla boards``): the Zynq-7000 boards (PYNQ-Z1/Z2) and the Zynq UltraScale+ ones
(AUP-ZU3, Ultra96-V2, KV260, KR260, ZCU104). What differs per board comes from the config (its preset): the
register base (``reg_base_addr``, where hw/fpga's block design puts the accelerator), the AXI address bits of
its DMA (``axi_addr_bits``: a buffer the accelerator cannot address is refused, naming its address), and the
PS's reset of the programmable logic (by the part's family, :data:`PL_RESETS`).

Written as a PYNQ user writes a driver: the accelerator's AXI4-Lite slave is a ``pynq.MMIO`` (found in a
``pynq.Overlay``'s ``ip_dict``, or at the config's register base on ``pynq.Device.active_device``), its
registers are those of :mod:`vdla.runtime.registers`, and all memory it reaches is ``pynq.allocate`` buffers:

* the DRAM region programs run against (:meth:`PynqBackend.make_dram`) is one ``pynq.allocate`` buffer;
  vdla's :class:`~vdla.runtime.dram.Dram` allocator places weights, micro-op kernels, activations and
  whole artifact images in it at vdla addresses (from the config's ``dram_base_addr``, as on every
  backend), so programs and artifacts built anywhere run here unchanged;
* before a run the driver copies the instruction stream into an instruction ``pynq.allocate`` buffer,
  rewriting each LOAD/STORE's DRAM address to the region's ``physical_address`` (after checking that
  every transfer lies inside the region: a bad program never reaches memory the region does not own);
* ``flush()`` covers what the accelerator reads and writes before START, ``invalidate()`` what it wrote
  after the run, so the CPU's cache and the accelerator's view of DRAM agree (PYNQ's buffers are cached
  and the HP ports are not coherent).

A run writes INSN_ADDR/INSN_COUNT, START, and polls IRQ.PENDING until it is set, the cycle limit passes or
``timeout_s`` seconds pass. Errors are the runtime's backend-neutral ones (:mod:`vdla.runtime.backend`),
explained from the registers by :mod:`vdla.runtime.diagnosis` exactly as on the ``rtl`` backend. After a
timeout the driver resets the programmable logic through the PS (the Zynq-7000's SLCR FPGA_RST_CTRL, the
Zynq UltraScale+'s PS GPIO pin of pl_resetn0), so the next run starts on an idle accelerator. One process at
a time owns the accelerator (a lock file).

``pynq`` is imported when the backend is created, never by ``import vdla.runtime``, together with the device
plugins: the modules of the entry-point group :data:`DEVICE_PLUGINS` (installed packages; vdla registers none)
and those named in the environment variable :data:`DEVICE_PLUGINS_ENV` (such as the simulated board of the pynq
tests, a test fixture). Each defines ``pynq.Device`` subclasses (a board without hardware), which pynq's device
discovery then probes like its own. The driver knows none of them; it asks pynq for the device as on any board.
What a board imports to run programs neither builds nor runs the RTL.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np

import vdla.runtime.registers as R
from vdla.config import HwConfig
from vdla.isa import ISA_VERSION, MemType, Opcode, decode
from vdla.isa.asm import disassemble_insn
from vdla.isa.validate import check_insn, elem_bytes
from vdla.runtime.backend import BackendError, CycleLimitError, FaultError, RunError, RunResult, TokenError
from vdla.runtime.diagnosis import Diagnosis, Program, token_counts
from vdla.runtime.dram import Dram

REGISTER_SPAN = R.SPAN  # the address window the block design gives the slave (it decodes R.ADDR_BITS = 9)
DEFAULT_DRAM_BYTES = 64 << 20  # the DRAM region: part of the board's CMA pool
DEFAULT_TIMEOUT_S = 30.0
PAGE = 4096
DEVICE_PLUGINS = "vdla.pynq_devices"  # entry-point group: modules defining pynq.Device subclasses
DEVICE_PLUGINS_ENV = "VDLA_PYNQ_DEVICES"  # further such modules, comma-separated (importable by name)

ISA_ADDR_FIELD_BITS = 32  # a LOAD/STORE's DRAM address field: an element index (vdla.isa.instructions)

# The Zynq-7000 System Level Control Registers (UG585, appendix B.28): the PL reset FCLK_RESET0_N.
SLCR_BASE = 0xF800_0000
SLCR_SPAN = 0x1000
SLCR_LOCK, SLCR_UNLOCK, SLCR_LOCK_KEY, SLCR_UNLOCK_KEY = 0x004, 0x008, 0x767B, 0xDF0D
FPGA_RST_CTRL = 0x240  # bit 0: FPGA0_OUT_RST (1 holds FCLK_RESET0_N low)

# Zynq UltraScale+: the PL resets are EMIO pins of the PS GPIO (UG1085, GPIO; psu_init releases them after
# configuration): pl_resetn0 is EMIO pin 95, bit 31 of bank 5, whose DATA register holds the pins' output.
PS_GPIO_BASE = 0xFF0A_0000
PS_GPIO_SPAN = 0x1000
GPIO_DATA_5, GPIO_DIRM_5, GPIO_OEN_5 = 0x054, 0x344, 0x348
PL_RESETN0 = 1 << 31

# The PL reset hw/fpga's block design resets the accelerator from, by the part's family (vdla.parts)
PL_RESETS = {"xc7": "FCLK_RESET0_N (the SLCR's FPGA_RST_CTRL)", "xcup": "pl_resetn0 (PS GPIO EMIO pin 95)"}

_LOAD_TYPES = tuple(m for m in MemType if m != MemType.OUT)


class BoardTimeoutError(RunError):
    """The board did not end the run (IRQ.PENDING) within the driver's timeout."""


def board_base_addr(cfg: HwConfig) -> int:
    """Where the accelerator's registers are on the config's board: its preset's ``reg_base_addr`` (where
    hw/fpga's block design puts them)."""
    return cfg.reg_base_addr


def import_pynq():
    """The ``pynq`` package with the device plugins imported (:func:`load_device_plugins`), or a BackendError
    saying how to get it."""
    try:
        import pynq
    except ImportError as e:
        raise BackendError(
            f"the pynq backend needs the pynq package ({e}): on a PYNQ board it is installed with the image; "
            "elsewhere `make test-pynq` builds a second environment (.venv-pynq) with it. pynq is not a "
            "dependency of vdla and never goes into the main environment (it pins numpy<2)."
        ) from e
    load_device_plugins()
    return pynq


@cache
def load_device_plugins() -> tuple[str, ...]:
    """Import every device plugin, once per process, before pynq discovers its devices (its discovery probes
    every ``pynq.Device`` subclass defined by then): the modules of the :data:`DEVICE_PLUGINS` entry-point group,
    then those :data:`DEVICE_PLUGINS_ENV` names; returns the plugins' names. A plugin that fails to import is a
    BackendError naming it."""
    named = [m.strip() for m in os.environ.get(DEVICE_PLUGINS_ENV, "").split(",") if m.strip()]
    plugins = [(ep.name, ep.value, ep.load) for ep in entry_points(group=DEVICE_PLUGINS)]
    plugins += [(m, f"${DEVICE_PLUGINS_ENV}", lambda m=m: importlib.import_module(m)) for m in named]
    for name, source, load in plugins:
        try:
            load()
        except Exception as e:
            raise BackendError(f"the pynq device plugin {name!r} ({source}) failed to import: {e}") from e
    return tuple(name for name, _, _ in plugins)


@dataclass
class _Stream:
    """An instruction stream checked and relocated for the board."""

    words: np.ndarray  # (n, 2) uint64: the relocated instructions
    flush: tuple[int, int] | None  # [lo, hi) region offsets the accelerator reads or writes
    invalidate: tuple[int, int] | None  # [lo, hi) region offsets it writes


class _BoardLock:
    """One process at a time per accelerator: an exclusive ``flock`` on a file named after the device and
    the register base address, holding the owner's process id."""

    def __init__(self, tag: str, base: int):
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", tag)
        self.path = Path(tempfile.gettempdir()) / f"vdla-pynq-{name}-{base:x}.lock"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            self.fd = -1
            raise BackendError(
                f"the accelerator at {base:#x} on {tag!r} is in use by process {holder} (lock {self.path}); "
                "close that process's device first"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


class PynqBackend:
    """Runs programs on the accelerator of a PYNQ board (or of any ``pynq.Device`` pynq discovers, such as a
    simulated board a device plugin defines, :func:`load_device_plugins`).

    ``overlay``: a ``pynq.Overlay`` or the path of its ``.bit`` (loaded with ``pynq.Overlay``); the
    accelerator is the IP whose name or VLNV contains ``ip_name``. Without an overlay, the registers are at
    ``base_addr`` (default: the config's ``reg_base_addr``) on ``pynq.Device.active_device`` (the bitstream
    already loaded). ``dram_bytes``: size of
    the DRAM region allocated from the board's CMA pool; ``timeout_s``: how long a run may take before the
    board is declared stuck; ``poll_s``: sleep between polls of IRQ.PENDING.
    """

    name = "pynq"

    def __init__(
        self,
        cfg: HwConfig,
        overlay: object | str | Path | None = None,
        base_addr: int | None = None,
        ip_name: str = "vdla",
        dram_bytes: int = DEFAULT_DRAM_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        poll_s: float = 0.0,
    ):
        self.pynq = import_pynq()
        self.cfg, self.timeout_s, self.poll_s = cfg, timeout_s, poll_s
        self.dram_bytes = min(dram_bytes, cfg.dram_bytes)
        if overlay is not None:
            if isinstance(overlay, str | Path):
                overlay = self.pynq.Overlay(str(overlay))
            self.overlay = overlay
            self.device = overlay.device
            base, span = self._find_ip(overlay.ip_dict, ip_name)
        else:
            self.overlay = None
            try:
                self.device = self.pynq.Device.active_device
            except RuntimeError as e:  # pynq's "No Devices Found"
                raise BackendError(
                    f"pynq finds no device ({e}): run on a PYNQ board with the accelerator's overlay loaded "
                    f"(device plugins loaded: {', '.join(load_device_plugins()) or 'none'}; docs/deploy-pynq.md, "
                    "Testing without a board)"
                ) from e
            base, span = (board_base_addr(cfg) if base_addr is None else base_addr), REGISTER_SPAN
        self.base_addr = base
        self._lock = _BoardLock(getattr(self.device, "tag", type(self.device).__name__), base)
        self._running = threading.Lock()
        self._regions: list[tuple[Dram, object]] = []  # (vdla DRAM, its pynq buffer)
        self._insn = None  # the instruction buffer, grown as programs need
        self._ps_regs = None  # the PS's registers the PL reset is behind (the SLCR or the PS GPIO)
        try:
            self.mmio = self.pynq.MMIO(base, span, device=self.device)
            self.diagnosis = Diagnosis(cfg, self._read)
            self._check_identity()
        except BaseException:
            self._lock.release()
            raise

    # ---- opening ------------------------------------------------------------------------------
    @staticmethod
    def _find_ip(ip_dict: dict, ip_name: str) -> tuple[int, int]:
        found = [(name, ip) for name, ip in ip_dict.items() if ip_name in name or ip_name in str(ip.get("type", ""))]
        if len(found) != 1:
            raise BackendError(
                f"the overlay has {len(found)} IPs matching {ip_name!r} (it has {', '.join(ip_dict) or 'none'}): "
                "pass ip_name= to choose the accelerator"
            )
        _, ip = found[0]
        return int(ip["phys_addr"]), int(ip["addr_range"])

    def _read(self, offset: int) -> int:
        return int(self.mmio.read(offset))

    def _write(self, offset: int, value: int) -> None:
        self.mmio.write(offset, int(value) & 0xFFFFFFFF)

    def _check_identity(self) -> None:
        """Refuse a bitstream of another ISA version or hardware configuration, naming both."""
        ident, got_hash = self._read(R.offset("ID")), self._read(R.offset("CONFIG_HASH"))
        where = f"at {self.base_addr:#x} on {getattr(self.device, 'tag', self.device)!r}"
        if ident >> 16 != R.ID_MAGIC:
            raise BackendError(
                f"no vdla accelerator {where}: ID reads {ident:#010x}, not the magic {R.ID_MAGIC:#06x} in bits "
                "31:16 (is the overlay loaded, and is this the accelerator's base address?)"
            )
        version = ident & 0xFFFF
        if version != ISA_VERSION or got_hash != self.cfg.hash:
            raise BackendError(
                f"the bitstream {where} was built for ISA version {version}, config hash {got_hash:#010x}; the "
                f"device's config {self.cfg.name!r} needs ISA version {ISA_VERSION}, config hash "
                f"{self.cfg.hash:#010x}: load the overlay built from this config (hw/fpga), or compile for the "
                "bitstream's config"
            )

    # ---- memory -------------------------------------------------------------------------------
    def make_dram(self) -> Dram:
        """The DRAM region: one ``pynq.allocate`` buffer, addressed from the config's ``dram_base_addr``."""
        buf = self.pynq.allocate((self.dram_bytes,), np.uint8, target=self.device)
        delta = int(buf.physical_address) - self.cfg.dram_base_addr
        try:
            if delta % PAGE:
                raise BackendError(f"pynq.allocate returned a buffer at {buf.physical_address:#x}, not page aligned")
            self._check_reach(buf, "the DRAM region")
        except BackendError:
            buf.freebuffer()
            raise
        dram = Dram(self.dram_bytes, self.cfg.dram_base_addr, mem=buf)
        self._regions.append((dram, buf))
        return dram

    def _region(self, dram: Dram):
        for d, buf in self._regions:
            if d is dram:
                return buf
        raise BackendError(
            "the DRAM passed to the pynq backend is not one of its pynq.allocate regions: create it with "
            "backend.make_dram() (a Device does), so that the accelerator can reach it"
        )

    def _check_reach(self, buf, what: str) -> None:
        """Refuse a buffer the accelerator's AXI master cannot address (past 2**axi_addr_bits), naming it."""
        lo = int(buf.physical_address)
        hi = lo + int(buf.nbytes)
        if hi > 1 << self.cfg.axi_addr_bits:
            raise BackendError(
                f"{what} at physical address {lo:#x} (to {hi:#x}) is past the {self.cfg.axi_addr_bits} address bits "
                f"of config {self.cfg.name!r}'s AXI master (axi_addr_bits: up to {1 << self.cfg.axi_addr_bits:#x}): "
                "allocate it in memory the accelerator reaches (the board's CMA pool in low DDR)"
            )

    def _insn_buffer(self, nbytes: int):
        if self._insn is None or self._insn.nbytes < nbytes:
            cap = PAGE
            while cap < nbytes:
                cap *= 2
            if self._insn is not None:
                self._insn.freebuffer()
                self._insn = None
            buf = self.pynq.allocate((cap,), np.uint8, target=self.device)
            try:
                self._check_reach(buf, "the instruction buffer")
            except BackendError:
                buf.freebuffer()
                raise
            self._insn = buf
        return self._insn

    def _relocate(self, dram: Dram, phys: int, insn_addr: int, count: int) -> _Stream:
        """Check the stream's fetch and every LOAD/STORE against the region, and move their DRAM addresses
        from vdla addresses to the region's physical address. Instructions the fetch unit will reject (an
        unknown opcode or memory type) and everything after them are left for the hardware to report."""
        nbytes = count * self.cfg.insn_bytes
        if insn_addr % 16:
            raise FaultError(f"cannot fetch the program: address {insn_addr:#x} is not 16-byte aligned")
        lo_r, hi_r = dram.range
        if insn_addr < lo_r or insn_addr + nbytes > hi_r:
            raise FaultError(
                f"cannot fetch the program: its {nbytes} bytes at {insn_addr:#x} lie outside the DRAM region "
                f"[{lo_r:#x}, {hi_r:#x})"
            )
        words = np.frombuffer(bytes(dram.view(insn_addr, nbytes)), dtype="<u8").reshape(count, 2).copy()
        lo, hi = words[:, 0], words[:, 1]
        op = (lo & 7).astype(np.int64)
        mem = ((lo >> 7) & 7).astype(np.int64)
        is_mem = op <= Opcode.STORE
        rejected = (op > max(Opcode)) | (is_mem & (mem > max(MemType)))
        reached = np.arange(count) < (int(np.argmax(rejected)) if rejected.any() else count)
        y, x, stride = (hi & 0xFFFF).astype(np.int64), ((hi >> 16) & 0xFFFF).astype(np.int64), (hi >> 32) & 0xFFFF
        loads = (op == Opcode.LOAD) & np.isin(mem, _LOAD_TYPES)
        stores = (op == Opcode.STORE) & (mem == MemType.OUT)
        dma = (loads | stores) & (x > 0) & (y > 0) & reached
        eb = np.zeros(8, np.int64)
        for m in MemType:
            eb[m] = elem_bytes(self.cfg, m)
        ebs = eb[mem]
        base = ((lo >> 26) & 0xFFFFFFFF).astype(np.int64)
        first = base * ebs
        last = first + ((y - 1) * stride.astype(np.int64) + x) * ebs
        outside = dma & ((first < lo_r) | (last > hi_r))
        if outside.any():
            i = int(np.argmax(outside))
            insn = decode(int(lo[i]) | int(hi[i]) << 64)
            problems = check_insn(insn, self.cfg, dram.range)
            raise FaultError(f"instruction {i} ({disassemble_insn(insn)}): {'; '.join(problems)}")
        delta = phys - lo_r
        new_base = base + np.where(dma, delta // np.maximum(ebs, 1), 0)
        past = dma & (new_base + (y - 1) * stride.astype(np.int64) + x > 1 << ISA_ADDR_FIELD_BITS)
        if past.any():  # the region lies beyond what the instruction's element index reaches for this type
            i = int(np.argmax(past))
            insn = decode(int(lo[i]) | int(hi[i]) << 64)
            raise FaultError(
                f"instruction {i} ({disassemble_insn(insn)}): the DRAM region at physical address {phys:#x} lies "
                f"past the {ISA_ADDR_FIELD_BITS}-bit element index of its {MemType(int(mem[i])).name} transfers "
                f"({int(ebs[i])}-byte elements reach {int(ebs[i]) << ISA_ADDR_FIELD_BITS:#x}): allocate the region "
                "lower (the board's CMA pool in low DDR)"
            )
        field = np.uint64(0xFFFFFFFF << 26)
        words[:, 0] = (lo & ~field) | ((new_base.astype(np.uint64) << np.uint64(26)) & field)

        def cover(sel: np.ndarray) -> tuple[int, int] | None:
            return (int(first[sel].min()) - lo_r, int(last[sel].max()) - lo_r) if sel.any() else None

        return _Stream(words, cover(dma), cover(dma & stores))

    # ---- running ------------------------------------------------------------------------------
    def run(
        self,
        dram: Dram,
        insn_addr: int,
        insn_count: int,
        max_cycles: int | None = None,
        timeline: bool = False,
        functional: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Execute ``insn_count`` instructions at ``insn_addr`` on the board; raise like the other backends.
        The board always executes the data path (``functional`` changes nothing) and records no timeline."""
        if not self._running.acquire(blocking=False):
            raise BackendError("a run is already in flight on this pynq backend (one run at a time)")
        try:
            return self._run(dram, insn_addr, insn_count, max_cycles)
        finally:
            self._running.release()

    def _run(self, dram: Dram, insn_addr: int, insn_count: int, max_cycles: int | None) -> RunResult:
        t0 = time.perf_counter()
        region = self._region(dram)
        phys = int(region.physical_address)
        stream = self._relocate(dram, phys, insn_addr, insn_count)
        self._wait_idle()
        code = self._insn_buffer(max(stream.words.nbytes, 16))
        code[: stream.words.nbytes] = stream.words.view(np.uint8).reshape(-1)
        code[: stream.words.nbytes].flush()
        if stream.flush:
            region[stream.flush[0] : stream.flush[1]].flush()
        self._write(R.offset("IRQ"), 1)
        self._write(R.offset("IRQ_ENABLE"), 1)
        addr = int(code.physical_address)
        self._write(R.offset("INSN_ADDR_LO"), addr)
        self._write(R.offset("INSN_ADDR_HI"), addr >> 32)
        self._write(R.offset("INSN_COUNT"), insn_count)
        self._write(R.offset("CONTROL"), 1)
        ended, timed_out = self._poll(max_cycles)
        program = Program(dram, insn_addr, insn_count, self.cfg)
        if not ended:  # one snapshot of the stages first: the accelerator runs on while the driver reads
            snap = self.diagnosis.stage_state()
            where = self.diagnosis.running(program, None, snap) + "\n" + self.diagnosis.describe(program, snap)
        counters = R.read_counters(self._read, insn_bytes=insn_count * self.cfg.insn_bytes)
        status = self._read(R.offset("STATUS"))
        if not ended:
            self._reset_logic()
        else:
            self._write(R.offset("IRQ"), 1)
        if stream.invalidate:
            region[stream.invalidate[0] : stream.invalidate[1]].invalidate()
        if ended and R.get_field(status, "STATUS", "ERROR"):
            raise self.diagnosis.error(status, program, dram)
        if timed_out:
            raise BoardTimeoutError(
                f"the board did not end the run within {self.timeout_s:g} s ({counters.cycles} cycles) at {where}; "
                "the programmable logic was reset and is ready for the next run"
            )
        if not ended or (max_cycles is not None and counters.cycles > max_cycles):
            raise CycleLimitError(
                f"cycle limit {max_cycles} reached at "
                + (where if not ended else self.diagnosis.running(program, counters))
                + ("" if not ended else "\n" + self.diagnosis.describe(program))
            )
        leftover = {q.label: n for q, n in token_counts(self._read(R.offset("TOKENS"))).items() if n}
        if leftover:
            raise TokenError(f"the program ended with tokens left in queues: {leftover}")
        return RunResult(counters, [], time.perf_counter() - t0)

    def _cycles(self) -> int:
        lo = self._read(R.offset("CYCLES"))
        return lo | self._read(R.offset("CYCLES") + 4) << 32

    def _poll(self, max_cycles: int | None) -> tuple[bool, bool]:
        """Wait for IRQ.PENDING: (ended, timed out). Stops early once the CYCLES counter passes
        ``max_cycles``."""
        deadline = time.monotonic() + self.timeout_s
        irq = R.offset("IRQ")
        while True:
            if R.get_field(self._read(irq), "IRQ", "PENDING"):
                return True, False
            if max_cycles is not None and self._cycles() > max_cycles + 1:
                return bool(R.get_field(self._read(irq), "IRQ", "PENDING")), False
            if time.monotonic() > deadline:
                return False, True
            if self.poll_s:
                time.sleep(self.poll_s)

    def _busy(self) -> bool:
        return bool(R.get_field(self._read(R.offset("CONTROL")), "CONTROL", "START"))

    def _wait_idle(self) -> None:
        """A run can start only on an idle accelerator (START is ignored while busy): wait for one that is
        still busy (started outside this driver), then reset the logic."""
        deadline = time.monotonic() + self.timeout_s
        while self._busy():
            if time.monotonic() > deadline:
                self._reset_logic()
                return
            if self.poll_s:
                time.sleep(self.poll_s)

    def _reset_logic(self) -> None:
        """Reset the programmable logic through the PS (:data:`PL_RESETS`: the Zynq-7000's FCLK_RESET0_N through
        the SLCR's FPGA_RST_CTRL, Zynq UltraScale+'s pl_resetn0 through its PS GPIO pin), then check that the
        accelerator is back, idle and the same bitstream."""
        if self.cfg.part_spec.family == "xc7":
            if self._ps_regs is None:
                self._ps_regs = self.pynq.MMIO(SLCR_BASE, SLCR_SPAN, device=self.device)
            slcr = self._ps_regs
            slcr.write(SLCR_UNLOCK, SLCR_UNLOCK_KEY)
            value = int(slcr.read(FPGA_RST_CTRL))
            slcr.write(FPGA_RST_CTRL, value | 1)
            slcr.write(FPGA_RST_CTRL, value & ~1 & 0xFFFFFFFF)
            slcr.write(SLCR_LOCK, SLCR_LOCK_KEY)
        else:
            if self._ps_regs is None:
                self._ps_regs = self.pynq.MMIO(PS_GPIO_BASE, PS_GPIO_SPAN, device=self.device)
            gpio = self._ps_regs
            for reg in (GPIO_DIRM_5, GPIO_OEN_5):  # an output (psu_init makes it one; a reset must not rely on it)
                gpio.write(reg, int(gpio.read(reg)) | PL_RESETN0)
            value = int(gpio.read(GPIO_DATA_5))
            gpio.write(GPIO_DATA_5, value & ~PL_RESETN0 & 0xFFFFFFFF)
            gpio.write(GPIO_DATA_5, value | PL_RESETN0)
        if self._busy():
            raise BackendError(
                f"the accelerator at {self.base_addr:#x} is still busy after a reset of the programmable logic "
                f"({PL_RESETS[self.cfg.part_spec.family]}): reload the overlay"
            )
        self._check_identity()

    def close(self) -> None:
        """Free the buffers and let another process open the accelerator."""
        for _, buf in self._regions:
            buf.freebuffer()
        self._regions.clear()
        if self._insn is not None:
            self._insn.freebuffer()
            self._insn = None
        self._lock.release()

    def __del__(self) -> None:
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()
