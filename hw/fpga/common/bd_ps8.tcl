# The block design on a Zynq UltraScale+ (zynq_ultra_ps_e), sourced by build.tcl with the configuration's
# parameters (vdla_config.tcl): the accelerator's AXI4-Lite slave on M_AXI_HPM0_FPD at REG_BASE_ADDR, its AXI4
# master to S_AXI_HP0_FPD (BUS_WIDTH bits, AXI_ADDR_BITS address bits) over all of DDR, pl_clk0 at FCLK_MHZ
# clocking the accelerator, both AXI paths and the PS ports, the accelerator's reset from a Processor System
# Reset driven by pl_resetn0 (the driver resets the logic through it: the PS GPIO's EMIO pin 95), its irq to
# pl_ps_irq0. The IPs' versions are the installed Vivado's.

proc vdla_ip {name} {
  return [get_property VLNV [lindex [lsort [get_ipdefs "xilinx.com:ip:$name:*"]] end]]
}

set ps [create_bd_cell -type ip -vlnv [vdla_ip zynq_ultra_ps_e] ps8]
apply_bd_automation -rule xilinx.com:bd_rule:zynq_ultra_ps_e -config {apply_board_preset "1"} $ps
# The board preset may enable other PL ports (M_AXI_HPM1_FPD, M_AXI_HPM0_LPD): only the two used stay on.
set_property -dict [list \
  CONFIG.PSU__FPGA_PL0_ENABLE 1 \
  CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ $FCLK_MHZ \
  CONFIG.PSU__NUM_FABRIC_RESETS 1 \
  CONFIG.PSU__USE__M_AXI_GP0 1 \
  CONFIG.PSU__MAXIGP0__DATA_WIDTH 32 \
  CONFIG.PSU__USE__M_AXI_GP1 0 \
  CONFIG.PSU__USE__M_AXI_GP2 0 \
  CONFIG.PSU__USE__S_AXI_GP2 1 \
  CONFIG.PSU__SAXIGP2__DATA_WIDTH $BUS_WIDTH \
  CONFIG.PSU__USE__IRQ0 1 \
] $ps

set accel [create_bd_cell -type ip -vlnv vdla.dev:vdla:vdla_top:1.0 vdla_0]
set rst [create_bd_cell -type ip -vlnv [vdla_ip proc_sys_reset] rst_pl0]

# The clock and the reset: pl_clk0 clocks everything; pl_resetn0, synchronized by the Processor System Reset,
# resets the accelerator (and, through the automation below, which finds this reset on pl_clk0, the interconnects).
connect_bd_net [get_bd_pins ps8/pl_clk0] [get_bd_pins rst_pl0/slowest_sync_clk] [get_bd_pins vdla_0/clk_i]
connect_bd_net [get_bd_pins ps8/pl_resetn0] [get_bd_pins rst_pl0/ext_reset_in]
connect_bd_net [get_bd_pins rst_pl0/peripheral_aresetn] [get_bd_pins vdla_0/rst_ni]

# AXI4-Lite: M_AXI_HPM0_FPD -> interconnect -> vdla_0/s_axil; AXI4: vdla_0/m_axi -> interconnect -> S_AXI_HP0_FPD.
set clk /ps8/pl_clk0
apply_bd_automation -rule xilinx.com:bd_rule:axi4 \
  -config [list Clk_master $clk Clk_slave $clk Clk_xbar $clk Master /ps8/M_AXI_HPM0_FPD Slave /vdla_0/s_axil intc_ip Auto master_apm 0] \
  [get_bd_intf_pins vdla_0/s_axil]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 \
  -config [list Clk_master $clk Clk_slave $clk Clk_xbar $clk Master /vdla_0/m_axi Slave /ps8/S_AXI_HP0_FPD intc_ip Auto master_apm 0] \
  [get_bd_intf_pins ps8/S_AXI_HP0_FPD]
connect_bd_net [get_bd_pins vdla_0/irq_o] [get_bd_pins ps8/pl_ps_irq0]

set_property offset $REG_BASE_ADDR [get_bd_addr_segs {ps8/Data/SEG_vdla_0_reg0}]
set_property range $REG_RANGE [get_bd_addr_segs {ps8/Data/SEG_vdla_0_reg0}]
assign_bd_address
