// Read-modify-write of accumulator rows, one per cycle, in three stages: R reads a row, C combines
// it with its operand in the ALU, W writes the result. Results still in flight (in W, or written
// in the cycle before) are forwarded to a later read of the same row, so back-to-back updates of
// one row see each other, as the sequential semantics requires.
// Slot kinds (vdla_pkg::slot_e): SRC reads the second ALU operand (kept for the next slot), ALU applies
// the ALU operation, GEMM adds the GEMM core's sums, ZERO writes zeros. A slot reads r_addr and writes
// r_waddr; with r_zero it reads nothing and sees zeros (an init GEMM's first update without bias).
// With a_zero_i (an ALU reset) the destination reads as zero: op(0, imm), or op(0, row read) when
// the operand is ACC[src].
// A two-operand ALU slot that no SRC slot precedes (vdla.cycles.holds_src: the instruction reads its source row
// once per outer iteration) takes b from the row held in b_q. The held row (held_addr_q) sees the instruction's
// own writes: a write in W updates b_q, and a slot whose C stage meets that write takes b from W.
// Timing: what selects a slot's operands (the forwarding match, the zeroing, b's source) is decided while the
// slot is in R and registered (the match's address compares come from the caller: r_hit_c_i, r_hit_w_i), and
// b's shift controls (vdla_pkg::alu_lane_ctl) are formed from the immediate in R or from the source row in its
// SRC slot's C, so the C stage is a one-level operand mux and the ALU.
// A MUL slot takes one cycle in C, where the ALU forms its partial products (vdla_alu, mul_en_i), and one in M,
// where it sums them, then W: its result comes a cycle after another operation's. The slot that writes next
// cycle (in M for a MUL, else in C) is the one whose result a read in R takes from W. The sequencer leaves the
// cycle after a MUL without an issue (vdla.cycles.mul_extra), except between a pipelined MUL's inner
// iterations (vdla.isa.pipe): then the slot in R meets a MUL in C, whose result comes too late for it, and
// reading the row that MUL writes (as the destination, or as the held row) is a fault (hazard_o).
// An SQR slot is a MUL's whose multipliers take the row read (a) as both operands (mb's selects are ma's): it
// has no SRC slot and no held row, and pipelines as a MUL does (its destination alone can meet the hazard).
// The OUT path's multiplier (EPI mul: omul_i, a GEMM's whole run): a SRC slot of a GEMM (the multiplier row's,
// one at the start of each outer iteration) loads b_q like an ALU's; each GEMM slot's result, as it leaves W,
// goes to the ALU's multipliers with b_q (omul_en), so that the rounded product of each ACC write comes out of
// om_data_o two cycles after the write (vdla_compute forms the mirror from it). The multipliers' operands are
// their own AND-OR of the sources (ma, mb: a MUL's a and b, or W and b_q), its selects registered, since the C
// stage's a and b meanwhile carry the next slot's accumulation.
// A half-width ALU (vdla_pkg::ALU_PASSES 2) runs every ALU operation but ADD as a two-cycle slot like a MUL's: the
// ALU registers its half of the operands (or of the products) in C and computes in M; its first pass (r_lo_i:
// the low half) writes nothing (the ALU keeps its result), the second writes the row from M. After a second
// pass whose next iteration reads its source row (not a shift, vdla_loop_seq's nogap_q) the sequencer leaves no
// cycle: that SRC slot meets the pass in C and may read the row it writes before it is written, so the first
// pass after it, in R as the second is in M, takes its b from W instead of b_q (src_fw), and the W write of the
// held row updates b_q for the pass after (a shift's controls would be stale: shifts keep the cycle).
module vdla_acc_rmw #(
  parameter int LANES = vdla_pkg::LANES,
  parameter int AW    = vdla_pkg::ACC_AW
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  input  logic                r_valid_i,
  input  logic                c_kill_i,   // the slot in C writes nothing (it failed its range check)
  input  vdla_pkg::slot_e     r_kind_i,
  input  logic                r_zero_i,
  input  logic [AW-1:0]       r_addr_i,
  input  logic [AW-1:0]       r_waddr_i,
  input  logic                r_hit_c_i,  // r_addr_i == the slot in C's r_waddr_i (the caller's compare)
  input  logic                r_hit_m_i,  // r_addr_i == the slot in M's r_waddr_i
  input  logic                r_hit_w_i,  // r_addr_i == the slot in W's r_waddr_i
  input  logic                r_lo_i,     // a half-width ALU's first pass: it writes nothing
  input  vdla_pkg::alu_op_e   alu_op_i,   // held for the whole instruction
  input  logic                use_imm_i,
  input  logic                a_zero_i,
  input  logic [15:0]         imm_i,
  input  logic [LANES*32-1:0] sum_i,      // GEMM sums, valid in the C stage of a GEMM slot
  input  logic                omul_i,     // the running GEMM's writes are multiplied for OUT (EPI mul)
  input  logic [5:0]          omul_shift_i,  // their rounding shift (EPI mul_shift)
  // ACC read port
  output logic                acc_re_o,
  output logic [AW-1:0]       acc_raddr_o,
  input  logic [LANES*32-1:0] acc_rdata_i,
  // ACC write
  output logic                wr_valid_o,
  output logic [AW-1:0]       wr_addr_o,
  output logic [AW-1:0]       c_waddr_o,  // the write address of the slot in C (wr_addr_o: of the slot in W)
  output logic [AW-1:0]       m_waddr_o,  // of the slot in M
  output logic                m_valid_o,  // a MUL slot in M: it writes next cycle, from W
  output logic [LANES*32-1:0] wr_data_o,
  output logic [LANES*32-1:0] om_data_o,  // the rounded product of the ACC write two cycles before (omul_i)
  output logic                hazard_o,   // the slot in R reads the row the MUL in C writes (a pipelined MUL's)
  output logic                busy_o      // a slot in C, M or W
);
  logic                c_valid_q, m_valid_q, w_valid_q;
  vdla_pkg::slot_e     c_kind_q;
  logic [AW-1:0]       c_addr_q, c_waddr_q, m_waddr_q, w_addr_q, held_addr_q;
  logic [LANES*32-1:0] w_data, f_data_q, b_q, rd, a, b;
  logic                c_alu, c_src, c_two, c_mul, c_next, req;
  logic                c_mul_q;  // the slot in C is a two-cycle ALU slot (a MUL's; half-width: all but ADD's)
  logic                c_lo_q;   // ... a half-width ALU's first pass (it writes nothing)
  localparam int CW = vdla_pkg::ALU_CTL_W;
  logic [LANES*CW-1:0] ctl_q;  // the shift controls of b (vdla_pkg::alu_lane_ctl), lane l's in [l*CW +: CW]

  assign req   = alu_op_i == vdla_pkg::ALU_REQ;
  assign c_src = c_valid_q && c_kind_q == vdla_pkg::SLOT_SRC;
  assign c_alu = c_valid_q && !c_src;  // a slot in C that writes (but a first pass)
  assign c_two = c_alu && c_mul_q;     // a two-cycle slot: the ALU registers its products or operands
  assign c_mul = c_two && !c_lo_q;     // ... that writes from M, a cycle later
  assign c_next = c_alu && !c_mul_q;   // ... next cycle, from W

  // no read for a ZERO slot, a slot that sees zeros, or op(0, imm)
  assign acc_re_o    = r_valid_i && r_kind_i != vdla_pkg::SLOT_ZERO && !r_zero_i
                    && !(r_kind_i == vdla_pkg::SLOT_ALU && a_zero_i && use_imm_i);
  assign acc_raddr_o = r_addr_i;

  // The operand selects of the slot in R, registered for its C stage: the forwarding compares the address
  // read with the rows that will be in W (the slot in M, else the one in C that is no MUL) and in F (written the
  // cycle before: the slot in W) when the slot is in C. A reset
  // with a row operand, op(0, ACC[src]), computes op(ACC[src], 0) (MIN, MAX and ADD commute; CLIP takes its
  // bounds from a, LSUM its operand, u_alu's clip_a_i; SHR, RSHR, REQ and MUL give 0), so b is never
  // the row read in C.
  logic          alu_r, held_r, held_fw, zero_op, fw_w, fw_f, a_en, sqr;
  logic          rd_w_q, rd_f_q;            // the row read comes from W, from F, else from the RAM
  logic          a_w_q, a_f_q, a_r_q;       // a: the row read from W, F or the RAM (none: a = 0)
  logic          b_sum_q, b_w_q, b_bq_q;    // b: the GEMM sums, W (the held row just written), b_q (none: 0)
  logic          zero_q, clip_a_q;
  assign alu_r     = r_kind_i == vdla_pkg::SLOT_ALU;
  assign sqr       = alu_op_i == vdla_pkg::ALU_SQR;  // (no reset, no immediate: vdla_insn_check)
  // a two-operand ALU slot without its SRC slot in C: its b is the held row, which the slot writing next
  // cycle may write (not an SQR's: it reads no source row)
  assign held_r    = alu_r && !use_imm_i && !a_zero_i && !c_src && !sqr;
  // (half-width: the SRC slot in C read the row the second pass in M writes, src_fw)
  logic src_fw;
  assign src_fw    = vdla_pkg::ALU_PASSES > 1 && alu_r && c_src && m_valid_q && m_waddr_q == c_addr_q;
  assign held_fw   = (held_r && ((m_valid_q && m_waddr_q == held_addr_q) || (c_next && c_waddr_q == held_addr_q)))
                  || src_fw;
  assign zero_op   = alu_op_i == vdla_pkg::ALU_SHR || alu_op_i == vdla_pkg::ALU_RSHR || alu_op_i == vdla_pkg::ALU_REQ
                  || alu_op_i == vdla_pkg::ALU_MUL;  // op(0, v) = 0

  assign fw_w      = (m_valid_q && r_hit_m_i) || (c_next && r_hit_c_i);  // m_waddr_q, c_waddr_q == r_addr_i
  assign fw_f      = w_valid_q && r_hit_w_i;  // w_addr_q == r_addr_i
  // (a SRC slot meeting a half-width pass in C is no hazard: src_fw)
  assign hazard_o  = c_mul && ((acc_re_o && r_hit_c_i && r_kind_i != vdla_pkg::SLOT_SRC)
                            || (r_valid_i && held_r && c_waddr_q == held_addr_q));
  assign a_en      = !r_zero_i && !(alu_r && a_zero_i && use_imm_i);  // op(0, imm) reads nothing

  // The multipliers' operand selects: a MUL's a and b (its slot in R, now entering C), an SQR's a twice, or
  // (om_next: the GEMM slot entering W under omul_i) W's result and the multiplier row in b_q; the two never meet
  // (one instruction runs).
  logic om_next, om_q;
  logic ma_w_q, ma_f_q, ma_r_q, mb_w_q, mb_f_q, mb_r_q, mb_bq_q;
  logic [LANES*32-1:0] ma, mb;
  assign om_next = vdla_pkg::OUT_MUL_SUPPORTED != 0 && omul_i && c_next && !c_kill_i;

  always_ff @(posedge clk_i) begin
    om_q     <= om_next;
    ma_w_q   <= om_next || (a_en && fw_w);
    ma_f_q   <= !om_next && a_en && fw_f && !fw_w;
    ma_r_q   <= !om_next && a_en && !fw_w && !fw_f;
    mb_w_q   <= !om_next && (held_fw || (sqr && a_en && fw_w));
    mb_f_q   <= !om_next && sqr && a_en && fw_f && !fw_w;
    mb_r_q   <= !om_next && sqr && a_en && !fw_w && !fw_f;
    mb_bq_q  <= om_next || (alu_r && (use_imm_i || !a_zero_i) && !held_fw && !sqr);
  end

  always_ff @(posedge clk_i) begin
    rd_w_q   <= fw_w;
    rd_f_q   <= fw_f && !fw_w;
    a_w_q    <= a_en && fw_w;
    a_f_q    <= a_en && fw_f && !fw_w;
    a_r_q    <= a_en && !fw_w && !fw_f;
    b_sum_q  <= r_kind_i == vdla_pkg::SLOT_GEMM;
    b_w_q    <= held_fw;
    b_bq_q   <= alu_r && (use_imm_i || !a_zero_i) && !held_fw;
    zero_q   <= r_kind_i == vdla_pkg::SLOT_ZERO || (alu_r && a_zero_i && zero_op);
    clip_a_q <= a_zero_i && !use_imm_i;
  end

  // The row read, at its freshest (W stage, then the row written last cycle, then the RAM), and the operands.
  // An immediate is in b_q (loaded by every slot of an immediate instruction in R, as are its controls).
  always_comb begin
    if (rd_w_q) rd = w_data;
    else if (rd_f_q) rd = f_data_q;
    else rd = acc_rdata_i;
    a = ({LANES*32{a_w_q}} & w_data) | ({LANES*32{a_f_q}} & f_data_q) | ({LANES*32{a_r_q}} & acc_rdata_i);
    b = ({LANES*32{b_sum_q}} & sum_i) | ({LANES*32{b_w_q}} & w_data) | ({LANES*32{b_bq_q}} & b_q);
    ma = ({LANES*32{ma_w_q}} & w_data) | ({LANES*32{ma_f_q}} & f_data_q) | ({LANES*32{ma_r_q}} & acc_rdata_i);
    mb = ({LANES*32{mb_w_q}} & w_data) | ({LANES*32{mb_f_q}} & f_data_q) | ({LANES*32{mb_r_q}} & acc_rdata_i)
       | ({LANES*32{mb_bq_q}} & b_q);
  end

  vdla_alu #(.LANES(LANES)) u_alu (
    .clk_i,
    .en_i   (c_next || m_valid_q),
    .mul_en_i (c_two),
    .lo_i   (c_lo_q),
    .omul_en_i (om_q),
    .zero_i (zero_q),
    .clip_a_i (clip_a_q),
    .op_i   (c_kind_q == vdla_pkg::SLOT_GEMM ? vdla_pkg::ALU_ADD : alu_op_i),  // GEMM accumulates
    // a MUL reading ACC[src] carries its shift in imm; the OUT path's is the EPI state's
    .mul_shift_i (omul_i ? omul_shift_i : use_imm_i ? 6'd0 : imm_i[5:0]),
    .ctl_i  (ctl_q),
    .a_i    (a),
    .b_i    (b),
    .ma_i   (ma),
    .mb_i   (mb),
    .res_o  (w_data),
    .ores_o (om_data_o)
  );

  assign wr_valid_o = w_valid_q;
  assign wr_addr_o  = w_addr_q;
  assign c_waddr_o  = c_waddr_q;
  assign m_waddr_o  = m_waddr_q;
  assign m_valid_o  = m_valid_q;
  assign wr_data_o  = w_data;
  assign busy_o     = c_valid_q || m_valid_q || w_valid_q;

  // a slot killed in C writes nothing: a MUL does not go on to M
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      c_valid_q <= 1'b0;
      m_valid_q <= 1'b0;
      w_valid_q <= 1'b0;
    end else begin
      c_valid_q <= r_valid_i;
      m_valid_q <= c_mul && !c_kill_i;
      w_valid_q <= (c_next && !c_kill_i) || m_valid_q;
    end
  end

  always_ff @(posedge clk_i) begin
    c_mul_q   <= r_kind_i == vdla_pkg::SLOT_ALU && (vdla_pkg::alu_two_cycle(alu_op_i)
                 || (vdla_pkg::ALU_PASSES > 1 && !vdla_pkg::alu_full_width(alu_op_i)));
    c_lo_q    <= r_lo_i;
    c_kind_q  <= r_kind_i;
    c_addr_q  <= r_addr_i;
    c_waddr_q <= r_waddr_i;
    m_waddr_q <= c_waddr_q;
    w_addr_q  <= m_valid_q ? m_waddr_q : c_waddr_q;
    if (w_valid_q) f_data_q <= w_data;
    // b_q: the source row a SRC slot read, else an immediate instruction's operand, else the held row as the
    // instruction writes it (the shifts, whose controls ctl_q come with b_q, never hold their row)
    if (c_src) begin
      b_q         <= rd;
      held_addr_q <= c_addr_q;
      for (int l = 0; l < LANES; l++) ctl_q[l*CW +: CW] <= vdla_pkg::alu_lane_ctl(req, rd[l*32 +: 32]);
    end else if (r_valid_i && use_imm_i) begin
      b_q <= {LANES{{16{imm_i[15]}}, imm_i}};
      for (int l = 0; l < LANES; l++) ctl_q[l*CW +: CW] <= vdla_pkg::alu_lane_ctl(req, 32'(signed'(imm_i)));
    end else if (w_valid_q && w_addr_q == held_addr_q) begin
      b_q <= w_data;
    end
  end

  `ASSERT(a_one_writer, m_valid_q |-> !c_next, "acc_rmw: a MUL in M and a slot in C would both write next cycle")
  // The caller forms the forwarding compares (vdla_compute_loop: from parts prepared a cycle ahead).
  `ASSERT(a_hit_c, r_valid_i |-> r_hit_c_i == (c_waddr_q == r_addr_i),
          "acc_rmw: r_hit_c_i disagrees with the address compare")
  `ASSERT(a_hit_m, r_valid_i |-> r_hit_m_i == (m_waddr_q == r_addr_i),
          "acc_rmw: r_hit_m_i disagrees with the address compare")
  `ASSERT(a_hit_w, r_valid_i |-> r_hit_w_i == (w_addr_q == r_addr_i),
          "acc_rmw: r_hit_w_i disagrees with the address compare")
endmodule
