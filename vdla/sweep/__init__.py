"""Design-space exploration of the accelerator (``vdla sweep``) and the executor it runs its points on.

This package sits above the library, like :mod:`vdla.experiments`: it may import any of vdla's packages, and
nothing in the library imports it. :mod:`vdla.sweep.executor` is generic (no sweep knowledge): ``vdla fuzz``
runs its programs on it too.
"""

from __future__ import annotations

import importlib

# the public names, imported on first use: `import vdla.sweep.executor` (each worker of a pool does) and the `vdla`
# command's parser load nothing else of the package
_NAMES = {
    "Outcome": "executor",
    "run_tasks": "executor",
    "SweepResult": "runner",
    "run": "runner",
    "SpecError": "spec",
    "SweepSpec": "spec",
    "load_spec": "spec",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str) -> object:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
