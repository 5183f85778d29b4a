// A dependency-token queue: tokens carry no data, so the queue is an occupancy counter.
module vdla_token_queue #(
  parameter int DEPTH = 128
) (
  input  logic                   clk_i,
  input  logic                   rst_ni,
  input  logic                   push_i,   // the producer completed an instruction with the push flag
  input  logic                   pop_i,    // the consumer started an instruction with the pop flag
  output logic                   avail_o,  // at least one token
  output logic                   room_o,   // not full
  output logic [$clog2(DEPTH+1)-1:0] count_o
);
  localparam int CW = $clog2(DEPTH + 1);

  logic [CW-1:0] count_q;

  assign avail_o = count_q != '0;
  assign room_o  = count_q != CW'(DEPTH);
  assign count_o = count_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      count_q <= '0;
    end else begin
      count_q <= count_q + CW'(push_i && room_o) - CW'(pop_i && avail_o);
    end
  end
endmodule
