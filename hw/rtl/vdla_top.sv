// The VDLA accelerator: fetch, three decoupled stages (load, compute, store) with their command
// queues and four dependency-token queues, the on-chip buffers, one AXI4 master shared through an
// arbiter and an AXI4-Lite register file. Every parameter comes from the generated package vdla_pkg.
module vdla_top #(
  parameter int ADDR_W = vdla_pkg::AXI_ADDR_W,
  parameter int IDW    = vdla_pkg::AXI_ID_W
) (
  input  logic                   clk_i,
  input  logic                   rst_ni,
  // AXI4-Lite slave: registers
  input  logic [vdla_pkg::REG_ADDR_BITS-1:0] s_axil_awaddr,
  input  logic                   s_axil_awvalid,
  output logic                   s_axil_awready,
  input  logic [31:0]            s_axil_wdata,
  input  logic [3:0]             s_axil_wstrb,
  input  logic                   s_axil_wvalid,
  output logic                   s_axil_wready,
  output logic [1:0]             s_axil_bresp,
  output logic                   s_axil_bvalid,
  input  logic                   s_axil_bready,
  input  logic [vdla_pkg::REG_ADDR_BITS-1:0] s_axil_araddr,
  input  logic                   s_axil_arvalid,
  output logic                   s_axil_arready,
  output logic [31:0]            s_axil_rdata,
  output logic [1:0]             s_axil_rresp,
  output logic                   s_axil_rvalid,
  input  logic                   s_axil_rready,
  // AXI4 master: DRAM
  output logic [IDW-1:0]         m_axi_arid,
  output logic [ADDR_W-1:0]      m_axi_araddr,
  output logic [7:0]             m_axi_arlen,
  output logic [2:0]             m_axi_arsize,
  output logic [1:0]             m_axi_arburst,
  output logic                   m_axi_arvalid,
  input  logic                   m_axi_arready,
  input  logic [IDW-1:0]         m_axi_rid,
  input  logic [vdla_pkg::BUS_WIDTH-1:0] m_axi_rdata,
  input  logic [1:0]             m_axi_rresp,
  input  logic                   m_axi_rlast,
  input  logic                   m_axi_rvalid,
  output logic                   m_axi_rready,
  output logic [IDW-1:0]         m_axi_awid,
  output logic [ADDR_W-1:0]      m_axi_awaddr,
  output logic [7:0]             m_axi_awlen,
  output logic [2:0]             m_axi_awsize,
  output logic [1:0]             m_axi_awburst,
  output logic                   m_axi_awvalid,
  input  logic                   m_axi_awready,
  output logic [vdla_pkg::BUS_WIDTH-1:0] m_axi_wdata,
  output logic [vdla_pkg::BUS_WIDTH/8-1:0] m_axi_wstrb,
  output logic                   m_axi_wlast,
  output logic                   m_axi_wvalid,
  input  logic                   m_axi_wready,
  input  logic [IDW-1:0]         m_axi_bid,
  input  logic [1:0]             m_axi_bresp,
  input  logic                   m_axi_bvalid,
  output logic                   m_axi_bready,
  // interrupt and instruction trace (per stage: started [2:0], completed [5:3])
  output logic                   irq_o,
  output logic [5:0]             trace_o
);
  localparam int BUS_W  = vdla_pkg::BUS_WIDTH;
  localparam int INP_W  = vdla_pkg::INP_BITS;
  localparam int WGT_W  = vdla_pkg::WGT_BITS;
  localparam int LANES  = vdla_pkg::LANES;
  localparam int ACC_W  = vdla_pkg::ACC_BITS;
  localparam int OUT_W  = vdla_pkg::OUT_BITS;
  localparam int INP_AW = vdla_pkg::INP_AW;
  localparam int WGT_AW = vdla_pkg::WGT_AW;
  localparam int ACC_AW = vdla_pkg::ACC_AW;
  localparam int QD     = vdla_pkg::CMD_QUEUE_DEPTH;
  localparam int TD     = vdla_pkg::TOKEN_QUEUE_DEPTH;
  localparam int ISA_W  = vdla_pkg::INSN_BITS;
  localparam int QUIET_W = $clog2(vdla_pkg::DEADLOCK_WINDOW + 1);

  // ---- control ------------------------------------------------------------------------------
  logic        start, running_q, done_q, error_q, finish_q, end_pulse;
  vdla_pkg::err_code_e err_code_q;
  logic [1:0]  err_unit_q;
  logic [31:0] err_insn_q;
  logic [ADDR_W-1:0] insn_addr;
  logic [31:0] insn_count;
  logic        halt;
  logic [QUIET_W-1:0] quiet_q;  // consecutive quiet cycles, up to the deadlock window
  assign halt = error_q;

  // ---- units' signals -----------------------------------------------------------------------
  // (an unpacked array of a packed struct or union type reads as 1-bit elements in Yosys: plain vectors)
  vdla_pkg::insn_t  fetch_insn;
  logic [33:0]      fetch_tile_end;  // vdla_pkg::mem_tile_end(fetch_insn.mem), formed a cycle ahead (vdla_fetch)
  logic [ISA_W-1:0] q_head [3];
  logic [2:0]       q_push, q_full, q_valid, q_pop, q_bad, q_no_data;
  logic [$clog2(QD):0] q_count [3];
  logic [31:0]      fetched;
  logic             fetch_done, fetch_active, fetch_err;
  vdla_pkg::err_code_e fetch_err_code;
  logic [2:0]       fire, busy, stall, sdone, serr;
  vdla_pkg::err_code_e serr_code [3];
  logic             finish;

  // token queues: L2C, C2L, C2S, S2C
  logic [3:0] t_push, t_pop, t_avail, t_room;
  logic [$clog2(TD+1)-1:0] t_count [4];
  for (genvar q = 0; q < 4; q++) begin : g_tokens
    vdla_token_queue #(.DEPTH(TD)) u_queue (
      .clk_i, .rst_ni, .clear_i (start), .push_i (t_push[q]), .pop_i (t_pop[q]),
      .avail_o (t_avail[q]), .room_o (t_room[q]), .count_o (t_count[q])
    );
  end

  // ---- AXI read arbiter: load 0, compute 1, fetch 2 (lower index wins a tie) ---------------
  // Each requester's read channel is a vdla_pkg::axi_rd_req_t and axi_rd_rsp_t; the arbiter's are those of the
  // m_axi_* ports, unpacked here (the ports stay flat for the harness, the benches and the block design).
  logic [2:0][vdla_pkg::AXI_RD_REQ_W-1:0] rd_req;  // axi_rd_req_t of load, compute, fetch
  logic [2:0][vdla_pkg::AXI_RD_RSP_W-1:0] rd_rsp;  // axi_rd_rsp_t of load, compute, fetch
  vdla_pkg::axi_rd_req_t                  m_rd_req;
  vdla_pkg::axi_rd_rsp_t                  m_rd_rsp;
  vdla_axi_rd_arb #(.N(3), .IDW(IDW)) u_arb (
    .clk_i, .rst_ni, .req_i (rd_req), .rsp_o (rd_rsp),
    .axi_rd_req_o (m_rd_req), .arid_o (m_axi_arid), .axi_rd_rsp_i (m_rd_rsp), .rid_i (m_axi_rid)
  );
  assign m_axi_arvalid     = m_rd_req.ar_valid;
  assign m_axi_araddr      = m_rd_req.ar_addr;
  assign m_axi_arlen       = m_rd_req.ar_len;
  assign m_axi_arsize      = 3'($clog2(BUS_W / 8));
  assign m_axi_arburst     = 2'b01;
  assign m_axi_rready      = 1'b1;
  assign m_rd_rsp.ar_ready = m_axi_arready;
  assign m_rd_rsp.r_valid  = m_axi_rvalid;
  assign m_rd_rsp.r_resp   = m_axi_rresp;
  assign m_rd_rsp.r_data   = m_axi_rdata;

  // ---- fetch and command queues -------------------------------------------------------------
  vdla_fetch u_fetch (
    .clk_i, .rst_ni, .halt_i (halt), .start_i (start), .insn_addr_i (insn_addr), .insn_count_i (insn_count),
    .axi_rd_req_o (rd_req[2]), .axi_rd_rsp_i (rd_rsp[2]),
    .insn_o (fetch_insn), .tile_end_o (fetch_tile_end), .push_o (q_push), .full_i (q_full), .fetched_o (fetched),
    .done_o (fetch_done), .active_o (fetch_active), .err_o (fetch_err), .err_code_o (fetch_err_code)
  );

  // Each queued instruction carries its stage's dispatch check and whether it moves no data (x_size 0),
  // decided as it is routed.
  logic [2:0] fetch_bad;
  logic       fetch_no_data;
  assign fetch_no_data = fetch_insn.mem.x_size == '0;
  vdla_insn_check u_check (
    .insn_i (fetch_insn), .tile_end_i (fetch_tile_end),
    .load_bad_o (fetch_bad[0]), .compute_bad_o (fetch_bad[1]), .store_bad_o (fetch_bad[2])
  );

  for (genvar s = 0; s < 3; s++) begin : g_cmdq
    // the check's bit (formed late, read by the dispatch alone) is read from the queue's RAM
    vdla_fifo #(.WIDTH(ISA_W + 2), .DEPTH(QD), .RAW_BITS(1)) u_queue (
      .clk_i, .rst_ni, .clear_i (start),  // kept on an error, for the diagnosis
      .push_i (q_push[s]), .push_data_i ({fetch_bad[s], fetch_no_data, fetch_insn}), .full_o (q_full[s]),
      .pop_i (q_pop[s]), .valid_o (q_valid[s]), .data_o ({q_bad[s], q_no_data[s], q_head[s]}), .count_o (q_count[s])
    );
  end

  // ---- buffers ------------------------------------------------------------------------------
  logic [INP_W/BUS_W-1:0] inp_we;
  logic [INP_AW-1:0]      inp_waddr, inp_raddr;
  logic [INP_W-1:0]       inp_wdata, inp_rdata;
  logic                   inp_re;
  logic                   inp_src_out;   // the compute stage's input read is of OUT (EPI src_out)
  logic [ACC_AW-1:0]      inp_out_raddr;
  logic [INP_W-1:0]       gemm_rdata;    // the input row the compute stage reads: INP's or OUT's
  logic [WGT_W/BUS_W-1:0] wgt_we;
  logic [WGT_AW-1:0]      wgt_waddr, wgt_raddr;
  logic [WGT_W-1:0]       wgt_wdata, wgt_rdata;
  logic                   wgt_re;
  logic [LANES-1:0]       acc_we, out_we;
  logic [ACC_AW-1:0]      acc_waddr, acc_raddr, out_waddr, out_raddr;
  logic [ACC_W-1:0]       acc_wdata, acc_rdata;
  logic [OUT_W-1:0]       out_wdata, out_rdata;
  logic                   acc_re, out_re;

  vdla_sram #(.WIDTH(INP_W), .DEPTH(vdla_pkg::INP_DEPTH), .LANE(BUS_W), .ULTRA(vdla_pkg::INP_URAM)) u_inp (
    .clk_i, .we_i (inp_we), .waddr_i (inp_waddr), .wdata_i (inp_wdata),
    .re_i (inp_re && !inp_src_out), .raddr_i (inp_raddr), .rdata_o (inp_rdata));
  vdla_sram #(.WIDTH(WGT_W), .DEPTH(vdla_pkg::WGT_DEPTH), .LANE(BUS_W), .ULTRA(vdla_pkg::WGT_URAM)) u_wgt (
    .clk_i, .we_i (wgt_we), .waddr_i (wgt_waddr), .wdata_i (wgt_wdata),
    .re_i (wgt_re), .raddr_i (wgt_raddr), .rdata_o (wgt_rdata));
  vdla_sram #(.WIDTH(ACC_W), .DEPTH(vdla_pkg::ACC_DEPTH), .LANE(32), .ULTRA(vdla_pkg::ACC_URAM)) u_acc (
    .clk_i, .we_i (acc_we), .waddr_i (acc_waddr), .wdata_i (acc_wdata),
    .re_i (acc_re), .raddr_i (acc_raddr), .rdata_o (acc_rdata));
  vdla_sram #(.WIDTH(OUT_W), .DEPTH(vdla_pkg::ACC_DEPTH), .LANE(8), .ULTRA(vdla_pkg::OUT_URAM)) u_out (
    .clk_i, .we_i (out_we), .waddr_i (out_waddr), .wdata_i (out_wdata),
    .re_i (out_re), .raddr_i (out_raddr), .rdata_o (out_rdata));

  // EPI src_out: the compute stage reads its input rows from OUT, through a read-only copy of it written with it
  // (the store stage reads the other), on the INP read's port and in its cycles (the configuration's OUT rows are
  // INP rows, BLOCK_IN == BLOCK_OUT, and the config builds it, SRC_OUT_SUPPORTED; else vdla_insn_check refuses
  // src_out). The read's source is registered with the read, as the data is, so the choice of the data is the
  // read's even when an EPI changes the state in the cycle the data arrives; the choice sits right after the block
  // RAMs' output registers.
  if (vdla_pkg::SRC_OUT_SUPPORTED != 0) begin : g_src_out
    logic [OUT_W-1:0] src_rdata;
    logic             src_out_q;  // the source of the row read last (the data now at the block RAMs' outputs)
    vdla_sram #(.WIDTH(OUT_W), .DEPTH(vdla_pkg::ACC_DEPTH), .LANE(8), .ULTRA(vdla_pkg::OUT_URAM)) u_out_src (
      .clk_i, .we_i (out_we), .waddr_i (out_waddr), .wdata_i (out_wdata),
      .re_i (inp_re && inp_src_out), .raddr_i (inp_out_raddr), .rdata_o (src_rdata));
    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) src_out_q <= 1'b0;
      else if (inp_re) src_out_q <= inp_src_out;
    end
    assign gemm_rdata = src_out_q ? INP_W'(src_rdata) : inp_rdata;
  end else begin : g_no_src_out
    logic unused_src_out;
    assign unused_src_out = ^{inp_src_out, inp_out_raddr};
    assign gemm_rdata     = inp_rdata;
  end

  // ---- stages -------------------------------------------------------------------------------
  logic [vdla_pkg::UOP_BANKS-1:0]                          pre_uop_we;  // the load stage's LOAD UOP_PRE
  logic [vdla_pkg::UOP_BANKS-1:0][vdla_pkg::UOP_BANK_AW-1:0] pre_uop_waddr;
  logic [vdla_pkg::UOP_BANKS-1:0][31:0]                    pre_uop_wdata;
  vdla_load u_load (
    .clk_i, .rst_ni, .halt_i (halt),
    .cmd_valid_i (q_valid[0]), .cmd_i (q_head[0]), .cmd_bad_i (q_bad[0]), .cmd_no_data_i (q_no_data[0]),
    .cmd_pop_o (q_pop[0]),
    .c2l_avail_i (t_avail[1]), .c2l_pop_o (t_pop[1]), .l2c_room_i (t_room[0]), .l2c_push_o (t_push[0]),
    .axi_rd_req_o (rd_req[0]), .axi_rd_rsp_i (rd_rsp[0]),
    .inp_we_o (inp_we), .inp_waddr_o (inp_waddr), .inp_wdata_o (inp_wdata),
    .wgt_we_o (wgt_we), .wgt_waddr_o (wgt_waddr), .wgt_wdata_o (wgt_wdata),
    .uop_we_o (pre_uop_we), .uop_waddr_o (pre_uop_waddr), .uop_wdata_o (pre_uop_wdata),
    .fire_o (fire[0]), .busy_o (busy[0]), .stall_o (stall[0]), .done_o (sdone[0]),
    .err_o (serr[0]), .err_code_o (serr_code[0])
  );

  vdla_compute u_compute (
    .clk_i, .rst_ni, .halt_i (halt), .start_i (start),
    .cmd_valid_i (q_valid[1]), .cmd_i (q_head[1]), .cmd_bad_i (q_bad[1]), .cmd_no_data_i (q_no_data[1]),
    .cmd_pop_o (q_pop[1]),
    .l2c_avail_i (t_avail[0]), .l2c_pop_o (t_pop[0]), .s2c_avail_i (t_avail[3]), .s2c_pop_o (t_pop[3]),
    .c2l_room_i (t_room[1]), .c2l_push_o (t_push[1]), .c2s_room_i (t_room[2]), .c2s_push_o (t_push[2]),
    .axi_rd_req_o (rd_req[1]), .axi_rd_rsp_i (rd_rsp[1]),
    .inp_re_o (inp_re), .inp_raddr_o (inp_raddr), .inp_rdata_i (gemm_rdata),
    .inp_src_out_o (inp_src_out), .inp_out_raddr_o (inp_out_raddr),
    .wgt_re_o (wgt_re), .wgt_raddr_o (wgt_raddr), .wgt_rdata_i (wgt_rdata),
    .acc_re_o (acc_re), .acc_raddr_o (acc_raddr), .acc_rdata_i (acc_rdata),
    .acc_we_o (acc_we), .acc_waddr_o (acc_waddr), .acc_wdata_o (acc_wdata),
    .out_we_o (out_we), .out_waddr_o (out_waddr), .out_wdata_o (out_wdata),
    .pre_uop_we_i (pre_uop_we), .pre_uop_waddr_i (pre_uop_waddr), .pre_uop_wdata_i (pre_uop_wdata),
    .fire_o (fire[1]), .busy_o (busy[1]), .stall_o (stall[1]), .done_o (sdone[1]), .finish_o (finish),
    .err_o (serr[1]), .err_code_o (serr_code[1])
  );

  vdla_store u_store (
    .clk_i, .rst_ni, .halt_i (halt),
    .cmd_valid_i (q_valid[2]), .cmd_i (q_head[2]), .cmd_bad_i (q_bad[2]), .cmd_no_data_i (q_no_data[2]),
    .cmd_pop_o (q_pop[2]),
    .c2s_avail_i (t_avail[2]), .c2s_pop_o (t_pop[2]), .s2c_room_i (t_room[3]), .s2c_push_o (t_push[3]),
    .awvalid_o (m_axi_awvalid), .awaddr_o (m_axi_awaddr), .awlen_o (m_axi_awlen), .awready_i (m_axi_awready),
    .wvalid_o (m_axi_wvalid), .wdata_o (m_axi_wdata), .wlast_o (m_axi_wlast), .wready_i (m_axi_wready),
    .bvalid_i (m_axi_bvalid), .bresp_i (m_axi_bresp),
    .out_re_o (out_re), .out_raddr_o (out_raddr), .out_rdata_i (out_rdata),
    .out_we_i (out_we), .out_waddr_i (out_waddr), .out_wdata_i (out_wdata),
    .fire_o (fire[2]), .busy_o (busy[2]), .stall_o (stall[2]), .done_o (sdone[2]),
    .err_o (serr[2]), .err_code_o (serr_code[2])
  );
  assign m_axi_awid    = '0;
  assign m_axi_awsize  = 3'($clog2(BUS_W / 8));
  assign m_axi_awburst = 2'b01;
  assign m_axi_wstrb   = '1;
  assign m_axi_bready  = 1'b1;
  assign trace_o       = {sdone, fire};

  // ---- performance counters and registers ---------------------------------------------------
  logic [64*vdla_pkg::NUM_COUNTERS-1:0] counters;
  logic [32*3-1:0] stage_insns;
  logic [32*6-1:0] opcode_insns;
  logic            done_cond, deadlock;

  vdla_perf u_perf (
    .clk_i, .rst_ni, .clear_i (start), .count_i (running_q && !done_cond), .busy_i (busy), .stall_i (stall),
    .fire_i (fire), .load_cmd_i (q_head[0]), .compute_cmd_i (q_head[1]), .store_cmd_i (q_head[2]),
    .counters_o (counters), .stage_insns_o (stage_insns), .opcode_insns_o (opcode_insns)
  );

  vdla_regfile u_regs (
    .clk_i, .rst_ni,
    .awaddr_i (s_axil_awaddr), .awvalid_i (s_axil_awvalid), .awready_o (s_axil_awready),
    .wdata_i (s_axil_wdata), .wstrb_i (s_axil_wstrb), .wvalid_i (s_axil_wvalid), .wready_o (s_axil_wready),
    .bresp_o (s_axil_bresp), .bvalid_o (s_axil_bvalid), .bready_i (s_axil_bready),
    .araddr_i (s_axil_araddr), .arvalid_i (s_axil_arvalid), .arready_o (s_axil_arready),
    .rdata_o (s_axil_rdata), .rresp_o (s_axil_rresp), .rvalid_o (s_axil_rvalid), .rready_i (s_axil_rready),
    .start_o (start), .insn_addr_o (insn_addr), .insn_count_o (insn_count), .irq_o,
    .busy_i (running_q || err_pend_q), .done_i (done_q), .error_i (error_q && !err_pend_q),
    .error_code_i (err_code_q),
    .error_unit_i (err_unit_q), .error_insn_i (err_insn_q), .end_i (end_pulse),
    .tokens_i ({8'(t_count[3]), 8'(t_count[2]), 8'(t_count[1]), 8'(t_count[0])}),
    .cmd_queues_i ({8'd0, 8'(q_count[2]), 8'(q_count[1]), 8'(q_count[0])}),
    .fetched_i (fetched), .stage_insns_i (stage_insns), .opcode_insns_i (opcode_insns),
    .stage_state_i ({25'd0, stall, 1'b0, busy}), .counters_i (counters)
  );

  // ---- run control: done, first error, deadlock ---------------------------------------------
  // Done: FINISH has run and every unit is idle with nothing left to do.
  assign done_cond = running_q && finish_q && busy == '0 && q_valid == '0 && fetch_done && !error_q;
  // Deadlock: nothing executes, nothing is in flight and no stage can start, for DEADLOCK_WINDOW cycles.
  assign deadlock  = quiet_q == QUIET_W'(vdla_pkg::DEADLOCK_WINDOW);
  assign end_pulse = done_cond || err_pend_q;  // an error's end waits for its details (below)

  // The first error is taken in two steps. error_q (the halt) is set at once; the error's unit, cause and
  // instruction (STATUS, ERROR_INSN) are chosen a cycle later (err_pend_q) from registered copies of every
  // candidate, so that no unit's error logic feeds the 32-bit choice (the timing proxy, docs/rtl.md). The host
  // sees the error only with its details: STATUS.ERROR, the end of the run (IRQ) and the fall of CONTROL.BUSY
  // wait for that cycle, and the run's counters stop with running_q as before.
  logic                new_error, err_pend_q;
  logic [1:0]          serr_q;  // the third unit's error is the only one left when these are clear
  vdla_pkg::err_code_e serr_code_q [3];
  logic                fetch_err_q, deadlock_q;
  vdla_pkg::err_code_e fetch_err_code_q;
  logic [31:0]         fetched_q;
  logic [32*3-1:0]     stage_insns_q;
  logic [31:0]         unit_insn [3];  // each stage's ERROR_INSN, were its error the first
  vdla_pkg::err_code_e unit_code;
  logic [31:0]         unit_err_insn;
  assign new_error = running_q && !error_q && (fetch_err || |serr || deadlock);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      running_q  <= 1'b0;
      done_q     <= 1'b0;
      error_q    <= 1'b0;
      err_pend_q <= 1'b0;
      finish_q   <= 1'b0;
      quiet_q    <= '0;
    end else if (start) begin
      running_q  <= 1'b1;
      done_q     <= 1'b0;
      error_q    <= 1'b0;
      err_pend_q <= 1'b0;
      finish_q   <= 1'b0;
      quiet_q    <= '0;
    end else begin
      err_pend_q <= new_error;
      if (running_q) begin
        if (finish) finish_q <= 1'b1;
        if (busy == '0 && fire == '0 && !fetch_active && (q_valid & ~stall) == '0 && !done_cond)
          quiet_q <= quiet_q + 1'b1;
        else
          quiet_q <= '0;
        if (done_cond) begin
          running_q <= 1'b0;
          done_q    <= 1'b1;
        end
        if (new_error) begin
          error_q   <= 1'b1;
          running_q <= 1'b0;
        end
      end
    end
  end

  // every cycle's candidates, for the cycle after an error
  always_ff @(posedge clk_i) begin
    serr_q           <= serr[1:0];
    serr_code_q      <= serr_code;
    fetch_err_q      <= fetch_err;
    fetch_err_code_q <= fetch_err_code;
    deadlock_q       <= deadlock;
    fetched_q        <= fetched;
    stage_insns_q    <= stage_insns;
  end

  // The first error's unit, cause and instruction (STATUS, ERROR_INSN): cleared by START.
  always_ff @(posedge clk_i) begin
    if (start) begin
      err_code_q <= vdla_pkg::ERR_NONE;
      err_unit_q <= '0;
      err_insn_q <= '0;
    end else if (err_pend_q) begin
      if (fetch_err_q) begin
        err_unit_q <= 2'd0;
        err_code_q <= fetch_err_code_q;
        err_insn_q <= fetched_q;
      end else if (deadlock_q) begin
        err_unit_q <= 2'd0;
        err_code_q <= vdla_pkg::ERR_DEADLOCK;
        err_insn_q <= fetched_q;
      end else begin
        err_unit_q <= serr_q[0] ? 2'd1 : serr_q[1] ? 2'd2 : 2'd3;
        err_code_q <= unit_code;
        err_insn_q <= unit_err_insn;
      end
    end
  end

  // Errors found at dispatch name the next instruction, later ones the running one.
  for (genvar s = 0; s < 3; s++) begin : g_unit_insn
    logic [31:0] next_insn;
    assign next_insn    = stage_insns_q[s*32 +: 32];
    assign unit_insn[s] = serr_code_q[s] == vdla_pkg::ERR_INSN ? next_insn : next_insn - 1'b1;
  end

  always_comb begin
    if (serr_q[0]) begin
      unit_code     = serr_code_q[0];
      unit_err_insn = unit_insn[0];
    end else if (serr_q[1]) begin
      unit_code     = serr_code_q[1];
      unit_err_insn = unit_insn[1];
    end else begin
      unit_code     = serr_code_q[2];
      unit_err_insn = unit_insn[2];
    end
  end

  logic unused_axi;
  assign unused_axi = m_axi_rlast ^ (|m_axi_bid);

  // ---- assertions ---------------------------------------------------------------------------
  // AXI4 master: a request or write beat, once valid, stays valid and unchanged until accepted. The
  // one exception is an error: halt withdraws every request at once (the run is over).
  `ASSERT(a_ar_stable, m_axi_arvalid && !m_axi_arready
      |=> halt || (m_axi_arvalid && $stable({m_axi_arid, m_axi_araddr, m_axi_arlen, m_axi_arsize, m_axi_arburst})),
      "AXI AR withdrawn or changed before it was accepted")
  `ASSERT(a_aw_stable, m_axi_awvalid && !m_axi_awready
      |=> halt || (m_axi_awvalid && $stable({m_axi_awid, m_axi_awaddr, m_axi_awlen, m_axi_awsize, m_axi_awburst})),
      "AXI AW withdrawn or changed before it was accepted")
  `ASSERT(a_w_stable,
      m_axi_wvalid && !m_axi_wready |=> halt || (m_axi_wvalid && $stable({m_axi_wdata, m_axi_wstrb, m_axi_wlast})),
      "AXI W withdrawn or changed before it was accepted")
  // Once an error is flagged, no DRAM write is requested or sent.
  `ASSERT(a_no_write_after_error, error_q |-> !m_axi_awvalid && !m_axi_wvalid, "DRAM write after an error")
  // Only one command queue takes each fetched instruction; a stage starts only what it was given.
  `ASSERT(a_one_route, $onehot0(q_push), "an instruction routed to two command queues")
  // The handshakes and the interrupt the system sees are never X out of reset (a four-state simulator's check).
  `ASSERT_KNOWN(a_valids_known, {m_axi_arvalid, m_axi_rready, m_axi_awvalid, m_axi_wvalid, m_axi_bready})
  `ASSERT_KNOWN(a_axil_known, {s_axil_awready, s_axil_wready, s_axil_bvalid, s_axil_arready, s_axil_rvalid})
  `ASSERT_KNOWN(a_irq_known, irq_o)
endmodule
