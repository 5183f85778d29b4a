// Performance counters (64-bit, cleared by start): cycles, per-stage busy and stall cycles, GEMM
// and ALU uop-iterations and bytes moved per memory type, plus 32-bit instruction counts. The work
// of an instruction is counted from its command word when it starts; its bytes one cycle later (a
// LOAD/STORE takes longer than that, so a finished run reads them all).
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

  // y_size * x_size as a balanced tree of shifted adds (no multiply operator): LUTs and carry chains, not
  // DSP48E1, which the GEMM core and the ALU's multipliers need (the part has 220)
  function automatic logic [63:0] elems(logic [15:0] y_size, logic [15:0] x_size);
    logic [31:0] t [16];
    for (int i = 0; i < 16; i++) t[i] = x_size[i] ? 32'(y_size) << i : '0;
    for (int w = 8; w >= 1; w /= 2) for (int i = 0; i < w; i++) t[i] = t[2*i] + t[2*i + 1];
    elems = 64'(t[0]);
  endfunction

  // n * eb for a constant eb: shifted adds of its set bits (one shift for the usual power of two)
  function automatic logic [63:0] times(logic [63:0] n, int eb);
    times = '0;
    for (int i = 0; i < 31; i++) if (eb[i]) times = times + (n << i);
  endfunction

  // The bytes of the instruction each stage started in the cycle before, and the counter they go to.
  logic        ld_v_q, cm_v_q, st_v_q, ld_wgt_q;
  logic [63:0] ld_bytes_q, cm_bytes_q, st_bytes_q;
  vdla_pkg::mem_type_e cm_type_q;
  logic [63:0] ld_elems, cm_elems;
  assign ld_elems = elems(ld.y_size, ld.x_size);
  assign cm_elems = elems(cm.y_size, cm.x_size);
  always_ff @(posedge clk_i) begin
    ld_v_q     <= rst_ni && !clear_i && fire_i[0];
    cm_v_q     <= rst_ni && !clear_i && fire_i[1] && cm.hdr.opcode == vdla_pkg::OP_LOAD;
    st_v_q     <= rst_ni && !clear_i && fire_i[2];
    ld_bytes_q <= ld.mem_type == vdla_pkg::MEM_WGT ? times(ld_elems, WGT_EB) : times(ld_elems, INP_EB);
    ld_wgt_q   <= ld.mem_type == vdla_pkg::MEM_WGT;
    cm_type_q  <= cm.mem_type;
    case (cm.mem_type)
      vdla_pkg::MEM_UOP: cm_bytes_q <= times(cm_elems, 4);
      vdla_pkg::MEM_ACC: cm_bytes_q <= times(cm_elems, ACC_EB);
      default:           cm_bytes_q <= times(cm_elems, OUT_EB);
    endcase
    st_bytes_q <= times(elems(st.y_size, st.x_size), OUT_EB);
  end

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
      if (fire_i[0]) op_q[0] <= op_q[0] + 1'b1;
      if (ld_v_q && ld_wgt_q) cnt_q[vdla_pkg::CNT_BYTES_WGT] <= cnt_q[vdla_pkg::CNT_BYTES_WGT] + ld_bytes_q;
      if (ld_v_q && !ld_wgt_q) cnt_q[vdla_pkg::CNT_BYTES_INP] <= cnt_q[vdla_pkg::CNT_BYTES_INP] + ld_bytes_q;
      if (cm_v_q) begin  // the compute stage's loads: other counters than the load stage's
        case (cm_type_q)
          vdla_pkg::MEM_UOP: cnt_q[vdla_pkg::CNT_BYTES_UOP] <= cnt_q[vdla_pkg::CNT_BYTES_UOP] + cm_bytes_q;
          vdla_pkg::MEM_ACC: cnt_q[vdla_pkg::CNT_BYTES_ACC] <= cnt_q[vdla_pkg::CNT_BYTES_ACC] + cm_bytes_q;
          default: cnt_q[vdla_pkg::CNT_BYTES_ACC_8BIT] <= cnt_q[vdla_pkg::CNT_BYTES_ACC_8BIT] + cm_bytes_q;
        endcase
      end
      if (st_v_q) cnt_q[vdla_pkg::CNT_BYTES_STORED] <= cnt_q[vdla_pkg::CNT_BYTES_STORED] + st_bytes_q;
      if (fire_i[1]) begin
        case (cm.hdr.opcode)
          vdla_pkg::OP_LOAD: op_q[0] <= op_q[0] + 1'b1 + 32'(fire_i[0]);
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
      if (fire_i[2]) op_q[1] <= op_q[1] + 1'b1;
    end
  end

  always_comb begin
    for (int k = 0; k < NC; k++) counters_o[k*64 +: 64] = cnt_q[k];
    for (int k = 0; k < 3; k++) stage_insns_o[k*32 +: 32] = stage_q[k];
    for (int k = 0; k < 6; k++) opcode_insns_o[k*32 +: 32] = op_q[k];
  end
endmodule
