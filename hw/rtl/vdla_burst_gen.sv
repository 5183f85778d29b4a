// Splits a 2-D transfer (`rows` rows of `row_bytes` bytes, `stride` bytes apart) into AXI4 INCR
// bursts: at row ends, at 4 KiB boundaries and at MAX_BEATS beats. One burst per cycle. A request,
// once valid, stays valid and unchanged until accepted (only a halt withdraws it).
//
// The next burst is kept as distances from its (bus-aligned) address, so that its length and whether it
// ends the row are a narrow compare of two registers: `last_q`, the offset of the row's last byte, and
// `room_q`, the offset of the last byte before the next 4 KiB or MAX_BEATS boundary. Each accepted burst
// steps them (the next row's start address is kept a row ahead).
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
  localparam int B    = BUS_W / 8;
  localparam int LB   = $clog2(B);
  localparam int MAXB = MAX_BEATS * B;  // bytes of the longest burst (at most 4 KiB)

  // The offset of the last byte before the next 4 KiB or MAXB boundary from a bus-aligned address.
  function automatic logic [11:0] room_of(logic [11:0] a);
    logic [12:0] to_4k;
    to_4k   = 13'd4096 - 13'(a);
    room_of = 12'((to_4k < 13'(MAXB) ? to_4k : 13'(MAXB)) - 1'b1);
  endfunction

  // control: bursts left to request
  logic              active_q;
  // loaded at start: rows left, the next burst's address and distances, the next row's address, the
  // transfer's geometry
  logic [15:0]       rows_q;
  logic [ADDR_W-1:0] cur_q, next_row_q, stride_q;  // cur_q bus-aligned
  logic [LEN_W:0]    last_q;        // the row's last byte - cur_q
  logic [11:0]       room_q;        // room_of(cur_q)
  logic [LEN_W-1:0]  row_m1_q;      // row_bytes - 1

  logic accept, row_last;
  assign row_last = last_q <= (LEN_W+1)'(room_q);  // the burst ends its row

  assign active_o = active_q;
  assign valid_o  = active_q && !halt_i && !hold_i;
  assign addr_o   = cur_q;
  assign len_o    = 8'((row_last ? 12'(last_q) : room_q) >> LB);
  assign accept   = valid_o && ready_i;

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
  logic [ADDR_W-1:0] start_cur, next_cur;
  assign start_cur = {addr_i[ADDR_W-1:LB], {LB{1'b0}}};
  assign next_cur  = {next_row_q[ADDR_W-1:LB], {LB{1'b0}}};
  always_ff @(posedge clk_i) begin
    if (start_i) begin
      rows_q     <= rows_i;
      cur_q      <= start_cur;
      next_row_q <= addr_i + stride_i;
      stride_q   <= stride_i;
      row_m1_q   <= row_bytes_i - 1'b1;
      last_q     <= (LEN_W+1)'(row_bytes_i) - 1'b1 + (LEN_W+1)'(addr_i[LB-1:0]);
      room_q     <= room_of(start_cur[11:0]);
    end else if (accept) begin
      if (row_last) begin
        rows_q     <= rows_q - 1'b1;
        cur_q      <= next_cur;
        next_row_q <= next_row_q + stride_q;
        last_q     <= (LEN_W+1)'(row_m1_q) + (LEN_W+1)'(next_row_q[LB-1:0]);
        room_q     <= room_of(next_cur[11:0]);
      end else begin
        cur_q  <= cur_q + ADDR_W'(room_q) + 1'b1;
        last_q <= last_q - (LEN_W+1)'(room_q) - 1'b1;
        room_q <= room_of(cur_q[11:0] + room_q + 1'b1);
      end
    end
  end

  `ASSERT(a_start_not_halted, start_i |-> !halt_i, "burst generator started while halted")
endmodule
