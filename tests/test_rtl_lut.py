"""The activation table (LOAD LUT, EPI lut) on both backends: OUT rows looked up after truncation or
requantization, partial and repeated table loads, GEMMs and ALU passes through the table, bit-exact with numpy
and between the simulator and the RTL (equal results, work counters and cycles)."""

from __future__ import annotations

import numpy as np
import pytest
from full_units import FULL

from vdla.config import LUT_ENTRIES
from vdla.isa import AluOp, MemType, Stage
from vdla.runtime import Device


@pytest.fixture(scope="module")
def devices(rtl_library) -> tuple[Device, Device]:
    return Device("pynq"), Device("pynq", backend="rtl")


def requant(v: np.ndarray, shift: int, relu: bool) -> np.ndarray:
    """REQ as the OUT mirror applies it: round half up by ``shift``, clamp to int8 (or [0, 127] with relu)."""
    v = v.astype(np.int64)
    if shift:
        v = (v + (1 << (shift - 1))) >> shift
    return np.clip(v, 0 if relu else -128, 127).astype(np.int8)


def lookup(table: np.ndarray, v: np.ndarray) -> np.ndarray:
    return table[v.astype(np.int8).view(np.uint8)]


def store_rows(cmd, out, rows: int, sram: int = 0, offset: int = 0) -> None:
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(sram, out, offset, 1, rows, rows)


def both(devices, program):
    """Run ``program(dev)`` (returning (result array, counters)) on both backends; the results and the work and
    cycle counters agree. Returns the result."""
    (got_sim, c_sim), (got_rtl, c_rtl) = (program(d) for d in devices)
    np.testing.assert_array_equal(got_rtl, got_sim)
    assert c_sim.bytes_loaded == c_rtl.bytes_loaded and c_sim.insn_counts == c_rtl.insn_counts
    assert c_sim.cycles == c_rtl.cycles
    return got_rtl


@pytest.mark.parametrize(
    "req,relu,shift", [(False, False, 0), (True, False, 4), (True, True, 6), (True, False, 0)], ids=str
)
def test_acc_rows_through_the_table(devices, req, relu, shift):
    """LOAD ACC rows written to OUT through the table, after truncation or requantization (with relu)."""
    rng = np.random.default_rng(shift + 2 * relu + 4 * req)
    rows, lanes = 24, devices[0].cfg.block_out
    acc = rng.integers(-5000, 5000, (rows, 1, lanes)).astype(np.int32)
    acc[0, 0, :] = [-129, -128, -1, 0, 1, 127, 128, 255, 256, -(1 << 31), (1 << 31) - 1, 7, -7, 63, -64, 3][:lanes]
    table = rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8)

    def program(dev):
        a, t, out = dev.array(acc), dev.array(table), dev.alloc(rows * lanes)
        cmd = dev.commands()
        cmd.load_table(t)
        cmd.epi(req=req, relu=relu, shift=shift, lut=True)
        cmd.load(MemType.ACC, 0, a, 0, 1, rows, rows)
        store_rows(cmd, out, rows)
        counters = cmd.synchronize().counters
        return out.read(np.int8, (rows, lanes)), counters

    got = both(devices, program)
    v = requant(acc, shift, relu) if req else acc.astype(np.int8)
    np.testing.assert_array_equal(got, lookup(table, v.reshape(rows, lanes)))


def test_identity_table_and_lut_off(devices):
    """An identity table changes nothing; an EPI without lut after one with it stores plain values again, and
    so does a new program (START clears the EPI state), with the table still loaded."""
    rows, lanes = 8, devices[0].cfg.block_out
    acc = np.arange(-64, -64 + rows * lanes, dtype=np.int32).reshape(rows, 1, lanes) * 3
    ident = np.arange(LUT_ENTRIES, dtype=np.uint8).view(np.int8)
    neg = (-ident.astype(np.int16)).clip(-128, 127).astype(np.int8)

    def program(dev):
        a, t, n, out = dev.array(acc), dev.array(ident), dev.array(neg), dev.alloc(4 * rows * lanes)
        cmd = dev.commands()
        cmd.load_table(t)
        cmd.epi(req=True, shift=1, lut=True)
        cmd.load(MemType.ACC, 0, a, 0, 1, rows, rows)
        cmd.load_table(n)
        cmd.load(MemType.ACC, rows, a, 0, 1, rows, rows)
        cmd.epi(req=True, shift=1)
        cmd.load(MemType.ACC, 2 * rows, a, 0, 1, rows, rows)
        store_rows(cmd, out, 3 * rows)
        counters = cmd.synchronize().counters
        cmd = dev.commands()
        cmd.load(MemType.ACC, 3 * rows, a, 0, 1, rows, rows)
        store_rows(cmd, out, rows, sram=3 * rows, offset=3 * rows)
        cmd.synchronize()
        return out.read(np.int8, (4, rows, lanes)), counters

    got = both(devices, program)
    plain = requant(acc.reshape(rows, lanes), 1, False)
    np.testing.assert_array_equal(got[0], plain)
    np.testing.assert_array_equal(got[1], lookup(neg, plain))
    np.testing.assert_array_equal(got[2], plain)
    np.testing.assert_array_equal(got[3], acc.reshape(rows, lanes).astype(np.int8))


def test_table_reloaded_between_layers(devices):
    """Two layers, the second after a partial reload of the table (elements 3..5 of lut_depth): the second
    sees the new entries there and the old ones elsewhere. The table's bytes are counted."""
    cfg = devices[0].cfg
    rows, lanes, eb = 16, cfg.block_out, cfg.out_elem_bytes
    rng = np.random.default_rng(11)
    acc = rng.integers(-300, 300, (rows, 1, lanes)).astype(np.int32)
    t1 = rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8)
    t2 = rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8)
    lo, n = 3, 3

    def program(dev):
        a, b1, b2, out = dev.array(acc), dev.array(t1), dev.array(t2), dev.alloc(2 * rows * lanes)
        cmd = dev.commands()
        cmd.load_table(b1)
        cmd.epi(req=True, shift=2, lut=True)
        cmd.load(MemType.ACC, 0, a, 0, 1, rows, rows)
        cmd.load(MemType.LUT, lo, b2, lo, 1, n, n)  # the same elements of the second table
        cmd.load(MemType.ACC, rows, a, 0, 1, rows, rows)
        store_rows(cmd, out, 2 * rows)
        counters = cmd.synchronize().counters
        assert counters.bytes_loaded["LUT"] == LUT_ENTRIES + n * eb
        return out.read(np.int8, (2, rows, lanes)), counters

    got = both(devices, program)
    merged = t1.copy()
    merged[lo * eb : (lo + n) * eb] = t2[lo * eb : (lo + n) * eb]
    v = requant(acc.reshape(rows, lanes), 2, False)
    np.testing.assert_array_equal(got[0], lookup(t1, v))
    np.testing.assert_array_equal(got[1], lookup(merged, v))


def test_gemm_and_alu_through_the_table(devices):
    """A GEMM whose requantized OUT goes through the table, stored right after it (the store reads rows as the
    mirror writes them); then an ALU pass (MAX with 0) over the same rows writes them through the table again."""
    cfg = devices[0].cfg
    bi, bo = cfg.block_in, cfg.block_out
    m, kb, nb = 6, 2, 3
    rows = m * nb
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (m, kb * bi), dtype=np.int8)
    b = rng.integers(-128, 128, (nb * bo, kb * bi), dtype=np.int8)
    table = rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8)
    prod = a.astype(np.int32) @ b.astype(np.int32).T  # (m, nb * bo): row r of ACC is (r // nb, r % nb)

    def program(dev):
        a_d = dev.array(a.reshape(m, kb, 1, bi))
        b_d = dev.array(b.reshape(nb, bo, kb, bi).transpose(0, 2, 1, 3))
        t, out = dev.array(table), dev.alloc(2 * rows * bo)
        cmd = dev.commands()
        cmd.load(MemType.INP, 0, a_d, 0, 1, m * kb, m * kb)
        cmd.load(MemType.WGT, 0, b_d, 0, 1, nb * kb, nb * kb)
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        cmd.load_table(t)
        cmd.epi(req=True, relu=False, shift=7, lut=True)
        loop = dict(iter_out=nb, iter_in=m, dst_factor=(1, nb), src_factor=(0, kb), wgt_factor=(kb, 0))
        cmd.gemm([(0, k, k) for k in range(kb)], reset=True, **loop)
        cmd.gemm([(0, k, k) for k in range(kb)], **loop)
        store_rows(cmd, out, rows)
        cmd.dep_push(Stage.STORE, Stage.COMPUTE)
        cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        cmd.epi(req=True, relu=True, shift=7, lut=True)
        cmd.alu(AluOp.MAX, [(0, 0)], iter_out=rows, dst_factor=(1, 0), imm=0)
        store_rows(cmd, out, rows, offset=rows)
        counters = cmd.synchronize().counters
        return out.read(np.int8, (2, m, nb * bo)), counters

    got = both(devices, program)
    np.testing.assert_array_equal(got[0], lookup(table, requant(prod, 7, False)))
    np.testing.assert_array_equal(got[1], lookup(table, requant(np.maximum(prod, 0), 7, True)))


@pytest.mark.parametrize("lut", [False, True], ids=["plain", "lut"])
def test_store_reads_the_last_written_row_at_once(devices, lut):
    """The store reads first the row the compute stage wrote last, in the cycle after (the OUT mirror is
    written two cycles after ACC, the store forwards the write): after a LOAD ACC, an ALU loop and a GEMM."""
    cfg = devices[0].cfg
    bi, bo = cfg.block_in, cfg.block_out
    rng = np.random.default_rng(3)
    acc = rng.integers(-2000, 2000, (4, 1, bo)).astype(np.int32)
    a = rng.integers(-128, 128, (1, bi), dtype=np.int8)
    b = rng.integers(-128, 128, (bo, bi), dtype=np.int8)
    table = rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8)

    def program(dev):
        acc_d, a_d, b_d, t = dev.array(acc), dev.array(a.reshape(1, 1, 1, bi)), dev.array(b), dev.array(table)
        out = dev.alloc(4 * bo)
        cmd = dev.commands()
        cmd.load(MemType.INP, 0, a_d, 0, 1, 1, 1)
        cmd.load(MemType.WGT, 0, b_d, 0, 1, 1, 1)
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        cmd.load_table(t)
        cmd.epi(req=True, shift=4, lut=lut)
        cmd.load(MemType.ACC, 0, acc_d, 0, 1, 4, 4)
        store_rows(cmd, out, 1, sram=3, offset=0)  # the row LOAD ACC wrote last
        cmd.dep_push(Stage.STORE, Stage.COMPUTE)
        cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        cmd.alu(AluOp.ADD, [(1, 0), (0, 0)], imm=5)  # writes row 1, then row 0
        store_rows(cmd, out, 2, sram=0, offset=1)
        cmd.dep_push(Stage.STORE, Stage.COMPUTE)
        cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        cmd.gemm([(2, 0, 0)], reset=True)
        cmd.gemm([(2, 0, 0)])
        store_rows(cmd, out, 1, sram=2, offset=3)
        counters = cmd.synchronize().counters
        return out.read(np.int8, (4, bo)), counters

    got = both(devices, program)
    f = (lambda v: lookup(table, v)) if lut else (lambda v: v)
    acc2 = acc.reshape(4, bo).astype(np.int64)
    np.testing.assert_array_equal(got[0], f(requant(acc2[3], 4, False)))
    np.testing.assert_array_equal(got[1], f(requant(acc2[0] + 5, 4, False)))
    np.testing.assert_array_equal(got[2], f(requant(acc2[1] + 5, 4, False)))
    prod = a.astype(np.int32) @ b.astype(np.int32).T
    np.testing.assert_array_equal(got[3], f(requant(prod[0], 4, False)))


def test_two_tables_selected_by_epi(rtl_library):
    """Both activation tables loaded once (table 1 before table 0, table 0 in two partial loads); ALU passes'
    OUT writes alternate between them by EPI ``lut_table`` alone, with no LOAD between, and each row is its
    table's lookup, equal on both backends. Selecting a table costs no cycle: each backend takes as long as for
    the same program on table 0 alone. (The RTL's instruction fetch holds the read channel while the program
    streams in, bursts of 8 instructions, and the compute stage's table, row and kernel loads wait for it; the
    cycle model fetches off the channel. So the backends' cycles are compared each with itself.)"""
    devices = Device(FULL), Device(FULL, backend="rtl")  # lut_tables 2
    rng = np.random.default_rng(53)
    rows, lanes = 12, devices[0].cfg.block_out
    acc = rng.integers(-300, 300, (rows, 1, lanes)).astype(np.int32)
    tables = rng.integers(-128, 128, (2, LUT_ENTRIES)).astype(np.int8)
    half = devices[0].cfg.lut_depth // 2

    def program(dev, select: bool):
        a, t, out = dev.array(acc), dev.array(tables), dev.alloc(rows * lanes)
        n = dev.cfg.lut_depth
        cmd = dev.commands()
        cmd.load_table(t, n, table=1)
        cmd.load(MemType.LUT, 0, t, 0, 1, half, half)
        cmd.load(MemType.LUT, half, t, half, 1, n - half, n - half)
        cmd.load(MemType.ACC, 0, a, 0, 1, rows, rows)
        for r in range(rows):
            cmd.epi(req=True, shift=1, lut=True, lut_table=r % 2 if select else 0)
            cmd.alu(AluOp.ADD, [(r, 0)], imm=0)  # the row rewritten as it is: its OUT row through the table
        store_rows(cmd, out, rows)
        counters = cmd.synchronize().counters
        return out.read(np.int8, (rows, lanes)), counters

    (sim, c_sim), (rtl, c_rtl) = (program(d, True) for d in devices)
    v = requant(acc, 1, False).reshape(rows, lanes)
    np.testing.assert_array_equal(sim, np.stack([lookup(tables[r % 2], v[r]) for r in range(rows)]))
    np.testing.assert_array_equal(rtl, sim)
    assert c_sim.insn_counts == c_rtl.insn_counts and c_sim.bytes_loaded == c_rtl.bytes_loaded
    assert [c_sim.cycles, c_rtl.cycles] == [program(d, False)[1].cycles for d in devices]


def test_a_table_beyond_the_config_is_refused(devices):
    """pynq holds one table (lut_tables 1), the full build two: a table beyond them is refused, naming the config."""
    for dev, table in ((devices[0], 1), (Device(FULL), 2)):
        cmd = dev.commands()
        top = dev.cfg.lut_tables - 1
        with pytest.raises(Exception, match=rf"activation table {table} is outside \[0, {top}\]"):
            cmd.epi(lut=True, lut_table=table)
        with pytest.raises(Exception, match=rf"activation table {table} is outside \[0, {top}\]"):
            cmd.load_table(dev.array(np.zeros(LUT_ENTRIES, np.int8)), table=table)
