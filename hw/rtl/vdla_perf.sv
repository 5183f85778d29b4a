// Performance counters (64-bit, cleared by start): cycles, per-stage busy and stall cycles, GEMM
// and ALU uop-iterations and bytes moved per memory type, plus 32-bit instruction counts. The work
// of an instruction is counted when it starts, from its command word.
//
// The one synchronous reset of the design: the counters clear on reset and on START alike. On the
// xc7z020 a flip-flop has either an asynchronous clear or a synchronous reset, not both, so an
// asynchronous reset plus START's clear would cost a LUT per counter bit (1.2 k LUT, measured).
module vdla_perf #(
  parameter int INP_EB = vdla_pkg::INP_ELEM_BYTES,
  parameter int WGT_EB = vdla_pkg::WGT_ELEM_BYTES,
  parameter int ACC_EB = vdla_pkg::ACC_ELEM_BYTES,
  parameter int OUT_EB = vdla_pkg::OUT_ELEM_BYTES
) (
  input  logic                                clk_i,
  input  logic                                rst_ni,
  input  logic                                clear_i,
  input  logic                                count_i,     // running
  input  logic [2:0]                          busy_i,      // load, compute, store
  input  logic [2:0]                          stall_i,
  input  logic [2:0]                          fire_i,
  input  vdla_pkg::insn_t                     load_cmd_i,
  input  vdla_pkg::insn_t                     compute_cmd_i,
  input  vdla_pkg::insn_t                     store_cmd_i,
  output logic [64*vdla_pkg::NUM_COUNTERS-1:0] counters_o,
  output logic [32*3-1:0]                     stage_insns_o,
  output logic [32*6-1:0]                     opcode_insns_o  // LOAD, STORE, GEMM, ALU, FINISH, EPI
);
  localparam int NC = vdla_pkg::NUM_COUNTERS;

  logic [63:0] cnt_q [NC];
  logic [31:0] stage_q [3];
  logic [31:0] op_q [6];

  function automatic logic [63:0] tile_bytes(logic [15:0] y_size, logic [15:0] x_size, int eb);
    tile_bytes = 64'(y_size) * 64'(x_size) * 64'(eb);
  endfunction

  // uop-iterations of a GEMM or ALU (the two share the loop fields)
  function automatic logic [63:0] iterations(vdla_pkg::insn_t c);
    iterations = 64'(c.gemm.iter_out) * 64'(c.gemm.iter_in) * 64'(c.gemm.uop_end - 14'(c.gemm.uop_bgn));
  endfunction

  vdla_pkg::mem_insn_t ld, cm, st;
  assign ld = load_cmd_i.mem;
  assign cm = compute_cmd_i.mem;
  assign st = store_cmd_i.mem;
  // the counters read a few fields of each command word
  logic unused_cmd;
  assign unused_cmd = ^{ld, cm, st};

  always_ff @(posedge clk_i) begin
    if (!rst_ni || clear_i) begin
      for (int k = 0; k < NC; k++) cnt_q[k] <= '0;
      for (int k = 0; k < 3; k++) stage_q[k] <= '0;
      for (int k = 0; k < 6; k++) op_q[k] <= '0;
    end else begin
      if (count_i) begin
        cnt_q[vdla_pkg::CNT_CYCLES] <= cnt_q[vdla_pkg::CNT_CYCLES] + 1'b1;
        if (busy_i[0])  cnt_q[vdla_pkg::CNT_LOAD_BUSY]     <= cnt_q[vdla_pkg::CNT_LOAD_BUSY] + 1'b1;
        if (stall_i[0]) cnt_q[vdla_pkg::CNT_LOAD_STALL]    <= cnt_q[vdla_pkg::CNT_LOAD_STALL] + 1'b1;
        if (busy_i[1])  cnt_q[vdla_pkg::CNT_COMPUTE_BUSY]  <= cnt_q[vdla_pkg::CNT_COMPUTE_BUSY] + 1'b1;
        if (stall_i[1]) cnt_q[vdla_pkg::CNT_COMPUTE_STALL] <= cnt_q[vdla_pkg::CNT_COMPUTE_STALL] + 1'b1;
        if (busy_i[2])  cnt_q[vdla_pkg::CNT_STORE_BUSY]    <= cnt_q[vdla_pkg::CNT_STORE_BUSY] + 1'b1;
        if (stall_i[2]) cnt_q[vdla_pkg::CNT_STORE_STALL]   <= cnt_q[vdla_pkg::CNT_STORE_STALL] + 1'b1;
      end
      for (int k = 0; k < 3; k++) if (fire_i[k]) stage_q[k] <= stage_q[k] + 1'b1;
      if (fire_i[0]) begin
        op_q[0] <= op_q[0] + 1'b1;
        if (ld.mem_type == vdla_pkg::MEM_WGT)
          cnt_q[vdla_pkg::CNT_BYTES_WGT] <= cnt_q[vdla_pkg::CNT_BYTES_WGT] + tile_bytes(ld.y_size, ld.x_size, WGT_EB);
        else
          cnt_q[vdla_pkg::CNT_BYTES_INP] <= cnt_q[vdla_pkg::CNT_BYTES_INP] + tile_bytes(ld.y_size, ld.x_size, INP_EB);
      end
      if (fire_i[1]) begin
        case (cm.hdr.opcode)
          vdla_pkg::OP_LOAD: begin
            op_q[0] <= op_q[0] + 1'b1 + 32'(fire_i[0]);
            case (cm.mem_type)
              vdla_pkg::MEM_UOP: cnt_q[vdla_pkg::CNT_BYTES_UOP] <= cnt_q[vdla_pkg::CNT_BYTES_UOP]
                                                                  + tile_bytes(cm.y_size, cm.x_size, 4);
              vdla_pkg::MEM_ACC: cnt_q[vdla_pkg::CNT_BYTES_ACC] <= cnt_q[vdla_pkg::CNT_BYTES_ACC]
                                                                  + tile_bytes(cm.y_size, cm.x_size, ACC_EB);
              default: cnt_q[vdla_pkg::CNT_BYTES_ACC_8BIT] <= cnt_q[vdla_pkg::CNT_BYTES_ACC_8BIT]
                                                               + tile_bytes(cm.y_size, cm.x_size, OUT_EB);
            endcase
          end
          vdla_pkg::OP_GEMM: begin
            op_q[2] <= op_q[2] + 1'b1;
            if (compute_cmd_i.gemm.reset)
              cnt_q[vdla_pkg::CNT_GEMM_RESET_ITERS] <= cnt_q[vdla_pkg::CNT_GEMM_RESET_ITERS]
                                                       + iterations(compute_cmd_i);
            else
              cnt_q[vdla_pkg::CNT_GEMM_ITERS] <= cnt_q[vdla_pkg::CNT_GEMM_ITERS] + iterations(compute_cmd_i);
          end
          vdla_pkg::OP_ALU: begin
            op_q[3] <= op_q[3] + 1'b1;
            cnt_q[vdla_pkg::CNT_ALU_ITERS] <= cnt_q[vdla_pkg::CNT_ALU_ITERS] + iterations(compute_cmd_i);
          end
          vdla_pkg::OP_EPI: op_q[5] <= op_q[5] + 1'b1;
          default: op_q[4] <= op_q[4] + 1'b1;
        endcase
      end
      if (fire_i[2]) begin
        op_q[1] <= op_q[1] + 1'b1;
        cnt_q[vdla_pkg::CNT_BYTES_STORED] <= cnt_q[vdla_pkg::CNT_BYTES_STORED]
                                             + tile_bytes(st.y_size, st.x_size, OUT_EB);
      end
    end
  end

  always_comb begin
    for (int k = 0; k < NC; k++) counters_o[k*64 +: 64] = cnt_q[k];
    for (int k = 0; k < 3; k++) stage_insns_o[k*32 +: 32] = stage_q[k];
    for (int k = 0; k < 6; k++) opcode_insns_o[k*32 +: 32] = op_q[k];
  end
endmodule
