"""The bit-exact, cycle-modelled simulator (the default backend)."""

from vdla.runtime.sim.engine import CycleLimitError, DeadlockError, RunResult, SimError, Simulator

__all__ = ["CycleLimitError", "DeadlockError", "RunResult", "SimError", "Simulator"]
