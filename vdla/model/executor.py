"""Running a model artifact on a device: accelerator steps on the backend, CPU steps on the host.

Loading places the artifact's DRAM image at the config's base address once; a run allocates no DRAM
(every tensor has its planned address), so running twice gives identical results and leaves the
allocator where it was. CPU steps run on the first of (:func:`choose_cpu_kernels`): the artifact's ahead-of-time
code for this machine (loaded with ctypes after a check of its hash, and only when the artifact is signed by a
key this machine trusts or the caller passes ``trust_native=True``: :mod:`vdla.model.trust`), the CPU fallback's
JIT where llvmlite is installed, and the numpy reference kernels (a one-line note or warning says why, and
names the ``--cpu-target`` that would give native code). Nothing here imports the compiler or ONNX, nor
llvmlite unless the JIT runs.
"""

from __future__ import annotations

import bisect
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vdla.config import config_mismatch
from vdla.cpu_fallback.native import NativeCodeError, machine, target_for_machine
from vdla.cpu_fallback.stacking import compile_graph
from vdla.errors import VdlaError
from vdla.graph.branches import holds
from vdla.graph.interp import evaluate
from vdla.graph.types import INT_RANGE, TensorType, narrow_integers
from vdla.isa import INSN_BYTES, GemmInsn, decode_program
from vdla.model.artifact import AccelStep, AccelStream, Artifact, CpuStep, load_artifact
from vdla.model.memplan import Lifetime, MemoryPlan, plan_memory
from vdla.model.trust import distrust_reason
from vdla.runtime.backend import RunResult
from vdla.runtime.counters import STAGES
from vdla.runtime.device import Device


class ModelInputError(VdlaError, ValueError):
    """A model input of the wrong name, shape or dtype."""


@dataclass
class StepReport:
    """What one step did in one run."""

    name: str
    op: str
    where: str  # "accel" or "cpu"
    macs: int
    cycles: int = 0
    utilization: float = 0.0
    cpu_ms: float = 0.0
    note: str = ""
    result: RunResult | None = field(default=None, repr=False)
    span: tuple[int, int] | None = None  # the step's instructions in ``result``'s program (None: all of it)
    skipped: str = ""  # why the step did not run (a branch not taken: "gate is false"), "" when it ran


@dataclass
class RunReport:
    """A whole run: per-step reports and the totals a user asks for."""

    steps: list[StepReport]
    clock_mhz: float
    conditions: dict[str, bool] = field(default_factory=dict)  # each branch condition the run computed

    @property
    def ran(self) -> list[StepReport]:
        """The steps that ran (a branch not taken is skipped)."""
        return [s for s in self.steps if not s.skipped]

    @property
    def accel_cycles(self) -> int:
        return sum(s.cycles for s in self.steps)

    @property
    def accel_ms(self) -> float:
        return self.accel_cycles / self.clock_mhz / 1e3

    @property
    def cpu_ms(self) -> float:
        return sum(s.cpu_ms for s in self.steps)

    @property
    def accel_mac_share(self) -> float:
        """The share of the MACs run on the accelerator, of the steps that ran."""
        total = sum(s.macs for s in self.ran)
        return sum(s.macs for s in self.ran if s.where == "accel") / total if total else 0.0

    def to_dict(self) -> dict:
        return {
            "accel_cycles": self.accel_cycles,
            "accel_ms": self.accel_ms,
            "cpu_ms": self.cpu_ms,
            "accel_mac_share": self.accel_mac_share,
            "conditions": self.conditions,
            "steps": [{k: v for k, v in s.__dict__.items() if k != "result"} for s in self.steps],
        }


def _check_finite(name: str, a: np.ndarray, how: str) -> None:
    """Refuse an input holding NaN or an infinity, naming it, the first bad index and how many there are."""
    bad = ~np.isfinite(a)
    if bad.any():
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))
        raise ModelInputError(
            f"input {name!r} has {int(bad.sum())} non-finite value(s){how}: the first is {a[first]} at index "
            f"{list(first)}; the accelerator's int8 quantization has no NaN or infinity"
        )


CPU_KERNELS = ("auto", "native", "jit", "reference")  # Module(cpu_kernels=...): where CPU steps run


def _jit_source() -> Callable | None:
    """The JIT's kernel source, or None where llvmlite is missing."""
    try:
        from vdla.cpu_fallback import get_kernel
    except ImportError:
        return None
    return get_kernel


def _missing_code(artifact: Artifact) -> str:
    """Why this machine has no native code in ``artifact``, and the compile option that would give it."""
    here = target_for_machine(machine())
    fix = f"compile with --cpu-target {here.name}" if here else "no --cpu-target of vdla runs on it"
    if not artifact.cpu_code:
        return f"the artifact carries no CPU code (this machine: {machine()}): {fix}"
    carried = ", ".join(artifact.cpu_code)
    return f"the artifact carries CPU code for {carried}, none for this machine ({machine()}): {fix}"


TRUST_FIX = "vdla run --trust-native loads it for one run (Module(..., trust_native=True); docs/security.md)"


def choose_cpu_kernels(
    artifact: Artifact,
    choice: str = "auto",
    allow_reference: bool = False,
    warn: Callable[[str], None] = print,
    trust_native: bool = False,
    note: Callable[[str], None] | None = None,
) -> tuple[str, Callable | None]:
    """Where ``artifact``'s CPU steps run here: ``("native", source)`` (the artifact's code for this machine),
    ``("jit", source)`` or ``("reference", None)`` (the numpy kernels), the source mapping a kernel spec to
    a callable kernel.

    ``choice`` ``auto`` takes the first that is available, in that order; the numpy kernels come last, with
    a warning naming the ``--cpu-target`` that would fix it. The artifact's code is available only when its
    signature verifies against a key this machine trusts (:func:`vdla.model.trust.distrust_reason`) or with
    ``trust_native``; otherwise ``note`` (default ``warn``) says why in one line and the JIT runs (the numpy
    kernels, with a warning, where llvmlite is missing). Code for this machine that is corrupt or has
    another hash is refused (:class:`NativeCodeError`), or, with ``allow_reference``, warned about and
    replaced by the numpy kernels. ``native`` and ``jit`` refuse to fall back; ``reference`` forces numpy.
    """
    if choice not in CPU_KERNELS:
        raise VdlaError(f"unknown cpu_kernels {choice!r}: one of {', '.join(CPU_KERNELS)}")
    if choice == "reference":
        return "reference", None
    here = target_for_machine(machine())
    lib = artifact.cpu_code.get(here.name) if here and choice in ("auto", "native") else None
    distrust = None if lib is None or trust_native else distrust_reason(artifact.signature)
    if lib is not None and distrust is None:
        try:
            return "native", lib.load().kernel
        except NativeCodeError as e:
            if not allow_reference:
                raise NativeCodeError(f"{e} (--allow-reference-kernels runs the numpy kernels instead)") from e
            warn(f"{e}: CPU steps run on numpy reference kernels")
            return "reference", None
    untrusted = f"the artifact's {here.name} code is not loaded: {distrust}" if distrust else ""
    if choice == "native":
        raise NativeCodeError(f"{untrusted}; {TRUST_FIX}" if distrust else _missing_code(artifact))
    jit = _jit_source()
    if jit is not None:
        if distrust:
            (note or warn)(f"{untrusted}. CPU steps run on the JIT; {TRUST_FIX}")
        return "jit", jit
    if choice == "jit":
        raise VdlaError("cpu_kernels='jit' needs llvmlite: pip install 'vdla[jit]'")
    why = f"{untrusted}; {TRUST_FIX}" if distrust else f"{_missing_code(artifact)} (or pip install 'vdla[jit]')"
    warn(f"CPU steps run on numpy reference kernels: {why}")
    return "reference", None


def plan_host(artifact: Artifact, compiled: Mapping[int, object]) -> tuple[MemoryPlan | None, dict]:
    """Host buffers for every tensor a JIT kernel of a CPU step writes, reused by liveness.

    Events are the groups of all CPU steps in order; a tensor lives from the group writing it to the last
    group reading it, a step output read by a later step until the end of that step, a graph output to the
    end. A reshape is a view: it extends the life of its source. Returns the plan and the tensors'
    (step, value) -> (type shape, dtype).
    """
    lifetimes: dict[tuple[int, str], list] = {}  # (step, value) -> [nbytes, first, last, shape, dtype]
    producer: dict[str, tuple[int, str]] = {}  # host value -> (step, its buffer's value)
    event, end = 0, 1 << 30
    for i, step in enumerate(artifact.steps):
        if i not in compiled or compiled[i] is None:
            continue
        for g in compiled[i].groups:
            for a in g.args:
                key = producer.get(a) if a not in step.graph.params else None
                if key is not None:
                    lifetimes[key][2] = max(lifetimes[key][2], event)
            if g.kernel is None:  # a reshape view of its source
                src = producer.get(g.args[0])
                if src is not None:
                    producer[g.output] = src
            else:
                t = g.out
                key = (i, g.output)
                lifetimes[key] = [int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize, event, event, t.shape, t.dtype]
                producer[g.output] = key
            event += 1
        for out in step.graph.outputs:  # written to DRAM or handed on at the end of the step
            key = producer.get(out)
            if key is not None:
                lifetimes[key][2] = max(lifetimes[key][2], event - 1)
        for name in step.graph.inputs:  # a host value of an earlier step read here
            key = producer.get(name)
            if key is not None and key[0] != i:
                lifetimes[key][2] = max(lifetimes[key][2], event - 1)
    for o in artifact.outputs:
        key = producer.get(o)
        if key is not None:
            lifetimes[key][2] = end
    if not lifetimes:
        return None, {}
    names = {key: f"{key[0]}:{key[1]}" for key in lifetimes}
    plan = plan_memory([Lifetime(names[k], v[0], v[1], v[2]) for k, v in lifetimes.items()], align=64)
    return plan, {k: (names[k], v[3], v[4]) for k, v in lifetimes.items()}


class Module:
    """A compiled model bound to a device (``sim``, ``rtl`` or ``pynq``).

    ``run(x)`` takes an array for a single-input model or a dict by input name, and returns an array for a
    single-output model or a dict; ``last_report`` describes the last run.
    """

    def __init__(
        self,
        artifact: Artifact,
        backend: str = "sim",
        device: Device | None = None,
        overlap: bool = True,
        cpu_kernels: str = "auto",
        allow_reference_kernels: bool = False,
        trust_native: bool = False,
        **options,
    ):
        """``cpu_kernels``, ``allow_reference_kernels`` and ``trust_native``: where the CPU steps run, see
        :func:`choose_cpu_kernels` (the choice made is ``self.cpu_kernels``). ``trust_native=True`` loads the
        artifact's native code without a trusted signature: only for an artifact whose author you trust."""
        self.artifact = artifact
        steps = artifact.steps  # a stream runs or is skipped whole: one joining steps of two guards is not used
        joined = [s for s in artifact.streams if len({steps[k].when for k in range(s.first, s.first + s.count)}) == 1]
        self.streams = {s.first: s for s in joined} if overlap else {}
        self.device = device or Device(artifact.config, backend, **options)
        cfg = self.device.cfg
        if cfg.hash != artifact.config.hash:
            raise VdlaError(f"the model: {config_mismatch(artifact.config, cfg)}")
        self._image = self.device.dram.reserve(cfg.dram_base_addr, max(artifact.image.size, 1))
        self._image.write(artifact.image)
        self._warned: set[str] = set()
        cpu_steps = {i: s for i, s in enumerate(artifact.steps) if isinstance(s, CpuStep)}
        self.cpu_kernels, source = (
            choose_cpu_kernels(
                artifact, cpu_kernels, allow_reference_kernels, self._warn, trust_native, lambda m: self._warn(m, True)
            )
            if cpu_steps
            else ("none", None)
        )
        self._cpu = {i: compile_graph(s.graph, source) if source else None for i, s in cpu_steps.items()}
        self.host_plan, tensors = plan_host(artifact, self._cpu)
        self._host = np.zeros(self.host_plan.total if self.host_plan else 0, np.uint8)
        self._buffers: dict[int, dict[str, np.ndarray]] = {}
        for (i, value), (name, shape, dtype) in tensors.items():
            off, nbytes = self.host_plan.offsets[name], self.host_plan.sizes[name]
            self._buffers.setdefault(i, {})[value] = self._host[off : off + nbytes].view(dtype).reshape(shape)
        self.last_report: RunReport | None = None
        self._gemm_iters: dict[int, list[int]] = {}
        self._conditions = list(dict.fromkeys(c for s in artifact.steps for c, _ in s.when))
        self._not_run: set[str] = set()  # host values of the CPU steps the current run skipped

    def _warn(self, message: str, note: bool = False) -> None:
        """Print ``message`` to stderr once per module, as a warning or a note."""
        if message not in self._warned:
            self._warned.add(message)
            print(f"{'note' if note else 'warning'}: {message}", file=sys.stderr)

    # -- inputs and outputs -----------------------------------------------------------------------------
    def _feeds(self, inputs: np.ndarray | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        specs = self.artifact.inputs
        if not isinstance(inputs, Mapping):
            if len(specs) != 1:
                raise ModelInputError(f"the model has inputs {list(specs)}: pass a dict by input name")
            inputs = {next(iter(specs)): inputs}
        unknown = set(inputs) - set(specs)
        missing = set(specs) - set(inputs)
        if unknown or missing:
            raise ModelInputError(
                f"inputs: missing {sorted(missing)}, unknown {sorted(unknown)}; expected {list(specs)}"
            )
        return {name: self._feed(name, inputs[name], t) for name, t in specs.items()}

    def _feed(self, name: str, value: np.ndarray, t: TensorType) -> np.ndarray:
        """One input checked against its spec: the shape exactly; the dtype exactly, except that any other
        float dtype given for a float32 input is converted to float32 with a note (numpy's default float64
        and ml_dtypes' bfloat16 among them), and integers for an integer input are narrowed when every value
        fits (an ONNX model's int64 token ids, which vdla holds as int32), else refused naming the first that
        does not; every float value finite (NaN or an infinity, given or made by the conversion, is an error
        naming the input and the first bad index). A 0-d input stays 0-d."""
        a = np.asarray(value)
        if a.shape != t.shape:
            raise ModelInputError(f"input {name!r} must have shape {t.shape}, got {a.shape}")
        converted = ""
        if a.dtype.name != t.dtype and a.dtype.kind in "iu" and t.dtype in INT_RANGE:
            try:  # int64 token ids for an input vdla holds as int32: exact, or refused
                return narrow_integers(a, t.dtype)  # a fresh C-ordered copy (0-d stays 0-d)
            except ValueError as e:
                raise ModelInputError(f"input {name!r} ({a.dtype.name}) for {t.dtype}: {e}") from e
        if a.dtype.name != t.dtype:
            floating = a.dtype.kind == "f" or a.dtype.name == "bfloat16"  # (ml_dtypes' bfloat16 is kind 'V')
            if not (floating and t.dtype == "float32"):
                raise ModelInputError(f"input {name!r} must be {t.dtype}, got {a.dtype.name}")
            _check_finite(name, a, "")
            converted = f" after conversion from {a.dtype.name} to float32 (outside float32's range)"
            self._warn(f"input {name!r} is {a.dtype.name}: converted to float32", note=True)
            with np.errstate(over="ignore"):
                a = a.astype(np.float32)
        if a.dtype.kind == "f":
            _check_finite(name, a, converted)
        return np.require(a, requirements="C")  # 0-d stays 0-d (ascontiguousarray would make it 1-d)

    def _dram_read(self, name: str) -> np.ndarray:
        t = self.artifact.dram[name]
        return self.device.dram.view(t.addr, t.nbytes).view(t.dtype).reshape(t.shape).copy()

    def _dram_write(self, name: str, value: np.ndarray) -> None:
        t = self.artifact.dram[name]
        if value.shape != t.shape or value.dtype.name != t.dtype:
            raise VdlaError(
                f"DRAM tensor {name!r} is {t.dtype}{list(t.shape)}, got {value.dtype.name}{list(value.shape)}"
            )
        self.device.dram.view(t.addr, t.nbytes)[:] = np.ascontiguousarray(value).view(np.uint8).reshape(-1)

    # -- running ----------------------------------------------------------------------------------------
    def run(
        self,
        inputs: np.ndarray | Mapping[str, np.ndarray],
        progress: Callable[[int, int, str], None] | None = None,
        timeline: bool = False,
        max_cycles: int | None = None,
    ) -> np.ndarray | dict[str, np.ndarray]:
        """Run the model once; ``progress(done, total, step_name)`` is called after each step (after a stream
        of joined steps, once for the stream)."""
        env: dict[str, np.ndarray] = self._feeds(inputs)
        self._not_run = set()
        reports: list[StepReport] = []
        steps = self.artifact.steps
        i = 0
        while i < len(steps):
            done = self._run_from(i, env, progress, timeline, max_cycles)
            reports += done
            i += len(done)
            if progress:
                progress(i, len(steps), steps[i - 1].name)
        conditions = {c: bool(np.asarray(env[c]).reshape(-1)[0]) for c in self._conditions if c in env}
        self.last_report = RunReport(reports, self.artifact.config.clock_mhz, conditions)
        outs = {name: env[name].copy() for name in self.artifact.outputs}  # the arena is reused next run
        return next(iter(outs.values())) if len(outs) == 1 else outs

    def _run_from(
        self,
        i: int,
        env: dict[str, np.ndarray],
        progress: Callable[[int, int, str], None] | None,
        timeline: bool,
        max_cycles: int | None,
    ) -> list[StepReport]:
        """Run step ``i``, or the stream of joined steps starting there, or skip it (a branch not taken: its guard
        does not hold for ``env``); the reports of the steps done."""
        steps, stream = self.artifact.steps, self.streams.get(i)
        taken, why = holds(steps[i].when, env)  # a stream's steps share one guard
        if not taken:
            return [self._skip(k, why) for k in range(i, i + (stream.count if stream is not None else 1))]
        if stream is not None:
            tick = None
            if progress:
                names = f"{steps[i].name}..{steps[i + stream.count - 1].name}"
                tick = lambda cycles: progress(i, len(steps), f"{names} {cycles:,} cycles")  # noqa: E731
            return self._run_stream(stream, max_cycles, tick)
        if isinstance(steps[i], AccelStep):
            return [self._run_accel(steps[i], timeline, max_cycles)]
        return [self._run_cpu(i, steps[i], env)]

    def _skip(self, i: int, why: str) -> StepReport:
        """Step ``i`` not run (its guard does not hold: ``why``); a CPU step's host outputs are then not computed
        (:meth:`_host_value`)."""
        step = self.artifact.steps[i]
        if isinstance(step, CpuStep):
            self._not_run.update(v for v in step.graph.outputs if v not in step.dram_outputs)
        op = step.layer.get("op", "conv2d") if isinstance(step, AccelStep) else "+".join(_ops(step))
        return StepReport(step.name, op, step.kind, step.macs, note=f"skipped: {why}", skipped=why)

    def _host_value(self, step: CpuStep, name: str, env: dict[str, np.ndarray]) -> np.ndarray:
        """Host input ``name`` of ``step``: its value, or zeros of its type where the step computing it was skipped
        (only the select of the branch taken reads it, and discards it)."""
        if name in env or name not in self._not_run:
            return env[name]
        t = step.graph.inputs[name]
        return np.zeros(t.shape, t.dtype)

    def _run_accel(self, step: AccelStep, timeline: bool, max_cycles: int | None) -> StepReport:
        result = self.device.backend.run(
            self.device.dram, step.insn_addr, step.insn_count, max_cycles=max_cycles, timeline=timeline
        )
        c = result.counters
        return StepReport(
            step.name, step.layer.get("op", "conv2d"), "accel", step.macs, c.cycles, c.utilization, result=result
        )

    def _run_stream(
        self, stream: AccelStream, max_cycles: int | None, tick: Callable[[int], None] | None
    ) -> list[StepReport]:
        """Run a stream of joined steps (``tick(cycles)`` now and then); its cycles split per step by the
        timeline (see :func:`split_stream`)."""
        result = self.device.backend.run(
            self.device.dram, stream.insn_addr, stream.insn_count, max_cycles=max_cycles, timeline=True, progress=tick
        )
        steps = self.artifact.steps[stream.first : stream.first + stream.count]
        return split_stream(result, stream, steps, self._stream_gemm_iters(stream))

    def _stream_gemm_iters(self, stream: AccelStream) -> list[int]:
        """Multiply-accumulate uop-iterations of each step of the stream, counted on its instructions."""
        if stream.first not in self._gemm_iters:
            lo = stream.insn_addr - self.artifact.config.dram_base_addr
            insns = decode_program(self.artifact.image[lo : lo + stream.insn_count * INSN_BYTES].tobytes())
            self._gemm_iters[stream.first] = [
                sum(x.iterations for x in insns[a:b] if isinstance(x, GemmInsn) and not x.reset)
                for a, b in map(stream.span, range(stream.count))
            ]
        return self._gemm_iters[stream.first]

    def _run_cpu(self, i: int, step: CpuStep, env: dict[str, np.ndarray]) -> StepReport:
        feeds = {}
        for name in step.graph.inputs:
            dram = step.dram_inputs.get(name)
            feeds[name] = self._dram_read(dram) if dram is not None else self._host_value(step, name, env)
        t0 = time.perf_counter()
        compiled = self._cpu[i]
        outs = evaluate(step.graph, feeds) if compiled is None else compiled.run(feeds, self._buffers.get(i))
        ms = (time.perf_counter() - t0) * 1e3
        for name, value in outs.items():
            if name in step.dram_outputs:
                self._dram_write(step.dram_outputs[name], value)
            else:
                env[name] = value
        return StepReport(step.name, "+".join(_ops(step)), "cpu", step.macs, cpu_ms=ms, note=step.note)

    def close(self) -> None:
        """Give the image's DRAM back (the module cannot run afterwards)."""
        if self._image is not None:
            self._image.free()
            self._image = None

    def save(self, path: str | Path) -> Path:
        """Write the artifact (``vdla.load`` reads it back)."""
        return self.artifact.save(path)


def _ops(step: CpuStep) -> list[str]:
    """The operators of a CPU step for its report row (four at most)."""
    ops = sorted({n.op for n in step.graph.nodes} - {"reshape"})
    return ops[:4] + (["..."] if len(ops) > 4 else [])


def split_stream(
    result: RunResult, stream: AccelStream, steps: list[AccelStep], gemm_iters: list[int]
) -> list[StepReport]:
    """One report per step of a stream's run. With a timeline, step ``k`` is charged the cycles from the end of
    step ``k - 1``'s last instruction to the end of its own (the last step up to the end of the run), so the
    steps' cycles add up to the run's. Without one (a board), the first step carries the whole run."""
    total = result.counters.cycles
    ends = [0] * stream.count
    for e in result.timeline:
        k = bisect.bisect_right(stream.starts, e.index) - 1
        ends[k] = max(ends[k], e.end)
    cycles = []
    done = 0
    for k in range(stream.count):
        end = total if k == stream.count - 1 else max(done, ends[k])
        cycles.append(end - done if result.timeline else (total if k == 0 else 0))
        done = end
    note = "" if result.timeline else f"one stream of {stream.count} layers, not split without a timeline"
    return [
        StepReport(
            s.name,
            s.layer.get("op", "conv2d"),
            "accel",
            s.macs,
            c,
            it / c if c else 0.0,
            note=note if k == 0 else "",
            result=result,
            span=stream.span(k),
        )
        for k, (s, c, it) in enumerate(zip(steps, cycles, gemm_iters, strict=True))
    ]


def load(path: str | Path, backend: str = "sim", **options) -> Module:
    """Load a ``.vdla`` artifact and bind it to a device of ``backend``; ``options`` go to :class:`Module`
    (``cpu_kernels``, ``trust_native``, ...) and on to the device."""
    return Module(load_artifact(path), backend, **options)


def write_profile(report: RunReport, path: str | Path) -> None:
    """One Perfetto/Chrome trace of a run: the accelerator's stages and the CPU on separate tracks, the
    steps that ran laid end to end (accelerator time at the config's clock, CPU time as measured)."""
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "vdla model"}}]
    tracks = [*STAGES, "accelerator layers", "cpu"]
    events += [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": t}} for i, t in enumerate(tracks)
    ]
    now = 0.0
    run_start: dict[int, float] = {}  # id of a run's result -> when it started (the steps of a stream share one)
    for s in report.ran:
        if s.where == "accel":
            dur = s.cycles / report.clock_mhz
            t0 = run_start.setdefault(id(s.result), now)
            lo, hi = s.span or (0, 1 << 62)
            events.append(
                {
                    "name": s.name,
                    "ph": "X",
                    "pid": 0,
                    "tid": len(STAGES),
                    "ts": now,
                    "dur": dur,
                    "args": {"op": s.op, "cycles": s.cycles, "utilization": s.utilization},
                }
            )
            for e in s.result.timeline if s.result and s.result.timeline else []:
                if not lo <= e.index < hi:
                    continue
                events.append(
                    {
                        "name": e.label.split()[0],
                        "ph": "X",
                        "pid": 0,
                        "tid": STAGES.index(e.stage),
                        "ts": t0 + e.start / report.clock_mhz,
                        "dur": max(e.end - e.start, 1) / report.clock_mhz,
                        "args": {"asm": e.label},
                    }
                )
        else:
            dur = s.cpu_ms * 1e3
            events.append(
                {
                    "name": s.name,
                    "ph": "X",
                    "pid": 0,
                    "tid": len(STAGES) + 1,
                    "ts": now,
                    "dur": dur,
                    "args": {"op": s.op},
                }
            )
        now += dur
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
