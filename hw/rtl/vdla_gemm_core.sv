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

  logic [LANES*32-1:0] dot_q;
  logic                valid_q;

  always_ff @(posedge clk_i) begin
    valid_q <= valid_i;
    if (valid_i) begin
      for (int b = 0; b < BATCH; b++) begin
        for (int o = 0; o < HALF; o++) begin
          logic signed [31:0] lo_sum, hi_sum;
          lo_sum = '0;
          hi_sum = '0;
          for (int i = 0; i < BLOCK_IN; i++) begin
            logic signed [24:0] packed_w;
            logic signed [31:0] p;
            packed_w = (25'($signed(wgt_i[((o + HALF)*BLOCK_IN + i)*8 +: 8])) <<< 16)
                     + 25'($signed(wgt_i[(o*BLOCK_IN + i)*8 +: 8]));
            p = 32'(packed_w) * 32'($signed(inp_i[(b*BLOCK_IN + i)*8 +: 8])) + 32'sd32768;
            lo_sum += 32'(p[15:0]);
            hi_sum += p >>> 16;
          end
          dot_q[(b*BLOCK_OUT + o)*32 +: 32]        <= lo_sum - 32'(BLOCK_IN * 32768);
          dot_q[(b*BLOCK_OUT + o + HALF)*32 +: 32] <= hi_sum;
        end
      end
    end
    if (valid_q) sum_o <= dot_q;
  end
endmodule
