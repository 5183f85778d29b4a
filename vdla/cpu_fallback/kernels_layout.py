"""LLVM IR emitters of the indexing kernels: per-axis gathers (``take``), gathers and scatters by flat offsets.

Registered on :func:`vdla.cpu_fallback.kernels.emit`'s dispatcher (imported by :mod:`vdla.cpu_fallback.jit`).
Every index these kernels read was checked when the spec was made: the per-axis tables are compile-time
constants inside the input, and flat offsets are constant parameters whose every entry the type rule
checked (:func:`vdla.graph.ops.offsets_type`), so no kernel bounds-checks at run time.
"""

from __future__ import annotations

import math

from llvmlite import ir

from vdla.cpu_fallback.codegen import KernelBuilder
from vdla.cpu_fallback.kernels import _emit, contiguous_strides
from vdla.cpu_fallback.lltypes import I64, LL_TYPES, i64
from vdla.cpu_fallback.specs import GatherSpec, ScatterSpec, TakeSpec
from vdla.graph.types import is_float

# an offset no sum of in-bounds offsets can cancel: marks a -1 (fill) entry of a per-axis table
FILL_OFFSET = -(1 << 40)


@_emit.register
def _take(spec: TakeSpec, kb: KernelBuilder) -> None:
    """Loops over the output axes up to the trailing run of whole axes, which is one contiguous copy;
    each gathered axis adds its table's (premultiplied) input offset. With fill entries, a negative offset
    reads the fill value (the load itself reads element 0, always in bounds), the attribute or the one
    element of the fill input."""
    b, dt, x, y = kb.b, spec.x.dtype, kb.inputs[0], kb.out
    xs, ys = spec.x.shape, spec.out.shape
    src, dst = contiguous_strides(xs), contiguous_strides(ys)
    n_outer = len(xs)
    while n_outer and spec.index[n_outer - 1] is None:
        n_outer -= 1
    inner = math.prod(ys[n_outer:])
    tables = {
        ax: kb.table([i * src[ax] if i >= 0 else FILL_OFFSET for i in t])
        for ax, t in enumerate(spec.index[:n_outer])
        if t is not None
    }
    fill = any(t is not None and -1 in t for t in spec.index)
    value = ir.Constant(LL_TYPES[dt], spec.value) if spec.fill is None else kb.load(dt, kb.inputs[1], 0)
    with kb.loops(list(ys[:n_outer])) as idx:
        off = i64(0)
        for ax, i in enumerate(idx):
            off = b.add(off, tables[ax](i) if ax in tables else b.mul(i, i64(src[ax])))
        row = kb.linear(idx, dst[:n_outer])
        with kb.loop(0, inner) as j:
            o = b.add(off, j)
            if fill:
                inside = b.icmp_signed(">=", o, i64(0))
                v = b.select(inside, kb.load(dt, x, b.select(inside, o, i64(0))), value)
            else:
                v = kb.load(dt, x, o)
            kb.store(v, dt, y, b.add(row, j))


@_emit.register
def _gather(spec: GatherSpec, kb: KernelBuilder) -> None:
    """One loop over the output: load the offset, load the element it names."""
    b, dt, (x, index), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    with kb.loop(0, spec.out.size) as k:
        o = b.sext(kb.load("int32", index, k), I64)
        kb.store(kb.load(dt, x, o), dt, y, k)


@_emit.register
def _scatter(spec: ScatterSpec, kb: KernelBuilder) -> None:
    """Copy the input, then apply the updates one after the other in order (a later update of the same
    element sees the earlier one)."""
    b, dt, (x, index, updates), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    fl = is_float(dt)
    with kb.loop(0, spec.x.size) as k:
        kb.store(kb.load(dt, x, k), dt, y, k)
    combine = {
        "add": b.fadd if fl else b.add,
        "mul": b.fmul if fl else b.mul,
        "max": kb.fmax if fl else kb.smax,
        "min": kb.fmin if fl else kb.smin,
    }
    with kb.loop(0, spec.updates.size) as k:
        o = b.sext(kb.load("int32", index, k), I64)
        u = kb.load(dt, updates, k)
        if spec.reduction != "none":
            u = combine[spec.reduction](kb.load(dt, y, o), u)
        kb.store(u, dt, y, o)
