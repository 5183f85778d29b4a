"""Cycle agreement of the simulator's cycle model with the RTL.

Runs the suite of vdla.zoo.workloads (GEMM-, load-, store- and ALU-bound programs and a padded
convolution, each with 1 and 2 virtual threads) on both backends and reports RTL cycles, model cycles and
the signed error (model - rtl) / rtl. Targets: |error| <= 5% everywhere, <= 2% on the GEMM-bound programs.

    python benchmarks/cycle_agreement.py --json out.json [--markdown table.md] [--config pynq]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vdla.config import DEFAULT_PRESET
from vdla.experiments.cycle_agreement import cycle_agreement, cycle_agreement_table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=DEFAULT_PRESET)
    p.add_argument("--json", help="write the records as a JSON list")
    p.add_argument("--markdown", help="write the table as Markdown")
    args = p.parse_args(argv)
    records = cycle_agreement(args.config)
    table = cycle_agreement_table(records)
    print(table, end="")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    worst = max(abs(r["error"]) for r in records)
    worst_gemm = max(abs(r["error"]) for r in records if r["kind"] == "gemm")
    met = worst <= 0.05 and worst_gemm <= 0.02
    print(
        f"worst error {worst:.2%} (target 5%), GEMM-bound {worst_gemm:.2%} (target 2%): {'met' if met else 'NOT met'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
