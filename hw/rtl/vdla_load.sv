// The load stage: LOADs of INP and WGT tiles (2-D DMA with zero padding) and of micro-ops ahead of the compute
// stage (UOP_PRE, unpadded: the compute stage's micro-op banks, through vdla_uop_write). Pops compute->load tokens
// (pop_next) and pushes load->compute tokens (push_next).
module vdla_load (
  input  logic                          clk_i,
  input  logic                          rst_ni,
  input  logic                          halt_i,
  // command queue
  input  logic                          cmd_valid_i,
  input  vdla_pkg::insn_t               cmd_i,
  input  logic                          cmd_bad_i,  // cmd_i breaks the stage's rules (vdla_insn_check)
  input  logic                          cmd_no_data_i,  // cmd_i's x_size is 0 (vdla_insn_check)
  output logic                          cmd_pop_o,
  // dependency tokens
  input  logic                          c2l_avail_i,
  output logic                          c2l_pop_o,
  input  logic                          l2c_room_i,
  output logic                          l2c_push_o,
  // AXI read (the load engine's)
  output vdla_pkg::axi_rd_req_t         axi_rd_req_o,
  input  vdla_pkg::axi_rd_rsp_t         axi_rd_rsp_i,
  // buffers
  output logic [vdla_pkg::INP_BITS/vdla_pkg::BUS_WIDTH-1:0] inp_we_o,
  output logic [vdla_pkg::INP_AW-1:0]   inp_waddr_o,
  output logic [vdla_pkg::INP_BITS-1:0] inp_wdata_o,
  output logic [vdla_pkg::WGT_BITS/vdla_pkg::BUS_WIDTH-1:0] wgt_we_o,
  output logic [vdla_pkg::WGT_AW-1:0]   wgt_waddr_o,
  output logic [vdla_pkg::WGT_BITS-1:0] wgt_wdata_o,
  output logic [vdla_pkg::UOP_BANKS-1:0] uop_we_o,  // UOP_PRE: the compute stage's micro-op banks
  output logic [vdla_pkg::UOP_BANKS-1:0][vdla_pkg::UOP_BANK_AW-1:0] uop_waddr_o,
  output logic [vdla_pkg::UOP_BANKS-1:0][31:0] uop_wdata_o,
  // status
  output logic                          fire_o,
  output logic                          busy_o,
  output logic                          stall_o,
  output logic                          done_o,
  output logic                          err_o,
  output vdla_pkg::err_code_e           err_code_o
);
  localparam int BUS_W     = vdla_pkg::BUS_WIDTH;
  localparam int LB        = $clog2(BUS_W / 8);
  localparam int INP_LANES = vdla_pkg::INP_BITS / BUS_W;  // bus beats per element = write lanes
  localparam int WGT_LANES = vdla_pkg::WGT_BITS / BUS_W;
  localparam int IDX_W     = 16;
  localparam int NOP_EXTRA = vdla_pkg::NOP_CYCLES - 1;

  // ---- decode and dispatch ------------------------------------------------------------------
  vdla_pkg::mem_insn_t mem;
  logic tokens_ok, idle, is_nop, is_wgt, is_uop, bad;

  assign mem    = cmd_i.mem;
  assign is_nop = cmd_no_data_i;
  assign is_wgt = mem.mem_type == vdla_pkg::MEM_WGT;
  assign is_uop = mem.mem_type == vdla_pkg::MEM_UOP_PRE;
  assign bad    = cmd_bad_i;

  typedef enum logic [1:0] {IDLE, BUSY, NOP} state_e;
  state_e     state_q;
  logic [7:0] nop_q;
  logic       wgt_q, uop_q, push_q;
  logic       eng_valid, eng_pad, eng_done, eng_err;

  assign idle       = state_q == IDLE && !halt_i;
  assign tokens_ok  = (!mem.hdr.pop_next || c2l_avail_i) && (!mem.hdr.push_next || l2c_room_i);
  assign fire_o     = idle && cmd_valid_i && !bad && tokens_ok;
  assign err_o      = idle && cmd_valid_i && bad || eng_err;
  assign err_code_o = eng_err ? vdla_pkg::ERR_BUS : vdla_pkg::ERR_INSN;
  assign stall_o    = idle && cmd_valid_i && !bad && !tokens_ok;
  assign busy_o     = fire_o || state_q != IDLE;
  assign cmd_pop_o  = fire_o;
  assign c2l_pop_o  = fire_o && mem.hdr.pop_next;

  // ---- data path ------------------------------------------------------------------------------
  logic [IDX_W+1:0]   eng_idx;
  logic signed [25:0] eng_off;
  logic [BUS_W-1:0]   eng_data;
  logic [24:0]        eng_row_bytes;

  vdla_load_engine #(.IDX_W(IDX_W)) u_engine (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (fire_o && !is_nop),
    .log_eb_i    (is_uop ? 4'd2 : is_wgt ? 4'($clog2(vdla_pkg::WGT_ELEM_BYTES))
                                         : 4'($clog2(vdla_pkg::INP_ELEM_BYTES))),
    .insn_i      (mem),
    .axi_rd_req_o, .axi_rd_rsp_i,
    .wr_valid_o  (eng_valid),
    .wr_pad_o    (eng_pad),
    .wr_idx_o    (eng_idx),
    .wr_off_o    (eng_off),
    .wr_data_o   (eng_data),
    .row_bytes_o (eng_row_bytes),
    .done_o      (eng_done),
    .err_o       (eng_err)
  );

  // Beat b of an element goes to write lane b; padding zeroes every lane.
  logic [7:0] beat;
  assign beat = 8'(eng_off >>> LB);
  always_comb begin
    inp_we_o    = '0;
    wgt_we_o    = '0;
    inp_waddr_o = eng_idx[vdla_pkg::INP_AW-1:0];
    wgt_waddr_o = eng_idx[vdla_pkg::WGT_AW-1:0];
    inp_wdata_o = eng_pad ? '0 : {INP_LANES{eng_data}};
    wgt_wdata_o = eng_pad ? '0 : {WGT_LANES{eng_data}};
    if (eng_valid && !wgt_q && !uop_q) begin
      if (eng_pad) inp_we_o = '1;
      else inp_we_o[int'(beat) % INP_LANES] = 1'b1;
    end
    if (eng_valid && wgt_q) begin
      if (eng_pad) wgt_we_o = '1;
      else wgt_we_o[int'(beat) % WGT_LANES] = 1'b1;
    end
  end

  // UOP_PRE beats: micro-op bank writes (never padded: vdla_insn_check)
  vdla_uop_write u_uop (
    .valid_i (eng_valid && uop_q), .off_i (eng_off), .row_bytes_i (eng_row_bytes), .idx_i (eng_idx),
    .data_i (eng_data), .we_o (uop_we_o), .waddr_o (uop_waddr_o), .wdata_o (uop_wdata_o)
  );

  // ---- completion ---------------------------------------------------------------------------
  assign done_o     = (state_q == BUSY && eng_done) || (state_q == NOP && nop_q == '0)
                   || (fire_o && is_nop && NOP_EXTRA == 0);
  assign l2c_push_o = done_o && (state_q == IDLE ? mem.hdr.push_next : push_q);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= IDLE;
    end else if (halt_i) begin
      state_q <= IDLE;
    end else begin
      case (state_q)
        IDLE: if (fire_o) begin
          if (!is_nop) state_q <= BUSY;
          else if (NOP_EXTRA != 0) state_q <= NOP;
        end
        BUSY: if (eng_done) state_q <= IDLE;
        NOP: if (nop_q == '0) state_q <= IDLE;
        default: state_q <= IDLE;
      endcase
    end
  end

  // the running instruction's buffer, push flag and NOP wait: loaded at dispatch (fire_o implies
  // !halt_i), no reset
  always_ff @(posedge clk_i) begin
    if (fire_o) begin
      wgt_q  <= is_wgt;
      uop_q  <= is_uop;
      push_q <= mem.hdr.push_next;
      nop_q  <= 8'(NOP_EXTRA - 1);
    end else if (state_q == NOP && !halt_i) begin
      nop_q <= nop_q - 1'b1;
    end
  end
endmodule
