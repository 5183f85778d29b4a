// Synchronous first-word-fall-through FIFO (distributed RAM). The head is kept in a register (head_q equals
// the entry at the read pointer while valid), so its readers start at a flip-flop: a pop loads the next entry
// (or the word pushed in that cycle when it is the only one), a push into an empty FIFO loads the word.
// The word's top RAW_BITS bits are read from the RAM at the read pointer instead (a LUT level later for their
// readers, none for their writer: for bits formed late, whose readers are shallow).
// Users push only when not full and pop only when valid (asserted below); a clear empties it.
module vdla_fifo #(
  parameter int WIDTH    = 8,
  parameter int DEPTH    = 4,  // power of two
  parameter int RAW_BITS = 0
) (
  input  logic                   clk_i,
  input  logic                   rst_ni,
  input  logic                   clear_i,
  input  logic                   push_i,
  input  logic [WIDTH-1:0]       push_data_i,
  output logic                   full_o,
  input  logic                   pop_i,
  output logic                   valid_o,
  output logic [WIDTH-1:0]       data_o,
  output logic [$clog2(DEPTH):0] count_o
);
  localparam int PW = $clog2(DEPTH);

  logic [WIDTH-1:0] mem_q [DEPTH];
  logic [WIDTH-1:0] head_q;
  logic [PW-1:0]    wptr_q, rptr_q;
  logic [PW:0]      count_q;
  logic             valid_q, full_q;  // count_q != 0, count_q == DEPTH: kept as flags (users' decisions read a flip-flop)

  logic do_push, do_pop;
  logic [PW:0] count_up, count_down;  // formed from the register alone: push and pop only select
  assign count_up   = count_q + 1'b1;
  assign count_down = count_q - 1'b1;
  assign do_push = push_i && !full_o;
  assign do_pop  = pop_i && valid_o;
  assign full_o  = full_q;
  assign valid_o = valid_q;
  if (RAW_BITS == 0) begin : g_head
    assign data_o = head_q;
  end else begin : g_raw_head
    logic unused_head;
    assign data_o      = {mem_q[rptr_q][WIDTH-1 -: RAW_BITS], head_q[WIDTH-RAW_BITS-1:0]};
    assign unused_head = ^head_q[WIDTH-1 -: RAW_BITS];
  end
  assign count_o = count_q;

  always_ff @(posedge clk_i) begin
    if (do_push) mem_q[wptr_q] <= push_data_i;
    if (do_pop && count_q != (PW+1)'(1)) head_q <= mem_q[rptr_q + 1'b1];
    else if (do_push && (!valid_q || do_pop)) head_q <= push_data_i;
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      wptr_q  <= '0;
      rptr_q  <= '0;
      count_q <= '0;
      valid_q <= 1'b0;
      full_q  <= 1'b0;
    end else if (clear_i) begin
      wptr_q  <= '0;
      rptr_q  <= '0;
      count_q <= '0;
      valid_q <= 1'b0;
      full_q  <= 1'b0;
    end else begin
      valid_q <= do_push || (valid_q && !(do_pop && count_q == (PW+1)'(1)));
      full_q  <= !do_pop && (full_q || (do_push && count_q == (PW+1)'(DEPTH - 1)));
      if (do_push) wptr_q <= wptr_q + 1'b1;
      if (do_pop)  rptr_q <= rptr_q + 1'b1;
      if (do_push && !do_pop) count_q <= count_up;
      else if (do_pop && !do_push) count_q <= count_down;
    end
  end

  `ASSERT(a_head, valid_q |-> head_q == mem_q[rptr_q], "FIFO head register differs from the entry at the read pointer")
  `ASSERT(a_no_overflow, push_i && !clear_i |-> !full_o, "FIFO overflow: push into a full FIFO")
  `ASSERT(a_no_underflow, pop_i && !clear_i |-> valid_o, "FIFO underflow: pop of an empty FIFO")
endmodule
