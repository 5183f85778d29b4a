// Arbiter of N read requesters onto one AXI4 read channel. A requester keeps the channel while it
// keeps requesting (all bursts of one transfer go out together, in the order the cycle model
// assumes); otherwise the lowest-numbered requesting one wins. Its index becomes ARID; every R beat
// goes to all requesters, with r_valid set for the one its RID names alone. Requester k's request and
// response are the package's axi_rd_req_t and axi_rd_rsp_t, at [k] of req_i and rsp_o (flat vectors:
// Yosys reads a packed array of a packed struct as 1-bit elements).
module vdla_axi_rd_arb #(
  parameter int N   = 3,
  parameter int IDW = vdla_pkg::AXI_ID_W
) (
  input  logic                                   clk_i,
  input  logic                                   rst_ni,
  // requesters: each one's vdla_pkg::axi_rd_req_t and axi_rd_rsp_t
  input  logic [N-1:0][vdla_pkg::AXI_RD_REQ_W-1:0] req_i,
  output logic [N-1:0][vdla_pkg::AXI_RD_RSP_W-1:0] rsp_o,
  // the AXI read channel, and the IDs of AR and of the R beat
  output vdla_pkg::axi_rd_req_t                  axi_rd_req_o,
  output logic [IDW-1:0]                         arid_o,
  input  vdla_pkg::axi_rd_rsp_t                  axi_rd_rsp_i,
  input  logic [IDW-1:0]                         rid_i
);
  logic [IDW-1:0] last_q;  // requester granted last
  logic [IDW-1:0] grant;
  logic [N-1:0]   req_valid;

  for (genvar k = 0; k < N; k++) begin : g_req
    vdla_pkg::axi_rd_req_t req;
    vdla_pkg::axi_rd_rsp_t rsp;
    logic                  unused_req;  // the granted request's address and length reach AR below
    assign req          = req_i[k];
    assign req_valid[k] = req.ar_valid;
    assign unused_req   = ^{req.ar_addr, req.ar_len};
    // one compare per requester (an indexed write would add a range check of the index: a carry chain)
    always_comb begin
      rsp          = axi_rd_rsp_i;
      rsp.ar_ready = axi_rd_rsp_i.ar_ready && grant == IDW'(k);
      rsp.r_valid  = axi_rd_rsp_i.r_valid && rid_i == IDW'(k);
    end
    assign rsp_o[k] = rsp;
  end

  always_comb begin
    grant = last_q;
    if (!req_valid[last_q]) begin
      for (int k = N - 1; k >= 0; k--) begin
        if (req_valid[k]) grant = IDW'(k);
      end
    end
  end

  always_comb begin
    axi_rd_req_o          = req_i[grant];
    axi_rd_req_o.ar_valid = |req_valid;
  end
  assign arid_o = grant;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      last_q <= '0;
    end else if (axi_rd_req_o.ar_valid) begin
      last_q <= grant;
    end
  end
endmodule
