// Instruction fetch: reads `insn_count` 128-bit instructions from `insn_addr` in bursts into a
// prefetch FIFO and routes them in order to the load, compute and store command queues (LOAD of
// INP/WGT -> load; STORE -> store; everything else -> compute). A full queue blocks the stream.
// A burst is requested only when the FIFO has room for all of it, so the FIFO never overflows.
module vdla_fetch #(
  parameter int ADDR_W     = vdla_pkg::AXI_ADDR_W,
  parameter int BUS_W      = vdla_pkg::BUS_WIDTH,
  parameter int FIFO_DEPTH = 32,
  parameter int CHUNK      = 8   // instructions per burst
) (
  input  logic               clk_i,
  input  logic               rst_ni,
  input  logic               halt_i,
  input  logic               start_i,
  input  logic [ADDR_W-1:0]  insn_addr_i,
  input  logic [31:0]        insn_count_i,
  // AXI read
  output logic               arvalid_o,
  output logic [ADDR_W-1:0]  araddr_o,
  output logic [7:0]         arlen_o,
  input  logic               arready_i,
  input  logic               rvalid_i,
  input  logic [1:0]         rresp_i,
  input  logic [BUS_W-1:0]   rdata_i,
  // command queues
  output vdla_pkg::insn_t    insn_o,
  output logic [2:0]         push_o,   // load, compute, store
  input  logic [2:0]         full_i,
  // status
  output logic [31:0]        fetched_o, // instructions routed
  output logic               done_o,    // all instructions routed
  output logic               active_o,  // can make progress without another unit
  output logic               err_o,
  output vdla_pkg::err_code_e err_code_o
);
  localparam int IW  = vdla_pkg::INSN_BITS;
  localparam int BPI = IW / BUS_W;  // beats per instruction
  localparam int CW  = $clog2(FIFO_DEPTH) + 1;

  logic [ADDR_W-1:0] addr_q;
  logic [31:0]       count_q, requested_q, fetched_q;
  logic [CW-1:0]     inflight_q;
  logic              running_q, misaligned_q;

  // ---- requests -----------------------------------------------------------------------------
  logic [CW-1:0] fifo_count;
  logic [31:0]   remaining, to_4k, n;
  assign remaining = count_q - requested_q;
  assign to_4k     = (32'h1000 - 32'(addr_q[11:0])) >> 4;
  always_comb begin
    n = remaining;
    if (n > 32'(CHUNK)) n = 32'(CHUNK);
    if (n > to_4k) n = to_4k;
  end
  assign arvalid_o = running_q && !halt_i && !misaligned_q && remaining != '0
                  && 32'(fifo_count) + 32'(inflight_q) + n <= 32'(FIFO_DEPTH);
  assign araddr_o  = addr_q;
  assign arlen_o   = 8'(n * BPI - 1);

  // ---- data: assemble instructions from beats -----------------------------------------------
  logic [$clog2(BPI+1)-1:0] beat_q;
  logic                     insn_done, beat_en;
  logic [IW-1:0]            insn_word;
  assign beat_en   = rvalid_i && !start_i && !halt_i;
  assign insn_done = rvalid_i && beat_q == ($clog2(BPI+1))'(BPI - 1);
  if (BPI == 1) begin : g_one_beat
    assign insn_word = rdata_i;
  end else begin : g_beats
    logic [IW-1:BUS_W] shift_q;  // the instruction's earlier beats, last one on top
    assign insn_word = {rdata_i, shift_q};
    always_ff @(posedge clk_i) begin
      if (beat_en) shift_q <= insn_word[IW-1:BUS_W];
    end
  end

  logic            head_valid;
  vdla_pkg::insn_t head;
  logic            route, unused_full;
  vdla_fifo #(.WIDTH(IW), .DEPTH(FIFO_DEPTH)) u_fifo (
    .clk_i, .rst_ni, .clear_i (start_i || halt_i),
    .push_i (insn_done), .push_data_i (insn_word), .full_o (unused_full),
    .pop_i (route), .valid_o (head_valid), .data_o (head), .count_o (fifo_count)
  );

  // ---- routing ------------------------------------------------------------------------------
  vdla_pkg::opcode_e   op;
  vdla_pkg::mem_type_e mt;
  logic                unknown, early_finish;
  logic [1:0]          target;
  assign op = head.mem.hdr.opcode;
  assign mt = head.mem.mem_type;
  assign unknown = op > vdla_pkg::OP_EPI
                || ((op == vdla_pkg::OP_LOAD || op == vdla_pkg::OP_STORE) && mt > vdla_pkg::MEM_ACC_8BIT);
  assign early_finish = op == vdla_pkg::OP_FINISH && fetched_q + 1'b1 != count_q;
  always_comb begin
    target = 2'd1;
    if (op == vdla_pkg::OP_STORE) target = 2'd2;
    else if (op == vdla_pkg::OP_LOAD && (mt == vdla_pkg::MEM_INP || mt == vdla_pkg::MEM_WGT)) target = 2'd0;
  end

  logic misaligned, bus_err;
  assign misaligned = running_q && misaligned_q;
  assign bus_err    = rvalid_i && rresp_i != 2'b00 && !halt_i;
  assign route      = head_valid && !halt_i && !unknown && !early_finish && !full_i[target];
  assign insn_o     = head;
  always_comb begin
    push_o = '0;
    push_o[target] = route;
  end
  assign err_o      = misaligned || bus_err || (head_valid && !halt_i && (unknown || early_finish));
  assign err_code_o = misaligned ? vdla_pkg::ERR_ALIGN : bus_err ? vdla_pkg::ERR_BUS
                    : unknown ? vdla_pkg::ERR_OPCODE : vdla_pkg::ERR_INSN;
  assign fetched_o  = fetched_q;
  assign done_o     = fetched_q == count_q;
  assign active_o   = arvalid_o || inflight_q != '0 || route;

  // control: running, and the instruction counts that decide done_o
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      running_q    <= 1'b0;
      misaligned_q <= 1'b0;
      count_q      <= '0;
      fetched_q    <= '0;
    end else if (start_i) begin
      running_q    <= 1'b1;
      misaligned_q <= insn_addr_i[3:0] != '0;
      count_q      <= insn_count_i;
      fetched_q    <= '0;
    end else if (halt_i) begin
      running_q <= 1'b0;
    end else if (route) begin
      fetched_q <= fetched_q + 1'b1;
    end
  end

  // The request address and the counts of requested, in-flight and assembled beats: initialized by
  // START and used only while running, so they need no reset (and START's initialization stays a
  // synchronous reset of the flip-flops, not a LUT in front of them).
  always_ff @(posedge clk_i) begin
    if (start_i) begin
      addr_q      <= insn_addr_i;
      requested_q <= '0;
      inflight_q  <= '0;
      beat_q      <= '0;
    end else if (!halt_i) begin
      if (arvalid_o && arready_i) begin
        addr_q      <= addr_q + ADDR_W'(n << 4);
        requested_q <= requested_q + n;
      end
      inflight_q <= inflight_q + (arvalid_o && arready_i ? CW'(n) : '0) - CW'(insn_done);
      if (rvalid_i) beat_q <= insn_done ? '0 : beat_q + 1'b1;
    end
  end

endmodule
