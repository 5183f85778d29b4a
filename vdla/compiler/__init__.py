"""The tensorizing compiler: conv2d and dense onto the GEMM intrinsic, tiled to the on-chip buffers,
with virtual threads lowered to dependency tokens and a cached schedule search (docs/compiler.md)."""

from vdla.compiler.cache import ScheduleCache
from vdla.compiler.conv2d import CompiledConv2d, CompiledDense, compile_conv2d, compile_dense
from vdla.compiler.run import LayerRun
from vdla.compiler.schedule import Schedule
from vdla.compiler.spec import CompileError, Conv2dSpec, EpilogueSpec, Fusions
from vdla.graph.layout import pack_activation, pack_channels, pack_weights, unpack_activation, unpack_weights

__all__ = [
    "CompileError",
    "CompiledConv2d",
    "CompiledDense",
    "Conv2dSpec",
    "EpilogueSpec",
    "Fusions",
    "LayerRun",
    "Schedule",
    "ScheduleCache",
    "compile_conv2d",
    "compile_dense",
    "pack_activation",
    "pack_channels",
    "pack_weights",
    "unpack_activation",
    "unpack_weights",
]
