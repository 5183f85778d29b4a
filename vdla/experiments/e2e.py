"""ResNet-18 end to end: the seeded model quantized by vdla, compiled, run on a backend and checked.

:func:`prepare` builds the seeded ResNet-18 (``vdla.zoo.models.resnet18``), quantizes it with vdla's
profile-guided quantizer on seeded calibration images and compiles it; :func:`run_e2e` runs one inference on a
backend and returns an :class:`E2EResult`: per-step cycles, GEMM utilization and real-MAC efficiency, where
each step ran, the CPU time of the host steps, the accelerator cycles against the compute bound (every MAC at
one ``batch x block_in x block_out`` GEMM per cycle), and whether the outputs are bit-exact against the vdla
CPU reference (:func:`vdla.graph.interp.evaluate`) of the same lowered quantized graph.

Invariants: the reference and the compiled model come from one quantized graph; ``correct`` compares the int8
logits' dequantized values exactly and the softmax within float32 rounding.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from vdla.compiler import ScheduleCache
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.graph.graph import Graph
from vdla.model import Module
from vdla.model.artifact import Artifact
from vdla.model.executor import RunReport, StepReport

INPUT_SHAPE = (3, 224, 224)


@dataclass(frozen=True)
class Prepared:
    """A compiled model with its reference graph and a seeded input."""

    config: HwConfig
    artifact: Artifact
    reference: Graph  # the lowered quantized graph the CPU reference evaluates
    image: np.ndarray  # (1, 3, 224, 224) float32
    compile_seconds: float
    quantize_seconds: float
    scales: str = "per-channel"  # the quantization scheme: "per-channel" or "power-of-two"


@dataclass
class StepRecord:
    """One step of the run, for the table and the JSON."""

    name: str
    op: str
    where: str
    macs: int
    cycles: int
    utilization: float  # GEMM uop-iterations per cycle
    mac_efficiency: float  # real MACs / (cycles * MACs per cycle)
    cpu_ms: float
    schedule: str = ""
    note: str = ""
    idle_head: int | None = None  # cycles before the first GEMM/ALU (pipeline fill), from the timeline
    idle_tail: int | None = None  # cycles after the last GEMM/ALU (drain)


@dataclass
class E2EResult:
    """The figures of one end-to-end run (``to_dict`` is the benchmark's JSON)."""

    model: str
    config: str
    backend: str
    scales: str
    clock_mhz: float
    cycles: int
    compute_bound_cycles: int
    accel_mac_share: float
    cpu_ms: float
    correct: bool
    wall_s: float
    compile_s: float
    quantize_s: float
    layers: list[StepRecord] = field(default_factory=list)
    max_abs_prob_diff: float = 0.0
    overlap: bool = False  # the layers ran as joined streams
    separate: dict | None = None  # {"cycles", "idle_between_layers"} of the same model run one layer at a time

    @property
    def idle_between_layers(self) -> int | None:
        """Cycles the compute stage waits at the layers' starts and ends and between joined layers (fill and
        drain), None without a timeline."""
        steps = [r for r in self.layers if r.where == "accel"]
        if not steps or any(r.idle_head is None for r in steps):
            return None
        return sum(r.idle_head + r.idle_tail for r in steps)

    @property
    def ratio(self) -> float:
        return self.cycles / self.compute_bound_cycles

    @property
    def latency_ms(self) -> float:
        """Accelerator time of one inference at the config's clock."""
        return self.cycles / self.clock_mhz / 1e3

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(ratio=self.ratio, latency_ms=self.latency_ms, end_to_end_ms=self.latency_ms + self.cpu_ms)
        d.update(idle_between_layers=self.idle_between_layers)
        return d


def prepare(
    config: str | HwConfig = DEFAULT_PRESET,
    calib: int = 8,
    seed: int = 0,
    cache: ScheduleCache | None = None,
    log: Callable[[str], None] | None = None,
    power_of_two: bool = False,
) -> Prepared:
    """Build, quantize (entropy thresholds on ``calib`` seeded images; per-channel weight scales, or with
    ``power_of_two`` VTA's power-of-two scales) and compile the seeded ResNet-18."""
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify
    from vdla.graph.qdq import lower_qdq
    from vdla.graph.quantize import quantize_model
    from vdla.model.pipeline import calibration_runner, compile_graph_model
    from vdla.zoo.models import calibration_images, resnet18

    cfg = load_config(config)
    log = log or (lambda msg: None)
    t0 = time.perf_counter()
    log("building and quantizing ResNet-18")
    graph = simplify(import_onnx(resnet18(seed=seed)))
    images = calibration_images(INPUT_SHAPE, calib, seed=seed + 1)
    runner = calibration_runner(log)
    qgraph, _ = quantize_model(graph, {"image": images}, "entropy", runner=runner, power_of_two=power_of_two)
    quantize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    artifact, _ = compile_graph_model(qgraph, cfg, cache, log=log)
    compile_s = time.perf_counter() - t0
    image = calibration_images(INPUT_SHAPE, 1, seed=seed + 9)
    scheme = "power-of-two" if power_of_two else "per-channel"
    return Prepared(cfg, artifact, lower_qdq(qgraph), image, compile_s, quantize_s, scheme)


def reference_macs(graph: Graph) -> int:
    """The model's real multiply-accumulates, counted on the reference graph (no padding of any rewrite)."""
    from vdla.graph.ops import infer_types
    from vdla.model.cpu_regions import node_macs

    types = infer_types(graph)
    return sum(node_macs(n, types) for n in graph.nodes)


WORK = ("GEMM", "ALU")  # the compute-stage instructions that do the layer's arithmetic


def _work_span(report: StepReport) -> tuple[int, int] | None:
    """(start of the first GEMM/ALU, end of the last) of an accelerator step, from its run's timeline."""
    lo, hi = report.span or (0, 1 << 62)
    work = [
        e
        for e in (report.result.timeline if report.result else [])
        if e.stage == "compute" and lo <= e.index < hi and e.label.split()[0].upper() in WORK
    ]
    return (min(e.start for e in work), max(e.end for e in work)) if work else None


def fill_and_drain(reports: list[StepReport]) -> list[tuple[int | None, int | None]]:
    """Per step: (cycles the compute stage waits before its first GEMM/ALU, after its last). Before: since the
    start of its run or the last GEMM/ALU of the step before it in the same run (a stream); after: until the
    end of its run, or 0 when the next step runs in the same stream. (None, None) without a timeline."""
    spans = [_work_span(r) if r.where == "accel" else None for r in reports]
    out: list[tuple[int | None, int | None]] = []
    for i, (r, span) in enumerate(zip(reports, spans, strict=True)):
        if span is None:
            out.append((None, None))
            continue
        prev = spans[i - 1] if i and reports[i - 1].result is r.result else None
        shared_next = i + 1 < len(reports) and reports[i + 1].result is r.result
        head = span[0] - (prev[1] if prev else 0)
        tail = 0 if shared_next else r.result.counters.cycles - span[1]
        out.append((head, tail))
    return out


def _records(report: RunReport, artifact: Artifact, macs_per_cycle: int) -> list[StepRecord]:
    out = []
    idle = fill_and_drain(report.steps)
    for s, step, (head, tail) in zip(report.steps, artifact.steps, idle, strict=True):
        layer = getattr(step, "layer", {}) or {}
        eff = s.macs / (s.cycles * macs_per_cycle) if s.cycles else 0.0
        out.append(
            StepRecord(
                s.name,
                s.op,
                s.where,
                s.macs,
                s.cycles,
                s.utilization,
                eff,
                s.cpu_ms,
                schedule=layer.get("schedule", ""),
                note=s.note,
                idle_head=head,
                idle_tail=tail,
            )  # fmt: skip
        )
    return out


def run_e2e(
    prep: Prepared,
    backend: str = "sim",
    progress: Callable[[int, int, str], None] | None = None,
    timeline: bool | None = None,
    overlap: bool = True,
    **options,
) -> E2EResult:
    """One inference of ``prep`` on ``backend`` (``sim``, ``rtl``), checked against the CPU reference.

    With ``overlap`` the accelerator layers run as joined streams (:mod:`vdla.compiler.stream`), else one at a
    time; on the simulator an overlapped run is followed by one without, for the ``separate`` figures. With
    ``timeline`` (default: on the simulator, where it costs nothing; joined streams always record one) each
    accelerator step's fill and drain cycles are measured."""
    from vdla.graph.interp import evaluate

    cfg = prep.config
    report, got, wall = _run(
        prep, backend, progress, backend == "sim" if timeline is None else timeline, overlap, options
    )
    separate = None
    if overlap and backend == "sim" and prep.artifact.streams:
        alone, _, _ = _run(prep, backend, None, True, False, options)
        separate = {"cycles": alone.accel_cycles, "idle_between_layers": _idle(fill_and_drain(alone.steps))}
    want = evaluate(prep.reference, {"image": prep.image})
    exact = np.array_equal(got["logits"], want["logits"])
    prob_diff = float(np.abs(got["probs"] - want["probs"]).max())
    per_cycle = cfg.macs_per_cycle
    total_macs = reference_macs(prep.reference)
    return E2EResult(
        model="resnet18",
        config=cfg.name,
        backend=backend,
        scales=prep.scales,
        clock_mhz=cfg.clock_mhz,
        cycles=report.accel_cycles,
        compute_bound_cycles=-(-total_macs // per_cycle),
        accel_mac_share=report.accel_mac_share,
        cpu_ms=report.cpu_ms,
        correct=bool(exact and prob_diff <= 1e-6),
        wall_s=wall,
        compile_s=prep.compile_seconds,
        quantize_s=prep.quantize_seconds,
        layers=_records(report, prep.artifact, per_cycle),
        max_abs_prob_diff=prob_diff,
        overlap=overlap and bool(prep.artifact.streams),
        separate=separate,
    )


def _run(prep: Prepared, backend: str, progress, timeline: bool, overlap: bool, options: dict):
    """(report, outputs, wall seconds) of one inference."""
    module = Module(prep.artifact, backend, overlap=overlap, **options)
    try:
        t0 = time.perf_counter()
        got = module.run(prep.image, progress=progress, timeline=timeline)
        return module.last_report, got, time.perf_counter() - t0
    finally:
        module.close()


def _idle(pairs: list[tuple[int | None, int | None]]) -> int | None:
    """The fill and drain cycles of the accelerator steps, None if one was not measured."""
    pairs = [p for p in pairs if p != (None, None)]
    if not pairs:
        return None
    return sum(h + t for h, t in pairs)
