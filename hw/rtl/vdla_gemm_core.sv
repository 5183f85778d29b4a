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

  localparam int HALF_IN = BLOCK_IN / 2;

  // {w2.a, w1.a} over the n pairs from i0 (a, w1, w2: one row each), as balanced adder trees; w1 * a is
  // P[15:0] - 2^15, P[15:0] with its top bit inverted, sign-extended
  function automatic logic [63:0] dots(logic [BLOCK_IN*8-1:0] a, logic [BLOCK_IN*8-1:0] w1,
                                       logic [BLOCK_IN*8-1:0] w2, int i0, int n);
    logic signed [31:0] lo [BLOCK_IN];
    logic signed [31:0] hi [BLOCK_IN];
    for (int i = 0; i < n; i++) begin
      logic signed [24:0] packed_w;
      logic signed [31:0] p;
      packed_w = (25'($signed(w2[(i0 + i)*8 +: 8])) <<< 16) + 25'($signed(w1[(i0 + i)*8 +: 8]));
      p = 32'(packed_w) * 32'($signed(a[(i0 + i)*8 +: 8])) + 32'sd32768;
      lo[i] = 32'($signed({~p[15], p[14:0]}));
      hi[i] = p >>> 16;
    end
    for (int w = n; w > 1; w = (w + 1) / 2) begin
      for (int i = 0; i < w / 2; i++) begin
        lo[i] = lo[2*i] + lo[2*i + 1];
        hi[i] = hi[2*i] + hi[2*i + 1];
      end
      if (w % 2 == 1) begin
        lo[w / 2] = lo[w - 1];
        hi[w / 2] = hi[w - 1];
      end
    end
    dots = {hi[0], lo[0]};
  endfunction

  // The first stage sums each half of the pairs (below HALF_IN, the rest), the second adds the two halves: each
  // stage has part of the adder tree.
  logic [LANES*32-1:0] dot0_q, dot1_q;
  logic                valid_q;

  always_ff @(posedge clk_i) begin
    valid_q <= valid_i;
    if (valid_i) begin
      for (int b = 0; b < BATCH; b++) begin
        for (int o = 0; o < HALF; o++) begin
          logic [63:0] d0, d1;
          d0 = dots(inp_i[b*BLOCK_IN*8 +: BLOCK_IN*8], wgt_i[o*BLOCK_IN*8 +: BLOCK_IN*8],
                    wgt_i[(o + HALF)*BLOCK_IN*8 +: BLOCK_IN*8], 0, HALF_IN);
          d1 = dots(inp_i[b*BLOCK_IN*8 +: BLOCK_IN*8], wgt_i[o*BLOCK_IN*8 +: BLOCK_IN*8],
                    wgt_i[(o + HALF)*BLOCK_IN*8 +: BLOCK_IN*8], HALF_IN, BLOCK_IN - HALF_IN);
          dot0_q[(b*BLOCK_OUT + o)*32 +: 32]        <= d0[31:0];
          dot0_q[(b*BLOCK_OUT + o + HALF)*32 +: 32] <= d0[63:32];
          dot1_q[(b*BLOCK_OUT + o)*32 +: 32]        <= d1[31:0];
          dot1_q[(b*BLOCK_OUT + o + HALF)*32 +: 32] <= d1[63:32];
        end
      end
    end
    if (valid_q) begin
      for (int l = 0; l < LANES; l++) sum_o[l*32 +: 32] <= dot0_q[l*32 +: 32] + dot1_q[l*32 +: 32];
    end
  end
endmodule
