"""vdla: toolchain for a VDLA/VTA-class deep-learning accelerator.

``vdla.compile(model, ...)`` and ``vdla.load(path, ...)`` compile and load whole models
(:mod:`vdla.model`); they are imported on first use, so ``import vdla`` stays light.
"""

from vdla._version import __version__

__all__ = ["__version__", "compile", "load"]


def __getattr__(name: str):
    if name in ("compile", "load"):
        import vdla.model

        return getattr(vdla.model, name)
    raise AttributeError(f"module 'vdla' has no attribute {name!r}")
