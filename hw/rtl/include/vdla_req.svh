// Requantization of one int32 lane (included in module scope by vdla_alu and vdla_compute): `v` shifted
// right by `shift` rounding half up (in 33 bits, no overflow), clamped to [relu ? 0 : -128, 127].
function automatic logic [7:0] vdla_req(logic signed [31:0] v, logic [4:0] shift, logic relu);
  logic signed [32:0] rounded;
  begin
    rounded = (shift == 5'd0) ? 33'(v) : (33'(v) + (33'sd1 <<< (shift - 5'd1))) >>> shift;
    if (rounded > 33'sd127) vdla_req = 8'd127;
    else if (relu && rounded < 33'sd0) vdla_req = 8'd0;
    else if (rounded < -33'sd128) vdla_req = 8'h80;
    else vdla_req = rounded[7:0];
  end
endfunction
