// A dependency-token queue: tokens carry no data, so the queue is an occupancy counter.
// The producer pushes only with room (it checks room_o when it dispatches the instruction that pushes)
// and the consumer pops only an available token; the assertions below hold them to it.
module vdla_token_queue #(
  parameter int DEPTH = vdla_pkg::TOKEN_QUEUE_DEPTH
) (
  input  logic                       clk_i,
  input  logic                       rst_ni,
  input  logic                       clear_i,  // empty the queue (START)
  input  logic                       push_i,   // the producer completed an instruction with the push flag
  input  logic                       pop_i,    // the consumer started an instruction with the pop flag
  output logic                       avail_o,  // at least one token
  output logic                       room_o,   // not full
  output logic [$clog2(DEPTH+1)-1:0] count_o
);
  localparam int CW = $clog2(DEPTH + 1);

  logic [CW-1:0] count_q;
  logic          avail_q, room_q;  // count_q != 0, count_q != DEPTH: kept as flags, so a stage's dispatch reads a flip-flop
  logic          push, pop;
  logic [CW-1:0] count_up, count_down;  // formed from the register alone: push and pop only select

  assign count_up   = count_q + 1'b1;
  assign count_down = count_q - 1'b1;

  assign push    = push_i && room_q;
  assign pop     = pop_i && avail_q;
  assign avail_o = avail_q;
  assign room_o  = room_q;
  assign count_o = count_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      count_q <= '0;
      avail_q <= 1'b0;
      room_q  <= 1'b1;
    end else if (clear_i) begin
      count_q <= '0;
      avail_q <= 1'b0;
      room_q  <= 1'b1;
    end else begin
      if (push && !pop) count_q <= count_up;
      else if (pop && !push) count_q <= count_down;
      avail_q <= push || (avail_q && !(pop && count_q == CW'(1)));
      room_q  <= pop || (room_q && !(push && count_q == CW'(DEPTH - 1)));
    end
  end

  // No token is lost or invented: a push meets room, a pop meets a token.
  `ASSERT(a_no_overflow, push_i && !clear_i |-> room_o, "token queue overflow: push into a full queue")
  `ASSERT(a_no_underflow, pop_i && !clear_i |-> avail_o, "token queue underflow: pop of an empty queue")
endmodule
