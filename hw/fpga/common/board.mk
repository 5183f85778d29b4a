# The overlay build of one board directory (its board.tcl), included by hw/fpga/<board>/Makefile, which sets
# CONFIG to the board's preset:
#   make -C hw/fpga/<board> [CONFIG=<preset or JSON file>] [BOARD=<one of board.tcl's BOARDS>] [PYTHON=...]
# Outputs: out/vdla.bit, out/vdla.hwh (copy both to the board), out/timing_summary.rpt, out/utilization.rpt.
#   make -C hw/fpga/<board> check
# runs the same flow without Vivado (tclsh from Debian's tcl package): every Tcl file parsed, the build run with
# Vivado's commands stubbed and logged to out/dryrun.log (../common/dryrun.tcl); `make check-fpga` at the top
# also checks the log against the RTL's ports, the configuration and the driver.
#
# Every value the configuration owns (part, clock, bus width, address bits, register window) reaches the flow
# through the files vdla writes from it: out/vdla_pkg.sv (the RTL's package) and out/vdla_config.tcl (the
# Vivado parameters), both rewritten on every run (an unchanged file keeps its time stamp).
CONFIG ?= pynq-z2
BOARD ?=
PYTHON ?= $(abspath ../../../.venv/bin/python)
VIVADO ?= vivado
OUT := out

.PHONY: all check clean FORCE
all: $(OUT)/vdla.bit

$(OUT)/vdla_pkg.sv: FORCE
	mkdir -p $(OUT)
	cd ../../.. && $(PYTHON) -m vdla.cli gen-rtl --config $(CONFIG) -o $(CURDIR)/$(OUT)/vdla_pkg.sv

$(OUT)/vdla_config.tcl: FORCE
	mkdir -p $(OUT)
	cd ../../.. && $(PYTHON) -m vdla.cli gen-rtl --config $(CONFIG) --tcl $(CURDIR)/$(OUT)/vdla_config.tcl

$(OUT)/vdla.bit: $(OUT)/vdla_pkg.sv $(OUT)/vdla_config.tcl board.tcl $(wildcard ../common/*.tcl) $(wildcard ../../rtl/*.sv)
	$(VIVADO) -mode batch -nojournal -log $(OUT)/vivado.log -source ../common/build.tcl \
		-tclargs board.tcl $(OUT)/vdla_pkg.sv $(OUT)/vdla_config.tcl $(OUT) $(BOARD)

check: $(OUT)/vdla_pkg.sv $(OUT)/vdla_config.tcl
	VDLA_TCL_FILES="board.tcl $(wildcard ../common/*.tcl)" tclsh ../common/dryrun.tcl $(OUT)/dryrun.log \
		../common/build.tcl board.tcl $(OUT)/vdla_pkg.sv $(OUT)/vdla_config.tcl $(OUT)/dryrun $(BOARD)

clean:
	rm -rf $(OUT) .Xil
