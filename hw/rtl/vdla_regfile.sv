// AXI4-Lite register file (map: vdla/runtime/registers.py, docs/registers.md). One outstanding
// write and one outstanding read; writes take address and data together.
module vdla_regfile #(
  parameter int          NUM_CNT     = vdla_pkg::NUM_COUNTERS,
  parameter logic [15:0] ISA_VERSION = 16'(vdla_pkg::ISA_VERSION),
  parameter logic [31:0] CONFIG_HASH = vdla_pkg::CONFIG_HASH
) (
  input  logic                    clk_i,
  input  logic                    rst_ni,
  // AXI4-Lite slave
  input  logic [vdla_pkg::REG_ADDR_BITS-1:0] awaddr_i,
  input  logic                    awvalid_i,
  output logic                    awready_o,
  input  logic [31:0]             wdata_i,
  input  logic [3:0]              wstrb_i,
  input  logic                    wvalid_i,
  output logic                    wready_o,
  output logic [1:0]              bresp_o,
  output logic                    bvalid_o,
  input  logic                    bready_i,
  input  logic [vdla_pkg::REG_ADDR_BITS-1:0] araddr_i,
  input  logic                    arvalid_i,
  output logic                    arready_o,
  output logic [31:0]             rdata_o,
  output logic [1:0]              rresp_o,
  output logic                    rvalid_o,
  input  logic                    rready_i,
  // control
  output logic                    start_o,      // pulse
  output logic [vdla_pkg::AXI_ADDR_W-1:0] insn_addr_o,  // the instruction address's low AXI_ADDR_W bits
  output logic [31:0]             insn_count_o,
  output logic                    irq_o,
  // status
  input  logic                    busy_i,
  input  logic                    done_i,
  input  logic                    error_i,
  input  vdla_pkg::err_code_e     error_code_i,
  input  logic [1:0]              error_unit_i,
  input  logic [31:0]             error_insn_i,
  input  logic                    end_i,        // pulse: the run ended (done or error)
  input  logic [31:0]             tokens_i,
  input  logic [31:0]             cmd_queues_i,
  input  logic [31:0]             fetched_i,
  input  logic [32*3-1:0]         stage_insns_i,
  input  logic [32*6-1:0]         opcode_insns_i,
  input  logic [31:0]             stage_state_i,
  input  logic [64*NUM_CNT-1:0]   counters_i
);
  localparam int AB = vdla_pkg::REG_ADDR_BITS;

  logic        irq_pending_q, irq_en_q, bvalid_q, rvalid_q;
  logic [31:0] rdata_q, hi_q;
  logic [63:0] insn_addr_q;
  logic [31:0] insn_count_q;

  // ---- writes -------------------------------------------------------------------------------
  logic wr;
  assign wr        = awvalid_i && wvalid_i && !bvalid_q;
  assign awready_o = wr;
  assign wready_o  = wr;
  assign bvalid_o  = bvalid_q;
  assign bresp_o   = 2'b00;
  assign start_o   = wr && awaddr_i == vdla_pkg::REG_CONTROL && wdata_i[vdla_pkg::CONTROL_START_LSB] && !busy_i;

  function automatic logic [31:0] merge(input logic [31:0] old, input logic [31:0] data, input logic [3:0] strb);
    logic [31:0] r;
    r = old;
    for (int b = 0; b < 4; b++) begin
      if (strb[b]) r[b*8 +: 8] = data[b*8 +: 8];
    end
    merge = r;
  endfunction

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      bvalid_q      <= 1'b0;
      irq_pending_q <= 1'b0;
      irq_en_q      <= 1'b0;
      insn_addr_q   <= '0;
      insn_count_q  <= '0;
    end else begin
      if (bvalid_q && bready_i) bvalid_q <= 1'b0;
      if (end_i) irq_pending_q <= 1'b1;
      if (wr) begin
        bvalid_q <= 1'b1;
        case (awaddr_i)
          vdla_pkg::REG_IRQ:          if (wstrb_i[0] && wdata_i[vdla_pkg::IRQ_PENDING_LSB] && !end_i)
                                        irq_pending_q <= 1'b0;
          vdla_pkg::REG_IRQ_ENABLE:   if (wstrb_i[0]) irq_en_q <= wdata_i[vdla_pkg::IRQ_ENABLE_ENABLE_LSB];
          vdla_pkg::REG_INSN_COUNT:   insn_count_q <= merge(insn_count_q, wdata_i, wstrb_i);
          vdla_pkg::REG_INSN_ADDR_LO: insn_addr_q[31:0] <= merge(insn_addr_q[31:0], wdata_i, wstrb_i);
          vdla_pkg::REG_INSN_ADDR_HI: insn_addr_q[63:32] <= merge(insn_addr_q[63:32], wdata_i, wstrb_i);
          default: ;
        endcase
        if (start_o) irq_pending_q <= 1'b0;
      end
    end
  end

  assign insn_addr_o  = insn_addr_q[vdla_pkg::AXI_ADDR_W-1:0];
  assign insn_count_o = insn_count_q;
  assign irq_o        = irq_pending_q && irq_en_q;

  // ---- reads --------------------------------------------------------------------------------
  // Evaluated only when a read is accepted (keeps the simulation of idle cycles cheap).
  function automatic logic [31:0] read_value(input logic [AB-1:0] addr);
    logic [31:0]   value;
    logic [AB-1:0] cidx;
    cidx  = (addr - vdla_pkg::COUNTER_BASE) >> 3;
    value = '0;
    case (addr)
      vdla_pkg::REG_CONTROL:       value = 32'(busy_i);
      vdla_pkg::REG_STATUS:        value = 32'(done_i) << vdla_pkg::STATUS_DONE_LSB
                                     | 32'(error_i) << vdla_pkg::STATUS_ERROR_LSB
                                     | 32'(error_code_i) << vdla_pkg::STATUS_ERROR_CODE_LSB
                                     | 32'(error_unit_i) << vdla_pkg::STATUS_ERROR_UNIT_LSB;
      vdla_pkg::REG_IRQ:           value = 32'(irq_pending_q);
      vdla_pkg::REG_IRQ_ENABLE:    value = 32'(irq_en_q);
      vdla_pkg::REG_INSN_COUNT:    value = insn_count_q;
      vdla_pkg::REG_INSN_ADDR_LO:  value = insn_addr_q[31:0];
      vdla_pkg::REG_INSN_ADDR_HI:  value = insn_addr_q[63:32];
      vdla_pkg::REG_ID:            value = {vdla_pkg::ID_MAGIC, ISA_VERSION};
      vdla_pkg::REG_CONFIG_HASH:   value = CONFIG_HASH;
      vdla_pkg::REG_ERROR_INSN:    value = error_insn_i;
      vdla_pkg::REG_TOKENS:        value = tokens_i;
      vdla_pkg::REG_CMD_QUEUES:    value = cmd_queues_i;
      vdla_pkg::REG_FETCHED:       value = fetched_i;
      vdla_pkg::REG_LOAD_INSNS:    value = stage_insns_i[0 +: 32];
      vdla_pkg::REG_COMPUTE_INSNS: value = stage_insns_i[32 +: 32];
      vdla_pkg::REG_STORE_INSNS:   value = stage_insns_i[64 +: 32];
      vdla_pkg::REG_OPCODE_LOAD:   value = opcode_insns_i[0 +: 32];
      vdla_pkg::REG_OPCODE_STORE:  value = opcode_insns_i[32 +: 32];
      vdla_pkg::REG_OPCODE_GEMM:   value = opcode_insns_i[64 +: 32];
      vdla_pkg::REG_OPCODE_ALU:    value = opcode_insns_i[96 +: 32];
      vdla_pkg::REG_OPCODE_FINISH: value = opcode_insns_i[128 +: 32];
      vdla_pkg::REG_STAGE_STATE:   value = stage_state_i;
      vdla_pkg::REG_OPCODE_EPI:    value = opcode_insns_i[160 +: 32];
      default: begin
        if (addr >= vdla_pkg::COUNTER_BASE && int'(cidx) < NUM_CNT) begin
          value = addr[2] ? hi_q : counters_i[int'(cidx)*64 +: 32];
        end
      end
    endcase
    read_value = value;
  endfunction

  logic [AB-1:0] cidx;
  assign cidx = (araddr_i - vdla_pkg::COUNTER_BASE) >> 3;

  assign arready_o = !rvalid_q;
  assign rvalid_o  = rvalid_q;
  assign rdata_o   = rdata_q;
  assign rresp_o   = 2'b00;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rvalid_q <= 1'b0;
    end else begin
      if (rvalid_q && rready_i) rvalid_q <= 1'b0;
      if (arvalid_i && arready_o) rvalid_q <= 1'b1;
    end
  end

  // the read data, and the HI word latched by reading a counter's LO word
  always_ff @(posedge clk_i) begin
    if (arvalid_i && arready_o) begin
      rdata_q <= read_value(araddr_i);
      if (araddr_i >= vdla_pkg::COUNTER_BASE && !araddr_i[2] && int'(cidx) < NUM_CNT)
        hi_q <= counters_i[int'(cidx)*64 + 32 +: 32];
    end
  end

  // AXI4-Lite: a response, once valid, stays valid and unchanged until accepted.
  `ASSERT(a_r_stable, rvalid_o && !rready_i |=> rvalid_o && $stable(rdata_o) && $stable(rresp_o),
          "AXI4-Lite R changed before it was accepted")
  `ASSERT(a_b_stable, bvalid_o && !bready_i |=> bvalid_o && $stable(bresp_o),
          "AXI4-Lite B changed before it was accepted")
endmodule
