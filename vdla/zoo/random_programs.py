"""Random valid programs: the generator of the simulator-against-RTL campaign (``vdla fuzz``) and of
tests/test_rtl_differential.py.

:func:`build_program` draws one program from a seed, on any configuration, and places its data in a device's
DRAM. It covers the whole instruction set (:func:`isa_features` lists what that is, from the ISA's enums, for one
configuration; :func:`program_features` what a program uses):

* every memory type: padded, strided INP tiles, WGT tiles, ACC and ACC_8BIT loads, micro-op kernels loaded by
  the compute stage (LOAD UOP) and ahead of it by the load stage (LOAD UOP_PRE, into rows of the micro-op buffer
  kept for them), the activation table (LOAD LUT: all of it, then updates of some of its elements), STOREs of
  OUT, and token-only no-ops;
* GEMMs with random micro-op kernels and loop factors, resets and ``init``; every ALU opcode with immediates or
  overlapping second operands, resets, MUL's and SQR's rounding shift and the pipelined MUL and SQR;
* EPI states with every flag the configuration builds: OUT requantization (with ReLU), bias rows in the thread's
  share, among its destinations or in a shared area, the activation table (``lut``), the OUT-path multiplier
  (``mul``, its rows in the shared area), the depthwise mode (random kernels up to DW_MAX_K, strides and window
  pitches), GEMMs reading their input rows from OUT (``src_out``: one half of the thread's accumulators into the
  other);
* one or two virtual threads (double-buffered loads) whose token pattern orders every producer before its
  consumer, so that the result does not depend on timing.

A configuration's optional units decide its EPI flags: without the depthwise mode (``depthwise_mode`` false, or
batch > 1, or block_in != block_out) no ``dw``, without ``out_multiplier`` (a half-width ALU, ``alu_lanes``, has
none) no ``mul``, without ``src_out`` no ``src_out``. The half-width ALU runs every opcode (in two passes a row),
so every one is drawn.

A program is self-contained: it loads every buffer row it reads before reading it (the buffers keep their
contents from one run to the next, on every backend), so a backend may run programs one after another. Every
accumulator region is stored back, 8 bits at a time, at the end, through truncating, requantizing or table
OUT writes. Deterministic in the seed and the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from vdla.config import DW_MAX_K, ConfigError, HwConfig, board_presets, load_config
from vdla.isa import (
    PRODUCT_OPS,
    AluInsn,
    AluOp,
    EpiInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Opcode,
    Queue,
    Stage,
    encode_uops,
)
from vdla.isa.arith import MUL_MAX_SHIFT
from vdla.isa.instructions import ALU_FIELDS, BOOL_FIELDS, EPI_FIELDS, GEMM_FIELDS
from vdla.isa.pipe import can_pipe
from vdla.isa.validate import check_insn
from vdla.runtime.commands import CommandBuilder
from vdla.runtime.device import Device
from vdla.runtime.dram import Buffer

INP_SHARE, WGT_SHARE, ACC_SHARE = 96, 16, 48  # each virtual thread's rows of INP, WGT and ACC
BIAS_AREA, BIAS_ROWS = 2 * ACC_SHARE, 16  # ACC rows both threads may read bias and multiplier rows from
HALF = ACC_SHARE // 2  # a GEMM reading OUT (src_out) reads one half of its thread's share and writes the other
PRE_ROWS = 16  # micro-op rows per thread at the top of the UOP buffer, for the kernels of LOAD UOP_PRE
INP_ROWS, WGT_ROWS, ACC_ROWS = 512, 64, 256  # rows of the DRAM tensors the loads read


def pynq_full() -> HwConfig:
    """The ``pynq-z2`` preset with every optional unit built (the depthwise mode, the OUT-path multiplier, GEMM
    input from OUT, a lane of the ALU per accumulator lane, two activation tables) and the 256 KiB WGT buffer: the
    design before the xc7z020's timing budget, where the tests of those units run (tests/full_units.py)."""
    return replace(
        load_config("pynq"),
        name="pynq-full",
        depthwise_mode=True,
        out_multiplier=True,
        alu_lanes=0,
        src_out=True,
        lut_tables=2,
        wgt_buff_bytes=262144,
        uop_buff_bytes=32768,
    )


# configurations the campaign knows by a name that is not a preset's (the RTL tests' own builds)
EXTRA_CONFIGS = {"pynq-full": pynq_full}
TEST_PRESETS = ("block8", "batch2")  # the presets tests/test_rtl_programs.py builds as RTL besides the boards'


def campaign_configs() -> list[str]:
    """Every configuration the campaign runs on (``vdla fuzz --config all``): the board presets, the pynq-z2
    with every unit (``pynq-full``) and the presets of the RTL tests."""
    return [c.name for c in board_presets()] + list(EXTRA_CONFIGS) + list(TEST_PRESETS)


def campaign_config(name: str | HwConfig) -> HwConfig:
    """The configuration ``name``: a preset (or JSON file) or one of :data:`EXTRA_CONFIGS`."""
    if isinstance(name, HwConfig):
        return name
    if name in EXTRA_CONFIGS:
        return EXTRA_CONFIGS[name]()
    try:
        return load_config(name)
    except ConfigError as e:
        raise ConfigError(f"{e}; and the campaign's own: {', '.join(EXTRA_CONFIGS)}") from None


# ---------------------------------------------------------------------------------------------------------
# What the instruction set has, and what a program uses


def _flags(fields_: tuple) -> list[str]:
    return [name for name, _, _ in fields_ if name in BOOL_FIELDS]


def isa_features(cfg: HwConfig) -> set[str]:
    """Everything of the instruction set that ``cfg`` runs, as the names :func:`program_features` gives: each
    opcode, each (LOAD or STORE, memory type) pair the validator accepts, each dependency flag of each stage,
    each ALU opcode, each boolean flag of GEMM, ALU and EPI the configuration builds. Computed from the ISA's
    enums and field tables, so that a new instruction, memory type or flag appears here by itself."""
    out = {f"op:{op.name}" for op in Opcode}
    for store in (False, True):
        for mem in MemType:
            if not check_insn(MemInsn(store=store, mem_type=mem, x_size=0), cfg):
                out.add(f"{'STORE' if store else 'LOAD'}:{mem.name}")
    for q in Queue:
        out |= {f"dep:{q.src.name}:{q.push_flag}", f"dep:{q.dst.name}:{q.pop_flag}"}
    out |= {f"alu:{op.name}" for op in AluOp}
    out |= {f"gemm:{f}" for f in _flags(GEMM_FIELDS)} | {f"alu:{f}" for f in _flags(ALU_FIELDS)}
    for f in _flags(EPI_FIELDS):
        if not check_insn(EpiInsn(**{f: True}, dw_k=1, dw_stride=1), cfg):
            out.add(f"epi:{f}")
    return out


def program_features(insns: list[Insn]) -> set[str]:
    """The features of :func:`isa_features` that the program ``insns`` uses (a no-op LOAD or STORE counts for
    its flags only)."""
    out = set()
    for insn in insns:
        out.add(f"op:{insn.opcode.name}")
        out |= {
            f"dep:{insn.stage.name}:{f}" for f in ("pop_prev", "pop_next", "push_prev", "push_next") if getattr(insn, f)
        }
        if isinstance(insn, MemInsn) and not insn.is_nop:
            out.add(f"{'STORE' if insn.store else 'LOAD'}:{insn.mem_type.name}")
        elif isinstance(insn, GemmInsn):
            out |= {f"gemm:{f}" for f in _flags(GEMM_FIELDS) if getattr(insn, f)}
        elif isinstance(insn, AluInsn):
            out.add(f"alu:{insn.alu_opcode.name}")
            out |= {f"alu:{f}" for f in _flags(ALU_FIELDS) if getattr(insn, f)}
        elif isinstance(insn, EpiInsn):
            out |= {f"epi:{f}" for f in _flags(EPI_FIELDS) if getattr(insn, f)}
    return out


# ---------------------------------------------------------------------------------------------------------
# The generator


def _span(rng, size: int, iters: int) -> tuple[int, int]:
    """A loop factor and a base so that base + (iters - 1) * factor < size."""
    factor = int(rng.integers(0, 4)) if iters > 1 else 0
    factor = min(factor, (size - 1) // max(iters - 1, 1))
    return factor, (size - 1) - (iters - 1) * factor


def _loop(rng, sizes: dict[str, int]) -> tuple[int, int, dict[str, tuple[int, int]], list[tuple[int, ...]]]:
    """Random iteration counts, factors and micro-ops whose every index stays inside ``sizes``."""
    io, ii = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    factors, room = {}, {}
    for name, size in sizes.items():
        fo, left = _span(rng, size, io)
        fi, room[name] = _span(rng, left + 1, ii)
        factors[name] = (fo, fi)
    nuops = int(rng.integers(1, 5))
    uops = [tuple(int(rng.integers(0, room[n] + 1)) for n in sizes) for _ in range(nuops)]
    return io, ii, factors, uops


Dw = tuple[int, int, int] | None  # the depthwise mode of the EPI state: (kernel, stride, pitch)


def _dw(rng, cfg: HwConfig, src_out: bool = False) -> Dw:
    """A random depthwise mode (or none) for an EPI; with ``src_out`` its window fits in HALF rows."""
    if not cfg.dw_supported or rng.random() < 0.5:
        return None
    k = int(rng.integers(1, DW_MAX_K + 1))
    pitch = int(rng.integers(0, 9))
    if src_out and k > 1:
        pitch = min(pitch, (HALF - 1) // (k - 1) - 1)
    return k, int(rng.integers(1, min(k, 3) + 1)), pitch


def _gemm_sizes(cfg: HwConfig, dw: Dw, src_out: bool = False) -> dict[str, int]:
    """The index ranges of a GEMM's loop: in the depthwise mode its window's rows and WGT elements fit too; with
    ``src_out`` its destinations and its OUT rows are a half of the thread's share each."""
    dst, src = (HALF, HALF) if src_out else (ACC_SHARE, INP_SHARE)
    if dw is None:
        return {"dst": dst, "src": src, "wgt": WGT_SHARE}
    k, _, pitch = dw
    return {"dst": dst, "src": src - (k - 1) * (pitch + 1), "wgt": WGT_SHARE - 2 * cfg.dw_groups(k) + 1}


def _epi(rng, cfg: HwConfig, a0: int, dst: int, lut: bool, dw: Dw = None, src_out: bool = False) -> dict:
    """A random EPI's arguments (depthwise mode ``dw``, ``src_out``; the table only if ``lut``, i.e. loaded); its
    bias rows (up to 3, one per iter_out) lie in the thread's share, start at one of its GEMM destinations
    ``dst``, or lie in the shared bias area."""
    where = rng.choice(["none", "share", "dst", "area"], p=[0.2, 0.2, 0.4, 0.2])
    base = {
        "none": None,
        "share": a0 + int(rng.integers(0, ACC_SHARE - 2)),
        "dst": min(dst, a0 + ACC_SHARE - 3),
        "area": BIAS_AREA + int(rng.integers(0, BIAS_ROWS - 2)),
    }[where]
    req, relu, shift = rng.random() < 0.5, rng.random() < 0.5, int(rng.integers(0, 32))
    # the OUT-path multiplier's rows (up to 3) in the shared area, which no GEMM writes
    mul = (BIAS_AREA + int(rng.integers(0, BIAS_ROWS - 2)), int(rng.integers(0, 64))) if rng.random() < 0.4 else None
    mul = mul if cfg.out_multiplier else None
    table = lut and rng.random() < 0.4
    which = int(rng.integers(0, cfg.lut_tables))
    return dict(req=req, relu=relu, shift=shift, bias_base=base, lut=table, dw=dw, src_out=src_out, mul=mul,
                lut_table=which)  # fmt: skip


@dataclass
class _Kernel:
    """A GEMM or ALU of a tile, drawn before the tile's loads (its micro-ops may be loaded ahead of it)."""

    kind: str  # "gemm" or "alu"
    io: int
    ii: int
    factors: dict[str, tuple[int, int]]
    uops: list[tuple[int, ...]]
    epi: dict | None = None  # a GEMM's EPI before it
    reset: bool = False
    init: bool = False
    op: AluOp = AluOp.ADD
    imm: int | None = None
    shift: int = 0
    pre: int | None = None  # the UOP row its micro-ops are loaded to by LOAD UOP_PRE (None: by the builder)


@dataclass
class RandomProgram:
    """A generated program: its instructions (FINISH last, validated) and the DRAM buffers it reads and writes,
    by name (the micro-op pools and the program's own code excepted)."""

    insns: list[Insn]
    buffers: dict[str, Buffer] = field(default_factory=dict)

    def buffer_at(self, addr: int) -> tuple[str, int] | None:
        """The buffer holding physical address ``addr`` and the byte offset in it, if any."""
        for name, buf in self.buffers.items():
            if buf.addr <= addr < buf.addr + buf.nbytes:
                return name, addr - buf.addr
        return None


def _plan_gemms(rng, cfg: HwConfig, a0: int, i0: int, w0: int, state: dict, lut: bool) -> list[_Kernel]:
    """A tile's GEMMs, each maybe after an EPI; ``state`` carries the EPI state's dw and src_out."""
    out = []
    for _ in range(int(rng.integers(1, 4))):
        epi = rng.random() < 0.5
        if epi:
            state["src_out"] = cfg.src_out_refusal() is None and rng.random() < 0.3
            state["dw"] = _dw(rng, cfg, state["src_out"])
        dw, src_out = state["dw"], state["src_out"]
        io, ii, f, uops = _loop(rng, _gemm_sizes(cfg, dw, src_out))
        if src_out:  # OUT rows of one half of the share, into the other
            d0, s0 = (a0, a0 + HALF) if rng.random() < 0.5 else (a0 + HALF, a0)
            uops = [(d0 + d, s0 + s, w0 + w) for d, s, w in uops]
        else:
            uops = [(a0 + d, i0 + s, w0 + w) for d, s, w in uops]
        args = _epi(rng, cfg, a0, uops[0][0], lut, dw, src_out) if epi else None
        reset = rng.random() < 0.15
        init = not reset and rng.random() < 0.6
        out.append(_Kernel("gemm", io, ii, f, uops, epi=args, reset=reset, init=init))
    return out


def _plan_alus(rng, a0: int) -> list[_Kernel]:
    """A tile's ALU instructions: random opcodes and loops (an SQR with neither immediate nor reset: it reads
    ACC[dst] alone), and sometimes a MUL or an SQR that may issue pipelined."""
    out = []
    for _ in range(int(rng.integers(1, 5))):
        op = AluOp(int(rng.integers(0, len(AluOp))))
        io, ii, f, uops = _loop(rng, {"dst": ACC_SHARE, "src": ACC_SHARE})
        uops = [(a0 + d, a0 + s) for d, s in uops]
        shift = op in (AluOp.SHR, AluOp.RSHR)
        imm = int(rng.integers(-40, 40) if shift else rng.integers(-(1 << 15), 1 << 15))
        imm = imm if rng.random() < 0.5 and op != AluOp.SQR else None
        reset = rng.random() < 0.05 and op != AluOp.SQR
        mul = op in PRODUCT_OPS
        mshift = int(rng.integers(0, MUL_MAX_SHIFT + 1)) if mul and imm is None and rng.random() < 0.5 else 0
        out.append(_Kernel("alu", io, ii, f, uops, reset=reset, op=op, imm=imm, shift=mshift))
    if rng.random() < 0.3:  # a MUL holding its source row over the inner loop, or an SQR: the builder pipelines it
        op = AluOp.SQR if rng.random() < 0.3 else AluOp.MUL
        io, ii, fi = int(rng.integers(1, 4)), int(rng.integers(2, 5)), int(rng.integers(1, 3))
        dst = a0 + int(rng.integers(0, HALF - io * ii * fi + 1))  # rows of one half, the held rows in the other
        src = a0 + HALF + int(rng.integers(0, HALF - io + 1))
        f = {"dst": (ii * fi, fi), "src": (1, 0)}
        mshift = int(rng.integers(0, MUL_MAX_SHIFT + 1))
        out.insert(int(rng.integers(0, len(out) + 1)), _Kernel("alu", io, ii, f, [(dst, src)], op=op, shift=mshift))
    return out


def _uop_array(uops: list[tuple[int, ...]]) -> np.ndarray:
    """Micro-ops as an (n, 3) array of (dst, src, wgt); an ALU's (dst, src) pairs get wgt 0."""
    arr = np.zeros((len(uops), 3), np.int64)
    arr[:, : len(uops[0])] = uops
    return arr


def _emit(cmd: CommandBuilder, k: _Kernel) -> None:
    """Emit a planned GEMM or ALU: through the builder's kernel cache, or on the micro-ops at row ``k.pre``."""
    if k.kind == "gemm" and k.epi is not None:
        cmd.epi(**k.epi)
    if k.pre is None:
        if k.kind == "gemm":
            cmd.gemm(
                k.uops,
                iter_out=k.io,
                iter_in=k.ii,
                dst_factor=k.factors["dst"],
                src_factor=k.factors["src"],
                wgt_factor=k.factors["wgt"],
                reset=k.reset,
                init=k.init,
            )
        else:
            cmd.alu(
                k.op,
                k.uops,
                iter_out=k.io,
                iter_in=k.ii,
                dst_factor=k.factors["dst"],
                src_factor=k.factors["src"],
                imm=k.imm,
                reset=k.reset,
                shift=k.shift,
            )
        return
    loop = {"uop_bgn": k.pre, "uop_end": k.pre + len(k.uops), "iter_out": k.io, "iter_in": k.ii}
    for name, (fo, fi) in k.factors.items():
        loop[f"{name}_factor_out"], loop[f"{name}_factor_in"] = fo, fi
    if k.kind == "gemm":
        cmd.emit(GemmInsn(reset=k.reset, init=k.init, **loop))
    else:
        imm = k.shift if k.imm is None else k.imm
        insn = AluInsn(alu_opcode=k.op, use_imm=k.imm is not None, imm=imm, reset=k.reset, **loop)
        insn.pipe = can_pipe(insn, np.asarray(k.uops))
        cmd.emit(insn)


def build_program(dev: Device, seed: int) -> RandomProgram:
    """Draw the program of ``seed`` for ``dev``'s configuration, place its data in ``dev``'s DRAM and return it
    finished (FINISH appended, validated), not run."""
    cfg = dev.cfg
    rng = np.random.default_rng(seed)
    vt = int(rng.integers(1, 3))
    tiles = int(rng.integers(2, 5))
    lanes = (cfg.batch, cfg.block_out)
    inp = dev.array(rng.integers(-128, 128, (INP_ROWS, cfg.batch, cfg.block_in), dtype=np.int8))
    wgt = dev.array(rng.integers(-128, 128, (WGT_ROWS, cfg.block_out, cfg.block_in), dtype=np.int8))
    acc = dev.array(rng.integers(-(1 << 31), 1 << 31, (ACC_ROWS, *lanes), dtype=np.int64).astype(np.int32))
    acc8 = dev.array(rng.integers(-128, 128, (ACC_ROWS, *lanes), dtype=np.int8))
    tables = dev.array(rng.integers(-128, 128, (3 * cfg.lut_depth, *lanes), dtype=np.int8))
    out = dev.array(rng.integers(0, 256, (tiles * 4 * ACC_SHARE, cfg.out_elem_bytes), dtype=np.uint8))
    pre_pool = dev.alloc(tiles * PRE_ROWS * 4)
    buffers = {"inp": inp, "wgt": wgt, "acc": acc, "acc8": acc8, "tables": tables, "out": out, "uop_pre": pre_pool}
    cmd = dev.commands()
    # every row the program reads is loaded first: the buffers keep their contents from run to run
    cmd.load(MemType.INP, 0, inp, int(rng.integers(0, INP_ROWS - vt * INP_SHARE)), 1, vt * INP_SHARE, vt * INP_SHARE)
    cmd.load(MemType.WGT, 0, wgt, int(rng.integers(0, WGT_ROWS - vt * WGT_SHARE)), 1, vt * WGT_SHARE, vt * WGT_SHARE)
    cmd.load(MemType.ACC, 0, acc, int(rng.integers(0, ACC_ROWS - vt * ACC_SHARE)), 1, vt * ACC_SHARE, vt * ACC_SHARE)
    cmd.load(MemType.ACC, BIAS_AREA, acc, 200, 1, BIAS_ROWS, BIAS_ROWS)
    lut = rng.random() < 0.7  # every activation table whole, so that EPIs may use either
    for table in range(cfg.lut_tables) if lut else ():
        cmd.load_table(tables, int(rng.integers(0, 2 * cfg.lut_depth + 1)), table)
    state = {"dw": None, "src_out": False}  # the EPI state's depthwise mode and src_out
    for j in range(tiles):
        t = j % vt
        i0, w0, a0 = t * INP_SHARE, t * WGT_SHARE, t * ACC_SHARE
        kernels = _plan_gemms(rng, cfg, a0, i0, w0, state, lut) + _plan_alus(rng, a0)
        # some kernels' micro-ops come ahead of the compute stage, into this thread's rows at the buffer's top:
        # the tile's loads wait for the compute stage to finish the thread's previous tile, which used them
        pre_top = cfg.uop_depth - (t + 1) * PRE_ROWS
        used = 0
        for k in kernels:
            if rng.random() < 0.3 and used + len(k.uops) <= PRE_ROWS:
                k.pre, used = pre_top + used, used + len(k.uops)
        if j >= vt:
            cmd.dep_pop(Stage.COMPUTE, Stage.LOAD)
        for _ in range(int(rng.integers(1, 3))):  # padded, strided INP tiles
            pads = tuple(int(p) for p in rng.integers(0, 3, 4))
            y, x = int(rng.integers(1, 5)), int(rng.integers(1, 7))
            while (pads[0] + y + pads[1]) * (pads[2] + x + pads[3]) > INP_SHARE:
                y, x = max(1, y - 1), max(1, x - 1)
            n = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
            stride = x + int(rng.integers(0, 4))
            cmd.load(
                MemType.INP,
                i0 + int(rng.integers(0, INP_SHARE - n + 1)),
                inp,
                int(rng.integers(0, INP_ROWS - (y - 1) * stride - x)),
                y,
                x,
                stride,
                pad=pads,
            )
        y, x = int(rng.integers(1, 3)), int(rng.integers(1, 8))
        cmd.load(
            MemType.WGT,
            w0 + int(rng.integers(0, WGT_SHARE - y * x + 1)),
            wgt,
            int(rng.integers(0, WGT_ROWS - y * x)),
            y,
            x,
            x,
        )
        for k in kernels:
            if k.pre is not None:
                offset = j * PRE_ROWS + k.pre - pre_top
                pre_pool.write(encode_uops(_uop_array(k.uops), cfg), offset * 4)
                cmd.load(MemType.UOP_PRE, k.pre, pre_pool, offset, 1, len(k.uops), len(k.uops))
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        if j:  # the stores of the previous tile are done (one store->compute queue: keep pushes and pops paired)
            cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        mem = MemType.ACC if rng.random() < 0.6 else MemType.ACC_8BIT
        pads = (int(rng.integers(0, 2)), 0, int(rng.integers(0, 2)), int(rng.integers(0, 2)))
        y, x = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        n = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
        cmd.load(
            mem,
            a0 + int(rng.integers(0, ACC_SHARE - n + 1)),
            acc if mem == MemType.ACC else acc8,
            int(rng.integers(0, 200)),
            y,
            x,
            x + int(rng.integers(0, 3)),
            pad=pads,
        )
        if lut and rng.random() < 0.3:  # new entries for some elements of the tables
            n = int(rng.integers(1, cfg.lut_depth + 1))
            cmd.load(
                MemType.LUT,
                int(rng.integers(0, cfg.lut_buffer_depth - n + 1)),
                tables,
                int(rng.integers(0, 2 * cfg.lut_depth)),
                1,
                n,
                n,
            )
        for k in kernels:
            _emit(cmd, k)
        if j + vt < tiles:
            cmd.dep_push(Stage.COMPUTE, Stage.LOAD)
        for k in range(4):  # all 32 bits of the thread's accumulators, 8 at a time (truncated or requantized)
            if k:
                cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
                if rng.random() < 0.5:
                    cmd.epi(**_epi(rng, cfg, a0, a0, lut))
                    state = {"dw": None, "src_out": False}
                cmd.alu(AluOp.SHR, [(a0, 0)], iter_out=ACC_SHARE, dst_factor=(1, 0), imm=8)
            cmd.dep_push(Stage.COMPUTE, Stage.STORE)
            cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
            rows = int(rng.choice([1, 2, 3, 4, 6]))
            cmd.store(a0, out, (j * 4 + k) * ACC_SHARE, rows, ACC_SHARE // rows, ACC_SHARE // rows)
            if k < 3 or j + 1 < tiles:
                cmd.dep_push(Stage.STORE, Stage.COMPUTE)
    insns = cmd.finish()
    top = max(
        (i.sram_base + i.x_size for i in insns if isinstance(i, MemInsn) and i.mem_type == MemType.UOP), default=0
    )
    if top > cfg.uop_depth - vt * PRE_ROWS:  # never with these shares: a change to them must keep it so
        raise RuntimeError(f"seed {seed}: the builder's kernels reach UOP row {top}, into the UOP_PRE rows")
    return RandomProgram(insns, buffers)


def random_program(dev: Device, seed: int):
    """Build the program of ``seed`` (:func:`build_program`) on ``dev`` and run it; returns the RunResult."""
    return dev.run_program(build_program(dev, seed).insns)
