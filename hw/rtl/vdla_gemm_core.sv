// The GEMM core: BATCH x BLOCK_OUT dot products of BLOCK_IN int8 pairs per cycle, in two pipeline
// stages. sum[b][o] = sum_i inp[b][i] * wgt[o][i], as int32 (exact: at most 20 significant bits).
//
// Two int8 products that share an input share one multiplier (one DSP48): with w1 = wgt[o][i],
// w2 = wgt[o + BLOCK_OUT/2][i] and a = inp[b][i], P = (w2 * 2^16 + w1) * a + 2^15 = w2*a * 2^16 +
// (w1*a + 2^15), where 0 <= w1*a + 2^15 < 2^16 (|w1*a| <= 2^14): w2*a = P >> 16 and
// w1*a = P[15:0] - 2^15.
//
// The depthwise mode (dw_i; BATCH 1, BLOCK_IN == BLOCK_OUT): pair (o, i) takes its own input, dwa_i[o][i]
// (vdla_compute_loop selects it from the window and registers it), in place of the shared inp_i[i]; the
// weights are the GEMM's (the program zeroes the rows of the lanes a pass does not update).
module vdla_gemm_core #(
  parameter int BATCH     = vdla_pkg::BATCH,
  parameter int BLOCK_IN  = vdla_pkg::BLOCK_IN,
  parameter int BLOCK_OUT = vdla_pkg::BLOCK_OUT  // even
) (
  input  logic                              clk_i,
  input  logic                              valid_i,
  input  logic [BATCH*BLOCK_IN*8-1:0]       inp_i,   // [b][i] int8
  input  logic [BLOCK_OUT*BLOCK_IN*8-1:0]   wgt_i,   // [o][i] int8
  input  logic                              dw_i,    // the depthwise mode
  input  logic [BLOCK_OUT/2*BLOCK_IN*8-1:0] dwa_i,   // [o][i] int8: pair (o, i)'s input in the depthwise mode
  output logic [BATCH*BLOCK_OUT*32-1:0]     sum_o    // [b][o] int32, two cycles after valid_i
);
  localparam int LANES = BATCH * BLOCK_OUT;
  localparam int HALF  = BLOCK_OUT / 2;
  // The first stage sums the products of GROUP pairs, the second the BLOCK_IN / GROUP group sums: the adder
  // tree split so that neither stage's path (block RAM, multiplier, adds) exceeds the timing proxy's target.
  localparam int GROUP  = 2;
  localparam int GROUPS = (BLOCK_IN + GROUP - 1) / GROUP;
  localparam int GW     = 16 + $clog2(GROUP);  // a group sum: |sum| <= GROUP * 2^14, signed
  localparam int SW     = GW + $clog2(GROUPS);  // a lane's sum, signed
  localparam bit DW     = vdla_pkg::DW_SUPPORTED != 0 && BATCH == 1 && BLOCK_IN == BLOCK_OUT;

  // A pair's input: the shared inp_i[b][i], or its own in the depthwise mode
  function automatic logic [7:0] input_of(int b, int o, int i);
    input_of = (DW && dw_i) ? dwa_i[(o*BLOCK_IN + i)*8 +: 8] : inp_i[(b*BLOCK_IN + i)*8 +: 8];
  endfunction

  // The shared multiplier of one input pair: P = (w2 * 2^16 + w1) * a + 2^15 (8-bit operands, so that the
  // Verilated model passes machine words, not slices of the wide rows)
  function automatic logic signed [31:0] pair_product(logic [7:0] w1, logic [7:0] w2, logic [7:0] a);
    logic signed [24:0] packed_w;
    packed_w     = (25'($signed(w2)) <<< 16) + 25'($signed(w1));
    pair_product = 32'(packed_w) * 32'($signed(a)) + 32'sd32768;
  endfunction

  // lane l's group sums, group g's in [(l*GROUPS + g)*32 +: 32]: GW significant bits sign-extended to a
  // word (synthesis merges the copies of the sign's flip-flop; the Verilated model reads whole words)
  logic [LANES*GROUPS*32-1:0] grp_q;
  logic                       valid_q;

  // The first stage: each group g of each lane pair, {w2.a, w1.a} summed over the pairs g*GROUP ..
  // g*GROUP + GROUP - 1 below BLOCK_IN; w1 * a is P[15:0] - 2^15, P[15:0] with its top bit inverted,
  // sign-extended. The second: the sum of each lane's group sums, as a balanced adder tree. Sums are formed
  // in 32-bit words and cut to their exact widths where registered (GW, SW bits): the same logic for
  // synthesis, machine arithmetic for the Verilated model (the GEMM core is most of its work per cycle).
  always_ff @(posedge clk_i) begin
    valid_q <= valid_i;
    if (valid_i) begin
      for (int b = 0; b < BATCH; b++) begin
        for (int o = 0; o < HALF; o++) begin
          for (int g = 0; g < GROUPS; g++) begin
            logic signed [31:0] lo, hi;  // only the low GW bits are kept (synthesis drops the adders' others)
            lo = '0;
            hi = '0;
            for (int i = g * GROUP; i < g * GROUP + GROUP && i < BLOCK_IN; i++) begin
              logic signed [31:0] p;
              p  = pair_product(wgt_i[(o*BLOCK_IN + i)*8 +: 8], wgt_i[((o + HALF)*BLOCK_IN + i)*8 +: 8],
                                input_of(b, o, i));
              lo = lo + 32'($signed({~p[15], p[14:0]}));
              hi = hi + (p >>> 16);
            end
            grp_q[((b*BLOCK_OUT + o)*GROUPS + g)*32 +: 32]        <= 32'($signed(GW'(lo)));
            grp_q[((b*BLOCK_OUT + o + HALF)*GROUPS + g)*32 +: 32] <= 32'($signed(GW'(hi)));
          end
        end
      end
    end
    if (valid_q) begin
      for (int l = 0; l < LANES; l++) begin
        logic signed [31:0] t [GROUPS];
        for (int i = 0; i < GROUPS; i++) t[i] = grp_q[(l*GROUPS + i)*32 +: 32];
        for (int w = GROUPS; w > 1; w = (w + 1) / 2) begin
          for (int i = 0; i < w / 2; i++) t[i] = t[2*i] + t[2*i + 1];
          if (w % 2 == 1) t[w / 2] = t[w - 1];
        end
        sum_o[l*32 +: 32] <= 32'($signed(SW'(t[0])));  // exact in SW bits: the adders' others dropped
      end
    end
  end
endmodule
