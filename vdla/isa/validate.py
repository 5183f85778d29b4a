"""Static validation of a whole program against a hardware configuration."""

from __future__ import annotations

from vdla.config import DW_MAX_K, HwConfig
from vdla.isa.arith import MUL_MAX_SHIFT
from vdla.isa.instructions import (
    PRODUCT_OPS,
    UOP_TYPES,
    AluInsn,
    AluOp,
    EpiInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    IsaError,
    LoopInsn,
    MemInsn,
    MemType,
    Queue,
    encode,
)
from vdla.isa.pipe import pipe_refusal


def pops_of(insn: Insn) -> list[Queue]:
    """The queues an instruction pops a token from (in queue order)."""
    return [q for q in Queue.popped_by(insn.stage) if getattr(insn, q.pop_flag)]


def pushes_of(insn: Insn) -> list[Queue]:
    """The queues an instruction pushes a token on (in queue order)."""
    return [q for q in Queue.pushed_by(insn.stage) if getattr(insn, q.push_flag)]


def _invalid_flags(insn: Insn) -> list[str]:
    """Dependency flags set on an instruction whose stage has no queue for them."""
    valid = {q.pop_flag for q in Queue.popped_by(insn.stage)} | {q.push_flag for q in Queue.pushed_by(insn.stage)}
    flags = ("pop_prev", "pop_next", "push_prev", "push_next")
    return [
        f"{f} is not valid on the {insn.stage.name.lower()} stage" for f in flags if getattr(insn, f) and f not in valid
    ]


def _table_unloaded(table: int, loaded: set[int], cfg: HwConfig) -> list[str]:
    """Why an EPI ``lut`` reading activation table ``table`` reads entries no LOAD LUT wrote (none: it may)."""
    first = table * cfg.lut_depth
    missing = sorted(set(range(first, first + cfg.lut_depth)) - loaded)
    if not missing:
        return []
    if len(missing) == cfg.lut_depth:
        return [f"EPI lut before any LOAD LUT of table {table} (elements {first}..{first + cfg.lut_depth - 1})"]
    return [
        f"EPI lut with table elements {missing} never loaded by this program (LOAD LUT all {cfg.lut_depth} "
        f"elements of table {table}, from element {first}, first: entries not loaded are undefined)"
    ]


def buffer_depth(cfg: HwConfig, mem: MemType) -> int:
    return {
        MemType.UOP: cfg.uop_depth,
        MemType.WGT: cfg.wgt_depth,
        MemType.INP: cfg.inp_depth,
        MemType.ACC: cfg.acc_depth,
        MemType.ACC_8BIT: cfg.acc_depth,
        MemType.OUT: cfg.acc_depth,
        MemType.LUT: cfg.lut_buffer_depth,
        MemType.UOP_PRE: cfg.uop_depth,
    }[mem]


def elem_bytes(cfg: HwConfig, mem: MemType) -> int:
    """Bytes of one element of a memory type in DRAM (dram_base is in these units)."""
    return {
        MemType.UOP: cfg.uop_elem_bytes,
        MemType.WGT: cfg.wgt_elem_bytes,
        MemType.INP: cfg.inp_elem_bytes,
        MemType.ACC: cfg.acc_elem_bytes,
        MemType.ACC_8BIT: cfg.out_elem_bytes,
        MemType.OUT: cfg.out_elem_bytes,
        MemType.LUT: cfg.out_elem_bytes,
        MemType.UOP_PRE: cfg.uop_elem_bytes,
    }[mem]


def dram_span(insn: MemInsn, cfg: HwConfig) -> tuple[int, int]:
    """[first, last) physical byte addresses a LOAD/STORE touches in DRAM."""
    eb = elem_bytes(cfg, insn.mem_type)
    first = insn.dram_base * eb
    return first, first + ((insn.y_size - 1) * insn.x_stride + insn.x_size) * eb


def check_insn(insn: Insn, cfg: HwConfig, dram: tuple[int, int] | None = None) -> list[str]:
    """Problems with one instruction on its own (field ranges, buffer bounds, flags of its stage)."""
    problems = []
    try:
        encode(insn)
    except IsaError as e:
        problems.append(str(e))
    problems += _invalid_flags(insn)
    if isinstance(insn, MemInsn):
        kind = "STORE" if insn.store else "LOAD"
        if insn.store and insn.mem_type != MemType.OUT:
            problems.append(f"STORE must use memory type OUT, not {insn.mem_type.name}")
        if not insn.store and insn.mem_type == MemType.OUT:
            problems.append("LOAD cannot use memory type OUT")
        if insn.is_nop:
            return problems
        pads = (insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1)
        if any(pads) and (insn.store or insn.mem_type in (*UOP_TYPES, MemType.LUT)):
            problems.append(f"{kind} {insn.mem_type.name} cannot have padding {pads}")
        if insn.y_size == 0:
            problems.append(f"{kind} {insn.mem_type.name}: y_size is 0 with x_size {insn.x_size}")
        if insn.y_size > 1 and insn.x_stride < insn.x_size and insn.store:
            problems.append(f"STORE rows overlap: x_stride {insn.x_stride} < x_size {insn.x_size}")
        depth = buffer_depth(cfg, insn.mem_type)
        if insn.sram_base + insn.sram_elems > depth:
            problems.append(
                f"{kind} {insn.mem_type.name}: SRAM tile [{insn.sram_base}, "
                f"{insn.sram_base + insn.sram_elems}) exceeds the buffer depth {depth}"
            )
        if dram is not None:
            lo, hi = dram_span(insn, cfg)
            if lo < dram[0] or hi > dram[1]:
                problems.append(
                    f"{kind} {insn.mem_type.name}: DRAM bytes [{lo:#x}, {hi:#x}) outside the "
                    f"DRAM region [{dram[0]:#x}, {dram[1]:#x})"
                )
    elif isinstance(insn, LoopInsn):
        if insn.uop_bgn >= insn.uop_end:
            problems.append(f"empty micro-op range uop_bgn={insn.uop_bgn} uop_end={insn.uop_end}")
        if insn.uop_end > cfg.uop_depth:
            problems.append(f"uop_end={insn.uop_end} exceeds the UOP buffer depth {cfg.uop_depth}")
        if insn.iter_out == 0 or insn.iter_in == 0:
            problems.append(f"zero loop extent iter_out={insn.iter_out} iter_in={insn.iter_in}")
        if isinstance(insn, AluInsn) and insn.use_imm and not -(1 << 15) <= insn.imm < 1 << 15:
            problems.append(f"imm={insn.imm} does not fit in 16 signed bits")
        if isinstance(insn, AluInsn) and not insn.use_imm and insn.imm:
            if insn.alu_opcode not in PRODUCT_OPS:
                problems.append(f"imm={insn.imm} without use_imm (only MUL and SQR read it, as their shift)")
            elif not 0 <= insn.imm <= MUL_MAX_SHIFT:
                problems.append(f"{insn.alu_opcode.name} shift={insn.imm} outside [0, {MUL_MAX_SHIFT}]")
        if isinstance(insn, AluInsn) and insn.alu_opcode == AluOp.SQR and (insn.use_imm or insn.reset):
            problems.append("SQR reads ACC[dst] alone: no immediate, no reset")
        if isinstance(insn, AluInsn) and insn.pipe and (why := pipe_refusal(insn)):
            problems.append(why)
        if isinstance(insn, GemmInsn) and insn.reset and insn.init:
            problems.append("GEMM cannot have both reset and init")
    elif isinstance(insn, EpiInsn):
        if insn.bias and insn.bias_base >= cfg.acc_depth:
            problems.append(f"EPI bias_base={insn.bias_base} is outside the ACC buffer (depth {cfg.acc_depth})")
        problems += _dw_problems(insn, cfg)
        if insn.lut_table >= cfg.lut_tables:
            problems.append(f"EPI lut_table={insn.lut_table}: config {cfg.name!r} holds {cfg.lut_tables} table(s)")
        if insn.mul and not cfg.out_multiplier:
            problems.append(f"EPI mul: config {cfg.name!r} has no OUT-path multiplier (out_multiplier is false)")
        if insn.mul and insn.mul_base >= cfg.acc_depth:
            problems.append(f"EPI mul_base={insn.mul_base} is outside the ACC buffer (depth {cfg.acc_depth})")
        if insn.src_out and cfg.block_in != cfg.block_out:
            problems.append(
                f"EPI src_out: GEMMs read OUT rows as INP rows, which needs block_in == block_out; config "
                f"{cfg.name!r} has {cfg.block_in} and {cfg.block_out}"
            )
        elif insn.src_out and not cfg.src_out:
            problems.append(f"EPI src_out: config {cfg.name!r} has no copy of OUT for the GEMMs (src_out is false)")
    return problems


def _dw_problems(insn: EpiInsn, cfg: HwConfig) -> list[str]:
    """An EPI dw that the configuration cannot run, or whose kernel or stride the window cannot hold."""
    if not insn.dw:
        return []
    if not cfg.dw_supported:
        return [f"EPI dw: {cfg.dw_refusal()}"]
    if not 1 <= insn.dw_k <= DW_MAX_K:
        return [f"EPI dw: kernel {insn.dw_k} outside [1, {DW_MAX_K}] (the window is {DW_MAX_K}x{DW_MAX_K})"]
    if not 1 <= insn.dw_stride <= insn.dw_k:
        return [f"EPI dw: stride {insn.dw_stride} outside [1, kernel {insn.dw_k}]"]
    return []


def validate_program(insns: list[Insn], cfg: HwConfig, dram: tuple[int, int] | None = None, where: str = "") -> None:
    """Raise IsaError listing every problem: bad fields, out-of-buffer tiles, flags invalid on the stage,
    unbalanced token queues, FINISH not last, an EPI ``lut`` before LOAD LUTs of its whole activation table.
    ``dram`` is the [lo, hi) physical byte range; ``where`` (the program's file) leads the message."""
    problems = []
    loaded: set[int] = set()  # table elements LOADed so far (LOAD LUT and EPI both run on the compute stage,
    # in program order; the table is not cleared by START, so a program must load every element it may read)
    for i, insn in enumerate(insns):
        problems += [f"instruction {i}: {p}" for p in check_insn(insn, cfg, dram)]
        if isinstance(insn, MemInsn) and insn.mem_type == MemType.LUT and not insn.is_nop and not insn.store:
            # the buffer's elements only (check_insn reports a tile past it): a hostile size is not a set
            top = cfg.lut_buffer_depth
            loaded.update(range(min(insn.sram_base, top), min(insn.sram_base + insn.sram_elems, top)))
        if isinstance(insn, EpiInsn) and insn.lut:
            problems += [f"instruction {i}: {p}" for p in _table_unloaded(insn.lut_table, loaded, cfg)]
        if isinstance(insn, FinishInsn) and i != len(insns) - 1:
            problems.append(f"instruction {i}: FINISH before the end of the program")
    if not insns or not isinstance(insns[-1], FinishInsn):
        problems.append("the program does not end with FINISH")
    balance = dict.fromkeys(Queue, 0)
    for insn in insns:
        for q in pops_of(insn):
            balance[q] -= 1
        for q in pushes_of(insn):
            balance[q] += 1
    for q, b in balance.items():
        if b:
            problems.append(
                f"token queue {q.label}: {'pushes' if b > 0 else 'pops'} exceed "
                f"{'pops' if b > 0 else 'pushes'} by {abs(b)}"
            )
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise IsaError(f"{where}{': ' if where else ''}invalid program:\n  " + "\n  ".join(shown))
