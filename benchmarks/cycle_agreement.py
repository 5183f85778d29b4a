"""Cycle agreement of the simulator's cycle model with the RTL, per preset.

Runs the suite of vdla.zoo.workloads (GEMM-, load-, store- and ALU-bound programs and a padded
convolution, each with 1 and 2 virtual threads) on both backends of each preset and reports RTL cycles, model
cycles and the signed error (model - rtl) / rtl, then each preset's worst program. Target: |error| <= 1% on
every program of every preset.

    python benchmarks/cycle_agreement.py --json out.json [--markdown table.md] [--config pynq ...] [--boards]

``--boards`` measures every board preset (pynq-z2, aup-zu3, kv260, zcu104: one Verilator build each).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vdla.config import DEFAULT_PRESET
from vdla.experiments.cycle_agreement import (
    board_preset_names,
    cycle_agreement,
    cycle_agreement_table,
    worst_by_preset,
    worst_table,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", help=f"preset or JSON file (repeatable; default {DEFAULT_PRESET})")
    p.add_argument("--boards", action="store_true", help="every board preset")
    p.add_argument("--json", help="write the records as a JSON list")
    p.add_argument("--markdown", help="write the tables as Markdown")
    args = p.parse_args(argv)
    configs = (args.config or []) + (board_preset_names() if args.boards else [])
    records = [r for c in dict.fromkeys(configs or [DEFAULT_PRESET]) for r in cycle_agreement(c)]
    table = cycle_agreement_table(records) + "\n" + worst_table(records)
    print(table, end="")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    worst = worst_by_preset(records)
    met = all(abs(w["error"]) <= 0.01 for w in worst.values())
    for cfg, w in worst.items():
        print(f"{cfg}: worst error {abs(w['error']):.2%} ({w['program']}; target 1%), GEMM-bound {w['gemm_error']:.2%}")
    print("targets met on every preset" if met else "targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
