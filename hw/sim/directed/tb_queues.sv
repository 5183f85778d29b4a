// Directed bench of the queues' assertions (tests/test_rtl_assertions.py): a token queue and a FIFO, two
// deep, driven by tb_queues.cpp into legal traffic or into one overflow or underflow.
module tb_queues (
  input  logic       clk_i,
  input  logic       rst_ni,
  input  logic       tq_push_i,
  input  logic       tq_pop_i,
  output logic [1:0] tq_count_o,
  input  logic       ff_push_i,
  input  logic [7:0] ff_data_i,
  input  logic       ff_pop_i,
  output logic [1:0] ff_count_o
);
  logic unused_tq_avail, unused_tq_room, unused_ff_full, unused_ff_valid;
  logic [7:0] unused_ff_data;

  vdla_token_queue #(.DEPTH(2)) u_tokens (
    .clk_i, .rst_ni, .clear_i (1'b0), .push_i (tq_push_i), .pop_i (tq_pop_i),
    .avail_o (unused_tq_avail), .room_o (unused_tq_room), .count_o (tq_count_o)
  );

  vdla_fifo #(.WIDTH(8), .DEPTH(2)) u_fifo (
    .clk_i, .rst_ni, .clear_i (1'b0), .push_i (ff_push_i), .push_data_i (ff_data_i),
    .full_o (unused_ff_full), .pop_i (ff_pop_i), .valid_o (unused_ff_valid), .data_o (unused_ff_data),
    .count_o (ff_count_o)
  );
endmodule
