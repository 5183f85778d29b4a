// The vector ALU: LANES int32 lanes, result registered.
// MIN and ADD wrap like int32; SHR/RSHR clamp the shift to [-31, 31] and shift left for negative amounts
// (RSHR rounds half up); CLIP clamps to [sext8(b[7:0]), sext8(b[15:8])]; REQ shifts right by b[4:0] rounding
// half up and clamps to [b[5] ? 0 : -128, 127] (vdla_pkg::requantize). `zero_i` writes zeros (the reset of a
// GEMM, and the resets whose result is 0 whatever v is: SHR, RSHR, REQ and MUL). With clip_i, CLIP takes its
// bounds from a and clips 0 (the reset CLIP(0, ACC[src]), whose row comes as a). These take one cycle (MUL two, below):
// res_o holds the result after en_i.
// What the shifts take from b comes formed in ctl_i (vdla_pkg::alu_lane_ctl(op_i == ALU_REQ, b) per lane): the caller
// forms it before the cycle the lane computes, from the immediate or as the source row is read, so that the
// lane's path starts at its shifter (the timing proxy, docs/rtl.md).
// MUL forms the exact 64-bit product and rounds it right by mul_shift_i (half up; 0 keeps the product's low
// 32 bits), then keeps 32 bits. It takes two cycles (vdla.cycles.mul_extra): with mul_en_i (its slot's first
// cycle in C) each lane registers its four 16x16 partial products, one DSP48E1 each with its P register; with
// en_i in the next cycle it sums them, shifts and rounds (zero_i and clip_a_i are not read then: a MUL's
// reset has a or b zero, so its product is). The caller keeps the operation and the shift for both cycles.
// Timing: every operation's result is formed beside the others and one AND-OR of one-hot selects (decoded from
// op_i, zero_i and the lane's ctl.left) takes it; each compare is the sign of a 33-bit (or 35-bit) difference
// (a carry chain with one LUT in front); REQ's int8 clamp (vdla_pkg::requant_clamp) compares 2a with bounds
// that are functions of the shift alone, so only the low byte's rounding follows the shifter.
module vdla_alu #(
  parameter int LANES = vdla_pkg::LANES
) (
  input  logic                clk_i,
  input  logic                en_i,         // register the result
  input  logic                mul_en_i,     // register MUL's partial products (the cycle before its en_i)
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
  // x < y (signed) as the sign of the 33-bit difference
  function automatic logic slt(logic signed [31:0] x, logic signed [31:0] y);
    slt = 1'(({x[31], x} - {y[31], y}) >> 32);
  endfunction

  // One lane: the operations' results side by side, then the one-hot AND-OR. One rounding right shifter
  // ((2a >> rs) + 1) >> 1 serves SHR, RSHR and REQ, one comparator MIN and MAX.
  function automatic logic [31:0] lane(vdla_pkg::alu_op_e op, logic zero, logic signed [31:0] a,
                                       logic signed [31:0] b, vdla_pkg::alu_lane_ctl_t ctl, logic clip_a,
                                       logic [31:0] mr, logic mul_zero);
    logic signed [32:0] x;
    logic signed [31:0] v, c_hi, c_lo, r, sl, mm, sum, cl, rq;
    logic        [15:0] bounds;
    logic               lt, s_mm, s_add, s_r, s_l, s_clip, s_req, s_mul;
    begin
      // MIN/MAX: MIN lt ? a : b, MAX lt ? b : a
      lt = slt(a, b);
      mm = (lt ^ (op == vdla_pkg::ALU_MAX)) ? a : b;
      sum = a + b;
      // SHR/RSHR: right by rs (rounding unless SHR) or left by ls
      x  = $signed({a, 1'b0}) >>> ctl.rs;  // 2a >> rs: the rounding shift before its rounding add
      r  = 32'((x + ((op != vdla_pkg::ALU_SHR) ? 33'sd1 : 33'sd0)) >>> 1);
      sl = a << ctl.ls;
      // REQ (vdla_pkg::requantize): the clamp on the shared shifter's low bits, its bounds from rs and relu alone
      rq = 32'(signed'(vdla_pkg::requant_clamp(a, x[8:0], vdla_pkg::requant_bounds(ctl.rs, ctl.relu))));
      // CLIP: max(v, lo) then min(., hi), the three compares side by side
      bounds = clip_a ? a[15:0] : b[15:0];
      v      = clip_a ? '0 : a;
      c_hi   = 32'(signed'(bounds[15:8]));
      c_lo   = 32'(signed'(bounds[7:0]));
      if (slt(c_hi, c_lo) || slt(c_hi, v)) cl = c_hi;
      else if (slt(v, c_lo)) cl = c_lo;
      else cl = v;
      // the result's one-hot selects
      s_mm   = !zero && (op == vdla_pkg::ALU_MIN || op == vdla_pkg::ALU_MAX);
      s_add  = !zero && op == vdla_pkg::ALU_ADD;
      s_r    = !zero && (op == vdla_pkg::ALU_SHR || op == vdla_pkg::ALU_RSHR) && !ctl.left;
      s_l    = !zero && (op == vdla_pkg::ALU_SHR || op == vdla_pkg::ALU_RSHR) && ctl.left;
      s_clip = !zero && op == vdla_pkg::ALU_CLIP;
      s_req  = !zero && op == vdla_pkg::ALU_REQ;
      s_mul  = !mul_zero && op == vdla_pkg::ALU_MUL;  // zero and mr registered in MUL's first cycle
      lane = ({32{s_mm}} & mm) | ({32{s_add}} & sum) | ({32{s_r}} & r) | ({32{s_l}} & sl)
           | ({32{s_clip}} & cl) | ({32{s_req}} & rq) | ({32{s_mul}} & mr);
    end
  endfunction

  // MUL rounds by adding half of the last place kept, R = 2^(ms-1), then shifting: ((2p >>> ms) + 1) >> 1 is
  // (p + R) >>> ms (floor of a floor). R joins the sum of the partial products: below bit 16 in the low bits
  // of mid << 16 (which are zero), else in mid's own sum.
  logic [15:0] r_lo;
  logic [47:0] r_mid;
  always_comb begin
    r_lo  = '0;
    r_mid = '0;
    if (mul_shift_i != '0 && mul_shift_i <= 6'd16) r_lo = 16'd1 << (mul_shift_i - 1'b1);
    if (mul_shift_i > 6'd16) r_mid = 48'd1 << (mul_shift_i - 6'd17);
  end

  // MUL's first cycle: a * b from partial products of 16-bit halves (lo unsigned, hi signed), p = hh << 32
  // + mid << 16 + ll with mid = hl + lh (+ R's part): four DSP48E1 multiplies, mid's adds in their post-adders,
  // each registered in its DSP's P register.
  logic signed [31:0] hh_q [LANES];
  logic signed [47:0] mid_q [LANES];
  logic        [31:0] ll_q [LANES];
  logic        [15:0] r_lo_q;
  logic               mul_zero_q;  // the MUL's reset writes zeros
  always_ff @(posedge clk_i) begin
    if (mul_en_i) begin
      for (int l = 0; l < LANES; l++) begin
        hh_q[l]  <= 32'($signed(a_i[l*32 + 16 +: 16])) * 32'($signed(b_i[l*32 + 16 +: 16]));
        mid_q[l] <= 48'($signed(a_i[l*32 + 16 +: 16])) * 48'($signed({1'b0, b_i[l*32 +: 16]})) + $signed(r_mid)
                  + 48'($signed({1'b0, a_i[l*32 +: 16]})) * 48'($signed(b_i[l*32 + 16 +: 16]));
        ll_q[l]  <= 32'(a_i[l*32 +: 16]) * 32'(b_i[l*32 +: 16]);
      end
      r_lo_q     <= r_lo;
      mul_zero_q <= zero_i;
    end
  end

  // MUL's second cycle: (p + R) >>> ms, its low 32 bits (ms = 0 gives p); hh and ll sit side by side, so the
  // sum is one add (65 bits: p + R reaches 2^63 for (-2^31)^2 and ms = 63)
  function automatic logic [31:0] mul_round(logic signed [31:0] hh, logic signed [47:0] mid, logic [31:0] ll,
                                            logic [15:0] lo_r, logic [5:0] ms);
    logic signed [64:0] p;
    p = 65'($signed({hh, ll})) + ((65'(mid) <<< 16) | 65'(lo_r));
    mul_round = 32'(p >>> ms);
  endfunction

  always_ff @(posedge clk_i) begin
    if (en_i) begin
      for (int l = 0; l < LANES; l++)
        res_o[l*32 +: 32] <= lane(op_i, zero_i, a_i[l*32 +: 32], b_i[l*32 +: 32],
                                  ctl_i[l*vdla_pkg::ALU_CTL_W +: vdla_pkg::ALU_CTL_W], clip_a_i,
                                  mul_round(hh_q[l], mid_q[l], ll_q[l], r_lo_q, mul_shift_i), mul_zero_q);
    end
  end
endmodule
