"""The ``vdla`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

try:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
except ImportError as e:  # a board installs the runtime alone
    raise SystemExit("error: the vdla command line needs the 'cli' extra: pip install 'vdla[cli]'") from e

from vdla.config import ADDRESS_KEYS, DEFAULT_PRESET, UNIT_FLAGS, board_presets, load_config, preset_names
from vdla.errors import VdlaError

console = Console()


class UsageError(VdlaError, ValueError):
    """Command-line arguments that do not fit together or do not parse."""


def _write(path: str, data: str | bytes) -> None:
    """Write an output file, creating its folder."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data) if isinstance(data, bytes) else p.write_text(data)


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=DEFAULT_PRESET, help=f"preset ({', '.join(preset_names())}) or JSON file")


def cmd_info(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "derived": cfg.derived(), "part": part_summary(cfg)}, indent=2))
        return 0
    table = Table(title=f"vdla hardware configuration '{cfg.name}'", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for k, v in cfg.to_dict().items():
        if k != "timing":
            table.add_row(k, f"{v:#x}" if k in ADDRESS_KEYS else ", ".join(v) if k == "boards" else str(v))
    for k, v in cfg.derived().items():
        table.add_row(k, str(v), style="cyan")
    for k, v in part_summary(cfg).items():
        table.add_row(k, str(v), style="magenta")
    console.print(table)
    console.print("timing: " + ", ".join(f"{k}={v}" for k, v in cfg.to_dict()["timing"].items()))
    return 0


def part_summary(cfg) -> dict:
    """The part's capacity, the timing-closure budget and the level budget at the config's clock, with the
    committed fit's figures where the checkout has one (``benchmarks/fit/NAME.json``)."""
    from vdla.hw.fit import fit_summary

    part = cfg.part_spec
    out = {
        "part family": f"{part.package} ({part.family}, {part.dsp_name})",
        "capacity": ", ".join(f"{r} {n:,}" for r, n in part.capacity.items()),
        "budget (failfast)": ", ".join(f"{r} {n:,}" for r, n in part.limits().items() if part.capacity[r]),
        "LUT levels at the clock": part.level_budget(cfg.clock_mhz),
    }
    fit = fit_summary(cfg)
    if fit is not None:
        out["fit (Yosys)"] = (
            ", ".join(f"{r} {fit['used'][r]:,.0f} ({share:.0%})" for r, share in fit["share"].items())
            + f"; {'within' if fit['within'] else 'OVER'} budget; {fit['levels']} levels "
            + f"(budget {fit['level_budget']})"
        )
    return out


def cmd_boards(args: argparse.Namespace) -> int:
    from vdla.hw.fit import fit_summary

    rows = []
    for cfg in board_presets():
        fit = fit_summary(cfg)
        rows.append(
            {
                "preset": cfg.name,
                "boards": list(cfg.boards),
                "part": cfg.part,
                "clock_mhz": cfg.clock_mhz,
                "gemm": f"{cfg.batch}x{cfg.block_in}x{cfg.block_out}",
                "bus_bits": cfg.bus_width_bits,
                "peak_gops": round(cfg.peak_gops, 1),
                "units": [u for u in UNIT_FLAGS if getattr(cfg, u)],
                "fit": None if fit is None else {**fit["share"], "within": fit["within"], "levels": fit["levels"]},
                "level_budget": cfg.part_spec.level_budget(cfg.clock_mhz),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    t = Table(title="board presets (vdla info --config NAME for one)")
    for col in ("preset", "boards", "part", "MHz", "GEMM", "bus", "GOPS", "LUT", "DSP", "BRAM", "levels"):
        t.add_column(col, justify="left" if col in ("preset", "boards", "part") else "right", overflow="fold")
    for r in rows:
        fit = r["fit"] or {}
        share = [f"{fit[k]:.0%}" if k in fit else "-" for k in ("LUT", "DSP", "BRAM36")]
        levels = f"{fit['levels']}/{r['level_budget']}" if fit else f"-/{r['level_budget']}"
        t.add_row(
            r["preset"],
            ", ".join(r["boards"]),
            r["part"],
            f"{r['clock_mhz']:.4g}",
            r["gemm"].removeprefix("1x"),
            f"{r['bus_bits']}",
            f"{r['peak_gops']:g}",
            *share,
            levels,
        )
    t.caption = (
        "bus: AXI data bits; GOPS: peak; LUT, DSP, BRAM (36 Kb): the committed Yosys fit's share of the part "
        "(budget 70/80/80%); levels: deepest path / budget at the clock"
    )
    console.print(t)
    return 0


def cmd_asm(args: argparse.Namespace) -> int:
    from vdla.isa import assemble_file, encode_program, validate_program

    cfg = load_config(args.config)
    insns = assemble_file(args.source)
    if not args.no_validate:
        validate_program(insns, cfg, where=args.source)
    out = Path(args.output or Path(args.source).with_suffix(".bin"))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(encode_program(insns))
    tmp.replace(out)
    console.print(f"assembled {len(insns)} instructions -> {out}")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    from vdla.isa import decode_program, disassemble

    sys.stdout.write(disassemble(decode_program(Path(args.binary).read_bytes()), numbered=args.numbered))
    return 0


def counters_table(counters, cfg, title: str) -> Table:
    """A rich table of one run's counters."""
    t = Table(title=title)
    for col in ("stage", "busy", "stall", "idle", "insns"):
        t.add_column(col, justify="right")
    for name in ("load", "compute", "store"):
        s = counters.stage(name)
        t.add_row(name, f"{s.busy:,}", f"{s.stall:,}", f"{s.idle:,}", f"{s.insns:,}")
    t.caption = (
        f"{counters.cycles:,} cycles ({counters.cycles / cfg.clock_mhz:,.1f} us at {cfg.clock_mhz:g} MHz), "
        f"GEMM utilization {counters.utilization:.1%}, {counters.gemm_iters:,} GEMM + "
        f"{counters.alu_iters:,} ALU uop-iterations, {counters.dram_bytes:,} DRAM bytes"
    )
    return t


def _add_backend(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="sim", help="sim (default), rtl or pynq (on a board)")
    p.add_argument("--wave", help="rtl backend: dump an FST waveform of the run to this file")


def _backend_options(args: argparse.Namespace) -> dict:
    if args.wave and args.backend != "rtl":
        raise UsageError("--wave needs --backend rtl")
    return {"wave": args.wave} if args.wave else {}


def cmd_matmul(args: argparse.Namespace) -> int:
    from vdla.runtime import Device, write_chrome_trace
    from vdla.zoo.tiled_matmul import matmul_oracle, tiled_matmul

    dev = Device(args.config, backend=args.backend, **_backend_options(args))
    rng = np.random.default_rng(args.seed)
    m, k, n = args.size
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    res = tiled_matmul(dev, a, b, shift=args.shift, vthreads=args.vthreads, timeline=bool(args.trace))
    correct = bool(np.array_equal(res.out, matmul_oracle(a, b, args.shift)))
    c = res.run.counters
    console.print(
        counters_table(
            c,
            dev.cfg,
            f"int8 matmul {m}x{k}x{n}, {res.tiles} tiles, {args.vthreads} virtual threads, backend {args.backend}",
        )
    )
    console.print(f"result matches numpy: [{'green' if correct else 'red'}]{correct}[/]")
    if args.trace:
        write_chrome_trace(res.run.timeline, args.trace, dev.cfg.clock_mhz)
        console.print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
    if args.json:
        _write(args.json, json.dumps({**c.to_dict(), "correct": correct}, indent=2))
    return 0 if correct else 1


def _split_spec(spec: str, form: str) -> list[str]:
    """Split 'ADDR=FILE' or 'ADDR:NBYTES=FILE' into its parts (the numbers checked to parse with ``int(x, 0)``),
    naming the expected form on error."""
    where, eq, path = spec.partition("=")
    parts = where.split(":") + [path]
    if not eq or len(parts) != form.count(":") + 2:
        raise UsageError(f"expected {form}, got {spec!r}")
    try:
        [int(x, 0) for x in parts[:-1]]
    except ValueError as e:
        raise UsageError(f"expected {form} with integer {form.split('=')[0]}, got {spec!r}") from e
    return parts


def cmd_run(args: argparse.Namespace) -> int:
    from vdla.isa import assemble_file, decode_program
    from vdla.runtime import Device, write_chrome_trace

    path = Path(args.program)
    if path.suffix == ".vdla":
        from vdla.model.cli import run

        return run(args)
    if args.input or args.output or args.profile:
        raise UsageError("--input, --output and --profile are for model artifacts (.vdla)")
    insns = assemble_file(path) if path.suffix == ".s" else decode_program(path.read_bytes())
    dev = Device(args.config, backend=args.backend, **_backend_options(args))
    for spec in args.load:
        addr, file = _split_spec(spec, "ADDR=FILE")
        data = np.load(file) if file.endswith(".npy") else np.fromfile(file, np.uint8)
        dev.dram.reserve(int(addr, 0), data.nbytes).write(data)
    dumps = []
    for spec in args.dump:
        addr, nbytes, file = _split_spec(spec, "ADDR:NBYTES=FILE")
        dumps.append((dev.dram.view(int(addr, 0), int(nbytes, 0)), file))
    res = dev.run_program(insns, max_cycles=args.max_cycles, timeline=bool(args.trace))
    console.print(
        counters_table(res.counters, dev.cfg, f"{path.name}: {len(insns)} instructions, backend {args.backend}")
    )
    for view, file in dumps:
        _write(file, view.tobytes())
    if args.trace:
        write_chrome_trace(res.timeline, args.trace, dev.cfg.clock_mhz)
    if args.json:
        _write(args.json, res.counters.to_json())
    return 0


def cmd_rtl_build(args: argparse.Namespace) -> int:
    from vdla.runtime.rtl.verilate import build

    result = build(load_config(args.config), trace=args.wave, verbose=args.verbose)
    state = "cached" if result.cached else f"built in {result.seconds:.1f} s"
    console.print(f"{result.library} ({state})", soft_wrap=True)  # a path to copy: never broken by rich
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """``vdla doctor [MODEL.vdla]``: the machine, board and artifact checks; exit status 1 on a problem."""
    from vdla.doctor import NOTE, PROBLEM, diagnose

    found = diagnose(
        Path(args.artifact) if args.artifact else None,
        Path(args.overlay) if args.overlay else None,
        args.dram_mib << 20 if args.dram_mib else None,
    )
    if args.json:
        print(json.dumps([f.__dict__ for f in found], indent=1))
    else:
        t = Table(title="vdla doctor")
        for c in ("check", "status", "finding", "fix"):
            t.add_column(c)
        style = {PROBLEM: "[red]problem[/]", NOTE: "[yellow]note[/]"}
        for f in found:
            t.add_row(f.item, style.get(f.status, "[green]ok[/]"), f.detail, f.fix)
        console.print(t)
    problems = sum(f.status == PROBLEM for f in found)
    if not args.json:
        console.print(f"{problems} problem(s)" if problems else "no problems")
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vdla", description="Toolchain for a VDLA/VTA-class accelerator")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="print a hardware configuration and its peaks")
    _add_config(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("boards", help="list the board presets: part, clock, peak GOPS and their committed fits")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_boards)

    p = sub.add_parser("asm", help="assemble a text program into machine code")
    p.add_argument("source")
    p.add_argument("-o", "--output", help="output file (default: SOURCE with .bin)")
    p.add_argument("--no-validate", action="store_true", help="skip whole-program validation")
    _add_config(p)
    p.set_defaults(func=cmd_asm)

    p = sub.add_parser("disasm", help="disassemble machine code")
    p.add_argument("binary")
    p.add_argument("-n", "--numbered", action="store_true", help="number the instructions")
    p.set_defaults(func=cmd_disasm)

    p = sub.add_parser(
        "run", help="run a model artifact (.vdla), or an assembled (.s) or binary program, and report its counters"
    )
    p.add_argument("program", help="MODEL.vdla, PROGRAM.s or PROGRAM.bin")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="[NAME=]FILE.npy",
        help="a model input (or FILE.npz keyed by input name)",
    )
    p.add_argument(
        "--output", metavar="OUT.npz", help="write the model outputs: .npz keyed by output name, or .npy for one output"
    )
    p.add_argument("--profile", metavar="TRACE.json", help="one Perfetto trace of the model run (accelerator and CPU)")
    _add_config(p)
    _add_backend(p)
    p.add_argument(
        "--load",
        action="append",
        default=[],
        metavar="ADDR=FILE",
        help="place a .npy array or raw file in DRAM at a physical address (repeatable)",
    )
    p.add_argument(
        "--dump",
        action="append",
        default=[],
        metavar="ADDR:NBYTES=FILE",
        help="write DRAM bytes to a file after the run (repeatable)",
    )
    p.add_argument("--max-cycles", type=int, help="stop with an error after this many cycles")
    p.add_argument(
        "--no-overlap",
        action="store_true",
        help="model artifacts: run the accelerator layers one at a time, not as joined streams",
    )
    p.add_argument(
        "--cpu-kernels",
        choices=("auto", "native", "jit", "reference"),
        default="auto",
        help="model artifacts: where CPU steps run (auto: the artifact's code for this machine if signed by a trusted "
        "key or --trust-native, else the JIT, else numpy reference kernels; native, jit: that or an error; "
        "reference: numpy)",
    )
    p.add_argument(
        "--allow-reference-kernels",
        action="store_true",
        help="model artifacts: run CPU steps on numpy reference kernels when the artifact's code for this machine "
        "is corrupt or has the wrong hash (refused otherwise)",
    )
    p.add_argument(
        "--trust-native",
        action="store_true",
        help="model artifacts: load the artifact's native CPU code for this run although it is not signed by a "
        "trusted key (vdla trust): its code runs with your rights, so only for an artifact whose author you trust",
    )
    p.add_argument("--trace", help="write a Chrome/Perfetto trace JSON of the run")
    p.add_argument("--json", help="write the counters as JSON")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "doctor", help="check this machine (a board, or any) for running artifacts, and what an artifact needs"
    )
    p.add_argument("artifact", nargs="?", help="a .vdla artifact to check against this machine")
    p.add_argument("--overlay", metavar="vdla.bit", help="the overlay's bitstream (its .hwh beside it)")
    p.add_argument("--dram-mib", type=int, help="the DRAM region the pynq backend allocates (default 64)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("matmul", help="run a tiled int8 matrix multiply and check it against numpy")
    _add_config(p)
    _add_backend(p)
    p.add_argument("--size", type=int, nargs=3, default=(256, 256, 256), metavar=("M", "K", "N"))
    p.add_argument("--vthreads", type=int, default=2)
    p.add_argument("--shift", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", help="write a Chrome/Perfetto trace JSON of the run")
    p.add_argument("--json", help="write the counters as JSON")
    p.set_defaults(func=cmd_matmul)

    p = sub.add_parser("rtl-build", help="build (or find cached) the Verilator model of the RTL (the rtl backend)")
    _add_config(p)
    p.add_argument("--wave", action="store_true", help="the variant that writes FST waveforms")
    p.add_argument("-v", "--verbose", action="store_true", help="show the Verilator and compiler output")
    p.set_defaults(func=cmd_rtl_build)

    from vdla.experiments.cli import add_commands as add_experiment_commands
    from vdla.hw.cli import add_commands as add_hw_commands
    from vdla.model.cli import add_commands as add_model_commands
    from vdla.sweep.cli import add_commands as add_sweep_commands

    add_model_commands(sub)
    add_experiment_commands(sub)
    add_hw_commands(sub)
    add_sweep_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (VdlaError, OSError) as e:  # anything else is a bug: let its traceback show
        # the message as written: not wrapped inside a path, its brackets not read as markup
        console.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
