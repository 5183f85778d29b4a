"""ResNet-18 end to end (issue 12): accelerator cycles of one 224x224 inference against the compute bound.

Builds the seeded ResNet-18, quantizes it with vdla's calibration (entropy thresholds, 8 seeded images),
compiles it for each config and runs one inference on each backend, checked bit-exact against the vdla CPU
reference of the same quantized graph. Prints the per-step table and writes the figures:

    python benchmarks/resnet18_e2e.py [--config pynq --config osdi18] [--backend sim --backend rtl] --json out.json

One run writes ``{"backend", "cycles", "compute_bound_cycles", "ratio", "latency_ms", "accel_mac_share",
"cpu_ms", "layers", "correct", ...}``; several runs write a list of such records. Targets (pynq, sim):
cycles <= 1.10x the compute bound, rtl within 1% of sim, >= 99.9% of MACs on the accelerator, the RTL run
under 30 s and the simulator under 5 s of wall time.
"""

from __future__ import annotations

import sys

from vdla.cli import main

if __name__ == "__main__":
    sys.exit(main(["e2e", *sys.argv[1:]]))
