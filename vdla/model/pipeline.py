"""The model compiler's pass pipeline and entry point: ONNX (or a graph) in, a deployable artifact out.

Pipeline (each pass verified, dumped with ``CompileOptions.dump``):

1. import (``vdla.frontend.onnx``) and simplification (identities, batch-norm folding, constants, dead
   code); a float model with calibration data is quantized to int8 (:mod:`vdla.graph.quantize`);
2. QDQ lowering (``vdla.graph.qdq``): quantized layers become the accelerator's integer epilogue; an int8
   transposed convolution becomes stride-phase convolutions and an interleave (``vdla.graph.convt``); a first
   convolution over few channels becomes an im2col on the host and a 1x1 convolution (``vdla.graph.im2col``);
3. fusion and partitioning (:mod:`vdla.model.place`, the layers recognised by :mod:`vdla.model.match`);
4. layout, memory planning and the accelerator layers' code (:mod:`vdla.model.lower`);
5. the artifact: DRAM image, instruction streams, CPU region graphs, manifest; with ``cpu_targets``, the CPU
   steps' kernels compiled ahead of time for each target machine (:func:`add_cpu_code`).

Every setting is one :class:`CompileOptions`, which ``vdla.compile``, :func:`compile_model` and ``vdla
compile`` all take whole.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vdla.compiler import CompileError, ScheduleCache
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.cpu_fallback.native import TARGETS, NativeCodeError, resolve_target
from vdla.errors import VdlaError
from vdla.graph import dump as gdump
from vdla.graph.autofloat import AutoFloatReport, AutoFloatResult, auto_float, check_target
from vdla.graph.calibrate import (
    RANDOM,
    RANDOM_WARNING,
    QuantizationError,
    check_calibration,
    random_calibration,
)
from vdla.graph.convt import phase_convs
from vdla.graph.copies import accelerator_copies
from vdla.graph.graph import Graph
from vdla.graph.im2col import im2col_convs
from vdla.graph.opnames import DEQUANTIZE, QUANTIZE
from vdla.graph.ops import infer_types
from vdla.graph.qdq import lower_qdq
from vdla.graph.qerror import ErrorSums, with_errors
from vdla.graph.quantize import QuantizationWarning, QuantOptions, QuantReport, quantize_model
from vdla.graph.rowpair import pair_rows as pair_rows_graph
from vdla.graph.serialize import graph_from_json, graph_to_json
from vdla.graph.tables import quantize_early, tabulate_chains
from vdla.graph.verify import verify
from vdla.model.artifact import Artifact, CpuStep
from vdla.model.cpu_regions import node_macs
from vdla.model.lower import Log, ModelBuilder
from vdla.model.match import attention_refusal, layer_norm_refusal
from vdla.model.place import place
from vdla.untrusted import max_read_bytes, read_arrays


@dataclass(frozen=True)
class CompileOptions(QuantOptions):
    """How a model compiles: the hardware ``config`` (a preset name, a JSON file or an :class:`HwConfig`);
    ``input_shapes`` fixing dynamic input dimensions; for a float model with calibration data, the quantization
    options it inherits from :class:`~vdla.graph.quantize.QuantOptions` (keyword-only: ``calibration``,
    ``percentile``, ``keep_float``, ``align_residuals``, ``power_of_two``, ``equalize``); ``dump`` a folder for the
    graph after every pass and ``quant_report`` a path for the quantization report (JSON); ``cpu_targets`` the
    machines whose ahead-of-time CPU code the artifact carries (``--cpu-target``: ``host`` or a name of
    :data:`vdla.cpu_fallback.native.TARGETS`; stored resolved); ``fuse_depthwise`` runs each depthwise layer and
    the 1x1 convolution reading it (and the 1x1 expand layer computing its input) as one fused step
    (:mod:`vdla.compiler.dw_pointwise`) where they fit, and
    ``fuse_adds`` each residual add after an activation table in the convolution whose output it adds
    (:attr:`vdla.compiler.spec.EpilogueSpec.post`), and ``fuse_squeeze_excite`` squeeze-excite's global average
    into the depthwise layer whose output it averages and its channel product into the 1x1 convolution reading it
    (:attr:`vdla.compiler.spec.EpilogueSpec.gate`), each only where that is faster; ``pair_rows`` stores tensors of
    at most half a block of channels with two rows side by side as channels, and rewrites the layers around them
    (:mod:`vdla.graph.rowpair`), where that is faster by its cost model. ``auto_float`` (a cosine in (0, 1], with
    calibration data) keeps the fewest further layers in float that bring the outputs to that cosine against
    the float model (:mod:`vdla.graph.autofloat`; the compiled artifact's own cosine measured on ``sim``).

    Invariants: those of :class:`~vdla.graph.quantize.QuantOptions`; ``auto_float`` is None or a float in (0, 1],
    ``input_shapes`` maps names to tuples of ints, ``cpu_targets`` is a tuple of distinct known target names."""

    config: str | HwConfig = DEFAULT_PRESET
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict, hash=False)
    auto_float: float | None = None
    dump: str | Path | None = None
    quant_report: str | Path | None = None
    cpu_targets: tuple[str, ...] = ()
    fuse_depthwise: bool = True
    fuse_adds: bool = True
    fuse_squeeze_excite: bool = True
    pair_rows: bool = True

    kind = "compile"

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
            if self.auto_float is not None:
                object.__setattr__(self, "auto_float", check_target(self.auto_float))
        except VdlaError as e:
            raise CompileError(str(e)) from None
        shapes = {str(k): tuple(int(d) for d in v) for k, v in dict(self.input_shapes or {}).items()}
        object.__setattr__(self, "input_shapes", shapes)
        targets = (self.cpu_targets,) if isinstance(self.cpu_targets, str) else tuple(self.cpu_targets)
        try:
            resolved = tuple(dict.fromkeys(resolve_target(t).name for t in targets))
        except NativeCodeError as e:
            raise CompileError(str(e)) from None
        object.__setattr__(self, "cpu_targets", resolved)

    @staticmethod
    def option_error(message: str) -> Exception:
        return CompileError(message)


@dataclass
class CompileReport:
    """What compilation did: pass timings, placement notes, the artifact's memory figures."""

    seconds: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    placement: dict[str, str] = field(default_factory=dict)
    quantization: QuantReport | None = None  # profile-guided quantization of a float model (``calib``)
    auto_float: AutoFloatReport | None = None  # the layers ``auto_float`` kept in float and the cosines


def compile_graph_model(
    graph: Graph,
    config: str | HwConfig = DEFAULT_PRESET,
    cache: ScheduleCache | None = None,
    dump: str | Path | None = None,
    log: Log | None = None,
    passes: list[tuple[str, Callable[[Graph], Graph]]] | None = None,
    fuse_depthwise: bool = True,
    fuse_adds: bool = True,
    fuse_squeeze_excite: bool = True,
    pair_rows: bool = True,
) -> tuple[Artifact, CompileReport]:
    """Compile a graph (already imported) to an artifact: ``passes`` (name, function) run first, then QDQ
    lowering, partitioning, layout, memory planning and the accelerator layers (``fuse_depthwise``,
    ``fuse_adds``, ``fuse_squeeze_excite``, ``pair_rows``: see :class:`CompileOptions`)."""
    cfg = load_config(config)
    if cfg.block_in != cfg.block_out:
        raise CompileError(
            f"config {cfg.name!r} has block_in={cfg.block_in} != block_out={cfg.block_out}: the model compiler "
            "passes packed activations from layer to layer and needs square blocks"
        )
    report = CompileReport()
    log = log or (lambda msg: None)
    step = 0

    def after(name: str, g: Graph, t0: float, placement: dict | None = None, groups: Mapping | None = None) -> Graph:
        nonlocal step
        report.seconds[name] = time.perf_counter() - t0
        types = verify(g, after=name)
        if dump is not None:
            gdump.write(dump, step, name, g, types, placement, groups)
        step += 1
        return g

    graph = after("input", graph, time.perf_counter())
    # the first convolution's kernel window folded into its reduction (vdla.graph.im2col)
    im2col = ("im2col", lambda g: im2col_convs(g, cfg.block_in))
    tables = ("activation_tables", lambda g: tabulate_chains(quantize_early(g)))

    # what the lowering left between layers, as 0/1 convolutions it lowers in turn (vdla.graph.copies)
    # a LayerNorm in integers where the accelerator runs it, else in float on the CPU (vdla.model.match)
    # an attention block in integers likewise (vdla.model.match.attention_refusal)
    def lower(g: Graph) -> Graph:
        types = infer_types(g)
        return lower_qdq(
            g,
            lambda p, shape: layer_norm_refusal(p, shape, cfg),
            lambda block: attention_refusal(block, types[block.x].shape[1], cfg),
        )

    copies = ("accelerator_copies", lambda g: tables[1](lower(accelerator_copies(g, cfg.block_in))))
    steps = [*(passes or []), ("lower_qdq", lower), tables, copies]
    # tensors of few channels stored two rows to a pixel (vdla.graph.rowpair), before im2col packs the stem
    # (pairs from row -1 where the GEMMs can read OUT: the mask of their edge rows does)
    phases = cfg.src_out_refusal() is None
    pair = [("pair_rows", lambda g: pair_rows_graph(g, cfg.block_in, cfg.bus_bytes, phases))] if pair_rows else []
    for name, fn in [*steps, ("conv_transpose_phases", phase_convs), *pair, im2col]:
        t0 = time.perf_counter()
        graph = after(name, fn(graph), t0)
    t0 = time.perf_counter()
    types = infer_types(graph)
    plan = place(graph, types, cfg)
    report.placement = dict(plan.partition.placement)
    report.notes = dict(plan.notes)
    after("partition", graph, t0, report.placement, plan.partition.fusion.group_of)
    t0 = time.perf_counter()
    builder = ModelBuilder(graph, cfg, cache, log, fuse_depthwise, fuse_adds, fuse_squeeze_excite)
    builder.build_steps(plan)
    n_accel = sum(k == "accel" for k, _ in builder.steps)
    artifact = builder.finish(progress=lambda name: log(f"compiling accelerator layer {name} ({n_accel} in all)"))
    report.seconds["accelerator layers"] = time.perf_counter() - t0
    artifact.meta["compile_seconds"] = sum(report.seconds.values())
    return artifact, report


def add_cpu_code(artifact: Artifact, targets: tuple[str, ...], log: Log | None = None) -> None:
    """Compile the CPU steps' kernels ahead of time for each of ``targets`` (names of :data:`TARGETS`) and store
    them in ``artifact.cpu_code``. The specs come from the graphs as the artifact stores them (serialized and
    read back), so that the machine running the artifact derives the same kernel names from them."""
    try:
        from vdla.cpu_fallback.aot import build_library, linker_command
    except ImportError as e:
        raise CompileError(f"--cpu-target needs llvmlite and ziglang: pip install 'vdla[aot]' ({e})") from e
    from vdla.cpu_fallback.stacking import graph_specs

    linker_command()  # a missing linker is an error before any compiling
    specs = []
    for step in artifact.steps:
        if isinstance(step, CpuStep):
            desc, params = graph_to_json(step.graph)
            specs += graph_specs(graph_from_json(json.loads(json.dumps(desc)), params))
    for name in targets:
        (log or (lambda msg: None))(f"compiling {len(specs)} CPU kernels for {name}")
        if specs:
            artifact.cpu_code[name] = build_library(specs, TARGETS[name])


def _load_calib(calib: str | Path | Mapping[str, np.ndarray] | np.ndarray, graph: Graph) -> dict[str, np.ndarray]:
    """Calibration arrays by input name: an .npz path (:func:`read_calib_file`), a mapping or one array (for a
    single-input model), checked against the model's inputs by :func:`vdla.graph.calibrate.check_calibration`
    before anything compiles (every mismatch named at once); ``"random"``: seeded
    random inputs of ``graph``'s input shapes and dtypes (:func:`vdla.graph.calibrate.random_calibration`),
    with a :class:`~vdla.graph.quantize.QuantizationWarning` that the accuracy is then meaningless."""
    if isinstance(calib, str) and calib == RANDOM:
        warnings.warn(RANDOM_WARNING, QuantizationWarning, stacklevel=3)
        return random_calibration(graph.inputs)
    if isinstance(calib, np.ndarray):
        arrays = {"calib": calib}
    elif isinstance(calib, str | Path):
        arrays = read_calib_file(calib)
        try:
            return check_calibration(graph.inputs, arrays)
        except QuantizationError as e:
            raise QuantizationError(f"calibration file {calib}: {e}") from e
    elif isinstance(calib, Mapping):
        arrays = dict(calib)
    else:
        raise CompileError(
            f"calib must be an .npz path, a dict of arrays by input name or one array, got {type(calib).__name__}"
        )
    return check_calibration(graph.inputs, arrays)


def read_calib_file(path: str | Path, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of the .npz file ``path`` by name; a missing or unreadable file, one that is not an .npz
    archive (a .npy array, a pickle, text) or claims more than the read limit (``max_bytes``,
    :func:`vdla.untrusted.max_read_bytes`) is refused naming the path (and the array)."""
    path = Path(path)
    limit = max_read_bytes(max_bytes)
    try:
        arrays = read_arrays(path, f"calibration file {path}", limit, CompileError)
    except FileNotFoundError as e:
        raise CompileError(f"calibration file {path}: not a readable .npz of calibration arrays (no such file)") from e
    if isinstance(arrays, np.ndarray):
        raise CompileError(
            f"calibration file {path}: a single .npy array, not an .npz archive of arrays by input name (save it "
            "with np.savez(path, NAME=array) for each model input)"
        )
    return arrays


def artifact_cosine(artifact: Artifact, result: AutoFloatResult, backend: str = "sim") -> float:
    """The cosine of ``artifact``'s outputs run on ``backend`` against the float model's, over the samples
    ``result`` (an :class:`~vdla.graph.autofloat.AutoFloatResult`) measured its cosines on, all outputs as one
    vector."""
    from vdla.model.executor import Module

    module, sums = Module(artifact, backend), ErrorSums()
    for feeds, ref in zip(result.eval_feeds, result.eval_refs, strict=True):
        got = module.run(feeds)
        got = got if isinstance(got, dict) else {next(iter(artifact.outputs)): got}
        for name in artifact.outputs:
            sums.add(ref[name], got[name])
    return sums.cosine


def auto_float_shortfall(auto: AutoFloatReport) -> str:
    """The warning for a compiled model below the auto-float target that its QDQ graph reached."""
    return (
        f"auto-float: the compiled model reaches cosine {auto.artifact_cosine:.6f} on {auto.backend}, below the "
        f"target {auto.target:g} that its QDQ graph reached ({auto.cosine_after:.6f}): the integer epilogue's "
        "rounding differs from the QDQ graph's; raise the target a little or keep more layers with --keep-float"
    )


def calibration_runner(log: Log) -> Callable[[Graph], Callable] | None:
    """The CPU fallback's JIT as the calibration runner (None: the numpy interpreter, where llvmlite is
    missing)."""
    try:
        from vdla.cpu_fallback import compile_graph
    except ImportError:
        log("llvmlite is not installed: calibration runs on the numpy interpreter (pip install 'vdla[jit]')")
        return None
    return lambda graph: _prefetched(compile_graph, graph).run


def _prefetched(compile_graph: Callable, graph: Graph):
    """``compile_graph(graph)`` with a forked helper compiling its kernels from the last on two cores
    (:func:`vdla.model.prefetch.prefetch_kernels`)."""
    from vdla.model.prefetch import prefetch_kernels

    with prefetch_kernels(graph):
        return compile_graph(graph)


def compile_model(
    model: Any,
    calib: str | Path | Mapping[str, np.ndarray] | np.ndarray | None = None,
    options: CompileOptions | None = None,
    *,
    cache: ScheduleCache | None = None,
    log: Log | None = None,
    progress: Callable[[int, int], None] | None = None,
    **option_fields: Any,
) -> tuple[Artifact, CompileReport]:
    """Compile an ONNX model (path or ``onnx.ModelProto``) or a :class:`Graph` to an artifact, as ``options``
    say (:class:`CompileOptions`; its fields may also be given as keywords, which replace them).

    A float model with ``calib`` (an .npz path or a dict: one float array per model input, samples along
    the first axis; a single-input model also takes the array itself; ``"random"`` for a quick trial on
    seeded random inputs, whose accuracy is meaningless) is quantized to int8 first
    (:func:`vdla.graph.quantize.quantize_model`), ``progress(done, total)`` called per calibration batch,
    the report in ``CompileReport.quantization`` (and written to ``options.quant_report``). A QDQ model
    keeps its own scales: ``calib`` for one is refused. Without ``calib`` a float model runs in float on the
    CPU. ``cache`` keeps searched schedules between runs; ``log`` receives progress messages.
    """
    from vdla.graph.passes import simplify

    opts = (options or CompileOptions()).updated(**option_fields)
    t0 = time.perf_counter()
    if isinstance(model, Graph):
        graph = model
    else:
        from vdla.frontend.onnx import import_onnx

        graph = import_onnx(model, opts.input_shapes, dequantize_dynamic=calib is not None)
    import_s = time.perf_counter() - t0
    quantized = any(n.op in (QUANTIZE, DEQUANTIZE) for n in graph.nodes)
    passes: list[tuple[str, Callable[[Graph], Graph]]] = [("simplify", simplify)]
    found: list[QuantReport] = []
    searched: list[AutoFloatResult] = []  # the auto-float search's result
    if calib is not None:
        if quantized:
            raise CompileError(
                "the model is already quantized (QDQ, or dynamic units whose weight is not a constant): it keeps "
                "the scales it carries; drop the calibration data"
            )
        arrays = _load_calib(calib, graph)
        log = log or (lambda msg: None)
        runner = calibration_runner(log)

        def quantize(g: Graph) -> Graph:
            how = {"runner": runner, "progress": progress}
            if opts.auto_float is not None:
                result = auto_float(g, arrays, opts.auto_float, opts.quant, **how, log=log)
                qgraph, qreport = result.qgraph, result.quant
                types = infer_types(g)
                macs = {n.output: node_macs(n, types) for n in g.nodes}
                auto = replace(result.report, macs=macs, total_macs=sum(macs.values()))
                searched.append(replace(result, report=auto))
            else:
                qgraph, qreport = quantize_model(g, arrays, opts.quant, **how)
            if opts.quant_report is not None:  # the error analysis runs only for the report
                log(f"measuring the quantization error of {len(qreport.layers)} layers")
                qreport = with_errors(qreport, g, qgraph, check_calibration(g.inputs, arrays))
            if isinstance(calib, str) and calib == RANDOM:
                qreport = replace(qreport, warnings=(RANDOM_WARNING, *qreport.warnings))
            found.append(qreport)
            return qgraph

        passes.append(("quantize", quantize))
    elif opts.keep_float:
        raise CompileError("keep_float needs calibration data (calib): without it a float model runs all in float")
    elif opts.auto_float is not None and quantized:
        raise CompileError(
            "auto_float chooses which layers of a float model vdla's calibration quantizes; this model is already "
            "quantized (QDQ) and keeps the scales it carries: drop auto_float"
        )
    elif opts.auto_float is not None:
        raise CompileError(
            "auto_float needs calibration data (calib): it chooses the layers kept in float by their quantization "
            "error on that data"
        )
    artifact, report = compile_graph_model(
        graph, opts.config, cache, opts.dump, log, passes=passes, fuse_depthwise=opts.fuse_depthwise,
        fuse_adds=opts.fuse_adds, fuse_squeeze_excite=opts.fuse_squeeze_excite, pair_rows=opts.pair_rows,
    )  # fmt: skip
    report.seconds = {"import": import_s, **report.seconds}
    if opts.cpu_targets:
        t0 = time.perf_counter()
        add_cpu_code(artifact, opts.cpu_targets, log)
        report.seconds["cpu code"] = time.perf_counter() - t0
    report.quantization = found[0] if found else None
    if searched:
        t0 = time.perf_counter()
        log(f"auto-float: measuring the compiled model on sim ({searched[0].report.eval_samples} samples)")
        report.auto_float = replace(searched[0].report, artifact_cosine=artifact_cosine(artifact, searched[0]))
        report.seconds["auto-float check on sim"] = time.perf_counter() - t0
        if report.auto_float.artifact_cosine < report.auto_float.target:
            note = auto_float_shortfall(report.auto_float)
            warnings.warn(note, QuantizationWarning, stacklevel=2)
            report.quantization = replace(report.quantization, warnings=(*report.quantization.warnings, note))
    if report.quantization is not None and opts.quant_report is not None:
        doc = report.quantization.to_dict()
        if report.auto_float is not None:
            doc["auto_float"] = report.auto_float.to_dict()
        Path(opts.quant_report).write_text(json.dumps(doc, indent=2))
    artifact.meta["compile_seconds"] = sum(report.seconds.values())
    artifact.meta["quantized"] = quantized or report.quantization is not None
    return artifact, report
