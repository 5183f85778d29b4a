// Arbiter of N read requesters onto one AXI4 AR channel. A requester keeps the channel while it
// keeps requesting (all bursts of one transfer go out together, in the order the cycle model
// assumes); otherwise the lowest-numbered requesting one wins. Its index becomes ARID; read data
// is routed back by RID.
module vdla_axi_rd_arb #(
  parameter int N      = 3,
  parameter int ADDR_W = vdla_pkg::AXI_ADDR_W,
  parameter int IDW    = vdla_pkg::AXI_ID_W
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  // requesters
  input  logic [N-1:0]        req_valid_i,
  input  logic [N*ADDR_W-1:0] req_addr_i,
  input  logic [N*8-1:0]      req_len_i,
  output logic [N-1:0]        req_ready_o,
  // AXI AR
  output logic                arvalid_o,
  output logic [IDW-1:0]      arid_o,
  output logic [ADDR_W-1:0]   araddr_o,
  output logic [7:0]          arlen_o,
  input  logic                arready_i,
  // AXI R: the beat's owner
  input  logic [IDW-1:0]      rid_i,
  input  logic                rvalid_i,
  output logic [N-1:0]        rvalid_o
);
  logic [IDW-1:0] last_q;  // requester granted last
  logic [IDW-1:0] grant;

  always_comb begin
    grant = last_q;
    if (!req_valid_i[last_q]) begin
      for (int k = N - 1; k >= 0; k--) begin
        if (req_valid_i[k]) grant = IDW'(k);
      end
    end
  end

  assign arvalid_o = |req_valid_i;
  assign arid_o    = grant;
  assign araddr_o  = req_addr_i[grant*ADDR_W +: ADDR_W];
  assign arlen_o   = req_len_i[grant*8 +: 8];

  always_comb begin
    // one compare per requester (an indexed write would add a range check of the index: a carry chain)
    for (int k = 0; k < N; k++) begin
      req_ready_o[k] = arready_i && grant == IDW'(k);
      rvalid_o[k]    = rvalid_i && rid_i == IDW'(k);
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      last_q <= '0;
    end else if (arvalid_o) begin
      last_q <= grant;
    end
  end
endmodule
