"""The ALU's MUL on shared multipliers (two lanes per multiplier, vdla_alu): bit-exact with the simulator and in
exactly the cycles of the cycle model, including the hazards of its extra pipeline stage (a source row that
the previous iteration's MUL is still writing, chains that read what they just wrote) and the forms that keep
one cycle per element (a MUL with reset)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from acc_readback import read_acc

from vdla.config import load_config
from vdla.cycles import alu_cycles, alu_ii
from vdla.isa import AluOp, MemType
from vdla.runtime import Device
from vdla.runtime.rtl.build import RtlBuildError, check_config

ROWS = 64


def _program(dev: Device, seed: int) -> tuple[np.ndarray, list[tuple[str, int, int]]]:
    """Random MUL-heavy ALU instructions over ROWS accumulator rows, then every row read back (acc_readback).
    Returns the accumulators and each ALU instruction's (label, start, end) cycles."""
    rng = np.random.default_rng(seed)
    cfg = dev.cfg
    acc = rng.integers(-(1 << 31), 1 << 31, (ROWS, cfg.batch, cfg.block_out), dtype=np.int64).astype(np.int32)
    acc[: ROWS // 4] = rng.integers(-70000, 70000, (ROWS // 4, cfg.batch, cfg.block_out))
    acc_d = dev.array(acc)
    cmd = dev.commands()
    cmd.load(MemType.ACC, 0, acc_d, 0, 1, ROWS, ROWS)
    for _ in range(12):
        n = int(rng.integers(1, 9))
        kind = rng.choice(["chain", "overlap", "imm", "reset", "reset_imm", "other"])
        op = AluOp.ADD if kind == "other" else AluOp.MUL
        d, s = int(rng.integers(0, ROWS - n)), int(rng.integers(0, ROWS - n))
        shift = int(rng.choice([0, 1, 17, 31, 32, 62, 63, rng.integers(0, 64)]))
        if kind == "chain":  # every iteration reads the row the previous one wrote, as destination and source
            cmd.alu(op, [(d, d)], iter_out=n, shift=shift)
        elif kind == "overlap":  # the source is the previous iteration's destination: forwarded from the MUL stage
            d = max(d, 1)
            cmd.alu(op, [(d, d - 1)], iter_out=n, dst_factor=(1, 0), src_factor=(1, 0), shift=shift)
        elif kind in ("imm", "reset_imm"):
            imm = int(rng.integers(-(1 << 15), 1 << 15))
            cmd.alu(op, [(d, 0)], iter_out=n, dst_factor=(1, 0), imm=imm, reset=kind == "reset_imm")
        elif kind == "reset":
            cmd.alu(op, [(d, s)], iter_out=n, dst_factor=(1, 0), src_factor=(1, 0), reset=True, shift=0)
        else:
            cmd.alu(op, [(d, s)], iter_out=n, dst_factor=(1, 0), src_factor=(1, 0))
    stored = read_acc(dev, cmd, 0, ROWS)
    run = cmd.synchronize(timeline=True)
    return stored(), [(e.label, e.start, e.end) for e in run.timeline if e.label.startswith("alu")]


@pytest.mark.parametrize("seed", range(6))
def test_mul_programs_agree_in_data_and_cycles(seed, rtl_library):
    """Equal data, and every ALU instruction takes the same cycles on both (the program's total may differ by
    the DMA of its first LOAD, which is not what this test is about)."""
    sim_out, sim_alu = _program(Device("pynq"), seed)
    rtl_out, rtl_alu = _program(Device("pynq", backend="rtl"), seed)
    np.testing.assert_array_equal(sim_out, rtl_out)
    assert len(sim_alu) == 15
    assert [(label, end - start) for label, start, end in sim_alu] == [(lb, e - s) for lb, s, e in rtl_alu]


def test_mul_cycle_rule():
    """MUL takes alu_ii cycles per element with an immediate too, and one more stage; a reset MUL is 0 in one."""
    t = load_config("pynq").timing
    assert alu_ii(t, AluOp.MUL, use_imm=True) == alu_ii(t, AluOp.MUL, use_imm=False) == t.alu_ii == 2
    assert alu_ii(t, AluOp.ADD, use_imm=True) == alu_ii(t, AluOp.MUL, use_imm=False, reset=True) == 1
    assert alu_ii(t, AluOp.ADD, use_imm=False) == t.alu_ii
    base = t.alu_setup + t.alu_pipeline
    assert alu_cycles(t, AluOp.MUL, True, False, 10) == base + 20 + t.alu_mul_latency
    assert alu_cycles(t, AluOp.MUL, False, True, 10) == alu_cycles(t, AluOp.ADD, True, False, 10) == base + 10


def test_the_rtl_needs_the_mul_stage_and_two_lanes():
    cfg = load_config("pynq")
    with pytest.raises(RtlBuildError, match="timing alu_mul_latency=0 is below the RTL's minimum 1"):
        check_config(cfg.with_timing(alu_mul_latency=0))
    with pytest.raises(RtlBuildError, match="two ALU lanes share each multiplier"):
        check_config(replace(cfg, block_out=1, acc_buff_bytes=1 << 13, inp_buff_bytes=1 << 13, wgt_buff_bytes=1 << 13))
