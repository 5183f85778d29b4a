"""vdla: toolchain for a VDLA/VTA-class deep-learning accelerator.

``vdla.compile(model, ...)`` and ``vdla.load(path, ...)`` compile and load whole models
(:mod:`vdla.model`); they are imported on first use, so ``import vdla`` stays light.
"""

# The package's one version string: pyproject.toml reads it (dynamic version), the installed metadata has it.
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("compile", "load"):
        import vdla.model

        return getattr(vdla.model, name)
    raise AttributeError(f"module 'vdla' has no attribute {name!r}")
