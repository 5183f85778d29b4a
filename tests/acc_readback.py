"""Test helper: read whole int32 accumulators back through STOREs on any backend.

A STORE keeps only the low 8 bits, so the helper stores four times with an arithmetic SHR by 8 in
between and reassembles the bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vdla.isa import AluOp, Stage
from vdla.runtime import CommandBuilder, Device


def read_acc(dev: Device, cmd: CommandBuilder, base: int, n: int) -> Callable[[], np.ndarray]:
    """Append the read-back of ACC[base:base+n] to ``cmd``; call the result after synchronize()."""
    cfg = dev.cfg
    out = dev.alloc(4 * n * cfg.out_elem_bytes)
    for k in range(4):
        if k:
            cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
            cmd.alu(AluOp.SHR, [(base, 0)], iter_out=n, dst_factor=(1, 0), imm=8)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(base, out, k * n, 1, n, n)
        if k < 3:
            cmd.dep_push(Stage.STORE, Stage.COMPUTE)

    def result() -> np.ndarray:
        b = out.read(np.uint8, (4, n, cfg.batch, cfg.block_out)).astype(np.int64)
        value = b[0] | b[1] << 8 | b[2] << 16 | ((b[3] ^ 0x80) - 0x80) << 24
        return value.astype(np.int32)

    return result
