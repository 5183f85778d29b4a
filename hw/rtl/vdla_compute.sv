`include "vdla_isa.svh"
`include "vdla_regs.svh"

// The compute stage: LOADs of micro-ops and accumulators, GEMM and ALU micro-op loops, EPI, FINISH.
// Pops load->compute (pop_prev) and store->compute (pop_next) tokens; pushes compute->load
// (push_prev) and compute->store (push_next) tokens.
//
// EPI sets the epilogue state (cleared by reset and START): with `req`, every ACC write writes its OUT
// mirror requantized instead of truncated; `bias`/`bias_base` give the init rows of GEMMs with `init`.
// An init GEMM's first update of each row (tracked in `touched_q`, cleared at dispatch) reads the bias
// row ACC[bias_base + o] (o: the iter_out index) instead of the row itself, or zero without bias.
//
// Loop pipeline (one uop-iteration per cycle; two-operand ALU every ALU_II cycles):
//   S0 read the micro-op | S1 form indices, read INP/WGT | S2 multiply | S3 sum, read ACC (R)
//   | S4 add (C) | S5 write ACC (W). The ALU enters R at S1. See vdla_acc_rmw for forwarding.
module vdla_compute #(
  parameter int ADDR_W      = 64,
  parameter int BUS_W       = 64,
  parameter int MAX_BEATS   = 256,
  parameter int BATCH       = 1,
  parameter int BLOCK_IN    = 16,
  parameter int BLOCK_OUT   = 16,
  parameter int INP_DEPTH   = 2048,
  parameter int WGT_DEPTH   = 1024,
  parameter int ACC_DEPTH   = 2048,
  parameter int UOP_DEPTH   = 8192,
  parameter int DST_BITS    = 11,
  parameter int SRC_BITS    = 11,
  parameter int WGT_BITS    = 10,
  parameter int DMA_SETUP   = 1,
  parameter int PAD_CYCLES  = 1,
  parameter int NOP_EXTRA   = 0,
  parameter int GEMM_SETUP  = 2,   // >= 2
  parameter int GEMM_PIPE   = 4,   // >= 4
  parameter int ALU_SETUP   = 2,   // >= 2
  parameter int ALU_PIPE    = 2,   // >= 2
  parameter int ALU_II      = 2    // >= 2, two-operand ALU
) (
  input  logic                          clk_i,
  input  logic                          rst_ni,
  input  logic                          halt_i,
  input  logic                          start_i,
  // command queue
  input  logic                          cmd_valid_i,
  input  logic [`VDLA_INSN_BITS-1:0]    cmd_i,
  output logic                          cmd_pop_o,
  // dependency tokens
  input  logic                          l2c_avail_i,
  output logic                          l2c_pop_o,
  input  logic                          s2c_avail_i,
  output logic                          s2c_pop_o,
  input  logic                          c2l_room_i,
  output logic                          c2l_push_o,
  input  logic                          c2s_room_i,
  output logic                          c2s_push_o,
  // AXI read
  output logic                          arvalid_o,
  output logic [ADDR_W-1:0]             araddr_o,
  output logic [7:0]                    arlen_o,
  input  logic                          arready_i,
  input  logic                          rvalid_i,
  input  logic [1:0]                    rresp_i,
  input  logic [BUS_W-1:0]              rdata_i,
  // INP and WGT read ports
  output logic                          inp_re_o,
  output logic [$clog2(INP_DEPTH)-1:0]  inp_raddr_o,
  input  logic [BATCH*BLOCK_IN*8-1:0]   inp_rdata_i,
  output logic                          wgt_re_o,
  output logic [$clog2(WGT_DEPTH)-1:0]  wgt_raddr_o,
  input  logic [BLOCK_OUT*BLOCK_IN*8-1:0] wgt_rdata_i,
  // ACC buffer and its 8-bit OUT mirror
  output logic                          acc_re_o,
  output logic [$clog2(ACC_DEPTH)-1:0]  acc_raddr_o,
  input  logic [BATCH*BLOCK_OUT*32-1:0] acc_rdata_i,
  output logic [BATCH*BLOCK_OUT-1:0]    acc_we_o,
  output logic [$clog2(ACC_DEPTH)-1:0]  acc_waddr_o,
  output logic [BATCH*BLOCK_OUT*32-1:0] acc_wdata_o,
  output logic [BATCH*BLOCK_OUT*8-1:0]  out_wdata_o,
  // status
  output logic                          fire_o,
  output logic                          busy_o,
  output logic                          stall_o,
  output logic                          done_o,
  output logic                          finish_o,
  output logic                          err_o,
  output logic [3:0]                    err_code_o
);
  localparam int LANES  = BATCH * BLOCK_OUT;
  localparam int ACC_W  = LANES * 32;
  localparam int OUT_W  = LANES * 8;
  localparam int LB     = $clog2(BUS_W / 8);
  localparam int U      = BUS_W / 32;                 // micro-ops per bus beat = UOP banks
  localparam int LU     = $clog2(U);
  localparam int UAW    = $clog2(UOP_DEPTH / U);
  localparam int ACC_AW = $clog2(ACC_DEPTH);
  localparam logic [1:0] K_SRC = 2'd0, K_ALU = 2'd1, K_GEMM = 2'd2, K_ZERO = 2'd3;
`include "vdla_req.svh"

  // ---- decode -------------------------------------------------------------------------------
  logic [2:0]  opcode, mem_type;
  logic [15:0] sram_base, y_size, x_size;
  logic [3:0]  yp0, yp1, xp0, xp1;
  logic        is_load, is_loop, is_finish, is_epi, is_nop, is_uop, is_acc8, bad;
  logic [33:0] tile_end;
  logic [12:0] uop_bgn;
  logic [13:0] uop_end, iter_out, iter_in;
  logic        bias;
  logic [15:0] bias_base;

  assign opcode    = cmd_i[`VDLA_F_OPCODE_LSB +: `VDLA_F_OPCODE_W];
  assign mem_type  = cmd_i[`VDLA_F_MEM_TYPE_LSB +: `VDLA_F_MEM_TYPE_W];
  assign sram_base = cmd_i[`VDLA_F_SRAM_BASE_LSB +: `VDLA_F_SRAM_BASE_W];
  assign y_size    = cmd_i[`VDLA_F_Y_SIZE_LSB +: `VDLA_F_Y_SIZE_W];
  assign x_size    = cmd_i[`VDLA_F_X_SIZE_LSB +: `VDLA_F_X_SIZE_W];
  assign yp0       = cmd_i[`VDLA_F_Y_PAD_0_LSB +: `VDLA_F_Y_PAD_0_W];
  assign yp1       = cmd_i[`VDLA_F_Y_PAD_1_LSB +: `VDLA_F_Y_PAD_1_W];
  assign xp0       = cmd_i[`VDLA_F_X_PAD_0_LSB +: `VDLA_F_X_PAD_0_W];
  assign xp1       = cmd_i[`VDLA_F_X_PAD_1_LSB +: `VDLA_F_X_PAD_1_W];
  assign uop_bgn   = cmd_i[`VDLA_F_UOP_BGN_LSB +: `VDLA_F_UOP_BGN_W];
  assign uop_end   = cmd_i[`VDLA_F_UOP_END_LSB +: `VDLA_F_UOP_END_W];
  assign iter_out  = cmd_i[`VDLA_F_ITER_OUT_LSB +: `VDLA_F_ITER_OUT_W];
  assign iter_in   = cmd_i[`VDLA_F_ITER_IN_LSB +: `VDLA_F_ITER_IN_W];
  assign bias      = cmd_i[`VDLA_F_BIAS_LSB];
  assign bias_base = cmd_i[`VDLA_F_BIAS_BASE_LSB +: `VDLA_F_BIAS_BASE_W];

  assign is_load   = opcode == `VDLA_OP_LOAD;
  assign is_loop   = opcode == `VDLA_OP_GEMM || opcode == `VDLA_OP_ALU;
  assign is_finish = opcode == `VDLA_OP_FINISH;
  assign is_epi    = opcode == `VDLA_OP_EPI;
  assign is_nop    = is_finish || is_epi || (is_load && x_size == '0);
  assign is_uop    = mem_type == `VDLA_MEM_UOP;
  assign is_acc8   = mem_type == `VDLA_MEM_ACC_8BIT;
  assign tile_end  = 34'(sram_base) + (34'(yp0) + 34'(y_size) + 34'(yp1)) * (34'(xp0) + 34'(x_size) + 34'(xp1));
  always_comb begin
    bad = 1'b0;
    if (is_load) begin
      bad = !(is_uop || is_acc8 || mem_type == `VDLA_MEM_ACC);
      if (x_size != '0) begin
        bad = bad || y_size == '0 || (is_uop && cmd_i[`VDLA_F_Y_PAD_0_LSB +: 16] != '0)
                  || tile_end > (is_uop ? 34'(UOP_DEPTH) : 34'(ACC_DEPTH));
      end
    end else if (is_loop) begin
      bad = 14'(uop_bgn) >= uop_end || uop_end > 14'(UOP_DEPTH) || iter_out == '0 || iter_in == '0;
    end else if (is_epi) begin
      bad = bias && 17'(bias_base) >= 17'(ACC_DEPTH);
    end else begin
      bad = !is_finish;
    end
  end

  // ---- dispatch -----------------------------------------------------------------------------
  logic pop_prev, pop_next, push_prev, push_next;
  assign pop_prev  = cmd_i[`VDLA_F_POP_PREV_LSB];
  assign pop_next  = cmd_i[`VDLA_F_POP_NEXT_LSB];
  assign push_prev = cmd_i[`VDLA_F_PUSH_PREV_LSB];
  assign push_next = cmd_i[`VDLA_F_PUSH_NEXT_LSB];

  typedef enum logic [2:0] {IDLE, LOAD, LOOP, DRAIN, NOP} state_e;
  state_e      state_q;
  logic [15:0] wait_q;
  logic        push_prev_q, push_next_q;
  logic        tokens_ok, idle, eng_done, eng_err, index_err;

  assign idle      = state_q == IDLE && !halt_i;
  assign tokens_ok = (!pop_prev || l2c_avail_i) && (!pop_next || s2c_avail_i)
                  && (!push_prev || c2l_room_i) && (!push_next || c2s_room_i);
  assign fire_o    = idle && cmd_valid_i && !bad && tokens_ok;
  assign stall_o   = idle && cmd_valid_i && !bad && !tokens_ok;
  assign busy_o    = fire_o || state_q != IDLE;
  assign cmd_pop_o = fire_o;
  assign l2c_pop_o = fire_o && pop_prev;
  assign s2c_pop_o = fire_o && pop_next;
  assign err_o     = (idle && cmd_valid_i && bad) || eng_err || index_err;
  assign err_code_o = eng_err ? `VDLA_ERR_BUS : index_err ? `VDLA_ERR_INDEX : `VDLA_ERR_INSN;
  assign finish_o  = fire_o && is_finish;

  assign done_o = (state_q == LOAD && eng_done) || (state_q == DRAIN && wait_q == '0)
               || (state_q == NOP && wait_q == '0) || (fire_o && is_nop && NOP_EXTRA == 0);
  assign c2l_push_o = done_o && (state_q == IDLE ? push_prev : push_prev_q);
  assign c2s_push_o = done_o && (state_q == IDLE ? push_next : push_next_q);

  // ---- epilogue state ----------------------------------------------------------------------
  logic        epi_req_q, epi_relu_q, epi_bias_q;
  logic [4:0]  epi_shift_q;
  logic [15:0] epi_base_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni || start_i) begin
      epi_req_q   <= 1'b0;
      epi_relu_q  <= 1'b0;
      epi_shift_q <= '0;
      epi_bias_q  <= 1'b0;
      epi_base_q  <= '0;
    end else if (fire_o && is_epi) begin
      epi_req_q   <= cmd_i[`VDLA_F_REQ_LSB];
      epi_relu_q  <= cmd_i[`VDLA_F_RELU_LSB];
      epi_shift_q <= cmd_i[`VDLA_F_SHIFT_LSB +: `VDLA_F_SHIFT_W];
      epi_bias_q  <= bias;
      epi_base_q  <= bias_base;
    end
  end

  // ---- LOAD UOP / ACC / ACC_8BIT ------------------------------------------------------------
  logic                eng_valid, eng_pad;
  logic [17:0]         eng_idx;
  logic signed [25:0]  eng_off;
  logic [BUS_W-1:0]    eng_data;
  logic [24:0]         eng_row_bytes;
  logic [2:0]          ld_type_q;

  vdla_load_engine #(
    .ADDR_W(ADDR_W), .BUS_W(BUS_W), .MAX_BEATS(MAX_BEATS), .IDX_W(16), .SETUP(DMA_SETUP),
    .PAD_CYCLES(PAD_CYCLES)
  ) u_engine (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (fire_o && is_load && !is_nop),
    .log_eb_i    (is_uop ? 4'd2 : is_acc8 ? 4'($clog2(OUT_W / 8)) : 4'($clog2(ACC_W / 8))),
    .sram_base_i (sram_base),
    .dram_base_i (cmd_i[`VDLA_F_DRAM_BASE_LSB +: `VDLA_F_DRAM_BASE_W]),
    .y_size_i    (y_size),
    .x_size_i    (x_size),
    .x_stride_i  (cmd_i[`VDLA_F_X_STRIDE_LSB +: `VDLA_F_X_STRIDE_W]),
    .y_pad_0_i   (yp0),
    .y_pad_1_i   (yp1),
    .x_pad_0_i   (xp0),
    .x_pad_1_i   (xp1),
    .arvalid_o, .araddr_o, .arlen_o, .arready_i, .rvalid_i, .rresp_i, .rdata_i,
    .wr_valid_o  (eng_valid),
    .wr_pad_o    (eng_pad),
    .wr_idx_o    (eng_idx),
    .wr_off_o    (eng_off),
    .wr_data_o   (eng_data),
    .row_bytes_o (eng_row_bytes),
    .done_o      (eng_done),
    .err_o       (eng_err)
  );

  // UOP beats: micro-op j of a beat has index eng_idx + j and goes to bank (index mod U).
  logic [U-1:0]        uop_we;
  logic [UAW-1:0]      uop_waddr [U];
  logic [31:0]         uop_wdata [U];
  always_comb begin
    for (int k = 0; k < U; k++) begin
      logic [LU:0]  j;
      logic [17:0]  idx;
      logic signed [26:0] pos;
      j   = (LU+1)'((k - int'(eng_idx[LU:0])) & (U - 1));
      idx = eng_idx + 18'(j);
      pos = 27'(eng_off) + 27'(int'(j) * 4);
      uop_we[k]    = eng_valid && ld_type_q == `VDLA_MEM_UOP && pos >= 0 && pos < $signed({2'b0, eng_row_bytes});
      uop_waddr[k] = idx[LU +: UAW];
      uop_wdata[k] = eng_data[j[LU-1:0]*32 +: 32];
    end
  end

  // ACC beats: 32-bit lanes (ACC) or sign-extended bytes (ACC_8BIT); padding zeroes the element.
  logic [ACC_W-1:0] ld_acc_data;
  logic [LANES-1:0] ld_acc_we;
  logic [7:0]       ld_beat;
  assign ld_beat = 8'(eng_off >>> LB);
  always_comb begin
    ld_acc_we = '0;
    if (ld_type_q == `VDLA_MEM_ACC_8BIT) begin
      for (int l = 0; l < LANES; l++) begin
        ld_acc_data[l*32 +: 32] = 32'($signed(eng_data[(l*8) % BUS_W +: 8]));
        ld_acc_we[l] = (l / (BUS_W / 8)) == int'(ld_beat) % (OUT_W / BUS_W);
      end
    end else begin
      for (int l = 0; l < LANES; l++) begin
        ld_acc_data[l*32 +: 32] = eng_data[(l*32) % BUS_W +: 32];
        ld_acc_we[l] = (l / (BUS_W / 32)) == int'(ld_beat) % (ACC_W / BUS_W);
      end
    end
    if (eng_pad) begin
      ld_acc_data = '0;
      ld_acc_we   = '1;
    end
    if (!eng_valid || ld_type_q == `VDLA_MEM_UOP) ld_acc_we = '0;
  end

  // ---- micro-op buffer ----------------------------------------------------------------------
  logic [UAW-1:0] uop_raddr;
  logic           uop_re;
  logic [31:0]    uop_rdata [U];
  for (genvar k = 0; k < U; k++) begin : g_uop_bank
    vdla_sram #(.WIDTH(32), .DEPTH(UOP_DEPTH / U), .LANE(32)) u_bank (
      .clk_i, .we_i (uop_we[k]), .waddr_i (uop_waddr[k]), .wdata_i (uop_wdata[k]),
      .re_i (uop_re), .raddr_i (uop_raddr), .rdata_o (uop_rdata[k])
    );
  end

  // ---- loop sequencer (S0) ------------------------------------------------------------------
  logic        gemm_q, reset_q, init_q, use_imm_q, two_op_q;
  logic [2:0]  alu_op_q;
  logic [15:0] imm_q;
  logic [12:0] u_bgn_q, u_q;
  logic [13:0] u_end_q, n_out_q, n_in_q, o_q, i_q;
  logic [10:0] dfo_q, dfi_q, sfo_q, sfi_q;
  logic [9:0]  wfo_q, wfi_q;
  logic [31:0] dst_out_q, src_out_q, wgt_out_q, dst_off_q, src_off_q, wgt_off_q;
  logic [7:0]  phase_q;  // cycles until the next issue (two-operand ALU)
  logic        issue, last_iter;

  assign issue     = state_q == LOOP && wait_q == '0 && phase_q == '0 && !halt_i;
  assign last_iter = 14'(u_q) + 1'b1 == u_end_q && i_q + 1'b1 == n_in_q && o_q + 1'b1 == n_out_q;
  assign uop_re    = issue;
  assign uop_raddr = u_q[LU +: UAW];

  always_ff @(posedge clk_i) begin
    if (!rst_ni || halt_i) begin
      state_q <= IDLE;
    end else begin
      case (state_q)
        IDLE: if (fire_o) begin
          push_prev_q <= push_prev;
          push_next_q <= push_next;
          ld_type_q   <= mem_type;
          gemm_q      <= opcode == `VDLA_OP_GEMM;
          reset_q     <= cmd_i[`VDLA_F_RESET_LSB];
          init_q      <= cmd_i[`VDLA_F_INIT_LSB];
          alu_op_q    <= cmd_i[`VDLA_F_ALU_OPCODE_LSB +: `VDLA_F_ALU_OPCODE_W];
          use_imm_q   <= cmd_i[`VDLA_F_USE_IMM_LSB];
          imm_q       <= cmd_i[`VDLA_F_IMM_LSB +: `VDLA_F_IMM_W];
          two_op_q    <= opcode == `VDLA_OP_ALU && !cmd_i[`VDLA_F_RESET_LSB] && !cmd_i[`VDLA_F_USE_IMM_LSB];
          u_bgn_q     <= uop_bgn;
          u_q         <= uop_bgn;
          u_end_q     <= uop_end;
          n_out_q     <= iter_out;
          n_in_q      <= iter_in;
          o_q         <= '0;
          i_q         <= '0;
          dfo_q       <= cmd_i[`VDLA_F_DST_FACTOR_OUT_LSB +: `VDLA_F_DST_FACTOR_OUT_W];
          dfi_q       <= cmd_i[`VDLA_F_DST_FACTOR_IN_LSB +: `VDLA_F_DST_FACTOR_IN_W];
          sfo_q       <= cmd_i[`VDLA_F_SRC_FACTOR_OUT_LSB +: `VDLA_F_SRC_FACTOR_OUT_W];
          sfi_q       <= cmd_i[`VDLA_F_SRC_FACTOR_IN_LSB +: `VDLA_F_SRC_FACTOR_IN_W];
          wfo_q       <= cmd_i[`VDLA_F_WGT_FACTOR_OUT_LSB +: `VDLA_F_WGT_FACTOR_OUT_W];
          wfi_q       <= cmd_i[`VDLA_F_WGT_FACTOR_IN_LSB +: `VDLA_F_WGT_FACTOR_IN_W];
          dst_out_q   <= '0;
          src_out_q   <= '0;
          wgt_out_q   <= '0;
          dst_off_q   <= '0;
          src_off_q   <= '0;
          wgt_off_q   <= '0;
          phase_q     <= '0;
          if (is_load && !is_nop) begin
            state_q <= LOAD;
          end else if (is_loop) begin
            state_q <= LOOP;
            wait_q  <= 16'(opcode == `VDLA_OP_GEMM ? GEMM_SETUP - 2 : ALU_SETUP - 2);
          end else if (NOP_EXTRA != 0) begin
            state_q <= NOP;
            wait_q  <= 16'(NOP_EXTRA - 1);
          end
        end
        LOAD: if (eng_done) state_q <= IDLE;
        LOOP: begin
          if (wait_q != '0) wait_q <= wait_q - 1'b1;
          if (phase_q != '0) phase_q <= phase_q - 1'b1;
          if (issue) begin
            if (two_op_q) phase_q <= 8'(ALU_II - 1);
            if (14'(u_q) + 1'b1 != u_end_q) begin
              u_q <= u_q + 1'b1;
            end else begin
              u_q <= u_bgn_q;
              if (i_q + 1'b1 != n_in_q) begin
                i_q       <= i_q + 1'b1;
                dst_off_q <= dst_off_q + 32'(dfi_q);
                src_off_q <= src_off_q + 32'(sfi_q);
                wgt_off_q <= wgt_off_q + 32'(wfi_q);
              end else begin
                i_q       <= '0;
                o_q       <= o_q + 1'b1;
                dst_out_q <= dst_out_q + 32'(dfo_q);
                src_out_q <= src_out_q + 32'(sfo_q);
                wgt_out_q <= wgt_out_q + 32'(wfo_q);
                dst_off_q <= dst_out_q + 32'(dfo_q);
                src_off_q <= src_out_q + 32'(sfo_q);
                wgt_off_q <= wgt_out_q + 32'(wfo_q);
              end
            end
            if (last_iter) begin
              state_q <= DRAIN;
              // completion GEMM_PIPE + 1 cycles after the last micro-op read (ALU: ALU_PIPE + 1,
              // plus ALU_II - 1 for two operands); the pipeline needs 5 (GEMM), 3 or 4 (ALU)
              wait_q  <= 16'(gemm_q ? GEMM_PIPE : two_op_q ? ALU_PIPE + ALU_II - 1 : ALU_PIPE);
            end
          end
        end
        DRAIN, NOP: begin
          wait_q <= wait_q - 1'b1;
          if (wait_q == '0) state_q <= IDLE;
        end
        default: state_q <= IDLE;
      endcase
    end
  end

  // ---- S1: form the indices -----------------------------------------------------------------
  logic        s1_valid_q;
  logic [LU:0] s1_bank_q;
  logic [31:0] s1_dst_off_q, s1_src_off_q, s1_wgt_off_q;
  logic [16:0] s1_bias_q;  // the iteration's bias row, bias_base + o
  logic [31:0] uop_word, dst, src, wgt;
  logic        s1_gemm;

  always_ff @(posedge clk_i) begin
    s1_valid_q   <= issue;
    s1_bank_q    <= (LU+1)'(u_q[LU-1:0]);
    s1_dst_off_q <= dst_off_q;
    s1_src_off_q <= src_off_q;
    s1_wgt_off_q <= wgt_off_q;
    s1_bias_q    <= 17'(epi_base_q) + 17'(o_q);
  end

  assign uop_word = uop_rdata[s1_bank_q[LU-1:0]];
  assign dst      = 32'(uop_word[DST_BITS-1:0]) + s1_dst_off_q;
  assign src      = 32'(uop_word[DST_BITS +: SRC_BITS]) + s1_src_off_q;
  assign wgt      = 32'(uop_word[DST_BITS + SRC_BITS +: WGT_BITS]) + s1_wgt_off_q;
  assign s1_gemm  = s1_valid_q && gemm_q;

  assign index_err = s1_valid_q && !halt_i && (dst >= 32'(ACC_DEPTH)
      || (gemm_q && !reset_q && (src >= 32'(INP_DEPTH) || wgt >= 32'(WGT_DEPTH)
                                 || (init_q && epi_bias_q && s1_bias_q >= 17'(ACC_DEPTH))))
      || (!gemm_q && !use_imm_q && src >= 32'(ACC_DEPTH)));

  assign inp_re_o    = s1_gemm && !reset_q;
  assign inp_raddr_o = src[$clog2(INP_DEPTH)-1:0];
  assign wgt_re_o    = s1_gemm && !reset_q;
  assign wgt_raddr_o = wgt[$clog2(WGT_DEPTH)-1:0];

  // ---- S2, S3: GEMM core --------------------------------------------------------------------
  logic              s2_valid_q, s3_valid_q;
  logic [ACC_AW-1:0] s2_dst_q, s3_dst_q, s2_bias_q, s3_bias_q;
  logic [LANES*32-1:0] sums;

  always_ff @(posedge clk_i) begin
    s2_valid_q <= s1_gemm && !index_err;
    s3_valid_q <= s2_valid_q;
    s2_dst_q   <= dst[ACC_AW-1:0];
    s3_dst_q   <= s2_dst_q;
    s2_bias_q  <= s1_bias_q[ACC_AW-1:0];
    s3_bias_q  <= s2_bias_q;
  end

  vdla_gemm_core #(.BATCH(BATCH), .BLOCK_IN(BLOCK_IN), .BLOCK_OUT(BLOCK_OUT)) u_core (
    .clk_i, .valid_i (s2_valid_q && !reset_q), .inp_i (inp_rdata_i), .wgt_i (wgt_rdata_i), .sum_o (sums)
  );

  // ---- accumulator read-modify-write --------------------------------------------------------
  logic              alu_pend_q;   // the ALU slot following a SRC slot
  logic [ACC_AW-1:0] alu_dst_q;
  logic              r_valid, r_zero, fresh;  // fresh: an init GEMM's first update of the row
  logic [1:0]        r_kind;
  logic [ACC_AW-1:0] r_addr, r_waddr;
  logic              s1_alu;

  // GEMM slots come from S3. An ALU iteration is one slot from S1 (reading its destination, or its
  // source when a reset makes the destination read as zero) or two: SRC from S1, then the
  // destination in the next cycle. An init GEMM's first update of a row reads the bias row or zero.
  logic [ACC_DEPTH-1:0] touched_q;  // rows the running GEMM has updated
  assign s1_alu = s1_valid_q && !gemm_q && !index_err;
  assign fresh  = init_q && !touched_q[s3_dst_q];
  always_comb begin
    r_valid = 1'b0;
    r_zero  = 1'b0;
    r_kind  = gemm_q ? (reset_q ? K_ZERO : K_GEMM) : K_ALU;
    r_addr  = (reset_q && !use_imm_q) ? src[ACC_AW-1:0] : dst[ACC_AW-1:0];
    r_waddr = dst[ACC_AW-1:0];
    if (s3_valid_q) begin
      r_valid = 1'b1;
      r_addr  = (fresh && epi_bias_q) ? s3_bias_q : s3_dst_q;
      r_zero  = fresh && !epi_bias_q;
      r_waddr = s3_dst_q;
    end else if (alu_pend_q) begin
      r_valid = 1'b1;
      r_addr  = alu_dst_q;
      r_waddr = alu_dst_q;
    end else if (s1_alu) begin
      r_valid = 1'b1;
      if (two_op_q) begin
        r_kind = K_SRC;
        r_addr = src[ACC_AW-1:0];
      end
    end
  end

  always_ff @(posedge clk_i) begin
    alu_pend_q <= s1_alu && two_op_q && !halt_i;
    alu_dst_q  <= dst[ACC_AW-1:0];
    // only init GEMMs touch the vector (a 2048-bit update every cycle slows the Verilated model)
    if (fire_o && opcode == `VDLA_OP_GEMM && cmd_i[`VDLA_F_INIT_LSB]) touched_q <= '0;
    else if (s3_valid_q && init_q) touched_q[s3_dst_q] <= 1'b1;
  end

  logic              rmw_valid, rmw_busy;
  logic [ACC_AW-1:0] rmw_addr;
  logic [ACC_W-1:0]  rmw_data;

  vdla_acc_rmw #(.LANES(LANES), .AW(ACC_AW)) u_rmw (
    .clk_i, .rst_ni,
    .r_valid_i   (r_valid && !halt_i),
    .r_kind_i    (r_kind),
    .r_zero_i    (r_zero),
    .r_addr_i    (r_addr),
    .r_waddr_i   (r_waddr),
    .alu_op_i    (alu_op_q),
    .use_imm_i   (use_imm_q),
    .a_zero_i    (!gemm_q && reset_q),
    .imm_i       (imm_q),
    .sum_i       (sums),
    .acc_re_o,
    .acc_raddr_o,
    .acc_rdata_i,
    .wr_valid_o  (rmw_valid),
    .wr_addr_o   (rmw_addr),
    .wr_data_o   (rmw_data),
    .busy_o      (rmw_busy)
  );

  // ACC and OUT writes: the loop's results, or the LOAD's beats; OUT truncated or (EPI req) requantized.
  always_comb begin
    if (rmw_valid) begin
      acc_we_o    = '1;
      acc_waddr_o = rmw_addr;
      acc_wdata_o = rmw_data;
    end else begin
      acc_we_o    = ld_acc_we;
      acc_waddr_o = eng_idx[ACC_AW-1:0];
      acc_wdata_o = ld_acc_data;
    end
    for (int l = 0; l < LANES; l++) begin
      if (epi_req_q) out_wdata_o[l*8 +: 8] = vdla_req(acc_wdata_o[l*32 +: 32], epi_shift_q, epi_relu_q);
      else out_wdata_o[l*8 +: 8] = acc_wdata_o[l*32 +: 8];
    end
  end

  logic unused;
  assign unused = rmw_busy ^ eng_row_bytes[0];
endmodule
