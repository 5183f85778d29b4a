"""The backend interface: every way of running a program (simulator, RTL, board) looks like this.

This module is the backend-neutral part of the runtime: the :class:`Backend` protocol, the
:class:`RunResult` a run returns (its counters live in :mod:`vdla.runtime.counters`), the one error
hierarchy every backend raises, rooted at :class:`RunError`, and the registry of backends by name
(:data:`BACKENDS`, :func:`register_backend`, :func:`make_backend`). Messages name the instruction (index and
disassembly) and the stage, the same on every backend, so a failing program reads alike on each.

The registry maps a name to where its backend class is (``"module:attribute"``), not to the class: this module
imports no backend, and a backend's module (with what it needs: Verilator's harness, pynq) is imported only
when that backend is made.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from vdla.config import ConfigError, HwConfig
from vdla.errors import VdlaError
from vdla.runtime.counters import Counters, TimelineEntry
from vdla.runtime.dram import Dram

# name -> "module:attribute" of the backend's class; make_backend(name, cfg, **options) calls it as cls(cfg, **options)
BACKENDS: dict[str, str] = {
    "sim": "vdla.runtime.sim.engine:Simulator",
    "rtl": "vdla.runtime.rtl.backend:RtlBackend",
    "pynq": "vdla.runtime.pynq_backend:PynqBackend",
}


class RunError(VdlaError, RuntimeError):
    """A program that could not run to completion on a backend."""


class FaultError(RunError):
    """The accelerator stopped on an error: an instruction it cannot fetch, decode or execute (a field or
    micro-op index outside its buffer, a DRAM access outside the region, a misplaced or missing FINISH,
    a misaligned program). The RTL reports these in STATUS.ERROR; the simulator checks the same conditions."""


class DeadlockError(RunError):
    """Every unfinished stage waits for something no other stage will provide."""


class CycleLimitError(RunError):
    """The program did not finish within the cycle limit."""


class TokenError(RunError):
    """The program finished with tokens left in a dependency queue: its pushes and pops do not pair up."""


class BackendError(RunError):
    """The backend cannot run programs of this configuration (e.g. an RTL model built for another one)."""


@dataclass
class RunResult:
    """What a backend reports about one run."""

    counters: Counters
    timeline: list[TimelineEntry] = field(default_factory=list)  # empty unless asked for
    wall_s: float = 0.0  # host time the backend took to run the program


class Backend(Protocol):
    """Runs an instruction stream that is already in DRAM and reports the counters.

    ``run`` raises a :class:`RunError` (never returns) when the program does not complete. With
    ``functional=False`` a backend may skip the data path and model only the timing: the counters are
    the same, but DRAM and the on-chip buffers may be left as they were.
    """

    name: str

    def make_dram(self) -> Dram:
        """The DRAM region programs of this backend live in."""

    def run(
        self,
        dram: Dram,
        insn_addr: int,
        insn_count: int,
        max_cycles: int | None = None,
        timeline: bool = False,
        functional: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Execute ``insn_count`` instructions at ``insn_addr``; raise on deadlock, timeout or fault.
        ``progress(cycles)``, if given, is called now and then with the cycles run so far (a backend that
        runs the program in one piece may call it only at the end)."""


def register_backend(name: str, target: str) -> None:
    """Make ``name`` a backend: ``target`` is ``"module:attribute"`` of a class (or factory) called as
    ``target(cfg, **options)`` that returns a :class:`Backend`; its module is imported when the backend is made.
    Registering a known name again is a ConfigError, so that no backend is replaced by accident."""
    module, sep, attr = target.partition(":")
    if not (sep and module and attr):
        raise ConfigError(f"backend {name!r}: target {target!r} is not 'module:attribute'")
    if name in BACKENDS:
        raise ConfigError(f"backend {name!r} is already registered (as {BACKENDS[name]})")
    BACKENDS[name] = target


def make_backend(name: str, cfg: HwConfig, **options) -> Backend:
    """Create the backend registered as ``name`` for ``cfg`` (see :data:`BACKENDS`), importing its module now;
    an unknown name is a ConfigError that lists the known ones."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}; the known backends are {', '.join(BACKENDS)}") from None
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except AttributeError as e:
        raise ConfigError(f"backend {name!r}: {module} has no attribute {attr!r} (registered as {target})") from e
    return cls(cfg, **options)
