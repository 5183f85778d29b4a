// A load engine's beat as micro-op bank writes: micro-op m of the beat (its bytes 4m..4m+3) is written only if it
// lies inside the DRAM row (a row may start or end inside a beat), decided from the beat's offset alone; it goes to
// bank (idx + m) mod U, U = UOP_BANKS. Both stages that load micro-ops use it: the compute stage (LOAD UOP,
// vdla_compute_load) and the load stage (LOAD UOP_PRE, vdla_load).
module vdla_uop_write (
  input  logic                                                  valid_i,  // a micro-op beat
  input  logic signed [25:0]                                    off_i,    // the beat's byte offset in its row
  input  logic [24:0]                                           row_bytes_i,
  input  logic [17:0]                                           idx_i,    // the beat's first micro-op index
  input  logic [vdla_pkg::BUS_WIDTH-1:0]                        data_i,
  output logic [vdla_pkg::UOP_BANKS-1:0]                        we_o,
  output logic [vdla_pkg::UOP_BANKS-1:0][vdla_pkg::UOP_BANK_AW-1:0] waddr_o,
  output logic [vdla_pkg::UOP_BANKS-1:0][31:0]                  wdata_o
);
  localparam int U   = vdla_pkg::UOP_BANKS;
  localparam int UAW = vdla_pkg::UOP_BANK_AW;
  localparam int LU  = $clog2(U);

  logic [U-1:0] in_row;
  always_comb begin
    for (int m = 0; m < U; m++) begin
      logic signed [26:0] pos;
      pos       = 27'(off_i) + 27'(m * 4);
      in_row[m] = pos >= 0 && pos < $signed({2'b0, row_bytes_i});
    end
    for (int k = 0; k < U; k++) begin
      logic [LU:0] j;
      j = (LU+1)'((k - int'(idx_i[LU:0])) & (U - 1));
      we_o[k]    = valid_i && in_row[j[LU-1:0]];
      waddr_o[k] = UAW'((idx_i + 18'(j)) >> LU);
      wdata_o[k] = data_i[j[LU-1:0]*32 +: 32];
    end
  end
endmodule
