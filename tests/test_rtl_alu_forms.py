"""Every ALU operation in every form (immediate or ACC[src], with and without reset; SQR reading ACC[dst] alone,
pipelined and not) on rows that chain, against the simulator in data and cycles. The read-modify-write picks each
slot's operands while the slot is in R (the forwarding match, the zeroing, b's source) and forms the shift
controls from the immediate or the source row before the ALU's cycle (vdla_acc_rmw): these programs reach each of
those choices, with the rows written one and two cycles before and with operands at the shift clamp's and the
int8 clamp's edges."""

from __future__ import annotations

import numpy as np
import pytest
from acc_readback import read_acc
from full_units import BOTH

from vdla.isa import AluOp, MemType
from vdla.runtime import Device

ROWS = 48
EDGES = [0, 1, -1, 31, 32, -31, -32, 33, -33, 127, 128, -128, -129, 255, 256, -257, -258, 0x7F80, 0x80FF, 0x7FFF]


def _program(dev: Device, seed: int) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """Random ALU instructions of every operation and form over ROWS rows, then every row read back
    (acc_readback). Returns the accumulators and each ALU instruction's (label, cycles)."""
    rng = np.random.default_rng(seed)
    cfg = dev.cfg
    shape = (ROWS, cfg.batch, cfg.block_out)
    acc = rng.integers(-(1 << 31), 1 << 31, shape, dtype=np.int64)
    small = rng.choice(EDGES, shape) * rng.choice([1, -1], shape)
    acc = np.where(rng.random(shape) < 0.5, small, acc).astype(np.int32)
    acc_d = dev.array(acc)
    cmd = dev.commands()
    cmd.load(MemType.ACC, 0, acc_d, 0, 1, ROWS, ROWS)
    for op in AluOp:
        if op == AluOp.SQR:
            _squares(cmd, rng)
            continue
        for form in ("imm", "row"):
            for reset in (False, True):
                n = int(rng.integers(2, 7))
                d, s = int(rng.integers(1, ROWS - n)), int(rng.integers(0, ROWS - n))
                imm = None
                if form == "imm":
                    imm = int(rng.choice(EDGES) if rng.random() < 0.6 else rng.integers(-(1 << 15), 1 << 15))
                    imm = int(np.clip(-imm if rng.random() < 0.5 else imm, -(1 << 15), (1 << 15) - 1))
                mul_row = op == AluOp.MUL and form == "row"
                shift = int(rng.choice([0, 3, 31, 33, 63])) if mul_row else 0  # MUL's product rounding shift
                pattern = rng.choice(["chain", "overlap", "spread"])
                if pattern == "chain":  # the same row every iteration: forwarded from W at distance 1 (or 2)
                    cmd.alu(op, [(d, d if form == "row" else 0)], iter_in=n, imm=imm, reset=reset, shift=shift)
                else:  # "overlap": the source is the previous iteration's destination; "spread": another row
                    src = d - 1 if pattern == "overlap" else s
                    cmd.alu(
                        op,
                        [(d, src)],
                        iter_out=n,
                        dst_factor=(1, 0),
                        src_factor=(1, 0),
                        imm=imm,
                        reset=reset,
                        shift=shift,
                    )
    stored = read_acc(dev, cmd, 0, ROWS)
    run = cmd.synchronize(timeline=True)
    return stored(), [(e.label, e.end - e.start) for e in run.timeline if e.label.startswith("alu")]


def _squares(cmd, rng: np.random.Generator) -> None:
    """Four SQRs (no immediate or reset form: it reads ACC[dst] alone), each with a product shift: one row
    squared over and over (forwarded, not pipelined), rows along the outer loop, and two pipelined over the
    inner loop (distinct rows; the second over iter_out 2, its rows overlapping those just written)."""
    n = int(rng.integers(2, 7))
    d = int(rng.integers(1, ROWS - 2 * n))

    def shift() -> int:
        return int(rng.choice([0, 3, 31, 33, 63]))

    cmd.alu(AluOp.SQR, [(d, 0)], iter_in=n, shift=shift())  # the same row: no pipe (its hazard)
    cmd.alu(AluOp.SQR, [(d, 0)], iter_out=n, dst_factor=(1, 0), shift=shift())
    cmd.alu(AluOp.SQR, [(d, 0)], iter_in=n, dst_factor=(0, 1), shift=shift(), pipe=True)
    cmd.alu(AluOp.SQR, [(d + 1, 0)], iter_out=2, iter_in=n, dst_factor=(n, 1), shift=shift(), pipe=True)


@pytest.mark.parametrize("cfg", BOTH, ids=["pynq", "full"])  # the half-width ALU and the full-width one
@pytest.mark.parametrize("seed", range(4))
def test_alu_forms_agree_in_data_and_cycles(seed, cfg, rtl_library):
    sim_out, sim_alu = _program(Device(cfg), seed)
    rtl_out, rtl_alu = _program(Device(cfg, backend="rtl"), seed)
    np.testing.assert_array_equal(sim_out, rtl_out)
    assert len(sim_alu) == 4 * len(AluOp) + 3
    assert sim_alu == rtl_alu
