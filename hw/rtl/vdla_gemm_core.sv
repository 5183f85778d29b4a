// The GEMM core: BATCH x BLOCK_OUT dot products of BLOCK_IN int8 pairs per cycle, in two pipeline
// stages. sum[b][o] = sum_i inp[b][i] * wgt[o][i], as int32 (exact: at most 20 significant bits).
//
// Two int8 products that share an input share one multiplier (one DSP48): with w1 = wgt[o][i],
// w2 = wgt[o + BLOCK_OUT/2][i] and a = inp[b][i], P = (w2 * 2^16 + w1) * a + 2^15 = w2*a * 2^16 +
// (w1*a + 2^15), where 0 <= w1*a + 2^15 < 2^16 (|w1*a| <= 2^14): w2*a = P >> 16 and
// w1*a = P[15:0] - 2^15.
module vdla_gemm_core #(
  parameter int BATCH     = vdla_pkg::BATCH,
  parameter int BLOCK_IN  = vdla_pkg::BLOCK_IN,
  parameter int BLOCK_OUT = vdla_pkg::BLOCK_OUT  // even
) (
  input  logic                              clk_i,
  input  logic                              valid_i,
  input  logic [BATCH*BLOCK_IN*8-1:0]       inp_i,   // [b][i] int8
  input  logic [BLOCK_OUT*BLOCK_IN*8-1:0]   wgt_i,   // [o][i] int8
  output logic [BATCH*BLOCK_OUT*32-1:0]     sum_o    // [b][o] int32, two cycles after valid_i
);
  localparam int LANES = BATCH * BLOCK_OUT;
  localparam int HALF  = BLOCK_OUT / 2;
  // The first stage sums the products of GROUP pairs, the second the BLOCK_IN / GROUP group sums: the adder
  // tree split so that neither stage's path (block RAM, multiplier, adds) exceeds the timing proxy's target.
  localparam int GROUP  = 2;
  localparam int GROUPS = (BLOCK_IN + GROUP - 1) / GROUP;
  localparam int GW     = 16 + $clog2(GROUP);  // a group sum: |sum| <= GROUP * 2^14, signed

  // One group of one lane pair: {w2.a, w1.a} summed over pairs i0 .. i0 + GROUP - 1 below BLOCK_IN (a, w1, w2:
  // one row each); w1 * a is P[15:0] - 2^15, P[15:0] with its top bit inverted, sign-extended.
  function automatic logic [2*GW-1:0] group_dots(logic [BLOCK_IN*8-1:0] a, logic [BLOCK_IN*8-1:0] w1,
                                                 logic [BLOCK_IN*8-1:0] w2, int i0);
    logic signed [GW-1:0] lo, hi;
    lo = '0;
    hi = '0;
    for (int i = i0; i < i0 + GROUP && i < BLOCK_IN; i++) begin
      logic signed [24:0] packed_w;
      logic signed [31:0] p;
      packed_w = (25'($signed(w2[i*8 +: 8])) <<< 16) + 25'($signed(w1[i*8 +: 8]));
      p = 32'(packed_w) * 32'($signed(a[i*8 +: 8])) + 32'sd32768;
      lo = lo + GW'($signed({~p[15], p[14:0]}));
      hi = hi + GW'(p >>> 16);
    end
    group_dots = {hi, lo};
  endfunction

  // The sum of one lane's group sums, as a balanced adder tree
  function automatic logic [31:0] tree(logic [GROUPS*GW-1:0] g);
    logic signed [31:0] s [GROUPS];
    for (int i = 0; i < GROUPS; i++) s[i] = 32'($signed(g[i*GW +: GW]));
    for (int w = GROUPS; w > 1; w = (w + 1) / 2) begin
      for (int i = 0; i < w / 2; i++) s[i] = s[2*i] + s[2*i + 1];
      if (w % 2 == 1) s[w / 2] = s[w - 1];
    end
    tree = s[0];
  endfunction

  localparam int LW = GROUPS * GW;
  logic [LANES*LW-1:0] grp_q;  // lane l's group sums, group g's in [l*LW + g*GW +: GW]
  logic                valid_q;

  always_ff @(posedge clk_i) begin
    valid_q <= valid_i;
    if (valid_i) begin
      for (int b = 0; b < BATCH; b++) begin
        for (int o = 0; o < HALF; o++) begin
          for (int g = 0; g < GROUPS; g++) begin
            logic [2*GW-1:0] d;
            d = group_dots(inp_i[b*BLOCK_IN*8 +: BLOCK_IN*8], wgt_i[o*BLOCK_IN*8 +: BLOCK_IN*8],
                           wgt_i[(o + HALF)*BLOCK_IN*8 +: BLOCK_IN*8], g*GROUP);
            grp_q[(b*BLOCK_OUT + o)*LW + g*GW +: GW]        <= d[GW-1:0];
            grp_q[(b*BLOCK_OUT + o + HALF)*LW + g*GW +: GW] <= d[2*GW-1:GW];
          end
        end
      end
    end
    if (valid_q) begin
      for (int l = 0; l < LANES; l++) sum_o[l*32 +: 32] <= tree(grp_q[l*LW +: LW]);
    end
  end
endmodule
