# The overlay build of one board directory (its board.tcl), included by hw/fpga/<board>/Makefile:
#   make -C hw/fpga/<board> [CONFIG=pynq] [PYTHON=/path/to/python-with-vdla]
# Outputs: out/vdla.bit, out/vdla.hwh (copy both to the board), out/timing_summary.rpt, out/utilization.rpt.
#   make -C hw/fpga/<board> check
# runs the same flow without Vivado (tclsh from Debian's tcl package): every Tcl file parsed, the build run with
# Vivado's commands stubbed and logged to out/dryrun.log (../common/dryrun.tcl); `make check-fpga` at the top
# also checks the log against the RTL's ports, the configuration and the driver.
CONFIG ?= pynq
PYTHON ?= $(abspath ../../../.venv/bin/python)
VIVADO ?= vivado
OUT := out

FCLK_MHZ = $$(cd ../../.. && $(PYTHON) -c "from vdla.config import load_config; print(load_config('$(CONFIG)').clock_mhz)")

.PHONY: all check clean
all: $(OUT)/vdla.bit

$(OUT)/vdla_pkg.sv:
	mkdir -p $(OUT)
	cd ../../.. && $(PYTHON) -m vdla.cli gen-rtl --config $(CONFIG) -o $(CURDIR)/$(OUT)/vdla_pkg.sv

$(OUT)/vdla.bit: $(OUT)/vdla_pkg.sv board.tcl ../common/build.tcl $(wildcard ../../rtl/*.sv)
	$(VIVADO) -mode batch -nojournal -log $(OUT)/vivado.log -source ../common/build.tcl \
		-tclargs board.tcl $(OUT)/vdla_pkg.sv $(OUT) $(FCLK_MHZ)

check: $(OUT)/vdla_pkg.sv
	VDLA_TCL_FILES="board.tcl ../common/build.tcl" tclsh ../common/dryrun.tcl $(OUT)/dryrun.log \
		../common/build.tcl board.tcl $(OUT)/vdla_pkg.sv $(OUT)/dryrun $(FCLK_MHZ)

clean:
	rm -rf $(OUT) .Xil
