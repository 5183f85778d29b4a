"""The simulated board as pynq sees it, and the driver's dealings with it: discovery, registers, the
non-coherent cache (a driver that skips a flush or an invalidate computes wrong data), refusals."""

from __future__ import annotations

import numpy as np
import pynq
import pytest
from pynq_sim import CMA_BASE, LINE, BusError, SimulatedBoard

from vdla.config import load_config
from vdla.isa import ISA_VERSION, AluOp, MemType, Stage
from vdla.runtime import BackendError, Device, Dram
from vdla.runtime import registers as R
from vdla.runtime.pynq_backend import PynqBackend, board_base_addr


def add_program(dev: Device, data: np.ndarray, imm: int):
    """ACC <- data; ACC += imm; OUT (int8) -> DRAM. Returns (output buffer, run result)."""
    acc = dev.array(data.reshape(4, 1, 16))
    out = dev.alloc(4 * 16)
    cmd = dev.commands()
    cmd.load(MemType.ACC, 0, acc, 0, 1, 4, 4)
    cmd.alu(AluOp.ADD, [(0, 0)], iter_out=4, dst_factor=(1, 0), imm=imm)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(0, out, 0, 1, 4, 4)
    return out, cmd.synchronize()


def expected(data: np.ndarray, imm: int) -> np.ndarray:
    return (data.reshape(4, 16) + imm).astype(np.int8)


def test_pynq_discovers_the_simulated_board_through_probe(board):
    assert board in pynq.Device.devices
    assert pynq.Device.active_device is board
    assert board.has_capability("REGISTER_RW") and not board.has_capability("MEMORY_MAPPED")
    regs = pynq.MMIO(board_base_addr(load_config("pynq")), 0x100)
    ident = regs.read(R.offset("ID"))
    assert ident >> 16 == R.ID_MAGIC and ident & 0xFFFF == ISA_VERSION
    assert regs.read(R.offset("CONFIG_HASH")) == load_config("pynq").hash
    regs.write(R.offset("IRQ_ENABLE"), 1)
    assert regs.read(R.offset("IRQ_ENABLE")) == 1
    regs.write(R.offset("IRQ_ENABLE"), 0)
    with pytest.raises(BusError, match="no slave at 0x40000000"):
        pynq.MMIO(0x4000_0000, 4).read(0)


def test_cpu_writes_reach_the_accelerator_only_after_flush(board):
    buf = pynq.allocate((3 * LINE,), np.uint8)
    assert buf.physical_address >= CMA_BASE and buf.physical_address % 4096 == 0
    dram = board.cma.view(buf.physical_address, buf.nbytes)
    buf[:] = 7
    assert not dram.any()  # still in the CPU's cache
    buf[LINE : LINE + 1].flush()  # one byte: its whole line is written back, no other line
    assert (dram[LINE : 2 * LINE] == 7).all() and not dram[:LINE].any() and not dram[2 * LINE :].any()
    buf.flush()
    assert (dram == 7).all()


def test_accelerator_writes_reach_the_cpu_only_after_invalidate(board):
    buf = pynq.allocate((2 * LINE,), np.uint8)
    dram = board.cma.view(buf.physical_address, buf.nbytes)
    dram[:] = 9  # what an accelerator's DMA does
    assert not buf.any()
    buf[:LINE].invalidate()
    assert (buf[:LINE] == 9).all() and not buf[LINE:].any()
    buf[LINE] = 1  # a dirty CPU line ...
    buf[LINE:].invalidate()  # ... an aligned invalidate discards, like Linux on ARMv7
    assert (buf[LINE:] == 9).all()


def test_uncached_buffers_are_coherent(board):
    buf = pynq.allocate((LINE,), np.uint8, cacheable=False)
    buf[:] = 5
    assert (board.cma.view(buf.physical_address, LINE) == 5).all()


class SkipsFlush(PynqBackend):
    """A driver that forgets to flush what the accelerator reads."""

    def _relocate(self, *args):
        stream = super()._relocate(*args)
        stream.flush = None
        return stream


class SkipsInvalidate(PynqBackend):
    """A driver that forgets to invalidate what the accelerator wrote."""

    def _relocate(self, *args):
        stream = super()._relocate(*args)
        stream.invalidate = None
        return stream


@pytest.mark.parametrize("driver", [PynqBackend, SkipsFlush, SkipsInvalidate])
def test_a_driver_without_flush_or_invalidate_computes_wrong_data(board, driver):
    cfg = load_config("pynq")
    dev = Device(cfg, backend=driver(cfg))
    try:
        rng = np.random.default_rng(hash(driver.__name__) % 1000)
        for imm in (3, 5):  # twice: stale data of the first run must not make the second look right
            data = rng.integers(-20, 20, 64).astype(np.int32)
            out, _ = add_program(dev, data, imm)
            right = np.array_equal(out.read(np.int8, (4, 16)), expected(data, imm))
            assert right == (driver is PynqBackend), driver.__name__
    finally:
        dev.backend.close()


def test_a_bitstream_of_another_config_is_refused_naming_both(board):
    other = load_config("block8")
    with pytest.raises(BackendError) as e:
        Device(other, backend="pynq")
    msg = str(e.value)
    assert f"{load_config('pynq').hash:#010x}" in msg and f"{other.hash:#010x}" in msg
    assert f"ISA version {ISA_VERSION}" in msg
    dev = Device("pynq", backend="pynq")  # the refusal left the board free
    try:
        data = np.arange(64, dtype=np.int32)
        out, _ = add_program(dev, data, 1)
        assert np.array_equal(out.read(np.int8, (4, 16)), expected(data, 1))
    finally:
        dev.backend.close()


def test_dram_that_is_not_a_pynq_buffer_is_refused(board):
    dev = Device("pynq", backend="pynq")
    try:
        foreign = Dram(1 << 16, dev.cfg.dram_base_addr)
        with pytest.raises(BackendError, match="not one of its pynq.allocate regions"):
            dev.backend.run(foreign, dev.cfg.dram_base_addr, 1)
    finally:
        dev.backend.close()


def test_no_board_found_is_a_clear_error(board, monkeypatch):
    monkeypatch.setattr(pynq.Device, "_active_device", None, raising=False)
    monkeypatch.delattr(pynq.Device, "_active_device")
    monkeypatch.setattr(pynq.Device, "_devices", [], raising=False)
    with pytest.raises(BackendError, match="pynq finds no device"):
        Device("pynq", backend="pynq")


def test_a_second_board_object_is_not_the_simulated_one(board):
    assert isinstance(board, SimulatedBoard) and board.tag == f"vdla-sim-{load_config('pynq').name}"
