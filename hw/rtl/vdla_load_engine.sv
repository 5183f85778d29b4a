// The data path of a LOAD: a 2-D DMA read of the tile, then the zero padding around it.
// Each cycle it offers at most one SRAM write: a DRAM beat (labelled with the element index and the
// beat's byte offset) or one whole padding element. `done_o` marks the last write of the instruction.
//
// No product feeds logic in its cycle. The tile's four products (the first and last padding runs, the side
// padding between the data rows and the data block: below) are formed every cycle from the fields at the
// inputs into the registers at their DSP48E1s' outputs (MREG/PREG), and a start registers the fields the walk
// reads. In the next cycle, the first of DATA (init_q), the engine loads the padding walk and the first row's
// base index from those registers; before, a start loaded them from the products directly. Nothing reads them
// earlier: the first beat follows a burst request that follows the start, so no beat arrives in the first
// DATA cycle (asserted), and the walk runs after DATA. Every cycle and every write is unchanged.
module vdla_load_engine #(
  parameter int MAX_BEATS   = vdla_pkg::MAX_BURST_BEATS,
  parameter int IDX_W       = 16,  // SRAM element index width
  // cycles from start to the first burst request, minus one; cycles per padding element
  parameter int SETUP       = vdla_pkg::DMA_SETUP,
  parameter int PAD_CYCLES  = vdla_pkg::DMA_PAD_CYCLES
) (
  input  logic               clk_i,
  input  logic               rst_ni,
  input  logic               halt_i,
  input  logic               start_i,
  input  logic [3:0]         log_eb_i,    // log2 of the element size in bytes
  // the LOAD: its tile (sram_base, dram_base in elements, sizes, stride, padding); its header and memory type
  // are the caller's
  input  vdla_pkg::mem_insn_t insn_i,
  // AXI read request and data (beats of this requester)
  output vdla_pkg::axi_rd_req_t axi_rd_req_o,
  input  vdla_pkg::axi_rd_rsp_t axi_rd_rsp_i,
  // SRAM write offers
  output logic               wr_valid_o,
  output logic               wr_pad_o,     // a padding element (write zeros to all of it)
  output logic [IDX_W+1:0]   wr_idx_o,     // signed: element index of the beat's first byte
  output logic signed [25:0] wr_off_o,     // beat's byte offset from the start of its DRAM row
  output logic [vdla_pkg::BUS_WIDTH-1:0] wr_data_o,
  output logic [24:0]        row_bytes_o,
  output logic               done_o,
  output logic               err_o
);
  localparam int ADDR_W = vdla_pkg::AXI_ADDR_W;

  logic rvalid;  // a beat of this requester's
  assign rvalid = axi_rd_rsp_i.r_valid;

  logic unused_insn;  // the caller decodes the header and the memory type; the reserved bits are not read
  assign unused_insn = ^{insn_i.rsvd_63_58, insn_i.mem_type, insn_i.hdr};

  typedef enum logic [1:0] {IDLE, DATA, PAD} state_e;
  state_e state_q;

  logic              init_q;        // the first DATA cycle: the walk and row_base_q are loaded
  logic [3:0]        log_eb_q;
  logic [16:0]       cols_q;        // padded row length in elements
  logic [15:0]       y_size_q, x_size_q;  // the started tile's fields, read in the first DATA cycle
  logic [3:0]        y_pad_0_q, y_pad_1_q, x_pad_0_q, x_pad_1_q;
  logic [IDX_W+1:0]  row_base_q;    // element index of the current DRAM row's first element
  logic [31:0]       pads_left_q;
  logic              pads_none_q;   // pads_left_q == 0
  logic              pads_last_q;   // pads_left_q == 1
  localparam int WAIT_MAX = SETUP > PAD_CYCLES - 1 ? SETUP : PAD_CYCLES - 1;
  localparam int WAIT_W   = WAIT_MAX > 1 ? $clog2(WAIT_MAX + 1) : 1;
  logic [WAIT_W-1:0] wait_q;        // cycles left to wait: no wider than the longest wait
  logic              waiting_q;     // wait_q != 0
  logic [24:0]       row_bytes_q;   // bytes of a DRAM row
  // The padding walk. The padding elements, in raster order of the padded tile, are runs of consecutive
  // indices separated by skips over the data block: the first run (the rows above and the first data row's
  // left padding), one between each two data rows (right padding, then left) and the last (the last data
  // row's right padding and the rows below). Without side padding the block is one skip of y_size * cols.
  // Each step tests registered flags only: the run's end, and the next run's length of one.
  localparam int RUN_W = 22;         // a run: at most 15 rows of cols, plus 15
  logic [IDX_W+1:0]  pidx_q;        // the current padding element's index
  logic [IDX_W+1:0]  skip_q;        // indices from a run's last element to the next run's first
  logic [RUN_W-1:0]  run_q;         // elements left in the current run, this one included
  logic              run_end_q;     // run_q == 1
  logic [15:0]       mids_q;        // runs between data rows still to come
  logic [4:0]        mid_q;         // a run between data rows: x_pad_1 + x_pad_0
  logic              mid_one_q;     // mid_q == 1
  logic [RUN_W-1:0]  last_q;        // the last run: x_pad_1 + y_pad_1 * cols
  logic              last_one_q;    // last_q == 1

  logic beat_row_end, beat_last;
  logic signed [25:0] beat_off;

  // The tile's products, formed from the fields at the inputs (read in the cycle after a start; a LOAD that
  // moves data has y_size >= 1): the first run (the rows above and the first data row's left padding), the last
  // (the last data row's right padding and the rows below), the y_size - 1 runs between data rows together and
  // the data block (the skip over it, less one, without side padding: cols == x_size).
  logic [16:0]      cols;
  logic [4:0]       mid_in;
  logic [RUN_W-1:0] first_run_q, last_run_q;
  logic [RUN_W-1:0] mids_run_q;  // (y_size - 1) * (x_pad_0 + x_pad_1)
  logic [IDX_W+1:0] block_q;     // y_size * x_size
  assign cols   = 17'(insn_i.x_pad_0) + 17'(insn_i.x_size) + 17'(insn_i.x_pad_1);
  assign mid_in = 5'(insn_i.x_pad_0) + 5'(insn_i.x_pad_1);
  always_ff @(posedge clk_i) begin
    first_run_q <= RUN_W'(insn_i.y_pad_0) * RUN_W'(cols) + RUN_W'(insn_i.x_pad_0);
    last_run_q  <= RUN_W'(insn_i.x_pad_1) + RUN_W'(insn_i.y_pad_1) * RUN_W'(cols);
    mids_run_q  <= RUN_W'(16'(insn_i.y_size - 1'b1)) * RUN_W'(mid_in);
    block_q     <= (IDX_W+2)'(insn_i.y_size) * (IDX_W+2)'(insn_i.x_size);
  end

  // the walk's runs and skip, from the registered fields and products
  logic             side, first_one, last_one, mid_one, any_mids;
  logic [IDX_W+1:0] gap, skip;
  logic [4:0]       mid_run;
  logic [15:0]      mids;
  logic [31:0]      pads_total;
  assign side      = x_pad_0_q != '0 || x_pad_1_q != '0;
  // a run of one element, from the fields rather than the sums (cols == 1: one data column, no side padding)
  assign first_one = (y_pad_0_q == '0 && x_pad_0_q == 4'd1)
                  || (y_pad_0_q == 4'd1 && !side && x_size_q == 16'd1);
  assign last_one  = (y_pad_1_q == '0 && x_pad_1_q == 4'd1)
                  || (y_pad_1_q == 4'd1 && !side && x_size_q == 16'd1);
  assign mid_one   = (x_pad_0_q == 4'd1 && x_pad_1_q == '0) || (x_pad_0_q == '0 && x_pad_1_q == 4'd1);
  assign any_mids  = side && y_size_q != 16'd1;
  // exactly one padding element (pads_total == 1, from the fields: x_size, y_size >= 1): one row above or below a
  // one-column tile, or one column beside a one-row tile
  logic pads_one;
  assign pads_one  = (!side && x_size_q == 16'd1 && ((y_pad_0_q == 4'd1 && y_pad_1_q == '0)
                                                   || (y_pad_0_q == '0 && y_pad_1_q == 4'd1)))
                  || (y_pad_0_q == '0 && y_pad_1_q == '0 && y_size_q == 16'd1 && mid_one);
  // the skip less one: the data row between side paddings, or without them the whole block (cols == x_size)
  assign gap       = side ? (IDX_W+2)'(x_size_q) : block_q;
  assign skip      = gap + 1'b1;
  assign mid_run   = 5'(x_pad_0_q) + 5'(x_pad_1_q);
  assign mids      = side ? y_size_q - 1'b1 : '0;
  // (y_pad_0 + y_pad_1) * cols + y_size * (x_pad_0 + x_pad_1): the first and last runs and those between
  assign pads_total = 32'(first_run_q) + 32'(last_run_q) + 32'(mids_run_q);

  vdla_dma_rd #(.MAX_BEATS(MAX_BEATS), .OFF_W(26)) u_dma (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (start_i && state_q == IDLE),
    .addr_i      (ADDR_W'(insn_i.dram_base) << log_eb_i),
    .stride_i    (ADDR_W'(insn_i.x_stride) << log_eb_i),
    .row_bytes_i (25'(insn_i.x_size) << log_eb_i),
    .rows_i      (insn_i.y_size),
    .hold_i      (state_q == DATA && waiting_q),
    .axi_rd_req_o, .axi_rd_rsp_i,
    .beat_off_o  (beat_off),
    .beat_row_end_o (beat_row_end),
    .beat_last_o (beat_last),
    .err_o
  );

  assign row_bytes_o = row_bytes_q;

  logic pad_fire;
  assign pad_fire = (state_q == PAD) && !waiting_q;

  // A DRAM beat (DATA) and a padding element (PAD) never coincide: what is written, and where, follows the
  // state alone; only the valid and done flags wait for the beat.
  assign wr_valid_o = (state_q == DATA && rvalid) || pad_fire;
  assign wr_pad_o   = pad_fire;
  assign wr_idx_o   = pad_fire ? pidx_q : row_base_q + (IDX_W+2)'($signed(beat_off) >>> log_eb_q);
  assign wr_off_o   = beat_off;
  assign wr_data_o  = axi_rd_rsp_i.r_data;
  assign done_o     = (state_q == DATA && rvalid && beat_last && pads_none_q) || (pad_fire && pads_last_q);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= IDLE;
      init_q  <= 1'b0;
    end else if (halt_i) begin
      state_q <= IDLE;
      init_q  <= 1'b0;
    end else begin
      init_q <= state_q == IDLE && start_i;
      case (state_q)
        IDLE: if (start_i) state_q <= DATA;
        DATA: if (!waiting_q && rvalid && beat_last) state_q <= pads_none_q ? IDLE : PAD;
        PAD: if (!waiting_q && pads_last_q) state_q <= IDLE;
        default: state_q <= IDLE;
      endcase
    end
  end

  // The run after a skip (its length, whether it is one element, the runs between data rows left): the next
  // run between data rows while `more` of them remain, else the last run.
  function automatic logic [RUN_W+16:0] after_skip(logic more, logic [4:0] mid, logic mid_1, logic [15:0] n_mids,
                                                   logic [RUN_W-1:0] last, logic last_1);
    after_skip = more ? {RUN_W'(mid), mid_1, n_mids - 1'b1} : {last, last_1, n_mids};
  endfunction

  // Loaded when the load starts and used while it runs (no reset; a halt freezes them): the wait
  // counter, the DMA geometry, the tile's fields and, in the first DATA cycle, the padding elements
  // left, the current row's base index and the padding walk.
  always_ff @(posedge clk_i) begin
    if (!halt_i) begin
      case (state_q)
        IDLE: if (start_i) begin
          wait_q      <= WAIT_W'(SETUP);
          waiting_q   <= SETUP != 0;
          log_eb_q    <= log_eb_i;
          row_bytes_q <= 25'(insn_i.x_size) << log_eb_i;
          cols_q      <= cols;
          y_size_q    <= insn_i.y_size;
          x_size_q    <= insn_i.x_size;
          y_pad_0_q   <= insn_i.y_pad_0;
          y_pad_1_q   <= insn_i.y_pad_1;
          x_pad_0_q   <= insn_i.x_pad_0;
          x_pad_1_q   <= insn_i.x_pad_1;
          row_base_q  <= (IDX_W+2)'(insn_i.sram_base);  // the walk's offsets are added in the first DATA cycle
          pidx_q      <= (IDX_W+2)'(insn_i.sram_base);
        end
        DATA: begin
          if (init_q) begin
            pads_left_q <= pads_total;
            pads_none_q <= !side && y_pad_0_q == '0 && y_pad_1_q == '0;
            pads_last_q <= pads_one;
            row_base_q  <= row_base_q + (IDX_W+2)'(first_run_q);  // past the rows above, left padding
            skip_q      <= skip;
            mid_q       <= mid_run;
            mid_one_q   <= mid_one;
            last_q      <= last_run_q;
            last_one_q  <= last_one;
            // the first run, or (when it is empty) the run after the first skip
            run_q     <= first_run_q;
            run_end_q <= first_one;
            mids_q    <= mids;
            if (y_pad_0_q == '0 && x_pad_0_q == '0) begin
              pidx_q <= pidx_q + gap;  // sram_base + skip - 1
              {run_q, run_end_q, mids_q} <= after_skip(any_mids, mid_run, mid_one, mids, last_run_q, last_one);
            end
          end
          if (waiting_q) begin
            wait_q    <= wait_q - 1'b1;
            waiting_q <= wait_q != WAIT_W'(1);
          end else if (rvalid) begin
            if (beat_row_end) row_base_q <= row_base_q + (IDX_W+2)'(cols_q);
            if (beat_last) begin
              wait_q    <= WAIT_W'(PAD_CYCLES - 1);
              waiting_q <= PAD_CYCLES != 1;
            end
          end
        end
        PAD: if (waiting_q) begin
          wait_q    <= wait_q - 1'b1;
          waiting_q <= wait_q != WAIT_W'(1);
        end else begin
          wait_q      <= WAIT_W'(PAD_CYCLES - 1);
          waiting_q   <= PAD_CYCLES != 1;
          pads_left_q <= pads_left_q - 1'b1;
          pads_none_q <= pads_last_q;
          pads_last_q <= pads_left_q == 32'd2;
          if (!run_end_q) begin
            pidx_q    <= pidx_q + 1'b1;
            run_q     <= run_q - 1'b1;
            run_end_q <= run_q == RUN_W'(2);
          end else begin
            pidx_q <= pidx_q + skip_q;
            {run_q, run_end_q, mids_q} <= after_skip(mids_q != '0, mid_q, mid_one_q, mids_q, last_q, last_one_q);
          end
        end
        default: ;
      endcase
    end
  end

  // The walk is loaded before its first reader: no beat in the first DATA cycle.
  `ASSERT(a_init_before_beat, init_q |-> !rvalid,
          "load engine: a beat arrived before the walk and the row base were loaded")
  // The registered products are those of the started instruction's fields, in their one-cycle forms.
`ifdef INC_ASSERT
  logic [IDX_W+1:0] ycols_check;
  logic [31:0]      pads_check;
  assign ycols_check = (IDX_W+2)'(32'(y_size_q) * 32'(cols_q));
  assign pads_check  = 32'(first_run_q) + 32'(last_run_q) + 32'(y_size_q) * 32'(mid_run) - 32'(mid_run);
  `ASSERT(a_walk_products, init_q |->
      first_run_q == RUN_W'(y_pad_0_q) * RUN_W'(cols_q) + RUN_W'(x_pad_0_q)
      && last_run_q == RUN_W'(x_pad_1_q) + RUN_W'(y_pad_1_q) * RUN_W'(cols_q)
      && (side || skip == ycols_check + 1'b1) && pads_total == pads_check,
      "load engine: the walk's registered products differ from their one-cycle forms")
`endif
  `ASSERT(a_pads_one, init_q |-> pads_one == (pads_total == 32'd1),
          "load engine: the one-padding-element flag disagrees with the padding count")
endmodule
