// Simple dual-port RAM: one write port with per-lane enables, one registered read port; contents are not reset.
// Block RAM (the lane enables map to BRAM byte-write enables), or UltraRAM (URAM288) where ULTRA is set (the
// preset's uram_buffers: vdla_pkg's *_URAM). The ram_style says which, so that a synthesis that may infer URAM
// (Yosys' -uram, Vivado) builds each buffer where the preset says. Verilator ignores it.
module vdla_sram #(
  parameter int WIDTH = 64,
  parameter int DEPTH = 1024,
  parameter int LANE  = 64,   // write-enable granularity in bits; WIDTH is a multiple
  parameter bit ULTRA = 1'b0  // build it in UltraRAM (both ports on clk_i, as URAM288 has)
) (
  input  logic                     clk_i,
  input  logic [WIDTH/LANE-1:0]    we_i,
  input  logic [$clog2(DEPTH)-1:0] waddr_i,
  input  logic [WIDTH-1:0]         wdata_i,
  input  logic                     re_i,
  input  logic [$clog2(DEPTH)-1:0] raddr_i,
  output logic [WIDTH-1:0]         rdata_o
);
  localparam int LANES = WIDTH / LANE;

  // Both branches build the same ports on their memory `m`; they differ only in its ram_style (an attribute
  // takes no parameter). A whole-row write is the common case, cheaper to simulate than the lane loop.
`define VDLA_SRAM_PORTS(m) \
    always_ff @(posedge clk_i) begin \
      if (&we_i) begin \
        m[waddr_i] <= wdata_i; \
      end else begin \
        for (int l = 0; l < LANES; l++) begin \
          if (we_i[l]) m[waddr_i][l*LANE +: LANE] <= wdata_i[l*LANE +: LANE]; \
        end \
      end \
    end \
    always_ff @(posedge clk_i) begin \
      if (re_i) rdata_o <= m[raddr_i]; \
    end

  if (ULTRA) begin : g_ultra
    (* ram_style = "ultra" *) logic [WIDTH-1:0] mem [DEPTH];
    `VDLA_SRAM_PORTS(mem)
  end else begin : g_block
    (* ram_style = "block" *) logic [WIDTH-1:0] mem [DEPTH];
    `VDLA_SRAM_PORTS(mem)
  end
`undef VDLA_SRAM_PORTS
endmodule
