# The block design on a Zynq-7000 (processing_system7), sourced by build.tcl with the configuration's parameters
# (vdla_config.tcl): the accelerator's AXI4-Lite slave on M_AXI_GP0 at REG_BASE_ADDR, its AXI4 master to
# S_AXI_HP0 (BUS_WIDTH bits) over all of DDR, FCLK_CLK0 at FCLK_MHZ, its reset from the Processor System Reset
# the AXI automation puts on FCLK_RESET0_N (the driver resets the logic through the SLCR's FPGA_RST_CTRL), its
# irq to IRQ_F2P.

set ps [create_bd_cell -type ip -vlnv xilinx.com:ip:processing_system7:5.5 ps7]
apply_bd_automation -rule xilinx.com:bd_rule:processing_system7 -config {make_external "FIXED_IO, DDR" apply_board_preset "1"} $ps
set_property -dict [list \
  CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ $FCLK_MHZ \
  CONFIG.PCW_USE_S_AXI_HP0 1 \
  CONFIG.PCW_S_AXI_HP0_DATA_WIDTH $BUS_WIDTH \
  CONFIG.PCW_USE_FABRIC_INTERRUPT 1 \
  CONFIG.PCW_IRQ_F2P_INTR 1 \
] $ps

set accel [create_bd_cell -type ip -vlnv vdla.dev:vdla:vdla_top:1.0 vdla_0]

# AXI4-Lite: PS M_AXI_GP0 -> interconnect -> vdla_0/s_axil; AXI4: vdla_0/m_axi -> interconnect -> S_AXI_HP0.
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /ps7/M_AXI_GP0 Clk Auto] [get_bd_intf_pins vdla_0/s_axil]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /vdla_0/m_axi Clk Auto] [get_bd_intf_pins ps7/S_AXI_HP0]
connect_bd_net [get_bd_pins vdla_0/irq_o] [get_bd_pins ps7/IRQ_F2P]

set_property offset $REG_BASE_ADDR [get_bd_addr_segs {ps7/Data/SEG_vdla_0_reg0}]
set_property range $REG_RANGE [get_bd_addr_segs {ps7/Data/SEG_vdla_0_reg0}]
assign_bd_address
