// The vector ALU: LANES int32 lanes, one operation per cycle, result registered.
// MIN and ADD wrap like int32; MUL forms the exact 64-bit product and rounds it right by mul_shift_i
// (half up; 0 keeps the product's low 32 bits), then keeps 32 bits; SHR/RSHR clamp the shift to [-31, 31] and
// shift left for negative amounts (RSHR rounds half up); CLIP clamps to [sext8(b[7:0]), sext8(b[15:8])];
// REQ shifts right by b[4:0] rounding half up and clamps to [b[5] ? 0 : -128, 127] (vdla_pkg::requantize).
// `zero_i` writes zeros (the reset of a GEMM).
module vdla_alu #(
  parameter int LANES = vdla_pkg::LANES
) (
  input  logic                clk_i,
  input  logic                en_i,
  input  logic                zero_i,
  input  vdla_pkg::alu_op_e   op_i,
  input  logic [5:0]          mul_shift_i,  // MUL's rounding shift of the 64-bit product
  input  logic [LANES*32-1:0] a_i,
  input  logic [LANES*32-1:0] b_i,
  output logic [LANES*32-1:0] res_o
);
  function automatic logic [31:0] lane_op(vdla_pkg::alu_op_e op, logic signed [31:0] a, logic signed [31:0] b,
                                          logic [5:0] ms);
    logic signed [5:0]  s;
    logic signed [31:0] lo, hi;
    logic signed [63:0] p;
    begin
      s = (b > 32'sd31) ? 6'sd31 : (b < -32'sd31) ? -6'sd31 : 6'(b);
      lane_op = a;
      case (op)
        vdla_pkg::ALU_MIN: lane_op = (a < b) ? a : b;
        vdla_pkg::ALU_MAX: lane_op = (a > b) ? a : b;
        vdla_pkg::ALU_ADD: lane_op = a + b;
        vdla_pkg::ALU_MUL: begin
          p = 64'(a) * 64'(b);  // exact: |a * b| <= 2^62
          // round half up after the shift ((p >>> ms) + p[ms-1]): no overflow for any shift
          lane_op = (ms == 6'd0) ? p[31:0] : 32'((p >>> ms) + $signed({63'd0, p[ms - 6'd1]}));
        end
        vdla_pkg::ALU_SHR, vdla_pkg::ALU_RSHR: begin
          if (s < 0) begin
            lane_op = a << (-s);
          end else if (op == vdla_pkg::ALU_RSHR && s != 0) begin
            lane_op = 32'((33'(a) + (33'sd1 <<< (s - 1))) >>> s);  // in 33 bits: no overflow
          end else begin
            lane_op = a >>> s;
          end
        end
        vdla_pkg::ALU_CLIP: begin
          lo = 32'(signed'(b[7:0]));
          hi = 32'(signed'(b[15:8]));
          lane_op = (a < lo) ? lo : a;
          if (signed'(lane_op) > hi) lane_op = hi;
        end
        vdla_pkg::ALU_REQ: lane_op = 32'(signed'(vdla_pkg::requantize(a, b[4:0], b[5])));
        default: lane_op = a;
      endcase
    end
  endfunction

  always_ff @(posedge clk_i) begin
    if (en_i) begin
      for (int l = 0; l < LANES; l++) begin
        res_o[l*32 +: 32] <= zero_i ? 32'd0 : lane_op(op_i, a_i[l*32 +: 32], b_i[l*32 +: 32], mul_shift_i);
      end
    end
  end
endmodule
