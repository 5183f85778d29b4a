// The data path of a LOAD: a 2-D DMA read of the tile, then the zero padding around it.
// Each cycle it offers at most one SRAM write: a DRAM beat (labelled with the element index and the
// beat's byte offset) or one whole padding element. `done_o` marks the last write of the instruction.
module vdla_load_engine #(
  parameter int ADDR_W      = vdla_pkg::AXI_ADDR_W,
  parameter int BUS_W       = vdla_pkg::BUS_WIDTH,
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
  input  logic [IDX_W-1:0]   sram_base_i,
  input  logic [31:0]        dram_base_i, // in elements
  input  logic [15:0]        y_size_i,
  input  logic [15:0]        x_size_i,
  input  logic [15:0]        x_stride_i,
  input  logic [3:0]         y_pad_0_i,
  input  logic [3:0]         y_pad_1_i,
  input  logic [3:0]         x_pad_0_i,
  input  logic [3:0]         x_pad_1_i,
  // AXI read request and data (beats of this requester)
  output logic               arvalid_o,
  output logic [ADDR_W-1:0]  araddr_o,
  output logic [7:0]         arlen_o,
  input  logic               arready_i,
  input  logic               rvalid_i,
  input  logic [1:0]         rresp_i,
  input  logic [BUS_W-1:0]   rdata_i,
  // SRAM write offers
  output logic               wr_valid_o,
  output logic               wr_pad_o,     // a padding element (write zeros to all of it)
  output logic [IDX_W+1:0]   wr_idx_o,     // signed: element index of the beat's first byte
  output logic signed [25:0] wr_off_o,     // beat's byte offset from the start of its DRAM row
  output logic [BUS_W-1:0]   wr_data_o,
  output logic [24:0]        row_bytes_o,
  output logic               done_o,
  output logic               err_o
);
  typedef enum logic [1:0] {IDLE, DATA, PAD} state_e;
  state_e state_q;

  logic [3:0]        log_eb_q;
  logic [16:0]       cols_q;        // padded row length in elements
  logic [IDX_W+1:0]  row_base_q;    // element index of the current DRAM row's first element
  logic [31:0]       pads_left_q;
  logic [7:0]        wait_q;
  // padding walk
  logic [16:0]       pr_q, pc_q;    // row and column in the padded tile
  logic [IDX_W+1:0]  pidx_q;
  logic [15:0]       y_q, x_q;
  logic [3:0]        yp0_q, xp0_q;
  logic [IDX_W+1:0]  ycols_q;       // y_size * cols (the index arithmetic's width)

  logic beat_row_end, beat_last;
  logic signed [25:0] beat_off;

  logic [16:0] cols;
  logic [31:0] pads_total;
  assign cols = 17'(x_pad_0_i) + 17'(x_size_i) + 17'(x_pad_1_i);
  assign pads_total = (32'(y_pad_0_i) + 32'(y_pad_1_i)) * 32'(cols)
                    + 32'(y_size_i) * (32'(x_pad_0_i) + 32'(x_pad_1_i));

  vdla_dma_rd #(.ADDR_W(ADDR_W), .BUS_W(BUS_W), .MAX_BEATS(MAX_BEATS), .OFF_W(26)) u_dma (
    .clk_i, .rst_ni, .halt_i,
    .start_i     (start_i && state_q == IDLE),
    .addr_i      (ADDR_W'(dram_base_i) << log_eb_i),
    .stride_i    (ADDR_W'(x_stride_i) << log_eb_i),
    .row_bytes_i (25'(x_size_i) << log_eb_i),
    .rows_i      (y_size_i),
    .hold_i      (state_q == DATA && wait_q != '0),
    .arvalid_o, .araddr_o, .arlen_o, .arready_i,
    .rvalid_i, .rresp_i,
    .beat_off_o  (beat_off),
    .beat_row_end_o (beat_row_end),
    .beat_last_o (beat_last),
    .err_o
  );

  assign row_bytes_o = 25'(x_q) << log_eb_q;

  // Next padding position after (pr_q, pc_q): step, wrap, and skip the data block.
  logic [16:0]      npr, npc;
  logic [IDX_W+1:0] npidx;
  logic             in_data_row;
  always_comb begin
    npr   = pr_q;
    npc   = pc_q + 1'b1;
    npidx = pidx_q + 1'b1;
    if (npc == cols_q) begin
      npc = '0;
      npr = pr_q + 1'b1;
    end
    in_data_row = npr >= 17'(yp0_q) && npr < 17'(yp0_q) + 17'(y_q);
    if (in_data_row && cols_q == 17'(x_q)) begin
      npr   = 17'(yp0_q) + 17'(y_q);  // rows without side padding: jump over the whole block
      npidx = npidx + ycols_q;
    end else if (in_data_row && npc == 17'(xp0_q)) begin
      npc   = 17'(xp0_q) + 17'(x_q);
      npidx = npidx + (IDX_W+2)'(x_q);
      if (npc == cols_q) begin
        npc = '0;
        npr = npr + 1'b1;
      end
    end
  end

  logic pad_fire;
  assign pad_fire = (state_q == PAD) && wait_q == '0;

  always_comb begin
    wr_valid_o = 1'b0;
    wr_pad_o   = 1'b0;
    wr_idx_o   = row_base_q + (IDX_W+2)'($signed(beat_off) >>> log_eb_q);
    wr_off_o   = beat_off;
    wr_data_o  = rdata_i;
    done_o     = 1'b0;
    if (state_q == DATA && rvalid_i) begin
      wr_valid_o = 1'b1;
      done_o     = beat_last && pads_left_q == '0;
    end else if (pad_fire) begin
      wr_valid_o = 1'b1;
      wr_pad_o   = 1'b1;
      wr_idx_o   = pidx_q;
      done_o     = pads_left_q == 32'd1;
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= IDLE;
    end else if (halt_i) begin
      state_q <= IDLE;
    end else begin
      case (state_q)
        IDLE: if (start_i) state_q <= DATA;
        DATA: if (wait_q == '0 && rvalid_i && beat_last) state_q <= pads_left_q == '0 ? IDLE : PAD;
        PAD: if (wait_q == '0 && pads_left_q == 32'd1) state_q <= IDLE;
        default: state_q <= IDLE;
      endcase
    end
  end

  // Loaded when the load starts and used while it runs (no reset; a halt freezes them): the wait
  // counter, the padding elements left, the tile's geometry, the current row's base index and the
  // padding walk.
  always_ff @(posedge clk_i) begin
    if (!halt_i) begin
      case (state_q)
        IDLE: if (start_i) begin
          wait_q      <= 8'(SETUP);
          pads_left_q <= pads_total;
          log_eb_q    <= log_eb_i;
          y_q         <= y_size_i;
          x_q         <= x_size_i;
          yp0_q       <= y_pad_0_i;
          xp0_q       <= x_pad_0_i;
          cols_q      <= cols;
          ycols_q     <= (IDX_W+2)'(32'(y_size_i) * 32'(cols));
          row_base_q  <= (IDX_W+2)'(sram_base_i) + (IDX_W+2)'(32'(y_pad_0_i) * 32'(cols))
                         + (IDX_W+2)'(x_pad_0_i);
          // first padding position: (0, 0) unless it lies in the data block
          pr_q   <= '0;
          pc_q   <= '0;
          pidx_q <= (IDX_W+2)'(sram_base_i);
          if (y_pad_0_i == '0 && x_pad_0_i == '0 && x_pad_1_i == '0) begin
            pr_q   <= 17'(y_size_i);
            pidx_q <= (IDX_W+2)'(sram_base_i) + (IDX_W+2)'(32'(y_size_i) * 32'(cols));
          end else if (y_pad_0_i == '0 && x_pad_0_i == '0) begin
            pc_q   <= 17'(x_size_i);
            pidx_q <= (IDX_W+2)'(sram_base_i) + (IDX_W+2)'(x_size_i);
          end
        end
        DATA: if (wait_q != '0) begin
          wait_q <= wait_q - 1'b1;
        end else if (rvalid_i) begin
          if (beat_row_end) row_base_q <= row_base_q + (IDX_W+2)'(cols_q);
          if (beat_last) wait_q <= 8'(PAD_CYCLES - 1);
        end
        PAD: if (wait_q != '0) begin
          wait_q <= wait_q - 1'b1;
        end else begin
          wait_q      <= 8'(PAD_CYCLES - 1);
          pads_left_q <= pads_left_q - 1'b1;
          pr_q        <= npr;
          pc_q        <= npc;
          pidx_q      <= npidx;
        end
        default: ;
      endcase
    end
  end
endmodule
