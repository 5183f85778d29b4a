// Performance counters (64-bit, cleared by start): cycles, per-stage busy and stall cycles, GEMM
// and ALU uop-iterations and bytes moved per memory type, plus 32-bit instruction counts. The work
// of an instruction is counted from its command word when it starts: its bytes one cycle later, its
// uop-iterations two cycles later (two registered multiplies, below). A LOAD/STORE takes longer than one
// cycle and a GEMM/ALU longer than two (the compute stage is still busy when its count is added, asserted),
// and a run is read only after it finished: a finished run reads them all, and no cycle count changes.
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

  // y_size * x_size in two halves, one per cycle, as shifted adds (no multiply operator: LUTs and carry chains,
  // not DSP48E1, which the GEMM core and the ALU's multipliers need; the part has 220). In the cycle a stage
  // starts an instruction, slice k of nibbles(y, x) is y * x[4k +: 4] (two levels of adds); in the next, the
  // four slices shifted by 4k (and by the counter's element bytes) are summed into the counter (two levels,
  // then its add), so the counter holds the bytes in the same cycle as with a one-cycle product.
  function automatic logic [19:0] nibble(logic [15:0] y_size, logic [3:0] x4);  // y_size * x4
    nibble = ((x4[0] ? 20'(y_size) : '0) + (x4[1] ? 20'(y_size) << 1 : '0))
           + ((x4[2] ? 20'(y_size) << 2 : '0) + (x4[3] ? 20'(y_size) << 3 : '0));
  endfunction

  function automatic logic [79:0] nibbles(logic [15:0] y_size, logic [15:0] x_size);
    for (int k = 0; k < 4; k++) nibbles[20*k +: 20] = nibble(y_size, x_size[4*k +: 4]);
  endfunction

  function automatic logic [63:0] elems(logic [79:0] n);
    elems = (64'(n[19:0]) + (64'(n[39:20]) << 4)) + ((64'(n[59:40]) << 8) + (64'(n[79:60]) << 12));
  endfunction

  // n * eb for a constant eb: shifted adds of its set bits (one shift for the usual power of two)
  function automatic logic [63:0] times(logic [63:0] n, int eb);
    times = '0;
    for (int i = 0; i < 31; i++) if (eb[i]) times = times + (n << i);
  endfunction

  // The instruction each stage started in the cycle before: its tile's nibble products and the counter they
  // go to (its bytes are elems(nibbles) times the counter's element bytes). These registers and the
  // uop-iteration products below load only as an instruction starts (flip-flop enables, no logic on the path):
  // the Verilated model forms them only then, not every cycle.
  logic        ld_v_q, cm_v_q, st_v_q, ld_wgt_q, ld_uop_q;
  logic [79:0] ld_nib_q, cm_nib_q, st_nib_q;
  vdla_pkg::mem_type_e cm_type_q;
  logic [63:0] ld_elems, cm_elems, st_elems;
  always_ff @(posedge clk_i) begin
    ld_v_q    <= rst_ni && !clear_i && fire_i[0];
    cm_v_q    <= rst_ni && !clear_i && fire_i[1] && cm.hdr.opcode == vdla_pkg::OP_LOAD;
    st_v_q    <= rst_ni && !clear_i && fire_i[2];
    if (fire_i[0]) begin
      ld_nib_q <= nibbles(ld.y_size, ld.x_size);
      ld_wgt_q <= ld.mem_type == vdla_pkg::MEM_WGT;
      ld_uop_q <= ld.mem_type == vdla_pkg::MEM_UOP_PRE;
    end
    if (fire_i[1]) begin
      cm_nib_q  <= nibbles(cm.y_size, cm.x_size);
      cm_type_q <= cm.mem_type;
    end
    if (fire_i[2]) st_nib_q <= nibbles(st.y_size, st.x_size);
  end
  assign ld_elems = elems(ld_nib_q);
  assign cm_elems = elems(cm_nib_q);
  assign st_elems = elems(st_nib_q);

  // uop-iterations of a GEMM or ALU (the two share the loop fields): iter_out * iter_in * (uop_end - uop_bgn),
  // no product feeding logic in its cycle. In the cycle the compute stage starts the instruction, iter_out * iter_in
  // and the micro-op count go into registers (the first at its DSP48E1's output, MREG); in the next their product
  // (42 bits) does (at the DSP48E1s' output); in the third it is added to the instruction's counter.
  localparam int IT_W = 42;  // 14 + 14 + 14 bits
  typedef enum logic [1:0] {IT_GEMM, IT_GEMM_RESET, IT_ALU} it_cnt_e;
  logic            it1_v_q, it2_v_q;      // a GEMM or ALU started one, two cycles before
  it_cnt_e         it1_cnt_q, it2_cnt_q;  // its counter
  logic [27:0]     it_loops_q;            // iter_out * iter_in
  logic [13:0]     it_uops_q;             // uop_end - uop_bgn
  logic [IT_W-1:0] it_q;                  // it_loops_q * it_uops_q
  always_ff @(posedge clk_i) begin
    it1_v_q    <= rst_ni && !clear_i && fire_i[1]
               && (cm.hdr.opcode == vdla_pkg::OP_GEMM || cm.hdr.opcode == vdla_pkg::OP_ALU);
    it2_v_q    <= rst_ni && !clear_i && it1_v_q;
    if (fire_i[1]) begin
      it1_cnt_q  <= cm.hdr.opcode == vdla_pkg::OP_ALU ? IT_ALU : compute_cmd_i.gemm.reset ? IT_GEMM_RESET : IT_GEMM;
      it_loops_q <= 28'(compute_cmd_i.gemm.iter_out) * 28'(vdla_pkg::loop_iter_in(compute_cmd_i));
      it_uops_q  <= compute_cmd_i.gemm.uop_end - 14'(compute_cmd_i.gemm.uop_bgn);
    end
    if (it1_v_q) begin
      it2_cnt_q <= it1_cnt_q;
      it_q      <= IT_W'(it_loops_q) * IT_W'(it_uops_q);
    end
  end

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
      if (ld_v_q && ld_wgt_q) cnt_q[vdla_pkg::CNT_BYTES_WGT] <= cnt_q[vdla_pkg::CNT_BYTES_WGT] + times(ld_elems, WGT_EB);
      if (ld_v_q && !ld_wgt_q && !ld_uop_q) cnt_q[vdla_pkg::CNT_BYTES_INP] <= cnt_q[vdla_pkg::CNT_BYTES_INP] + times(ld_elems, INP_EB);
      if (ld_v_q && ld_uop_q) cnt_q[vdla_pkg::CNT_BYTES_UOP_PRE] <= cnt_q[vdla_pkg::CNT_BYTES_UOP_PRE] + times(ld_elems, 4);
      if (cm_v_q) begin  // the compute stage's loads: other counters than the load stage's
        case (cm_type_q)
          vdla_pkg::MEM_UOP: cnt_q[vdla_pkg::CNT_BYTES_UOP] <= cnt_q[vdla_pkg::CNT_BYTES_UOP] + times(cm_elems, 4);
          vdla_pkg::MEM_ACC: cnt_q[vdla_pkg::CNT_BYTES_ACC] <= cnt_q[vdla_pkg::CNT_BYTES_ACC] + times(cm_elems, ACC_EB);
          vdla_pkg::MEM_LUT: cnt_q[vdla_pkg::CNT_BYTES_LUT] <= cnt_q[vdla_pkg::CNT_BYTES_LUT] + times(cm_elems, OUT_EB);
          default: cnt_q[vdla_pkg::CNT_BYTES_ACC_8BIT] <= cnt_q[vdla_pkg::CNT_BYTES_ACC_8BIT] + times(cm_elems, OUT_EB);
        endcase
      end
      if (st_v_q) cnt_q[vdla_pkg::CNT_BYTES_STORED] <= cnt_q[vdla_pkg::CNT_BYTES_STORED] + times(st_elems, OUT_EB);
      if (it2_v_q) begin  // the uop-iterations of the GEMM or ALU started two cycles before
        case (it2_cnt_q)
          IT_GEMM: cnt_q[vdla_pkg::CNT_GEMM_ITERS] <= cnt_q[vdla_pkg::CNT_GEMM_ITERS] + 64'(it_q);
          IT_GEMM_RESET: cnt_q[vdla_pkg::CNT_GEMM_RESET_ITERS] <= cnt_q[vdla_pkg::CNT_GEMM_RESET_ITERS] + 64'(it_q);
          default: cnt_q[vdla_pkg::CNT_ALU_ITERS] <= cnt_q[vdla_pkg::CNT_ALU_ITERS] + 64'(it_q);
        endcase
      end
      if (fire_i[1]) begin
        case (cm.hdr.opcode)
          vdla_pkg::OP_LOAD: op_q[0] <= op_q[0] + 1'b1 + 32'(fire_i[0]);
          vdla_pkg::OP_GEMM: op_q[2] <= op_q[2] + 1'b1;
          vdla_pkg::OP_ALU: op_q[3] <= op_q[3] + 1'b1;
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

  // The registered multiplies give the one-cycle form's count, and it arrives while the compute stage still runs
  // the instruction (or after the run stopped on an error): a finished run has counted it.
`ifdef INC_ASSERT
  logic [IT_W-1:0] it_check_q [2];  // the one-cycle form, from the command word at the start
  always_ff @(posedge clk_i) begin
    it_check_q[0] <= IT_W'(compute_cmd_i.gemm.iter_out) * IT_W'(vdla_pkg::loop_iter_in(compute_cmd_i))
                   * IT_W'(compute_cmd_i.gemm.uop_end - 14'(compute_cmd_i.gemm.uop_bgn));
    it_check_q[1] <= it_check_q[0];
  end
  `ASSERT(a_iterations, it2_v_q |-> it_q == it_check_q[1],
          "perf: the registered uop-iteration product differs from the one-cycle form")
`endif
  `ASSERT(a_iterations_in_run, (it1_v_q || it2_v_q) |-> busy_i[1] || !count_i,
          "perf: a GEMM/ALU ended before its uop-iterations were counted")
endmodule
