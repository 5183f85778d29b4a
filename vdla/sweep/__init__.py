"""Design-space exploration of the accelerator (``vdla sweep``) and the executor it runs its points on.

This package sits above the library, like :mod:`vdla.experiments`: it may import any of vdla's packages, and
nothing in the library imports it. :mod:`vdla.sweep.executor` is generic (no sweep knowledge): ``vdla fuzz``
runs its programs on it too.
"""

from __future__ import annotations

from vdla.sweep.executor import Outcome, run_tasks
from vdla.sweep.runner import SweepResult, run
from vdla.sweep.spec import SpecError, SweepSpec, load_spec

__all__ = ["Outcome", "SpecError", "SweepResult", "SweepSpec", "load_spec", "run", "run_tasks"]
