// Read-modify-write of accumulator rows, one per cycle, in three stages: R reads a row, C combines
// it with its operand in the ALU, W writes the result. Results still in flight (in W, or written
// in the cycle before) are forwarded to a later read of the same row, so back-to-back updates of
// one row see each other, as the sequential semantics requires.
// Slot kinds (vdla_pkg::slot_e): SRC reads the second ALU operand (kept for the next slot), ALU applies
// the ALU operation, GEMM adds the GEMM core's sums, ZERO writes zeros. A slot reads r_addr and writes
// r_waddr; with r_zero it reads nothing and sees zeros (an init GEMM's first update without bias).
// With a_zero_i (an ALU reset) the destination reads as zero: op(0, imm), or op(0, row read) when
// the operand is ACC[src].
// A MUL (not a reset) takes one more stage, M, between C and W: two lanes share each of the ALU's
// multipliers (vdla_alu), so its upper lanes are multiplied in M. Its slots are alu_ii >= 2 cycles apart
// (vdla_loop_seq), so the stage after C is free in the cycle a MUL is in M, and the instruction's drain waits
// for M. The one read that can meet a MUL in M is the next iteration's SRC slot in C: it remembers the match
// (src_fwd_q) and its ALU slot, one cycle later, takes the MUL's result from W.
module vdla_acc_rmw #(
  parameter int LANES = vdla_pkg::LANES,
  parameter int AW    = vdla_pkg::ACC_AW
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  input  logic                r_valid_i,
  input  vdla_pkg::slot_e     r_kind_i,
  input  logic                r_zero_i,
  input  logic [AW-1:0]       r_addr_i,
  input  logic [AW-1:0]       r_waddr_i,
  input  vdla_pkg::alu_op_e   alu_op_i,   // held for the whole instruction
  input  logic                use_imm_i,
  input  logic                a_zero_i,
  input  logic [15:0]         imm_i,
  input  logic [LANES*32-1:0] sum_i,      // GEMM sums, valid in the C stage of a GEMM slot
  // ACC read port
  output logic                acc_re_o,
  output logic [AW-1:0]       acc_raddr_o,
  input  logic [LANES*32-1:0] acc_rdata_i,
  // ACC write
  output logic                wr_valid_o,
  output logic [AW-1:0]       wr_addr_o,
  output logic [LANES*32-1:0] wr_data_o,
  output logic                busy_o      // a slot in C or W
);
  logic                c_valid_q, m_valid_q, w_valid_q, f_valid_q, c_zero_q, src_fwd_q;
  vdla_pkg::slot_e     c_kind_q;
  logic [AW-1:0]       c_addr_q, c_waddr_q, m_addr_q, w_addr_q, f_addr_q;
  logic [LANES*32-1:0] w_data, f_data_q, b_q, rd, a, b;
  logic                c_alu, c_mul;

  assign c_alu = c_valid_q && c_kind_q != vdla_pkg::SLOT_SRC;  // a slot in C that writes
  // a MUL in C: its result goes through M (a MUL with reset writes zeros in one cycle)
  assign c_mul = c_valid_q && c_kind_q == vdla_pkg::SLOT_ALU && alu_op_i == vdla_pkg::ALU_MUL && !a_zero_i;

  // no read for a ZERO slot, a slot that sees zeros, or op(0, imm)
  assign acc_re_o    = r_valid_i && r_kind_i != vdla_pkg::SLOT_ZERO && !r_zero_i
                    && !(r_kind_i == vdla_pkg::SLOT_ALU && a_zero_i && use_imm_i);
  assign acc_raddr_o = r_addr_i;

  // The row read, at its freshest (W stage, then the row written last cycle, then the RAM).
  always_comb begin
    if (w_valid_q && w_addr_q == c_addr_q) rd = w_data;
    else if (f_valid_q && f_addr_q == c_addr_q) rd = f_data_q;
    else rd = acc_rdata_i;
    a = ((a_zero_i && c_kind_q == vdla_pkg::SLOT_ALU) || c_zero_q) ? '0 : rd;
    if (c_kind_q == vdla_pkg::SLOT_GEMM) b = sum_i;
    else if (use_imm_i) b = {LANES{{16{imm_i[15]}}, imm_i}};
    else if (a_zero_i) b = rd;
    else if (src_fwd_q) b = w_data;  // the source row is the MUL result being written now
    else b = b_q;
  end

  vdla_alu #(.LANES(LANES)) u_alu (
    .clk_i,
    .en_i   (c_alu),
    .mul_hi_i (m_valid_q),
    .zero_i (c_kind_q == vdla_pkg::SLOT_ZERO || (c_kind_q == vdla_pkg::SLOT_ALU && a_zero_i
                                                 && alu_op_i == vdla_pkg::ALU_MUL)),
    .op_i   (c_kind_q == vdla_pkg::SLOT_GEMM ? vdla_pkg::ALU_ADD : alu_op_i),  // GEMM accumulates
    .mul_shift_i (use_imm_i ? 6'd0 : imm_i[5:0]),  // a MUL reading ACC[src] carries its shift in imm
    .a_i    (a),
    .b_i    (b),
    .res_o  (w_data)
  );

  assign wr_valid_o = w_valid_q;
  assign wr_addr_o  = w_addr_q;
  assign wr_data_o  = w_data;
  assign busy_o     = c_valid_q || m_valid_q || w_valid_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      c_valid_q <= 1'b0;
      m_valid_q <= 1'b0;
      w_valid_q <= 1'b0;
      f_valid_q <= 1'b0;
    end else begin
      c_valid_q <= r_valid_i;
      m_valid_q <= c_mul;
      w_valid_q <= (c_alu && !c_mul) || m_valid_q;
      f_valid_q <= w_valid_q;
    end
  end

  always_ff @(posedge clk_i) begin
    c_kind_q  <= r_kind_i;
    c_zero_q  <= r_zero_i;
    c_addr_q  <= r_addr_i;
    c_waddr_q <= r_waddr_i;
    m_addr_q  <= c_waddr_q;
    w_addr_q  <= m_valid_q ? m_addr_q : c_waddr_q;
    f_addr_q  <= w_addr_q;
    if (w_valid_q) f_data_q <= w_data;
    if (c_valid_q && c_kind_q == vdla_pkg::SLOT_SRC) begin
      b_q       <= rd;
      src_fwd_q <= m_valid_q && m_addr_q == c_addr_q;
    end
  end
endmodule
