// The vector ALU: LANES int32 lanes, result registered.
// MIN and ADD wrap like int32; SHR/RSHR clamp the shift to [-31, 31] and shift left for negative amounts
// (RSHR rounds half up); CLIP clamps to [sext8(b[7:0]), sext8(b[15:8])]; REQ shifts right by b[4:0] rounding
// half up and clamps to [b[5] ? 0 : -128, 127] (vdla_pkg::requantize). `zero_i` writes zeros (the reset of a
// GEMM, and the resets whose result is 0 whatever v is: SHR, RSHR, REQ and MUL). With clip_i, CLIP takes its
// bounds from a and clips 0 (the reset CLIP(0, ACC[src]), whose row comes as a). These take one cycle (MUL and
// LSUM two, below): res_o holds the result after en_i.
// LSUM (every lane: the sum of the operand's LANES lanes, wrapping) reads one operand, b (a for the reset
// LSUM(0, ACC[src]), whose row comes as a: clip_a_i). It takes two cycles as a MUL (vdla.cycles.TWO_CYCLE): C forms
// four partial sums of the operand's lanes (two adder levels) into registers, M adds them (two more) and the sum
// comes out through MUL's result (mr), so that the lanes gain no result to select (on the half-width ALU each of
// its two passes sums the whole row).
// What the shifts take from b comes formed in ctl_i (vdla_pkg::alu_lane_ctl(op_i == ALU_REQ, b) per lane): the caller
// forms it before the cycle the lane computes, from the immediate or as the source row is read, so that the
// lane's path starts at its shifter (the timing proxy, docs/rtl.md).
// MUL forms the exact 64-bit product and rounds it right by mul_shift_i (half up; 0 keeps the product's low
// 32 bits), then keeps 32 bits. It takes two cycles (vdla.cycles.mul_extra): with mul_en_i (its slot's first
// cycle in C) each lane registers its four 16x16 partial products of the multiplier operands ma_i and mb_i (the
// caller gives a MUL's a and b there, an SQR's a as both: SQR is a MUL here), one DSP48E1 each with its P register; with en_i in the next cycle it sums
// them, shifts and rounds, from what it registered with the products (the shift); op_i, zero_i, clip_a_i and
// mul_shift_i are not read then. A MUL's reset (zero_i) comes with a or b zero, so its result is 0 (p = 0 and
// R < 2^ms: asserted).
// The OUT path's multiply (EPI mul, vdla_compute) shares the multipliers: with omul_en_i (instead of mul_en_i)
// the products of ma_i and mb_i are registered the same way, and in the next cycle the rounded product goes to
// ores_o instead of res_o, which meanwhile takes the result of the operation in progress (a GEMM's ADD). The
// rounded product is formed once per lane (mr, below), for res_o and ores_o.
// Timing: every operation's result is formed beside the others and one AND-OR of one-hot selects (decoded from
// op_i, zero_i and the lane's ctl.left) takes it, the rounded shift last (lane, below); MUL's second cycle starts
// at registers. Each compare is the sign of a 33-bit (or 35-bit) difference (a carry chain with one LUT in
// front); REQ's int8 clamp (vdla_pkg::requant_limit) compares 2a with bounds that are functions of the shift
// alone, so nothing of REQ's but the shared rounding add follows the shifter.
// Half-width (vdla_pkg::ALU_PASSES 2, the config's alu_lanes; g_half): ADD keeps a lane per accumulator lane and
// one cycle (the GEMMs' accumulation, en_i); every other operation runs in LANES / 2 lanes over two passes of its
// row, each two cycles like a MUL's: with mul_en_i (C) the pass registers its half of a, b and the shift controls
// (the low half with lo_i, else the high), or of the multiplier operands' products (MUL), with the operation,
// zero_i and clip_a_i; in the next cycle (M) the lanes compute from those registers, the first pass into a
// register of its own, the second (en_i) into res_o's high half, the first's result into its low half. No OUT
// path (the config refuses out_multiplier with a half-width ALU): ores_o is zero.
module vdla_alu #(
  parameter int LANES = vdla_pkg::LANES
) (
  input  logic                clk_i,
  input  logic                en_i,         // register the result
  input  logic                mul_en_i,     // register MUL's partial products (the cycle before its en_i)
  input  logic                omul_en_i,    // register the OUT path's partial products (ores_o next cycle)
  input  logic                lo_i,         // half-width: with mul_en_i, the first pass (the low half of the lanes)
  input  logic                zero_i,
  input  logic                clip_a_i,     // CLIP(0, a) instead of CLIP(a, b); LSUM of a instead of b
  input  vdla_pkg::alu_op_e   op_i,
  input  logic [5:0]          mul_shift_i,  // MUL's rounding shift of the 64-bit product
  // alu_lane_ctl(op_i == ALU_REQ, b) of each lane: lane l's alu_lane_ctl_t in ctl_i[l*ALU_CTL_W +: ALU_CTL_W]
  // (a flat vector: Yosys does not read the fields of an array of structs)
  input  logic [LANES*vdla_pkg::ALU_CTL_W-1:0] ctl_i,
  input  logic [LANES*32-1:0] a_i,
  input  logic [LANES*32-1:0] b_i,
  input  logic [LANES*32-1:0] ma_i,         // the multiplier's operands (mul_en_i, omul_en_i)
  input  logic [LANES*32-1:0] mb_i,
  output logic [LANES*32-1:0] res_o,
  output logic [LANES*32-1:0] ores_o        // the OUT path's rounded product, the cycle after omul_en_i
);
  // x < y (signed) as the sign of the 33-bit difference
  function automatic logic slt(logic signed [31:0] x, logic signed [31:0] y);
    slt = 1'(({x[31], x} - {y[31], y}) >> 32);
  endfunction

  // LSUM's first cycle: four partial sums of x's lanes, {lanes l mod 4 = 3, ..., = 0} (wrapping).
  function automatic logic [127:0] quad_sums(logic [LANES*32-1:0] x);
    quad_sums = '0;
    for (int l = 0; l < LANES; l++) quad_sums[(l % 4)*32 +: 32] = quad_sums[(l % 4)*32 +: 32] + x[l*32 +: 32];
  endfunction

  // LSUM's second cycle: the four partial sums added.
  function automatic logic [31:0] quad_total(logic [127:0] q);
    quad_total = (q[0 +: 32] + q[32 +: 32]) + (q[64 +: 32] + q[96 +: 32]);
  endfunction

  // One 4:1 step of a right shift by a registered amount: v >>> (k * unit) for a constant unit, so that each
  // choice is wiring (a shift operator by a variable amount would be shared with the other operations' shifter
  // by synthesis, and mapped as a chain of 2:1 muxes).
  function automatic logic signed [64:0] shr_step(logic signed [64:0] v, int unit, logic [1:0] k);
    case (k)
      2'd0:    shr_step = v;
      2'd1:    shr_step = v >>> unit;
      2'd2:    shr_step = v >>> (2 * unit);
      default: shr_step = v >>> (3 * unit);
    endcase
  endfunction

  // MUL's second cycle: p + R = (hh << 32) + (mid << 16) + ll (R in them), shifted right by ms, its low 32 bits;
  // hh and ll sit side by side, so the sum is one add (65 bits: p + R reaches 2^63 for (-2^31)^2 and ms = 63).
  // The shift is three 4:1 steps on the registered shift's bit pairs (16, 4 and 1 bits a step).
  function automatic logic [31:0] mul_round(logic signed [32:0] hh, logic signed [47:0] mid, logic [31:0] ll,
                                            logic [5:0] ms);
    logic signed [64:0] p;
    p = $signed({hh, ll}) + (65'(mid) <<< 16);
    mul_round = 32'(shr_step(shr_step(shr_step(p, 16, ms[5:4]), 4, ms[3:2]), 1, ms[1:0]));
  endfunction

  // One lane: the operations' results side by side, then the one-hot AND-OR. One rounding right shifter
  // ((2a >> rs) + 1) >> 1 serves SHR, RSHR and REQ, one comparator MIN and MAX. The rounded shift r is the
  // deepest result (operand mux, shifter, add): it joins last, selected for SHR/RSHR and for a REQ within its
  // bounds (whose result is then r itself, an int8), in one LUT after its add; all else is OR'd before.
  // MUL's and SQR's second cycle (mul2) selects the rounded product (mul_res, formed beside the lanes) alone (as
  // LSUM's second cycle its sum, which takes its place). The lanes see the low three bits of the operation (the
  // eight that have a result of their own here; mul2 masks them for SQR and LSUM). Each result is formed under its
  // select (`if (s) x = ...`, zero otherwise: the AND of the AND-OR), so that the Verilated
  // model computes only the selected one (the GEMM's ADD every GEMM cycle) instead of all of them in every lane.
  function automatic logic [31:0] lane(logic [2:0] op, logic zero, logic signed [31:0] a,
                                       logic signed [31:0] b, vdla_pkg::alu_lane_ctl_t ctl, logic clip_a,
                                       logic mul2, logic [31:0] mul_res);
    logic signed [32:0] x;
    logic signed [31:0] v, c_hi, c_lo, r, sl, mm, sum, cl, lo8, mr;
    logic        [15:0] bounds;
    logic        [8:0]  lim;
    logic               on, shift, req, s_r;
    begin
      on    = !zero && !mul2;
      shift = on && (op == 3'(vdla_pkg::ALU_SHR) || op == 3'(vdla_pkg::ALU_RSHR));
      req   = on && op == 3'(vdla_pkg::ALU_REQ);
      {mm, sum, sl, cl, lo8, mr, r, lim} = '0;
      // MIN/MAX: MIN a < b ? a : b, MAX a < b ? b : a
      if (on && (op == 3'(vdla_pkg::ALU_MIN) || op == 3'(vdla_pkg::ALU_MAX)))
        mm = (slt(a, b) ^ (op == 3'(vdla_pkg::ALU_MAX))) ? a : b;
      if (on && op == 3'(vdla_pkg::ALU_ADD)) sum = a + b;
      // SHR/RSHR: left by ls (negative amounts)
      if (shift && ctl.left) sl = a << ctl.ls;
      // REQ (vdla_pkg::requantize): r within the bounds (lim[8]), else the limit; the bounds from rs and relu alone
      if (req) lim = vdla_pkg::requant_limit(a, vdla_pkg::requant_bounds(ctl.rs, ctl.relu));
      if (req && !lim[8]) lo8 = 32'(signed'(lim[7:0]));
      // CLIP: max(v, lo) then min(., hi), the three compares side by side
      if (on && op == 3'(vdla_pkg::ALU_CLIP)) begin
        bounds = clip_a ? a[15:0] : b[15:0];
        v      = clip_a ? '0 : a;
        c_hi   = 32'(signed'(bounds[15:8]));
        c_lo   = 32'(signed'(bounds[7:0]));
        if (slt(c_hi, c_lo) || slt(c_hi, v)) cl = c_hi;
        else if (slt(v, c_lo)) cl = c_lo;
        else cl = v;
      end
      if (mul2) mr = mul_res;
      // SHR/RSHR right by rs (rounding unless SHR), and REQ within its bounds: the rounded shift
      s_r = (shift && !ctl.left) || (req && lim[8]);
      if (s_r) begin
        x = $signed({a, 1'b0}) >>> ctl.rs;  // 2a >> rs: the rounding shift before its rounding add
        r = 32'((x + ((op != 3'(vdla_pkg::ALU_SHR)) ? 33'sd1 : 33'sd0)) >>> 1);
      end
      lane = (mm | sum | sl | cl | lo8 | mr) | r;
    end
  endfunction

  // MUL rounds by adding half of the last place kept, R = 2^(ms-1), then shifting: ((2p >>> ms) + 1) >> 1 is
  // (p + R) >>> ms (floor of a floor). R joins the partial product its place falls in: ll below bit 16, mid
  // (<< 16) below bit 32, hh (<< 32) above; each adds it in its DSP's post-adder.
  // {R's bits in hh, in mid, in ll}: each bit one compare of the shift with a constant (one LUT)
  function automatic logic [62:0] round_half(logic [5:0] ms);
    for (int j = 0; j < 16; j++) begin
      round_half[j]      = ms == 6'(j + 1);
      round_half[16 + j] = ms == 6'(j + 17);
    end
    for (int j = 0; j < 31; j++) round_half[32 + j] = ms == 6'(j + 33);
  endfunction

  // A MUL's first cycle, one lane: a * b's partial products of 16-bit halves (lo unsigned, hi signed) with the
  // rounding addend R's parts, {hh + R_hi (33 bits), hl + lh + R_mid (48), ll + R_lo (32)}: four DSP48 multiplies,
  // mid's add and R in their post-adders (mul_round sums them: p = hh << 32 + mid << 16 + ll).
  function automatic logic [112:0] partials(logic [31:0] a, logic [31:0] b, logic [30:0] r_hi,
                                            logic [15:0] r_mid, logic [15:0] r_lo);
    logic signed [32:0] hh;
    logic signed [47:0] mid;
    logic        [31:0] ll;
    hh  = 33'($signed(a[31:16])) * 33'($signed(b[31:16])) + 33'(r_hi);
    mid = 48'($signed(a[31:16])) * 48'($signed({1'b0, b[15:0]})) + 48'(r_mid)
        + 48'($signed({1'b0, a[15:0]})) * 48'($signed(b[31:16]));
    ll  = 32'(a[15:0]) * 32'(b[15:0]) + 32'(r_lo);
    partials = {hh, mid, ll};
  endfunction

  // LSUM's operand (the reset's row comes as a), and whether the instruction (its operation held) is an LSUM
  logic [LANES*32-1:0] x1;
  logic                lsum_c;
  assign x1     = clip_a_i ? a_i : b_i;
  assign lsum_c = op_i == vdla_pkg::ALU_LSUM;

  if (vdla_pkg::ALU_PASSES == 1) begin : g_full
    // MUL's first cycle: each lane's partials, each part registered in its DSP's P register (no register between
    // the multiply and the post-adder, so that P is the path's start). ll + R < 2^32 and hh + R <= 2^31 (33 bits).
    logic signed [32:0] hh_q [LANES];
    logic signed [47:0] mid_q [LANES];
    logic        [31:0] ll_q [LANES];
    logic         [5:0] ms_q;        // the MUL's shift
    logic               mul2_q;      // the MUL's second cycle: res_o takes its result
    logic               om2_q;       // the OUT path's second cycle: ores_o takes the rounded product
    logic               ls2_q;       // LSUM's second cycle: res_o takes the sum
    logic       [127:0] ls_q;        // LSUM's four partial sums
    always_ff @(posedge clk_i) begin
      mul2_q <= mul_en_i && !lsum_c;
      om2_q  <= omul_en_i;
      ls2_q  <= mul_en_i && lsum_c;
      if (mul_en_i && lsum_c) ls_q <= quad_sums(x1);
      if ((mul_en_i && !lsum_c) || omul_en_i) begin
        logic [15:0] r_lo, r_mid;
        logic [30:0] r_hi;
        {r_hi, r_mid, r_lo} = round_half(mul_shift_i);
        for (int l = 0; l < LANES; l++)
          {hh_q[l], mid_q[l], ll_q[l]} <= partials(ma_i[l*32 +: 32], mb_i[l*32 +: 32], r_hi, r_mid, r_lo);
        ms_q <= mul_shift_i;
      end
    end

    // The rounded product of each lane, once (its 65-bit add and shifter), for res_o (a MUL) and ores_o (the OUT
    // path); formed only in a multiply's second cycle (the Verilated model skips it otherwise; synthesis drops the
    // don't-care select). LSUM's sum (its partial sums added) takes its place in its second cycle.
    logic [31:0] mr [LANES];
    always_comb begin
      for (int l = 0; l < LANES; l++) begin
        mr[l] = 'x;
        if (mul2_q || om2_q) mr[l] = mul_round(hh_q[l], mid_q[l], ll_q[l], ms_q);
        else if (ls2_q) mr[l] = quad_total(ls_q);
      end
    end

    always_ff @(posedge clk_i) begin
      if (en_i) begin
        for (int l = 0; l < LANES; l++)
          res_o[l*32 +: 32] <= lane(3'(op_i), zero_i, a_i[l*32 +: 32], b_i[l*32 +: 32],
                                    ctl_i[l*vdla_pkg::ALU_CTL_W +: vdla_pkg::ALU_CTL_W], clip_a_i,
                                    mul2_q || ls2_q, mr[l]);
      end
      if (om2_q) begin
        for (int l = 0; l < LANES; l++) ores_o[l*32 +: 32] <= mr[l];
      end
    end
    logic unused_lo;
    assign unused_lo = lo_i;
  end else begin : g_half
    localparam int H = LANES / 2;
    // the pass in M: its operation and flags, its half of the operands and controls (registered in C)
    logic                  s2_q, lo2_q, zero2_q, clip2_q, ls2_q, mul2_q;  // mul2_q: a MUL's or SQR's pass
    // a MUL or an SQR (the caller gives an SQR's operand as ma_i and mb_i: the multipliers see a MUL)
    logic                  mul_c;
    assign mul_c = op_i == vdla_pkg::ALU_MUL || op_i == vdla_pkg::ALU_SQR;
    logic [2:0]            op2_q;     // the lanes' operation (the low bits)
    logic [127:0]          ls_q;      // LSUM's four partial sums of the whole row (ls2_q: it is in M)
    logic [H*32-1:0]       a2_q, b2_q, part_q;  // part_q: the first pass's result, the row's low half
    logic [H*vdla_pkg::ALU_CTL_W-1:0] ctl2_q;
    logic signed [32:0]    hh_q [H];
    logic signed [47:0]    mid_q [H];
    logic        [31:0]    ll_q [H];
    logic         [5:0]    ms_q;
    always_ff @(posedge clk_i) begin
      s2_q <= mul_en_i;
      ls2_q <= mul_en_i && lsum_c;
      mul2_q <= mul_en_i && mul_c;
      if (mul_en_i && lsum_c) ls_q <= quad_sums(x1);  // the whole row's (each pass)
      if (mul_en_i) begin
        lo2_q   <= lo_i;
        op2_q   <= 3'(op_i);
        zero2_q <= zero_i;
        clip2_q <= clip_a_i;
        a2_q    <= lo_i ? a_i[0 +: H*32] : a_i[H*32 +: H*32];
        b2_q    <= lo_i ? b_i[0 +: H*32] : b_i[H*32 +: H*32];
        ctl2_q  <= lo_i ? ctl_i[0 +: H*vdla_pkg::ALU_CTL_W] : ctl_i[H*vdla_pkg::ALU_CTL_W +: H*vdla_pkg::ALU_CTL_W];
      end
      if (mul_en_i && mul_c) begin
        logic [15:0] r_lo, r_mid;
        logic [30:0] r_hi;
        logic [H*32-1:0] ma, mb;
        {r_hi, r_mid, r_lo} = round_half(mul_shift_i);
        ma = lo_i ? ma_i[0 +: H*32] : ma_i[H*32 +: H*32];
        mb = lo_i ? mb_i[0 +: H*32] : mb_i[H*32 +: H*32];
        for (int l = 0; l < H; l++)
          {hh_q[l], mid_q[l], ll_q[l]} <= partials(ma[l*32 +: 32], mb[l*32 +: 32], r_hi, r_mid, r_lo);
        ms_q <= mul_shift_i;
      end
    end

    // M: the half's results (zero unless a pass is in M: the AND-OR of each lane's selects); C: ADD over all lanes
    logic [H*32-1:0] r2;
    logic [31:0]     mr;
    logic            mul2;
    always_comb begin
      mul2 = mul2_q;
      for (int l = 0; l < H; l++) begin
        mr = 'x;
        if (mul2) mr = mul_round(hh_q[l], mid_q[l], ll_q[l], ms_q);
        else if (ls2_q) mr = quad_total(ls_q);
        r2[l*32 +: 32] = lane(op2_q, zero2_q || !s2_q, a2_q[l*32 +: 32], b2_q[l*32 +: 32],
                              ctl2_q[l*vdla_pkg::ALU_CTL_W +: vdla_pkg::ALU_CTL_W], clip2_q, mul2 || ls2_q,
                              mr);
      end
    end

    always_ff @(posedge clk_i) begin
      if (s2_q && lo2_q) part_q <= r2;
      if (en_i) begin
        if (s2_q) begin  // the second pass in M (en_i: it writes)
          res_o <= {r2, part_q};
        end else begin   // ADD (a GEMM's accumulation), or zeros
          for (int l = 0; l < LANES; l++)
            res_o[l*32 +: 32] <= zero_i ? 32'd0 : a_i[l*32 +: 32] + b_i[l*32 +: 32];
        end
      end
    end
    assign ores_o = '0;
    logic unused_half;
    assign unused_half = omul_en_i;
  end

`ifdef INC_ASSERT
  // (the ALU has no reset: its assertions are never disabled)
  for (genvar l = 0; l < LANES; l++) begin : g_mul_reset
    `ASSERT(a_mul_reset, mul_en_i && zero_i && op_i == vdla_pkg::ALU_MUL |-> ma_i[l*32 +: 32] == '0 || mb_i[l*32 +: 32] == '0,
            "alu: a MUL's reset has neither operand zero", clk_i, 1'b0)  // the lane: g_mul_reset[l] in the name
  end
  `ASSERT(a_one_multiply, !(mul_en_i && omul_en_i), "alu: a MUL and the OUT path multiply in the same cycle",
          clk_i, 1'b0)
`endif
endmodule
