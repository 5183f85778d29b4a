"""``vdla compile``, ``vdla run MODEL.vdla`` and ``vdla trust``: the model compiler, the executor and the keys
this machine trusts (:mod:`vdla.model.trust`) on the command line.

``vdla/cli.py`` registers :func:`add_commands` and hands ``vdla run`` of a ``.vdla`` file to :func:`run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from vdla.config import DEFAULT_PRESET
from vdla.cpu_fallback.native import HOST, PRESET_TARGETS, TARGETS
from vdla.errors import VdlaError
from vdla.graph.calibrate import DEFAULT_PERCENTILE, METHODS
from vdla.graph.equalize import Equalization
from vdla.untrusted import max_read_bytes, read_arrays

console = Console(width=None if sys.stdout.isatty() else 160)


class ModelCliError(VdlaError, ValueError):
    """A bad model command line argument (named)."""


def _shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    out = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise ModelCliError(f"--input-shape takes NAME=1x3x224x224, got {spec!r}") from None
    return out


def _placement_table(artifact, report) -> Table:
    t = Table(
        title=f"{artifact.meta.get('model', 'model')}: {len(artifact.steps)} steps, config {artifact.config.name!r}"
    )
    for c in ("step", "where", "op", "shape / schedule", "MACs", "note"):
        t.add_column(c, justify="right" if c == "MACs" else "left")
    for s in artifact.steps:
        if s.kind == "accel":
            shape = f"{s.layer['input']} -> {s.layer['output']} k{s.layer['kernel'][0]} s{s.layer['stride'][0]}"
            note = _joined(guard_text(s.when), s.layer.get("note", ""))
            t.add_row(s.name, "[cyan]accel[/]", s.layer["op"], f"{shape}  {s.layer['schedule']}", f"{s.macs:,}", note)
        else:
            ops = sorted({n.op for n in s.graph.nodes})
            t.add_row(s.name, "[yellow]cpu[/]", "+".join(ops), "", f"{s.macs:,}", _joined(guard_text(s.when), s.note))
    return t


def guard_text(when) -> str:
    """A step's guard as the tables print it: ``only when gate is true``, or "" for a step that always runs."""
    return "only when " + " and ".join(f"{c} is {str(v).lower()}" for c, v in when) if when else ""


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _quant_table(q) -> Table:
    """The int8 values of a float model quantized with calibration data: range, threshold, scale, clipping; with
    ``--report``, each value's and each layer's quantization error."""
    how = f"percentile {q.percentile:g}" if q.method == "percentile" else q.method
    t = Table(title=f"int8 quantization: {how}, {q.samples} calibration samples")
    measured = any(v.sqnr_db is not None for v in q.tensors)
    errors = ("SQNR dB", "layer SQNR dB", "out SQNR dB", "out cos") if measured else ()
    for c in ("tensor", "range", "threshold", "scale", "clipped", "scale of", *errors):
        t.add_column(c, justify="left" if c in ("tensor", "scale of") else "right")
    layers = {layer.output: layer for layer in q.layers}
    for v in q.tensors:
        shared = "" if v.scale_of == v.name else v.scale_of
        rng = f"[{v.min:.4g}, {v.max:.4g}]"
        row = [v.name, rng, f"{v.threshold:.4g}", f"{v.scale:.4g}", f"{v.clipped:.4%}", shared]
        t.add_row(*row, *(_error_cells(v, layers.get(v.name)) if measured else ()))
    return t


def _error_cells(v, layer) -> tuple[str, ...]:
    """A tensor's SQNR in the int8 model; for a layer's output, the layer's own SQNR and the model output's SQNR
    and cosine with only that layer quantized (:mod:`vdla.graph.qerror`)."""
    own = (
        ("", "", "") if layer is None else (_db(layer.sqnr_db), _db(layer.output_sqnr_db), f"{layer.output_cosine:.5f}")
    )
    return (_db(v.sqnr_db), *own)


def _db(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


def _auto_float_table(auto) -> Table:
    """The layers ``--auto-float`` kept in float: op, MACs and their share of the model's, and the error each
    adds to the model's outputs alone (the ranking's measure)."""
    sqnr = dict(auto.ranking)
    t = Table(title=f"auto-float: layers kept in float32 on the CPU for cosine >= {auto.target:g}")
    for c in ("layer", "op", "MACs", "share of MACs", "out SQNR dB alone"):
        t.add_column(c, justify="left" if c in ("layer", "op") else "right")
    for name in auto.kept:
        macs = auto.macs.get(name, 0)
        share = macs / auto.total_macs if auto.total_macs else 0.0
        t.add_row(name, auto.ops.get(name, ""), f"{macs:,}", f"{share:.2%}", _db(sqnr.get(name)))
    return t


def auto_float_lines(auto) -> list[str]:
    """What ``vdla compile --auto-float`` prints after its table: the outcome, the cosines before and after, on
    which samples, and the evaluations."""
    where = (
        f"{auto.eval_samples} held-out calibration samples (scales calibrated on the other {auto.calib_samples})"
        if auto.held_out
        else f"the first {auto.eval_samples} of the {auto.calib_samples} calibration samples (too few to hold out)"
    )
    user = f" besides --keep-float {','.join(auto.user_kept)}" if auto.user_kept else ""
    if not auto.kept:
        outcome = f"no layer needs to stay in float{user}: int8 reaches cosine {auto.cosine_before:.6f}"
    else:
        outcome = (
            f"{len(auto.kept)} of {len(auto.ranking)} layers kept in float{user}, {auto.float_share:.2%} of the "
            f"model's MACs ({auto.float_macs:,}) leave the accelerator; cosine {auto.cosine_before:.6f} with "
            f"every layer int8 -> {auto.cosine_after:.6f}"
        )
    phases: dict[str, int] = {}
    for e in auto.evaluations:
        phases[e.phase] = phases.get(e.phase, 0) + 1
    counts = ", ".join(f"{n} {p}" for p, n in phases.items())
    pruned = f"; pruned {', '.join(auto.pruned)}" if auto.pruned else ""
    skipped = "; prune skipped (too many layers)" if auto.prune_skipped else ""
    measured = "" if auto.artifact_cosine is None else f"{auto.artifact_cosine:.6f}"
    return [
        f"auto-float: target cosine {auto.target:g}: {outcome}",
        f"auto-float: {len(auto.evaluations)} evaluations of the QDQ graph ({counts}{pruned}{skipped}) on {where}; "
        f"{auto.seconds:.1f} s, of which {auto.rank_seconds:.1f} s ranking the layers",
        f"auto-float: the compiled model on {auto.backend}: cosine {measured} against the float model on the same "
        "samples",
    ]


def equalization_line(eq: Equalization) -> str:
    """What ``vdla compile --equalize`` prints after the quantization table: the groups equalized (their channels'
    range spread before and after, the worst group) and the groups skipped, by reason."""
    kinds = Counter(reason.split(" '")[0] for reason in eq.skipped.values())
    skipped = ", ".join(f"{n} at {kind}" for kind, n in kinds.most_common())
    if not eq.groups:
        return f"equalization: no group to equalize ({len(eq.skipped)} skipped: {skipped})"
    worst = max(eq.groups, key=lambda g: g.spread_before)
    return (
        f"equalization: {len(eq.groups)} groups, {sum(g.scales.size for g in eq.groups)} channels rescaled "
        f"(widest: {', '.join(worst.producers)}, channel ranges {worst.spread_before:.3g}x apart -> "
        f"{worst.spread_after:.3g}x); {len(eq.skipped)} skipped ({skipped or 'none'})"
    )


def _keep_float(specs: list[str]) -> tuple[str, ...]:
    return tuple(name.strip() for spec in specs for name in spec.split(",") if name.strip())


def compile_options(args: argparse.Namespace):
    """The :class:`~vdla.model.pipeline.CompileOptions` of a ``vdla compile`` command line, every field set."""
    from vdla.model.pipeline import CompileOptions

    return CompileOptions(
        config=args.config,
        input_shapes=_shapes(args.input_shape),
        calibration=args.calibration,
        percentile=args.percentile,
        keep_float=_keep_float(args.keep_float),
        auto_float=getattr(args, "auto_float", None),
        align_residuals=not args.separate_residual_scales,
        power_of_two=args.power_of_two,
        equalize=args.equalize,
        dump=args.dump,
        quant_report=args.report,
        cpu_targets=tuple(args.cpu_target),
        fuse_depthwise=not getattr(args, "no_fuse_depthwise", False),
        fuse_adds=not getattr(args, "no_fuse_adds", False),
        fuse_squeeze_excite=not getattr(args, "no_fuse_squeeze_excite", False),
        pair_rows=not getattr(args, "no_pair_rows", False),
    )


def float_model_note(model: str) -> str:
    """The one line ``vdla compile`` prints first for a float model compiled without calibration data."""
    return (
        f"{model} is a float model and no --calib was given: it runs in float32 on the CPU, 0% of its MACs on the "
        "accelerator. Pass --calib FILE.npz (one array per model input, samples first) to quantize it to int8, or "
        "--calib random for a quick trial on seeded random inputs (its accuracy is then meaningless)"
    )


def cmd_compile(args: argparse.Namespace) -> int:
    from vdla.compiler import ScheduleCache
    from vdla.model.pipeline import compile_model
    from vdla.model.trust import load_signing_key

    out = Path(args.output or Path(args.model).with_suffix(".vdla"))
    options = compile_options(args)
    key = load_signing_key(args.sign) if getattr(args, "sign", None) else None  # before compiling: fail early
    cache = None if args.no_cache else ScheduleCache()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as bar:
        status = bar.add_task("compiling", total=None)
        calib_task: list = []

        def progress(done: int, total: int) -> None:
            if not calib_task:
                calib_task.append(bar.add_task("calibrating", total=total))
            bar.update(calib_task[0], completed=done)

        log = lambda msg: bar.update(status, description=msg)  # noqa: E731
        artifact, report = compile_model(args.model, args.calib, options, cache=cache, log=log, progress=progress)
    artifact.save(out, key=key)
    if not artifact.meta.get("quantized"):
        console.print(f"[yellow]note:[/] {float_model_note(args.model)}")
    if report.quantization is not None:
        console.print(_quant_table(report.quantization))
        if report.quantization.equalization is not None:
            console.print(equalization_line(report.quantization.equalization))
        for w in report.quantization.warnings:
            console.print(f"[yellow]warning:[/] {w}")
        if args.report:
            console.print(f"quantization report written to {args.report}")
    if report.auto_float is not None:
        if report.auto_float.kept:
            console.print(_auto_float_table(report.auto_float))
        for line in auto_float_lines(report.auto_float):
            console.print(line)
    console.print(_placement_table(artifact, report))
    m = artifact.memory
    share = artifact.accel_macs / artifact.total_macs if artifact.total_macs else 0.0
    console.print(
        f"MACs on the accelerator: {share:.2%} of {artifact.total_macs:,}; DRAM arena {m['dram_arena_bytes']:,} bytes "
        f"(no reuse: {m['dram_arena_no_reuse_bytes']:,}), image {m['image_bytes']:,} bytes; "
        f"compiled in {sum(report.seconds.values()):.2f} s"
    )
    if args.dump:
        console.print(f"graph dumps (text and DOT, one per pass) in {args.dump}")
    console.print(f"wrote {out}")
    if key is not None:
        console.print(f"signed by key {key.public.id} ({key.public.text})", soft_wrap=True)
    if args.json:
        doc = {"seconds": report.seconds, "notes": report.notes, "memory": m}
        if report.auto_float is not None:
            doc["auto_float"] = report.auto_float.to_dict()
        Path(args.json).write_text(json.dumps(doc, indent=2))
    return 0


def _inputs(specs: list[str], names: list[str]) -> dict[str, np.ndarray]:
    """``--input``: ``[NAME=]FILE.npy`` (NAME may be left out for a model of one input), or ``FILE.npz`` keyed
    by input name (as ``--output`` writes them; ``NAME=FILE.npz`` takes its one array)."""
    feeds = {}
    for spec in specs:
        name, sep, file = spec.rpartition("=")
        try:
            data = read_arrays(Path(file), f"--input {spec!r}: {file}", max_read_bytes(), ModelCliError)
        except OSError as e:
            raise ModelCliError(f"--input {spec!r}: cannot read {file} as a .npy or .npz array ({e})") from e
        if isinstance(data, dict):
            arrays = data
            if sep:
                if len(arrays) != 1:
                    raise ModelCliError(f"--input {spec!r}: {file} holds {sorted(arrays)}, not one array for {name!r}")
                arrays = {name: next(iter(arrays.values()))}
            unknown = sorted(set(arrays) - set(names))
            if unknown:
                raise ModelCliError(f"--input {spec!r}: {file} holds {unknown}, which are not inputs of {names}")
            feeds.update(arrays)
            continue
        if not sep:
            if len(names) != 1:
                raise ModelCliError(f"the model has inputs {names}: give --input NAME=FILE for each")
            name = names[0]
        feeds[name] = data
    return feeds


def check_output_path(path: str | Path, names: list[str]) -> None:
    """``--output``: ``.npz`` (any number of outputs, keyed by output name) or ``.npy`` (a single output);
    anything else is refused before the model runs."""
    suffix = Path(path).suffix.lower()
    if suffix == ".npy" and len(names) != 1:
        raise ModelCliError(
            f"--output {path}: the model has {len(names)} outputs {names}; a .npy file holds one, use .npz"
        )
    if suffix not in (".npy", ".npz"):
        raise ModelCliError(
            f"--output {path}: give a .npy file (a single output) or a .npz file (outputs by name), not {suffix!r}"
        )


def save_outputs(path: str | Path, outputs: dict[str, np.ndarray]) -> None:
    """Write the outputs to exactly ``path`` (see :func:`check_output_path`), through a temporary file beside
    it, so an interrupted write leaves no half-written file."""
    path = Path(path)
    check_output_path(path, list(outputs))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:  # a file object: numpy adds no extension
            if path.suffix.lower() == ".npy":
                np.save(f, next(iter(outputs.values())))
            else:
                np.savez(f, **outputs)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _run_table(report, artifact) -> Table:
    t = Table(title=f"run on {artifact.config.name!r} at {artifact.config.clock_mhz:g} MHz")
    for c in ("step", "op", "where", "cycles", "CPU ms", "GEMM util", "MACs"):
        t.add_column(c, justify="left" if c in ("step", "op", "where") else "right")
    for s in report.steps:
        accel, ran = s.where == "accel", not s.skipped
        t.add_row(
            s.name,
            s.op,
            ("[cyan]accel[/]" if accel else "[yellow]cpu[/]") + ("" if ran else f" [dim]skipped: {s.skipped}[/]"),
            f"{s.cycles:,}" if accel and ran else "",
            f"{s.cpu_ms:.3f}" if not accel and ran else "",
            f"{s.utilization:.1%}" if accel and ran else "",
            f"{s.macs:,}",
        )
    return t


def branch_line(report) -> str:
    """Which branches a run took and what it skipped ("" for a model without branches chosen at run time)."""
    if not report.conditions:
        return ""
    taken = ", ".join(f"{c} = {str(v).lower()}" for c, v in report.conditions.items())
    skipped = [s for s in report.steps if s.skipped]
    return f"branches: {taken}; {len(skipped)} steps skipped ({sum(s.macs for s in skipped):,} MACs not run)"


def run(args: argparse.Namespace) -> int:
    """``vdla run MODEL.vdla --input x.npy``."""
    from vdla.model.artifact import load_artifact
    from vdla.model.executor import Module, write_profile

    artifact = load_artifact(args.program)
    if args.output:
        check_output_path(args.output, list(artifact.outputs))
    options = {"trace": True} if getattr(args, "wave", False) else {}
    module = Module(
        artifact,
        args.backend,
        overlap=not getattr(args, "no_overlap", False),
        cpu_kernels=getattr(args, "cpu_kernels", "auto"),
        allow_reference_kernels=getattr(args, "allow_reference_kernels", False),
        trust_native=getattr(args, "trust_native", False),
        **options,
    )
    feeds = _inputs(args.input, list(artifact.inputs))
    steps = len(artifact.steps)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=args.backend == "sim",
    ) as bar:
        task = bar.add_task(f"running on {args.backend}", total=steps)
        outputs = module.run(
            feeds,
            progress=lambda done, total, name: bar.update(task, completed=done),
            timeline=bool(args.profile),
            max_cycles=args.max_cycles,
        )
    report = module.last_report
    console.print(_run_table(report, artifact))
    if branch_line(report):
        console.print(branch_line(report))
    console.print(
        f"accelerator: {report.accel_cycles:,} cycles = {report.accel_ms:.3f} ms at {artifact.config.clock_mhz:g} MHz; "
        f"CPU: {report.cpu_ms:.3f} ms ({module.cpu_kernels} kernels); "
        f"MACs on the accelerator: {report.accel_mac_share:.2%}"
    )
    if args.output:
        save_outputs(args.output, outputs if isinstance(outputs, dict) else {next(iter(artifact.outputs)): outputs})
        console.print(f"wrote {args.output}")
    if args.profile:
        write_profile(report, args.profile)
        console.print(f"profile written to {args.profile} (open in https://ui.perfetto.dev)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``compile`` (``run`` of a .vdla file shares the ``run`` subcommand)."""
    p = subparsers.add_parser("compile", help="compile an ONNX model into a deployable .vdla artifact")
    p.add_argument("model", help="an .onnx file (float, or QDQ-quantized by onnxruntime.quantization)")
    p.add_argument("-o", "--output", help="the artifact (default: MODEL with .vdla)")
    p.add_argument("--config", default=DEFAULT_PRESET, help="preset or JSON file")
    p.add_argument(
        "--calib",
        metavar="FILE.npz|random",
        help="quantize a float model to int8: .npz with one array per model input, samples on the first axis; "
        "'random' for a quick trial on seeded random inputs (the accuracy is then meaningless)",
    )
    p.add_argument(
        "--calibration", choices=METHODS, default="percentile", help="how each tensor's scale is chosen (with --calib)"
    )
    p.add_argument("--percentile", type=float, default=DEFAULT_PERCENTILE, help="of |x|, for --calibration percentile")
    p.add_argument(
        "--keep-float",
        action="append",
        default=[],
        metavar="NODE,...",
        help="nodes (named by their output) left in float32 on the CPU (with --calib; repeatable)",
    )
    p.add_argument(
        "--auto-float",
        type=float,
        metavar="TARGET_COSINE",
        help="keep the fewest layers in float32 (besides --keep-float's) that bring the outputs to this cosine in "
        "(0, 1] against the float model on the calibration data (held-out samples where there are 16 or more); "
        "the compiled model's cosine is measured on sim (with --calib)",
    )
    p.add_argument("--report", metavar="quant.json", help="write the quantization report as JSON (with --calib)")
    p.add_argument(
        "--no-fuse-depthwise",
        action="store_true",
        help="run each depthwise layer, the 1x1 convolution after it and the 1x1 expand layer before it as steps "
        "of their own (by default they are fused where that is faster: the expanded tensor and the depthwise "
        "output stay on chip)",
    )
    p.add_argument(
        "--no-fuse-adds",
        action="store_true",
        help="run each residual add after an activation table (YOLO's bottleneck) as a step of its own (by default "
        "it runs in the convolution whose output it adds where that is faster: that output stays on chip)",
    )
    p.add_argument(
        "--no-fuse-squeeze-excite",
        action="store_true",
        help="run squeeze-excite's global average and channel product as steps of their own (by default the average "
        "runs in the depthwise layer whose output it reads and the product in the 1x1 convolution after it, where "
        "that is faster: neither reads the feature map back from DRAM)",
    )
    p.add_argument(
        "--no-pair-rows",
        action="store_true",
        help="keep tensors of at most half a block of channels as they are (by default they are stored with two rows "
        "side by side as channels, filling whole blocks, where the layers around them are faster so)",
    )
    p.add_argument("--no-fold-narrow", dest="no_pair_rows", action="store_true", help=argparse.SUPPRESS)  # old name
    p.add_argument(
        "--power-of-two",
        action="store_true",
        help="power-of-two scales, one per weight tensor (TVM VTA's scheme): every requantization is a free "
        "shift; less accurate than the default per-channel weight scales (with --calib)",
    )
    p.add_argument(
        "--equalize",
        action="store_true",
        help="equalize per-channel ranges between layers before calibration (cross-layer equalization: each "
        "channel's range moved from the activation into the next layer's weights where the float model's outputs "
        "stay the same; with --calib)",
    )
    p.add_argument(
        "--separate-residual-scales",
        action="store_true",
        help="give each residual skip its own scale, rescaled in int32 on the CPU (default with --calib: the skip "
        "shares its sum's scale and the accelerator adds it exactly)",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=1x3x224x224",
        help="fix a dynamic input shape (repeatable)",
    )
    p.add_argument(
        "--cpu-target",
        action="append",
        default=[],
        metavar="T",
        help="also compile the CPU steps ahead of time for T and ship the code in the artifact (repeatable): "
        f"{', '.join([HOST, *TARGETS])} (the pynq preset's boards: {PRESET_TARGETS['pynq'][0]}); "
        "needs the aot extra",
    )
    p.add_argument(
        "--sign",
        metavar="KEY",
        help="sign the artifact (manifest, image, arrays and code) with the Ed25519 private key KEY (vdla trust "
        "keygen makes one): machines that trust its public key (vdla trust add) load its native code",
    )
    p.add_argument("--dump", metavar="DIR", help="write the graph as text and DOT after every pass")
    p.add_argument("--no-cache", action="store_true", help="search every schedule again")
    p.add_argument("--json", help="write the compile report as JSON")
    p.set_defaults(func=cmd_compile)
    add_trust_commands(subparsers)


def cmd_trust(args: argparse.Namespace) -> int:
    """``vdla trust keygen|add|list|remove``: the keys whose signed artifacts may load native code here."""
    from vdla.model import trust
    from vdla.paths import trust_dir

    store = trust_dir()
    if args.action == "keygen":
        key = trust.generate_key(args.key, args.name or "")
        console.print(f"private key {args.key} (mode 0600: keep it secret), public key {args.key}.pub", soft_wrap=True)
        console.print(f"key {key.id}: {key.text}", soft_wrap=True)
        console.print(f"sign with: vdla compile MODEL.onnx --sign {args.key}; trust with: vdla trust add {key.text}")
    elif args.action == "add":
        key = trust.read_public_key(args.key, args.name or "")
        path = trust.trust_key(key)
        console.print(f"trusted key {key.id} ({key.text}) in {path}", soft_wrap=True)
    elif args.action == "remove":
        key = trust.untrust_key(args.key)
        console.print(f"no longer trusted: key {key.id} ({key.text})", soft_wrap=True)
    else:
        keys = trust.trusted_keys()
        if args.json:
            print(json.dumps([{"id": k.id, "key": k.text, "name": k.name} for k in keys], indent=1))
            return 0
        t = Table(title=f"trusted keys ({store})")
        for c in ("id", "public key", "name"):
            t.add_column(c)
        for k in keys:
            t.add_row(k.id, k.text, k.name)
        console.print(t if keys else f"no trusted keys in {store}: vdla trust add PUBKEY", soft_wrap=True)
    return 0


def add_trust_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``trust`` (docs/security.md)."""
    p = subparsers.add_parser(
        "trust", help="the keys whose signed artifacts may load their native code on this machine (docs/security.md)"
    )
    sub = p.add_subparsers(dest="action", required=True)
    q = sub.add_parser("keygen", help="make an Ed25519 key pair: KEY (private, mode 0600) and KEY.pub")
    q.add_argument("key", metavar="KEY", help="the private key file to write (never overwritten)")
    q.add_argument("--name", help="a name kept with the public key (who signs with it)")
    q = sub.add_parser("add", help="trust a public key on this machine")
    q.add_argument("key", metavar="PUBKEY", help="ed25519:BASE64, or a file holding it (KEY.pub)")
    q.add_argument("--name", help="a name to list it by (who signs with it)")
    q = sub.add_parser("list", help="the trusted keys")
    q.add_argument("--json", action="store_true", help="print JSON")
    q = sub.add_parser("remove", help="stop trusting a key")
    q.add_argument("key", metavar="PUBKEY", help="ed25519:BASE64, a file holding it, or the key's id")
    p.set_defaults(func=cmd_trust)
