"""The VDLA instruction set: instructions, micro-ops, assembler and program validation."""

from vdla.isa.asm import assemble, disassemble
from vdla.isa.instructions import (
    INSN_BYTES,
    AluInsn,
    AluOp,
    EpiInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    IsaError,
    MemInsn,
    MemType,
    Opcode,
    Queue,
    Stage,
    decode,
    decode_program,
    encode,
    encode_program,
)
from vdla.isa.uop import Uop, decode_uops, encode_uops
from vdla.isa.validate import elem_bytes, pops_of, pushes_of, validate_program

__all__ = [
    "INSN_BYTES",
    "AluInsn",
    "AluOp",
    "EpiInsn",
    "FinishInsn",
    "GemmInsn",
    "Insn",
    "IsaError",
    "MemInsn",
    "MemType",
    "Opcode",
    "Queue",
    "Stage",
    "Uop",
    "assemble",
    "decode",
    "decode_program",
    "decode_uops",
    "disassemble",
    "elem_bytes",
    "encode",
    "encode_program",
    "encode_uops",
    "pops_of",
    "pushes_of",
    "validate_program",
]
