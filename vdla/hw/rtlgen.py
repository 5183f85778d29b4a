"""The generators of the RTL's checked-in artefacts, from the Python sources of truth.

* ``hw/rtl/vdla_pkg.sv``: the SystemVerilog package every RTL module uses (lowRISC ``ibex_pkg`` style):
  the configuration's parameters and derived widths and depths (:mod:`vdla.config`), the instruction
  formats as packed structs with their enums (the field tables of :mod:`vdla.isa.instructions`), the
  register map (:mod:`vdla.runtime.registers`), the functions the stages share (memory-instruction
  decode, requantization) and, at file scope ahead of the package, the assertion macros every module uses
  (``ASSERT``, ``ASSERT_NEVER``, ``ASSERT_KNOWN``). The checked-in copy is the default preset's; an RTL build,
  a cocotb bench or a fit for another preset writes that preset's package into its own build directory
  (:func:`package_for`).
* ``docs/registers.md``: the register map's documentation (:func:`registers_markdown`).

``vdla gen-rtl`` rewrites both through :func:`write_generated`; a test fails when either is stale.
Invariants: the package's instruction structs are exactly ``INSN_BITS`` wide, their fields sit at the bit
positions of the Python tables (gaps become ``rsvd_*`` members), every enum has the width of the field that
holds it, and the output depends only on the configuration, those tables and this module's text.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import vdla.runtime.registers as R
from vdla.config import (
    DEFAULT_PRESET,
    DW_MAX_K,
    LUT_ENTRIES,
    URAM_BUFFER_NAMES,
    ConfigError,
    HwConfig,
    load_config,
)
from vdla.isa.instructions import (
    ALU_FIELDS,
    COMMON_FIELDS,
    EPI_FIELDS,
    GEMM_FIELDS,
    INSN_BITS,
    ISA_VERSION,
    MEM_FIELDS,
    AluOp,
    MemType,
    Opcode,
)

REPO = Path(__file__).resolve().parents[2]
RTL_DIR = REPO / "hw" / "rtl"
PACKAGE_NAME = "vdla_pkg.sv"  # generated per configuration; RTL_DIR holds the default preset's
PACKAGE_PATH = RTL_DIR / PACKAGE_NAME
REGS_DOC_PATH = REPO / "docs" / "registers.md"
REGENERATE = "vdla gen-rtl"

# Constants of the RTL itself (not of a configuration): the AXI ID width. (The address width is the config's
# axi_addr_bits: the PS's HP ports'.)
AXI_ID_W = 2

# The AXI4 read channel between a requester and the read arbiter (vdla_axi_rd_arb), as two packed structs
# (pulp axi_pkg's req_t/resp_t split): the members of each, MSB first, as (name, bits, comment); bits None is
# the configuration's bus width, "addr" its address width. axi_rd_structs() gives them for a bus,
# packed_layout() their bit positions.
_AXI_RD_REQ = (
    ("ar_valid", 1, "AR: a burst is requested"),
    ("ar_addr", "addr", "its byte address (AXI_ADDR_W bits)"),
    ("ar_len", 8, "its beats - 1"),
)
_AXI_RD_RSP = (
    ("ar_ready", 1, "AR: the request is accepted"),
    ("r_valid", 1, "R: a beat of this requester's"),
    ("r_resp", 2, "its response (2'b00: OKAY)"),
    ("r_data", None, "its data (BUS_WIDTH bits)"),
)
_AXI_RD_DOC = """\
  // The AXI4 read channel between a requester (vdla_fetch, and vdla_load_engine's vdla_dma_rd in each of the
  // load and compute stages) and the read arbiter (vdla_axi_rd_arb), after pulp's axi_pkg: the request carries
  // AR, the response AR's ready and the R beat, whose r_valid the arbiter sets for the beat's requester alone
  // (by RID). Every requester takes a beat as it comes (RREADY is 1). vdla_top unpacks them onto its flat
  // m_axi_* ports, where ARID, ARSIZE, ARBURST and RLAST are added. The arbiter's requesters' structs travel as
  // flat vectors of their widths (a packed array of a packed struct reads as 1-bit elements in Yosys)."""

# Enum-typed instruction fields: field name -> (SV type, Python enum, value prefix).
_ENUM_FIELDS = {
    "opcode": ("opcode_e", Opcode, "OP_"),
    "mem_type": ("mem_type_e", MemType, "MEM_"),
    "alu_opcode": ("alu_op_e", AluOp, "ALU_"),
}
_HDR_BITS = sum(w for _, _, w in COMMON_FIELDS)

# The assertion macros of every module (lowRISC's prim_assert set), defined once, at file scope ahead of the package:
# every tool compiles the package first, so every module sees them (and no tool needs an include path). Synthesis
# (SYNTHESIS: Yosys, Vivado) reads none of them; INC_ASSERT marks the code that only assertions read.
_ASSERT_MACROS = """\
`ifndef VDLA_ASSERT_MACROS
`define VDLA_ASSERT_MACROS
// The clock and reset an assertion samples unless its call names others: every module's clk_i and rst_ni.
`define ASSERT_DEFAULT_CLK clk_i
`define ASSERT_DEFAULT_RST !rst_ni
`ifdef SYNTHESIS
`define ASSERT(__name, __prop, __msg, __clk = `ASSERT_DEFAULT_CLK, __rst = `ASSERT_DEFAULT_RST)
`define ASSERT_NEVER(__name, __prop, __msg, __clk = `ASSERT_DEFAULT_CLK, __rst = `ASSERT_DEFAULT_RST)
`define ASSERT_KNOWN(__name, __sig, __clk = `ASSERT_DEFAULT_CLK, __rst = `ASSERT_DEFAULT_RST)
`else
`define INC_ASSERT
// ASSERT: the property __prop holds at every rising edge of __clk while __rst is 0 (1 or X disables it: pass 1'b0
// for a module without reset); a failure reports $error(__msg), after the simulator's file:line and the
// assertion's hierarchical name (__name, an a_* label).
`define ASSERT(__name, __prop, __msg, __clk = `ASSERT_DEFAULT_CLK, __rst = `ASSERT_DEFAULT_RST) \\
  __name: assert property (@(posedge __clk) disable iff ((__rst) !== 1'b0) (__prop)) else $error(__msg);
// ASSERT_NEVER: the boolean __prop never holds.
`define ASSERT_NEVER(__name, __prop, __msg, __clk = `ASSERT_DEFAULT_CLK, __rst = `ASSERT_DEFAULT_RST) \\
  `ASSERT(__name, !(__prop), __msg, __clk, __rst)
// ASSERT_KNOWN: every bit of __sig is 0 or 1 (a four-state simulator's check; two-state Verilator has no X).
`define ASSERT_KNOWN(__name, __sig, __clk = `ASSERT_DEFAULT_CLK, __rst = `ASSERT_DEFAULT_RST) \\
  `ASSERT(__name, !$isunknown(__sig), `"__sig has an unknown bit`", __clk, __rst)
`endif
`endif
"""

# The functions the stages share, verbatim (Yosys' SystemVerilog frontend: no `return`, assign the name).
# Types of the RTL's internal interfaces, verbatim.
_RTL_TYPES = """\
  // Slots of the accumulator read-modify-write (vdla_acc_rmw): SRC reads the second ALU operand (kept for
  // the next slot), ALU applies the ALU operation, GEMM adds the GEMM core's sums, ZERO writes zeros.
  typedef enum logic [1:0] {SLOT_SRC = 2'd0, SLOT_ALU = 2'd1, SLOT_GEMM = 2'd2, SLOT_ZERO = 2'd3} slot_e;

  // What an ALU lane's shifts take from its second operand b (alu_lane_ctl), formed before the lane's C stage
  // (from an immediate, or from the source row as it is read) so that the C stage starts at the shifter.
  typedef struct packed {
    logic [4:0] rs;    // right shift: SHR/RSHR max(s, 0) with s = b clamped to [-31, 31]; REQ b[4:0]
    logic [4:0] ls;    // left shift of SHR/RSHR when s < 0: -s
    logic       left;  // SHR/RSHR with s < 0
    logic       relu;  // REQ: b[5], clamp to [0, 127]
  } alu_lane_ctl_t;
  localparam int ALU_CTL_W = 12;  // $bits(alu_lane_ctl_t); the lanes' controls travel as a flat vector
"""

_FUNCTIONS = """\
  // One past the last SRAM element a LOAD/STORE tile covers: sram_base + padded rows * padded columns. Rows and
  // columns are at most 65,565 (17 bits), so the product is one DSP48E1's multiply; vdla_fetch forms it into a
  // register as the instruction is assembled, a cycle ahead of the dispatch checks that read it.
  function automatic logic [33:0] mem_tile_end(mem_insn_t insn);
    logic [16:0] rows, cols;
    rows         = 17'(insn.y_pad_0) + 17'(insn.y_size) + 17'(insn.y_pad_1);
    cols         = 17'(insn.x_pad_0) + 17'(insn.x_size) + 17'(insn.x_pad_1);
    mem_tile_end = 34'(insn.sram_base) + 34'(rows) * 34'(cols);
  endfunction

  // A tile that moves data (x_size != 0) but has no rows, or ends beyond a buffer of `depth` elements, given its
  // end `tile_end` (mem_tile_end(insn), formed a cycle ahead).
  function automatic logic mem_tile_bad(mem_insn_t insn, logic [33:0] tile_end, logic [33:0] depth);
    mem_tile_bad = insn.x_size != '0 && (insn.y_size == '0 || tile_end > depth);
  endfunction

  // Any of the four padding fields is non-zero.
  function automatic logic mem_has_pad(mem_insn_t insn);
    mem_has_pad = {insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1} != '0;
  endfunction

  // (The enum constants are qualified: Yosys resolves a package function's names where it is called.)
  // The inner loop extent of a GEMM or ALU instruction: GEMM's 14-bit iter_in, the ALU's 13 bits (its bit 62 is
  // use_imm, so that alu_opcode has 4 bits).
  function automatic logic [13:0] loop_iter_in(insn_t insn);
    loop_iter_in = insn.gemm.hdr.opcode == vdla_pkg::OP_ALU ? 14'(insn.alu.iter_in) : insn.gemm.iter_in;
  endfunction

  // The ALU operations a half-width ALU runs over the whole row in one cycle (vdla.cycles.FULL_WIDTH): ADD (the
  // GEMMs' accumulation); the others take two passes of half the lanes.
  function automatic logic alu_full_width(alu_op_e op);
    alu_full_width = op == vdla_pkg::ALU_ADD;
  endfunction

  // The ALU operations whose result comes from the read-modify-write's M stage on every ALU (vdla.cycles.TWO_CYCLE):
  // MUL and SQR (their products registered) and LSUM (its tree's partial sums registered).
  function automatic logic alu_two_cycle(alu_op_e op);
    alu_two_cycle = op == vdla_pkg::ALU_MUL || op == vdla_pkg::ALU_SQR || op == vdla_pkg::ALU_LSUM;
  endfunction

  // The ALU operations that read a source row (vdla.isa.AluInsn.reads_src, with no immediate): all but SQR, whose
  // operand is its destination row.
  function automatic logic alu_reads_src(alu_op_e op);
    alu_reads_src = op != vdla_pkg::ALU_SQR;
  endfunction

  // requantize's bounds {hi, zero, lo} on 2v for `shift` and `relu` (34-bit signed each): 2v >= hi is
  // x >= 255, 2v < zero is relu and x <= -2, 2v < lo is x <= -258 (255 << shift, -1 << shift, -257 << shift;
  // beyond every 2v for shifts over 24, and zero without relu).
  function automatic logic [101:0] requant_bounds(logic [4:0] shift, logic relu);
    logic signed [33:0] hi, zero, lo;
    hi   = shift >= 5'd25 ? 34'sh1_ffff_ffff : 34'sd255 <<< shift;
    zero = relu ? -34'sd1 <<< shift : -34'sh2_0000_0000;
    lo   = shift >= 5'd25 ? -34'sh2_0000_0000 : -34'sd257 <<< shift;
    requant_bounds = {hi, zero, lo};
  endfunction

  // requantize's limit, given its bounds (requant_bounds of the shift and relu):
  // {pass, limit}, where pass says the rounded x = (2v) >> shift lies within the bounds (so its low byte is the
  // result) and limit is the int8 it is clamped to otherwise. Each bound's compare is the sign of a 35-bit
  // difference (one carry chain after one LUT level), off the shifter's path.
  function automatic logic [8:0] requant_limit(logic signed [31:0] v, logic [101:0] bounds);
    logic signed [33:0] w;
    logic               lt_hi, lt_zero, lt_lo;
    w       = {v[31], v, 1'b0};  // 2v
    lt_hi   = 1'((35'(w) - 35'($signed(bounds[101:68]))) >> 34);  // 2v < hi
    lt_zero = 1'((35'(w) - 35'($signed(bounds[67:34]))) >> 34);
    lt_lo   = 1'((35'(w) - 35'($signed(bounds[33:0]))) >> 34);
    if (!lt_hi) requant_limit = {1'b0, 8'd127};      // x >= 255
    else if (lt_zero) requant_limit = {1'b0, 8'd0};  // relu and x <= -2
    else if (lt_lo) requant_limit = {1'b0, 8'h80};   // x <= -258
    else requant_limit = {1'b1, 8'd0};
  endfunction

  // requantize's clamp, given its bounds and the low 9 bits x9 of x = (2v) >> shift from the caller's shifter:
  // the rounded (x + 1) >> 1 clamped to int8 (requant_limit).
  function automatic logic [7:0] requant_clamp(logic signed [31:0] v, logic [8:0] x9, logic [101:0] bounds);
    logic [8:0] lim;
    lim           = requant_limit(v, bounds);
    requant_clamp = lim[8] ? 8'((x9 + 9'd1) >> 1) : lim[7:0];  // the low byte of (x + 1) >> 1
  endfunction

  // requantize with its bounds given: the shift by whole bytes and then by the rest (two narrow muxes), then
  // requant_clamp.
  function automatic logic [7:0] requantize_b(logic signed [31:0] v, logic [4:0] shift, logic [101:0] bounds);
    logic [15:0] y;
    y            = 16'($signed({v[31], v, 1'b0}) >>> {shift[4:3], 3'd0});  // 2v by whole bytes (signed)
    requantize_b = requant_clamp(v, 9'(y >> shift[2:0]), bounds);
  endfunction

  // Requantization of one int32 lane (the OUT mirror after an EPI with req; the ALU's REQ is requant_limit
  // beside its shared rounding shifter): `v` shifted right by `shift` rounding half up (in 33 bits, no
  // overflow), clamped to [relu ? 0 : -128, 127]. The bounds on x = (2v) >> shift (x >= 255, x <= -2,
  // x <= -258) are tested as compares of 2v with the bounds shifted left by `shift` (requant_bounds), which
  // depend on `shift` and `relu` alone: only the low byte's rounding follows the shifter.
  function automatic logic [7:0] requantize(logic signed [31:0] v, logic [4:0] shift, logic relu);
    requantize = requantize_b(v, shift, requant_bounds(shift, relu));
  endfunction

  // An ALU lane's shift controls from its operand b (an alu_lane_ctl_t), for REQ (`req`) or SHR/RSHR.
  function automatic logic [ALU_CTL_W-1:0] alu_lane_ctl(logic req, logic signed [31:0] b);
    logic signed [5:0] s;
    s = (b > 32'sd31) ? 6'sd31 : (b < -32'sd31) ? -6'sd31 : 6'(b);
    alu_lane_ctl = {req ? b[4:0] : (s < 0) ? 5'd0 : s[4:0], 5'(-s), !req && s < 0, b[5]};  // rs ls left relu
  endfunction
"""


def _clog2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def _section(title: str) -> list[str]:
    return ["", f"  // ---- {title} " + "-" * max(4, 92 - len(title))]


def _enum(sv_type: str, width: int, values: list[str]) -> list[str]:
    """``typedef enum logic [W-1:0] {...} sv_type;`` with the values wrapped at 100 columns."""
    lines, line = [], "   "
    for v in values:
        if len(line) + len(v) + 2 > 100:
            lines.append(line.rstrip())
            line = "   "
        line += f" {v},"
    lines.append(line.rstrip(","))
    return [f"  typedef enum logic [{width - 1}:0] {{", *lines, f"  }} {sv_type};"]


def _params(rows: list[tuple[str, str, object, str]]) -> list[str]:
    """``localparam TYPE NAME = VALUE;  // comment`` lines, aligned."""
    decl = [f"  localparam {t} {n}" for t, n, _, _ in rows]
    width = max(len(d) for d in decl)
    out = []
    for d, (_, _, v, c) in zip(decl, rows, strict=True):
        line = f"{d.ljust(width)} = {v};"
        out.append(f"{line}  // {c}" if c else line)
    return out


def _config_params(cfg: HwConfig) -> list[str]:
    i = "int"
    rows: list[tuple[str, str, object, str]] = [
        (i, "ISA_VERSION", ISA_VERSION, "ID[15:0]"),
        ("logic [31:0]", "CONFIG_HASH", f"32'h{cfg.hash:08x}", "CONFIG_HASH register"),
    ]
    for name in ("batch", "block_in", "block_out", "inp_width", "wgt_width", "acc_width", "out_width"):
        rows.append((i, name.upper(), getattr(cfg, name), ""))
    for buf in ("inp", "wgt", "acc", "uop"):
        rows.append((i, f"{buf.upper()}_DEPTH", getattr(cfg, f"{buf}_depth"), f"{buf.upper()} buffer elements"))
    for buf in ("inp", "wgt", "acc", "out"):
        rows.append((i, f"{buf.upper()}_ELEM_BYTES", getattr(cfg, f"{buf}_elem_bytes"), ""))
    rows.append((i, "LUT_ENTRIES", LUT_ENTRIES, "activation table entries (int8 in, int8 out)"))
    rows.append((i, "LUT_DEPTH", cfg.lut_depth, "activation table elements: LUT_ENTRIES / OUT_ELEM_BYTES"))
    rows.append((i, "LUT_TABLES", cfg.lut_tables, "activation tables (EPI lut_table), t from element t LUT_DEPTH"))
    rows.append((i, "DW_MAX_K", DW_MAX_K, "depthwise window: DW_MAX_K registers of DW_MAX_K INP rows"))
    rows.append(
        (
            i,
            "DW_SUPPORTED",
            int(cfg.dw_supported),
            "depthwise mode (EPI dw): the config's depthwise_mode, BATCH 1, BLOCK_IN == BLOCK_OUT",
        )
    )
    rows.append((i, "OUT_MUL_SUPPORTED", int(cfg.out_multiplier), "the OUT-path multiplier (EPI mul)"))
    rows.append((i, "SRC_OUT_SUPPORTED", int(cfg.src_out_refusal() is None), "the GEMMs' input from OUT (EPI src_out)"))
    rows.append(
        (i, "ALU_PASSES", cfg.alu_passes, "passes a row of an ALU operation but ADD takes (alu_lanes: 2 is half-width)")
    )
    for buf in URAM_BUFFER_NAMES:
        rows.append(
            ("bit", f"{buf.upper()}_URAM", f"1'b{int(cfg.in_uram(buf))}", f"{buf.upper()} in UltraRAM (uram_buffers)")
        )
    rows += [
        (i, "UOP_DST_BITS", cfg.uop_dst_bits, "micro-op fields: dst [DST-1:0]"),
        (i, "UOP_SRC_BITS", cfg.uop_src_bits, "src above dst"),
        (i, "UOP_WGT_BITS", cfg.uop_wgt_bits, "wgt above src"),
        (i, "BUS_WIDTH", cfg.bus_width_bits, "AXI data bits"),
        ("logic [63:0]", "DRAM_BASE", f"64'h{cfg.dram_base_addr:016x}", ""),
        ("logic [63:0]", "DRAM_BYTES", f"64'h{cfg.dram_bytes:016x}", ""),
    ]
    rows += [(i, k.upper(), v, "") for k, v in asdict(cfg.timing).items()]
    lanes = cfg.batch * cfg.block_out
    rows += [
        (i, "LANES", lanes, "ACC/OUT lanes: BATCH * BLOCK_OUT"),
        (i, "INP_BITS", cfg.inp_elem_bytes * 8, "bits of one INP element"),
        (i, "WGT_BITS", cfg.wgt_elem_bytes * 8, "bits of one WGT element"),
        (i, "ACC_BITS", cfg.acc_elem_bytes * 8, "bits of one ACC element (LANES int32)"),
        (i, "OUT_BITS", cfg.out_elem_bytes * 8, "bits of one OUT element (LANES int8)"),
        (i, "INP_AW", _clog2(cfg.inp_depth), "$clog2(INP_DEPTH)"),
        (i, "WGT_AW", _clog2(cfg.wgt_depth), "$clog2(WGT_DEPTH)"),
        (i, "ACC_AW", _clog2(cfg.acc_depth), "$clog2(ACC_DEPTH)"),
        (i, "UOP_AW", _clog2(cfg.uop_depth), "$clog2(UOP_DEPTH)"),
        (i, "BUS_BYTES", cfg.bus_bytes, "bytes per AXI beat"),
        (i, "UOP_BANKS", cfg.bus_bytes // cfg.uop_elem_bytes, "micro-ops per AXI beat = UOP buffer banks"),
        (i, "UOP_BANK_AW", _clog2(cfg.uop_depth * cfg.uop_elem_bytes // cfg.bus_bytes), "bank address bits"),
    ]
    return _section(f"Configuration '{cfg.name}' (vdla/config.py)") + _params(rows)


def _field_type(name: str, width: int) -> str:
    if name in _ENUM_FIELDS:
        return _ENUM_FIELDS[name][0]
    return "logic" if width == 1 else f"logic [{width - 1}:0]"


def axi_rd_structs(bus_bits: int, addr_bits: int) -> dict[str, tuple[tuple[str, int, str], ...]]:
    """The AXI4 read channel's structs for a bus of ``bus_bits`` data and ``addr_bits`` address bits:
    ``axi_rd_req_t`` and ``axi_rd_rsp_t``, each one's members MSB first as (name, bits, comment)."""
    width = {None: bus_bits, "addr": addr_bits}
    return {
        name: tuple((n, width.get(bits, bits), c) for n, bits, c in members)
        for name, members in (("axi_rd_req_t", _AXI_RD_REQ), ("axi_rd_rsp_t", _AXI_RD_RSP))
    }


def packed_layout(members: tuple[tuple[str, int, str], ...]) -> dict[str, tuple[int, int]]:
    """Each member's (lsb, bits) in a packed struct of ``members`` (MSB first), e.g. for a bench that drives
    the struct as one vector."""
    out, lsb = {}, sum(bits for _, bits, _ in members)
    for name, bits, _ in members:
        lsb -= bits
        out[name] = (lsb, bits)
    return out


def _typedef(name: str, rows: list[tuple[str, str, str]], doc: list[str]) -> list[str]:
    """``typedef struct packed {...} name;`` of (type, member, comment) rows, MSB first, aligned, after the
    comment lines ``doc``."""
    tw = max(len(t) for t, _, _ in rows)
    nw = max(len(n) for _, n, _ in rows) + 1
    out = [*doc, "  typedef struct packed {"]
    out += [f"    {t.ljust(tw)} {(n + ';').ljust(nw)}  // {c}" for t, n, c in rows]
    out.append(f"  }} {name};")
    return out


def _axi_rd(cfg: HwConfig) -> list[str]:
    """The AXI4 read channel's structs and their widths (the arbiter's requesters travel as flat vectors)."""
    out = ["", *_AXI_RD_DOC.splitlines()]
    widths = []
    for name, members in axi_rd_structs(cfg.bus_width_bits, cfg.axi_addr_bits).items():
        out += _typedef(name, [(_field_type("", bits), n, c) for n, bits, c in members], [])
        widths.append(("int", f"{name.removesuffix('_t').upper()}_W", sum(b for _, b, _ in members), f"$bits({name})"))
    return out + _params(widths)


def _struct(name: str, fields: tuple[tuple[str, int, int], ...], lsb0: int, doc: str) -> list[str]:
    """A packed struct of ``fields`` covering bits [INSN_BITS-1:lsb0] (or [_HDR_BITS-1:0] for the header),
    gaps filled with ``rsvd_<msb>_<lsb>``; members are declared from the MSB down."""
    top = _HDR_BITS if lsb0 == 0 else INSN_BITS
    rows: list[tuple[str, str, str]] = []
    pos = top
    for fname, lsb, width in sorted(fields, key=lambda f: -f[1]):
        if lsb + width > pos:
            raise ValueError(f"{name}: field {fname} overlaps another")
        if lsb + width < pos:
            rows.append((_field_type("", pos - lsb - width), f"rsvd_{pos - 1}_{lsb + width}", "reserved"))
        rows.append((_field_type(fname, width), fname, f"[{lsb + width - 1}:{lsb}]" if width > 1 else f"[{lsb}]"))
        pos = lsb
    if pos < lsb0:
        raise ValueError(f"{name}: a field lies below bit {lsb0}")
    if pos > lsb0:
        rows.append((_field_type("", pos - lsb0), f"rsvd_{pos - 1}_{lsb0}", "reserved"))
    if lsb0:
        rows.append(("insn_hdr_t", "hdr", f"[{lsb0 - 1}:0]"))
    return _typedef(name, rows, [f"  // {doc}"])


def _isa() -> list[str]:
    out = _section("Instructions (vdla/isa/instructions.py)")
    out += [f"  localparam int INSN_BITS = {INSN_BITS};", ""]
    widths = {n: w for n, _, w in COMMON_FIELDS + MEM_FIELDS + GEMM_FIELDS + ALU_FIELDS + EPI_FIELDS}
    for field, (sv_type, enum, prefix) in _ENUM_FIELDS.items():
        w = widths[field]
        if max(enum) >= 1 << w:
            raise ValueError(f"{enum.__name__} does not fit the {w}-bit field {field}")
        out += _enum(sv_type, w, [f"{prefix}{m.name} = {w}'d{m.value}" for m in enum])
    out.append("")
    out += _struct("insn_hdr_t", COMMON_FIELDS, 0, "Common to every instruction: opcode and dependency flags.")
    formats = (
        ("mem_insn_t", MEM_FIELDS, "LOAD / STORE: a 2-D tile with zero padding (x_size 0: a token-only no-op)."),
        ("gemm_insn_t", GEMM_FIELDS, "GEMM: the two-level micro-op loop, ACC[dst] += INP[src] x WGT[wgt]^T."),
        ("alu_insn_t", ALU_FIELDS, "ALU: the two-level micro-op loop, ACC[dst] = op(ACC[dst], ACC[src] or imm)."),
        ("epi_insn_t", EPI_FIELDS, "EPI: the compute stage's epilogue state (requantization, bias, depthwise)."),
        ("finish_insn_t", (), "FINISH: only the header."),
    )
    for name, fields, doc in formats:
        out.append("")
        out += _struct(name, fields, _HDR_BITS, doc)
    out += [
        "",
        "  // A 128-bit instruction word, viewed as any of the formats.",
        "  typedef union packed {",
        *(f"    {name.ljust(13)} {name.removesuffix('_insn_t')};" for name, _, _ in formats),
        "  } insn_t;",
    ]
    return out


def _registers() -> list[str]:
    ab = R.ADDR_BITS
    out = _section("Registers (vdla/runtime/registers.py)")
    rows: list[tuple[str, str, object, str]] = [
        ("int", "REG_ADDR_BITS", ab, "byte address bits of the AXI4-Lite slave"),
        ("logic [15:0]", "ID_MAGIC", f"16'h{R.ID_MAGIC:04x}", "ID[31:16]"),
    ]
    rows += [(f"logic [{ab - 1}:0]", f"REG_{r.name}", f"{ab}'h{r.offset:02x}", r.access) for r in R.REGS]
    rows += [("int", f"{f.reg}_{f.name}_LSB", f.lsb, f"{f.width} bit(s)") for f in R.FIELDS]
    rows += [
        (f"logic [{ab - 1}:0]", "COUNTER_BASE", f"{ab}'h{R.COUNTER_BASE:02x}", "counter i: LO at +8i, HI at +8i+4"),
        ("int", "NUM_COUNTERS", len(R.COUNTERS), ""),
        ("int", "DEADLOCK_WINDOW", R.DEADLOCK_WINDOW, "quiet cycles before ERR_DEADLOCK"),
    ]
    rows += [("int", f"CNT_{name}", i, doc) for i, (name, _, doc) in enumerate(R.COUNTERS)]
    out += _params(rows)
    code = R.field("STATUS", "ERROR_CODE")
    values = [f"ERR_NONE = {code.width}'d0"] + [f"ERR_{n} = {code.width}'d{c}" for n, (c, _) in R.ERRORS.items()]
    out += ["", "  // STATUS.ERROR_CODE (ERR_NONE: no error)"] + _enum("err_code_e", code.width, values)
    return out


def package_source(cfg: HwConfig) -> str:
    """The text of ``vdla_pkg.sv`` for ``cfg``."""
    lines = [
        f"// Generated by vdla.hw.rtlgen for the '{cfg.name}' configuration. Do not edit.",
        f"// Regenerate: {REGENERATE} (the checked-in copy is the default preset's).",
        "//",
        "// Modules refer to it by qualified names (vdla_pkg::X): Yosys' SystemVerilog frontend accepts",
        "// neither `import` in a module header or body nor types imported at file scope.",
        "",
        *_ASSERT_MACROS.splitlines(),
        "",
        "package vdla_pkg;",
    ]
    lines += _config_params(cfg)
    lines += _section("RTL constants and internal types") + _params(
        [
            ("int", "AXI_ADDR_W", cfg.axi_addr_bits, "AXI4 address bits: the config's axi_addr_bits"),
            ("int", "AXI_ID_W", AXI_ID_W, "AXI4 ID bits (read requesters: load, compute, fetch)"),
        ]
    )
    lines += _axi_rd(cfg)
    lines += [""] + _RTL_TYPES.splitlines()
    lines += _isa()
    lines += _registers()
    lines += _section("Shared functions") + _FUNCTIONS.splitlines()
    lines.append("endpackage")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> Path:
    """Write atomically (a concurrent reader sees the old or the new file, never a partial one); an
    unchanged file is left alone, so incremental builds that go by modification time stay valid."""
    if path.exists() and path.read_text() == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def write_package(cfg: HwConfig, path: str | Path) -> Path:
    """Write the package of ``cfg`` to ``path`` and return the path."""
    return _write(Path(path), package_source(cfg))


def package_for(cfg: HwConfig, directory: Path) -> Path:
    """Write ``cfg``'s package into ``directory`` (a build's own copy), under the name the RTL's file lists
    use, and return its path."""
    return write_package(cfg, directory / PACKAGE_NAME)


def registers_markdown() -> str:
    """The text of ``docs/registers.md``, from the register map (:mod:`vdla.runtime.registers`)."""
    out = [
        "# Register map",
        "",
        "The AXI4-Lite slave of the accelerator. Generated from `vdla/runtime/registers.py` (the single source",
        "used by the RTL through the generated package `hw/rtl/vdla_pkg.sv`, by the RTL simulation harness and",
        f"by the drivers); regenerate with `{REGENERATE}`.",
        "",
        "All registers are 32 bits wide; offsets are in bytes. A run: write INSN_ADDR_LO/HI and INSN_COUNT, "
        "write CONTROL.START=1, wait for IRQ.PENDING (or the irq line with IRQ_ENABLE set), read STATUS.",
        "",
        "| offset | name | access | description |",
        "| --- | --- | --- | --- |",
    ]
    out += [f"| 0x{r.offset:02x} | {r.name} | {r.access} | {r.doc} |" for r in R.REGS]
    out += ["", "## Fields", "", "| register | field | bits | description |", "| --- | --- | --- | --- |"]
    for f in R.FIELDS:
        bits = str(f.lsb) if f.width == 1 else f"{f.lsb + f.width - 1}:{f.lsb}"
        out.append(f"| {f.reg} | {f.name} | {bits} | {f.doc} |")
    out += ["", "## Error codes (STATUS.ERROR_CODE)", "", "| code | name | meaning |", "| --- | --- | --- |"]
    out += [f"| {code} | {name} | {doc} |" for name, (code, doc) in R.ERRORS.items()]
    out += [
        "",
        "On an error every unit stops at once: no further instruction starts and no further DRAM write",
        "is issued. ERROR_INSN then holds the index of the faulting instruction among those of its unit.",
        "The error's details are chosen in the cycle after the stop and the host sees them together:",
        "STATUS.ERROR with its code and unit, ERROR_INSN, IRQ.PENDING and the fall of CONTROL.BUSY appear",
        "in the same cycle, one after the units stop (the counters stop with the units).",
        "",
        "## Performance counters",
        "",
        f"64-bit, read-only, from 0x{R.COUNTER_BASE:02x}: counter *i* has its LO word at "
        f"0x{R.COUNTER_BASE:02x} + 8*i and its HI word 4 bytes above. START clears them all.",
        "",
        "| offset | name | counts |",
        "| --- | --- | --- |",
    ]
    out += [f"| 0x{R.COUNTER_BASE + 8 * i:02x} | {name} | {doc} |" for i, (name, _, doc) in enumerate(R.COUNTERS)]
    return "\n".join(out) + "\n"


def generated_files() -> dict[Path, str]:
    """Every checked-in generated file and the text it must have."""
    return {PACKAGE_PATH: package_source(load_config(DEFAULT_PRESET)), REGS_DOC_PATH: registers_markdown()}


def write_generated() -> list[Path]:
    """(Re)write every checked-in generated file; returns their paths."""
    return [_write(p, text) for p, text in generated_files().items()]


def generate(config: str | None = None, output: str | Path | None = None) -> list[Path]:
    """``vdla gen-rtl``: with ``output``, write the package of ``config`` (default: the default preset)
    there; without, rewrite every checked-in generated file (which are the default preset's)."""
    if output is not None:
        return [write_package(load_config(config or DEFAULT_PRESET), output)]
    if config not in (None, DEFAULT_PRESET):
        raise ConfigError(
            f"the checked-in package is the {DEFAULT_PRESET!r} preset's: write {config!r}'s elsewhere with -o FILE"
        )
    return write_generated()
