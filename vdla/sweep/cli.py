"""``vdla sweep SPEC.toml``: the design-space exploration on the command line, with rich progress (points done
and running, time left, failures), the table with each model's Pareto front marked and the files written."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(width=None if sys.stdout.isatty() else 160)
METHODS = ("grid", "random", "nsga2")  # vdla.sweep.spec.METHODS, not imported here: the parser stays light (a test)


def cmd_sweep(args: argparse.Namespace) -> int:
    from vdla.sweep.report import table
    from vdla.sweep.runner import run
    from vdla.sweep.spec import load_spec

    spec = load_spec(args.spec)  # refused here, naming the key, before any work
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[running]} running, {task.fields[failed]} failed"),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=args.quiet,
    ) as prog:
        task = prog.add_task("points", total=None, running=0, failed=0)

        def progress(ev: dict) -> None:
            prog.update(task, total=ev["total"], completed=ev["done"], running=ev["running"], failed=ev["failed"])
            rec = ev["record"]
            if rec is not None and rec.get("status") == "failed":
                prog.console.print(f"[red]point {rec['hash'][:8]} failed:[/] {rec['error'].splitlines()[0]}")

        result = run(
            spec,
            args.out,
            workers=args.workers,
            ray=args.ray,
            method=args.search,
            samples=args.samples,
            limit=args.limit,
            progress=progress,
        )
    if not args.quiet:
        console.print(table(result.records, result.spec, result.report))
    s = result.report
    by = {r["hash"]: r for r in result.records}
    for m, h in s.get("best", {}).items():
        if h:
            r = by[h]
            console.print(f"fastest {m} within the budget ({s['resources']}): {r['models'][m]['latency_ms']:.3f} ms "
                          f"at {_point(r)}")  # fmt: skip
    console.print(
        f"{len(result.records)} points ({', '.join(f'{n} {k}' for k, n in s.get('counts', {}).items() if n)}): "
        f"{result.evaluated} evaluated now, {result.reused} from {result.files['results']}; {result.seconds:.0f} s"
    )
    console.print("wrote " + ", ".join(str(p) for p in result.files.values()))
    return 1 if s.get("counts", {}).get("failed") else 0


def _point(r: dict) -> str:
    p = r.get("params") or {}
    return ", ".join(f"{k}={v}" for k, v in p.items()) or f"the base preset ({r['hash'][:8]})"


def add_commands(sub) -> None:
    p = sub.add_parser("sweep", help="design-space exploration: a space of configurations, models on each, Pareto")
    p.add_argument("spec", help="the sweep's TOML spec (docs/sweep.md)")
    p.add_argument("--out", default="sweep-out", help="directory of sweep.jsonl, sweep.csv and the plots")
    p.add_argument("--search", choices=METHODS, help="override the spec's search.method")
    p.add_argument("--samples", type=int, help="override search.samples (random, nsga2: how many points)")
    p.add_argument("--workers", type=int, help="tasks at once (default: one per core; on Ray, the cluster's CPUs)")
    p.add_argument("--ray", metavar="auto|ADDRESS", help="run each point as a Ray task on this existing cluster")
    p.add_argument("--limit", type=int, help="evaluate at most this many new points now (the rest on a later run)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no table")
    p.set_defaults(func=cmd_sweep)
