"""Schedule search: enumerate the tilings and thread counts that fit (the most promising also with half
their rows), rank them with the analytical model, confirm the best few with the timing-only simulator on the
emitted programs, cache the winner: of those within :data:`TIE` of the fastest, the one with the shortest
compute span.

The search reaches the simulator only through the runtime's public interface: a ``sim`` :class:`Device`
running the program with ``functional=False``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from vdla.compiler.cache import SCHEMA, ScheduleCache, cache_key
from vdla.compiler.conv_emit import conv_prologue, conv_threads
from vdla.compiler.conv_lowering import ConvLowering
from vdla.compiler.costmodel import CostModel, Estimate
from vdla.compiler.schedule import Schedule
from vdla.compiler.spec import CompileError
from vdla.compiler.tiling import candidate_tiles, half_rows
from vdla.compiler.vthreads import Stream, emit_stream, lower_vthreads
from vdla.isa import Insn
from vdla.isa.instructions import LoopInsn
from vdla.runtime.backend import RunResult
from vdla.runtime.counters import Counters
from vdla.runtime.device import Device

MAX_AUTO_VTHREADS = 4
CONFIRM = 6  # at most this many best-estimated candidates are confirmed with the timing-only simulator,
CONFIRM_INSNS = 4000  # as long as their programs total this many instructions (the best two always are)
HALVED = 24  # the candidates of the lowest bounds also run with half their rows (tiling.half_rows)
SLACK = 0.005  # skip candidates whose lower bound is within this fraction of the second-best estimate
TIE = 0.01  # among confirmed schedules this close to the fastest, take the shortest compute span (then the fewest
# DRAM bytes): a model's layers run joined (vdla.compiler.stream), each one's fill and drain under its neighbours'


@dataclass
class SearchResult:
    """The chosen schedule and what choosing it took."""

    schedule: Schedule
    cycles: int  # timing-only simulation of the chosen program
    candidates: int  # schedules that fit (all bounded by the cost model, the promising ones estimated)
    simulated: int  # of which confirmed with the simulator
    seconds: float
    cached: bool = False


def build_stream(low: ConvLowering, s: Schedule) -> Stream:
    """The round-robin, synchronised blocks of a schedule, after its prologue."""
    threads = conv_threads(low, s)
    return lower_vthreads(threads, conv_prologue(low, threads))


def emit_program(low: ConvLowering, stream: Stream, dev: Device, buffers: dict | None = None) -> list[Insn]:
    """The finished instruction stream on ``dev`` (scratch buffers when none are given)."""
    cmd = dev.commands()
    owned = buffers is None
    buffers = buffers or {name: dev.alloc(n) for name, n in low.tensor_bytes().items()}
    try:
        emit_stream(stream, cmd, buffers)
        return cmd.finish()
    finally:
        if owned:
            for buf in buffers.values():
                buf.free()


def _timed_run(low: ConvLowering, stream: Stream, timeline: bool = False) -> tuple[list[Insn], RunResult]:
    """The program and its run under the timing-only simulator."""
    dev = Device(low.cfg, backend="sim")
    insns = emit_program(low, stream, dev)
    return insns, dev.run_program(insns, functional=False, timeline=timeline)


def timed(low: ConvLowering, stream: Stream) -> Counters:
    """Counters of a program under the timing-only simulator."""
    return _timed_run(low, stream)[1].counters


def timed_span(low: ConvLowering, stream: Stream) -> tuple[Counters, int]:
    """Counters of a program under the timing-only simulator, and its compute span: from the start of its first
    GEMM or ALU instruction to the end of its last compute-stage instruction (what it adds to a joined stream,
    whose neighbours' loads and stores overlap the rest)."""
    insns, run = _timed_run(low, stream, timeline=True)
    compute = [e for e in run.timeline if e.stage == "compute"]
    first = min((e.start for e in compute if isinstance(insns[e.index], LoopInsn)), default=0)
    return run.counters, max(e.end for e in compute) - first


@dataclass(frozen=True)
class TimedChoice:
    """The fastest of a lowering's candidate schedules on the timing-only simulator (pooling, depthwise: a
    handful of candidates, each timed): the schedule, its stream and cycles, and how many were timed."""

    schedule: object
    stream: Stream
    cycles: int
    candidates: int


def fastest(low, candidates: list) -> TimedChoice:
    """The first of ``candidates`` (schedules of ``low``, which builds each one's ``stream``) with the fewest
    cycles on the timing-only simulator."""
    if not candidates:
        raise ValueError("no candidate schedule to time")
    cycles, best = min((timed(low, low.stream(s)).cycles, i) for i, s in enumerate(candidates))
    return TimedChoice(candidates[best], low.stream(candidates[best]), cycles, len(candidates))


def cached_fastest(
    low, candidates: Callable[[], list], kind: type, key: str, cache: ScheduleCache | None, schedule=None
):
    """:func:`fastest` of ``candidates()``, or the choice ``cache`` holds under ``key`` (schema and config
    prefixed): the schedule (a frozen dataclass of type ``kind``) and its cycles, stored after a search. A
    ``schedule`` given is taken as it is (timed, not cached)."""
    if schedule is not None:
        return fastest(low, [schedule])
    full = f"v{SCHEMA}:{low.cfg.name}:{low.cfg.hash:08x}:{key}"
    hit = cache.get(full) if cache else None
    if hit:
        schedule = kind(**hit["schedule"])
        return TimedChoice(schedule, low.stream(schedule), hit["cycles"], hit["candidates"])
    choice = fastest(low, candidates())
    if cache:
        record = {"schedule": asdict(choice.schedule), "cycles": choice.cycles, "candidates": choice.candidates}
        cache.put(full, record)
    return choice


def thread_counts(low: ConvLowering, vthreads: int | str) -> list[int]:
    """Thread counts to search: the requested one (checked), or every count up to 4 that fits."""
    if vthreads == "auto":
        counts = []
        for v in range(1, MAX_AUTO_VTHREADS + 1):
            try:
                low.check_minimal(v)
            except CompileError:
                if v == 1:
                    raise
                break
            counts.append(v)
        return counts
    if not isinstance(vthreads, int) or vthreads < 1:
        raise CompileError(f"vthreads must be a positive integer or 'auto', got {vthreads!r}")
    low.check_minimal(vthreads)
    return [vthreads]


def _unique(schedules: Iterable[Schedule]) -> list[Schedule]:
    """``schedules`` without repeats, in their first order. Not a set: a set of schedules iterates in the order
    of their string hashes, which differ between processes, and equal bounds keep that order into the choice
    (the same layer took different schedules from run to run)."""
    return list(dict.fromkeys(schedules))


def search(
    low: ConvLowering, vthreads: int | str = "auto", cache: ScheduleCache | None = None, confirm: int = CONFIRM
) -> SearchResult:
    """The fastest schedule found for a layer (from the cache when it has one)."""
    t0 = time.perf_counter()
    key = cache_key(low.cfg, low.spec, low.epi, vthreads, low.view, low.copy_view, low.up, low.zero_key)
    hit = cache.get(key) if cache else None
    if hit:
        return SearchResult(
            Schedule.from_dict(hit["schedule"]),
            hit["cycles"],
            hit["candidates"],
            hit["simulated"],
            time.perf_counter() - t0,
            cached=True,
        )
    auto = vthreads == "auto"
    cands = [s for v in thread_counts(low, vthreads) for s in candidate_tiles(low, v, skip_idle=auto and v > 1)]
    if not cands:
        raise CompileError(
            f"no tiling of {low.spec.key()} fits config {low.cfg.name!r}: "
            f"{'; '.join(low.problems(Schedule(1, 1, 1, 1, 1)))}"
        )
    model = CostModel(low)
    bounded = sorted(((model.bound(s), s) for s in cands), key=lambda bs: bs[0])
    halves = _unique(h for _, s in bounded[:HALVED] if (h := half_rows(low, s)) is not None and h not in cands)
    bounded = sorted(bounded + [(model.bound(s), s) for s in halves], key=lambda bs: bs[0])
    best: list[tuple[Estimate, Schedule]] = []  # estimated candidates, best first
    for bound, s in bounded:
        if len(best) >= 2 and bound >= best[1][0].cycles * (1 - SLACK):
            break  # estimates are never below their bound: later candidates are at most SLACK better
        best = sorted(best + [(model.estimate(s), s)], key=lambda es: (es[0].cycles, es[0].load))
    measured, insns = [], 0
    for k, (_, s) in enumerate(best[:confirm]):
        stream = build_stream(low, s)
        insns += sum(len(b.loads) + len(b.compute) + len(b.stores) for b in stream.blocks)
        if k >= 2 and insns > CONFIRM_INSNS:
            break
        c, span = timed_span(low, stream)
        measured.append((c.cycles, span, c.dram_bytes, s))
    fastest = min(m[0] for m in measured)
    cycles, _, _, best_schedule = min((m for m in measured if m[0] <= fastest * (1 + TIE)), key=lambda m: m[1:3])
    result = SearchResult(best_schedule, cycles, len(bounded), len(measured), time.perf_counter() - t0)
    if cache:
        cache.put(
            key,
            {
                "schedule": best_schedule.to_dict(),
                "cycles": cycles,
                "candidates": result.candidates,
                "simulated": result.simulated,
                "search_seconds": round(result.seconds, 3),
            },
        )
    return result
