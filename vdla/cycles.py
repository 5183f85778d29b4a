"""The cycle model: how long each instruction occupies its stage, and the two DRAM bus channels.

It depends only on the configuration and the ISA: every parameter comes from
:class:`vdla.config.Timing`. The simulator (``vdla/runtime/sim``) runs it instruction by instruction,
the compiler's cost model (``vdla/compiler/costmodel.py``) uses it per operation, and the RTL
implements the same timing (``benchmarks/cycle_agreement.py`` measures the agreement).
"""

from __future__ import annotations

from vdla.config import HwConfig, Timing
from vdla.isa import (
    PRODUCT_OPS,
    UOP_TYPES,
    AluInsn,
    AluOp,
    EpiInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    alu_reads_src,
    elem_bytes,
)

SHIFTS = (AluOp.SHR, AluOp.RSHR, AluOp.REQ)  # they form their shift controls as the source row is read
# the operations a half-width ALU runs over the whole row in one cycle (ADD's adders, the GEMM's accumulation):
# every other one takes two passes of half the lanes (alu_passes)
FULL_WIDTH = (AluOp.ADD,)
# the operations whose result comes from the read-modify-write's M stage on every ALU: MUL and SQR register their
# partial products, LSUM four partial sums of its adder tree
TWO_CYCLE = (*PRODUCT_OPS, AluOp.LSUM)


def _held(op: AluOp, same_src: bool) -> bool:
    """A source row that stays the same for the whole inner loop is held, unless the operation is a shift (of an
    operation that reads one: :func:`vdla.isa.instructions.alu_reads_src`)."""
    return same_src and op not in SHIFTS


def holds_src(insn: AluInsn) -> bool:
    """Whether a two-operand ALU instruction reads its source row once per outer iteration and holds it across
    the inner loop: one micro-op, ``src_factor_in == 0`` (the same row for every inner iteration), and not a
    shift (SHR, RSHR and REQ form their shift controls as the row is read). Writes to the held row by the
    instruction's own iterations are seen (the RTL forwards them), so the data semantics are unchanged."""
    same_src = insn.uop_end - insn.uop_bgn == 1 and insn.src_factor_in == 0
    return not insn.reset and insn.reads_src and _held(insn.alu_opcode, same_src)


def src_reads(insn: AluInsn) -> int:
    """Uop-iterations of an ALU instruction that read ``ACC[src]`` in a cycle of their own (the ACC has one
    read port): every iteration of a two-operand instruction, or one per outer iteration when it holds its
    source row (:func:`holds_src`); none with an immediate or a reset (``op(0, v)`` reads one row), nor for an
    SQR (:attr:`vdla.isa.AluInsn.reads_src`)."""
    if insn.reset or not insn.reads_src:
        return 0
    return insn.iter_out if holds_src(insn) else insn.iterations


def two_cycle(op: AluOp, passes: int = 1) -> bool:
    """Whether an ALU operation's result comes from the read-modify-write's M stage, a cycle after a one-cycle
    operation's: a MUL's, an SQR's and an LSUM's (:data:`TWO_CYCLE`: the products, the tree's partial sums
    registered), and
    on a half-width ALU (``passes`` 2, :attr:`vdla.config.HwConfig.alu_passes`) every operation's
    but ADD's (each pass registers its half of the operands in C and computes in M)."""
    return op in TWO_CYCLE or (passes > 1 and op not in FULL_WIDTH)


def alu_ii(
    t: Timing,
    op: AluOp,
    use_imm: bool,
    reset: bool = False,
    same_src: bool = False,
    pipe: bool = False,
    passes: int = 1,
) -> int:
    """Cycles per uop-iteration of an ALU instruction: ``alu_ii`` when it reads ``ACC[src]`` as well as
    ``ACC[dst]`` (one ACC read port), else 1: an immediate, a reset, an SQR (no source row) or (``same_src``: one
    source row for the whole inner loop) a row held across the inner loop (:func:`holds_src`; read once per outer
    iteration, which this per-iteration figure leaves out). A :func:`two_cycle` operation (a MUL) takes
    ``alu_mul_cycles - 1`` more (:func:`mul_extra`), unless pipelined (``pipe``: then only each inner loop's last,
    also left out here). On a half-width ALU (``passes`` 2) an operation other than ADD (:data:`FULL_WIDTH`)
    issues each iteration twice, once per half of the lanes, the second followed by :func:`mul_extra`. The RTL
    (``vdla_loop_seq``) issues by the same rule; the compiler's epilogue cost uses this function too."""
    reads = alu_reads_src(op, use_imm) and not (reset or _held(op, same_src))
    base = t.alu_ii if reads else 1
    if passes > 1 and op not in FULL_WIDTH:
        base += passes - 1
        if reads and op not in SHIFTS:  # the next iteration's source read follows the second pass at once
            return base
    return base + (0 if pipe else mul_extra(t, op, passes))


def mul_extra(t: Timing, op: AluOp, passes: int = 1) -> int:
    """Cycles a :func:`two_cycle` uop-iteration (a MUL, SQR or LSUM; on a half-width ALU every operation but ADD) takes
    beyond a one-cycle operation's: ``alu_mul_cycles - 1``, 0 for the others. Its slot spends a cycle in the
    read-modify-write's C stage (a MUL's partial products, a half's operands), then one in M (their sum, the
    half's result), so the sequencer leaves the cycle after it without an issue, and the next iteration sees its
    result (resets too: the rule is the operation's alone)."""
    return t.alu_mul_cycles - 1 if two_cycle(op, passes) else 0


def mul_gaps(insn: AluInsn, passes: int = 1) -> int:
    """Uop-iterations of an ALU instruction followed by :func:`mul_extra` cycles without an issue: every one of a
    :func:`two_cycle` operation (a MUL, an SQR or an LSUM; on a half-width ALU every operation but ADD, after its
    second pass), or with ``pipe`` (:mod:`vdla.isa.pipe`: a MUL or an SQR of one micro-op) only each inner loop's
    last; none
    otherwise. On a half-width ALU a two-operand instruction that is not a shift or pipelined has none before an
    iteration that
    reads its source row in a SRC slot (every one, or those at inner index 0 when it holds the row), which takes
    the cycle (the RTL forwards the row it reads, ``vdla_acc_rmw``), but after its last."""
    if not two_cycle(insn.alu_opcode, passes):
        return 0
    if insn.pipe:
        return insn.iter_out
    if passes > 1 and src_reads(insn) and insn.alu_opcode not in SHIFTS + FULL_WIDTH:
        return insn.iterations - src_reads(insn) + 1  # not before an iteration's SRC slot, but after the last
    return insn.iterations


def alu_issues(insn: AluInsn, passes: int = 1) -> int:
    """Slots an ALU instruction issues: one per uop-iteration, ``passes`` per uop-iteration of an operation other
    than ADD (:data:`FULL_WIDTH`) on a half-width ALU (:attr:`vdla.config.HwConfig.alu_passes`)."""
    return insn.iterations * (passes if insn.alu_opcode not in FULL_WIDTH else 1)


def alu_cycles(t: Timing, insn: AluInsn, passes: int = 1) -> int:
    """Cycles of an ALU instruction: setup, one per issue (:func:`alu_issues`) plus ``alu_ii - 1`` per source-row
    read (:func:`src_reads`) and :func:`mul_extra` per :func:`mul_gaps`, and the pipeline drain."""
    op = insn.alu_opcode
    extra = mul_gaps(insn, passes) * mul_extra(t, op, passes) + src_reads(insn) * (t.alu_ii - 1)
    return t.alu_setup + alu_issues(insn, passes) + extra + t.alu_pipeline


def burst_beats(addr: int, nbytes: int, bus_bytes: int, max_beats: int) -> tuple[int, int]:
    """(beats, bursts) of an AXI transfer of ``nbytes`` at ``addr``: split at 4 KiB and max_beats."""
    beats = bursts = 0
    end = addr + nbytes
    while addr < end:
        limit = min(end, (addr // 4096 + 1) * 4096, (addr // bus_bytes + max_beats) * bus_bytes)
        beats += (limit - 1) // bus_bytes - addr // bus_bytes + 1
        bursts += 1
        addr = limit
    return beats, bursts


def transfer_shape(insn: MemInsn, cfg: HwConfig) -> tuple[int, int]:
    """(beats, bursts) of all rows of a LOAD/STORE."""
    eb = elem_bytes(cfg, insn.mem_type)
    row_bytes = insn.x_size * eb
    beats = bursts = 0
    t = cfg.timing
    for r in range(insn.y_size):
        b, n = burst_beats((insn.dram_base + r * insn.x_stride) * eb, row_bytes, cfg.bus_bytes, t.max_burst_beats)
        beats, bursts = beats + b, bursts + n
    return beats, bursts


def dw_slots(cfg: HwConfig, epi: EpiInsn, insn: GemmInsn) -> int:
    """Cycles of the uop-iterations (pixels) of a GEMM in the depthwise mode (``epi.dw``, not a reset). Pixel n's
    window reads (one INP row a cycle: dw_k x dw_k at inner index 0, else dw_k x dw_stride) share a group of
    slots with pixel n-1's passes (two per WGT element of the window, :meth:`HwConfig.dw_groups`), both ending
    with the group's last slot; the passes take the window the previous group's last read left, so a group is
    max(reads, passes + 1) slots. The first group is its reads alone, and the last pixel's passes follow in a
    group of their own, a free slot and the passes. A slot reads one micro-op, so with more than one (consecutive
    pixels of different micro-ops) each pixel's group is its reads, a free slot and its own passes."""
    uops = insn.uop_end - insn.uop_bgn
    fresh = insn.iter_out * uops  # iterations at inner index 0, the first among them
    passes = 2 * cfg.dw_groups(epi.dw_k)
    k2, ks = epi.dw_k * epi.dw_k, epi.dw_k * epi.dw_stride
    if uops > 1:
        return fresh * k2 + (insn.iterations - fresh) * ks + insn.iterations * (passes + 1)
    later = (fresh - 1) * max(k2, passes + 1) + (insn.iterations - fresh) * max(ks, passes + 1)
    return k2 + later + passes + 1


def out_mul_cycles(t: Timing, epi: EpiInsn, insn: GemmInsn) -> int:
    """What the OUT-path multiplier (EPI ``mul``) adds to a GEMM that is not a reset: a slot at the start of each
    outer iteration reading its multiplier row, and ``out_mul_lag`` more drain (the OUT writes, from the rounded
    products, come that much later after their ACC writes)."""
    return insn.iter_out + t.out_mul_lag if epi.mul and not insn.reset else 0


class CycleModel:
    """Stage occupancy of each instruction, with shared read and write channels. It follows the compute
    stage's epilogue state (the last EPI it timed), which a depthwise-mode GEMM's duration depends on."""

    def __init__(self, cfg: HwConfig):
        self.cfg, self.t = cfg, cfg.timing
        self.read_free = 0  # first cycle the AXI read data channel is free
        self.write_free = 0
        self.last_reader: int | None = None  # the stage whose read transfer had the read channel last
        self.epi = EpiInsn()

    def duration(self, insn: Insn, start: int) -> int:
        """Cycles from ``start`` until the instruction completes (reserves bus time as a side effect)."""
        t = self.t
        if isinstance(insn, GemmInsn):
            slots = dw_slots(self.cfg, self.epi, insn) if self.epi.dw and not insn.reset else insn.iterations
            return t.gemm_setup + slots + t.gemm_pipeline + out_mul_cycles(t, self.epi, insn)
        if isinstance(insn, EpiInsn):
            self.epi = insn
        if isinstance(insn, AluInsn):
            return alu_cycles(t, insn, self.cfg.alu_passes)
        if isinstance(insn, FinishInsn | EpiInsn) or (isinstance(insn, MemInsn) and insn.is_nop):
            return t.nop_cycles
        beats, bursts = transfer_shape(insn, self.cfg)
        data = beats + bursts * t.dma_row_overhead
        if insn.store:
            begin = max(start + t.dma_setup, self.write_free)
            self.write_free = begin + data
            return begin + data + t.dram_write_latency - start
        begin = max(start + t.dma_setup + t.dram_read_latency, self.read_free)
        self.read_free, self.last_reader = begin + data, insn.stage
        pads = insn.sram_elems - insn.x_size * insn.y_size if insn.mem_type not in UOP_TYPES else 0
        return begin + data + pads * t.dma_pad_cycles - start
