"""The bit-exact, cycle-modelled simulator: the default backend (``make_backend("sim", cfg)``)."""

from vdla.runtime.sim.engine import Simulator

__all__ = ["Simulator"]
