// Splits a 2-D transfer (`rows` rows of `row_bytes` bytes, `stride` bytes apart) into AXI4 INCR
// bursts: at row ends, at 4 KiB boundaries and at MAX_BEATS beats. One burst per cycle. A request,
// once valid, stays valid and unchanged until accepted (only a halt withdraws it).
module vdla_burst_gen #(
  parameter int ADDR_W    = vdla_pkg::AXI_ADDR_W,
  parameter int BUS_W     = vdla_pkg::BUS_WIDTH,
  parameter int MAX_BEATS = vdla_pkg::MAX_BURST_BEATS,
  parameter int LEN_W     = 25
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  input  logic              halt_i,
  input  logic              start_i,
  input  logic [ADDR_W-1:0] addr_i,
  input  logic [ADDR_W-1:0] stride_i,
  input  logic [LEN_W-1:0]  row_bytes_i,  // > 0
  input  logic [15:0]       rows_i,       // > 0
  input  logic              hold_i,       // do not request yet
  output logic              active_o,     // bursts left to request
  output logic              valid_o,
  output logic [ADDR_W-1:0] addr_o,       // bus-aligned
  output logic [7:0]        len_o,        // beats - 1
  input  logic              ready_i
);
  localparam int B  = BUS_W / 8;
  localparam int LB = $clog2(B);

  // control: bursts left to request
  logic              active_q;
  // loaded at start: rows left, the transfer's geometry and the next burst's address
  logic [15:0]       rows_q;
  logic [ADDR_W-1:0] row_q, cur_q, stride_q;
  logic [LEN_W-1:0]  row_bytes_q;

  logic [ADDR_W-1:0] row_end, next_4k, max_end, limit;
  logic              accept, row_last;
  always_comb begin
    row_end = row_q + ADDR_W'(row_bytes_q);
    next_4k = (cur_q | ADDR_W'(4095)) + 1'b1;
    max_end = {cur_q[ADDR_W-1:LB], {LB{1'b0}}} + ADDR_W'(MAX_BEATS * B);
    limit   = row_end;
    if (next_4k < limit) limit = next_4k;
    if (max_end < limit) limit = max_end;
  end

  assign active_o = active_q;
  assign valid_o  = active_q && !halt_i && !hold_i;
  assign addr_o   = {cur_q[ADDR_W-1:LB], {LB{1'b0}}};
  assign len_o    = 8'(((limit - 1'b1) >> LB) - (cur_q >> LB));
  assign accept   = valid_o && ready_i;
  assign row_last = limit == row_end;  // the burst ends its row

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      active_q <= 1'b0;
    end else if (halt_i) begin
      active_q <= 1'b0;
    end else if (start_i) begin
      active_q <= 1'b1;
    end else if (accept && row_last && rows_q == 16'd1) begin
      active_q <= 1'b0;
    end
  end

  // Loaded at start_i, used while active (start_i and accept never coincide with halt_i: both need a
  // running, unhalted unit).
  always_ff @(posedge clk_i) begin
    if (start_i) begin
      rows_q      <= rows_i;
      row_q       <= addr_i;
      cur_q       <= addr_i;
      stride_q    <= stride_i;
      row_bytes_q <= row_bytes_i;
    end else if (accept) begin
      if (row_last) begin
        rows_q <= rows_q - 1'b1;
        row_q  <= row_q + stride_q;
        cur_q  <= row_q + stride_q;
      end else begin
        cur_q <= limit;
      end
    end
  end

`ifndef SYNTHESIS
  a_start_not_halted: assert property (@(posedge clk_i) disable iff (!rst_ni) start_i |-> !halt_i)
    else $error("burst generator started while halted");
`endif
endmodule
