# The overlay build of one board directory (its board.tcl), included by hw/fpga/<board>/Makefile:
#   make -C hw/fpga/<board> [CONFIG=pynq] [PYTHON=/path/to/python-with-vdla]
# Outputs: out/vdla.bit, out/vdla.hwh (copy both to the board), out/timing_summary.rpt, out/utilization.rpt.
CONFIG ?= pynq
PYTHON ?= $(abspath ../../../.venv/bin/python)
VIVADO ?= vivado
OUT := out

.PHONY: all clean
all: $(OUT)/vdla.bit

$(OUT)/vdla_pkg.sv:
	mkdir -p $(OUT)
	cd ../../.. && $(PYTHON) -m vdla.cli gen-rtl --config $(CONFIG) -o $(CURDIR)/$(OUT)/vdla_pkg.sv

$(OUT)/vdla.bit: $(OUT)/vdla_pkg.sv board.tcl ../common/build.tcl $(wildcard ../../rtl/*.sv)
	$(VIVADO) -mode batch -nojournal -log $(OUT)/vivado.log -source ../common/build.tcl \
		-tclargs board.tcl $(OUT)/vdla_pkg.sv $(OUT) \
		$$(cd ../../.. && $(PYTHON) -c "from vdla.config import load_config; print(load_config('$(CONFIG)').clock_mhz)")

clean:
	rm -rf $(OUT) .Xil
