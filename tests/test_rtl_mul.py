"""The ALU's MUL (a multiplier per lane) and the held source row (vdla.cycles.holds_src): bit-exact with the
simulator and in exactly the cycles of the cycle model, including the hazards of a held row (an iteration
that writes the row later iterations hold, one, two or more cycles before they read it), chains that read
what they just wrote, and the forms that read no source row (immediates, resets).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from acc_readback import read_acc
from full_units import BOTH

from vdla.config import load_config
from vdla.cycles import alu_cycles, alu_ii, holds_src, src_reads
from vdla.isa import AluInsn, AluOp, MemType
from vdla.isa.pipe import pipe_hazard, pipe_rows
from vdla.runtime import Device

ROWS = 64


OPS = [AluOp.MUL, AluOp.MUL, AluOp.MUL, AluOp.MAX, AluOp.MIN, AluOp.CLIP, AluOp.SHR, AluOp.REQ]  # chains, overlaps
HELD_OPS = [AluOp.MUL, AluOp.ADD, AluOp.MIN, AluOp.MAX, AluOp.CLIP, AluOp.SHR]  # SHR never holds its row


def _held(cmd, rng: np.random.Generator, op: AluOp) -> None:
    """A two-operand instruction over iter_out x iter_in with src_factor_in 0: the source row is held across
    the inner loop. With "hit", inner iteration k writes the held row (dst = src), so the iterations after it
    read the new row from W (one cycle later) or from the held copy (later)."""
    n_out, n_in = int(rng.integers(1, 4)), int(rng.integers(2, 7))
    d = int(rng.integers(0, ROWS - n_out * n_in))
    shift = int(rng.choice([0, 1, 17, 31, 62])) if op == AluOp.MUL else 0
    if rng.random() < 0.6:  # hit: the source is one of the destinations of each outer iteration
        k = int(rng.integers(0, n_in))
        src, sfo = d + k, n_in
    else:
        src, sfo = int(rng.integers(0, ROWS - n_out)), 1
    cmd.alu(op, [(d, src)], iter_out=n_out, iter_in=n_in, dst_factor=(n_in, 1), src_factor=(sfo, 0), shift=shift)


def _pipelined(cmd, rng: np.random.Generator) -> None:
    """A pipelined MUL (pipe: inner iterations one a cycle) over iter_out x iter_in rows without a hazard: the
    held row is outside the rows, or the inner loop's last row; the outer step repeats the rows (0), starts
    where the last inner row was ((n_in - 1) * dfi: read from W by the next outer iteration's first), follows on
    (n_in * dfi) or jumps."""
    n_out, n_in, dfi = int(rng.integers(1, 4)), int(rng.integers(2, 7)), int(rng.integers(1, 3))
    dfo = int(rng.choice([0, (n_in - 1) * dfi, n_in * dfi, int(rng.integers(1, 9))]))
    span = (n_out - 1) * dfo + (n_in - 1) * dfi + 1
    d = int(rng.integers(0, ROWS - span))
    src, sfo = int(rng.integers(0, ROWS - n_out)), 1
    insn = AluInsn(alu_opcode=AluOp.MUL, iter_out=n_out, iter_in=n_in, dst_factor_out=dfo, dst_factor_in=dfi)
    if rng.random() < 0.5 or pipe_hazard(*pipe_rows((d, src), replace(insn, src_factor_out=sfo))):
        src, sfo = d + (n_in - 1) * dfi, dfo  # the inner loop's last row: the next outer iteration's SRC reads it
    shift = int(rng.choice([0, 1, 17, 31, 62]))
    loop = {"iter_out": n_out, "iter_in": n_in, "dst_factor": (dfo, dfi), "src_factor": (sfo, 0)}
    cmd.alu(AluOp.MUL, [(d, src)], **loop, shift=shift, pipe=True)


def _program(dev: Device, seed: int) -> tuple[np.ndarray, list[tuple[str, int, int]]]:
    """Random MUL-heavy and held-row ALU instructions over ROWS accumulator rows, then every row read back
    (acc_readback). Returns the accumulators and each ALU instruction's (label, start, end) cycles."""
    rng = np.random.default_rng(seed)
    cfg = dev.cfg
    acc = rng.integers(-(1 << 31), 1 << 31, (ROWS, cfg.batch, cfg.block_out), dtype=np.int64).astype(np.int32)
    acc[: ROWS // 4] = rng.integers(-70000, 70000, (ROWS // 4, cfg.batch, cfg.block_out))
    acc[ROWS // 4 : ROWS // 2] = rng.integers(-40, 40, (ROWS // 4, cfg.batch, cfg.block_out))
    acc_d = dev.array(acc)
    cmd = dev.commands()
    cmd.load(MemType.ACC, 0, acc_d, 0, 1, ROWS, ROWS)
    for _ in range(16):
        n = int(rng.integers(1, 9))
        kind = rng.choice(["chain", "overlap", "imm", "reset", "reset_imm", "other", "held", "held", "pipe", "pipe"])
        op = AluOp.ADD if kind == "other" else OPS[int(rng.integers(0, len(OPS)))]
        d, s = int(rng.integers(0, ROWS - n)), int(rng.integers(0, ROWS - n))
        shift = int(rng.choice([0, 1, 17, 31, 32, 62, 63, rng.integers(0, 64)]))
        if kind == "held":
            _held(cmd, rng, HELD_OPS[int(rng.integers(0, len(HELD_OPS)))])
        elif kind == "pipe":
            _pipelined(cmd, rng)
        elif kind == "chain":  # every iteration reads the row the previous one wrote, as destination and source
            cmd.alu(op, [(d, d)], iter_out=n, shift=shift if op == AluOp.MUL else 0)
        elif kind == "overlap":  # the source is the previous iteration's destination, forwarded from W
            d = max(d, 1)
            cmd.alu(op, [(d, d - 1)], iter_out=n, dst_factor=(1, 0), src_factor=(1, 0), shift=shift * (op == AluOp.MUL))
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


@pytest.mark.parametrize("config", BOTH, ids=("pynq", "full"))
@pytest.mark.parametrize("seed", range(8))
def test_mul_and_held_programs_agree_in_data_and_cycles(seed, config, rtl_library):
    """Equal data, and every ALU instruction takes the same cycles on both (the program's total may differ by
    the DMA of its first LOAD, which is not what this test is about): on the half-width ALU of the pynq build
    (two passes a row) and on the full one."""
    sim_out, sim_alu = _program(Device(config), seed)
    rtl_out, rtl_alu = _program(Device(config, backend="rtl"), seed)
    np.testing.assert_array_equal(sim_out, rtl_out)
    assert len(sim_alu) == 19
    assert [(label, end - start) for label, start, end in sim_alu] == [(lb, e - s) for lb, s, e in rtl_alu]


def _insn(op: AluOp, **loop) -> AluInsn:
    return AluInsn(alu_opcode=op, **loop)


def test_alu_cycle_rule():
    """One cycle per iteration but alu_ii for each source-row read: every iteration of a two-operand
    instruction, once per outer iteration when the row is held (one micro-op, src_factor_in 0, not a shift);
    and alu_mul_cycles - 1 more for every iteration of a MUL (its multiply is registered), or with pipe for
    each inner loop's last."""
    t = load_config("pynq").timing
    base = t.alu_setup + t.alu_pipeline
    loop = {"iter_out": 3, "iter_in": 10}
    m = t.alu_mul_cycles
    assert m == 2
    assert alu_cycles(t, _insn(AluOp.MUL, use_imm=True, **loop)) == base + 30 * m
    assert alu_cycles(t, _insn(AluOp.MUL, reset=True, **loop)) == base + 30 * m
    assert alu_cycles(t, _insn(AluOp.MUL, **loop)) == base + 30 * m + 3 * (t.alu_ii - 1)  # held
    assert alu_cycles(t, _insn(AluOp.MUL, src_factor_in=1, **loop)) == base + 30 * (m + t.alu_ii - 1)
    assert alu_cycles(t, _insn(AluOp.MIN, use_imm=True, **loop)) == base + 30
    assert src_reads(_insn(AluOp.ADD, src_factor_in=1, **loop)) == 30
    assert src_reads(_insn(AluOp.SHR, **loop)) == src_reads(_insn(AluOp.MAX, uop_end=2, **loop)) // 2 == 30
    assert alu_cycles(t, _insn(AluOp.ADD, src_factor_in=1, **loop)) == base + 30 * t.alu_ii
    mul = AluOp.MUL
    assert alu_ii(t, mul, use_imm=True) == alu_ii(t, mul, False, reset=True) == m
    assert alu_ii(t, mul, False, same_src=True) == m
    assert alu_ii(t, mul, use_imm=False) == t.alu_ii + m - 1 == 3
    assert alu_ii(t, AluOp.REQ, False, same_src=True) == t.alu_ii == 2
    assert holds_src(_insn(AluOp.CLIP, **loop)) and not holds_src(_insn(AluOp.REQ, **loop))
    # pipelined: the MUL's extra cycle only after each inner loop's last iteration
    assert alu_cycles(t, _insn(mul, pipe=True, **loop)) == base + 30 + 3 * (m - 1) + 3 * (t.alu_ii - 1)
    assert alu_ii(t, mul, False, same_src=True, pipe=True) == 1
    # SQR reads ACC[dst] alone: a MUL's cycles without a source read, one a cycle pipelined
    sqr = AluOp.SQR
    assert src_reads(_insn(sqr, src_factor_in=1, **loop)) == 0 and not holds_src(_insn(sqr, **loop))
    assert alu_cycles(t, _insn(sqr, src_factor_in=1, **loop)) == base + 30 * m
    assert alu_cycles(t, _insn(sqr, pipe=True, **loop)) == base + 30 + 3 * (m - 1)
    assert alu_ii(t, sqr, False) == m and alu_ii(t, sqr, False, pipe=True) == 1


def test_half_width_alu_cycle_rule():
    """A half-width ALU (alu_lanes: the pynq build) issues every iteration of an operation but ADD twice, one
    pass per half of the lanes, and leaves alu_mul_cycles - 1 after the second (its result comes from M, as a
    MUL's), but before an iteration that reads its source row first (not a shift: the RTL forwards the row);
    the source row's read costs what it costs on the full ALU; ADD keeps one pass; a pipelined MUL's passes
    issue back to back but after each inner loop's last."""
    cfg = load_config("pynq")
    t, p = cfg.timing, cfg.alu_passes
    assert p == 2
    base = t.alu_setup + t.alu_pipeline
    loop = {"iter_out": 3, "iter_in": 10}
    m = t.alu_mul_cycles
    for op in (AluOp.MUL, AluOp.MIN, AluOp.SHR, AluOp.CLIP, AluOp.REQ):
        assert alu_cycles(t, _insn(op, use_imm=True, **loop), p) == base + 30 * (2 + m - 1)
        assert alu_ii(t, op, use_imm=True, passes=p) == 2 + m - 1
        # reading the source row every iteration: the next iteration's SRC slot follows the second pass at once,
        # but after a shift (its controls come from the row as it is read)
        # (but the last iteration's, before the drain)
        gap = m - 1 if op in (AluOp.SHR, AluOp.REQ) else 0
        last = 0 if gap else m - 1
        assert alu_cycles(t, _insn(op, src_factor_in=1, **loop), p) == base + 30 * (2 + gap + t.alu_ii - 1) + last
        assert alu_ii(t, op, use_imm=False, passes=p) == 2 + gap + t.alu_ii - 1
    assert alu_cycles(t, _insn(AluOp.MUL, pipe=True, **loop), p) == base + 30 * 2 + 3 * (m - 1) + 3 * (t.alu_ii - 1)
    assert alu_ii(t, AluOp.MUL, False, same_src=True, pipe=True, passes=p) == 2
    # SQR: two passes and the MUL's cycle (no source read); pipelined, its passes back to back
    assert alu_cycles(t, _insn(AluOp.SQR, **loop), p) == base + 30 * (2 + m - 1)
    assert alu_cycles(t, _insn(AluOp.SQR, pipe=True, **loop), p) == base + 30 * 2 + 3 * (m - 1)
    assert alu_ii(t, AluOp.SQR, False, passes=p) == 3 and alu_ii(t, AluOp.SQR, False, pipe=True, passes=p) == 2
    assert alu_cycles(t, _insn(AluOp.ADD, src_factor_in=1, **loop), p) == base + 30 * t.alu_ii
    assert alu_ii(t, AluOp.ADD, use_imm=True, passes=p) == 1
