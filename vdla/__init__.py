"""vdla: toolchain for a VDLA/VTA-class deep-learning accelerator."""

__version__ = "0.1.0"
