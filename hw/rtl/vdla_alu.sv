// The vector ALU: LANES int32 lanes, result registered.
// MIN and ADD wrap like int32; SHR/RSHR clamp the shift to [-31, 31] and shift left for negative amounts
// (RSHR rounds half up); CLIP clamps to [sext8(b[7:0]), sext8(b[15:8])]; REQ shifts right by b[4:0] rounding
// half up and clamps to [b[5] ? 0 : -128, 127] (vdla_pkg::requantize). `zero_i` writes zeros (the reset of a
// GEMM, and a MUL with reset: 0 * v rounds to 0). These take one cycle: res_o holds the result after en_i.
// MUL forms the exact 64-bit product and rounds it right by mul_shift_i (half up; 0 keeps the product's low
// 32 bits), then keeps 32 bits. Two lanes share each multiplier and its rounding shifter (MUL_UNITS =
// LANES/2 of them): the cycle with en_i multiplies lanes [0, MUL_UNITS) and keeps the upper lanes' operands,
// the next cycle (mul_hi_i, which the caller raises exactly then) multiplies lanes [MUL_UNITS, LANES), so
// res_o holds a MUL's result one cycle later than the other operations' (the ALU's MUL takes alu_ii >= 2
// cycles per element, vdla.cycles). en_i never coincides with mul_hi_i.
module vdla_alu #(
  parameter int LANES = vdla_pkg::LANES
) (
  input  logic                clk_i,
  input  logic                en_i,
  input  logic                mul_hi_i,     // the second cycle of a MUL started by en_i in the cycle before
  input  logic                zero_i,
  input  vdla_pkg::alu_op_e   op_i,
  input  logic [5:0]          mul_shift_i,  // MUL's rounding shift of the 64-bit product
  input  logic [LANES*32-1:0] a_i,
  input  logic [LANES*32-1:0] b_i,
  output logic [LANES*32-1:0] res_o
);
  localparam int MUL_UNITS = LANES / 2;  // LANES = BATCH * BLOCK_OUT, a power of two >= 2
  localparam int HB        = MUL_UNITS * 32;

  // One comparator serves MIN and MAX, one rounding right shifter (vdla_pkg::round_shift) SHR, RSHR and REQ.
  function automatic logic [31:0] lane_op(vdla_pkg::alu_op_e op, logic signed [31:0] a, logic signed [31:0] b);
    logic signed [5:0]  s;
    logic signed [31:0] lo, hi;
    logic signed [32:0] r;
    logic               lt;
    begin
      s  = (b > 32'sd31) ? 6'sd31 : (b < -32'sd31) ? -6'sd31 : 6'(b);
      lt = a < b;
      // REQ: b[4:0], rounding; RSHR: s >= 0, rounding; SHR: s >= 0, truncating
      r  = vdla_pkg::round_shift(a, op == vdla_pkg::ALU_REQ ? b[4:0] : (s < 0 ? 5'd0 : s[4:0]),
                                 op != vdla_pkg::ALU_SHR);
      lane_op = a;
      case (op)
        vdla_pkg::ALU_MIN: lane_op = lt ? a : b;
        vdla_pkg::ALU_MAX: lane_op = lt ? b : a;
        vdla_pkg::ALU_ADD: lane_op = a + b;
        vdla_pkg::ALU_SHR, vdla_pkg::ALU_RSHR: lane_op = (s < 0) ? a << (-s) : r[31:0];
        vdla_pkg::ALU_CLIP: begin
          lo = 32'(signed'(b[7:0]));
          hi = 32'(signed'(b[15:8]));
          lane_op = (a < lo) ? lo : a;
          if (signed'(lane_op) > hi) lane_op = hi;
        end
        vdla_pkg::ALU_REQ: lane_op = 32'(signed'(vdla_pkg::clamp8(r, b[5])));  // vdla_pkg::requantize
        default: lane_op = a;  // MUL goes through the shared multipliers
      endcase
    end
  endfunction

  // round half up after the shift ((p >>> ms) + p[ms-1]): no overflow for any shift
  function automatic logic [31:0] mul_round(logic signed [31:0] a, logic signed [31:0] b, logic [5:0] ms);
    logic signed [63:0] p;
    begin
      p = 64'(a) * 64'(b);  // exact: |a * b| <= 2^62
      mul_round = (ms == 6'd0) ? p[31:0] : 32'((p >>> ms) + $signed({63'd0, p[ms - 6'd1]}));
    end
  endfunction

  // The shared multipliers: the lower lanes' operands in the first cycle, the kept upper ones in the second.
  logic [HB-1:0] a_hi_q, b_hi_q, mul_a, mul_b, mul_res;
  logic [5:0]    shift_q, mul_shift;
  assign mul_a     = mul_hi_i ? a_hi_q : a_i[HB-1:0];
  assign mul_b     = mul_hi_i ? b_hi_q : b_i[HB-1:0];
  assign mul_shift = mul_hi_i ? shift_q : mul_shift_i;
  always_comb begin
    for (int m = 0; m < MUL_UNITS; m++) begin
      mul_res[m*32 +: 32] = mul_round(mul_a[m*32 +: 32], mul_b[m*32 +: 32], mul_shift);
    end
  end

  always_ff @(posedge clk_i) begin
    if (en_i) begin
      if (zero_i) begin
        res_o <= '0;
      end else if (op_i == vdla_pkg::ALU_MUL) begin
        res_o[HB-1:0] <= mul_res;
        a_hi_q        <= a_i[LANES*32-1:HB];
        b_hi_q        <= b_i[LANES*32-1:HB];
        shift_q       <= mul_shift_i;
      end else begin
        for (int l = 0; l < LANES; l++) begin
          res_o[l*32 +: 32] <= lane_op(op_i, a_i[l*32 +: 32], b_i[l*32 +: 32]);
        end
      end
    end else if (mul_hi_i) begin
      res_o[LANES*32-1:HB] <= mul_res;
    end
  end
endmodule
