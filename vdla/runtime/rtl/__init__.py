"""The RTL backend: the accelerator's Verilog, cycle-accurate in Verilator, behind the backend API."""

from vdla.runtime.rtl.backend import RtlBackend
from vdla.runtime.rtl.build import RtlBuildError, build

__all__ = ["RtlBackend", "RtlBuildError", "build"]
