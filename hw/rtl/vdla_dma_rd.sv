// 2-D read DMA: requests the bursts of a transfer (vdla_burst_gen) on its AXI read channel (the package's
// axi_rd_req_t and axi_rd_rsp_t) and labels each returned beat with its row and its byte offset from the row
// start (negative for the part of a first beat that lies before an unaligned row). The beat's data is the
// caller's (axi_rd_rsp_i.r_data).
module vdla_dma_rd #(
  parameter int MAX_BEATS = vdla_pkg::MAX_BURST_BEATS,
  parameter int OFF_W     = 26
) (
  input  logic               clk_i,
  input  logic               rst_ni,
  input  logic               halt_i,
  input  logic               start_i,
  input  logic [vdla_pkg::AXI_ADDR_W-1:0] addr_i,    // byte address of row 0
  input  logic [vdla_pkg::AXI_ADDR_W-1:0] stride_i,  // bytes from one row to the next
  input  logic [OFF_W-2:0]   row_bytes_i,  // > 0
  input  logic [15:0]        rows_i,       // > 0
  input  logic               hold_i,       // delay the requests
  // AXI read: AR, and R (r_valid: beats of this requester only)
  output vdla_pkg::axi_rd_req_t axi_rd_req_o,
  input  vdla_pkg::axi_rd_rsp_t axi_rd_rsp_i,
  // labels of the current beat
  output logic signed [OFF_W-1:0] beat_off_o,
  output logic               beat_row_end_o,  // the row's last beat
  output logic               beat_last_o,     // the transfer's last beat
  output logic               err_o            // the beat carries an error response
);
  localparam int ADDR_W = vdla_pkg::AXI_ADDR_W;
  localparam int BUS_W  = vdla_pkg::BUS_WIDTH;
  localparam int B      = BUS_W / 8;
  localparam int LB     = $clog2(B);

  logic ar_active;
  vdla_burst_gen #(.ADDR_W(ADDR_W), .BUS_W(BUS_W), .MAX_BEATS(MAX_BEATS), .LEN_W(OFF_W-1)) u_bursts (
    .clk_i, .rst_ni, .halt_i, .start_i, .addr_i, .stride_i, .row_bytes_i, .rows_i, .hold_i,
    .active_o (ar_active),
    .valid_o  (axi_rd_req_o.ar_valid),
    .addr_o   (axi_rd_req_o.ar_addr),
    .len_o    (axi_rd_req_o.ar_len),
    .ready_i  (axi_rd_rsp_i.ar_ready)
  );

  // The current beat's labels are registers, stepped with each beat: its offset, whether it ends its row
  // (the row's next beat would start at or beyond row_bytes) and whether that row is the last.
  logic [15:0]             rows_left_q;  // rows after the current one
  logic                    last_row_q;   // rows_left_q == 0
  logic signed [OFF_W-1:0] off_q;
  logic                    row_done_q;   // off_q + B >= row_bytes_q
  logic [LB-1:0]           lo_q;         // low address bits of the current row start
  logic [LB-1:0]           stride_lo_q;
  logic [OFF_W-2:0]        row_bytes_q;
  logic signed [OFF_W-1:0] off_next;
  logic [LB-1:0]           lo_next;

  assign off_next       = off_q + OFF_W'(B);
  assign lo_next        = lo_q + stride_lo_q;
  assign beat_off_o     = off_q;
  assign beat_row_end_o = row_done_q;
  assign beat_last_o    = row_done_q && last_row_q;
  assign err_o          = axi_rd_rsp_i.r_valid && axi_rd_rsp_i.r_resp != 2'b00;

  // a row starting at low address bits lo ends with its first beat
  function automatic logic first_beat_ends(logic [LB-1:0] lo, logic [OFF_W-2:0] row_bytes);
    first_beat_ends = OFF_W'(B) - OFF_W'(lo) >= OFF_W'(row_bytes);
  endfunction

  always_ff @(posedge clk_i) begin
    if (start_i) begin
      rows_left_q <= rows_i - 1'b1;
      last_row_q  <= rows_i == 16'd1;
      row_bytes_q <= row_bytes_i;
      stride_lo_q <= stride_i[LB-1:0];
      lo_q        <= addr_i[LB-1:0];
      off_q       <= -$signed(OFF_W'(addr_i[LB-1:0]));
      row_done_q  <= first_beat_ends(addr_i[LB-1:0], row_bytes_i);
    end else if (axi_rd_rsp_i.r_valid) begin
      if (row_done_q) begin
        rows_left_q <= rows_left_q - 1'b1;
        last_row_q  <= rows_left_q == 16'd1;
        lo_q        <= lo_next;
        off_q       <= -$signed(OFF_W'(lo_next));
        row_done_q  <= first_beat_ends(lo_next, row_bytes_q);
      end else begin
        off_q      <= off_next;
        row_done_q <= off_next + OFF_W'(B) >= $signed({1'b0, row_bytes_q});
      end
    end
  end

  logic unused;
  assign unused = ^{ar_active, axi_rd_rsp_i.r_data};
endmodule
