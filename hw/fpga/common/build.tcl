# Vivado batch flow for the vdla accelerator on a Zynq-7000 PYNQ board: package the RTL as an IP, build the
# block design, synthesize, implement, and write the .bit and .hwh that pynq.Overlay loads.
#
#   vivado -mode batch -source ../common/build.tcl -tclargs <board.tcl> <package.sv> <out_dir> <fclk_mhz>
#
# <board.tcl> sets BOARD, PART, BOARD_PART; <package.sv> is the configuration's generated vdla_pkg.sv
# (`vdla gen-rtl --config <preset> -o FILE`) and <fclk_mhz> its clock_mhz (the Makefile reads both from
# the configuration). The address map is the driver's
# (vdla/runtime/pynq_backend.py): the accelerator's AXI4-Lite slave at 0x43C0_0000 (64 KiB) on M_AXI_GP0,
# its AXI4 master to S_AXI_HP0 over all of DDR, its reset from FCLK_RESET0_N (the driver's recovery after a
# timeout), its irq to IRQ_F2P.

if {[llength $argv] != 4} {
  puts "usage: vivado -mode batch -source build.tcl -tclargs <board.tcl> <vdla_pkg.sv> <out_dir> <fclk_mhz>"
  exit 2
}
lassign $argv board_tcl pkg_sv out_dir FCLK_MHZ
source $board_tcl

set here [file dirname [file normalize [info script]]]
set rtl_dir [file normalize [file join $here .. .. rtl]]
set out_dir [file normalize $out_dir]
file mkdir $out_dir

# The RTL: the configuration's package first, then every module (the checked-in package is replaced).
set sources [list [file normalize $pkg_sv]]
foreach f [lsort [glob -directory $rtl_dir *.sv]] {
  if {[file tail $f] ne "vdla_pkg.sv"} { lappend sources $f }
}

# ---- 1. the accelerator as an IP ------------------------------------------------------------------------
set ip_dir [file join $out_dir ip]
create_project -force vdla_ip [file join $out_dir ip_project] -part $PART
add_files -norecurse $sources
set_property file_type SystemVerilog [get_files *.sv]
set_property top vdla_top [current_fileset]
update_compile_order -fileset sources_1
ipx::package_project -root_dir $ip_dir -vendor vdla.dev -library vdla -taxonomy /UserIP -import_files -force
set core [ipx::current_core]
set_property name vdla_top $core
set_property display_name "vdla accelerator" $core
ipx::infer_bus_interface clk_i xilinx.com:signal:clock_rtl:1.0 $core
ipx::infer_bus_interface rst_ni xilinx.com:signal:reset_rtl:1.0 $core
ipx::infer_bus_interface irq_o xilinx.com:signal:interrupt_rtl:1.0 $core
ipx::infer_bus_interfaces xilinx.com:interface:aximm_rtl:1.0 $core
ipx::associate_bus_interfaces -busif s_axil -clock clk_i $core
ipx::associate_bus_interfaces -busif m_axi -clock clk_i $core
# clk_i's reset is rst_ni: the AXI automation then drives it from the Processor System Reset (FCLK_RESET0_N)
ipx::associate_bus_interfaces -clock clk_i -reset rst_ni $core
set_property value ACTIVE_LOW [ipx::get_bus_parameters POLARITY -of_objects [ipx::get_bus_interfaces rst_ni -of_objects $core]]
set_property value LEVEL_HIGH [ipx::get_bus_parameters SENSITIVITY -of_objects [ipx::get_bus_interfaces irq_o -of_objects $core]]
ipx::create_xgui_files $core
ipx::update_checksums $core
ipx::save_core $core
close_project

# ---- 2. the block design ---------------------------------------------------------------------------------
create_project -force vdla_$BOARD [file join $out_dir project] -part $PART
set_property board_part $BOARD_PART [current_project]
set_property ip_repo_paths [list $ip_dir] [current_project]
update_ip_catalog
create_bd_design vdla

set ps [create_bd_cell -type ip -vlnv xilinx.com:ip:processing_system7:5.5 ps7]
apply_bd_automation -rule xilinx.com:bd_rule:processing_system7 -config {make_external "FIXED_IO, DDR" apply_board_preset "1"} $ps
set_property -dict [list \
  CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ $FCLK_MHZ \
  CONFIG.PCW_USE_S_AXI_HP0 1 \
  CONFIG.PCW_S_AXI_HP0_DATA_WIDTH 64 \
  CONFIG.PCW_USE_FABRIC_INTERRUPT 1 \
  CONFIG.PCW_IRQ_F2P_INTR 1 \
] $ps

set accel [create_bd_cell -type ip -vlnv vdla.dev:vdla:vdla_top:1.0 vdla_0]

# AXI4-Lite: PS M_AXI_GP0 -> interconnect -> vdla_0/s_axil; AXI4: vdla_0/m_axi -> interconnect -> S_AXI_HP0.
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /ps7/M_AXI_GP0 Clk Auto] [get_bd_intf_pins vdla_0/s_axil]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /vdla_0/m_axi Clk Auto] [get_bd_intf_pins ps7/S_AXI_HP0]
connect_bd_net [get_bd_pins vdla_0/irq_o] [get_bd_pins ps7/IRQ_F2P]

set_property offset 0x43C00000 [get_bd_addr_segs {ps7/Data/SEG_vdla_0_reg0}]
set_property range 64K [get_bd_addr_segs {ps7/Data/SEG_vdla_0_reg0}]
assign_bd_address
validate_bd_design
save_bd_design

set bd_file [get_files vdla.bd]
make_wrapper -files $bd_file -top
add_files -norecurse [file join $out_dir project vdla_$BOARD.gen sources_1 bd vdla hdl vdla_wrapper.v]
set_property top vdla_wrapper [current_fileset]
update_compile_order -fileset sources_1

# ---- 3. synthesis, implementation, bitstream --------------------------------------------------------------
launch_runs synth_1 -jobs 4
wait_on_run synth_1
if {[get_property PROGRESS [get_runs synth_1]] ne "100%"} { puts "synthesis failed"; exit 1 }
launch_runs impl_1 -to_step write_bitstream -jobs 4
wait_on_run impl_1
if {[get_property PROGRESS [get_runs impl_1]] ne "100%"} { puts "implementation failed"; exit 1 }

open_run impl_1
report_timing_summary -file [file join $out_dir timing_summary.rpt]
report_utilization -file [file join $out_dir utilization.rpt]

# pynq.Overlay loads <name>.bit with its <name>.hwh beside it.
set impl_dir [get_property DIRECTORY [get_runs impl_1]]
file copy -force [file join $impl_dir vdla_wrapper.bit] [file join $out_dir vdla.bit]
file copy -force [file join $out_dir project vdla_$BOARD.gen sources_1 bd vdla hw_handoff vdla.hwh] [file join $out_dir vdla.hwh]
puts "wrote [file join $out_dir vdla.bit] and [file join $out_dir vdla.hwh]"
