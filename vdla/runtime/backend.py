"""The backend interface: every way of running a program (simulator, RTL, board) looks like this."""

from __future__ import annotations

from typing import Protocol

from vdla.config import HwConfig
from vdla.runtime.dram import Dram
from vdla.runtime.sim import RunResult, Simulator

BACKENDS = ("sim", "rtl")


class Backend(Protocol):
    """Runs an instruction stream that is already in DRAM and reports the counters."""

    name: str

    def make_dram(self) -> Dram:
        """The DRAM region programs of this backend live in."""

    def run(
        self, dram: Dram, insn_addr: int, insn_count: int, max_cycles: int | None = None, timeline: bool = False
    ) -> RunResult:
        """Execute ``insn_count`` instructions at ``insn_addr``; raise on deadlock, timeout or fault."""


class SimBackend:
    """The default backend: the bit-exact, cycle-modelled simulator in numpy."""

    name = "sim"

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.sim = Simulator(cfg)

    def make_dram(self) -> Dram:
        return Dram(self.cfg.dram_bytes, self.cfg.dram_base_addr)

    def run(
        self, dram: Dram, insn_addr: int, insn_count: int, max_cycles: int | None = None, timeline: bool = False
    ) -> RunResult:
        return self.sim.run(dram, insn_addr, insn_count, max_cycles, timeline)


def make_backend(name: str, cfg: HwConfig, **options) -> Backend:
    """Create a backend by name; hardware backends are imported only when asked for."""
    if name == "sim":
        return SimBackend(cfg, **options)
    if name == "rtl":
        from vdla.runtime.rtl import RtlBackend

        return RtlBackend(cfg, **options)
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
