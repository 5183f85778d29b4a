"""The experiments on the ``vdla`` command line: ``vdla layers``, ``vdla roofline``, ``vdla e2e``,
``vdla cycle-agreement``, ``vdla fuzz`` and ``vdla cpu-bench``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from vdla.compiler.cache import ScheduleCache
from vdla.config import DEFAULT_PRESET, load_config, preset_names
from vdla.experiments.layers import LayerRecord, roofline, run_model, write_json
from vdla.zoo.resnet import MODELS

console = Console(width=None if sys.stdout.isatty() else 150)


def _vthreads(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--vthreads takes a positive integer or 'auto', got {text!r}") from None


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"takes a positive integer, got {text!r}")
    return n


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    p.add_argument("--config", default=DEFAULT_PRESET, help=f"preset ({', '.join(preset_names())}) or JSON file")
    p.add_argument("--backend", default="sim", help="sim or rtl")
    p.add_argument("--layers", nargs="+", metavar="NAME", help="run only these layers (e.g. C1 C12)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random data and weights")
    p.add_argument("--no-cache", action="store_true", help="search every schedule again (nothing is cached)")


@contextmanager
def _progress(total: int) -> Iterator:
    """A transient progress bar; yields the callback the experiments call before each layer run."""
    with Progress(
        TextColumn("{task.description:<32}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as prog:
        task = prog.add_task("compiling", total=total)
        started = []

        def tick(what: str, done: int | None = None) -> None:
            """Before the next item (or, with ``done``, at ``done`` items complete)."""
            prog.update(task, description=what, completed=len(started) if done is None else done)
            if done is None:
                started.append(what)

        yield tick


def layer_table(records: list[LayerRecord], title: str) -> Table:
    """The layer table: MACs, cycles, GEMM utilization, GOPS, DRAM bytes, intensity, correctness."""
    t = Table(title=title)
    for col in ("layer", "schedule", "MACs", "cycles", "GEMM util", "GOPS", "DRAM bytes", "ops/byte", "correct"):
        t.add_column(col, justify="left" if col in ("layer", "schedule") else "right")
    for r in records:
        t.add_row(
            r.name,
            r.schedule,
            f"{r.macs:,}",
            f"{r.cycles:,}",
            f"{r.utilization:.1%}",
            f"{r.gops:.2f}",
            f"{r.dram_bytes:,}",
            f"{r.intensity:.1f}",
            "[green]yes[/]" if r.correct else "[red]NO[/]",
        )
    return t


def cmd_layers(args: argparse.Namespace) -> int:
    """`vdla layers`: the layer table (exit status 1 if any layer is wrong)."""
    cfg = load_config(args.config)
    cache = None if args.no_cache else ScheduleCache()
    with _progress(len(args.layers or MODELS[args.model])) as tick:
        records = run_model(args.model, cfg, args.backend, args.vthreads, cache, args.seed, args.layers, tick)
    console.print(
        layer_table(
            records, f"{args.model} conv layers, config '{cfg.name}', backend {args.backend}, vthreads {args.vthreads}"
        )
    )
    compile_s = sum(r.compile_seconds for r in records)
    search_s = sum(r.search_seconds for r in records)
    console.print(
        f"compile time {compile_s:.2f} s (schedule search {search_s:.2f} s; cached schedules cost none); "
        f"peak {cfg.peak_gops:g} GOPS, ridge {cfg.ridge_intensity:g} ops/byte"
    )
    if args.json:
        write_json(
            records,
            args.json,
            backend=args.backend,
            model=args.model,
            vthreads=str(args.vthreads),
            compile_seconds=round(compile_s, 3),
            search_seconds=round(search_s, 3),
        )
        console.print(f"wrote {args.json}")
    return 0 if all(r.correct for r in records) else 1


def cmd_roofline(args: argparse.Namespace) -> int:
    """`vdla roofline`: latency hiding off vs on, roofline.csv and roofline.png."""
    cfg = load_config(args.config)
    cache = None if args.no_cache else ScheduleCache()
    with _progress(2 * len(args.layers or MODELS[args.model])) as tick:
        result = roofline(args.out, args.model, cfg, args.backend, cache, args.seed, args.layers, tick)
    t = Table(title=f"latency hiding on config '{cfg.name}' (backend {args.backend})")
    for col in ("layer", "util off", "util on", "GOPS off", "GOPS on", "speed-up", "ops/byte on", "correct"):
        t.add_column(col, justify="left" if col == "layer" else "right")
    for a, b in zip(result.off, result.on):
        t.add_row(
            a.name,
            f"{a.utilization:.1%}",
            f"{b.utilization:.1%}",
            f"{a.gops:.2f}",
            f"{b.gops:.2f}",
            f"{a.cycles / b.cycles:.2f}x",
            f"{b.intensity:.1f}",
            "[green]yes[/]" if a.correct and b.correct else "[red]NO[/]",
        )
    console.print(t)
    console.print(f"wrote {result.csv} and {result.png}")
    return 0 if all(r.correct for r in result.off + result.on) else 1


def e2e_table(result) -> Table:
    """The end-to-end table: each step's cycles, GEMM utilization, real-MAC efficiency and where it ran."""
    t = Table(
        title=f"{result.model} end to end, config '{result.config}', backend {result.backend}, {result.scales} scales"
    )
    for col in ("step", "op", "where", "MACs", "cycles", "GEMM util", "MAC eff.", "fill/drain", "CPU ms", "note"):
        t.add_column(col, justify="left" if col in ("step", "op", "where", "note") else "right")
    for r in result.layers:
        accel = r.where == "accel"
        t.add_row(
            r.name,
            r.op,
            r.where,
            f"{r.macs:,}" if r.macs else "",
            f"{r.cycles:,}" if accel else "",
            f"{r.utilization:.1%}" if accel else "",
            f"{r.mac_efficiency:.1%}" if accel and r.macs else "",
            f"{r.idle_head:,}/{r.idle_tail:,}" if accel and r.idle_head is not None else "",
            "" if accel else f"{r.cpu_ms:.2f}",
            r.note,
        )
    return t


def e2e_summary(result) -> str:
    """Latency, compute bound and ratio in one paragraph."""
    ok = "[green]bit-exact[/]" if result.correct else "[red]WRONG[/]"
    idle = result.idle_between_layers
    fill = "" if idle is None else f"fill and drain between layers {idle:,} cycles ({idle / result.cycles:.1%})"
    if idle is not None and result.separate:
        alone = result.separate
        fill += (
            f", {alone['idle_between_layers']:,} with the layers run one at a time "
            f"({alone['cycles']:,} cycles, joined streams save {alone['cycles'] - result.cycles:,})"
        )
    fill += "; " if fill else ""
    return (
        f"accelerator {result.cycles:,} cycles = {result.latency_ms:.2f} ms at {result.clock_mhz:g} MHz; "
        f"compute bound {result.compute_bound_cycles:,} cycles; ratio {result.ratio:.3f}x; "
        f"CPU steps {result.cpu_ms:.2f} ms; {result.accel_mac_share:.2%} of MACs on the accelerator; {fill}"
        f"outputs {ok} against the CPU reference; run {result.wall_s:.2f} s wall "
        f"(quantize {result.quantize_s:.1f} s, compile {result.compile_s:.1f} s)"
    )


def cmd_e2e(args: argparse.Namespace) -> int:
    """`vdla e2e`: ResNet-18 quantized, compiled and run end to end (exit status 1 if not bit-exact)."""
    from vdla.experiments.e2e import prepare, run_e2e

    cache = None if args.no_cache else ScheduleCache()
    results = []
    for config in args.config or [DEFAULT_PRESET]:
        with console.status(f"preparing ResNet-18 for '{config}'") as status:
            prep = prepare(config, args.calib, args.seed, cache, log=status.update, power_of_two=args.power_of_two)
        for backend in args.backend or ["sim"]:
            steps = len(prep.artifact.steps)
            with _progress(steps) as tick:
                result = run_e2e(
                    prep, backend, progress=lambda done, total, name: tick(name, done), overlap=not args.no_overlap
                )
            console.print(e2e_table(result))
            console.print(e2e_summary(result))
            results.append(result)
    if args.json:
        records = [r.to_dict() for r in results]
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(records[0] if len(records) == 1 else records, indent=2) + "\n")
        console.print(f"wrote {args.json}")
    return 0 if all(r.correct for r in results) else 1


def cmd_cycle_agreement(args: argparse.Namespace) -> int:
    from vdla.experiments.cycle_agreement import board_preset_names, cycle_agreement, cycle_agreement_table, worst_table

    configs = (args.config or []) + (board_preset_names() if args.boards else [])
    records = [r for c in dict.fromkeys(configs or [DEFAULT_PRESET]) for r in cycle_agreement(c)]
    print(cycle_agreement_table(records) + "\n" + worst_table(records), end="")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2) + "\n")
    return 0


def _fuzz_configs(names: list[str] | None) -> list[str]:
    """The configurations of ``vdla fuzz --config`` ("all": every one the campaign knows), each once however named
    (an unknown name is refused here, before anything is built)."""
    from vdla.zoo.random_programs import campaign_config, campaign_configs

    out: dict[str, str] = {}
    for name in names or [DEFAULT_PRESET]:
        for n in campaign_configs() if name == "all" else [name]:
            out.setdefault(campaign_config(n).name, n)
    return list(out.values())


def fuzz_table(summary) -> Table:
    """The campaign's summary: per configuration, programs, matches, findings, failures and cycles."""
    t = Table(title=f"vdla fuzz: {summary.programs:,} programs, simulator against RTL")
    for col in ("config", "programs", "match", "mismatch", "error", "failed", "cycles sim/rtl", "worst gap"):
        t.add_column(col, justify="left" if col == "config" else "right")
    for name, r in summary.tallies.items():
        ratio = f"{r.cycles_sim / r.cycles_rtl:.4f}" if r.cycles_rtl else "-"
        t.add_row(
            name,
            f"{r.programs:,}",
            f"{r.matches:,}",
            f"[red]{r.mismatches}[/]" if r.mismatches else "0",
            f"[red]{r.errors}[/]" if r.errors else "0",
            f"[red]{r.failures}[/]" if r.failures else "0",
            ratio,
            f"{r.max_cycle_gap:.1%}",
        )
    t.caption = "cycles sim/rtl: summed cycles of the simulator's model over the RTL's; worst gap: one program's"
    return t


def cmd_fuzz(args: argparse.Namespace) -> int:
    """`vdla fuzz`: random programs on the simulator and the RTL, DRAM compared (exit status 1 on any finding)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    from vdla.experiments.fuzz import run_campaign

    configs = _fuzz_configs(args.config)
    total = args.programs * len(configs)

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.completed / task.elapsed:.1f} programs/s" if task.elapsed else "")

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("mismatches {task.fields[bad]}, failures {task.fields[failed]}"),
        Rate(),
        TimeElapsedColumn(),
        console=console,
        transient=not sys.stdout.isatty(),
    ) as prog:
        task = prog.add_task("building the RTL", total=total, bad=0, failed=0)
        counts = {"bad": 0, "failed": 0}

        def on_result(key: str, result, error: str | None) -> None:
            if error is not None:
                counts["failed"] += 1
                prog.console.print(f"[red]failed[/] {key}: {error.splitlines()[-1] if error else ''}")
            elif not result.ok:
                counts["bad"] += 1
                prog.console.print(f"[red]finding[/] {result.describe()}")
            prog.update(task, advance=1, description="fuzzing", **counts)

        summary = run_campaign(
            configs, args.programs, args.seed, args.workers, args.ray, args.out, on_result, timeout=args.timeout
        )
    console.print(fuzz_table(summary))
    rate = summary.programs / summary.seconds if summary.seconds else 0.0
    workers = args.workers or "one per core"
    verdict = "[green]no mismatches[/]" if summary.clean else f"[red]{len(summary.findings)} findings[/]"
    console.print(
        f"{summary.programs:,} programs in {summary.seconds:.1f} s ({rate:.1f} programs/s, workers: {workers}; "
        f"seeds {args.seed}..{args.seed + args.programs - 1}): {verdict}"
        + (f", {len(summary.failures)} failed tasks" if summary.failures else "")
    )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
        console.print(
            f"wrote {out / 'summary.json'}" + (f" and {len(summary.findings)} cases" if summary.findings else "")
        )
    return 0 if summary.clean else 1


def cmd_cpu_bench(args: argparse.Namespace) -> int:
    from vdla.experiments import cpu_bench

    return cpu_bench.main_from_args(args)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the experiments (``layers``, ``roofline``, ``e2e``, ``cycle-agreement``, ``fuzz``, ``cpu-bench``) on
    the ``vdla`` command line."""
    p = subparsers.add_parser("layers", help="run a model's conv layers on the accelerator, checked against numpy")
    _common(p)
    p.add_argument("--vthreads", type=_vthreads, default="auto", help="virtual threads: a number or auto (searched)")
    p.add_argument("--json", help="write one record per layer to this JSON file")
    p.set_defaults(func=cmd_layers)

    p = subparsers.add_parser("roofline", help="latency hiding off vs on for every layer: roofline.csv and .png")
    _common(p)
    p.add_argument("--out", default="out", help="output directory (default: out)")
    p.set_defaults(func=cmd_roofline)

    p = subparsers.add_parser("e2e", help="ResNet-18 end to end: quantize, compile, run, check; cycles vs the bound")
    p.add_argument("--config", action="append", help="preset or JSON file (repeatable; default pynq)")
    p.add_argument("--backend", action="append", choices=("sim", "rtl"), help="repeatable; default sim")
    p.add_argument("--calib", type=int, default=8, help="seeded calibration images (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and images")
    p.add_argument(
        "--power-of-two",
        action="store_true",
        help="quantize with power-of-two scales (VTA's scheme: free requantization)",
    )
    p.add_argument("--no-cache", action="store_true", help="search every schedule again (nothing is cached)")
    p.add_argument(
        "--no-overlap", action="store_true", help="run the layers one at a time (no joined streams, full drains)"
    )
    p.add_argument("--json", help="write the figures as JSON (one record, or a list for several runs)")
    p.set_defaults(func=cmd_e2e)

    p = subparsers.add_parser(
        "cycle-agreement", help="compare the simulator's cycle model with the RTL on the suite of workload programs"
    )
    p.add_argument("--config", action="append", help=f"preset or JSON file (repeatable; default {DEFAULT_PRESET})")
    p.add_argument("--boards", action="store_true", help="every board preset (one Verilator build each)")
    p.add_argument("--json", help="write the records as JSON")
    p.set_defaults(func=cmd_cycle_agreement)

    p = subparsers.add_parser(
        "fuzz",
        help="random programs over the whole ISA on the simulator and the RTL, their DRAM compared "
        "(exit 1 on any mismatch); each program a task of the sweep executor",
    )
    p.add_argument("--programs", type=_positive, default=100, help="programs per configuration (default 100)")
    p.add_argument(
        "--config",
        action="append",
        metavar="NAME",
        help=f"preset, JSON file, pynq-full, or all (repeatable; default {DEFAULT_PRESET})",
    )
    p.add_argument("--seed", type=int, default=0, help="the first program's seed (default 0)")
    p.add_argument("--workers", type=_positive, help="processes (default: one per core; on Ray, the cluster's CPUs)")
    p.add_argument("--ray", metavar="ADDR", help="run each program as a Ray task on this cluster (or 'auto')")
    p.add_argument("--out", metavar="DIR", help="save each mismatching case, and summary.json, here")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a program may take (default 600)")
    p.set_defaults(func=cmd_fuzz)

    p = subparsers.add_parser("cpu-bench", help="benchmark the LLVM-JIT CPU fallback kernels against numpy")
    try:
        from vdla.experiments import cpu_bench
    except ImportError:  # no llvmlite (a board): every other command works; this one says what is missing
        p.set_defaults(func=cmd_cpu_bench)
        return
    cpu_bench.add_arguments(p)
    p.set_defaults(func=cmd_cpu_bench)
