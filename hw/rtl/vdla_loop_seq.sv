// The micro-op loop sequencer (S0) of GEMM and ALU instructions: latches the instruction, waits its
// setup, then issues one micro-op read per cycle over uop_bgn..uop_end-1 inside iter_in inside iter_out,
// with the outer and inner index offsets
//   dst_off = o * dst_factor_out + i * dst_factor_in   (likewise src and wgt).
// An ALU iteration that reads ACC[src] in a slot of its own (src_rd_o: every iteration of a two-operand
// instruction, or only those at inner index 0 when it holds its source row, vdla.cycles.holds_src; never an
// SQR's, which reads ACC[dst] alone) is followed by ALU_II - 1 cycles without an issue (two reads on the one
// ACC read port), and a MUL or SQR iteration by ALU_MUL_CYCLES - 1 more (its result comes from the M stage,
// vdla_acc_rmw), except a pipelined MUL's or SQR's (pipe: one micro-op) iterations but each inner loop's last
// (vdla.cycles.mul_gaps); vdla.cycles models the same rules.
// A half-width ALU (ALU_PASSES 2) issues each iteration of an operation other than ADD twice (alu_lo_o: the
// first pass, the lanes' low half, which writes nothing; then the high half, which writes the row): the first
// reads ACC[src] where the iteration does (its gap), the second leaves ALU_MUL_CYCLES - 1 cycles, as a MUL
// (its result comes from the M stage), but a pipelined MUL's, whose passes issue back to back but after each
// inner loop's last (the next iteration's first pass meets the second in C: the same hazard as a full MUL's),
// and, but the last, a two-operand one's that is not a shift or pipelined (nogap_q) whose next iteration reads
// its source row (every one, or at inner index 0 when held): that SRC slot meets the second pass in C, and the
// next first pass, in R as that pass is in M, takes the source row from W if the SRC slot read the row being
// written (vdla_acc_rmw).
// After the last issue it drains the pipeline: done_o rises GEMM_PIPELINE + 1 cycles after the last micro-op
// read (ALU: ALU_PIPELINE + 1, plus the gap that iteration leaves). A halt stops it at once.
// A GEMM in the depthwise mode (dw_i, the EPI state; not a reset) issues its uop-iterations (pixels) as slot
// groups, one slot a cycle: group n reads pixel n's new window rows (dw_rd_o: register dw_ky_o, at src_off_o =
// the iteration's offset + ky * pitch + column; k columns at inner index 0, else `stride`, the window's last)
// and makes pixel n-1's passes (dw_ps_o: two per group of BLOCK_IN window positions, dw_grp_o, dw_half_o; pass j
// reads WGT element wgt_off_o + j and writes at dst_off_o, pixel n-1's), both in the group's last slots: a
// group is max(reads, passes + 1) slots (the first group its reads, a last group a free slot and the last
// pixel's passes). The passes take the window as the group's last read left it (dw_cap_o: the compute loop's
// snapshot), so they overlap the next pixel's reads (vdla.cycles.dw_slots). The loop indices are the reading
// pixel's and move at a group's end; dst_off_o, wgt_off_o and o_o are the passing pixel's, taken at the last
// read. A slot reads one micro-op, so this holds for a GEMM of one (ovl_q); with more, group n is pixel n's
// reads, a free slot and pixel n's passes.
// A GEMM (not a reset) under EPI mul (mul_i: the OUT path's multiplier, omul_o) leaves one cycle without an issue
// at the start of each outer iteration, in which it starts the slot that reads the iteration's multiplier row
// (mrow_o, for outer index mo_o), and drains OUT_MUL_LAG cycles longer (vdla.cycles.out_mul_cycles). In the
// depthwise mode that cycle comes before the first pass of each outer iteration's first pixel: at the start of
// its group (one micro-op: the group after its reads; more: its own group, before its reads).
module vdla_loop_seq (
  input  logic                        clk_i,
  input  logic                        rst_ni,
  input  logic                        halt_i,
  input  logic                        start_i,   // a GEMM or ALU instruction starts
  input  vdla_pkg::insn_t             insn_i,
  input  logic                        dw_i,        // the epilogue state: depthwise mode, kernel, stride, pitch
  input  logic [2:0]                  dw_k_i,
  input  logic [1:0]                  dw_stride_i,
  input  logic [15:0]                 dw_pitch_i,
  input  logic                        mul_i,       // the epilogue state: the OUT path's multiplier (EPI mul)
  // S0: the micro-op read
  output logic                        issue_o,   // read micro-op u_o this cycle
  output logic                        mrow_o,    // the multiplier row's slot starts this cycle (no issue)
  output logic [13:0]                 mo_o,      // its outer index
  output logic [12:0]                 u_o,
  output logic [13:0]                 o_o,       // the iter_out index
  output logic [31:0]                 dst_off_o,
  output logic [31:0]                 src_off_o,
  output logic [31:0]                 wgt_off_o,
  // the running instruction
  output logic                        gemm_o,
  output logic                        reset_o,
  output logic                        init_o,
  output vdla_pkg::alu_op_e           alu_op_o,
  output logic                        use_imm_o,
  output logic [15:0]                 imm_o,
  output logic                        src_rd_o,  // this issue reads ACC[src] in a SRC slot before its ALU slot
  output logic                        alu_lo_o,  // this issue is a half-width ALU's first pass (it writes nothing)
  output logic                        omul_o,    // the running GEMM's writes go through the OUT multiplier
  output logic                        dw_o,      // the running GEMM is in the depthwise mode
  output logic                        dw_rd_o,   // this issue reads a window row
  output logic                        dw_ps_o,   // this issue makes a pass (of the pixel before the reading one)
  output logic                        dw_cap_o,  // this read is its group's last: the passes take the window after it
  output logic [2:0]                  dw_ky_o,   // the window register the row shifts into
  output logic                        dw_half_o, // the pass's half of the lanes
  output logic [2:0]                  dw_grp_o,  // the pass's WGT element of the window
  output logic                        done_o
);
  typedef enum logic [1:0] {IDLE, RUN, DRAIN} state_e;

  // GEMM and ALU share the loop fields (insn_i.gemm) but iter_in (the ALU's is 13 bits: vdla_pkg::loop_iter_in);
  // the ALU's own fields overlay the weight factors
  vdla_pkg::gemm_insn_t gemm;
  assign gemm = insn_i.gemm;
  logic unused_flags;  // the dependency flags are the stage's business; iter_in is vdla_pkg::loop_iter_in's
  assign unused_flags = ^{gemm.hdr.pop_prev, gemm.hdr.pop_next, gemm.hdr.push_prev, gemm.hdr.push_next, gemm.iter_in};

  // control: the state; the wait and issue-phase counters and the loop indices
  state_e      state_q;
  logic [15:0] wait_q;
  logic [7:0]  phase_q;  // cycles until the next issue (two-operand ALU)
  logic [12:0] u_q;
  logic [13:0] o_q, i_q;
  // data: the instruction's loop bounds and factors, and the index offsets
  logic        gemm_q, reset_q, init_q, use_imm_q, two_op_q, hold_q, mul_q, pipe_q;
  logic        half_q, hi_q;  // two passes an iteration (a half-width ALU's, not ADD); the next is the second
  logic        nogap_q;       // ... and no gap after it before a SRC slot: two operands, no shift, no pipe
  vdla_pkg::alu_op_e alu_op_q;
  logic [15:0] imm_q;
  logic [12:0] u_bgn_q;
  logic [13:0] u_last_q, n_out_m1_q, n_in_m1_q;  // uop_end, iter_out and iter_in minus one (14 bits)
  logic [10:0] dfo_q, dfi_q, sfo_q, sfi_q;
  logic [9:0]  wfo_q, wfi_q;
  logic [31:0] dst_out_q, src_out_q, wgt_out_q, dst_off_q, src_off_q, wgt_off_q;
  // the depthwise mode: its state (kernel k, stride, pitch, passes - 1, k * k and k * stride reads) and the slot
  // counters: the group's slots left after this one (cnt_q) and reads (nrd_q), the first group (no passes) or
  // the last (no reads), the next read's row ky_q and column c_q, the next pass pass_q; the passing pixel's
  // dst offset and outer index
  logic        omul_q, mpend_q;  // a GEMM under EPI mul; its multiplier row's slot comes before the next issue
  logic        dw_q, ovl_q, first_q, fin_q;
  // the slot counts' width: a group of k * m reads and a pixel's passes (k = m = DW_MAX_K, not overlapped) is the
  // longest, 33 slots with BLOCK_IN 8 (6 bits), 29 with BLOCK_IN 16 (5 bits)
  localparam int DW_SLOTS = vdla_pkg::DW_MAX_K * vdla_pkg::DW_MAX_K
                          + 2 * ((vdla_pkg::DW_MAX_K * vdla_pkg::DW_MAX_K + vdla_pkg::BLOCK_IN - 1) / vdla_pkg::BLOCK_IN);
  localparam int SW = $clog2(DW_SLOTS + 1);
  logic [SW-1:0] cnt_q, nrd_q, kk_q, ks_q, np_q, lenf_q, lens_q, cap_q;
  logic [31:0] pdst_q;
  logic [13:0] po_q;
  logic [2:0]  k_q, ky_q, c_q;
  logic [1:0]  s_q;
  logic [15:0] pitch_q;
  logic [3:0]  pass_q, pass_last_q;
  // the offsets src_off_o and wgt_off_o give, registered so that no adder sits in front of S1's index sums:
  // the iteration's (src_off_q, wgt_off_q) or, in the depthwise mode, a read slot's src_off_q + ky * pitch +
  // k - n + c (row_first_q: its row's first read) and a pass's wgt_off_q + pass; kms_q is k - stride in the
  // mode (a non-fresh window's first column), else 0, and sfi_kms_q the inner src factor plus kms_q
  logic [31:0] src_cur_q, wgt_cur_q, row_first_q, sfi_kms_q, next_src, next_wgt;
  logic [2:0]  kms_q;

  // The group sizes as tables of the EPI state's kernel and stride (constants selected by compares: a LUT level
  // or two, no arithmetic): k * m reads; with them, the group's slots - 1, overlapped (one micro-op) or not
  function automatic int passes_of(int k);
    passes_of = 2 * ((vdla_pkg::DW_MAX_K * k + vdla_pkg::BLOCK_IN - 1) / vdla_pkg::BLOCK_IN);
  endfunction
  // the passes of a k x k window minus one (two per WGT element of its positions ky * DW_MAX_K + q, ky < k)
  function automatic logic [3:0] last_pass(logic [2:0] k);
    last_pass = 4'(passes_of(int'(k)) - 1);
  endfunction
  function automatic logic [SW-1:0] k_times(logic [2:0] k, logic [2:0] m);
    k_times = '0;
    for (int i = 1; i <= vdla_pkg::DW_MAX_K; i++)
      for (int j = 1; j <= vdla_pkg::DW_MAX_K; j++)
        if (k == 3'(i) && m == 3'(j)) k_times = SW'(i * j);
  endfunction
  function automatic logic [SW-1:0] grp_len(logic [2:0] k, logic [2:0] m, logic ovl);
    grp_len = '0;
    for (int i = 1; i <= vdla_pkg::DW_MAX_K; i++)
      for (int j = 1; j <= vdla_pkg::DW_MAX_K; j++)
        if (k == 3'(i) && m == 3'(j))
          grp_len = ovl ? SW'((i * j > passes_of(i) + 1 ? i * j : passes_of(i) + 1) - 1) : SW'(i * j + passes_of(i));
  endfunction
  // the passes per pixel (plus one: the slot count left at a group's last read when not overlapped), and the
  // first group's slots - 1 when overlapped (its k * k reads alone)
  function automatic logic [SW-1:0] passes(logic [2:0] k, logic plus_one);
    passes = '0;
    for (int i = 1; i <= vdla_pkg::DW_MAX_K; i++)
      if (k == 3'(i)) passes = plus_one ? SW'(passes_of(i) + 1) : SW'(passes_of(i));
  endfunction
  function automatic logic [SW-1:0] first_ovl(logic [2:0] k);
    first_ovl = '0;
    for (int i = 1; i <= vdla_pkg::DW_MAX_K; i++)
      if (k == 3'(i)) first_ovl = SW'(i * i - 1);
  endfunction

  logic issue, u_last, i_last, last_iter, src_rd, step, rd_col_last, rd_row_last, n_fresh;
  logic slot_rd, slot_ps, grp_end, dw_done, run_done;
  logic [SW-1:0] n_rd, n_len;        // the next group's reads and slots - 1
  logic       one_uop;            // the starting instruction has one micro-op
  logic [2:0] n_cols;  // columns this iteration reads: k at inner index 0, else the stride
  logic dw_start;      // the instruction starting runs in the depthwise mode
  logic [2:0] kms_d;   // its k - stride (a non-fresh window's first column), else 0
  assign dw_start = vdla_pkg::DW_SUPPORTED != 0 && dw_i && gemm.hdr.opcode == vdla_pkg::OP_GEMM && !gemm.reset;
  assign kms_d    = dw_start ? dw_k_i - 3'(dw_stride_i) : 3'd0;
  logic [7:0] gap;  // cycles without an issue after this one
  logic omul_start;  // the instruction starting is a GEMM under EPI mul
  assign omul_start = vdla_pkg::OUT_MUL_SUPPORTED != 0 && mul_i && gemm.hdr.opcode == vdla_pkg::OP_GEMM
                   && !gemm.reset;
  logic ready, mset;
  assign ready     = state_q == RUN && wait_q == '0 && phase_q == '0 && !halt_i;
  assign issue     = ready && !mpend_q;
  assign mrow_o    = ready && mpend_q;
  assign src_rd    = two_op_q && !(hold_q && i_q != '0) && !hi_q;
  assign gap       = (src_rd ? 8'(vdla_pkg::ALU_II - 1) : '0)
                   + (((mul_q || hi_q) && !(half_q && !hi_q) && !(pipe_q && !i_last)
                       && !(nogap_q && (!hold_q || n_fresh) && !last_iter))
                      ? 8'(vdla_pkg::ALU_MUL_CYCLES - 1) : '0);
  // the last index of each loop, compared with the bounds minus one (taken when the instruction starts): no
  // adder before the compares
  assign u_last    = 14'(u_q) == u_last_q;
  assign i_last    = i_q == n_in_m1_q;
  assign last_iter = u_last && i_last && o_q == n_out_m1_q;
  // depthwise slots: the iteration's indices move after its last pass (every issue, otherwise)
  assign n_cols      = i_q == '0 ? k_q : 3'(s_q);
  assign rd_col_last = c_q == n_cols - 3'd1;
  assign rd_row_last = ky_q == k_q - 3'd1;
  assign n_fresh     = u_last ? i_last : i_q == '0;  // the next iteration is at inner index 0
  // overlapped, a group's reads and passes end with its last slot (cnt_q == 0); else the reads come first
  assign slot_rd     = ovl_q ? !fin_q && cnt_q < nrd_q : cnt_q > np_q;
  assign slot_ps     = (!ovl_q || !first_q) && cnt_q <= SW'(pass_last_q);
  assign grp_end     = cnt_q == '0;
  assign n_rd        = n_fresh ? kk_q : ks_q;
  assign n_len       = n_fresh ? lenf_q : lens_q;
  assign one_uop     = gemm.uop_end == 14'(gemm.uop_bgn) + 14'd1;
  assign step        = issue && (!dw_q || (grp_end && !(ovl_q && fin_q) && !last_iter)) && !(half_q && !hi_q);
  assign dw_done     = issue && dw_q && grp_end && (ovl_q ? fin_q : last_iter);
  assign run_done    = dw_q ? dw_done : step && last_iter;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= IDLE;
    end else if (halt_i) begin
      state_q <= IDLE;
    end else begin
      case (state_q)
        IDLE: if (start_i) state_q <= RUN;
        RUN: if (run_done) state_q <= DRAIN;
        DRAIN: if (wait_q == '0) state_q <= IDLE;
        default: state_q <= IDLE;
      endcase
    end
  end

  // The wait and phase counters and the loop indices are loaded when the instruction starts and used
  // only while it runs: no reset. A halt freezes them with the state.
  always_ff @(posedge clk_i) begin
    if (!halt_i) begin
      case (state_q)
        IDLE: if (start_i) begin
          wait_q  <= 16'(gemm.hdr.opcode == vdla_pkg::OP_GEMM ? vdla_pkg::GEMM_SETUP - 2
                                                              : vdla_pkg::ALU_SETUP - 2);
          phase_q <= '0;
          u_q     <= gemm.uop_bgn;
          o_q     <= '0;
          i_q     <= '0;
          ky_q    <= '0;
          c_q     <= '0;
          pass_q  <= '0;
          first_q <= 1'b1;
          fin_q   <= 1'b0;
          hi_q    <= 1'b0;
          // the first group: k * k reads (then a free slot and the passes, unless overlapped)
          cnt_q   <= one_uop ? first_ovl(dw_k_i) : grp_len(dw_k_i, dw_k_i, 1'b0);
          nrd_q   <= k_times(dw_k_i, dw_k_i);
        end
        RUN: begin
          if (wait_q != '0) wait_q <= wait_q - 1'b1;
          if (phase_q != '0) phase_q <= phase_q - 1'b1;
          if (issue && dw_q) begin
            if (slot_rd) begin
              if (!rd_col_last) begin
                c_q  <= c_q + 3'd1;
              end else begin
                c_q  <= '0;
                ky_q <= rd_row_last ? '0 : ky_q + 3'd1;
              end
            end
            if (slot_ps) pass_q <= pass_q == pass_last_q ? '0 : pass_q + 4'd1;
            if (!grp_end) begin
              cnt_q <= cnt_q - SW'(1);
            end else begin  // the reading pixel's passes come next, with the next pixel's reads, or alone
              first_q <= 1'b0;
              fin_q   <= last_iter;
              cnt_q   <= last_iter ? np_q : n_len;  // (the last group, overlapped: a free slot, the passes)
              nrd_q   <= n_rd;
            end
          end
          if (issue && half_q) hi_q <= !hi_q;
          if (issue && half_q && !hi_q) phase_q <= gap;  // the first pass: its source read's gap
          if (step) begin
            phase_q <= gap;
            if (!u_last) begin
              u_q <= u_q + 1'b1;
            end else begin
              u_q <= u_bgn_q;
              if (!i_last) begin
                i_q <= i_q + 1'b1;
              end else begin
                i_q <= '0;
                o_q <= o_q + 1'b1;
              end
            end
          end
          // drain: the pipeline needs 5 cycles after the last read (GEMM), 3 and the gap (ALU)
          if (run_done) wait_q <= gemm_q ? 16'(vdla_pkg::GEMM_PIPELINE) + (omul_q ? 16'(vdla_pkg::OUT_MUL_LAG) : '0)
                                         : 16'(vdla_pkg::ALU_PIPELINE) + 16'(gap);
        end
        DRAIN: wait_q <= wait_q - 1'b1;
        default: ;
      endcase
    end
  end

  // The multiplier row's slot is due at the start (in the depthwise mode with one micro-op: after the first
  // group) and when the next issue starts an outer iteration (one micro-op in the depthwise mode: when the group
  // that ends makes the passes of a pixel at inner index 0 next); loaded at the start, used only while it runs.
  assign mset = omul_q && (dw_q && ovl_q ? issue && grp_end && !fin_q && i_q == '0
                                         : step && u_last && i_last && !last_iter);
  always_ff @(posedge clk_i) begin
    if (start_i) begin
      omul_q  <= omul_start;
      mpend_q <= omul_start && !(dw_start && one_uop);
    end else if (mrow_o) begin
      mpend_q <= 1'b0;
    end else if (mset) begin
      mpend_q <= 1'b1;
    end
  end

  // start_i and issue both imply !halt_i
  always_ff @(posedge clk_i) begin
    if (start_i) begin
      gemm_q    <= gemm.hdr.opcode == vdla_pkg::OP_GEMM;
      reset_q   <= gemm.reset;
      init_q    <= gemm.init;
      alu_op_q  <= insn_i.alu.alu_opcode;
      use_imm_q <= gemm.hdr.opcode == vdla_pkg::OP_ALU && insn_i.alu.use_imm;  // (a GEMM's bit is a factor's)
      mul_q     <= gemm.hdr.opcode == vdla_pkg::OP_ALU && vdla_pkg::alu_two_cycle(insn_i.alu.alu_opcode);
      pipe_q    <= gemm.hdr.opcode == vdla_pkg::OP_ALU && insn_i.alu.pipe;  // vdla_insn_check: a MUL's, an SQR's
      half_q    <= vdla_pkg::ALU_PASSES > 1 && gemm.hdr.opcode == vdla_pkg::OP_ALU
                   && !vdla_pkg::alu_full_width(insn_i.alu.alu_opcode);
      // vdla.cycles.mul_gaps: two operands, not a shift, not pipelined
      nogap_q   <= vdla_pkg::ALU_PASSES > 1 && gemm.hdr.opcode == vdla_pkg::OP_ALU && !gemm.reset
                   && !insn_i.alu.use_imm && vdla_pkg::alu_reads_src(insn_i.alu.alu_opcode)
                   && !insn_i.alu.pipe && !vdla_pkg::alu_full_width(insn_i.alu.alu_opcode)
                   && insn_i.alu.alu_opcode != vdla_pkg::ALU_SHR && insn_i.alu.alu_opcode != vdla_pkg::ALU_RSHR
                   && insn_i.alu.alu_opcode != vdla_pkg::ALU_REQ;
      imm_q     <= insn_i.alu.imm;
      two_op_q  <= gemm.hdr.opcode == vdla_pkg::OP_ALU && !gemm.reset && !insn_i.alu.use_imm
                   && vdla_pkg::alu_reads_src(insn_i.alu.alu_opcode);  // (an SQR reads ACC[dst] alone)
      // vdla.cycles.holds_src: one micro-op, the same source row for every inner iteration, not a shift
      hold_q    <= one_uop && gemm.src_factor_in == '0
                   && insn_i.alu.alu_opcode != vdla_pkg::ALU_SHR && insn_i.alu.alu_opcode != vdla_pkg::ALU_RSHR
                   && insn_i.alu.alu_opcode != vdla_pkg::ALU_REQ;
      u_bgn_q   <= gemm.uop_bgn;
      u_last_q   <= gemm.uop_end - 1'b1;
      n_out_m1_q <= gemm.iter_out - 1'b1;
      n_in_m1_q  <= vdla_pkg::loop_iter_in(insn_i) - 1'b1;
      dfo_q     <= gemm.dst_factor_out;
      dfi_q     <= gemm.dst_factor_in;
      sfo_q     <= gemm.src_factor_out;
      sfi_q     <= gemm.src_factor_in;
      wfo_q     <= gemm.wgt_factor_out;
      wfi_q     <= gemm.wgt_factor_in;
      dst_out_q <= '0;
      src_out_q <= '0;
      wgt_out_q <= '0;
      dst_off_q <= '0;
      src_off_q <= '0;
      wgt_off_q <= '0;
      dw_q      <= dw_start;
      k_q       <= dw_k_i;
      s_q       <= dw_stride_i;
      pitch_q   <= dw_pitch_i;
      pass_last_q <= last_pass(dw_k_i);
      kk_q      <= k_times(dw_k_i, dw_k_i);
      ovl_q     <= one_uop;
      ks_q      <= k_times(dw_k_i, 3'(dw_stride_i));
      np_q      <= passes(dw_k_i, 1'b0);
      lenf_q    <= grp_len(dw_k_i, dw_k_i, one_uop);
      lens_q    <= grp_len(dw_k_i, 3'(dw_stride_i), one_uop);
      cap_q     <= one_uop ? '0 : passes(dw_k_i, 1'b1);  // the slot count left at a group's last read
      pdst_q    <= '0;
      po_q      <= '0;
      kms_q     <= kms_d;
      sfi_kms_q <= 32'(gemm.src_factor_in) + 32'(kms_d);
      src_cur_q <= '0;
      wgt_cur_q <= '0;
      row_first_q <= '0;
    end else begin
      if (step && u_last) begin
        if (!i_last) begin
          dst_off_q <= dst_off_q + 32'(dfi_q);
          src_off_q <= src_off_q + 32'(sfi_q);
          wgt_off_q <= wgt_off_q + 32'(wfi_q);
        end else begin
          dst_out_q <= dst_out_q + 32'(dfo_q);
          src_out_q <= src_out_q + 32'(sfo_q);
          wgt_out_q <= wgt_out_q + 32'(wfo_q);
          dst_off_q <= dst_out_q + 32'(dfo_q);
          src_off_q <= src_out_q + 32'(sfo_q);
          wgt_off_q <= wgt_out_q + 32'(wfo_q);
        end
      end
      if (step) begin  // the next iteration's first slot (in the depthwise mode: its first read)
        src_cur_q   <= next_src;
        row_first_q <= next_src;
      end else if (issue && dw_q && slot_rd) begin  // the next read of the window
        if (!rd_col_last) begin
          src_cur_q <= src_cur_q + 32'd1;
        end else if (!rd_row_last) begin
          src_cur_q   <= row_first_q + 32'(pitch_q);
          row_first_q <= row_first_q + 32'(pitch_q);
        end
      end
      if (step && !dw_q) begin
        wgt_cur_q <= next_wgt;
      end else if (issue && dw_q && slot_rd && cnt_q == cap_q) begin  // the group's last read
        wgt_cur_q <= wgt_off_q;
        pdst_q    <= dst_off_q;
        po_q      <= o_q;
      end else if (issue && dw_q && slot_ps) begin
        wgt_cur_q <= wgt_cur_q + 32'd1;
      end
    end
  end

  // the next iteration's offsets: a depthwise window that is not fresh starts k - stride columns in
  always_comb begin
    if (!u_last) begin
      next_src = src_off_q + (n_fresh ? 32'd0 : 32'(kms_q));
      next_wgt = wgt_off_q;
    end else if (!i_last) begin
      next_src = src_off_q + sfi_kms_q;
      next_wgt = wgt_off_q + 32'(wfi_q);
    end else begin
      next_src = src_out_q + 32'(sfo_q);
      next_wgt = wgt_out_q + 32'(wfo_q);
    end
  end

  assign issue_o   = issue;
  assign mo_o      = dw_q && ovl_q ? po_q : o_q;
  assign omul_o    = omul_q;
  assign u_o       = u_q;
  assign o_o       = dw_q ? po_q : o_q;
  assign dst_off_o = dw_q ? pdst_q : dst_off_q;
  assign src_off_o = src_cur_q;
  assign wgt_off_o = wgt_cur_q;
  assign gemm_o    = gemm_q;
  assign reset_o   = reset_q;
  assign init_o    = init_q;
  assign alu_op_o  = alu_op_q;
  assign use_imm_o = use_imm_q;
  assign imm_o     = imm_q;
  assign src_rd_o  = src_rd;
  assign alu_lo_o  = half_q && !hi_q;
  assign dw_o      = dw_q;
  assign dw_rd_o   = dw_q && slot_rd;
  assign dw_ps_o   = dw_q && slot_ps;
  assign dw_cap_o  = dw_q && slot_rd && cnt_q == cap_q;
  assign dw_ky_o   = ky_q;
  assign dw_half_o = pass_q[0];
  assign dw_grp_o  = pass_q[3:1];
  assign done_o    = state_q == DRAIN && wait_q == '0;
endmodule
