"""Performance counters and the per-instruction timeline, shared by every backend."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

STAGES = ("load", "compute", "store")


@dataclass
class StageCounters:
    """Cycles of one stage: executing (busy), waiting on a token (stall), nothing to do (idle)."""

    busy: int = 0
    stall: int = 0
    idle: int = 0
    insns: int = 0


@dataclass
class Counters:
    """What one run did: cycles, stage activity, bytes moved, work done."""

    cycles: int = 0
    load: StageCounters = field(default_factory=StageCounters)
    compute: StageCounters = field(default_factory=StageCounters)
    store: StageCounters = field(default_factory=StageCounters)
    bytes_loaded: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("INP", "WGT", "UOP", "ACC", "ACC_8BIT", "LUT", "UOP_PRE"), 0)
    )
    bytes_stored: int = 0
    insn_bytes: int = 0
    gemm_iters: int = 0  # multiply-accumulate uop-iterations
    gemm_reset_iters: int = 0
    alu_iters: int = 0
    insn_counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("LOAD", "STORE", "GEMM", "ALU", "FINISH", "EPI"), 0)
    )

    @property
    def dram_bytes(self) -> int:
        """Bytes moved between DRAM and the accelerator's buffers (instruction fetch excluded)."""
        return sum(self.bytes_loaded.values()) + self.bytes_stored

    @property
    def utilization(self) -> float:
        """Fraction of cycles in which the GEMM core did a uop-iteration."""
        return self.gemm_iters / self.cycles if self.cycles else 0.0

    def stage(self, name: str) -> StageCounters:
        return getattr(self, name)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(dram_bytes=self.dram_bytes, utilization=self.utilization)
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


@dataclass
class TimelineEntry:
    """One instruction's execution interval on its stage."""

    index: int
    stage: str
    start: int
    end: int
    label: str


def write_chrome_trace(timeline: list[TimelineEntry], path: str | Path, clock_mhz: float) -> None:
    """Write the timeline as Chrome/Perfetto trace JSON (one track per stage, times in microseconds)."""
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "vdla"}}]
    events += [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": s}} for i, s in enumerate(STAGES)
    ]
    for e in timeline:
        words = e.label.split()
        events.append(
            {
                "name": " ".join(words[:2] if words[0] in ("load", "store", "alu") else words[:1]),
                "ph": "X",
                "pid": 0,
                "tid": STAGES.index(e.stage),
                "ts": e.start / clock_mhz,
                "dur": max(e.end - e.start, 1) / clock_mhz,
                "args": {"insn": e.index, "asm": e.label, "start_cycle": e.start, "end_cycle": e.end},
            }
        )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
