"""Running a lowered program on a device: its tensors bound to fresh DRAM buffers, its outputs read back and
unpacked (:class:`LayerRun`). Every compiled layer's ``run`` goes through :func:`run_bound`; the band tilings'
(pooling, depthwise) through :func:`run_band`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vdla.compiler.search import emit_program
from vdla.compiler.spec import CompileError
from vdla.graph.layout import pack_activation, unpack_activation
from vdla.runtime.backend import RunResult
from vdla.runtime.counters import Counters
from vdla.runtime.device import Device


@dataclass
class LayerRun:
    """The unpacked int8 output of one run and the backend's counters (``extra``: further outputs by name)."""

    out: np.ndarray
    result: RunResult
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def counters(self) -> Counters:
        return self.result.counters


def run_bound(
    dev: Device,
    lowering,
    stream,
    arrays: dict[str, np.ndarray],
    out_shape: tuple[int, ...],
    extra: dict[str, tuple[int, ...]] | None = None,
    **run_options,
) -> tuple[np.ndarray, RunResult]:
    """Run a lowered program on ``dev`` with ``arrays`` (by tensor name) copied to fresh DRAM buffers and an
    ``out`` buffer of ``lowering.tensor_bytes()["out"]``; returns the packed int8 output (``out_shape``) and the
    backend's result. ``extra`` (name -> packed shape): further int8 outputs, given buffers of their
    ``tensor_bytes()`` and replaced in the dict by what the run wrote. Every buffer is freed again, also when
    the run fails."""
    buffers = {name: dev.array(a) for name, a in arrays.items()}
    for name in ["out", *(extra or {})]:
        buffers[name] = dev.alloc(lowering.tensor_bytes()[name])
    try:
        result = dev.run_program(emit_program(lowering, stream, dev, buffers), **run_options)
        for name, shape in (extra or {}).items():
            extra[name] = buffers[name].read(np.int8, shape)
        return buffers["out"].read(np.int8, out_shape), result
    finally:
        for buf in buffers.values():
            buf.free()


def scratch_arrays(lowering) -> dict[str, np.ndarray]:
    """Zeroed int8 arrays of ``lowering``'s scratch tensors (``lowering.SCRATCH``: the DRAM its program stores
    planes to and loads them back from), sized by its ``tensor_bytes()``."""
    sizes = lowering.tensor_bytes()
    return {name: np.zeros(sizes[name], np.int8) for name in lowering.SCRATCH}


def run_band(
    dev: Device, lowering, stream, constants: dict[str, np.ndarray], x: np.ndarray, what: str, **run_options
) -> LayerRun:
    """Run a band-tiled layer (pooling, depthwise: a :class:`~vdla.compiler.tiling.BandLowering`) on ``dev``: its
    int8 NCHW input ``x``, checked against ``lowering.spec.shape`` (``what`` names the layer in the error), is
    packed as ``inp`` beside ``constants`` (the layer's other tensors by name), and the output unpacked."""
    sp, cfg, low = lowering.spec, lowering.cfg, lowering
    if x.dtype != np.int8 or x.shape != sp.shape:
        raise CompileError(f"{what} input must be int8 of shape {sp.shape}, got {x.dtype} {x.shape}")
    arrays = dict(constants, inp=pack_activation(x, cfg.batch, cfg.block_in))
    shape = (low.ng, low.cb, low.oh, low.ow, cfg.batch, cfg.block_out)
    extra = dict(run_options.pop("extra", None) or {})
    packed, result = run_bound(dev, low, stream, arrays, shape, extra, **run_options)
    return LayerRun(unpack_activation(packed, sp.shape[0], sp.shape[1]), result, extra)
