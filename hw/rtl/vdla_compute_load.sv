// The compute stage's LOADs (UOP, ACC, ACC_8BIT, LUT): the load engine's DMA beats and padding elements,
// turned into micro-op bank writes, ACC lane writes and activation table writes.
//   UOP: micro-op j of a beat has index wr_idx + j and goes to bank (index mod U), U = BUS_WIDTH / 32.
//   ACC: the beat fills its 32-bit lanes; ACC_8BIT: its bytes, sign-extended, fill as many lanes.
//   LUT: the beat's BUS_WIDTH / 8 bytes are consecutive table entries (vdla_lut): beat k of element e holds
//   entries (e * E + k) * BUS_WIDTH / 8 .. on, E = OUT_BITS / BUS_WIDTH beats per element (never padded).
// Padding zeroes whole elements. The memory type is latched when the load starts.
module vdla_compute_load (
  input  logic                              clk_i,
  input  logic                              rst_ni,
  input  logic                              halt_i,
  input  logic                              start_i,  // a LOAD that moves data starts
  input  vdla_pkg::mem_insn_t               insn_i,
  // AXI read (the load engine's)
  output vdla_pkg::axi_rd_req_t             axi_rd_req_o,
  input  vdla_pkg::axi_rd_rsp_t             axi_rd_rsp_i,
  // micro-op banks
  output logic [vdla_pkg::UOP_BANKS-1:0]    uop_we_o,
  output logic [vdla_pkg::UOP_BANKS-1:0][vdla_pkg::UOP_BANK_AW-1:0] uop_waddr_o,
  output logic [vdla_pkg::UOP_BANKS-1:0][31:0] uop_wdata_o,
  // ACC lanes
  output logic [vdla_pkg::LANES-1:0]        acc_we_o,
  output logic [vdla_pkg::ACC_AW-1:0]       acc_waddr_o,
  output logic [vdla_pkg::ACC_BITS-1:0]     acc_wdata_o,
  // activation table: a write of BUS_WIDTH / 8 entries (vdla_lut)
  output logic                              lut_we_o,
  output logic [$clog2(vdla_pkg::LUT_TABLES * vdla_pkg::LUT_ENTRIES / (vdla_pkg::BUS_WIDTH / 8))-1:0] lut_waddr_o,
  output logic [vdla_pkg::BUS_WIDTH-1:0]    lut_wdata_o,
  output logic                              done_o,   // the load's last write
  output logic                              err_o     // an AXI error response
);
  localparam int BUS_W = vdla_pkg::BUS_WIDTH;
  localparam int LB    = $clog2(BUS_W / 8);
  localparam int LANES = vdla_pkg::LANES;

  logic                eng_valid, eng_pad;
  logic [17:0]         eng_idx;
  logic signed [25:0]  eng_off;
  logic [BUS_W-1:0]    eng_data;
  logic [24:0]         eng_row_bytes;
  vdla_pkg::mem_type_e type_q;
  logic                is_uop, is_acc8;

  assign is_uop  = insn_i.mem_type == vdla_pkg::MEM_UOP;
  assign is_acc8 = insn_i.mem_type == vdla_pkg::MEM_ACC_8BIT || insn_i.mem_type == vdla_pkg::MEM_LUT;

  vdla_load_engine #(.IDX_W(16)) u_engine (
    .clk_i, .rst_ni, .halt_i,
    .start_i,
    .log_eb_i    (is_uop ? 4'd2 : is_acc8 ? 4'($clog2(vdla_pkg::OUT_ELEM_BYTES))
                                          : 4'($clog2(vdla_pkg::ACC_ELEM_BYTES))),
    .insn_i,
    .axi_rd_req_o, .axi_rd_rsp_i,
    .wr_valid_o  (eng_valid),
    .wr_pad_o    (eng_pad),
    .wr_idx_o    (eng_idx),
    .wr_off_o    (eng_off),
    .wr_data_o   (eng_data),
    .row_bytes_o (eng_row_bytes),
    .done_o,
    .err_o
  );

  // the running load's memory type (start_i implies an unhalted, idle stage)
  always_ff @(posedge clk_i) begin
    if (start_i) type_q <= insn_i.mem_type;
  end

  // UOP beats: micro-op bank writes (vdla_uop_write)
  vdla_uop_write u_uop (
    .valid_i (eng_valid && type_q == vdla_pkg::MEM_UOP), .off_i (eng_off), .row_bytes_i (eng_row_bytes),
    .idx_i (eng_idx), .data_i (eng_data), .we_o (uop_we_o), .waddr_o (uop_waddr_o), .wdata_o (uop_wdata_o)
  );

  // ACC beats: 32-bit lanes (ACC) or sign-extended bytes (ACC_8BIT); padding zeroes the element.
  logic [7:0] beat;
  assign beat        = 8'(eng_off >>> LB);
  assign acc_waddr_o = eng_idx[vdla_pkg::ACC_AW-1:0];
  always_comb begin
    acc_we_o = '0;
    if (type_q == vdla_pkg::MEM_ACC_8BIT) begin
      for (int l = 0; l < LANES; l++) begin
        acc_wdata_o[l*32 +: 32] = 32'($signed(eng_data[(l*8) % BUS_W +: 8]));
        acc_we_o[l] = (l / (BUS_W / 8)) == int'(beat) % (vdla_pkg::OUT_BITS / BUS_W);
      end
    end else begin
      for (int l = 0; l < LANES; l++) begin
        acc_wdata_o[l*32 +: 32] = eng_data[(l*32) % BUS_W +: 32];
        acc_we_o[l] = (l / (BUS_W / 32)) == int'(beat) % (vdla_pkg::ACC_BITS / BUS_W);
      end
    end
    if (eng_pad) begin
      acc_wdata_o = '0;
      acc_we_o    = '1;
    end
    if (!eng_valid || type_q == vdla_pkg::MEM_UOP || type_q == vdla_pkg::MEM_LUT) acc_we_o = '0;
  end

  // LUT beats: the tables' beat index is the element's times E plus the beat within the element. The write is
  // registered (it lands a cycle after the beat, long before an EPI lut can look anything up: the load's last
  // write ends it, and a lookup comes two cycles after an ACC write of a later instruction), so that the LUT
  // RAM's write address starts at a flip-flop: its port D's address is also a read address.
  localparam int E   = vdla_pkg::OUT_BITS / BUS_W;
  localparam int LAW = $clog2(vdla_pkg::LUT_TABLES * vdla_pkg::LUT_ENTRIES / (BUS_W / 8));
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) lut_we_o <= 1'b0;
    else lut_we_o <= eng_valid && !eng_pad && type_q == vdla_pkg::MEM_LUT;
  end
  always_ff @(posedge clk_i) begin
    if (eng_valid) begin
      lut_waddr_o <= LAW'(eng_idx) * LAW'(E) + LAW'(beat & 8'(E - 1));
      lut_wdata_o <= eng_data;
    end
  end
endmodule
