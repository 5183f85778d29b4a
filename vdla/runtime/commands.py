"""The command builder: the runtime API that programs the accelerator (modelled on the VTA runtime).

It emits 2-D loads and stores, GEMM and ALU micro-kernels (with a micro-op kernel cache), and
dependency pushes and pops between stages; :meth:`CommandBuilder.synchronize` appends FINISH, runs
the program on its target (a :class:`~vdla.runtime.device.Device`, or anything with the
:class:`CommandTarget` members) and returns the counters. Bad requests raise before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from vdla.config import HwConfig
from vdla.errors import VdlaError
from vdla.isa import (
    PRODUCT_OPS,
    AluInsn,
    AluOp,
    EpiInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    IsaError,
    MemInsn,
    MemType,
    Queue,
    Stage,
    alu_reads_src,
    elem_bytes,
    encode_program,
    encode_uops,
    nop,
    validate_program,
)
from vdla.isa.arith import MUL_MAX_SHIFT
from vdla.isa.pipe import can_pipe, pipe_refusal
from vdla.isa.validate import check_insn
from vdla.runtime.backend import RunResult
from vdla.runtime.dram import Buffer, Dram

UOP_POOL_BYTES = 1 << 16

UopSpec = Sequence[tuple[int, int, int]] | np.ndarray


class CommandError(VdlaError, ValueError):
    """A request the accelerator cannot carry out, caught before the program runs."""


class CommandTarget(Protocol):
    """What a command builder needs from a device: its configuration, the DRAM the program's buffers (and
    micro-op kernels) live in, and a way to run a finished program."""

    cfg: HwConfig
    dram: Dram

    def run_program(self, insns: list[Insn], max_cycles: int | None = None, timeline: bool = False) -> RunResult:
        """Place the program in DRAM and run it."""


def _loop_fields(bgn: int, end: int, iters: tuple[int, int], **factors: tuple[int, int]) -> dict[str, int]:
    """The loop fields of a GEMM or ALU instruction: the micro-op range [bgn, end), (iter_out, iter_in), and each
    named field's (outer, inner) factors as ``<name>_factor_out`` / ``<name>_factor_in``."""
    out = {"uop_bgn": bgn, "uop_end": end, "iter_out": iters[0], "iter_in": iters[1]}
    for name, (fo, fi) in factors.items():
        out[f"{name}_factor_out"], out[f"{name}_factor_in"] = fo, fi
    return out


class CommandBuilder:
    """Builds one instruction stream for a device (see :class:`CommandTarget`)."""

    def __init__(self, device: CommandTarget):
        self.device, self.cfg = device, device.cfg
        self.insns: list[Insn] = []
        self._last: dict[Stage, int] = {}  # index of the last instruction of each stage
        self._pending_pops: dict[Stage, list[Queue]] = {s: [] for s in Stage}
        self._uop_dram: dict[bytes, int] = {}  # kernel bytes -> uop index in DRAM
        self._uop_sram: dict[bytes, int] = {}  # kernel bytes -> UOP buffer offset (resident kernels)
        self._uop_sram_top = 0
        self._pools: list[Buffer] = []
        self._pool_used = 0
        self._epi = EpiInsn()  # the epilogue state of the GEMMs emitted next

    # ---- emission ---------------------------------------------------------------------------
    def emit(self, insn: Insn) -> int:
        """Append an instruction (checked now), attaching pending pops of its stage; returns its index."""
        problems = check_insn(insn, self.cfg, self.device.dram.range)
        if problems:
            raise CommandError("; ".join(problems))
        stage = insn.stage
        pending = self._pending_pops[stage]
        while pending:
            queue = pending.pop(0)
            flag = queue.pop_flag
            if getattr(insn, flag):  # the same queue twice: a no-op ahead of insn carries one pop
                self._append(nop(stage, flag))
            else:
                setattr(insn, flag, True)
        return self._append(insn)

    def _append(self, insn: Insn) -> int:
        self.insns.append(insn)
        self._last[insn.stage] = len(self.insns) - 1
        return len(self.insns) - 1

    def dep_push(self, src: Stage, dst: Stage) -> None:
        """Signal ``dst`` once everything issued so far to ``src`` has completed."""
        queue = self._queue(src, dst)
        flag = queue.push_flag
        last = self._last.get(src)
        if last is None or getattr(self.insns[last], flag):
            self._append(nop(src, flag))
        else:
            setattr(self.insns[last], flag, True)

    def dep_pop(self, src: Stage, dst: Stage) -> None:
        """Make the next instruction of ``dst`` wait for a token pushed by ``src``."""
        self._pending_pops[dst].append(self._queue(src, dst))

    @staticmethod
    def _queue(src: Stage, dst: Stage) -> Queue:
        try:
            return Queue.between(src, dst)
        except IsaError as e:
            raise CommandError(str(e)) from e

    # ---- data movement ----------------------------------------------------------------------
    def load(
        self,
        mem: MemType,
        sram_base: int,
        buf: Buffer,
        offset: int,
        y_size: int,
        x_size: int,
        x_stride: int,
        pad: tuple[int, int, int, int] = (0, 0, 0, 0),
    ) -> int:
        """Load a y_size x x_size tile (rows x_stride elements apart) from ``buf`` starting ``offset``
        elements in, padded by (y0, y1, x0, x1) zero elements, to ``sram_base``."""
        mem = MemType(mem)
        if mem == MemType.OUT:
            raise CommandError("cannot load into memory type OUT")
        dram_base = buf.elem(elem_bytes(self.cfg, mem)) + offset
        self._check_in_buffer(buf, mem, offset, y_size, x_size, x_stride)
        y0, y1, x0, x1 = pad
        return self.emit(
            MemInsn(
                mem_type=mem,
                sram_base=sram_base,
                dram_base=dram_base,
                y_size=y_size,
                x_size=x_size,
                x_stride=x_stride,
                y_pad_0=y0,
                y_pad_1=y1,
                x_pad_0=x0,
                x_pad_1=x1,
            )
        )

    def store(self, sram_base: int, buf: Buffer, offset: int, y_size: int, x_size: int, x_stride: int) -> int:
        """Store y_size x x_size accumulator entries (truncated to int8) into ``buf``."""
        dram_base = buf.elem(self.cfg.out_elem_bytes) + offset
        self._check_in_buffer(buf, MemType.OUT, offset, y_size, x_size, x_stride)
        return self.emit(
            MemInsn(
                store=True,
                mem_type=MemType.OUT,
                sram_base=sram_base,
                dram_base=dram_base,
                y_size=y_size,
                x_size=x_size,
                x_stride=x_stride,
            )
        )

    def _check_in_buffer(self, buf: Buffer, mem: MemType, offset: int, y: int, x: int, stride: int) -> None:
        eb = elem_bytes(self.cfg, mem)
        if x and (offset < 0 or (offset + (y - 1) * stride + x) * eb > buf.nbytes):
            raise CommandError(
                f"{mem.name} tile of {y}x{x} elements (stride {stride}) at element {offset} "
                f"overruns its {buf.nbytes}-byte buffer at {buf.addr:#x}"
            )

    # ---- micro-kernels ----------------------------------------------------------------------
    @staticmethod
    def _uop_array(uops: UopSpec) -> np.ndarray:
        """Micro-ops as an (n, 3) array; (dst, src) pairs get a zero wgt index."""
        arr = np.asarray(uops, dtype=np.int64)
        if arr.size == 0:
            raise CommandError("a micro-kernel needs at least one micro-op")
        if arr.ndim == 2 and arr.shape[1] == 2:
            arr = np.concatenate([arr, np.zeros((len(arr), 1), np.int64)], axis=1)
        return arr.reshape(-1, 3)

    def load_kernel(self, uops: UopSpec) -> tuple[int, int]:
        """Make a micro-kernel resident in the UOP buffer now (a LOAD UOP unless it already is), so that a
        later GEMM or ALU with the same micro-ops does not wait for it; returns its (uop_bgn, uop_end)."""
        return self._kernel(self._uop_array(uops))

    def _kernel(self, uops: np.ndarray) -> tuple[int, int]:
        """Make a micro-op kernel resident in the UOP buffer (loading it if needed): (bgn, end)."""
        words = encode_uops(uops, self.cfg)
        if words.size > self.cfg.uop_depth:
            raise CommandError(f"micro-kernel of {words.size} micro-ops exceeds the UOP buffer ({self.cfg.uop_depth})")
        key = words.tobytes()
        if key in self._uop_sram:
            bgn = self._uop_sram[key]
            return bgn, bgn + words.size
        if key not in self._uop_dram:
            self._uop_dram[key] = self._stash_uops(words)
        if self._uop_sram_top + words.size > self.cfg.uop_depth:
            self._uop_sram.clear()  # evict everything; later kernels reload on demand
            self._uop_sram_top = 0
        bgn = self._uop_sram_top
        pool, index = self._uop_dram[key]
        dram = pool.elem(4) + index
        last = self.insns[-1] if self.insns else None
        if (
            isinstance(last, MemInsn)
            and last.mem_type == MemType.UOP
            and not self._pending_pops[Stage.COMPUTE]
            and not (last.push_prev or last.push_next)
            and last.sram_base + last.x_size == bgn
            and last.dram_base + last.x_size == dram
            and last.y_size == 1
        ):
            last.x_size += words.size  # one LOAD for kernels contiguous in DRAM and in the buffer
            last.x_stride = last.x_size
        else:
            self.emit(
                MemInsn(
                    mem_type=MemType.UOP,
                    sram_base=bgn,
                    dram_base=dram,
                    y_size=1,
                    x_size=words.size,
                    x_stride=words.size,
                )
            )
        self._uop_sram[key] = bgn
        self._uop_sram_top += words.size
        return bgn, bgn + words.size

    def _stash_uops(self, words: np.ndarray) -> tuple[Buffer, int]:
        nbytes = words.size * 4
        if not self._pools or self._pool_used + nbytes > self._pools[-1].nbytes:
            self._pools.append(self.device.dram.alloc(max(UOP_POOL_BYTES, nbytes)))
            self._pool_used = 0
        pool = self._pools[-1]
        pool.write(words, self._pool_used)
        index = self._pool_used // 4
        self._pool_used += nbytes
        return pool, index

    def _loop_check(
        self,
        kind: str,
        uops: np.ndarray,
        iters: tuple[int, int],
        factors: dict[str, tuple[int, int]],
        depths: dict[str, int],
    ) -> None:
        for col, name in enumerate(("dst", "src", "wgt")):
            if name not in factors:
                continue
            fo, fi = factors[name]
            hi = int(uops[:, col].max()) + (iters[0] - 1) * fo + (iters[1] - 1) * fi
            if hi >= depths[name]:
                raise CommandError(f"{kind}: {name} index reaches {hi}, outside its buffer (depth {depths[name]})")

    def gemm(
        self,
        uops: UopSpec,
        iter_out: int = 1,
        iter_in: int = 1,
        dst_factor: tuple[int, int] = (0, 0),
        src_factor: tuple[int, int] = (0, 0),
        wgt_factor: tuple[int, int] = (0, 0),
        reset: bool = False,
        init: bool = False,
    ) -> int:
        """GEMM micro-kernel: for o, i, (dst, src, wgt) in uops: ACC[dst'] += INP[src'] x WGT[wgt']^T,
        with x' = x + o * x_factor[0] + i * x_factor[1] (ACC[dst'] = 0 when ``reset``). With ``init`` the
        first update of each accumulator starts from the EPI bias row ACC[bias_base + o], or zero."""
        if reset and init:
            raise CommandError("GEMM: reset and init exclude each other")
        arr = self._uop_array(uops)
        cfg = self.cfg
        factors = {"dst": dst_factor}
        if not reset:
            factors.update(src=src_factor, wgt=wgt_factor)
        src_depth = cfg.acc_depth if self._epi.src_out else cfg.inp_depth  # EPI src_out: input rows from OUT
        depths = {"dst": cfg.acc_depth, "src": src_depth, "wgt": cfg.wgt_depth}
        if self._epi.dw and not reset:  # the window's last row and the last weight element
            e = self._epi
            depths["src"] -= (e.dw_k - 1) * (e.dw_pitch + 1)
            depths["wgt"] -= 2 * cfg.dw_groups(e.dw_k) - 1
        self._loop_check("GEMM", arr, (iter_out, iter_in), factors, depths)
        bgn, end = self._kernel(arr)
        loop = _loop_fields(bgn, end, (iter_out, iter_in), dst=dst_factor, src=src_factor, wgt=wgt_factor)
        return self.emit(GemmInsn(reset=reset, init=init, **loop))

    def alu(
        self,
        op: AluOp,
        uops: UopSpec,
        iter_out: int = 1,
        iter_in: int = 1,
        dst_factor: tuple[int, int] = (0, 0),
        src_factor: tuple[int, int] = (0, 0),
        imm: int | None = None,
        reset: bool = False,
        shift: int = 0,
        pipe: bool | None = None,
    ) -> int:
        """ALU micro-kernel: ACC[dst'] = op(ACC[dst'], imm if given else ACC[src']); with ``reset`` ACC[dst']
        reads as zero (ADD copies); SQR: ACC[dst'] = ACC[dst']^2 (src' not read). ``shift``: a MUL reading
        ACC[src'] or an SQR rounds its 64-bit product right by it (:func:`vdla.isa.arith.mul_shift`). Uops are
        (dst, src) or (dst, src, 0) triples. ``pipe``: issue a MUL's or an SQR's inner iterations one a cycle
        (:mod:`vdla.isa.pipe`); None sets it wherever it is valid and gains."""
        arr = self._uop_array(uops)
        reads_src = alu_reads_src(AluOp(op), imm is not None)
        factors = {"dst": dst_factor, "src": src_factor} if reads_src else {"dst": dst_factor}
        self._loop_check(
            f"ALU {AluOp(op).name}",
            arr,
            (iter_out, iter_in),
            factors,
            {"dst": self.cfg.acc_depth, "src": self.cfg.acc_depth},
        )
        if imm is not None and not -(1 << 15) <= imm < 1 << 15:
            raise CommandError(f"ALU {AluOp(op).name}: immediate {imm} does not fit in 16 signed bits")
        if shift and (AluOp(op) not in PRODUCT_OPS or imm is not None or not 0 <= shift <= MUL_MAX_SHIFT):
            raise CommandError(
                f"ALU {AluOp(op).name}: shift={shift} needs MUL reading ACC[src] or SQR and lies in "
                f"[0, {MUL_MAX_SHIFT}]"
            )
        bgn, end = self._kernel(arr)
        loop = _loop_fields(bgn, end, (iter_out, iter_in), dst=dst_factor, src=src_factor)
        insn = AluInsn(
            alu_opcode=AluOp(op), use_imm=imm is not None, imm=shift if imm is None else imm, reset=reset, **loop
        )
        if pipe and (why := pipe_refusal(insn)):
            raise CommandError(f"ALU {AluOp(op).name}: {why}")
        return self.emit(replace(insn, pipe=can_pipe(insn, arr) if pipe is None else pipe))

    def epi(
        self,
        req: bool = False,
        relu: bool = False,
        shift: int = 0,
        bias_base: int | None = None,
        lut: bool = False,
        dw: tuple[int, int, int] | None = None,
        src_out: bool = False,
        mul: tuple[int, int] | None = None,
        lut_table: int = 0,
    ) -> int:
        """Set the epilogue state: with ``req`` later ACC writes store their OUT rows requantized (rounding
        right shift by ``shift``, clamp to [0 if ``relu`` else -128, 127]); with ``lut`` that int8 value is
        then replaced by its entry in activation table ``lut_table`` (:meth:`load_table` first); ``bias_base`` (None:
        no bias) is the first bias row of GEMMs with ``init``; ``dw`` = (kernel, stride, pitch) puts later
        GEMMs in the depthwise mode; with ``src_out`` later GEMMs read their input rows from OUT instead of INP;
        ``mul`` = (row, shift): the OUT writes of later GEMMs are first multiplied by the multiplier row
        ACC[row + outer index], the product rounded right by ``shift`` (docs/isa.md)."""
        if not 0 <= shift < 32:
            raise CommandError(f"EPI: shift {shift} is outside [0, 31]")
        self._check_table("EPI", lut_table)
        if bias_base is not None and not 0 <= bias_base < self.cfg.acc_depth:
            raise CommandError(f"EPI: bias row {bias_base} is outside the ACC buffer (depth {self.cfg.acc_depth})")
        k, stride, pitch = dw or (0, 0, 0)
        bias = {"bias": bias_base is not None, "bias_base": bias_base or 0}
        dws = {"dw": dw is not None, "dw_k": k, "dw_stride": stride, "dw_pitch": pitch}
        row, mshift = mul or (0, 0)
        if mul is not None and not self.cfg.out_multiplier:
            raise CommandError(f"EPI mul: config {self.cfg.name!r} has no OUT-path multiplier (out_multiplier false)")
        if mul is not None and not (0 <= row < self.cfg.acc_depth and 0 <= mshift <= MUL_MAX_SHIFT):
            raise CommandError(
                f"EPI mul: row {row} must lie in the ACC buffer (depth {self.cfg.acc_depth}) and shift {mshift} "
                f"in [0, {MUL_MAX_SHIFT}]"
            )
        muls = {"mul": mul is not None, "mul_base": row, "mul_shift": mshift}
        insn = EpiInsn(req=req, relu=relu, shift=shift, lut=lut, lut_table=lut_table, **bias, **dws, src_out=src_out,
                       **muls)  # fmt: skip
        index = self.emit(insn)
        self._epi = insn
        return index

    def _check_table(self, what: str, table: int) -> None:
        """Raise naming ``what`` where ``table`` is not one of the config's activation tables."""
        if not 0 <= table < self.cfg.lut_tables:
            raise CommandError(
                f"{what}: activation table {table} is outside [0, {self.cfg.lut_tables - 1}] (lut_tables of "
                f"config {self.cfg.name!r})"
            )

    def load_table(self, buf: Buffer, offset: int = 0, table: int = 0) -> int:
        """LOAD LUT: the whole activation table ``table`` (LUT_ENTRIES int8 entries, entry ``i`` the output for the
        int8 input whose byte is ``i``) from ``buf``, ``offset`` table elements in."""
        self._check_table("LOAD LUT", table)
        n = self.cfg.lut_depth
        return self.load(MemType.LUT, table * n, buf, offset, 1, n, n)

    # ---- finishing --------------------------------------------------------------------------
    def finish(self) -> list[Insn]:
        """Close the stream: flush pending pops, drain the store stage into FINISH. Returns the program."""
        if self.insns and isinstance(self.insns[-1], FinishInsn):
            return self.insns
        for stage in Stage:
            while self._pending_pops[stage]:
                self.emit(nop(stage))
        if Stage.STORE in self._last:
            self.dep_push(Stage.STORE, Stage.COMPUTE)
            self.dep_pop(Stage.STORE, Stage.COMPUTE)
        self.emit(FinishInsn())
        try:
            validate_program(self.insns, self.cfg, self.device.dram.range)
        except IsaError as e:
            raise CommandError(str(e)) from e
        return self.insns

    def encode(self) -> bytes:
        """The finished program as machine code."""
        return encode_program(self.finish())

    def synchronize(self, max_cycles: int | None = None, timeline: bool = False) -> RunResult:
        """Append FINISH, run the program on the device and return the counters (and timeline)."""
        return self.device.run_program(self.finish(), max_cycles=max_cycles, timeline=timeline)
