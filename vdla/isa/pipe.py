"""The pipelined MUL and SQR (ALU ``pipe``): which instructions may carry it and which iterations break it.

A MUL or an SQR forms its 64-bit product over two cycles. Without ``pipe`` every uop-iteration leaves the cycle
after it without an issue, so the next one sees its result. With ``pipe`` the inner iterations issue one a cycle
(each inner loop's last still leaves its cycle), so an iteration cannot see what the iteration just before it
writes: reading that row, as its destination or as a MUL's held source row, is a fault on every backend. The
command builder sets ``pipe`` wherever it holds (:func:`pipe_hazard` on the micro-ops it emits).
"""

from __future__ import annotations

import numpy as np

from vdla.isa.instructions import PRODUCT_OPS, AluInsn, AluOp


def pipe_refusal(insn: AluInsn) -> str | None:
    """Why ``insn`` cannot carry ``pipe`` (None: it can): it must be a MUL reading one source row per outer
    iteration and holding it across the inner loop (not a reset, no immediate, one micro-op,
    ``src_factor_in == 0``), or an SQR of one micro-op (it reads no source row)."""
    name = insn.alu_opcode.name
    if insn.alu_opcode not in PRODUCT_OPS:
        return f"pipe is a MUL's or an SQR's, not {name}'s"
    if insn.alu_opcode == AluOp.SQR:  # (no reset or immediate: vdla.isa.validate refuses them on every SQR)
        if insn.uop_end - insn.uop_bgn != 1:
            return f"a pipelined SQR has one micro-op (has {insn.uop_end - insn.uop_bgn})"
        return None
    if insn.reset or insn.use_imm:
        return "a pipelined MUL reads its source row (no reset, no immediate)"
    if insn.uop_end - insn.uop_bgn != 1 or insn.src_factor_in != 0:
        return (
            f"a pipelined MUL holds one source row across the inner loop: it needs one micro-op (has "
            f"{insn.uop_end - insn.uop_bgn}) and src_factor_in 0 (is {insn.src_factor_in})"
        )
    return None


def pipe_hazard(dst: np.ndarray, src: np.ndarray | None) -> tuple[int, int] | None:
    """The first iteration ``(o, i)`` (outer, inner index) of a pipelined MUL or SQR whose successor in the inner
    loop reads the row it writes, as its destination or as the MUL's held source row; None if there is none.
    ``dst`` and ``src`` are the iterations' rows shaped (iter_out, iter_in); ``src`` None for an SQR (no source
    row)."""
    dst = np.asarray(dst)
    bad = dst[:, :-1] == dst[:, 1:]
    if src is not None:
        bad |= dst[:, :-1] == np.asarray(src)[:, :1]
    if not bad.any():
        return None
    o, i = np.argwhere(bad)[0]
    return int(o), int(i)


def pipe_rows(uop: tuple[int, int], insn: AluInsn) -> tuple[np.ndarray, np.ndarray | None]:
    """The (dst, src) rows of a one-micro-op ALU loop, shaped (iter_out, iter_in); src None if it reads none
    (:attr:`AluInsn.reads_src`)."""
    src = insn.rows(uop[1], "src")[..., 0] if insn.reads_src else None
    return insn.rows(uop[0], "dst")[..., 0], src


def can_pipe(insn: AluInsn, uops: np.ndarray) -> bool:
    """Whether ``insn`` with its micro-ops ``uops`` ((n, 2 or 3) of dst, src[, wgt]) may carry ``pipe`` and gains
    by it: a MUL or SQR :func:`pipe_refusal` accepts, with an inner loop and no :func:`pipe_hazard`."""
    if pipe_refusal(insn) is not None or insn.iter_in < 2:
        return False
    u = np.asarray(uops)
    return pipe_hazard(*pipe_rows((int(u[0, 0]), int(u[0, 1])), insn)) is None
