// The store stage: STOREs of accumulator rows, truncated to 8 bits (read from the OUT mirror of the
// ACC buffer), as a 2-D DMA write. Pops compute->store tokens (pop_prev) and pushes store->compute
// tokens (push_prev). Completes when every burst's write response has arrived.
module vdla_store (
  input  logic                            clk_i,
  input  logic                            rst_ni,
  input  logic                            halt_i,
  // command queue
  input  logic                            cmd_valid_i,
  input  vdla_pkg::insn_t                 cmd_i,
  input  logic                            cmd_bad_i,  // cmd_i breaks the stage's rules (vdla_insn_check)
  input  logic                            cmd_no_data_i,  // cmd_i's x_size is 0 (vdla_insn_check)
  output logic                            cmd_pop_o,
  // dependency tokens
  input  logic                            c2s_avail_i,
  output logic                            c2s_pop_o,
  input  logic                            s2c_room_i,
  output logic                            s2c_push_o,
  // AXI write
  output logic                            awvalid_o,
  output logic [vdla_pkg::AXI_ADDR_W-1:0] awaddr_o,
  output logic [7:0]                      awlen_o,
  input  logic                            awready_i,
  output logic                            wvalid_o,
  output logic [vdla_pkg::BUS_WIDTH-1:0]  wdata_o,
  output logic                            wlast_o,
  input  logic                            wready_i,
  input  logic                            bvalid_i,
  input  logic [1:0]                      bresp_i,
  // OUT buffer read port
  output logic                            out_re_o,
  output logic [vdla_pkg::ACC_AW-1:0]     out_raddr_o,
  input  logic [vdla_pkg::OUT_BITS-1:0]   out_rdata_i,
  // the OUT mirror's write in this cycle (vdla_compute: two cycles after the ACC write), which a read in this
  // cycle or in the cycle before sees (forwarded)
  input  logic [vdla_pkg::LANES-1:0]      out_we_i,
  input  logic [vdla_pkg::ACC_AW-1:0]     out_waddr_i,
  input  logic [vdla_pkg::OUT_BITS-1:0]   out_wdata_i,
  // status
  output logic                            fire_o,
  output logic                            busy_o,
  output logic                            stall_o,
  output logic                            done_o,
  output logic                            err_o,
  output vdla_pkg::err_code_e             err_code_o
);
  localparam int ADDR_W      = vdla_pkg::AXI_ADDR_W;
  localparam int BUS_W       = vdla_pkg::BUS_WIDTH;
  localparam int OUT_W       = vdla_pkg::OUT_BITS;
  localparam int E           = OUT_W / BUS_W;  // beats per element
  localparam int EW          = $clog2(E + 1);
  localparam int AW_IX       = vdla_pkg::ACC_AW;
  localparam int LANES       = vdla_pkg::LANES;
  localparam int SETUP_EXTRA = vdla_pkg::DMA_SETUP - 1;
  localparam int NOP_EXTRA   = vdla_pkg::NOP_CYCLES - 1;

  // ---- decode and dispatch ------------------------------------------------------------------
  vdla_pkg::mem_insn_t mem;
  logic        is_nop, bad;
  logic [32:0] elems;

  assign mem    = cmd_i.mem;
  assign is_nop = cmd_no_data_i;
  assign elems  = 33'(mem.y_size) * 33'(mem.x_size);
  assign bad    = cmd_bad_i;

  typedef enum logic [1:0] {IDLE, BUSY, NOP} state_e;
  state_e     state_q;
  logic [7:0] nop_q;
  logic       push_q;
  logic       tokens_ok, idle, bus_err;

  assign idle       = state_q == IDLE && !halt_i;
  assign tokens_ok  = (!mem.hdr.pop_prev || c2s_avail_i) && (!mem.hdr.push_prev || s2c_room_i);
  assign fire_o     = idle && cmd_valid_i && !bad && tokens_ok;
  assign bus_err    = state_q == BUSY && bvalid_i && bresp_i != 2'b00;
  assign err_o      = (idle && cmd_valid_i && bad) || bus_err;
  assign err_code_o = bus_err ? vdla_pkg::ERR_BUS : vdla_pkg::ERR_INSN;
  assign stall_o    = idle && cmd_valid_i && !bad && !tokens_ok;
  assign busy_o     = fire_o || state_q != IDLE;
  assign cmd_pop_o  = fire_o;
  assign c2s_pop_o  = fire_o && mem.hdr.pop_prev;

  logic start;
  assign start = fire_o && !is_nop;

  // ---- write addresses ----------------------------------------------------------------------
  logic [7:0] hold_q;
  logic       aw_active, len_full;
  vdla_burst_gen #(.LEN_W(25)) u_bursts (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (start),
    .addr_i      (ADDR_W'(mem.dram_base) * ADDR_W'(OUT_W / 8)),
    .stride_i    (ADDR_W'(mem.x_stride) * ADDR_W'(OUT_W / 8)),
    .row_bytes_i (25'(mem.x_size) * 25'(OUT_W / 8)),
    .rows_i      (mem.y_size),
    .hold_i      (hold_q != '0 || len_full),
    .active_o    (aw_active),
    .valid_o     (awvalid_o),
    .addr_o      (awaddr_o),
    .len_o       (awlen_o),
    .ready_i     (awready_i)
  );

  // burst lengths for the W channel, outstanding write responses
  logic        len_valid;
  logic [7:0]  len_head;
  logic [7:0]  beat_q;  // beat within the burst
  logic [15:0] outstanding_q;
  logic        w_fire, aw_fire;
  logic [3:0]  unused_len_count;
  assign aw_fire = awvalid_o && awready_i;
  assign w_fire  = wvalid_o && wready_i;

  vdla_fifo #(.WIDTH(8), .DEPTH(8)) u_lens (
    .clk_i, .rst_ni, .clear_i (halt_i),
    .push_i (aw_fire), .push_data_i (awlen_o), .full_o (len_full),
    .pop_i (w_fire && wlast_o), .valid_o (len_valid), .data_o (len_head), .count_o (unused_len_count)
  );

  // ---- data: read OUT elements ahead into a small FIFO, send them beat by beat ----------------
  logic [32:0]      rd_left_q;      // elements still to read
  logic [AW_IX-1:0] rd_addr_q;
  logic             rd_pending_q;   // a read issued last cycle, data arriving now
  logic             el_valid, unused_el_full;
  logic [OUT_W-1:0] el_head;
  logic [2:0]       el_count;
  logic [EW-1:0]    ebeat_q;        // beat within the element
  logic             rd_issue;
  logic [32:0]      w_left_q;       // beats still to send

  // First read straight from the command at dispatch; then while the FIFO (4 deep) has room.
  assign rd_issue = start || (state_q == BUSY && rd_left_q != '0
                              && (el_count + 3'(rd_pending_q)) < 3'd3);
  assign out_re_o    = rd_issue;
  assign out_raddr_o = start ? AW_IX'(mem.sram_base) : rd_addr_q;

  // A read in the cycle the mirror writes its row, or in the cycle before, takes the written lanes from the
  // write: the mirror is written two cycles after ACC, and this makes the read see it as if it were written
  // with ACC. The read's address is registered and compared, in the cycle the data arrives, with the write of
  // the read's cycle (registered) and with the write of this cycle (the newer, first); the compares start at
  // flip-flops, away from the dispatch that picks the address.
  logic [AW_IX-1:0] fw_raddr_q, fw_waddr_q;
  logic [LANES-1:0] fw_we_q, fw, fw_now;
  logic [OUT_W-1:0] fw_data_q, rd_data;
  always_ff @(posedge clk_i) begin
    fw_raddr_q <= out_raddr_o;
    fw_waddr_q <= out_waddr_i;
    fw_we_q    <= out_we_i;
    fw_data_q  <= out_wdata_i;
  end
  assign fw     = fw_we_q & {LANES{fw_waddr_q == fw_raddr_q}};
  assign fw_now = out_we_i & {LANES{out_waddr_i == fw_raddr_q}};
  for (genvar l = 0; l < LANES; l++) begin : g_fw
    assign rd_data[l*8 +: 8] = fw_now[l] ? out_wdata_i[l*8 +: 8]
                             : fw[l] ? fw_data_q[l*8 +: 8] : out_rdata_i[l*8 +: 8];
  end

  vdla_fifo #(.WIDTH(OUT_W), .DEPTH(4)) u_elems (
    .clk_i, .rst_ni, .clear_i (halt_i),
    .push_i (rd_pending_q), .push_data_i (rd_data), .full_o (unused_el_full),
    .pop_i (w_fire && ebeat_q == EW'(E - 1)), .valid_o (el_valid), .data_o (el_head),
    .count_o (el_count)
  );

  assign wvalid_o = state_q == BUSY && !halt_i && el_valid && len_valid;
  assign wdata_o  = el_head[ebeat_q * BUS_W +: BUS_W];
  assign wlast_o  = beat_q == len_head;

  // ---- completion ---------------------------------------------------------------------------
  logic last_b;
  assign last_b = state_q == BUSY && bvalid_i && outstanding_q == 16'd1 && !aw_active && w_left_q == '0;
  assign done_o = (state_q == BUSY && last_b) || (state_q == NOP && nop_q == '0)
               || (fire_o && is_nop && NOP_EXTRA == 0);
  assign s2c_push_o = done_o && (state_q == IDLE ? mem.hdr.push_prev : push_q);

  // control: the state, the read issued last cycle and the setup wait
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q      <= IDLE;
      rd_pending_q <= 1'b0;
      hold_q       <= '0;
    end else if (halt_i) begin
      state_q      <= IDLE;
      rd_pending_q <= 1'b0;
      hold_q       <= '0;
    end else begin
      rd_pending_q <= rd_issue;
      if (hold_q != '0) hold_q <= hold_q - 1'b1;
      case (state_q)
        IDLE: if (fire_o) begin
          if (!is_nop) begin
            state_q <= BUSY;
            hold_q  <= 8'(SETUP_EXTRA);
          end else if (NOP_EXTRA != 0) begin
            state_q <= NOP;
          end
        end
        BUSY: if (last_b) state_q <= IDLE;
        NOP: if (nop_q == '0) state_q <= IDLE;
        default: state_q <= IDLE;
      endcase
    end
  end

  // The running instruction's push flag, the next OUT read address and the counts of elements, beats
  // and responses: loaded at dispatch (fire_o and start imply !halt_i), used while it runs, no reset.
  always_ff @(posedge clk_i) begin
    if (fire_o) begin
      push_q <= mem.hdr.push_prev;
      nop_q  <= 8'(NOP_EXTRA - 1);
    end
    if (start) begin
      rd_left_q     <= elems - 1'b1;
      rd_addr_q     <= AW_IX'(mem.sram_base) + 1'b1;
      w_left_q      <= elems * 33'(E);
      beat_q        <= '0;
      ebeat_q       <= '0;
      outstanding_q <= '0;
    end else if (!halt_i) begin
      case (state_q)
        BUSY: begin
          if (rd_issue) begin
            rd_left_q <= rd_left_q - 1'b1;
            rd_addr_q <= rd_addr_q + 1'b1;
          end
          if (w_fire) begin
            w_left_q <= w_left_q - 1'b1;
            beat_q   <= wlast_o ? '0 : beat_q + 1'b1;
            ebeat_q  <= ebeat_q == EW'(E - 1) ? '0 : ebeat_q + 1'b1;
          end
          if (aw_fire && !bvalid_i) outstanding_q <= outstanding_q + 1'b1;
          else if (!aw_fire && bvalid_i) outstanding_q <= outstanding_q - 1'b1;
        end
        NOP: nop_q <= nop_q - 1'b1;
        default: ;
      endcase
    end
  end

  logic unused_cmd;
  assign unused_cmd = ^{mem.rsvd_63_58, mem.hdr.opcode, mem.mem_type, mem.y_pad_0, mem.y_pad_1, mem.x_pad_0,
                       mem.x_pad_1, unused_len_count, unused_el_full};  // the checks read in vdla_insn_check

  // Every write response belongs to a burst that was issued.
  `ASSERT(a_b_expected, state_q == BUSY && bvalid_i |-> outstanding_q != '0,
          "store: write response without an outstanding burst")
endmodule
