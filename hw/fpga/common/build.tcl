# Vivado batch flow for the vdla accelerator on a Zynq board (Zynq-7000 or Zynq UltraScale+): package the RTL as
# an IP, build the block design, synthesize, implement, and write the .bit and .hwh that pynq.Overlay loads.
#
#   vivado -mode batch -source ../common/build.tcl -tclargs <board.tcl> <vdla_pkg.sv> <vdla_config.tcl> <out_dir> [<board>]
#
# <vdla_pkg.sv> and <vdla_config.tcl> are the configuration's generated package and Vivado parameters
# (`vdla gen-rtl --config <preset> -o <vdla_pkg.sv> --tcl <vdla_config.tcl>`, which board.mk runs): the part
# (PART, PART_NAME), the processing system (PS: ps7 or ps8), the fabric clock (FCLK_MHZ), the HP port's width
# (BUS_WIDTH), the AXI address bits and the register window (REG_BASE_ADDR, REG_RANGE: the driver's,
# vdla/runtime/pynq_backend.py). Nothing here or in a board directory repeats them. <board.tcl> names the boards
# of its directory (BOARDS: a dict of board -> {board_part <Vivado board part> [package <part>]
# [connections <board_connections>]}); <board> picks one (default: the first). A board's package replaces PART
# when the board carries another package or speed grade of the same part (PART_NAME).
#
# common/bd_$PS.tcl builds the block design: the PS with its board preset, the accelerator's AXI4-Lite slave on
# the PS's general-purpose master at REG_BASE_ADDR, its AXI4 master on an HP port over all of DDR, the fabric
# clock at FCLK_MHZ, the accelerator's reset from a Processor System Reset driven by the PS's PL reset (the
# driver's recovery after a timeout), its irq to the PS.

if {[llength $argv] < 4 || [llength $argv] > 5} {
  puts "usage: vivado -mode batch -source build.tcl -tclargs <board.tcl> <vdla_pkg.sv> <vdla_config.tcl> <out_dir> \[<board>\]"
  exit 2
}
lassign $argv board_tcl pkg_sv config_tcl out_dir board
source $config_tcl
source $board_tcl

if {$board eq ""} { set board [lindex [dict keys $BOARDS] 0] }
if {![dict exists $BOARDS $board]} {
  puts "unknown board '$board' in $board_tcl: its boards are [dict keys $BOARDS]"
  exit 2
}
set board_info [dict get $BOARDS $board]
set BOARD $board
set BOARD_PART [dict get $board_info board_part]
if {[dict exists $board_info package]} {
  set package [dict get $board_info package]
  if {![string match "${PART_NAME}*" $package]} {
    puts "board $board: package $package is not a package of the configuration's part $PART_NAME"
    exit 2
  }
  set PART $package
}

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
# clk_i's reset is rst_ni: the block design drives it from the Processor System Reset of the PS's PL reset
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
if {[dict exists $board_info connections]} {
  set_property board_connections [dict get $board_info connections] [current_project]
}
set_property ip_repo_paths [list $ip_dir] [current_project]
update_ip_catalog
create_bd_design vdla
source [file join $here bd_$PS.tcl]
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
puts "wrote [file join $out_dir vdla.bit] and [file join $out_dir vdla.hwh] for $BOARD ($CONFIG, config hash $CONFIG_HASH)"
