"""Squeeze-excite's channel product on the ALU (:class:`~vdla.compiler.spec.ChannelScaleSpec`): each pixel of
an int8 NCHW tensor times its channel's int8 gate, requantized, on packed activations in DRAM.

The band tiling of the ALU's layers (:class:`~vdla.compiler.pool.AluBandLowering`) over a 1x1 window: a tile's
input pixels are LOADed and copied into its accumulators by the identity GEMM, then a compute-stage LOAD
ACC_8BIT brings the tile's rows of the gate ``s`` (the DRAM tensor "res", packed like an output) above its
window, one MUL by the multiplier row makes them ``s[c] * m`` (exact: the spec's multiplier times any int8 fits
int32), and one MUL holding each channel block's row multiplies the copied window in place with the shift:
``mul_shift(x, s * m, shift)``, the same exact product rounded once as ``mul_shift(x * s, m, shift)``. The OUT
mirror clamps to int8 (or [0, 127]) on that last write; other bounds take a CLIP pass.

The scale fused before the 1x1 convolution reading it is a gated input of that layer instead
(:attr:`vdla.compiler.spec.Fusions.gate`).

Invariant: the program computes exactly :func:`channel_scale_oracle` of the spec (bit for bit, on every
backend).
"""

from __future__ import annotations

import numpy as np

from vdla.compiler.blocks import Alu, Block, Load, Op
from vdla.compiler.cache import ScheduleCache
from vdla.compiler.pool import AluBandLowering, CompiledAluLayer, PoolSchedule, requantize_passes
from vdla.compiler.run import run_band
from vdla.compiler.spec import ChannelScaleSpec, CompileError, OutputView
from vdla.compiler.tiling import BandTile
from vdla.config import DEFAULT_PRESET, load_config
from vdla.graph.layout import pack_activation
from vdla.isa import AluOp, MemType
from vdla.isa.arith import requantize
from vdla.runtime.device import Device


def channel_scale_oracle(x: np.ndarray, spec: ChannelScaleSpec, gate: np.ndarray) -> np.ndarray:
    """The numpy definition of what the program computes: int8 ``x`` times the int8 ``gate`` (N, C, 1, 1),
    requantized to int8."""
    return requantize(x.astype(np.int64) * gate.astype(np.int64), spec.multiplier, spec.shift, *spec.clip)


class ChannelScaleLowering(AluBandLowering):
    """A channel scale on one config (module docstring): each tile's window is its output, multiplied in place;
    one row of the gate a channel block above the windows."""

    spec: ChannelScaleSpec
    firsts = ("rows",)  # no window to reduce: one first axis
    mult_row = True  # the gate rows are multiplied by the multiplier row

    def per_block(self, noh: int, first: str = "rows") -> tuple[int, int, int]:
        """(window, 0, its gate row) of one channel block of a tile of ``noh`` rows."""
        return self.in_rows(noh) * self.cols, 0, 1

    def tensor_bytes(self) -> dict[str, int]:
        """The ALU layer's tensors and the gate ("res"), in the order scratch buffers are allocated: the gate
        before the multiplier row."""
        out = super().tensor_bytes()
        out["res"] = self.ng * self.cb * self.cfg.out_elem_bytes
        out["mult"] = out.pop("mult")
        return out

    def block(self, thread: int, t: BandTile, s: PoolSchedule, eye: bool = False) -> Block:
        """The loads, passes and stores of one tile: its window copied into its accumulators
        (:meth:`~vdla.compiler.pool.AluBandLowering.window_copy`), scaled in place (:meth:`scale`: the multiplier
        and shift), clamped by the OUT mirror or a CLIP pass (:func:`~vdla.compiler.pool.requantize_passes`), and
        stored."""
        acc0, loads, copy, _ = self.window_copy(thread, t, s, eye)
        win = self.per_block(s.toh)[0]
        nest = ((t.noc, (win, 0)), (t.noh * self.ow, (1, 0)))
        clamp = requantize_passes(self.kernel, nest, acc0, None, 0, self.spec.clip)
        compute: list[Op] = [copy, *self.scale(t, acc0, acc0 + t.noc * win, win), *clamp]
        return Block(thread, tuple(loads), tuple(compute), tuple(self.stores(t, acc0, win)))

    def scale(self, t: BandTile, base: int, srow: int, win: int) -> list[Op]:
        """The tile's gate rows LOADed (ACC_8BIT, compute stage) to ``srow`` and multiplied by the multiplier
        row, then each channel block's window multiplied in place by its row with the shift (one MUL holding it
        over the block's pixels)."""
        load = Load(MemType.ACC_8BIT, srow, "res", t.ng * self.cb + t.cb, 1, t.noc, t.noc)
        rows = Alu(AluOp.MUL, self.kernel(((t.noc, (1, 0)),), (srow, self.rows_base)))
        nest = ((t.noc, (win, 1)), (t.noh * self.ow, (1, 0)))
        return [load, rows, Alu(AluOp.MUL, self.kernel(nest, (base, srow), pin_outer=True), shift=self.spec.shift)]


class CompiledChannelScale(CompiledAluLayer):
    """A channel scale compiled for one config (:class:`~vdla.compiler.pool.CompiledAluLayer`)."""

    spec: ChannelScaleSpec

    def run(self, dev: Device, x: np.ndarray, gate: np.ndarray | None = None, max_cycles: int | None = None):
        """Run on ``dev``: ``x`` int8 NCHW and its int8 ``gate`` (N, C, 1, 1); returns a
        :class:`~vdla.compiler.run.LayerRun`."""
        sp, cfg = self.spec, self.cfg
        if gate is None or gate.dtype != np.int8 or gate.shape != sp.gate_shape:
            got = "none" if gate is None else f"{gate.dtype} {gate.shape}"
            raise CompileError(f"a channel scale needs an int8 gate of shape {sp.gate_shape}, got {got}")
        constants = dict(self.constants, res=pack_activation(gate, cfg.batch, cfg.block_out))
        return run_band(dev, self.lowering, self.stream, constants, x, "channel scale", max_cycles=max_cycles)


def compile_channel_scale(
    spec: ChannelScaleSpec,
    config=DEFAULT_PRESET,
    schedule: PoolSchedule | None = None,
    out_view: OutputView | None = None,
    cache: ScheduleCache | None = None,
) -> CompiledChannelScale:
    """Compile a channel scale for ``config`` (see the module docstring); ``out_view``: store its channel blocks
    into their blocks of a larger tensor (a concatenation's part); ``cache`` keeps the schedule chosen (or
    ``schedule`` is taken as given)."""
    return CompiledChannelScale(ChannelScaleLowering(spec, load_config(config), out_view), schedule, cache)
