"""The ``pynq`` preset with every optional unit built, for the tests of those units.

The ``pynq`` preset is the build that fits the xc7z020 within Xilinx's timing-closure budget
(``benchmarks/fit/``): it leaves out the depthwise mode, the OUT-path multiplier and the GEMMs' input from OUT
(``src_out``), has a half-width ALU (``alu_lanes``) and a smaller WGT buffer. ``FULL`` is the same configuration
with all of them, a lane of the ALU per accumulator lane and the 256 KiB WGT buffer (the design before the budget):
the tests of those units run there, and the tests that compare both builds run on each.
"""

from __future__ import annotations

from vdla.zoo.random_programs import pynq_full

FULL = pynq_full()  # defined in the zoo: the campaign (vdla fuzz --config pynq-full) runs it too
BOTH = ("pynq", FULL)  # the fitted build and the full one
