"""The driver on a Zynq UltraScale+ board: the kv260 preset's simulated board (its RTL: a 128-bit bus, 49-bit
addresses), with the registers at the preset's base on M_AXI_HPM0_FPD and the logic reset through the PS GPIO's
pl_resetn0; and the address width of every board: a buffer past the AXI master's address bits, or past what an
instruction's element index reaches, is refused, naming it. The same unmodified driver as on the PYNQ-Z2."""

from __future__ import annotations

import numpy as np
import pynq
import pytest
from pynq_sim import BusError, SimulatedBoard
from test_pynq_board import add_program, expected
from test_pynq_programs import LONG

from vdla.config import load_config
from vdla.isa import ISA_VERSION, assemble
from vdla.runtime import BackendError, CycleLimitError, Device, FaultError
from vdla.runtime import registers as R
from vdla.runtime.pynq_backend import SLCR_BASE, PynqBackend, board_base_addr
from vdla.zoo.resnet import layer_case, layer_specs
from vdla.zoo.workloads import SUITE, matmul

PRESET = "kv260"


def _on(board: SimulatedBoard):
    """Make ``board`` the device pynq finds (as if the process ran on it); returns the one it replaces."""
    was = pynq.Device.active_device
    pynq.Device.active_device = board
    return was


@pytest.fixture(scope="module")
def zu_board(board):
    """The simulated KV260: pynq's active device for this module's tests."""
    zu = SimulatedBoard(PRESET)
    was = _on(zu)
    yield zu
    pynq.Device.active_device = was
    zu.close()


@pytest.fixture(scope="module")
def zu_dev(zu_board) -> Device:
    d = Device(PRESET, backend="pynq")
    yield d
    d.backend.close()


@pytest.fixture(scope="module")
def zu_rtl() -> Device:
    d = Device(PRESET, backend="rtl")
    yield d
    d.backend.close()


def test_the_registers_are_at_the_presets_base(zu_board, zu_dev):
    cfg = load_config(PRESET)
    assert zu_dev.backend.base_addr == board_base_addr(cfg) == cfg.reg_base_addr == 0xA000_0000
    regs = pynq.MMIO(cfg.reg_base_addr, 0x100)
    ident = regs.read(R.offset("ID"))
    assert ident >> 16 == R.ID_MAGIC and ident & 0xFFFF == ISA_VERSION
    assert regs.read(R.offset("CONFIG_HASH")) == cfg.hash
    for elsewhere in (load_config("pynq").reg_base_addr, SLCR_BASE):  # the PYNQ-Z2's base, the Zynq-7000's SLCR
        with pytest.raises(BusError, match=f"no slave at {elsewhere:#x}"):
            pynq.MMIO(elsewhere, 4).read(0)


@pytest.mark.parametrize("workload", SUITE, ids=lambda w: w.name)
def test_runtime_programs_are_right_with_the_cycles_of_the_rtl(zu_dev, zu_rtl, workload):
    """Each workload checks its own result against numpy (raising otherwise)."""
    assert workload.run(zu_dev).counters.cycles == workload.run(zu_rtl).counters.cycles


def test_a_compiled_resnet18_layer(zu_dev, zu_rtl):
    cfg = load_config(PRESET)
    case = layer_case("C11", layer_specs("resnet18")["C11"], 0)
    layer = case.compile(cfg, vthreads=2)
    run = layer.run(zu_dev, case.x)
    np.testing.assert_array_equal(run.out, case.oracle(layer.epilogue.bounds))
    np.testing.assert_array_equal(run.out, layer.run(Device(PRESET), case.x).out)
    assert run.counters.cycles == layer.run(zu_rtl, case.x).counters.cycles


def test_a_cycle_limit_resets_the_logic_through_pl_resetn0(zu_board, zu_dev, zu_rtl):
    resets = zu_board.resets
    with pytest.raises(CycleLimitError, match=r"cycle limit 500 reached at instruction 1 \(alu add"):
        zu_dev.run_program(assemble(LONG), max_cycles=500)
    assert zu_board.resets == resets + 1  # through the PS GPIO: the SLCR is no slave on this board
    assert zu_dev.run_program(assemble(LONG)).counters.cycles == zu_rtl.run_program(assemble(LONG)).counters.cycles
    data = np.arange(64, dtype=np.int32)
    out, _ = add_program(zu_dev, data, 3)
    assert np.array_equal(out.read(np.int8, (4, 16)), expected(data, 3))


def _backend_on(board: SimulatedBoard, preset: str) -> PynqBackend:
    was = _on(board)
    try:
        return PynqBackend(load_config(preset))
    finally:
        pynq.Device.active_device = was


def test_a_region_past_the_axi_address_bits_is_refused_naming_it(zu_board):
    """The PYNQ-Z2's AXI master has 32 address bits: a CMA buffer at 4 GiB is out of its reach."""
    z2 = SimulatedBoard("pynq", cma_base=0x1_0000_0000)
    backend = _backend_on(z2, "pynq")
    try:
        with pytest.raises(BackendError, match=r"DRAM region at physical address 0x100000000 .* past the 32 address"):
            backend.make_dram()
    finally:
        backend.close()
        z2.close()


def test_a_region_above_4_gib_on_a_zu_board(zu_board, zu_rtl):
    """Above 4 GiB the KV260's 49-bit master reaches the region: programs run there (right, the RTL's cycles).
    At 32 GiB (its DDR's upper half) a LOAD UOP's element index (4-byte micro-ops) no longer reaches it: that
    instruction is refused, naming it, before anything runs."""
    high = SimulatedBoard(PRESET, cma_base=0x1_0000_0000)
    backend = _backend_on(high, PRESET)
    try:
        dev = Device(PRESET, backend=backend)
        assert dev.backend._regions[0][1].physical_address >= 1 << 32
        data = np.arange(64, dtype=np.int32)
        out, _ = add_program(dev, data, 5)
        assert np.array_equal(out.read(np.int8, (4, 16)), expected(data, 5))
        assert matmul(dev, 64, 64, 64, 2).counters.cycles == matmul(zu_rtl, 64, 64, 64, 2).counters.cycles
    finally:
        backend.close()
        high.close()
    top = SimulatedBoard(PRESET, cma_base=0x8_0000_0000)
    backend = _backend_on(top, PRESET)
    try:
        dev = Device(PRESET, backend=backend)
        with pytest.raises(FaultError, match=r"instruction \d+ \(load uop .*past the 32-bit element index of its UOP"):
            add_program(dev, np.arange(64, dtype=np.int32), 1)
    finally:
        backend.close()
        top.close()
