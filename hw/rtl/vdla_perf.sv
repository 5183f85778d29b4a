`include "vdla_isa.svh"
`include "vdla_regs.svh"

// Performance counters (64-bit, cleared by start): cycles, per-stage busy and stall cycles, GEMM
// and ALU uop-iterations and bytes moved per memory type, plus 32-bit instruction counts. The work
// of an instruction is counted when it starts, from its command word.
module vdla_perf #(
  parameter int INP_EB = 16,
  parameter int WGT_EB = 256,
  parameter int ACC_EB = 64,
  parameter int OUT_EB = 16
) (
  input  logic                       clk_i,
  input  logic                       rst_ni,
  input  logic                       clear_i,
  input  logic                       count_i,     // running
  input  logic [2:0]                 busy_i,      // load, compute, store
  input  logic [2:0]                 stall_i,
  input  logic [2:0]                 fire_i,
  input  logic [`VDLA_INSN_BITS-1:0] load_cmd_i,
  input  logic [`VDLA_INSN_BITS-1:0] compute_cmd_i,
  input  logic [`VDLA_INSN_BITS-1:0] store_cmd_i,
  output logic [64*`VDLA_NUM_COUNTERS-1:0] counters_o,
  output logic [32*3-1:0]            stage_insns_o,
  output logic [32*6-1:0]            opcode_insns_o  // LOAD, STORE, GEMM, ALU, FINISH, EPI
);
  logic [63:0] cnt_q [`VDLA_NUM_COUNTERS];
  logic [31:0] stage_q [3];
  logic [31:0] op_q [6];

  function automatic logic [63:0] tile_bytes(logic [`VDLA_INSN_BITS-1:0] c, int eb);
    tile_bytes = 64'(c[`VDLA_F_Y_SIZE_LSB +: 16]) * 64'(c[`VDLA_F_X_SIZE_LSB +: 16]) * 64'(eb);
  endfunction

  function automatic logic [63:0] iterations(logic [`VDLA_INSN_BITS-1:0] c);
    iterations = 64'(c[`VDLA_F_ITER_OUT_LSB +: `VDLA_F_ITER_OUT_W]) * 64'(c[`VDLA_F_ITER_IN_LSB +: `VDLA_F_ITER_IN_W])
         * 64'(c[`VDLA_F_UOP_END_LSB +: `VDLA_F_UOP_END_W] - 14'(c[`VDLA_F_UOP_BGN_LSB +: `VDLA_F_UOP_BGN_W]));
  endfunction

  always_ff @(posedge clk_i) begin
    if (!rst_ni || clear_i) begin
      for (int k = 0; k < `VDLA_NUM_COUNTERS; k++) cnt_q[k] <= '0;
      for (int k = 0; k < 3; k++) stage_q[k] <= '0;
      for (int k = 0; k < 6; k++) op_q[k] <= '0;
    end else begin
      if (count_i) begin
        cnt_q[`VDLA_CNT_CYCLES] <= cnt_q[`VDLA_CNT_CYCLES] + 1'b1;
        if (busy_i[0])  cnt_q[`VDLA_CNT_LOAD_BUSY]     <= cnt_q[`VDLA_CNT_LOAD_BUSY] + 1'b1;
        if (stall_i[0]) cnt_q[`VDLA_CNT_LOAD_STALL]    <= cnt_q[`VDLA_CNT_LOAD_STALL] + 1'b1;
        if (busy_i[1])  cnt_q[`VDLA_CNT_COMPUTE_BUSY]  <= cnt_q[`VDLA_CNT_COMPUTE_BUSY] + 1'b1;
        if (stall_i[1]) cnt_q[`VDLA_CNT_COMPUTE_STALL] <= cnt_q[`VDLA_CNT_COMPUTE_STALL] + 1'b1;
        if (busy_i[2])  cnt_q[`VDLA_CNT_STORE_BUSY]    <= cnt_q[`VDLA_CNT_STORE_BUSY] + 1'b1;
        if (stall_i[2]) cnt_q[`VDLA_CNT_STORE_STALL]   <= cnt_q[`VDLA_CNT_STORE_STALL] + 1'b1;
      end
      for (int k = 0; k < 3; k++) if (fire_i[k]) stage_q[k] <= stage_q[k] + 1'b1;
      if (fire_i[0]) begin
        op_q[0] <= op_q[0] + 1'b1;
        if (load_cmd_i[`VDLA_F_MEM_TYPE_LSB +: 3] == `VDLA_MEM_WGT)
          cnt_q[`VDLA_CNT_BYTES_WGT] <= cnt_q[`VDLA_CNT_BYTES_WGT] + tile_bytes(load_cmd_i, WGT_EB);
        else
          cnt_q[`VDLA_CNT_BYTES_INP] <= cnt_q[`VDLA_CNT_BYTES_INP] + tile_bytes(load_cmd_i, INP_EB);
      end
      if (fire_i[1]) begin
        case (compute_cmd_i[`VDLA_F_OPCODE_LSB +: 3])
          `VDLA_OP_LOAD: begin
            op_q[0] <= op_q[0] + 1'b1 + 32'(fire_i[0]);
            case (compute_cmd_i[`VDLA_F_MEM_TYPE_LSB +: 3])
              `VDLA_MEM_UOP: cnt_q[`VDLA_CNT_BYTES_UOP] <= cnt_q[`VDLA_CNT_BYTES_UOP] + tile_bytes(compute_cmd_i, 4);
              `VDLA_MEM_ACC: cnt_q[`VDLA_CNT_BYTES_ACC] <= cnt_q[`VDLA_CNT_BYTES_ACC] + tile_bytes(compute_cmd_i, ACC_EB);
              default: cnt_q[`VDLA_CNT_BYTES_ACC_8BIT] <= cnt_q[`VDLA_CNT_BYTES_ACC_8BIT]
                                                          + tile_bytes(compute_cmd_i, OUT_EB);
            endcase
          end
          `VDLA_OP_GEMM: begin
            op_q[2] <= op_q[2] + 1'b1;
            if (compute_cmd_i[`VDLA_F_RESET_LSB])
              cnt_q[`VDLA_CNT_GEMM_RESET_ITERS] <= cnt_q[`VDLA_CNT_GEMM_RESET_ITERS] + iterations(compute_cmd_i);
            else
              cnt_q[`VDLA_CNT_GEMM_ITERS] <= cnt_q[`VDLA_CNT_GEMM_ITERS] + iterations(compute_cmd_i);
          end
          `VDLA_OP_ALU: begin
            op_q[3] <= op_q[3] + 1'b1;
            cnt_q[`VDLA_CNT_ALU_ITERS] <= cnt_q[`VDLA_CNT_ALU_ITERS] + iterations(compute_cmd_i);
          end
          `VDLA_OP_EPI: op_q[5] <= op_q[5] + 1'b1;
          default: op_q[4] <= op_q[4] + 1'b1;
        endcase
      end
      if (fire_i[2]) begin
        op_q[1] <= op_q[1] + 1'b1;
        cnt_q[`VDLA_CNT_BYTES_STORED] <= cnt_q[`VDLA_CNT_BYTES_STORED] + tile_bytes(store_cmd_i, OUT_EB);
      end
    end
  end

  always_comb begin
    for (int k = 0; k < `VDLA_NUM_COUNTERS; k++) counters_o[k*64 +: 64] = cnt_q[k];
    for (int k = 0; k < 3; k++) stage_insns_o[k*32 +: 32] = stage_q[k];
    for (int k = 0; k < 6; k++) opcode_insns_o[k*32 +: 32] = op_q[k];
  end
endmodule
