"""cocotb bench of vdla_uop_write (the config's bus width and micro-op banks): random beats of random DRAM rows (a row
starting or ending inside a beat, the beat's first micro-op index in any bank) against a Python model of the
micro-op writes: micro-op m of the beat goes to bank (idx + m) mod U, row (idx + m) div U, when its four bytes
lie inside the row. Combinational: each beat is checked a nanosecond after it is driven."""

import random

import cocotb
from cocotb.triggers import Timer


def model(u: int, off: int, row_bytes: int, idx: int, data: int, valid: bool) -> list[tuple[int, int, int]]:
    """(bank, row, word) of each write the beat makes."""
    writes = []
    for m in range(u):
        if valid and 0 <= off + 4 * m < row_bytes:
            n = idx + m
            writes.append((n % u, n // u, (data >> (32 * m)) & 0xFFFFFFFF))
    return sorted(writes)


@cocotb.test()
async def writes_match_the_model(dut):
    u = len(dut.we_o)
    rng = random.Random(7)
    bank_rows = 1 << (len(dut.waddr_o) // u)
    for trial in range(500):
        row_bytes = 4 * rng.randrange(1, 40)
        off = 8 * u // 2 * rng.randrange(-2, row_bytes // (4 * u) + 2) - 4 * rng.randrange(u)  # beats straddling ends
        idx = rng.randrange(0, u * bank_rows - u)
        data = rng.getrandbits(32 * u)
        valid = trial % 7 != 0
        dut.valid_i.value, dut.off_i.value, dut.row_bytes_i.value = int(valid), off & ((1 << 26) - 1), row_bytes
        dut.idx_i.value, dut.data_i.value = idx, data
        await Timer(1, unit="ns")
        we, waddr, wdata = int(dut.we_o.value), int(dut.waddr_o.value), int(dut.wdata_o.value)
        aw = len(dut.waddr_o) // u
        got = sorted(
            (k, (waddr >> (aw * k)) & ((1 << aw) - 1), (wdata >> (32 * k)) & 0xFFFFFFFF)
            for k in range(u)
            if we >> k & 1
        )
        assert got == model(u, off, row_bytes, idx, data, valid), (trial, off, row_bytes, idx)
