// The GEMM and ALU micro-op loops: the sequencer (vdla_loop_seq), then one uop-iteration per cycle
// through the pipeline
//   S0 read the micro-op | S1 form indices, read INP/WGT | S2 multiply | S3 sum, read ACC (R)
//   | S4 add (C) | S5 write ACC (W).
// The ALU enters R at S1. See vdla_acc_rmw for the read-modify-write and its forwarding.
// Micro-op indices are range-checked in S1 (index_err_o), against limits prepared in S0; a failed check
// halts the run from the next cycle, so the check gates nothing but the write of an ALU slot (in C).
// With the EPI state's src_out, a GEMM's input rows (the depthwise window's too) are OUT's, read as INP's (the
// top's read-only copy of the mirror), and their range is checked against ACC.
// In the depthwise mode (vdla_loop_seq) a read slot reads its INP row in S1 and shifts it into its window
// register in S2 (the window is cleared when a GEMM starts), and a group's last read also copies the window so
// shifted into the snapshot; a pass slot (the same slot, or one of its own) reads its WGT element in S1 and goes
// through the GEMM core with the snapshot (vdla_gemm_core's dw_i) and on to ACC like a GEMM iteration. An init GEMM's first update of each row
// (tracked in `touched_q`, cleared when the GEMM starts) reads the bias row ACC[epi_base + o]
// (o: the iter_out index) instead of the row itself, or zero without bias.
// Under EPI mul (the OUT path's multiplier, vdla_loop_seq) the slot that starts each outer iteration of a GEMM
// reads the multiplier row ACC[epi_mul_base + o] in R as a SRC slot (its row range-checked in S1), which loads
// vdla_acc_rmw's b_q; the GEMM slots of that iteration then leave W into the multipliers with it (om_data_o).
module vdla_compute_loop (
  input  logic                                       clk_i,
  input  logic                                       rst_ni,
  input  logic                                       halt_i,
  input  logic                                       start_i,  // a GEMM or ALU instruction starts
  input  vdla_pkg::insn_t                            insn_i,
  // micro-op banks: one read address for all
  output logic                                       uop_re_o,
  output logic [vdla_pkg::UOP_BANK_AW-1:0]           uop_raddr_o,
  input  logic [vdla_pkg::UOP_BANKS-1:0][31:0]       uop_rdata_i,
  // the epilogue's bias rows
  input  logic                                       epi_bias_i,
  input  logic [15:0]                                epi_base_i,
  // the epilogue's depthwise mode (vdla_loop_seq)
  input  logic                                       epi_dw_i,
  input  logic [2:0]                                 epi_dw_k_i,
  input  logic [1:0]                                 epi_dw_stride_i,
  input  logic [15:0]                                epi_dw_pitch_i,
  // the epilogue's src_out: GEMMs read their input rows from OUT (the top's copy of the mirror), not INP
  input  logic                                       epi_src_out_i,
  // the epilogue's OUT-path multiplier: its rows ACC[epi_mul_base + o] and rounding shift
  input  logic                                       epi_mul_i,
  input  logic [15:0]                                epi_mul_base_i,
  input  logic [5:0]                                 epi_mul_shift_i,
  // INP and WGT read ports
  output logic                                       inp_re_o,
  output logic [vdla_pkg::INP_AW-1:0]                inp_raddr_o,
  input  logic [vdla_pkg::INP_BITS-1:0]              inp_rdata_i,  // from INP or OUT's copy: the read's source
  output logic                                       inp_src_out_o,    // the read (inp_re_o) is of OUT's copy,
  output logic [vdla_pkg::ACC_AW-1:0]                inp_out_raddr_o,  // at this row
  output logic                                       wgt_re_o,
  output logic [vdla_pkg::WGT_AW-1:0]                wgt_raddr_o,
  input  logic [vdla_pkg::WGT_BITS-1:0]              wgt_rdata_i,
  // ACC read port and the loop's ACC writes
  output logic                                       acc_re_o,
  output logic [vdla_pkg::ACC_AW-1:0]                acc_raddr_o,
  input  logic [vdla_pkg::ACC_BITS-1:0]              acc_rdata_i,
  output logic                                       wr_valid_o,
  output logic [vdla_pkg::ACC_AW-1:0]                wr_addr_o,
  output logic [vdla_pkg::ACC_BITS-1:0]              wr_data_o,
  output logic                                       omul_o,     // the running GEMM's writes are multiplied
  output logic [vdla_pkg::ACC_BITS-1:0]              om_data_o,  // the ACC write's two cycles before, multiplied
  output logic                                       done_o,
  output logic                                       index_err_o,
  output logic                                       hazard_err_o  // a pipelined MUL's hazard (vdla_acc_rmw)
);
  localparam int LU        = $clog2(vdla_pkg::UOP_BANKS);
  localparam int ACC_AW    = vdla_pkg::ACC_AW;
  localparam int ACC_DEPTH = vdla_pkg::ACC_DEPTH;
  localparam int DST_BITS  = vdla_pkg::UOP_DST_BITS;
  localparam int SRC_BITS  = vdla_pkg::UOP_SRC_BITS;
  localparam int WGT_BITS  = vdla_pkg::UOP_WGT_BITS;
  localparam int SW        = vdla_pkg::INP_AW > ACC_AW ? vdla_pkg::INP_AW : ACC_AW;  // src: an INP or ACC row
  localparam int FW        = DST_BITS > SRC_BITS ? (DST_BITS > WGT_BITS ? DST_BITS : WGT_BITS)
                                                 : (SRC_BITS > WGT_BITS ? SRC_BITS : WGT_BITS);  // the widest field
  localparam int FW1       = FW + 1;

  // ---- S0: the sequencer --------------------------------------------------------------------
  logic              issue, gemm_q, reset_q, init_q, use_imm_q, src_rd, alu_lo;
  logic [12:0]       u;
  logic [13:0]       o;
  logic [31:0]       dst_off, src_off, wgt_off;
  vdla_pkg::alu_op_e alu_op_q;
  logic [15:0]       imm_q;
  logic              dw_q, dw_rd, dw_ps, dw_cap, dw_half;
  logic [2:0]        dw_ky, dw_grp;
  logic              mrow, omul;
  logic [13:0]       mo;

  vdla_loop_seq u_seq (
    .clk_i, .rst_ni, .halt_i, .start_i, .insn_i,
    .dw_i (epi_dw_i), .dw_k_i (epi_dw_k_i), .dw_stride_i (epi_dw_stride_i), .dw_pitch_i (epi_dw_pitch_i),
    .mul_i (epi_mul_i), .mrow_o (mrow), .mo_o (mo), .omul_o (omul),
    .dw_o (dw_q), .dw_rd_o (dw_rd), .dw_ps_o (dw_ps), .dw_cap_o (dw_cap), .dw_ky_o (dw_ky), .dw_half_o (dw_half),
    .dw_grp_o (dw_grp),
    .issue_o (issue), .u_o (u), .o_o (o), .dst_off_o (dst_off), .src_off_o (src_off), .wgt_off_o (wgt_off),
    .gemm_o (gemm_q), .reset_o (reset_q), .init_o (init_q), .alu_op_o (alu_op_q), .use_imm_o (use_imm_q),
    .imm_o (imm_q), .src_rd_o (src_rd), .alu_lo_o (alu_lo), .done_o
  );

  assign uop_re_o    = issue;
  assign uop_raddr_o = u[LU +: vdla_pkg::UOP_BANK_AW];

  // ---- S1: form the indices -----------------------------------------------------------------
  logic              s1_valid_q, s1_src_rd_q, s1_lo_q;  // s1_lo_q: a half-width ALU's first pass
  logic [LU-1:0]     s1_bank_q;
  logic [ACC_AW-1:0] s1_dst_off_q, dst;  // the indices' low bits (their range is checked in full)
  logic [SW-1:0]     s1_src_off_q, src;
  logic [vdla_pkg::WGT_AW-1:0] s1_wgt_off_q, wgt;
  logic [ACC_AW-1:0] s1_bias_q;  // the iteration's bias row, epi_base + o
  logic [31:0]       uop_word;
  logic              s1_gemm, index_err;

  // The range checks, prepared in S0 from the offsets and the instruction: index = field + off lies beyond a
  // buffer of `depth` rows when field >= room = depth - off, so each check is one compare of the micro-op's field
  // with a register, lim = room clamped to [0, 2^width] (0: every field out, 2^width: none), or 2^width for a
  // field the instruction does not read. (The offsets stay far below 2^32, so field + off never wraps.)
  function automatic logic [FW:0] range_of(logic [31:0] off, logic [33:0] depth, int width, logic read);
    logic [33:0] room;
    room = depth - 34'(off);
    if (!read || (!room[33] && (room[32:0] >> width) != '0)) range_of = FW1'(1) << width;
    else if (room[33]) range_of = '0;
    else range_of = FW1'(room);
  endfunction

  function automatic logic out_of(logic [FW:0] lim, logic [FW-1:0] field);
    out_of = {1'b0, field} >= lim;
  endfunction

  logic [FW:0] s1_dst_rng_q, s1_src_rng_q, s1_wgt_rng_q;
  logic        s1_bias_bad_q;  // an init GEMM with bias whose iteration's bias row lies beyond ACC
  logic        gemm_rd;        // a GEMM that reads INP and WGT (not a reset)
  assign gemm_rd = gemm_q && !reset_q;

  // the multiplier row's slot (EPI mul): no micro-op; its row, epi_mul_base + o, and the row's range check
  logic              s1_mrow_q, s2_mrow_q, s3_mrow_q, s1_mrow_bad_q;
  logic [ACC_AW-1:0] s1_maddr_q, s2_maddr_q;
  logic [16:0]       mrow_row;  // epi_mul_base + o, one bit wider than any ACC index
  assign mrow_row = 17'(epi_mul_base_i) + 17'(mo);
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      s1_valid_q <= 1'b0;
      s1_mrow_q  <= 1'b0;
      s2_mrow_q  <= 1'b0;
      s3_mrow_q  <= 1'b0;
    end else begin
      s1_valid_q <= issue;
      s1_mrow_q  <= mrow;
      s2_mrow_q  <= s1_mrow_q && !halt_i;
      s3_mrow_q  <= s2_mrow_q;
    end
  end
  always_ff @(posedge clk_i) begin
    s1_maddr_q    <= ACC_AW'(mrow_row);
    s1_mrow_bad_q <= mrow_row >= 17'(ACC_DEPTH);
    s2_maddr_q    <= s1_maddr_q;
  end

  // the slot reads INP (not a depthwise pass-only slot), makes a GEMM update (not a depthwise read-only slot);
  // a depthwise read slot, its group's last; a pass's half and WGT element, a read's register
  logic       s1_srd_q, s1_mac_q, s1_rd_q, s1_cap_q, s1_half_q;
  logic [2:0] s1_ky_q, s1_grp_q;
  always_ff @(posedge clk_i) begin
    s1_srd_q     <= !dw_q || dw_rd;
    s1_mac_q     <= !dw_q || dw_ps;
    s1_rd_q      <= dw_rd;
    s1_cap_q     <= dw_cap;
    s1_ky_q      <= dw_ky;
    s1_half_q    <= dw_half;
    s1_grp_q     <= dw_grp;
    s1_bank_q    <= u[LU-1:0];
    s1_src_rd_q  <= src_rd;
    s1_lo_q      <= alu_lo;
    s1_dst_off_q <= ACC_AW'(dst_off);
    s1_src_off_q <= SW'(src_off);
    s1_wgt_off_q <= vdla_pkg::WGT_AW'(wgt_off);
    s1_bias_q    <= ACC_AW'(17'(epi_base_i) + 17'(o));
    s1_dst_rng_q  <= range_of(dst_off, 34'(ACC_DEPTH), DST_BITS, 1'b1);
    s1_src_rng_q  <= range_of(src_off, (gemm_q && !epi_src_out_i) ? 34'(vdla_pkg::INP_DEPTH) : 34'(ACC_DEPTH),
                              SRC_BITS, gemm_rd || (!gemm_q && !use_imm_q && vdla_pkg::alu_reads_src(alu_op_q)));
    s1_wgt_rng_q  <= range_of(wgt_off, 34'(vdla_pkg::WGT_DEPTH), WGT_BITS, gemm_rd);
    s1_bias_bad_q <= gemm_rd && init_q && epi_bias_i && 17'(epi_base_i) + 17'(o) >= 17'(ACC_DEPTH);
  end

  assign uop_word = uop_rdata_i[s1_bank_q];
  assign dst      = ACC_AW'(uop_word[DST_BITS-1:0]) + s1_dst_off_q;
  assign src      = SW'(uop_word[DST_BITS +: SRC_BITS]) + s1_src_off_q;
  assign wgt      = vdla_pkg::WGT_AW'(uop_word[DST_BITS + SRC_BITS +: WGT_BITS]) + s1_wgt_off_q;
  assign s1_gemm  = s1_valid_q && gemm_q;

  // Configurations with fewer micro-ops or narrower micro-op fields leave the top bits unread.
  localparam int UOP_USED = DST_BITS + SRC_BITS + WGT_BITS;
  if (UOP_USED < 32) begin : g_unused_uop_word
    logic unused_uop_word;
    assign unused_uop_word = ^uop_word[31:UOP_USED];
  end
  if (vdla_pkg::UOP_AW < 13) begin : g_unused_u
    logic unused_u;  // micro-op indices beyond UOP_DEPTH are refused at dispatch
    assign unused_u = ^u[12:vdla_pkg::UOP_AW];
  end

  // dst beyond ACC; a GEMM's src beyond INP (ACC with the EPI state's src_out), wgt beyond WGT, its bias row
  // beyond ACC; an ALU's src beyond ACC (src_out here: out of range)
  logic dst_out, src_out, wgt_out;
  assign dst_out   = out_of(s1_dst_rng_q, FW'(uop_word[DST_BITS-1:0]));
  assign src_out   = out_of(s1_src_rng_q, FW'(uop_word[DST_BITS +: SRC_BITS]));
  assign wgt_out   = out_of(s1_wgt_rng_q, FW'(uop_word[DST_BITS + SRC_BITS +: WGT_BITS]));
  assign index_err = (s1_valid_q && !halt_i
                   && (((dst_out || wgt_out || s1_bias_bad_q) && s1_mac_q) || (src_out && s1_srd_q)))
                  || (s1_mrow_q && s1_mrow_bad_q && !halt_i);
  assign index_err_o = index_err;

  // The input row: INP's, or with the EPI state's src_out OUT's, through the top's read-only copy of the mirror
  // (the same read, the same cycles; the top selects the data with the read's source, registered with the read).
  // The EPI state holds while a GEMM runs: an EPI starts only when the GEMM has drained.
  assign inp_re_o        = s1_gemm && !reset_q && s1_srd_q;
  assign inp_raddr_o     = src[vdla_pkg::INP_AW-1:0];
  assign inp_src_out_o   = epi_src_out_i;
  assign inp_out_raddr_o = src[ACC_AW-1:0];
  assign wgt_re_o    = s1_gemm && !reset_q && s1_mac_q;
  assign wgt_raddr_o = wgt;

  // ---- S2, S3: GEMM core --------------------------------------------------------------------
  logic                          s2_valid_q, s3_valid_q;
  logic [ACC_AW-1:0]             s2_dst_q, s3_dst_q, s2_bias_q, s3_bias_q;
  logic [vdla_pkg::ACC_BITS-1:0] sums;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      s2_valid_q <= 1'b0;
      s3_valid_q <= 1'b0;
    end else begin
      s2_valid_q <= s1_gemm && s1_mac_q;  // a slot that fails its check meets the halt in R
      s3_valid_q <= s2_valid_q;
    end
  end

  // the depthwise window: DW_MAX_K registers (kernel rows) of DW_MAX_K INP rows, position DW_MAX_K - 1 the
  // newest; cleared when a GEMM starts, a read slot's row shifted in from S2 (win_d: the window after this
  // cycle's shift), copied to the snapshot (snap_q) after a group's last read. A pass's operands are selected in
  // S1 from the snapshot (its pixel's window: the sequencer starts the passes a cycle after the copy, and ends
  // them before the next) and registered (dwa_q): pair (o, i) of the GEMM core takes window position
  // g * BLOCK_IN + i, channel o + HALF * h, for the pass's group g and half h (zero past DW_MAX_K^2 positions).
  localparam int DWK  = vdla_pkg::DW_MAX_K;
  localparam int BI   = vdla_pkg::BLOCK_IN;
  localparam int HALF = vdla_pkg::BLOCK_OUT / 2;
  localparam int DWG  = (DWK * DWK + BI - 1) / BI;  // window position groups
  logic [DWK-1:0][DWK-1:0][vdla_pkg::INP_BITS-1:0] win_q, win_d, snap_q;
  logic [DWG*BI-1:0][vdla_pkg::INP_BITS-1:0]       win_p;  // snap_q by position ky * DW_MAX_K + q, zero past
  logic [HALF-1:0][BI-1:0][7:0]                    dwa_q;  // the pass's operand of each pair (o, i)
  logic                                           s2_rd_q, s2_cap_q;
  logic [2:0]                                     s2_ky_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      s2_rd_q  <= 1'b0;
      s2_cap_q <= 1'b0;
    end else begin
      s2_rd_q  <= s1_gemm && s1_rd_q;
      s2_cap_q <= s1_gemm && s1_cap_q;
    end
  end
  always_comb begin
    win_d = win_q;
    if (s2_rd_q) begin
      for (int k = 0; k < DWK; k++)
        if (3'(k) == s2_ky_q) win_d[k] = {inp_rdata_i, win_q[k][DWK-1:1]};
    end
  end
  assign win_p = (DWG * BI * vdla_pkg::INP_BITS)'(snap_q);
  always_ff @(posedge clk_i) begin
    s2_ky_q <= s1_ky_q;
    if (start_i) win_q <= '0;
    else win_q <= win_d;
    if (start_i) snap_q <= '0;
    else if (s2_cap_q) snap_q <= win_d;
    if (vdla_pkg::DW_SUPPORTED != 0 && dw_q) begin
      for (int l = 0; l < HALF; l++)
        for (int i = 0; i < BI; i++) begin
          dwa_q[l][i] <= '0;
          for (int g = 0; g < DWG; g++)
            if (s1_grp_q == 3'(g))
              dwa_q[l][i] <= s1_half_q ? win_p[g*BI + i][(l + HALF)*8 +: 8] : win_p[g*BI + i][l*8 +: 8];
        end
    end
  end

  always_ff @(posedge clk_i) begin
    s2_dst_q  <= dst;
    s3_dst_q  <= s2_mrow_q ? s2_maddr_q : s2_dst_q;  // the multiplier row's slot reads its row
    s2_bias_q <= s1_bias_q;
    s3_bias_q <= s2_bias_q;
  end

  vdla_gemm_core u_core (
    .clk_i, .valid_i (s2_valid_q && !reset_q), .inp_i (inp_rdata_i), .wgt_i (wgt_rdata_i),
    .dw_i (dw_q), .dwa_i (dwa_q), .sum_o (sums)
  );

  // ---- accumulator read-modify-write --------------------------------------------------------
  // GEMM slots come from S3. An ALU iteration is one slot from S1 (reading its destination, or its
  // source when a reset makes the destination read as zero; or its destination with the source row
  // held, vdla.cycles.holds_src) or two: SRC from S1, then the destination in the next cycle. An init GEMM's first update of a row reads the bias row or zero.
  logic              alu_pend_q;   // the ALU slot following a SRC slot
  logic [ACC_AW-1:0] alu_dst_q;
  logic              alu_lo_q;     // ... a half-width ALU's first pass
  logic              r_valid, r_zero, r_lo, fresh;  // fresh: an init GEMM's first update of the row
  vdla_pkg::slot_e   r_kind;
  logic [ACC_AW-1:0] r_addr, r_waddr;
  logic              r_hit_c, r_hit_m, r_hit_w;  // r_addr equals the write address of the slot in C, M, W
  logic              hazard;
  logic              s1_alu;
  // rows the running GEMM has updated, in words of TW rows: row r is bit r % TW of word r / TW
  localparam int TW = ACC_DEPTH < 32 ? ACC_DEPTH : 32;
  localparam int TB = $clog2(TW);
  logic [ACC_DEPTH/TW-1:0][TW-1:0] touched_q;

  // An ALU slot enters R before its check: if the check fails (the run halts from the next cycle), the slot
  // is dropped in C (kill_q).
  logic kill_q;
  assign s1_alu = s1_valid_q && !gemm_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) kill_q <= 1'b0;
    else kill_q <= (index_err && !gemm_q) || hazard;
  end
  // looked up in S2 (a 2048-to-1 mux off R's address path), with the update of the slot in S3 in that cycle
  logic s3_fresh_q;
  always_ff @(posedge clk_i) begin
    s3_fresh_q <= init_q && !touched_q[ACC_AW'(s2_dst_q >> TB)][s2_dst_q[TB-1:0]]
               && !(s3_valid_q && s3_dst_q == s2_dst_q) && !s2_mrow_q;
  end
  assign fresh  = s3_fresh_q;

  // The forwarding compares of the slot in R (vdla_acc_rmw's r_hit_c_i, r_hit_m_i, r_hit_w_i): r_addr against
  // the write addresses of the slots in C, M and W. An address formed in S1 is field + offset (mod 2^ACC_AW),
  // so it is compared as field == waddr - offset, with the differences prepared a cycle ahead from the slots
  // that move there (the offsets in S1 are the sequencer's of the cycle before): the compare starts at the
  // micro-op word, after no adder. A slot enters M from C (a MUL), W from M if a MUL is there, else from C.
  logic [ACC_AW-1:0] c_waddr, m_waddr, w_waddr;  // the write addresses of the slots in C, M and W (u_rmw's)
  logic              m_valid;                    // a MUL in M (it enters W next)
  logic [ACC_AW-1:0] c_dst_q, c_src_q;  // c_waddr - s1_dst_off_q, c_waddr - s1_src_off_q
  logic [ACC_AW-1:0] m_dst_q, m_src_q;  // m_waddr - s1_dst_off_q, m_waddr - s1_src_off_q
  logic [ACC_AW-1:0] w_dst_q, w_src_q;  // w_waddr - s1_dst_off_q, w_waddr - s1_src_off_q
  logic [ACC_AW-1:0] dst_field, src_field, to_w;
  assign w_waddr = wr_addr_o;
  assign to_w    = m_valid ? m_waddr : c_waddr;
  always_ff @(posedge clk_i) begin
    c_dst_q <= r_waddr - ACC_AW'(dst_off);
    c_src_q <= r_waddr - ACC_AW'(src_off);
    m_dst_q <= c_waddr - ACC_AW'(dst_off);
    m_src_q <= c_waddr - ACC_AW'(src_off);
    w_dst_q <= to_w - ACC_AW'(dst_off);
    w_src_q <= to_w - ACC_AW'(src_off);
  end
  assign dst_field = ACC_AW'(uop_word[DST_BITS-1:0]);
  assign src_field = ACC_AW'(uop_word[DST_BITS +: SRC_BITS]);

  // r_addr: the S3 slot's row or bias row, the pending ALU slot's row, else S1's src or dst (the same choice
  // for the compares)
  always_comb begin
    r_valid = 1'b0;
    r_zero  = 1'b0;
    r_kind  = gemm_q ? (reset_q ? vdla_pkg::SLOT_ZERO : vdla_pkg::SLOT_GEMM) : vdla_pkg::SLOT_ALU;
    r_addr  = (reset_q && !use_imm_q) ? src[ACC_AW-1:0] : dst;
    r_hit_c = (reset_q && !use_imm_q) ? src_field == c_src_q : dst_field == c_dst_q;
    r_hit_m = (reset_q && !use_imm_q) ? src_field == m_src_q : dst_field == m_dst_q;
    r_hit_w = (reset_q && !use_imm_q) ? src_field == w_src_q : dst_field == w_dst_q;
    r_waddr = dst;
    r_lo    = 1'b0;
    if (s3_valid_q || s3_mrow_q) begin  // a GEMM slot, or the multiplier row's (SRC: it loads b_q)
      r_valid = 1'b1;
      if (s3_mrow_q) r_kind = vdla_pkg::SLOT_SRC;
      r_addr  = (fresh && epi_bias_i) ? s3_bias_q : s3_dst_q;
      r_hit_c = (fresh && epi_bias_i) ? s3_bias_q == c_waddr : s3_dst_q == c_waddr;
      r_hit_m = (fresh && epi_bias_i) ? s3_bias_q == m_waddr : s3_dst_q == m_waddr;
      r_hit_w = (fresh && epi_bias_i) ? s3_bias_q == w_waddr : s3_dst_q == w_waddr;
      r_zero  = fresh && !epi_bias_i;
      r_waddr = s3_dst_q;
    end else if (alu_pend_q) begin
      r_valid = 1'b1;
      r_addr  = alu_dst_q;
      r_hit_c = alu_dst_q == c_waddr;
      r_hit_m = alu_dst_q == m_waddr;
      r_hit_w = alu_dst_q == w_waddr;
      r_waddr = alu_dst_q;
      r_lo    = alu_lo_q;
    end else if (s1_valid_q && !gemm_q) begin
      // neither the address nor the valid waits for the range check (index_err): a slot it fails is dropped
      // in C (kill_q) and the run halts
      r_valid = s1_alu;
      r_lo    = s1_lo_q;
      if (s1_src_rd_q) begin
        r_kind  = vdla_pkg::SLOT_SRC;
        r_addr  = src[ACC_AW-1:0];
        r_hit_c = src_field == c_src_q;
        r_hit_m = src_field == m_src_q;
        r_hit_w = src_field == w_src_q;
      end
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) alu_pend_q <= 1'b0;
    else alu_pend_q <= s1_alu && s1_src_rd_q && !halt_i;
  end

  always_ff @(posedge clk_i) begin
    alu_dst_q <= dst;
    alu_lo_q  <= s1_lo_q;
    // only init GEMMs touch the vector (a 2048-bit update every cycle slows the Verilated model); the row's
    // word enable is one compare of its high bits with a constant, its bit a decode of the low bits (a
    // variable bit index would be mapped as a shifter, several levels deep)
    if (start_i && insn_i.gemm.hdr.opcode == vdla_pkg::OP_GEMM && insn_i.gemm.init) touched_q <= '0;
    else if (s3_valid_q && init_q) begin
      for (int w = 0; w < ACC_DEPTH / TW; w++)
        if (ACC_AW'(s3_dst_q >> TB) == ACC_AW'(w)) touched_q[w] <= touched_q[w] | (TW'(1) << s3_dst_q[TB-1:0]);
    end
  end

  logic unused_rmw_busy;
  vdla_acc_rmw u_rmw (
    .clk_i, .rst_ni,
    .r_valid_i   (r_valid && !halt_i),
    .c_kill_i    (kill_q),
    .r_kind_i    (r_kind),
    .r_zero_i    (r_zero),
    .r_addr_i    (r_addr),
    .r_waddr_i   (r_waddr),
    .r_hit_c_i   (r_hit_c),
    .r_hit_m_i   (r_hit_m),
    .r_hit_w_i   (r_hit_w),
    .r_lo_i      (r_lo),
    .alu_op_i    (alu_op_q),
    .use_imm_i   (use_imm_q),
    .a_zero_i    (!gemm_q && reset_q),
    .imm_i       (imm_q),
    .sum_i       (sums),
    .omul_i      (omul),
    .omul_shift_i (epi_mul_shift_i),
    .acc_re_o,
    .acc_raddr_o,
    .acc_rdata_i,
    .wr_valid_o,
    .wr_addr_o,
    .c_waddr_o   (c_waddr),
    .m_waddr_o   (m_waddr),
    .m_valid_o   (m_valid),
    .wr_data_o,
    .om_data_o,
    .hazard_o    (hazard),
    .busy_o      (unused_rmw_busy)
  );

  // A failed range check stops the run from the next cycle (the top's first-error latch): the slots that follow
  // it meet the halt in R, and an ALU slot already in R is dropped in C (kill_q), so nothing past it writes.
  // A pipelined MUL's hazard stops the run like a failed range check: its slot is dropped in C (kill_q).
  assign hazard_err_o = hazard && !halt_i;
  assign omul_o       = omul;
  `ASSERT(a_hazard_halts, hazard_err_o |=> halt_i, "compute loop: a hazard without a halt")
  `ASSERT(a_index_err_halts, index_err |=> halt_i, "compute loop: an index error without a halt")
endmodule
