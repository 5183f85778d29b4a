// The activation tables (EPI lut, lut_table): LUT_TABLES tables of LUT_ENTRIES int8 entries, entry i of a
// table the output for the int8 input whose two's-complement byte is i; table t holds the buffer's entries
// t * LUT_ENTRIES on. Every lane looks its own byte up in the same cycle, so each lane has its own copy; a copy
// is split into NB banks (NB = BUS_WIDTH / 8, the entries of one AXI beat), bank b holding the entries e with
// e mod NB == b at address e / NB, so that a beat of the LOAD LUT writes its NB entries into the NB banks of
// every copy in one cycle (one write port per bank, no back-pressure). A read takes every bank's word at
// (table, idx / NB) and selects bank idx mod NB. The storage has no reset, one write port and an asynchronous
// read: Yosys maps it to LUT RAM (per lane NB banks of LUT_TABLES * 256 / NB x 8 bits).
module vdla_lut #(
  parameter int LANES = vdla_pkg::LANES,
  parameter int NB    = vdla_pkg::BUS_WIDTH / 8,  // banks: the entries of a write (a power of two, >= 2)
  parameter int NT    = vdla_pkg::LUT_TABLES  // tables (1 or 2)
) (
  input  logic               clk_i,
  input  logic               rst_ni,  // only for the assertions: the table is not reset
  // a write of NB entries: buffer entries waddr_i * NB + b, b = 0..NB-1, from byte b of wdata_i
  input  logic               we_i,
  input  logic [$clog2(NT)+7-$clog2(NB):0] waddr_i,
  input  logic [NB*8-1:0]    wdata_i,
  // per lane a lookup: data_o[l] = table table_i's entry idx_i[l] (combinational; table_i unused with one table)
  input  logic               table_i,
  input  logic [LANES*8-1:0] idx_i,
  output logic [LANES*8-1:0] data_o
);
  localparam int LNB = $clog2(NB);
  localparam int BAW = $clog2(NT) + 8 - LNB;  // bank address bits (and the write's): the table, then idx / NB

  for (genvar l = 0; l < LANES; l++) begin : g_lane
    logic [NB*8-1:0]    rd;  // bank b's word in rd[b*8 +: 8]
    logic [7:0]         idx;
    logic [BAW-1:0]     raddr;
    assign idx = idx_i[l*8 +: 8];
    if (NT > 1) begin : g_tables
      assign raddr = BAW'({table_i, idx[7:LNB]});
    end else begin : g_one
      logic unused_table;
      assign unused_table = table_i;
      assign raddr = idx[7:LNB];
    end
    for (genvar b = 0; b < NB; b++) begin : g_bank
      logic [7:0] mem [2**BAW];
      always_ff @(posedge clk_i) begin
        if (we_i) mem[waddr_i] <= wdata_i[b*8 +: 8];
      end
      assign rd[b*8 +: 8] = mem[raddr];
    end
    assign data_o[l*8 +: 8] = rd[idx[LNB-1:0]*8 +: 8];
  end

  `ASSERT_KNOWN(a_we_known, we_i)
endmodule
