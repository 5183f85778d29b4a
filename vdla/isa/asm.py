"""Text assembler and disassembler for VDLA programs.

One instruction per line; ``#`` starts a comment. Examples::

    load inp sram=0 dram=0x1000 y=4 x=16 stride=16 pad=1,1,0,0 pop_next push_next
    load uop sram=0 dram=0x40000 y=1 x=8 stride=8
    gemm reset uop=0:8 iter=2,3 dst=16,1 src=0,1 wgt=0,16
    epi req relu shift=7 bias=2000
    epi dw=3,1,18   # depthwise mode: kernel 3, stride 1, window rows 18 INP elements apart
    epi src_out     # later GEMMs read their input rows from OUT (the int8 mirror of ACC)
    epi req mul=1990,37   # OUT writes of later GEMMs: times the row ACC[1990 + outer index], rounded right by 37
    gemm init uop=0:8 iter=2,3 dst=16,1 src=0,1 wgt=0,16
    alu shr uop=0:8 iter=1,1 dst=1,0 src=0,0 imm=8 push_next
    store out sram=0 dram=0x2000 y=4 x=16 stride=16 pop_prev push_prev
    finish
"""

from __future__ import annotations

from pathlib import Path

from vdla.isa.instructions import (
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
)
from vdla.untrusted import max_read_bytes, read_file

FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
MEM_NAMES = {
    MemType.UOP: "uop",
    MemType.WGT: "wgt",
    MemType.INP: "inp",
    MemType.ACC: "acc",
    MemType.OUT: "out",
    MemType.ACC_8BIT: "acc8",
    MemType.LUT: "lut",
    MemType.UOP_PRE: "uop_pre",
}
PAIRS = {
    "iter": ("iter_out", "iter_in"),
    "dst": ("dst_factor_out", "dst_factor_in"),
    "src": ("src_factor_out", "src_factor_in"),
    "wgt": ("wgt_factor_out", "wgt_factor_in"),
}


def disassemble_insn(insn: Insn) -> str:
    """One instruction as a line of assembly."""
    deps = [f for f in FLAGS if getattr(insn, f)]
    if isinstance(insn, MemInsn):
        words = [
            "store" if insn.store else "load",
            MEM_NAMES[insn.mem_type],
            f"sram={insn.sram_base}",
            f"dram={insn.dram_base:#x}",
            f"y={insn.y_size}",
            f"x={insn.x_size}",
            f"stride={insn.x_stride}",
        ]
        pads = (insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1)
        if any(pads):
            words.append("pad=" + ",".join(map(str, pads)))
    elif isinstance(insn, FinishInsn):
        words = ["finish"]
    elif isinstance(insn, EpiInsn):
        words = ["epi"] + [f for f in ("req", "relu", "lut", "src_out") if getattr(insn, f)] + [f"shift={insn.shift}"]
        if insn.bias or insn.bias_base:  # base= keeps a base the disabled bias ignores
            words.append(f"{'bias' if insn.bias else 'base'}={insn.bias_base}")
        if insn.dw:
            words.append(f"dw={insn.dw_k},{insn.dw_stride},{insn.dw_pitch}")
        if insn.mul or insn.mul_base or insn.mul_shift:
            words.append(f"{'mul' if insn.mul else 'mulbase'}={insn.mul_base},{insn.mul_shift}")
        if insn.lut_table:
            words.append(f"table={insn.lut_table}")
    else:
        words = ["gemm"] if isinstance(insn, GemmInsn) else ["alu", insn.alu_opcode.name.lower()]
        words += [f for f in ("reset", "init", "pipe") if getattr(insn, f, False)]
        words.append(f"uop={insn.uop_bgn}:{insn.uop_end}")
        for key, (fo, fi) in PAIRS.items():
            if hasattr(insn, fo):
                words.append(f"{key}={getattr(insn, fo)},{getattr(insn, fi)}")
        if isinstance(insn, AluInsn) and insn.use_imm:
            words.append(f"imm={insn.imm}")
        elif isinstance(insn, AluInsn) and insn.imm:  # MUL reading ACC[src], SQR: the product's shift
            words.append(f"shift={insn.imm}")
    return " ".join(words + deps)


def disassemble(insns: list[Insn], numbered: bool = False) -> str:
    """A whole program as assembly text (optionally with instruction indices as comments)."""
    lines = [disassemble_insn(i) for i in insns]
    if numbered:
        width = max((len(s) for s in lines), default=0)
        lines = [f"{s:<{width}}  # {n}" for n, s in enumerate(lines)]
    return "\n".join(lines) + "\n"


def _int(text: str, where: str) -> int:
    try:
        return int(text, 0)
    except ValueError as e:
        raise IsaError(f"{where}: {text!r} is not an integer") from e


def assemble_line(line: str, where: str = "line") -> Insn | None:
    """Parse one line of assembly; returns None for a blank or comment-only line."""
    words = line.split("#", 1)[0].lower().split()
    if not words:
        return None
    mnemonic, rest = words[0], words[1:]
    kw: dict = {}
    if mnemonic in ("load", "store"):
        if not rest:
            raise IsaError(f"{where}: {mnemonic} needs a memory type ({', '.join(MEM_NAMES.values())})")
        names = {v: k for k, v in MEM_NAMES.items()}
        if rest[0] not in names:
            raise IsaError(f"{where}: unknown memory type {rest[0]!r} ({', '.join(MEM_NAMES.values())})")
        kw.update(store=mnemonic == "store", mem_type=names[rest[0]])
        keys = {"sram": "sram_base", "dram": "dram_base", "y": "y_size", "x": "x_size", "stride": "x_stride"}
        cls, rest = MemInsn, rest[1:]
    elif mnemonic == "gemm":
        cls, keys = GemmInsn, {}
    elif mnemonic == "alu":
        ops = {op.name.lower(): op for op in AluOp}
        if not rest or rest[0] not in ops:
            raise IsaError(f"{where}: alu needs an operation ({', '.join(ops)})")
        cls, keys, kw["alu_opcode"], rest = AluInsn, {}, ops[rest[0]], rest[1:]
    elif mnemonic == "finish":
        cls, keys = FinishInsn, {}
    elif mnemonic == "epi":
        cls, keys = EpiInsn, {"shift": "shift", "base": "bias_base", "table": "lut_table"}
    else:
        raise IsaError(f"{where}: unknown mnemonic {mnemonic!r}")
    for word in rest:
        key, eq, value = word.partition("=")
        if not eq:
            if (
                key in FLAGS
                or (key == "reset" and cls in (GemmInsn, AluInsn))
                or (key == "init" and cls is GemmInsn)
                or (key == "pipe" and cls is AluInsn)
                or (key in ("req", "relu", "lut", "src_out") and cls is EpiInsn)
            ):
                kw[key] = True
                continue
            raise IsaError(f"{where}: unknown flag {key!r}")
        if key in keys:
            kw[keys[key]] = _int(value, where)
        elif cls is MemInsn and key == "pad":
            parts = value.split(",")
            if len(parts) != 4:
                raise IsaError(f"{where}: pad takes four values y0,y1,x0,x1, got {value!r}")
            kw.update(zip(("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"), (_int(p, where) for p in parts)))
        elif cls in (GemmInsn, AluInsn) and key == "uop":
            bgn, colon, end = value.partition(":")
            if not colon:
                raise IsaError(f"{where}: uop takes a range bgn:end, got {value!r}")
            kw.update(uop_bgn=_int(bgn, where), uop_end=_int(end, where))
        elif cls in (GemmInsn, AluInsn) and key in PAIRS and (key != "wgt" or cls is GemmInsn):
            parts = value.split(",")
            if len(parts) != 2:
                raise IsaError(f"{where}: {key} takes two values out,in, got {value!r}")
            kw.update(zip(PAIRS[key], (_int(p, where) for p in parts)))
        elif cls is AluInsn and key == "imm":
            kw.update(use_imm=True, imm=_int(value, where))
        elif cls is AluInsn and key == "shift" and kw.get("alu_opcode") in PRODUCT_OPS:
            kw.update(use_imm=False, imm=_int(value, where))
        elif cls is EpiInsn and key == "bias":
            kw.update(bias=True, bias_base=_int(value, where))
        elif cls is EpiInsn and key == "dw":
            parts = value.split(",")
            if len(parts) != 3:
                raise IsaError(f"{where}: dw takes three values kernel,stride,pitch, got {value!r}")
            kw.update(dw=True, **dict(zip(("dw_k", "dw_stride", "dw_pitch"), (_int(p, where) for p in parts))))
        elif cls is EpiInsn and key in ("mul", "mulbase"):
            parts = value.split(",")
            if len(parts) != 2:
                raise IsaError(f"{where}: {key} takes two values row,shift, got {value!r}")
            kw.update(mul=key == "mul", mul_base=_int(parts[0], where), mul_shift=_int(parts[1], where))
        else:
            raise IsaError(f"{where}: unknown field {key!r} for {mnemonic}")
    return cls(**kw)


def assemble(text: str, source: str = "<asm>") -> list[Insn]:
    """Parse assembly text into instructions; errors name the source and line number."""
    insns = []
    for n, line in enumerate(text.splitlines(), 1):
        insn = assemble_line(line, f"{source}:{n}")
        if insn is not None:
            insns.append(insn)
    return insns


def assemble_file(path: str | Path, max_bytes: int | None = None) -> list[Insn]:
    """Assemble the UTF-8 text file ``path``, its size within the read limit (``max_bytes``,
    :func:`vdla.untrusted.max_read_bytes`); errors name the file and the line (or the byte that is not UTF-8)."""
    path = Path(path)
    data = read_file(path, max_read_bytes(max_bytes), IsaError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise IsaError(f"{path}:{line}: byte {e.start} ({data[e.start]:#04x}) is not UTF-8 text") from e
    return assemble(text, str(path))
