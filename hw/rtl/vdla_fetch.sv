// Instruction fetch: reads `insn_count` 128-bit instructions from `insn_addr` in bursts into a
// prefetch FIFO and routes them in order to the load, compute and store command queues (LOAD of
// INP/WGT -> load; STORE -> store; everything else -> compute). A full queue blocks the stream.
// A burst is requested only when the FIFO has room for all of it, so the FIFO never overflows.
// With each routed instruction goes its tile's end (vdla_pkg::mem_tile_end, the dispatch checks' product),
// formed into a register as the instruction is assembled and kept beside it (below): the checks compare it.
module vdla_fetch #(
  parameter int FIFO_DEPTH = 32,
  parameter int CHUNK      = 8   // instructions per burst
) (
  input  logic               clk_i,
  input  logic               rst_ni,
  input  logic               halt_i,
  input  logic               start_i,
  input  logic [vdla_pkg::AXI_ADDR_W-1:0] insn_addr_i,
  input  logic [31:0]        insn_count_i,
  // AXI read
  output vdla_pkg::axi_rd_req_t axi_rd_req_o,
  input  vdla_pkg::axi_rd_rsp_t axi_rd_rsp_i,
  // command queues
  output vdla_pkg::insn_t    insn_o,
  output logic [33:0]        tile_end_o,  // vdla_pkg::mem_tile_end(insn_o.mem)
  output logic [2:0]         push_o,   // load, compute, store
  input  logic [2:0]         full_i,
  // status
  output logic [31:0]        fetched_o, // instructions routed
  output logic               done_o,    // all instructions routed
  output logic               active_o,  // can make progress without another unit
  output logic               err_o,
  output vdla_pkg::err_code_e err_code_o
);
  localparam int ADDR_W = vdla_pkg::AXI_ADDR_W;
  localparam int BUS_W  = vdla_pkg::BUS_WIDTH;
  localparam int IW     = vdla_pkg::INSN_BITS;
  localparam int BPI    = IW / BUS_W;  // beats per instruction
  localparam int CW     = $clog2(FIFO_DEPTH) + 1;
  localparam int NW     = $clog2(CHUNK + 1);   // a burst's instruction count
  localparam int SW     = $clog2(2 * CHUNK);   // a count below 2 * CHUNK
  localparam int PAGE   = 4096 / (IW / 8);    // instructions per 4 KiB page

  // Every count the request and routing decisions test is kept so that the test reads registers:
  // down-counters and the next burst's size, updated with the step that changes them.
  logic [ADDR_W-1:0] addr_q;
  logic [31:0]       fetched_q;      // instructions routed
  logic [31:0]       unrouted_q;     // insn_count - fetched_q
  logic              done_q;         // unrouted_q == 0
  logic              last_q;         // unrouted_q == 1: the next instruction routed is the last one
  logic [31:0]       unrequested_q;  // insn_count - instructions requested
  logic [$clog2(PAGE+1)-1:0] to_4k_q;  // instructions from addr_q to the next 4 KiB boundary, 1..PAGE
  logic [NW-1:0]     n_q;            // the next burst: min(unrequested_q, CHUNK, to_4k_q)
  logic [CW-1:0]     space_q;        // FIFO slots neither filled nor reserved: FIFO_DEPTH - count - inflight
  logic [CW-1:0]     inflight_q;     // instructions requested, not yet assembled
  logic              running_q, misaligned_q;

  // The size of a burst: min(left, CHUNK, to_4k), where `left_big` says left >= CHUNK (its low bits `left` are
  // not read then), likewise `to_4k_big`.
  function automatic logic [NW-1:0] burst(logic left_big, logic [SW-1:0] left, logic to_4k_big,
                                          logic [SW-1:0] to_4k);
    logic [SW-1:0] a, b;
    a = left_big || left > SW'(CHUNK) ? SW'(CHUNK) : left;
    b = to_4k_big || to_4k > SW'(CHUNK) ? SW'(CHUNK) : to_4k;
    burst = NW'(a < b ? a : b);
  endfunction

  // ---- requests -----------------------------------------------------------------------------
  // The next burst after this one is accepted: left and to_4k both drop by n_q (to_4k restarts at PAGE on
  // the boundary); a count of 2 * CHUNK or more stays at CHUNK or more, so only the low bits are subtracted.
  logic [$clog2(PAGE+1)-1:0] to_4k_next;
  logic [SW-1:0]             left_low, to_4k_low;
  logic                      accept, left_big, to_4k_big, to_4k_wrap;
  assign left_big   = unrequested_q >= 32'(2 * CHUNK);
  assign to_4k_big  = to_4k_q >= ($clog2(PAGE+1))'(2 * CHUNK);
  assign left_low   = SW'(unrequested_q) - SW'(n_q);
  assign to_4k_low  = SW'(to_4k_q) - SW'(n_q);
  assign to_4k_wrap = !to_4k_big && to_4k_low == '0;
  assign to_4k_next = to_4k_wrap ? ($clog2(PAGE+1))'(PAGE) : to_4k_q - ($clog2(PAGE+1))'(n_q);

  // a burst is requested when the FIFO has room for all of it (n_q is 0 once all are requested)
  logic ar_valid;
  assign ar_valid              = running_q && !halt_i && !misaligned_q && n_q != '0 && CW'(n_q) <= space_q;
  assign axi_rd_req_o.ar_valid = ar_valid;
  assign axi_rd_req_o.ar_addr  = addr_q;
  assign axi_rd_req_o.ar_len   = 8'(n_q * BPI - 1);
  assign accept                = ar_valid && axi_rd_rsp_i.ar_ready;

  // ---- data: assemble instructions from beats -----------------------------------------------
  logic [$clog2(BPI+1)-1:0] beat_q;
  logic                     insn_done;
  logic                     rvalid;  // a beat of this requester's
  logic [IW-1:0]            insn_word;
  assign rvalid    = axi_rd_rsp_i.r_valid;
  assign insn_done = rvalid && beat_q == ($clog2(BPI+1))'(BPI - 1);
  if (BPI == 1) begin : g_one_beat
    assign insn_word = axi_rd_rsp_i.r_data;
  end else begin : g_beats
    logic              beat_en;
    logic [IW-1:BUS_W] shift_q;  // the instruction's earlier beats, last one on top
    assign beat_en   = rvalid && !start_i && !halt_i;
    assign insn_word = {axi_rd_rsp_i.r_data, shift_q};
    always_ff @(posedge clk_i) begin
      if (beat_en) shift_q <= insn_word[IW-1:BUS_W];
    end
  end

  // ---- routing ------------------------------------------------------------------------------
  // Decoded as the instruction is assembled and kept beside it in the FIFO: FINISH, an unknown opcode or
  // memory type, its command queue. The routing decision then reads four bits of the head.
  vdla_pkg::insn_t     word;
  vdla_pkg::opcode_e   op;
  vdla_pkg::mem_type_e mt;
  logic                word_finish, word_unknown;
  logic [1:0]          word_target;  // load, compute, store
  assign word         = insn_word;
  assign op           = word.mem.hdr.opcode;
  assign mt           = word.mem.mem_type;
  assign word_finish  = op == vdla_pkg::OP_FINISH;
  assign word_unknown = op > vdla_pkg::OP_EPI;  // every 3-bit memory type is one (a stage refuses those not its own)
  always_comb begin
    word_target = 2'd1;
    if (op == vdla_pkg::OP_STORE) word_target = 2'd2;
    else if (op == vdla_pkg::OP_LOAD
             && (mt == vdla_pkg::MEM_INP || mt == vdla_pkg::MEM_WGT || mt == vdla_pkg::MEM_UOP_PRE)) word_target = 2'd0;
  end

  logic            head_valid, head_finish, unknown, early_finish;
  logic [1:0]      target;
  vdla_pkg::insn_t head;
  logic            route, unused_full;
  logic [CW-1:0]   unused_count;  // space_q counts the FIFO's slots
  vdla_fifo #(.WIDTH(IW + 4), .DEPTH(FIFO_DEPTH)) u_fifo (
    .clk_i, .rst_ni, .clear_i (start_i || halt_i),
    .push_i (insn_done), .push_data_i ({word_finish, word_unknown, word_target, insn_word}),
    .full_o (unused_full), .pop_i (route), .valid_o (head_valid),
    .data_o ({head_finish, unknown, target, head}), .count_o (unused_count)
  );
  assign early_finish = head_finish && !last_q;

  // ---- tile ends ----------------------------------------------------------------------------
  // The tile end of the word being assembled is formed into tile_end_q (the register at its DSP48E1's output),
  // so that no product feeds logic in its cycle: it is there a cycle after its instruction entered the FIFO.
  // u_ends keeps the tile ends of the FIFO's entries in the same order, each pushed that cycle later (cleared
  // with the FIFO, popped with it), so it holds every entry's but the one pushed in the cycle before: when
  // u_ends is empty and the FIFO is not, the head is that entry and its tile end is tile_end_q (routed at once,
  // it is then not pushed). The routing, and so every cycle, is unchanged.
  logic [33:0] tile_end_q, ends_head;
  logic        end_due_q, ends_valid, ends_push, ends_pop, unused_ends_full;
  logic [CW-1:0] unused_ends_count;
  always_ff @(posedge clk_i) begin
    tile_end_q <= vdla_pkg::mem_tile_end(word.mem);
  end
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) end_due_q <= 1'b0;
    else end_due_q <= insn_done && !start_i && !halt_i;  // an entry pushed, its tile end due
  end
  assign ends_pop  = route && ends_valid;
  assign ends_push = end_due_q && !(route && !ends_valid);
  vdla_fifo #(.WIDTH(34), .DEPTH(FIFO_DEPTH)) u_ends (
    .clk_i, .rst_ni, .clear_i (start_i || halt_i),
    .push_i (ends_push), .push_data_i (tile_end_q), .full_o (unused_ends_full), .pop_i (ends_pop),
    .valid_o (ends_valid), .data_o (ends_head), .count_o (unused_ends_count)
  );

  logic misaligned, bus_err;
  assign misaligned = running_q && misaligned_q;
  assign bus_err    = rvalid && axi_rd_rsp_i.r_resp != 2'b00 && !halt_i;
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
  assign tile_end_o = ends_valid ? ends_head : tile_end_q;
  assign done_o     = done_q;
  assign active_o   = ar_valid || inflight_q != '0 || route;

  // control: running, and the routed-instruction counts that decide done_o and FINISH's check
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      running_q    <= 1'b0;
      misaligned_q <= 1'b0;
      fetched_q    <= '0;
      unrouted_q   <= '0;
      done_q       <= 1'b1;
      last_q       <= 1'b0;
    end else if (start_i) begin
      running_q    <= 1'b1;
      misaligned_q <= insn_addr_i[3:0] != '0;
      fetched_q    <= '0;
      unrouted_q   <= insn_count_i;
      done_q       <= insn_count_i == '0;
      last_q       <= insn_count_i == 32'd1;
    end else if (halt_i) begin
      running_q <= 1'b0;
    end else if (route) begin
      fetched_q  <= fetched_q + 1'b1;
      unrouted_q <= unrouted_q - 1'b1;
      done_q     <= last_q;
      last_q     <= unrouted_q == 32'd2;
    end
  end

  // The request address and sizes, and the counts of requested, in-flight and assembled beats: initialized
  // by START and used only while running, so they need no reset (and START's initialization stays a
  // synchronous reset of the flip-flops, not a LUT in front of them).
  logic [CW-1:0]             inflight_left, space_freed;
  logic [$clog2(PAGE+1)-1:0] to_4k_start;
  assign inflight_left = inflight_q - CW'(insn_done);
  assign space_freed   = space_q + CW'(route);
  assign to_4k_start = ($clog2(PAGE+1))'(PAGE) - ($clog2(PAGE+1))'(insn_addr_i[11:4]);
  always_ff @(posedge clk_i) begin
    if (start_i) begin
      addr_q        <= insn_addr_i;
      unrequested_q <= insn_count_i;
      to_4k_q       <= to_4k_start;
      n_q           <= burst(insn_count_i >= 32'(CHUNK), SW'(insn_count_i),
                             to_4k_start >= ($clog2(PAGE+1))'(CHUNK), SW'(to_4k_start));
      space_q       <= CW'(FIFO_DEPTH);
      inflight_q    <= '0;
      beat_q        <= '0;
    end else if (!halt_i) begin
      if (accept) begin
        addr_q        <= addr_q + (ADDR_W'(n_q) << 4);
        unrequested_q <= unrequested_q - 32'(n_q);
        to_4k_q       <= to_4k_next;
        n_q           <= burst(left_big, left_low, to_4k_big || to_4k_wrap, to_4k_low);
      end
      // the burst's reservation is the last step (accept arrives late): a choice of two sums
      inflight_q <= accept ? inflight_left + CW'(n_q) : inflight_left;
      space_q    <= accept ? space_freed - CW'(n_q) : space_freed;
      if (rvalid) beat_q <= insn_done ? '0 : beat_q + 1'b1;
    end
  end

  `ASSERT(a_tile_end, route |-> tile_end_o == vdla_pkg::mem_tile_end(head.mem),
          "fetch: the routed instruction's tile end differs from its combinational form")
  `ASSERT(a_ends_head, head_valid && !ends_valid |-> end_due_q, "fetch: the FIFO's head has no tile end")
endmodule
