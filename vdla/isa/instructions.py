"""Typed VDLA instructions and their 128-bit encoding (the VTA instruction layout).

Each instruction kind has a field table ``(name, lsb, width)``; encode and decode are driven by it,
so the layout exists in exactly one place (docs/isa.md documents the same table).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from vdla.errors import VdlaError

# The version of the instruction set: its formats and their meaning. The RTL reports it in ID[15:0] (through the
# generated package), and a driver refuses a bitstream of another version. Raise it with any change to either.
ISA_VERSION = 9
INSN_BITS = 128
INSN_BYTES = 16


class IsaError(VdlaError, ValueError):
    """An instruction or program that is not valid VDLA machine code."""


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4
    EPI = 5


class MemType(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5
    LUT = 6  # the activation table (compute stage): LUT_ENTRIES int8 outputs indexed by an int8 value
    UOP_PRE = 7  # micro-ops loaded by the load stage, ahead of the compute stage (tokens order it with readers)


UOP_TYPES = (MemType.UOP, MemType.UOP_PRE)  # the memory types whose LOADs write the micro-op buffer
LOAD_STAGE_TYPES = (MemType.INP, MemType.WGT, MemType.UOP_PRE)  # the LOADs the load stage runs


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3  # arithmetic shift right; a negative amount shifts left
    MUL = 4  # low 32 bits of the product
    RSHR = 5  # rounding shift right (round half up); a negative amount shifts left
    CLIP = 6  # clamp to [sext8(v[7:0]), sext8(v[15:8])]
    REQ = 7  # requantize to int8: RSHR by v[4:0], then clamp to [0 if v[5] else -128, 127]
    LSUM = 8  # the sum of v's lanes in every lane of the row (int32, wraps): a lane-sum adder tree; a is not used
    SQR = 9  # a * a, MUL's arithmetic (imm: the product's shift); reads ACC[dst] alone (no source row, no reset)


# the operations that form a 64-bit product: without use_imm their imm is its rounding shift; they may pipeline
PRODUCT_OPS = (AluOp.MUL, AluOp.SQR)


def clip_imm(lo: int, hi: int) -> int:
    """The CLIP immediate of the clamp [``lo``, ``hi``] (int8 bounds): lo in bits [7:0], hi in bits [15:8]."""
    return hi * 256 + (lo & 0xFF)


def clip_bounds(imm):
    """The clamp a CLIP immediate (or an array of them) encodes: (sext8(imm[7:0]), sext8(imm[15:8]))."""
    return ((imm & 0xFF) ^ 0x80) - 0x80, (((imm >> 8) & 0xFF) ^ 0x80) - 0x80


class Stage(IntEnum):
    LOAD = 0
    COMPUTE = 1
    STORE = 2


class Queue(IntEnum):
    """The four dependency-token queues between adjacent stages: the one definition of their topology.

    Each queue carries tokens from its ``src`` stage to its ``dst`` stage. The source pushes it with the
    flag towards the destination (``push_next`` when the destination is the next stage, ``push_prev``
    otherwise); the destination pops it with the flag towards the source (``pop_prev`` when the source is
    the previous stage, ``pop_next`` otherwise). So each stage has at most one queue per flag, and a flag
    with no queue on a stage is invalid there. A queue's value is the byte holding its token count in the
    RTL's TOKENS register (``vdla/runtime/registers.py``).
    """

    src: Stage
    dst: Stage

    def __new__(cls, value: int, src: Stage, dst: Stage) -> Queue:
        member = int.__new__(cls, value)
        member._value_ = value
        member.src, member.dst = src, dst
        return member

    L2C = (0, Stage.LOAD, Stage.COMPUTE)
    C2L = (1, Stage.COMPUTE, Stage.LOAD)
    C2S = (2, Stage.COMPUTE, Stage.STORE)
    S2C = (3, Stage.STORE, Stage.COMPUTE)

    @property
    def label(self) -> str:
        """The queue as messages name it: ``load->compute``."""
        return f"{self.src.name.lower()}->{self.dst.name.lower()}"

    @property
    def push_flag(self) -> str:
        """The flag with which an instruction of ``src`` pushes a token on this queue."""
        return "push_next" if self.dst > self.src else "push_prev"

    @property
    def pop_flag(self) -> str:
        """The flag with which an instruction of ``dst`` pops a token from this queue."""
        return "pop_prev" if self.src < self.dst else "pop_next"

    @property
    def token_byte(self) -> int:
        """The byte of the RTL's TOKENS register that counts this queue's tokens."""
        return int(self)

    @classmethod
    def between(cls, src: Stage | int, dst: Stage | int) -> Queue:
        """The queue from stage ``src`` to stage ``dst``; IsaError if the two stages share none."""
        src, dst = Stage(src), Stage(dst)
        for q in cls:
            if (q.src, q.dst) == (src, dst):
                return q
        raise IsaError(f"no dependency queue from the {src.name.lower()} stage to the {dst.name.lower()} stage")

    @staticmethod
    @functools.cache
    def popped_by(stage: Stage) -> tuple[Queue, ...]:
        """The queues instructions of ``stage`` pop (in queue order); computed once a stage (the simulator and
        the validator ask for each instruction)."""
        return tuple(q for q in Queue if q.dst == stage)

    @staticmethod
    @functools.cache
    def pushed_by(stage: Stage) -> tuple[Queue, ...]:
        """The queues instructions of ``stage`` push (in queue order); computed once a stage."""
        return tuple(q for q in Queue if q.src == stage)


# (name, lsb, width). Opcode [2:0] and the four dependency flags [6:3] are common to all kinds.
COMMON_FIELDS = (("opcode", 0, 3), ("pop_prev", 3, 1), ("pop_next", 4, 1), ("push_prev", 5, 1), ("push_next", 6, 1))
MEM_FIELDS = (
    ("mem_type", 7, 3),
    ("sram_base", 10, 16),
    ("dram_base", 26, 32),
    ("y_size", 64, 16),
    ("x_size", 80, 16),
    ("x_stride", 96, 16),
    ("y_pad_0", 112, 4),
    ("y_pad_1", 116, 4),
    ("x_pad_0", 120, 4),
    ("x_pad_1", 124, 4),
)
LOOP_FIELDS = (
    ("reset", 7, 1),
    ("uop_bgn", 8, 13),
    ("uop_end", 21, 14),
    ("iter_out", 35, 14),
    ("iter_in", 49, 14),
    ("dst_factor_out", 64, 11),
    ("dst_factor_in", 75, 11),
    ("src_factor_out", 86, 11),
    ("src_factor_in", 97, 11),
)
GEMM_FIELDS = LOOP_FIELDS + (("wgt_factor_out", 108, 10), ("wgt_factor_in", 118, 10), ("init", 63, 1))
# The ALU's loop fields are GEMM's but a 13-bit iter_in: its bit 62 is use_imm, so that alu_opcode is 4 bits.
ALU_LOOP_FIELDS = tuple((n, lsb, 13 if n == "iter_in" else w) for n, lsb, w in LOOP_FIELDS)
ALU_FIELDS = ALU_LOOP_FIELDS + (("use_imm", 62, 1), ("pipe", 63, 1), ("alu_opcode", 108, 4), ("imm", 112, 16))
EPI_FIELDS = (
    ("req", 7, 1),
    ("relu", 8, 1),
    ("shift", 9, 5),
    ("bias", 14, 1),
    ("lut", 15, 1),
    ("bias_base", 16, 16),
    ("dw", 32, 1),
    ("dw_k", 33, 3),
    ("dw_stride", 36, 2),
    ("dw_pitch", 38, 16),
    ("src_out", 54, 1),
    ("mul", 55, 1),
    ("mul_shift", 56, 6),
    ("mul_base", 62, 16),
    ("lut_table", 78, 1),
)
SIGNED_FIELDS = {"imm"}
BOOL_FIELDS = {"reset", "use_imm", "init", "req", "relu", "bias", "lut", "dw", "pipe", "src_out", "mul"}


@dataclass(kw_only=True)
class Insn:
    """Common part of every instruction: the four dependency-token flags."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    OPCODE = None  # set by subclasses
    FIELDS = ()

    @property
    def opcode(self) -> Opcode:
        return self.OPCODE

    @property
    def stage(self) -> Stage:
        """The stage this instruction is routed to."""
        return Stage.COMPUTE

    def deps(self) -> str:
        return " ".join(f for f in ("pop_prev", "pop_next", "push_prev", "push_next") if getattr(self, f))


@dataclass(kw_only=True)
class MemInsn(Insn):
    """LOAD or STORE of a 2-D tile with zero padding (x_size 0 is a token-only no-op)."""

    store: bool = False
    mem_type: MemType = MemType.INP
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 1
    x_size: int = 1
    x_stride: int = 1
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0

    FIELDS = MEM_FIELDS

    @property
    def opcode(self) -> Opcode:
        return Opcode.STORE if self.store else Opcode.LOAD

    @property
    def stage(self) -> Stage:
        if self.store:
            return Stage.STORE
        return Stage.LOAD if self.mem_type in LOAD_STAGE_TYPES else Stage.COMPUTE

    @property
    def is_nop(self) -> bool:
        return self.x_size == 0

    @property
    def rows(self) -> int:
        """Rows the tile occupies in SRAM, padding included."""
        return self.y_pad_0 + self.y_size + self.y_pad_1

    @property
    def cols(self) -> int:
        return self.x_pad_0 + self.x_size + self.x_pad_1

    @property
    def sram_elems(self) -> int:
        return 0 if self.is_nop else self.rows * self.cols


def nop(stage: Stage, *flags: str) -> MemInsn:
    """A token-only instruction for ``stage`` (a LOAD or STORE with x_size 0) with the dependency ``flags``
    set: it moves nothing."""
    deps = dict.fromkeys(flags, True)
    if stage == Stage.STORE:
        return MemInsn(store=True, mem_type=MemType.OUT, x_size=0, **deps)
    return MemInsn(mem_type=MemType.INP if stage == Stage.LOAD else MemType.UOP, x_size=0, **deps)


@dataclass(kw_only=True)
class LoopInsn(Insn):
    """The two-level micro-op loop shared by GEMM and ALU."""

    reset: bool = False
    uop_bgn: int = 0
    uop_end: int = 1
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0

    @property
    def iterations(self) -> int:
        """uop-iterations executed: iter_out * iter_in * (uop_end - uop_bgn)."""
        return self.iter_out * self.iter_in * (self.uop_end - self.uop_bgn)

    def rows(self, base, name: str) -> np.ndarray:
        """Field ``name``'s ("dst", "src", "wgt") index of every uop-iteration, shaped (iter_out, iter_in,
        len(base)) in execution order: the micro-ops' fields ``base`` plus o * factor_out + i * factor_in."""
        o = np.arange(self.iter_out)[:, None, None] * getattr(self, f"{name}_factor_out")
        i = np.arange(self.iter_in)[None, :, None] * getattr(self, f"{name}_factor_in")
        return np.asarray(base, np.int64).reshape(1, 1, -1) + o + i


@dataclass(kw_only=True)
class GemmInsn(LoopInsn):
    """ACC[dst] += INP[src] x WGT[wgt]^T over the loop (``reset``: ACC[dst] = 0 instead). With ``init``, the
    first update of each accumulator in the instruction starts from its init value (the bias row
    ACC[bias_base + iter_out index] when the last EPI enabled bias, else zero) instead of its old value."""

    wgt_factor_out: int = 0
    wgt_factor_in: int = 0
    init: bool = False

    OPCODE = Opcode.GEMM
    FIELDS = GEMM_FIELDS


@dataclass(kw_only=True)
class AluInsn(LoopInsn):
    """ACC[dst] = op(ACC[dst], imm or ACC[src]) over the loop (``reset``: ACC[dst] reads as zero); SQR reads
    ACC[dst] alone (:attr:`reads_src`). ``pipe`` (a MUL holding its source row or an SQR,
    :func:`vdla.isa.pipe.pipe_refusal`) issues the inner iterations one a cycle instead
    of one every ``alu_mul_cycles``: an iteration may then not read a row the one just before it writes, which
    is a fault (:func:`vdla.isa.pipe.pipe_hazard`; docs/isa.md, "Pipelined MUL and SQR")."""

    alu_opcode: AluOp = AluOp.ADD
    use_imm: bool = False
    imm: int = 0
    pipe: bool = False

    OPCODE = Opcode.ALU
    FIELDS = ALU_FIELDS

    @property
    def reads_src(self) -> bool:
        """Whether the operation's second operand is the row ACC[src] (:func:`alu_reads_src`)."""
        return alu_reads_src(self.alu_opcode, self.use_imm)


def alu_reads_src(op: AluOp, use_imm: bool) -> bool:
    """Whether an ALU operation's second operand is the row ACC[src]: not with an immediate, and not an SQR (its
    operand is ACC[dst] itself; the micro-ops' src field is not read)."""
    return not use_imm and op != AluOp.SQR


@dataclass(kw_only=True)
class EpiInsn(Insn):
    """Sets the compute stage's epilogue state. ``req``: every later ACC write also writes its OUT mirror
    requantized, clamp((v + 2^(shift-1)) >> shift, 0 if relu else -128, 127), instead of v[7:0]; ``lut``:
    that int8 value then indexes activation table ``lut_table`` (of the config's ``lut_tables``, LOAD LUT), whose
    entry is written instead;
    ``bias``/``bias_base``: the init value of GEMMs with ``init`` (see :class:`GemmInsn`); ``dw``: later GEMMs
    (not resets) run in the depthwise mode, each uop-iteration one output pixel over a ``dw_k`` x ``dw_k``
    window of INP rows ``dw_pitch`` apart, the window moving by ``dw_stride`` columns between the inner
    iterations (docs/isa.md, "Depthwise mode"); ``src_out``: later GEMMs read their input rows (``src``, and the
    depthwise window) from OUT, the int8 mirror of ACC, instead of INP, so a layer's int8 results feed the next
    GEMM without a trip through DRAM; such a GEMM may not write an ACC row whose OUT row it reads
    (docs/isa.md, "GEMM input from OUT"); ``mul``: the OUT mirror of each ACC write of a later GEMM (not a
    reset) is formed from the value multiplied by the GEMM's multiplier row, ACC[``mul_base`` + outer loop
    index], its 64-bit product rounded right by ``mul_shift`` (ALU MUL's arithmetic), before ``req`` and ``lut``;
    ACC keeps the int32 sum (docs/isa.md, "Per-channel multiplier in the OUT path")."""

    req: bool = False
    relu: bool = False
    shift: int = 0
    bias: bool = False
    lut: bool = False
    bias_base: int = 0
    dw: bool = False
    dw_k: int = 0
    dw_stride: int = 0
    dw_pitch: int = 0
    src_out: bool = False
    mul: bool = False
    mul_shift: int = 0
    mul_base: int = 0
    lut_table: int = 0

    OPCODE = Opcode.EPI
    FIELDS = EPI_FIELDS


@dataclass(kw_only=True)
class FinishInsn(Insn):
    OPCODE = Opcode.FINISH


def _field_values(insn: Insn) -> dict[str, int]:
    vals = dict(vars(insn))
    vals["opcode"] = int(insn.opcode)
    return vals


def encode(insn: Insn) -> int:
    """Encode one instruction as a 128-bit integer; an out-of-range field raises IsaError."""
    vals = _field_values(insn)
    word = 0
    for name, lsb, width in COMMON_FIELDS + insn.FIELDS:
        v = int(vals[name])
        if name in SIGNED_FIELDS:
            lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        else:
            lo, hi = 0, (1 << width) - 1
        if not lo <= v <= hi:
            raise IsaError(f"{insn.opcode.name}: field {name}={v} out of range [{lo}, {hi}] ({width} bits)")
        word |= (v & ((1 << width) - 1)) << lsb
    return word


def _get(word: int, lsb: int, width: int, signed: bool = False) -> int:
    v = (word >> lsb) & ((1 << width) - 1)
    return v - (1 << width) if signed and v >> (width - 1) else v


def decode(word: int) -> Insn:
    """Decode a 128-bit integer into a typed instruction; an unknown opcode or type raises IsaError."""
    if not 0 <= word < 1 << INSN_BITS:
        raise IsaError(f"instruction word {word:#x} is not a 128-bit value")
    op = _get(word, 0, 3)
    flags = {name: bool(_get(word, lsb, w)) for name, lsb, w in COMMON_FIELDS[1:]}
    if op in (Opcode.LOAD, Opcode.STORE):
        vals = {name: _get(word, lsb, w) for name, lsb, w in MEM_FIELDS}
        try:
            vals["mem_type"] = MemType(vals["mem_type"])
        except ValueError as e:
            raise IsaError(f"{Opcode(op).name}: unknown memory type {vals['mem_type']}") from e
        return MemInsn(store=op == Opcode.STORE, **vals, **flags)
    kinds = {Opcode.GEMM: GemmInsn, Opcode.ALU: AluInsn, Opcode.EPI: EpiInsn}
    if op in kinds:
        cls = kinds[Opcode(op)]
        vals = {name: _get(word, lsb, w, name in SIGNED_FIELDS) for name, lsb, w in cls.FIELDS}
        vals.update({name: bool(vals[name]) for name in BOOL_FIELDS & vals.keys()})
        if cls is AluInsn:
            try:
                vals["alu_opcode"] = AluOp(vals["alu_opcode"])
            except ValueError as e:
                raise IsaError(f"ALU: unknown ALU opcode {vals['alu_opcode']}") from e
        return cls(**vals, **flags)
    if op == Opcode.FINISH:
        return FinishInsn(**flags)
    raise IsaError(f"unknown opcode {op} in instruction word {word:#034x}")


def encode_program(insns: list[Insn]) -> bytes:
    """Encode instructions as the little-endian byte stream the fetch unit reads."""
    out = bytearray()
    for i, insn in enumerate(insns):
        try:
            out += encode(insn).to_bytes(INSN_BYTES, "little")
        except IsaError as e:
            raise IsaError(f"instruction {i}: {e}") from e
    return bytes(out)


def decode_program(data: bytes) -> list[Insn]:
    """Decode a little-endian instruction byte stream."""
    if len(data) % INSN_BYTES:
        raise IsaError(f"instruction stream of {len(data)} bytes is not a multiple of {INSN_BYTES}")
    insns = []
    for i in range(0, len(data), INSN_BYTES):
        try:
            insns.append(decode(int.from_bytes(data[i : i + INSN_BYTES], "little")))
        except IsaError as e:
            raise IsaError(f"instruction {i // INSN_BYTES}: {e}") from e
    return insns
