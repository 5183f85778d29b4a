// The compute stage: decode and dispatch of LOADs of micro-ops, accumulators and the activation table
// (vdla_compute_load), GEMM and ALU micro-op loops (vdla_compute_loop), EPI and FINISH; the micro-op buffer;
// the activation table (vdla_lut); the ACC buffer's write port and its 8-bit OUT mirror. Pops load->compute (pop_prev) and store->compute
// (pop_next) tokens; pushes compute->load (push_prev) and compute->store (push_next) tokens.
//
// EPI sets the epilogue state (cleared by reset and START): with `req`, every ACC write writes its OUT
// mirror requantized instead of truncated; `bias`/`bias_base` give the init rows of GEMMs with `init`;
// with `lut`, the mirror's int8 value (requantized or truncated) is looked up in the activation table;
// `dw` (kernel, stride, pitch) runs later GEMMs in the depthwise mode (vdla_loop_seq, vdla_gemm_core); with
// `src_out`, later GEMMs read their input rows from OUT (the top's read-only copy of the mirror) instead of INP;
// with `mul` (mul_base, mul_shift), the mirror of each ACC write of a later GEMM (not a reset) is formed from the
// value times its multiplier row (the OUT path's multiplier, below).
module vdla_compute (
  input  logic                                 clk_i,
  input  logic                                 rst_ni,
  input  logic                                 halt_i,
  input  logic                                 start_i,
  // command queue
  input  logic                                 cmd_valid_i,
  input  vdla_pkg::insn_t                      cmd_i,
  input  logic                                 cmd_bad_i,  // cmd_i breaks the stage's rules (vdla_insn_check)
  input  logic                                 cmd_no_data_i,  // cmd_i's x_size is 0 (vdla_insn_check)
  output logic                                 cmd_pop_o,
  // dependency tokens
  input  logic                                 l2c_avail_i,
  output logic                                 l2c_pop_o,
  input  logic                                 s2c_avail_i,
  output logic                                 s2c_pop_o,
  input  logic                                 c2l_room_i,
  output logic                                 c2l_push_o,
  input  logic                                 c2s_room_i,
  output logic                                 c2s_push_o,
  // AXI read (its LOADs': vdla_compute_load)
  output vdla_pkg::axi_rd_req_t                axi_rd_req_o,
  input  vdla_pkg::axi_rd_rsp_t                axi_rd_rsp_i,
  // INP and WGT read ports
  output logic                                 inp_re_o,
  output logic [vdla_pkg::INP_AW-1:0]          inp_raddr_o,
  input  logic [vdla_pkg::INP_BITS-1:0]        inp_rdata_i,  // the row read, from INP or from OUT's copy
  output logic                                 inp_src_out_o,  // the read is of OUT's copy (EPI src_out),
  output logic [vdla_pkg::ACC_AW-1:0]          inp_out_raddr_o,  // at this row
  output logic                                 wgt_re_o,
  output logic [vdla_pkg::WGT_AW-1:0]          wgt_raddr_o,
  input  logic [vdla_pkg::WGT_BITS-1:0]        wgt_rdata_i,
  // ACC buffer and its 8-bit OUT mirror
  output logic                                 acc_re_o,
  output logic [vdla_pkg::ACC_AW-1:0]          acc_raddr_o,
  input  logic [vdla_pkg::ACC_BITS-1:0]        acc_rdata_i,
  output logic [vdla_pkg::LANES-1:0]           acc_we_o,
  output logic [vdla_pkg::ACC_AW-1:0]          acc_waddr_o,
  output logic [vdla_pkg::ACC_BITS-1:0]        acc_wdata_o,
  output logic [vdla_pkg::LANES-1:0]           out_we_o,  // the OUT mirror's write: the ACC write 2 cycles later
  output logic [vdla_pkg::ACC_AW-1:0]          out_waddr_o,
  output logic [vdla_pkg::OUT_BITS-1:0]        out_wdata_o,
  // the load stage's micro-op writes (LOAD UOP_PRE): never in a cycle of this stage's own (one read data channel)
  input  logic [vdla_pkg::UOP_BANKS-1:0]       pre_uop_we_i,
  input  logic [vdla_pkg::UOP_BANKS-1:0][vdla_pkg::UOP_BANK_AW-1:0] pre_uop_waddr_i,
  input  logic [vdla_pkg::UOP_BANKS-1:0][31:0] pre_uop_wdata_i,
  // status
  output logic                                 fire_o,
  output logic                                 busy_o,
  output logic                                 stall_o,
  output logic                                 done_o,
  output logic                                 finish_o,
  output logic                                 err_o,
  output vdla_pkg::err_code_e                  err_code_o
);
  localparam int LANES     = vdla_pkg::LANES;
  localparam int U         = vdla_pkg::UOP_BANKS;
  localparam int UAW       = vdla_pkg::UOP_BANK_AW;
  localparam int NOP_EXTRA = vdla_pkg::NOP_CYCLES - 1;

  // ---- decode -------------------------------------------------------------------------------
  // the word as a LOAD (mem), a GEMM or ALU loop (cmd_i.gemm: the two share the loop fields) or an EPI
  vdla_pkg::opcode_e   opcode;
  vdla_pkg::mem_insn_t mem;
  logic is_load, is_loop, is_finish, is_epi, is_nop, bad;

  assign opcode    = cmd_i.mem.hdr.opcode;
  assign mem       = cmd_i.mem;
  assign is_load   = opcode == vdla_pkg::OP_LOAD;
  assign is_loop   = opcode == vdla_pkg::OP_GEMM || opcode == vdla_pkg::OP_ALU;
  assign is_finish = opcode == vdla_pkg::OP_FINISH;
  assign is_epi    = opcode == vdla_pkg::OP_EPI;
  assign is_nop    = is_finish || is_epi || (is_load && cmd_no_data_i);
  assign bad       = cmd_bad_i;

  // ---- dispatch -----------------------------------------------------------------------------
  typedef enum logic [1:0] {IDLE, LOAD, LOOP, NOP} state_e;
  state_e      state_q;
  logic [15:0] nop_q;
  logic        push_prev_q, push_next_q;
  logic        tokens_ok, idle, ld_done, ld_err, loop_done, index_err, hazard_err;
  assign idle      = state_q == IDLE && !halt_i;
  assign tokens_ok = (!mem.hdr.pop_prev || l2c_avail_i) && (!mem.hdr.pop_next || s2c_avail_i)
                  && (!mem.hdr.push_prev || c2l_room_i) && (!mem.hdr.push_next || c2s_room_i);
  assign fire_o    = idle && cmd_valid_i && !bad && tokens_ok;
  assign stall_o   = idle && cmd_valid_i && !bad && !tokens_ok;
  assign busy_o    = fire_o || state_q != IDLE;
  assign cmd_pop_o = fire_o;
  assign l2c_pop_o = fire_o && mem.hdr.pop_prev;
  assign s2c_pop_o = fire_o && mem.hdr.pop_next;
  assign err_o     = (idle && cmd_valid_i && bad) || ld_err || index_err || hazard_err;
  assign err_code_o = ld_err ? vdla_pkg::ERR_BUS : index_err ? vdla_pkg::ERR_INDEX
                    : hazard_err ? vdla_pkg::ERR_HAZARD : vdla_pkg::ERR_INSN;
  assign finish_o  = fire_o && is_finish;

  assign done_o = (state_q == LOAD && ld_done) || (state_q == LOOP && loop_done)
               || (state_q == NOP && nop_q == '0) || (fire_o && is_nop && NOP_EXTRA == 0);
  assign c2l_push_o = done_o && (state_q == IDLE ? mem.hdr.push_prev : push_prev_q);
  assign c2s_push_o = done_o && (state_q == IDLE ? mem.hdr.push_next : push_next_q);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= IDLE;
    end else if (halt_i) begin
      state_q <= IDLE;
    end else begin
      case (state_q)
        IDLE: if (fire_o) begin
          if (is_load && !is_nop) state_q <= LOAD;
          else if (is_loop) state_q <= LOOP;
          else if (NOP_EXTRA != 0) state_q <= NOP;
        end
        LOAD: if (ld_done) state_q <= IDLE;
        LOOP: if (loop_done) state_q <= IDLE;
        NOP: if (nop_q == '0) state_q <= IDLE;
        default: state_q <= IDLE;
      endcase
    end
  end

  // the running instruction's push flags and NOP wait: loaded at dispatch (fire_o implies !halt_i)
  always_ff @(posedge clk_i) begin
    if (fire_o) begin
      push_prev_q <= mem.hdr.push_prev;
      push_next_q <= mem.hdr.push_next;
      nop_q       <= 16'(NOP_EXTRA - 1);
    end else if (state_q == NOP && !halt_i) begin
      nop_q <= nop_q - 1'b1;
    end
  end

  // ---- epilogue state ----------------------------------------------------------------------
  logic        epi_req_q, epi_relu_q, epi_bias_q, epi_lut_q, epi_lut_table_q;
  logic [4:0]  epi_shift_q;
  logic [15:0] epi_base_q;
  logic        epi_dw_q;
  logic [2:0]  epi_dw_k_q;
  logic [1:0]  epi_dw_stride_q;
  logic [15:0] epi_dw_pitch_q;
  logic        epi_src_out_q;
  logic        epi_mul_q;
  logic [5:0]  epi_mul_shift_q;
  logic [15:0] epi_mul_base_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      epi_req_q   <= 1'b0;
      epi_relu_q  <= 1'b0;
      epi_shift_q <= '0;
      epi_bias_q  <= 1'b0;
      epi_base_q  <= '0;
      epi_lut_q   <= 1'b0;
      epi_lut_table_q <= 1'b0;
      epi_dw_q    <= 1'b0;
      epi_src_out_q <= 1'b0;
      epi_mul_q   <= 1'b0;
    end else if (start_i) begin
      epi_req_q   <= 1'b0;
      epi_relu_q  <= 1'b0;
      epi_shift_q <= '0;
      epi_bias_q  <= 1'b0;
      epi_base_q  <= '0;
      epi_lut_q   <= 1'b0;
      epi_lut_table_q <= 1'b0;
      epi_dw_q    <= 1'b0;
      epi_src_out_q <= 1'b0;
      epi_mul_q   <= 1'b0;
    end else if (fire_o && is_epi) begin
      epi_req_q   <= cmd_i.epi.req;
      epi_relu_q  <= cmd_i.epi.relu;
      epi_shift_q <= cmd_i.epi.shift;
      epi_bias_q  <= cmd_i.epi.bias;
      epi_base_q  <= cmd_i.epi.bias_base;
      epi_lut_q   <= cmd_i.epi.lut;
      epi_lut_table_q <= cmd_i.epi.lut_table;
      epi_dw_q    <= cmd_i.epi.dw;
      epi_src_out_q <= cmd_i.epi.src_out;
      epi_mul_q   <= vdla_pkg::OUT_MUL_SUPPORTED != 0 && cmd_i.epi.mul;
    end
  end

  // the depthwise mode's kernel, stride and pitch: read only under epi_dw_q (no reset)
  always_ff @(posedge clk_i) begin
    if (fire_o && is_epi) begin
      epi_dw_k_q      <= cmd_i.epi.dw_k;
      epi_dw_stride_q <= cmd_i.epi.dw_stride;
      epi_dw_pitch_q  <= cmd_i.epi.dw_pitch;
      epi_mul_shift_q <= cmd_i.epi.mul_shift;  // the OUT multiplier's: read only under epi_mul_q
      epi_mul_base_q  <= cmd_i.epi.mul_base;
    end
  end

  // ---- LOAD UOP / ACC / ACC_8BIT / LUT ------------------------------------------------------
  logic [U-1:0]                  uop_we;
  logic [U-1:0][UAW-1:0]         uop_waddr;
  logic [U-1:0][31:0]            uop_wdata;
  logic [LANES-1:0]              ld_acc_we;
  logic [vdla_pkg::ACC_AW-1:0]   ld_acc_waddr;
  logic [vdla_pkg::ACC_BITS-1:0] ld_acc_wdata;
  localparam int LUT_AW = $clog2(vdla_pkg::LUT_TABLES * vdla_pkg::LUT_ENTRIES / (vdla_pkg::BUS_WIDTH / 8));
  logic                          lut_we;
  logic [LUT_AW-1:0]             lut_waddr;
  logic [vdla_pkg::BUS_WIDTH-1:0] lut_wdata;

  vdla_compute_load u_load (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (fire_o && is_load && !is_nop),
    .insn_i      (mem),
    .axi_rd_req_o, .axi_rd_rsp_i,
    .uop_we_o    (uop_we),
    .uop_waddr_o (uop_waddr),
    .uop_wdata_o (uop_wdata),
    .acc_we_o    (ld_acc_we),
    .acc_waddr_o (ld_acc_waddr),
    .acc_wdata_o (ld_acc_wdata),
    .lut_we_o    (lut_we),
    .lut_waddr_o (lut_waddr),
    .lut_wdata_o (lut_wdata),
    .done_o      (ld_done),
    .err_o       (ld_err)
  );

  // ---- micro-op buffer: U banks, micro-op n in bank n mod U ---------------------------------
  // Written by this stage's LOAD UOP or the load stage's LOAD UOP_PRE: both take their beats from the one AXI read
  // data channel, through load engines of the same latency, so never in the same cycle.
  logic           uop_re;
  logic [UAW-1:0] uop_raddr;
  logic [U-1:0][31:0] uop_rdata;
  for (genvar k = 0; k < U; k++) begin : g_uop_bank
    vdla_sram #(.WIDTH(32), .DEPTH(vdla_pkg::UOP_DEPTH / U), .LANE(32), .ULTRA(vdla_pkg::UOP_URAM)) u_bank (
      .clk_i, .we_i (uop_we[k] || pre_uop_we_i[k]),
      .waddr_i (pre_uop_we_i[k] ? pre_uop_waddr_i[k] : uop_waddr[k]),
      .wdata_i (pre_uop_we_i[k] ? pre_uop_wdata_i[k] : uop_wdata[k]),
      .re_i (uop_re), .raddr_i (uop_raddr), .rdata_o (uop_rdata[k])
    );
  end

  // ---- GEMM and ALU loops -------------------------------------------------------------------
  logic                          rmw_valid;
  logic [vdla_pkg::ACC_AW-1:0]   rmw_addr;
  logic [vdla_pkg::ACC_BITS-1:0] rmw_data;
  logic                          omul;     // the running GEMM's writes go through the OUT multiplier
  logic [vdla_pkg::ACC_BITS-1:0] om_data;  // the rounded product of the loop's ACC write two cycles before

  vdla_compute_loop u_loop (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (fire_o && is_loop),
    .insn_i      (cmd_i),
    .uop_re_o    (uop_re),
    .uop_raddr_o (uop_raddr),
    .uop_rdata_i (uop_rdata),
    .epi_bias_i  (epi_bias_q),
    .epi_base_i  (epi_base_q),
    .epi_dw_i        (epi_dw_q),
    .epi_dw_k_i      (epi_dw_k_q),
    .epi_dw_stride_i (epi_dw_stride_q),
    .epi_dw_pitch_i  (epi_dw_pitch_q),
    .epi_src_out_i   (epi_src_out_q),
    .epi_mul_i       (epi_mul_q),
    .epi_mul_base_i  (epi_mul_base_q),
    .epi_mul_shift_i (epi_mul_shift_q),
    .inp_re_o, .inp_raddr_o, .inp_rdata_i, .inp_src_out_o, .inp_out_raddr_o, .wgt_re_o, .wgt_raddr_o, .wgt_rdata_i,
    .acc_re_o, .acc_raddr_o, .acc_rdata_i,
    .wr_valid_o  (rmw_valid),
    .wr_addr_o   (rmw_addr),
    .wr_data_o   (rmw_data),
    .omul_o      (omul),
    .om_data_o   (om_data),
    .done_o      (loop_done),
    .index_err_o (index_err),
    .hazard_err_o (hazard_err)
  );

  // ---- ACC and OUT writes: the loop's results, or the LOAD's beats ---------------------------
  always_comb begin
    if (rmw_valid) begin
      acc_we_o    = '1;
      acc_waddr_o = rmw_addr;
      acc_wdata_o = rmw_data;
    end else begin
      acc_we_o    = ld_acc_we;
      acc_waddr_o = ld_acc_waddr;
      acc_wdata_o = ld_acc_wdata;
    end
  end

  // The OUT mirror is written two cycles after ACC, from registers (with the epilogue state of the ACC
  // write). In the first cycle its int8 value is formed from registers, so that its requantization starts at a
  // flip-flop: the shift and the clamp's bounds on 2v (vdla_pkg::requant_bounds) are formed from the epilogue
  // state as the ACC write is, so the bounds' compares start at flip-flops too. Without req (ow_req_q) the
  // value is the low byte, taken as such: the Verilated model runs no requantization for a plain GEMM (a tenth
  // of its instructions). The value is registered (lw_*); in the second cycle, with `lut` (lw_lut_q), each
  // lane's byte is looked up in activation table lw_table_q (vdla_lut, asynchronous LUT RAM), and the mirror
  // written.
  // A read of the mirror in the cycle of that write, or in the cycle before it, gets the written lanes from
  // the write (vdla_store): the store sees every row as if the mirror were written with ACC.
  // Under EPI mul (omul: a GEMM's writes, not a reset's) the first cycle takes instead, two cycles after each ACC
  // write (pm*), the value multiplied by its multiplier row and rounded (the ALU's multipliers: partial products
  // registered as the write leaves W, then their rounded sum, vdla_acc_rmw's om_data); the GEMM drains as much
  // longer (OUT_MUL_LAG), so a read of the mirror still meets each write as above. Nothing else writes ACC then.
  logic                          pm1_we_q, pm2_we_q;
  logic [vdla_pkg::ACC_AW-1:0]   pm1_addr_q, pm2_addr_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      pm1_we_q <= 1'b0;
      pm2_we_q <= 1'b0;
    end else begin
      pm1_we_q <= rmw_valid && omul;
      pm2_we_q <= pm1_we_q;
    end
  end
  always_ff @(posedge clk_i) begin
    pm1_addr_q <= rmw_addr;
    pm2_addr_q <= pm1_addr_q;
  end

  logic [LANES-1:0]              ow_we_q;
  logic [vdla_pkg::ACC_AW-1:0]   ow_addr_q;
  logic [vdla_pkg::ACC_BITS-1:0] ow_data_q;
  logic [4:0]                    ow_shift_q;
  logic                          ow_req_q, ow_lut_q, ow_table_q;
  logic [101:0]                  ow_bounds_q;
  logic [vdla_pkg::OUT_BITS-1:0] ow_byte;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) ow_we_q <= '0;
    else if (pm2_we_q) ow_we_q <= '1;
    else ow_we_q <= (rmw_valid && omul) ? '0 : acc_we_o;
  end

  always_ff @(posedge clk_i) begin
    ow_addr_q   <= pm2_we_q ? pm2_addr_q : acc_waddr_o;
    ow_data_q   <= pm2_we_q ? om_data : acc_wdata_o;
    ow_shift_q  <= epi_shift_q;
    ow_req_q    <= epi_req_q;
    ow_lut_q    <= epi_lut_q;
    ow_table_q  <= epi_lut_table_q;
    ow_bounds_q <= vdla_pkg::requant_bounds(epi_shift_q, epi_relu_q);
  end

  always_comb begin
    for (int l = 0; l < LANES; l++) begin
      if (ow_req_q) ow_byte[l*8 +: 8] = vdla_pkg::requantize_b(ow_data_q[l*32 +: 32], ow_shift_q, ow_bounds_q);
      else ow_byte[l*8 +: 8] = ow_data_q[l*32 +: 8];
    end
  end

  // second cycle: the int8 values, looked up in the table with `lut`
  logic [LANES-1:0]              lw_we_q;
  logic [vdla_pkg::ACC_AW-1:0]   lw_addr_q;
  logic [vdla_pkg::OUT_BITS-1:0] lw_byte_q, lw_lut;
  logic                          lw_lut_q, lw_table_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) lw_we_q <= '0;
    else lw_we_q <= ow_we_q;
  end

  always_ff @(posedge clk_i) begin
    if (ow_we_q != '0) begin  // only when the mirror is written (the Verilated model skips idle cycles)
      lw_addr_q <= ow_addr_q;
      lw_byte_q <= ow_byte;
      lw_lut_q  <= ow_lut_q;
      lw_table_q <= ow_table_q;
    end
  end

  vdla_lut u_lut (
    .clk_i, .rst_ni,
    .we_i    (lut_we),
    .waddr_i (lut_waddr),
    .wdata_i (lut_wdata),
    .table_i (lw_table_q),
    .idx_i   (lw_byte_q),
    .data_o  (lw_lut)
  );

  assign out_we_o    = lw_we_q;
  assign out_waddr_o = lw_addr_q;
  assign out_wdata_o = lw_lut_q ? lw_lut : lw_byte_q;

  // The two stages' micro-op loads never write in the same cycle (one read data channel).
  `ASSERT_NEVER(a_one_uop_writer, (uop_we & pre_uop_we_i) != '0, "compute: two micro-op writes in one cycle")
  // The loop and the load never write ACC in the same cycle (one runs at a time and drains first).
  `ASSERT_NEVER(a_one_acc_writer, rmw_valid && ld_acc_we != '0, "compute: loop and load write ACC in the same cycle")
  // The OUT multiplier's writes come while its GEMM's own (multiplied) ACC writes go on, or drain: no other
  // ACC write meets them.
  `ASSERT_NEVER(a_one_out_writer, pm2_we_q && (ld_acc_we != '0 || (rmw_valid && !omul)),
                "compute: a multiplied OUT write meets another ACC write")
endmodule
