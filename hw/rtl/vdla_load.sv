`include "vdla_isa.svh"
`include "vdla_regs.svh"

// The load stage: LOADs of INP and WGT tiles (2-D DMA with zero padding). Pops compute->load tokens
// (pop_next) and pushes load->compute tokens (push_next).
module vdla_load #(
  parameter int ADDR_W      = 64,
  parameter int BUS_W       = 64,
  parameter int MAX_BEATS   = 256,
  parameter int INP_W       = 128,  // bits of one INP element
  parameter int WGT_W       = 2048,
  parameter int INP_DEPTH   = 2048,
  parameter int WGT_DEPTH   = 1024,
  parameter int SETUP       = 1,
  parameter int PAD_CYCLES  = 1,
  parameter int NOP_EXTRA   = 0
) (
  input  logic                         clk_i,
  input  logic                         rst_ni,
  input  logic                         halt_i,
  // command queue
  input  logic                         cmd_valid_i,
  input  logic [`VDLA_INSN_BITS-1:0]   cmd_i,
  output logic                         cmd_pop_o,
  // dependency tokens
  input  logic                         c2l_avail_i,
  output logic                         c2l_pop_o,
  input  logic                         l2c_room_i,
  output logic                         l2c_push_o,
  // AXI read
  output logic                         arvalid_o,
  output logic [ADDR_W-1:0]            araddr_o,
  output logic [7:0]                   arlen_o,
  input  logic                         arready_i,
  input  logic                         rvalid_i,
  input  logic [1:0]                   rresp_i,
  input  logic [BUS_W-1:0]             rdata_i,
  // buffers
  output logic [INP_W/BUS_W-1:0]       inp_we_o,
  output logic [$clog2(INP_DEPTH)-1:0] inp_waddr_o,
  output logic [INP_W-1:0]             inp_wdata_o,
  output logic [WGT_W/BUS_W-1:0]       wgt_we_o,
  output logic [$clog2(WGT_DEPTH)-1:0] wgt_waddr_o,
  output logic [WGT_W-1:0]             wgt_wdata_o,
  // status
  output logic                         fire_o,
  output logic                         busy_o,
  output logic                         stall_o,
  output logic                         done_o,
  output logic                         err_o,
  output logic [3:0]                   err_code_o
);
  localparam int LB        = $clog2(BUS_W / 8);
  localparam int INP_LANES = INP_W / BUS_W;
  localparam int WGT_LANES = WGT_W / BUS_W;
  localparam int IDX_W     = 16;

  // ---- decode and dispatch ------------------------------------------------------------------
  logic [2:0]  mem_type;
  logic [15:0] sram_base, y_size, x_size;
  logic [3:0]  yp0, yp1, xp0, xp1;
  logic        pop_next, push_next, bad_flags, is_nop, is_wgt, bad;
  logic [33:0] tile_end;

  assign mem_type  = cmd_i[`VDLA_F_MEM_TYPE_LSB +: `VDLA_F_MEM_TYPE_W];
  assign sram_base = cmd_i[`VDLA_F_SRAM_BASE_LSB +: `VDLA_F_SRAM_BASE_W];
  assign y_size    = cmd_i[`VDLA_F_Y_SIZE_LSB +: `VDLA_F_Y_SIZE_W];
  assign x_size    = cmd_i[`VDLA_F_X_SIZE_LSB +: `VDLA_F_X_SIZE_W];
  assign yp0       = cmd_i[`VDLA_F_Y_PAD_0_LSB +: `VDLA_F_Y_PAD_0_W];
  assign yp1       = cmd_i[`VDLA_F_Y_PAD_1_LSB +: `VDLA_F_Y_PAD_1_W];
  assign xp0       = cmd_i[`VDLA_F_X_PAD_0_LSB +: `VDLA_F_X_PAD_0_W];
  assign xp1       = cmd_i[`VDLA_F_X_PAD_1_LSB +: `VDLA_F_X_PAD_1_W];
  assign pop_next  = cmd_i[`VDLA_F_POP_NEXT_LSB];
  assign push_next = cmd_i[`VDLA_F_PUSH_NEXT_LSB];
  assign bad_flags = cmd_i[`VDLA_F_POP_PREV_LSB] || cmd_i[`VDLA_F_PUSH_PREV_LSB];
  assign is_nop    = x_size == '0;
  assign is_wgt    = mem_type == `VDLA_MEM_WGT;
  assign tile_end  = 34'(sram_base) + (34'(yp0) + 34'(y_size) + 34'(yp1)) * (34'(xp0) + 34'(x_size) + 34'(xp1));
  assign bad = bad_flags || (mem_type != `VDLA_MEM_INP && !is_wgt)
            || (!is_nop && (y_size == '0 || tile_end > (is_wgt ? 34'(WGT_DEPTH) : 34'(INP_DEPTH))));

  typedef enum logic [1:0] {IDLE, BUSY, NOP} state_e;
  state_e     state_q;
  logic [7:0] nop_q;
  logic       wgt_q;
  logic       push_q;
  logic       tokens_ok, idle;

  assign idle      = state_q == IDLE && !halt_i;
  assign tokens_ok = (!pop_next || c2l_avail_i) && (!push_next || l2c_room_i);
  assign fire_o    = idle && cmd_valid_i && !bad && tokens_ok;
  assign err_o     = idle && cmd_valid_i && bad || eng_err;
  assign err_code_o = eng_err ? `VDLA_ERR_BUS : `VDLA_ERR_INSN;
  assign stall_o   = idle && cmd_valid_i && !bad && !tokens_ok;
  assign busy_o    = fire_o || state_q != IDLE;
  assign cmd_pop_o = fire_o;
  assign c2l_pop_o = fire_o && pop_next;

  // ---- data path ------------------------------------------------------------------------------
  logic                    eng_valid, eng_pad, eng_done, eng_err;
  logic [IDX_W+1:0]        eng_idx;
  logic signed [25:0]      eng_off;
  logic [BUS_W-1:0]        eng_data;
  logic [24:0]             eng_row_bytes;

  vdla_load_engine #(
    .ADDR_W(ADDR_W), .BUS_W(BUS_W), .MAX_BEATS(MAX_BEATS), .IDX_W(IDX_W),
    .SETUP(SETUP), .PAD_CYCLES(PAD_CYCLES)
  ) u_engine (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (fire_o && !is_nop),
    .log_eb_i    (is_wgt ? 4'($clog2(WGT_W / 8)) : 4'($clog2(INP_W / 8))),
    .sram_base_i (sram_base),
    .dram_base_i (cmd_i[`VDLA_F_DRAM_BASE_LSB +: `VDLA_F_DRAM_BASE_W]),
    .y_size_i    (y_size),
    .x_size_i    (x_size),
    .x_stride_i  (cmd_i[`VDLA_F_X_STRIDE_LSB +: `VDLA_F_X_STRIDE_W]),
    .y_pad_0_i   (yp0),
    .y_pad_1_i   (yp1),
    .x_pad_0_i   (xp0),
    .x_pad_1_i   (xp1),
    .arvalid_o, .araddr_o, .arlen_o, .arready_i, .rvalid_i, .rresp_i, .rdata_i,
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
  logic [7:0] lane;
  assign lane = 8'(eng_off >>> LB);
  always_comb begin
    inp_we_o    = '0;
    wgt_we_o    = '0;
    inp_waddr_o = eng_idx[$clog2(INP_DEPTH)-1:0];
    wgt_waddr_o = eng_idx[$clog2(WGT_DEPTH)-1:0];
    inp_wdata_o = eng_pad ? '0 : {INP_LANES{eng_data}};
    wgt_wdata_o = eng_pad ? '0 : {WGT_LANES{eng_data}};
    if (eng_valid && !wgt_q) begin
      if (eng_pad) inp_we_o = '1;
      else inp_we_o[lane[$clog2(INP_LANES+1)-1:0] % INP_LANES] = 1'b1;
    end
    if (eng_valid && wgt_q) begin
      if (eng_pad) wgt_we_o = '1;
      else wgt_we_o[lane[$clog2(WGT_LANES+1)-1:0] % WGT_LANES] = 1'b1;
    end
  end

  // ---- completion ---------------------------------------------------------------------------
  assign done_o     = (state_q == BUSY && eng_done) || (state_q == NOP && nop_q == '0)
                   || (fire_o && is_nop && NOP_EXTRA == 0);
  assign l2c_push_o = done_o && (state_q == IDLE ? push_next : push_q);

  always_ff @(posedge clk_i) begin
    if (!rst_ni || halt_i) begin
      state_q <= IDLE;
    end else begin
      case (state_q)
        IDLE: if (fire_o) begin
          wgt_q  <= is_wgt;
          push_q <= push_next;
          nop_q  <= 8'(NOP_EXTRA - 1);
          if (!is_nop) state_q <= BUSY;
          else if (NOP_EXTRA != 0) state_q <= NOP;
        end
        BUSY: if (eng_done) state_q <= IDLE;
        NOP: begin
          nop_q <= nop_q - 1'b1;
          if (nop_q == '0) state_q <= IDLE;
        end
        default: state_q <= IDLE;
      endcase
    end
  end

  logic unused;
  assign unused = ^eng_row_bytes;
endmodule
