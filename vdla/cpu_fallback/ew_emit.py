"""Elementwise emitter: the CPU backend's code generation for the elementwise steps of ``vdla.graph.ew``.

:class:`ChainEmitter` emits the steps of a :class:`ChainSpec` on one element, loading tensor operands at
their broadcast offsets (:func:`broadcast_strides`); :func:`emit_step` emits one step. Invariants: the
dtype of every emitted value is the one :func:`vdla.graph.ew.step_result_dtype` infers, integer
arithmetic runs in int32 (the requantize shift in 64 bits) as ``vdla.isa.arith`` specifies, and the
math calls no libm, so that LLVM's vectorizers can widen it.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from vdla.cpu_fallback.codegen import KernelBuilder
from vdla.cpu_fallback.lltypes import F32, I8, I32, I64, LL_TYPES, i64
from vdla.cpu_fallback.specs import ChainSpec
from vdla.graph.ew import Arg, Const, EwStep, step_result_dtype
from vdla.graph.types import is_float
from vdla.isa.arith import MAX_SHIFT, MUL_MAX_SHIFT


def broadcast_strides(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a C-contiguous ``shape`` viewed as broadcast to ``out_shape`` (0 on broadcast)."""
    pad = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, s = [], 1
    for d in reversed(pad):
        strides.append(s if d > 1 else 0)
        s *= d
    return strides[::-1]


Operand = tuple[ir.Value, str] | int | float  # a loaded tensor value with its dtype, or a constant


class ChainEmitter:
    """Emits the steps of a :class:`ChainSpec` on one element.

    ``ptrs[i]`` is the data pointer of chain input ``i`` (None for an accumulator supplied by the caller).
    """

    def __init__(self, kb: KernelBuilder, spec: ChainSpec, ptrs: list[ir.Value | None]) -> None:
        self.kb, self.spec, self.ptrs = kb, spec, ptrs
        self.strides = [broadcast_strides(t.shape, spec.out.shape) for t in spec.inputs]

    def offsets_at(self, coords: list[ir.Value]) -> list[ir.Value]:
        """Element offsets of every input at output coordinates ``coords``."""
        return [self.kb.linear(coords, strides) for strides in self.strides]

    def apply(self, primary: ir.Value, offsets: list[ir.Value | None]) -> ir.Value:
        """Run all steps on ``primary`` (input 0's value), loading tensor operands at ``offsets``."""
        loaded: dict[int, ir.Value] = {0: primary}

        def operand(o: Const | Arg) -> Operand:
            if isinstance(o, Const):
                return o.value
            if o.index not in loaded:
                t = self.spec.inputs[o.index]
                loaded[o.index] = self.kb.load(t.dtype, self.ptrs[o.index], offsets[o.index])
            return loaded[o.index], self.spec.inputs[o.index].dtype

        value, dtype = primary, self.spec.inputs[0].dtype
        for step in self.spec.steps:
            out = step_result_dtype(step, dtype, self.spec.inputs)
            value = emit_step(self.kb, step, value, dtype, out, [operand(o) for o in step.operands])
            dtype = out
        return value


def _as_int(kb: KernelBuilder, o: Operand, to: ir.IntType) -> ir.Value:
    if isinstance(o, tuple):
        return kb.widen(o[0], o[1], to)
    return ir.Constant(to, int(o))


def _as_float(kb: KernelBuilder, o: Operand) -> ir.Value:
    if isinstance(o, tuple):
        return o[0] if is_float(o[1]) else kb.b.sitofp(o[0], F32)
    return ir.Constant(F32, float(o))


_INT_BINARY: dict[str, Callable] = {
    "add": lambda kb, a, b: kb.b.add(a, b),
    "sub": lambda kb, a, b: kb.b.sub(a, b),
    "mul": lambda kb, a, b: kb.b.mul(a, b),
    "max": KernelBuilder.smax,
    "min": KernelBuilder.smin,
}
_FLOAT_BINARY: dict[str, Callable] = {
    "add": lambda kb, a, b: kb.b.fadd(a, b),
    "sub": lambda kb, a, b: kb.b.fsub(a, b),
    "mul": lambda kb, a, b: kb.b.fmul(a, b),
    "max": KernelBuilder.fmax,
    "min": KernelBuilder.fmin,
}
_UNARY_FLOAT = {
    "sigmoid": KernelBuilder.sigmoid,
    "tanh": KernelBuilder.tanh,
    "exp": KernelBuilder.exp,
    "sqrt": KernelBuilder.sqrt,
}


def _rounding_shift(kb: KernelBuilder, acc: ir.Value, s: Operand, limit: int = MAX_SHIFT) -> ir.Value:
    """``(acc >> s) + ((acc >> (s-1)) & 1)`` on i64, round half up with no overflow for any i64 ``acc``
    (``vdla.isa.arith.rounding_shift``); tensor shifts clamped to [0, ``limit``]."""
    b = kb.b
    if isinstance(s, tuple):
        sh = kb.clamp_int(_as_int(kb, s, I64), 0, limit)
        bit = b.and_(b.ashr(acc, b.sub(kb.smax(sh, i64(1)), i64(1))), i64(1))
        return b.select(b.icmp_signed("==", sh, i64(0)), acc, b.add(b.ashr(acc, sh), bit))
    return b.add(b.ashr(acc, i64(s)), b.and_(b.ashr(acc, i64(s - 1)), i64(1))) if s > 0 else acc


def _mul_shift(kb: KernelBuilder, v: ir.Value, dtype: str, m: Operand, s: Operand) -> ir.Value:
    """``vdla.isa.arith.mul_shift`` before its wrap: the exact i64 product rounded right by ``s``."""
    b = kb.b
    return _rounding_shift(kb, b.mul(b.sext(kb.widen(v, dtype, I32), I64), _as_int(kb, m, I64)), s, MUL_MAX_SHIFT)


def emit_step(kb: KernelBuilder, step: EwStep, v: ir.Value, dtype: str, out: str, operands: list[Operand]) -> ir.Value:
    """Emit one step taking ``v`` of ``dtype`` to ``out`` (as inferred by :func:`ir.step_result_dtype`)."""
    b, op = kb.b, step.op
    fl = is_float(dtype)
    if op in _INT_BINARY:
        if fl:
            return _FLOAT_BINARY[op](kb, v, _as_float(kb, operands[0]))
        if op == "mul" and step.attr("shift"):
            return b.trunc(_mul_shift(kb, v, dtype, operands[0], int(step.attr("shift"))), I32)
        return _INT_BINARY[op](kb, kb.widen(v, dtype, I32), _as_int(kb, operands[0], I32))
    if op == "div":  # float only (step_result_dtype): IEEE division, as numpy's
        return b.fdiv(v, _as_float(kb, operands[0]))
    if op == "relu":
        return kb.fmax(v, ir.Constant(F32, 0.0)) if fl else kb.smax(v, ir.Constant(v.type, 0))
    if op == "clip":
        lo, hi = operands
        if fl:
            return kb.fmin(kb.fmax(v, _as_float(kb, lo)), _as_float(kb, hi))
        r = kb.smin(kb.smax(kb.widen(v, dtype, I32), _as_int(kb, lo, I32)), _as_int(kb, hi, I32))
        return b.trunc(r, LL_TYPES[out]) if out != "int32" else r
    if op in _UNARY_FLOAT:
        return _UNARY_FLOAT[op](kb, v)
    if op == "quantize":
        scale, zp = operands
        q = b.fadd(kb.rint(b.fdiv(v, _as_float(kb, scale))), _as_float(kb, zp))
        return kb.to_dtype(q, "float32", "int8")
    if op == "dequantize":
        scale, zp = operands
        centered = b.sub(kb.widen(v, dtype, I32), _as_int(kb, zp, I32))
        return b.fmul(b.sitofp(centered, F32), _as_float(kb, scale))
    if op == "rshift":
        (s,) = operands
        return b.trunc(_rounding_shift(kb, b.sext(kb.widen(v, dtype, I32), I64), s), I32)
    if op == "requantize":
        m, s = operands
        # vdla.isa.arith.requantize: the exact 64-bit product rounded once (shift in [0, 63]), wrapped to
        # int32 like the ALU's MUL, then the clamp
        acc = b.sext(b.trunc(_mul_shift(kb, v, dtype, m, s), I32), I64)
        return b.trunc(kb.clamp_int(acc, int(step.attr("lo")), int(step.attr("hi"))), I8)
    return kb.to_dtype(v, dtype, out)  # cast
