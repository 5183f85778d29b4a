"""The RTL backend: the accelerator's Verilog, cycle-accurate in Verilator, behind the backend API.

The model is Verilated on first use (:mod:`vdla.runtime.rtl.verilate`); the chip-design tools around the
same RTL (lint, fit, cocotb benches, the package generator) are :mod:`vdla.hw`.
"""

from vdla.hw.toolchain import RtlBuildError
from vdla.runtime.rtl.backend import RtlBackend
from vdla.runtime.rtl.verilate import build

__all__ = ["RtlBackend", "RtlBuildError", "build"]
