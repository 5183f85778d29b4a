"""The runtime: device, DRAM buffers, command builder and backends.

The backend-neutral names (what a run returns and what it raises) come from
:mod:`vdla.runtime.backend`; every backend (``sim``, ``rtl``) returns :class:`RunResult` and raises
:class:`RunError` subclasses.
"""

from vdla.runtime.backend import (
    Backend,
    BackendError,
    CycleLimitError,
    DeadlockError,
    FaultError,
    RunError,
    RunResult,
    TokenError,
    make_backend,
)
from vdla.runtime.commands import CommandBuilder, CommandError, CommandTarget
from vdla.runtime.counters import Counters, StageCounters, TimelineEntry, write_chrome_trace
from vdla.runtime.device import Device
from vdla.runtime.dram import Buffer, Dram, DramError
from vdla.runtime.sim import Simulator

__all__ = [
    "Backend",
    "BackendError",
    "Buffer",
    "CommandBuilder",
    "CommandError",
    "CommandTarget",
    "Counters",
    "CycleLimitError",
    "DeadlockError",
    "Device",
    "Dram",
    "DramError",
    "FaultError",
    "RunError",
    "RunResult",
    "Simulator",
    "StageCounters",
    "TimelineEntry",
    "TokenError",
    "make_backend",
    "write_chrome_trace",
]
