"""The compiler's block IR: per-thread blocks of load, compute and store operations on named DRAM tensors.

A :class:`Block` is what one virtual thread does in one step of its loop nest: the operations of
each stage, with DRAM addresses given as (tensor name, element offset) so the same program can be
bound to any buffers. :mod:`vdla.compiler.vthreads` adds the dependency tokens and deals out the blocks of the
threads in turn; :func:`emit_op` turns one operation into a command of the runtime's builder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vdla.compiler.microcode import Limits, MicroKernel, lower_nest
from vdla.isa import AluOp, MemType
from vdla.runtime.commands import CommandBuilder
from vdla.runtime.dram import Buffer


@dataclass(frozen=True)
class Load:
    """A 2-D LOAD of ``y`` rows of ``x`` elements, ``stride`` apart, zero padded by (y0, y1, x0, x1)."""

    mem: MemType
    sram: int
    tensor: str
    offset: int
    y: int
    x: int
    stride: int
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True)
class Store:
    """A 2-D STORE of accumulator entries (their int8 OUT mirror) to ``tensor``."""

    sram: int
    tensor: str
    offset: int
    y: int
    x: int
    stride: int


@dataclass(frozen=True, eq=False)
class Gemm:
    """A GEMM instruction running ``kernel`` (``init``: each accumulator starts from its bias row, the
    kernel's outer loop stepping through them, or from zero)."""

    kernel: MicroKernel
    init: bool = False


@dataclass(frozen=True)
class Epi:
    """An EPI instruction: the OUT mirror mode and the first bias row of ``init`` GEMMs (None: no bias)."""

    req: bool
    relu: bool
    shift: int
    bias_base: int | None
    lut: bool = False  # OUT writes look their int8 value up in the activation table (a LOAD LUT before)
    dw: tuple[int, int, int] | None = None  # the depthwise mode of later GEMMs: (kernel, stride, pitch)
    src_out: bool = False  # later GEMMs read their input rows from OUT (the int8 mirror of ACC), not INP
    mul: tuple[int, int] | None = None  # (first multiplier row, shift): the OUT mirror multiplies GEMM writes
    lut_table: int = 0  # the activation table ``lut`` reads (of the config's lut_tables)


@dataclass(frozen=True, eq=False)
class Alu:
    """An ALU instruction running ``kernel``, with an immediate operand or the kernel's src."""

    op: AluOp
    kernel: MicroKernel
    imm: int | None = None
    shift: int = 0  # a MUL reading the kernel's src (an SQR) rounds its 64-bit product right by this
    reset: bool = False  # the destination reads as zero: ADD copies src (or writes imm)


@dataclass(frozen=True, eq=False)
class PreloadKernel:
    """Make ``kernel``'s micro-ops resident in the UOP buffer (a compute-stage LOAD UOP, nothing runs)."""

    kernel: MicroKernel


Op = Load | Store | Gemm | Alu | PreloadKernel | Epi
# the compute of a block that only waits (for the store -> compute token of its thread's previous block's stores):
# the OUT mirror plain, no bias
WAIT = (Epi(False, False, 0, None),)


@dataclass(frozen=True)
class Block:
    """One step of one virtual thread.

    ``loads`` run on the load stage (they overwrite the thread's INP/WGT share), ``compute`` on the
    compute stage (it reads that share and updates the thread's accumulators), ``stores`` on the store
    stage (they read the thread's accumulators). A block in ``parts`` hands each part's accumulators to
    the store stage as soon as that part's compute is done, one compute->store token per part.
    """

    thread: int
    loads: tuple[Load, ...]
    compute: tuple[Op, ...]
    stores: tuple[Store, ...]
    parts: tuple[tuple[int, int], ...] = ()  # (compute ops, stores) done by the end of each part, if split


def alu_nest(op: AluOp, nest, dst: int, src: int, limits: Limits, **kw) -> Alu:
    """An ALU instruction over ``nest`` ((extent, (dst stride, src stride)) axes) from ACC rows ``dst``, ``src``
    (``kw``: the :class:`Alu` fields imm, shift, reset)."""
    full = tuple((e, (d, s, 0)) for e, (d, s) in nest)
    return Alu(op, lower_nest(full, (dst, src, 0), limits), **kw)


def alu_held(op: AluOp, rows: int, dst: int, src: int, limits: Limits, **kw) -> Alu:
    """An ALU instruction over ``rows`` consecutive ACC rows from ``dst``, each with the one row ``src``: on the inner
    loop, so that the row is read once and held (a cycle per row instead of ``alu_ii``; a MUL may pipeline,
    :mod:`vdla.isa.pipe`). An SQR reads no source row: over rows on the inner loop it pipelines too. A single-axis
    nest would put the rows on the outer loop (:func:`lower_nest`)."""
    if rows > limits.max_iter:
        return alu_nest(op, ((rows, (1, 0)),), dst, src, limits, **kw)
    uops = np.array([[dst, src, 0]], np.int64)
    uops.setflags(write=False)
    return Alu(op, MicroKernel(uops, 1, rows, (0, 0, 0), (1, 0, 0)), **kw)


def gemm_nest(nest, base: tuple[int, int, int], limits: Limits, init: bool = True, pin_outer: bool = False) -> Gemm:
    """A GEMM over ``nest`` ((extent, (dst, src, wgt) strides) axes) from ``base``; ``pin_outer``: the first
    axis on the outer loop (an ``init`` GEMM's bias row follows it)."""
    return Gemm(lower_nest(tuple(nest), base, limits, pin_outer), init=init)


def emit_op(op: Op, cmd: CommandBuilder, buffers: Mapping[str, Buffer]) -> None:
    """Append one operation to a command builder, binding tensor names to buffers."""
    if isinstance(op, Load):
        cmd.load(op.mem, op.sram, buffers[op.tensor], op.offset, op.y, op.x, op.stride, op.pad)
    elif isinstance(op, Store):
        cmd.store(op.sram, buffers[op.tensor], op.offset, op.y, op.x, op.stride)
    elif isinstance(op, Gemm):
        k = op.kernel
        cmd.gemm(k.uops, k.iter_out, k.iter_in, k.factors(0), k.factors(1), k.factors(2), init=op.init)
    elif isinstance(op, Epi):
        cmd.epi(op.req, op.relu, op.shift, op.bias_base, op.lut, op.dw, op.src_out, op.mul, op.lut_table)
    elif isinstance(op, PreloadKernel):
        cmd.load_kernel(op.kernel.uops)
    else:
        k = op.kernel
        cmd.alu(
            op.op, k.uops, k.iter_out, k.iter_in, k.factors(0), k.factors(1), imm=op.imm, reset=op.reset, shift=op.shift
        )
