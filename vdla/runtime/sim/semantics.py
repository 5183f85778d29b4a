"""Bit-exact functional semantics of every instruction, vectorized with numpy.

The on-chip buffers live in :class:`Sram`; each ``exec_*`` function applies one instruction to them
(and to DRAM). A GEMM or ALU instruction is executed as whole-array operations, never a Python loop
over its micro-op iterations. An instruction that cannot execute (an index outside a buffer, a DRAM access
outside the region) raises the runtime's :class:`~vdla.runtime.backend.FaultError`.
"""

from __future__ import annotations

import numpy as np

from vdla.config import DW_MAX_K, HwConfig
from vdla.isa import AluInsn, AluOp, EpiInsn, GemmInsn, Insn, MemInsn, MemType, clip_bounds, decode_uops, elem_bytes
from vdla.isa.arith import INT8_MAX, INT8_MIN, lane_sum, mul_shift, requantize, shift_lanes
from vdla.isa.pipe import pipe_hazard
from vdla.runtime.backend import FaultError
from vdla.runtime.dram import Dram

EXACT_TERMS = 1 << 10  # int8 x int8 products whose float32 sum is exact: 1024 * 2^14 = 2^24


class Sram:
    """The accelerator's on-chip buffers and the compute stage's epilogue state.

    INP and WGT hold int8 values in float32 arrays: GEMMs run as float32 BLAS products, which are exact
    for integer sums below 2^24 (up to 1024 int8 x int8 terms; longer sums are split). OUT mirrors ACC
    as int8: every ACC write also writes its OUT row, truncated or (after an EPI with ``req``) requantized,
    then (after an EPI with ``lut``) looked up in activation table ``lut_table`` of ``lut`` (``lut_tables`` tables of
    LUT_ENTRIES int8 entries, each indexed by the int8 value's two's-complement byte).
    """

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.inp = np.zeros((cfg.inp_depth, cfg.batch, cfg.block_in), np.float32)
        self.wgt = np.zeros((cfg.wgt_depth, cfg.block_out, cfg.block_in), np.float32)
        self.acc = np.zeros((cfg.acc_depth, cfg.batch, cfg.block_out), np.int32)
        self.out = np.zeros((cfg.acc_depth, cfg.batch, cfg.block_out), np.int8)
        self.uop = np.zeros(cfg.uop_depth, np.uint32)
        self.lut = np.zeros((cfg.lut_buffer_depth, cfg.batch, cfg.block_out), np.int8)
        self.epi = EpiInsn()

    def mirror(self, rows: np.ndarray | slice, mult: np.ndarray | None = None) -> None:
        """Write the OUT rows of freshly written ACC rows; ``mult``: each row's multiplier row (EPI ``mul``, a
        GEMM's writes), the value's product with it rounded right by ``mul_shift`` before the rest."""
        v = self.acc[rows]
        if mult is not None:
            v = mul_shift(v, mult, self.epi.mul_shift)
        if self.epi.req:
            v = _alu_apply(AluOp.REQ, v.astype(np.int64), np.int64(self.epi.shift | self.epi.relu << 5))
        v = v.astype(np.int8)
        if self.epi.lut:
            v = self.lut.reshape(self.cfg.lut_tables, -1)[self.epi.lut_table, v.view(np.uint8)]
        self.out[rows] = v

    @property
    def src(self) -> np.ndarray:
        """The rows GEMMs read their inputs from: INP, or (after an EPI with ``src_out``) OUT as float32."""
        return self.out.astype(np.float32) if self.epi.src_out else self.inp

    @property
    def src_depth(self) -> int:
        return self.cfg.acc_depth if self.epi.src_out else self.cfg.inp_depth

    @property
    def src_name(self) -> str:
        return "OUT" if self.epi.src_out else "INP"


def _row_index(insn: MemInsn) -> np.ndarray:
    """Element offsets (from dram_base) of the y_size x x_size tile."""
    return (np.arange(insn.y_size)[:, None] * insn.x_stride + np.arange(insn.x_size)[None, :]).reshape(-1)


def _dram_elems(dram: Dram, insn: MemInsn, eb: int) -> tuple[np.ndarray, np.ndarray]:
    """DRAM viewed as elements of ``eb`` bytes, and the element indices the tile touches."""
    first = insn.dram_base * eb - dram.base
    idx = first // eb + _row_index(insn)
    if first < 0 or idx[-1] >= dram.size // eb:
        lo = insn.dram_base * eb
        hi = lo + (int(idx[-1]) - first // eb + 1) * eb
        raise FaultError(
            f"DRAM access [{lo:#x}, {hi:#x}) outside the region [{dram.base:#x}, {dram.base + dram.size:#x})"
        )
    return dram.mem.reshape(-1, eb), idx


def exec_load(sram: Sram, insn: MemInsn, dram: Dram) -> None:
    """LOAD a padded 2-D tile into SRAM."""
    if insn.is_nop:
        return
    cfg, mem = sram.cfg, insn.mem_type
    eb = elem_bytes(cfg, mem)
    elems, idx = _dram_elems(dram, insn, eb)
    data = elems[idx]  # (y*x, eb) uint8, a copy
    target, dtype = {
        MemType.INP: (sram.inp, np.int8),
        MemType.WGT: (sram.wgt, np.int8),
        MemType.ACC: (sram.acc, np.int32),
        MemType.ACC_8BIT: (sram.acc, np.int8),
        MemType.UOP: (sram.uop, np.uint32),
        MemType.LUT: (sram.lut, np.int8),
        MemType.UOP_PRE: (sram.uop, np.uint32),
    }[mem]
    values = data.view(dtype).reshape((insn.y_size, insn.x_size) + target.shape[1:])
    tile = np.zeros((insn.rows, insn.cols) + target.shape[1:], target.dtype)
    tile[insn.y_pad_0 : insn.y_pad_0 + insn.y_size, insn.x_pad_0 : insn.x_pad_0 + insn.x_size] = values
    n = insn.rows * insn.cols
    if insn.sram_base + n > len(target):
        raise FaultError(
            f"SRAM tile [{insn.sram_base}, {insn.sram_base + n}) exceeds the {mem.name} buffer depth {len(target)}"
        )
    target[insn.sram_base : insn.sram_base + n] = tile.reshape((n,) + target.shape[1:])
    if target is sram.acc:
        sram.mirror(slice(insn.sram_base, insn.sram_base + n))


def exec_store(sram: Sram, insn: MemInsn, dram: Dram) -> None:
    """STORE y_size x x_size rows of the OUT mirror (int8) of the accumulators."""
    if insn.is_nop:
        return
    n = insn.y_size * insn.x_size
    if insn.sram_base + n > len(sram.acc):
        raise FaultError(f"STORE reads ACC [{insn.sram_base}, {insn.sram_base + n}) beyond depth {len(sram.acc)}")
    eb = sram.cfg.out_elem_bytes
    elems, idx = _dram_elems(dram, insn, eb)
    elems[idx] = sram.out[insn.sram_base : insn.sram_base + n].reshape(n, -1).view(np.uint8)


def _loop_indices(sram: Sram, insn: GemmInsn | AluInsn, names: tuple[str, ...]) -> list[np.ndarray]:
    """Per-iteration indices shaped (iter_out, iter_in, uops): row-major order is execution order."""
    uops = decode_uops(sram.uop[insn.uop_bgn : insn.uop_end], sram.cfg)
    return [insn.rows(base, name) for base, name in zip(uops, names)]


def _distinct(idx: np.ndarray, depth: int) -> np.ndarray:
    """The distinct indices, ascending (a mask pass: cheaper than sorting the iterations)."""
    mask = np.zeros(depth, bool)
    mask[idx.reshape(-1)] = True
    return np.flatnonzero(mask)


def _check_range(idx: np.ndarray, depth: int, what: str) -> None:
    hi = int(idx.max())
    if hi >= depth:
        raise FaultError(f"{what} index {hi} outside the buffer (depth {depth})")


def exec_gemm(sram: Sram, insn: GemmInsn) -> None:
    """ACC[dst] (+)= INP[src] x WGT[wgt]^T over the micro-op loop (see :class:`GemmInsn` for ``init``)."""
    cfg = sram.cfg
    dst, src, wgt = _loop_indices(sram, insn, ("dst", "src", "wgt"))  # each (iter_out, iter_in, uops)
    _check_range(dst, cfg.acc_depth, "GEMM ACC (dst)")
    touched = _distinct(dst, cfg.acc_depth)
    if insn.reset:
        sram.acc[touched] = 0
        sram.mirror(touched)
        return
    dw = _dw_sums(sram, insn, dst, src, wgt) if sram.epi.dw else None  # range-checked as they are formed
    if dw is None:
        _check_range(src, sram.src_depth, f"GEMM {sram.src_name} (src)")
        _check_range(wgt, cfg.wgt_depth, "GEMM WGT (wgt)")
        _check_src_out(sram, dst, src)
    mult = _out_multipliers(sram, insn, dst, touched) if sram.epi.mul else None
    if insn.init and not _init_accumulators(sram, insn, dst):
        sums = dw if dw is not None else _products(sram, src.reshape(-1), wgt.reshape(-1))
        _accumulate_sequential(sram, dst, sums)
    elif dw is not None:
        _accumulate(sram.acc, dst.reshape(-1), dw)
    else:
        if np.all(wgt == wgt[:, :, :1]):
            rows, sums = _loop_products(sram, insn, dst, src, wgt[:, :, 0])
        else:
            rows, sums = dst.reshape(-1), _products(sram, src.reshape(-1), wgt.reshape(-1))
        _accumulate(sram.acc, rows, sums)
    sram.mirror(touched, mult)


def _out_multipliers(sram: Sram, insn: GemmInsn, dst: np.ndarray, touched: np.ndarray) -> np.ndarray:
    """The multiplier row of each of ``touched`` (EPI ``mul``): ACC[mul_base + o] for the outer index o of the
    row's last write, read before the GEMM runs. The rows must lie in ACC and the GEMM may not write them (the
    RTL reads each at the start of its outer iteration)."""
    epi, per_outer = sram.epi, dst.shape[1] * dst.shape[2]
    rows = np.arange(epi.mul_base, epi.mul_base + insn.iter_out)
    _check_range(rows, sram.cfg.acc_depth, "GEMM OUT multiplier row (EPI mul_base)")
    if (hit := np.intersect1d(rows, touched)).size:
        raise FaultError(f"GEMM writes ACC row {int(hit[0])}, one of its OUT multiplier rows (EPI mul_base)")
    flat = dst.reshape(-1)[::-1]
    _, first = np.unique(flat, return_index=True)  # ascending rows, as touched: each one's last write, reversed
    return sram.acc[epi.mul_base + (flat.size - 1 - first) // per_outer]


def _check_src_out(sram: Sram, dst: np.ndarray, rows: np.ndarray) -> None:
    """A GEMM reading OUT (EPI ``src_out``) may not write an ACC row whose OUT row it reads: the RTL's reads and
    write-backs overlap in its pipeline, so such a read has no defined value."""
    if not sram.epi.src_out:
        return
    both = np.intersect1d(dst.reshape(-1), rows.reshape(-1))
    if both.size:
        raise FaultError(f"GEMM reading OUT (EPI src_out) writes row {int(both[0])}, which it also reads")


def dw_window_rows(k: int, stride: int, pitch: int, src: np.ndarray) -> np.ndarray:
    """The INP rows in the depthwise mode's window after each uop-iteration: (iterations, DW_MAX_K * DW_MAX_K),
    position ky * DW_MAX_K + q, -1 where the window holds zeros (``src`` shaped (iter_out, iter_in, uops)).

    The window is DW_MAX_K shift registers of DW_MAX_K rows, zero when the GEMM starts. An iteration at inner
    index 0 shifts ``k`` columns into the first ``k`` registers, the others ``stride`` columns: register ky
    takes rows src + ky * pitch + kx for the window's last columns kx (k - n .. k - 1 of n shifted in), so
    a kernel row's taps sit in positions DW_MAX_K - k .. DW_MAX_K - 1 of its register."""
    n_out, n_in, n_uop = src.shape
    cols = np.full(src.shape, stride, np.intp)  # repeat counts: the platform's index type (int32 on armv7)
    cols[:, 0, :] = k
    cols, base = cols.reshape(-1), src.reshape(-1).astype(np.int64)
    seq = np.repeat(base + k - cols, cols) + _ranks(cols)  # kernel row 0's rows, in shift order
    seq = np.concatenate([np.full(DW_MAX_K, -1, np.int64), seq])
    ends = np.cumsum(cols) + DW_MAX_K
    row0 = seq[ends[:, None] - DW_MAX_K + np.arange(DW_MAX_K)]  # (iterations, DW_MAX_K)
    ky = np.arange(DW_MAX_K)[:, None]
    win = np.where((row0[:, None, :] >= 0) & (ky < k), row0[:, None, :] + ky * pitch, -1)
    return win.reshape(len(base), DW_MAX_K * DW_MAX_K)


def _ranks(counts: np.ndarray) -> np.ndarray:
    """0, 1, .., c - 1 for each count c, concatenated."""
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(int(counts.sum())) - starts


def _dw_sums(sram: Sram, insn: GemmInsn, dst: np.ndarray, src: np.ndarray, wgt: np.ndarray) -> np.ndarray:
    """Per uop-iteration (in execution order) of a depthwise-mode GEMM, shaped (iterations, 1, block_out): over
    its passes j = 2g + h (g < dw_groups, h < 2), lane l adds sum over i of WGT[wgt + j][l][i] times window
    position g * block_in + i, channel l mod (block_out / 2) + h * block_out / 2 (zero past the window)."""
    cfg, epi = sram.cfg, sram.epi
    groups, b, half = cfg.dw_groups(epi.dw_k), cfg.block_in, cfg.block_out // 2
    win = dw_window_rows(epi.dw_k, epi.dw_stride, epi.dw_pitch, src)
    read = win[win >= 0]
    if read.size:
        _check_range(read, sram.src_depth, f"GEMM {sram.src_name} (depthwise window row)")
        _check_src_out(sram, dst, read)
    _check_range(wgt + 2 * groups - 1, cfg.wgt_depth, "GEMM WGT (wgt)")
    n = win.shape[0]
    rows = np.full((n, groups * b), -1, np.int64)
    rows[:, : min(groups * b, win.shape[1])] = win[:, : groups * b]
    x = np.where(rows[..., None] >= 0, sram.src[np.maximum(rows, 0), 0], 0).astype(np.int64)
    x = x.reshape(n, groups, b, -1)  # (n, g, i, channel)
    w_idx = wgt.reshape(-1)[:, None] + np.arange(2 * groups)[None, :]
    w = sram.wgt[w_idx].reshape(n, groups, 2, cfg.block_out, b).astype(np.int64)  # (n, g, h, lane, i)
    sums = np.zeros((n, cfg.block_out), np.int64)
    for h in range(2):
        xs = x[..., np.arange(cfg.block_out) % half + h * half]  # (n, g, i, lane): each lane's channel
        sums += np.einsum("ngli,ngil->nl", w[:, :, h], xs)
    return sums.astype(np.int32)[:, None, :]


def _init_accumulators(sram: Sram, insn: GemmInsn, dst: np.ndarray) -> bool:
    """Set every accumulator of an ``init`` GEMM to its init value (the bias row of the iteration that
    first touches it, or zero). False, changing nothing, when a bias row is itself a destination: then
    only a sequential execution is exact."""
    if not sram.epi.bias:
        sram.acc[_distinct(dst, sram.cfg.acc_depth)] = 0
        return True
    _check_range(np.array([sram.epi.bias_base + insn.iter_out - 1]), sram.cfg.acc_depth, "GEMM init bias row")
    rows, first = np.unique(dst.reshape(-1), return_index=True)
    bias = sram.epi.bias_base + first // (dst.shape[1] * dst.shape[2])
    if np.isin(bias, rows).any():
        return False
    sram.acc[rows] = sram.acc[bias]
    return True


def _accumulate_sequential(sram: Sram, dst: np.ndarray, sums: np.ndarray) -> None:
    """An ``init`` GEMM's updates one iteration at a time, in execution order: ACC[dst[n]] += sums[n], each
    row's first update starting from the bias row of its iteration's outer index."""
    seen: set[int] = set()
    per_outer = dst.shape[1] * dst.shape[2]
    for n, d in enumerate(dst.reshape(-1).tolist()):
        base = sram.acc[d] if d in seen else sram.acc[sram.epi.bias_base + n // per_outer]
        seen.add(d)
        sram.acc[d] = (base.astype(np.int64) + sums[n].astype(np.int64)).astype(np.int32)


def _loop_products(
    sram: Sram, insn: GemmInsn, dst: np.ndarray, src: np.ndarray, wgt: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Products when every micro-op of an iteration uses the same weight block (convolutions, matmuls).

    Loop levels that do not move ``dst`` are reductions: they are folded into the inner dimension of
    one matrix product per remaining iteration, so BLAS does the accumulation.
    """
    cfg = sram.cfg
    n_out, n_in, n_uop = dst.shape
    keep = [ax for ax, (f, n) in enumerate(((insn.dst_factor_out, n_out), (insn.dst_factor_in, n_in))) if f and n > 1]
    red = [ax for ax in (0, 1) if ax not in keep]
    groups = int(np.prod([dst.shape[ax] for ax in keep]))
    depth = int(np.prod([dst.shape[ax] for ax in red])) * cfg.block_in
    a = sram.src[src].transpose(keep + [2, 3] + red + [4]).reshape(groups, n_uop * cfg.batch, depth)
    w = sram.wgt[wgt].transpose(keep + red + [3, 2]).reshape(groups, depth, cfg.block_out)
    if depth <= EXACT_TERMS:
        sums = np.matmul(a, w)
    else:
        sums = sum(
            np.matmul(a[..., k : k + EXACT_TERMS], w[:, k : k + EXACT_TERMS]).astype(np.float64)
            for k in range(0, depth, EXACT_TERMS)
        )
    sums = sums.reshape(groups * n_uop, cfg.batch, cfg.block_out)
    rows = dst[tuple(slice(None) if ax in keep else 0 for ax in (0, 1))].reshape(-1)
    return rows, sums


def _accumulate(acc: np.ndarray, rows: np.ndarray, sums: np.ndarray) -> None:
    """ACC[rows[n]] += sums[n] with int32 wrap-around; repeated rows add up."""
    if np.bincount(rows).max() == 1:
        acc[rows] = (acc[rows].astype(np.int64) + sums.astype(np.int64)).astype(np.int32)
        return
    lanes = acc.shape[1] * acc.shape[2]
    flat = (rows[:, None] * lanes + np.arange(lanes)).reshape(-1)
    total = np.bincount(flat, weights=sums.reshape(-1), minlength=acc.size)
    touched = np.unique(rows)
    t = (touched[:, None] * lanes + np.arange(lanes)).reshape(-1)
    a = acc.reshape(-1)
    a[t] = (a[t].astype(np.int64) + total[t].astype(np.int64)).astype(np.int32)


def _products(sram: Sram, src: np.ndarray, wgt: np.ndarray) -> np.ndarray:
    """INP[src[n]] @ WGT[wgt[n]]^T for every n, computed in float32 BLAS (exact: |sum| < 2^24).

    Iterations are grouped by weight block so that each group is one matrix product.
    """
    cfg = sram.cfg
    n = src.size
    order = np.argsort(wgt, kind="stable")
    blocks, counts = np.unique(wgt[order], return_counts=True)
    inp = sram.src
    width = int(counts.max())
    w = sram.wgt[blocks].transpose(0, 2, 1)  # (k, block_in, block_out)
    if blocks.size * width <= 2 * n:
        slot = _ranks(counts)
        group = np.repeat(np.arange(blocks.size), counts)
        a = np.zeros((blocks.size, width, cfg.batch, cfg.block_in), np.float32)
        a[group, slot] = inp[src[order]]
        p = np.matmul(a.reshape(blocks.size, width * cfg.batch, cfg.block_in), w)
        p = p.reshape(blocks.size, width, cfg.batch, cfg.block_out)[group, slot]
    else:  # very uneven groups: one product per iteration
        group = np.searchsorted(blocks, wgt[order])
        p = np.einsum("nbi,nio->nbo", inp[src[order]], w[group])
    out = np.empty_like(p)
    out[order] = p
    return out


def _alu_apply(op: AluOp, a: np.ndarray, b: np.ndarray, shift: int = 0) -> np.ndarray:
    """One ALU operation lane-wise on int64 copies of int32 values; returns int32. ``shift``: MUL's and SQR's
    rounding shift of the 64-bit product (the imm of a MUL reading ACC[src], of an SQR); SQR does not read b."""
    if op == AluOp.MIN:
        r = np.minimum(a, b)
    elif op == AluOp.MAX:
        r = np.maximum(a, b)
    elif op == AluOp.ADD:
        r = a + b
    elif op == AluOp.MUL:
        r = mul_shift(a, b, shift)
    elif op == AluOp.SQR:
        r = mul_shift(a, a, shift)
    elif op in (AluOp.SHR, AluOp.RSHR):
        r = shift_lanes(a, b, rounding=op == AluOp.RSHR)
    elif op == AluOp.CLIP:
        lo, hi = clip_bounds(b)
        r = np.minimum(np.maximum(a, lo), hi)
    elif op == AluOp.REQ:
        r = requantize(a, 1, b & 0x1F, np.where(b & 0x20, 0, INT8_MIN), INT8_MAX).astype(np.int64)  # b: shift | relu<<5
    elif op == AluOp.LSUM:  # a row's lanes are its last two axes (batch, block_out)
        r = lane_sum(b, np.broadcast_shapes(np.shape(a), np.shape(b)))
    else:
        raise FaultError(f"unknown ALU opcode {op}")
    return (np.asarray(r) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def _check_pipe(dst: np.ndarray, src: np.ndarray | None, name: str) -> None:
    """A pipelined MUL or SQR ``name`` (one micro-op: rows shaped (iter_out, iter_in); ``src`` None for an SQR)
    whose inner iteration reads the row the one before it writes: the hardware stops before that read
    (:func:`vdla.isa.pipe.pipe_hazard`)."""
    at = pipe_hazard(dst, src)
    if at is not None:
        o, i = at
        row = int(dst[o, i])
        what = "destination" if dst[o, i + 1] == row else "held source row"
        raise FaultError(
            f"pipelined {name}: iteration ({o}, {i}) writes ACC row {row}, which the next iteration reads as its "
            f"{what} (a pipelined {name}'s next iteration cannot see it: drop pipe or reorder the rows)"
        )


def exec_alu(sram: Sram, insn: AluInsn) -> None:
    """ACC[dst] = op(ACC[dst], imm or ACC[src]) over the micro-op loop, with sequential semantics (SQR:
    ACC[dst] = mul_shift(ACC[dst], ACC[dst], imm), no source row).

    With reset, ACC[dst] reads as zero: ACC[dst] = op(0, imm or ACC[src]) (ADD copies, ADD imm 0 clears).
    """
    cfg = sram.cfg
    dst, src = (x.reshape(-1) for x in _loop_indices(sram, insn, ("dst", "src")))
    _check_range(dst, cfg.acc_depth, "ALU ACC (dst)")
    acc = sram.acc
    reads_src = insn.reads_src
    if reads_src:
        _check_range(src, cfg.acc_depth, "ALU ACC (src)")
    if insn.pipe:
        rows = src.reshape(insn.iter_out, insn.iter_in) if reads_src else None
        _check_pipe(dst.reshape(insn.iter_out, insn.iter_in), rows, insn.alu_opcode.name)
    # Occurrence number of each dst: iterations with equal rank touch distinct entries.
    order = np.argsort(dst, kind="stable")
    sd = dst[order]
    first = np.r_[True, sd[1:] != sd[:-1]]
    rank = np.empty(dst.size, np.int64)
    rank[order] = np.arange(dst.size) - np.maximum.accumulate(np.where(first, np.arange(dst.size), 0))
    owner = np.full(cfg.acc_depth, -1, np.int64)
    owner[dst] = np.arange(dst.size)  # with duplicates, some writer of each entry
    mul_sh = 0 if insn.use_imm else insn.imm  # MUL reading ACC[src], SQR: imm is the product's shift
    reads_written = reads_src and bool(np.any((owner[src] >= 0) & (src != dst)))
    if reads_written or (reads_src and rank.max() > 0 and np.any(owner[src] >= 0)):
        for n in range(dst.size):  # a source is also a destination: only a sequential order is exact
            a = np.zeros(acc[dst[n]].shape, np.int64) if insn.reset else acc[dst[n]].astype(np.int64)
            acc[dst[n]] = _alu_apply(insn.alu_opcode, a, acc[src[n]].astype(np.int64), mul_sh)
        sram.mirror(_distinct(dst, cfg.acc_depth))
        return
    imm = np.int64(insn.imm)
    for r in range(int(rank.max()) + 1):
        sel = rank == r if rank.max() else slice(None)
        d = dst[sel]
        b = acc[src[sel]].astype(np.int64) if reads_src else imm
        a = np.zeros(acc[d].shape, np.int64) if insn.reset else acc[d].astype(np.int64)
        acc[d] = _alu_apply(insn.alu_opcode, a, b, mul_sh)
    sram.mirror(_distinct(dst, cfg.acc_depth))


def execute(sram: Sram, insn: Insn, dram: Dram) -> None:
    """Apply one instruction to the buffers and DRAM (FINISH and no-ops change nothing; EPI sets state)."""
    if isinstance(insn, MemInsn):
        (exec_store if insn.store else exec_load)(sram, insn, dram)
    elif isinstance(insn, GemmInsn):
        exec_gemm(sram, insn)
    elif isinstance(insn, AluInsn):
        exec_alu(sram, insn)
    elif isinstance(insn, EpiInsn):
        sram.epi = insn
