// The vector ALU: LANES int32 lanes, result registered.
// MIN and ADD wrap like int32; SHR/RSHR clamp the shift to [-31, 31] and shift left for negative amounts
// (RSHR rounds half up); CLIP clamps to [sext8(b[7:0]), sext8(b[15:8])]; REQ shifts right by b[4:0] rounding
// half up and clamps to [b[5] ? 0 : -128, 127] (vdla_pkg::requantize). `zero_i` writes zeros (the reset of a
// GEMM, and the resets whose result is 0 whatever v is: SHR, RSHR, REQ and MUL). With clip_i, CLIP takes its
// bounds from a and clips 0 (the reset CLIP(0, ACC[src]), whose row comes as a). These take one cycle: res_o
// holds the result after en_i.
// What the shifts take from b comes formed in ctl_i (vdla_pkg::alu_lane_ctl(op_i == ALU_REQ, b) per lane): the caller
// forms it before the cycle the lane computes, from the immediate or as the source row is read, so that the
// lane's path starts at its shifter (the timing proxy, docs/rtl.md).
// MUL forms the exact 64-bit product and rounds it right by mul_shift_i (half up; 0 keeps the product's low
// 32 bits), then keeps 32 bits. Every lane has its multiplier (4 DSP48E1 each), so a MUL takes one cycle like
// the other operations.
module vdla_alu #(
  parameter int LANES = vdla_pkg::LANES
) (
  input  logic                clk_i,
  input  logic                en_i,
  input  logic                zero_i,
  input  logic                clip_a_i,     // CLIP(0, a) instead of CLIP(a, b)
  input  vdla_pkg::alu_op_e   op_i,
  input  logic [5:0]          mul_shift_i,  // MUL's rounding shift of the 64-bit product
  // alu_lane_ctl(op_i == ALU_REQ, b) of each lane: lane l's alu_lane_ctl_t in ctl_i[l*ALU_CTL_W +: ALU_CTL_W]
  // (a flat vector: Yosys does not read the fields of an array of structs)
  input  logic [LANES*vdla_pkg::ALU_CTL_W-1:0] ctl_i,
  input  logic [LANES*32-1:0] a_i,
  input  logic [LANES*32-1:0] b_i,
  output logic [LANES*32-1:0] res_o
);
  // One comparator serves MIN and MAX, one rounding right shifter (vdla_pkg::round_shift) SHR, RSHR and REQ;
  // REQ's clamp tests the shifter's output beside the rounding add (vdla_pkg::clamp8_x).
  function automatic logic [31:0] lane_op(vdla_pkg::alu_op_e op, logic signed [31:0] a, logic signed [31:0] b,
                                          vdla_pkg::alu_lane_ctl_t ctl, logic clip_a);
    logic signed [32:0] x;
    logic signed [31:0] r, v;
    logic        [15:0] bounds;
    logic               lt, v_big, v_small, gt_hi, lt_lo;
    begin
      x  = $signed({a, 1'b0}) >>> ctl.rs;  // 2a >> rs: the rounding shift before its rounding add
      r  = 32'((x + ((op != vdla_pkg::ALU_SHR) ? 33'sd1 : 33'sd0)) >>> 1);
      lt = a < b;
      // CLIP: v against the int8 bounds, from v's range (above or below int8) and its low byte
      bounds  = clip_a ? a[15:0] : b[15:0];
      v       = clip_a ? '0 : a;
      v_big   = !v[31] && v[30:7] != '0;  // v > 127
      v_small = v[31] && v[30:7] != '1;   // v < -128
      gt_hi   = v_big || (!v_small && $signed(v[7:0]) > $signed(bounds[15:8]));
      lt_lo   = v_small || (!v_big && $signed(v[7:0]) < $signed(bounds[7:0]));
      lane_op = a;
      case (op)
        vdla_pkg::ALU_MIN: lane_op = lt ? a : b;
        vdla_pkg::ALU_MAX: lane_op = lt ? b : a;
        vdla_pkg::ALU_ADD: lane_op = a + b;
        vdla_pkg::ALU_SHR, vdla_pkg::ALU_RSHR: lane_op = ctl.left ? a << ctl.ls : r;
        // max(a, lo) then min(., hi), the three compares side by side
        vdla_pkg::ALU_CLIP: begin
          if ($signed(bounds[7:0]) > $signed(bounds[15:8]) || gt_hi) lane_op = 32'(signed'(bounds[15:8]));
          else if (lt_lo) lane_op = 32'(signed'(bounds[7:0]));
          else lane_op = v;
        end
        vdla_pkg::ALU_REQ: lane_op = 32'(signed'(vdla_pkg::clamp8_x(x, ctl.relu)));  // vdla_pkg::requantize
        default: lane_op = a;  // MUL goes through mul_round
      endcase
    end
  endfunction

  // round half up after the shift ((p >>> ms) + p[ms-1], as ((2p >>> ms) + 1) >> 1: the shift amount is ms,
  // with no subtract before the shifter): no overflow for any shift
  function automatic logic [31:0] mul_round(logic signed [31:0] a, logic signed [31:0] b, logic [5:0] ms);
    logic signed [63:0] p;
    logic        [32:0] x;
    begin
      p = 64'(a) * 64'(b);  // exact: |a * b| <= 2^62
      x = 33'($signed({p, 1'b0}) >>> ms);  // the low 33 bits of p >>> (ms - 1)
      mul_round = (ms == 6'd0) ? p[31:0] : 32'((x + 33'd1) >> 1);
    end
  endfunction

  always_ff @(posedge clk_i) begin
    if (en_i) begin
      for (int l = 0; l < LANES; l++) begin
        if (zero_i) res_o[l*32 +: 32] <= '0;
        else if (op_i == vdla_pkg::ALU_MUL) res_o[l*32 +: 32] <= mul_round(a_i[l*32 +: 32], b_i[l*32 +: 32], mul_shift_i);
        else res_o[l*32 +: 32] <= lane_op(op_i, a_i[l*32 +: 32], b_i[l*32 +: 32],
                                          ctl_i[l*vdla_pkg::ALU_CTL_W +: vdla_pkg::ALU_CTL_W], clip_a_i);
      end
    end
  end
endmodule
