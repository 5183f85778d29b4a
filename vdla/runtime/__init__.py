"""The runtime: device, DRAM buffers, command builder and backends."""

from vdla.runtime.commands import CommandBuilder, CommandError
from vdla.runtime.counters import Counters, StageCounters, TimelineEntry, write_chrome_trace
from vdla.runtime.device import Device
from vdla.runtime.dram import Buffer, Dram, DramError
from vdla.runtime.sim import CycleLimitError, DeadlockError, RunResult, SimError, Simulator

__all__ = [
    "Buffer",
    "CommandBuilder",
    "CommandError",
    "Counters",
    "CycleLimitError",
    "DeadlockError",
    "Device",
    "Dram",
    "DramError",
    "RunResult",
    "SimError",
    "Simulator",
    "StageCounters",
    "TimelineEntry",
    "write_chrome_trace",
]
