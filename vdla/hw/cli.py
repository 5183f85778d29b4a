"""``vdla`` sub-commands of the chip-design tools: generate the RTL's package, report the fit.

``vdla/cli.py`` registers them with :func:`add_commands`. (The lint gate has no sub-command: ``make lint`` runs
``python -m vdla.hw.lint``.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vdla.config import DEFAULT_PRESET


def cmd_gen_rtl(args: argparse.Namespace) -> int:
    from vdla.hw.fpga import write_tcl_params
    from vdla.hw.rtlgen import generate

    paths = generate(args.config, args.output) if args.output or not args.tcl else []
    if args.tcl:
        paths.append(write_tcl_params(args.config or DEFAULT_PRESET, args.tcl))
    for path in paths:
        print(f"wrote {path}")
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from vdla.hw.fit import fit_table, run_fit
    from vdla.hw.toolchain import TOP

    report = run_fit(args.config, workdir=args.workdir, top=args.module or TOP)
    print(fit_table(report, units=args.units), end="")
    if args.path:
        lv = report["logic_levels"]
        print("Deepest path:", lv["start"], *lv["path"], sep="\n  ")
        over = [(u, n) for u, n in lv["by_unit"].items() if n > lv["target"]]
        for u, n in over:
            ends = lv["by_unit_ends"][u]
            print(f"{u}, {n} levels: from `{ends['start']}` to `{ends['end']}`")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["budget"]["within"] and report["logic_levels"]["meets_target"] else 1


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``gen-rtl`` and ``fit``."""
    p = subparsers.add_parser(
        "gen-rtl", help="generate every RTL artefact (hw/rtl/vdla_pkg.sv, docs/registers.md) from the Python sources"
    )
    p.add_argument("--config", help="with -o: the preset (or JSON file) whose package to write")
    p.add_argument("-o", "--output", help="write only the package of --config to this file")
    p.add_argument("--tcl", help="write the Vivado flow's parameters of --config (hw/fpga) to this file")
    p.set_defaults(func=cmd_gen_rtl)

    p = subparsers.add_parser(
        "fit",
        help="synthesize a preset for its part with Yosys: resources against the part's budget, LUT levels, "
        "per-unit costs (exit 1 when over the budget)",
    )
    p.add_argument("--config", default=DEFAULT_PRESET, help="preset or JSON file")
    p.add_argument("--json", help="write the report as JSON (benchmarks/fit/NAME.json: the committed fit)")
    p.add_argument(
        "--module",
        help="synthesize one module (e.g. vdla_acc_rmw) with its submodules: its depth in a minute or less",
    )
    p.add_argument(
        "--path",
        action="store_true",
        help="print the deepest path's cells, and where each unit's deepest path over the budget starts and ends",
    )
    p.add_argument("--units", type=int, default=12, help="units shown in the per-unit table (most LUTs first)")
    p.add_argument("--workdir", help="keep Yosys' files (script, log, netlist.json) in this folder")
    p.set_defaults(func=cmd_fit)
