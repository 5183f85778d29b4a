// The dispatch checks of the three stages: whether an instruction breaks its stage's rules (the stage
// rejects it with ERR_INSN when it reaches the head of its command queue). The top computes them as fetch
// routes the instruction and stores the stage's bit beside it in the command queue, so a stage's dispatch
// reads one bit instead of the tile arithmetic (the decision, and so the cycle it is taken, is unchanged).
// The checks' one product, the tile's end (vdla_pkg::mem_tile_end), comes formed a cycle ahead with the
// instruction (vdla_fetch registers it at the multiplier's output): here it is only compared.
module vdla_insn_check (
  input  vdla_pkg::insn_t insn_i,
  input  logic [33:0]     tile_end_i,     // vdla_pkg::mem_tile_end(insn_i.mem)
  output logic            load_bad_o,     // as an instruction of the load stage
  output logic            compute_bad_o,  // of the compute stage
  output logic            store_bad_o     // of the store stage
);
  vdla_pkg::mem_insn_t mem;
  vdla_pkg::opcode_e   opcode;
  assign mem    = insn_i.mem;
  assign opcode = mem.hdr.opcode;

  // load: LOADs of INP, WGT or UOP_PRE (no pop_prev/push_prev), the tile within the buffer, micro-ops unpadded
  logic is_wgt, is_pre;
  assign is_wgt     = mem.mem_type == vdla_pkg::MEM_WGT;
  assign is_pre     = mem.mem_type == vdla_pkg::MEM_UOP_PRE;
  assign load_bad_o = mem.hdr.pop_prev || mem.hdr.push_prev
                   || (mem.mem_type != vdla_pkg::MEM_INP && !is_wgt && !is_pre)
                   || vdla_pkg::mem_tile_bad(mem, tile_end_i, is_pre ? 34'(vdla_pkg::UOP_DEPTH)
                                             : is_wgt ? 34'(vdla_pkg::WGT_DEPTH) : 34'(vdla_pkg::INP_DEPTH))
                   || (mem.x_size != '0 && is_pre && vdla_pkg::mem_has_pad(mem));

  // compute: LOADs of UOP, ACC, ACC_8BIT, LUT (micro-ops and the table unpadded, the table's rows within its
  // LUT_ENTRIES / OUT_ELEM_BYTES elements), GEMM/ALU loops within the micro-op buffer with non-zero iterations
  // (an ALU's pipe on a MUL holding its source row or an SQR of one micro-op; an SQR with neither reset nor
  // use_imm), EPI with its bias rows within ACC, a depthwise kernel and
  // stride the window holds, src_out only where OUT rows are INP rows, mul only with the OUT multiplier (its
  // first row within ACC), FINISH
  // vdla.isa.pipe.pipe_refusal: a pipelined MUL reads one source row, held across the inner loop; a pipelined
  // SQR has one micro-op (it reads no source row); neither is a reset or has an immediate
  logic pipe_ok, sqr_bad;
  assign pipe_ok = (insn_i.alu.alu_opcode == vdla_pkg::ALU_SQR
                    || (insn_i.alu.alu_opcode == vdla_pkg::ALU_MUL && insn_i.alu.src_factor_in == '0))
                && !insn_i.alu.reset && !insn_i.alu.use_imm && insn_i.alu.uop_end == 14'(insn_i.alu.uop_bgn) + 14'd1;
  assign sqr_bad = insn_i.alu.alu_opcode == vdla_pkg::ALU_SQR && (insn_i.alu.reset || insn_i.alu.use_imm);
  logic is_uop, is_acc8, is_lut;
  assign is_uop  = mem.mem_type == vdla_pkg::MEM_UOP;
  assign is_acc8 = mem.mem_type == vdla_pkg::MEM_ACC_8BIT;
  assign is_lut  = mem.mem_type == vdla_pkg::MEM_LUT;
  always_comb begin
    compute_bad_o = 1'b0;
    if (opcode == vdla_pkg::OP_LOAD) begin
      compute_bad_o = !(is_uop || is_acc8 || is_lut || mem.mem_type == vdla_pkg::MEM_ACC)
         || vdla_pkg::mem_tile_bad(mem, tile_end_i, is_uop ? 34'(vdla_pkg::UOP_DEPTH)
                                                  : is_lut ? 34'(vdla_pkg::LUT_TABLES * vdla_pkg::LUT_DEPTH) : 34'(vdla_pkg::ACC_DEPTH))
         || (mem.x_size != '0 && (is_uop || is_lut) && vdla_pkg::mem_has_pad(mem));  // not padded
    end else if (opcode == vdla_pkg::OP_GEMM || opcode == vdla_pkg::OP_ALU) begin
      compute_bad_o = 14'(insn_i.gemm.uop_bgn) >= insn_i.gemm.uop_end
         || insn_i.gemm.uop_end > 14'(vdla_pkg::UOP_DEPTH)
         || insn_i.gemm.iter_out == '0 || vdla_pkg::loop_iter_in(insn_i) == '0
         || (opcode == vdla_pkg::OP_ALU && insn_i.alu.pipe && !pipe_ok)
         || (opcode == vdla_pkg::OP_ALU && sqr_bad)
         || (opcode == vdla_pkg::OP_ALU && insn_i.alu.alu_opcode > vdla_pkg::ALU_SQR);  // no such operation
    end else if (opcode == vdla_pkg::OP_EPI) begin
      compute_bad_o = (insn_i.epi.bias && 17'(insn_i.epi.bias_base) >= 17'(vdla_pkg::ACC_DEPTH))
         || (insn_i.epi.dw && (vdla_pkg::DW_SUPPORTED == 0 || insn_i.epi.dw_k == '0
                               || insn_i.epi.dw_k > 3'(vdla_pkg::DW_MAX_K) || insn_i.epi.dw_stride == '0
                               || 3'(insn_i.epi.dw_stride) > insn_i.epi.dw_k))
         || (insn_i.epi.src_out && vdla_pkg::SRC_OUT_SUPPORTED == 0)  // OUT rows read as INP rows, their copy
         || (insn_i.epi.mul && (vdla_pkg::OUT_MUL_SUPPORTED == 0
                                || 17'(insn_i.epi.mul_base) >= 17'(vdla_pkg::ACC_DEPTH)));  // the OUT multiplier
    end else begin
      compute_bad_o = opcode != vdla_pkg::OP_FINISH;
    end
  end

  // store: STOREs of OUT without padding or next-stage flags, rows that do not overlap in DRAM, the tile
  // within ACC (unpadded, it ends at sram_base + y_size * x_size)
  assign store_bad_o = mem.hdr.pop_next || mem.hdr.push_next || mem.mem_type != vdla_pkg::MEM_OUT
                    || vdla_pkg::mem_tile_bad(mem, tile_end_i, 34'(vdla_pkg::ACC_DEPTH))
                    || (mem.x_size != '0 && (vdla_pkg::mem_has_pad(mem)
                                             || (mem.y_size > 16'd1 && mem.x_stride < mem.x_size)));

  logic unused_insn;  // the fields the checks do not read
  assign unused_insn = ^insn_i;
endmodule
