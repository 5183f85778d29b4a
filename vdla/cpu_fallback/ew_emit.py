"""Elementwise emitter: the CPU backend's code generation for the elementwise operators of ``vdla.graph.ew``.

:class:`ChainEmitter` emits the steps of a :class:`ChainSpec` on one element, loading tensor operands at
their broadcast offsets (:func:`broadcast_strides`); :func:`emit_step` emits one step: its operator's
expression (the same one the numpy oracle evaluates) on :class:`LlvmMath`, the LLVM backend of
:class:`vdla.graph.ewmath.Math`. Invariants: the dtype of every emitted value is the one
:func:`vdla.graph.ew.step_result_dtype` infers (a bool is an ``i1`` in registers, a byte holding 0 or 1
in memory), integer arithmetic runs in int32 (the requantize shift in 64 bits) as ``vdla.isa.arith``
specifies, and the math calls no libm, so that LLVM's vectorizers can widen it.
"""

from __future__ import annotations

from llvmlite import ir

from vdla.cpu_fallback.codegen import KernelBuilder
from vdla.cpu_fallback.lltypes import F32, I1, I8, I32, I64, LL_TYPES, i64
from vdla.cpu_fallback.specs import ChainSpec
from vdla.graph.ew import EW, Arg, Const, EwStep, StepTypes, step_result_dtype
from vdla.graph.ewmath import Math
from vdla.graph.opnames import QUANTIZE
from vdla.graph.oracle import FLOAT_KEY_MASK, quantize_thresholds
from vdla.graph.types import INT8_MAX, INT8_MIN
from vdla.isa.arith import MAX_SHIFT, MUL_MAX_SHIFT


def broadcast_strides(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a C-contiguous ``shape`` viewed as broadcast to ``out_shape`` (0 on broadcast)."""
    pad = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, s = [], 1
    for d in reversed(pad):
        strides.append(s if d > 1 else 0)
        s *= d
    return strides[::-1]


Operand = ir.Value | int | float  # a loaded tensor value (its LLVM type gives its dtype), or a constant


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

    def load(self, index: int, offset: ir.Value) -> ir.Value:
        """The element of input ``index`` at ``offset`` (a bool as an i1)."""
        dtype = self.spec.inputs[index].dtype
        v = self.kb.load(dtype, self.ptrs[index], offset)
        return self.kb.nonzero(v) if dtype == "bool" else v

    def apply(self, primary: ir.Value, offsets: list[ir.Value | None]) -> ir.Value:
        """Run all steps on ``primary`` (input 0's value), loading tensor operands at ``offsets``."""
        loaded: dict[int, ir.Value] = {0: primary}

        def operand(o: Const | Arg) -> Operand:
            if isinstance(o, Const):
                return o.value
            if o.index not in loaded:
                loaded[o.index] = self.load(o.index, offsets[o.index])
            return loaded[o.index]

        value, dtype = primary, self.spec.inputs[0].dtype
        for step in self.spec.steps:
            out = step_result_dtype(step, dtype, self.spec.inputs)
            value = emit_step(self.kb, step, value, dtype, out, [operand(o) for o in step.operands])
            dtype = out
        return value


def dtype_of(v: ir.Value) -> str:
    """The dtype of an element value (int8, int32, float32, bool) from its LLVM type."""
    if isinstance(v.type, ir.FloatType):
        return "float32"
    return {1: "bool", 8: "int8", 32: "int32"}[v.type.width]


def _as_int(kb: KernelBuilder, o: Operand, to: ir.IntType) -> ir.Value:
    """An integer (sign-extended) or bool (0 or 1) value, or a constant, as ``to``."""
    if isinstance(o, ir.Value):
        if o.type == to:
            return o
        return kb.b.zext(o, to) if o.type == I1 else kb.b.sext(o, to)
    return ir.Constant(to, int(o))


def _rounding_shift(kb: KernelBuilder, acc: ir.Value, s: Operand, limit: int = MAX_SHIFT) -> ir.Value:
    """``(acc >> s) + ((acc >> (s-1)) & 1)`` on i64, round half up with no overflow for any i64 ``acc``
    (``vdla.isa.arith.rounding_shift``); tensor shifts clamped to [0, ``limit``]."""
    b = kb.b
    if isinstance(s, ir.Value):
        sh = kb.clamp_int(_as_int(kb, s, I64), 0, limit)
        bit = b.and_(b.ashr(acc, b.sub(kb.smax(sh, i64(1)), i64(1))), i64(1))
        return b.select(b.icmp_signed("==", sh, i64(0)), acc, b.add(b.ashr(acc, sh), bit))
    return b.add(b.ashr(acc, i64(s)), b.and_(b.ashr(acc, i64(s - 1)), i64(1))) if s > 0 else acc


def _mul_shift(kb: KernelBuilder, v: ir.Value, m: Operand, s: Operand) -> ir.Value:
    """``vdla.isa.arith.mul_shift`` before its wrap: the exact i64 product rounded right by ``s``."""
    b = kb.b
    return _rounding_shift(kb, b.mul(b.sext(_as_int(kb, v, I32), I64), _as_int(kb, m, I64)), s, MUL_MAX_SHIFT)


class LlvmMath(Math[ir.Value]):
    """The LLVM backend of :class:`~vdla.graph.ewmath.Math`: emits an elementwise expression on one element
    with the :class:`KernelBuilder` (no libm calls, so that LLVM's vectorizers can widen it); integer
    arithmetic in int32, the fixed-point primitives in 64 bits as :mod:`vdla.isa.arith` specifies."""

    def __init__(self, kb: KernelBuilder) -> None:
        self.kb = kb

    def f32(self, v):
        if isinstance(v, ir.Value):
            if isinstance(v.type, ir.FloatType):
                return v
            return self.kb.b.uitofp(v, F32) if v.type == I1 else self.kb.b.sitofp(v, F32)
        return ir.Constant(F32, float(v))

    def i32(self, v):
        return _as_int(self.kb, v, I32)

    def like(self, value, x):
        return ir.Constant(F32, float(value)) if isinstance(x.type, ir.FloatType) else ir.Constant(x.type, int(value))

    def cast(self, v, dtype):
        return self.kb.to_dtype(v, dtype_of(v), dtype)

    def convert(self, v, dtype):
        return self.kb.convert(v, dtype_of(v), dtype)

    def bitcast(self, v, dtype):
        return v if v.type == LL_TYPES[dtype] else self.kb.b.bitcast(v, LL_TYPES[dtype])

    def narrow(self, v, dtype):
        return v if v.type == LL_TYPES[dtype] else self.kb.b.trunc(v, LL_TYPES[dtype])

    def _fl(self, a: ir.Value) -> bool:
        return isinstance(a.type, ir.FloatType)

    def add(self, a, b):
        return self.kb.b.fadd(a, b) if self._fl(a) else self.kb.b.add(a, b)

    def sub(self, a, b):
        return self.kb.b.fsub(a, b) if self._fl(a) else self.kb.b.sub(a, b)

    def mul(self, a, b):
        return self.kb.b.fmul(a, b) if self._fl(a) else self.kb.b.mul(a, b)

    def div(self, a, b):
        return self.kb.b.fdiv(a, b)

    def maximum(self, a, b):
        return self.kb.fmax(a, b) if self._fl(a) else self.kb.smax(a, b)

    def minimum(self, a, b):
        return self.kb.fmin(a, b) if self._fl(a) else self.kb.smin(a, b)

    def neg(self, a):
        return self.kb.b.fneg(a) if self._fl(a) else self.kb.b.neg(a)

    def abs(self, a):
        return self.kb.fabs(a) if self._fl(a) else self.kb.smax(a, self.kb.b.neg(a))

    def fma(self, a, b, c):
        return self.kb.fma(a, b, c)

    def fmod(self, a, b):
        if self._fl(a):
            return self.kb.fmod(a, b)
        # srem traps on a zero divisor and on INT_MIN % -1: both divide by 1 instead (x % -1 is 0)
        bb = self.kb.b
        zero = bb.icmp_signed("==", b, ir.Constant(b.type, 0))
        safe = bb.or_(zero, bb.icmp_signed("==", b, ir.Constant(b.type, -1)))
        r = bb.srem(a, bb.select(safe, ir.Constant(b.type, 1), b))
        return bb.select(zero, ir.Constant(b.type, 0), r)

    def less(self, a, b):
        return self.kb.b.fcmp_ordered("<", a, b) if self._fl(a) else self.kb.b.icmp_signed("<", a, b)

    def equal(self, a, b):
        return self.kb.b.fcmp_ordered("==", a, b) if self._fl(a) else self.kb.b.icmp_signed("==", a, b)

    def select(self, cond, a, b):
        return self.kb.b.select(cond, a, b)

    def bit_and(self, a, b):
        return self.kb.b.and_(a, b)

    def bit_or(self, a, b):
        return self.kb.b.or_(a, b)

    def bit_xor(self, a, b):
        return self.kb.b.xor(a, b)

    def bit_not(self, a):
        return self.kb.b.not_(a)

    def shift_left(self, a, s):
        return self.kb.b.shl(a, s)

    def shift_right(self, a, s):
        return self.kb.b.ashr(a, s)

    def exp(self, x):
        return self.kb.exp(x)

    def log(self, x):
        return self.kb.log(x)

    def tanh(self, x):
        return self.kb.tanh(x)

    def sqrt(self, x):
        return self.kb.sqrt(x)

    def rint(self, x):
        return self.kb.rint(x)

    def function(self, name, x):
        if name in ("floor", "ceil"):
            return self.kb.call(f"llvm.{name}.f32", F32, x)
        return getattr(self.kb, name)(x)

    def pow(self, x, y):
        return self.kb.pow(x, y)

    def mul_shift(self, x, multiplier, shift):
        return self.kb.b.trunc(_mul_shift(self.kb, x, multiplier, shift), I32)

    def rounding_shift(self, x, shift):
        b = self.kb.b
        return b.trunc(_rounding_shift(self.kb, b.sext(_as_int(self.kb, x, I32), I64), shift), I32)

    def requantize(self, x, multiplier, shift, lo, hi):
        # the exact 64-bit product rounded once (shift in [0, 63]), wrapped to int32 like the ALU's MUL,
        # then the clamp
        b = self.kb.b
        acc = b.sext(b.trunc(_mul_shift(self.kb, x, multiplier, shift), I32), I64)
        return b.trunc(self.kb.clamp_int(acc, lo, hi), I8)


def emit_step(kb: KernelBuilder, step: EwStep, v: ir.Value, dtype: str, out: str, operands: list[Operand]) -> ir.Value:
    """Emit one step taking ``v`` of ``dtype`` to ``out`` (as :func:`vdla.graph.ew.step_result_dtype` infers):
    its operator's expression (:class:`vdla.graph.ew.EwDef`) on :class:`LlvmMath`, except a float32 quantize by
    constants on a CPU whose float division is slow, which is :func:`threshold_quantize` (the same results)."""
    constant = not any(isinstance(o, ir.Value) for o in operands)
    if step.op == QUANTIZE and dtype == "float32" and constant and not kb.traits.fast_divide:
        scale, zero_point = operands
        thresholds = quantize_thresholds(step, float(scale), int(zero_point))
        multipliers = quantize_multipliers(float(scale))
        if thresholds is not None and multipliers is not None:
            return threshold_quantize(kb, v, int(zero_point), multipliers, thresholds)
    return EW[step.op].expr(LlvmMath(kb), v, tuple(operands), StepTypes(step, dtype, out))


QUANTIZE_M_CAP = 1 << 20  # a capped multiplier still puts the estimate at 2^11 or more: saturated


def quantize_multipliers(scale: float) -> list[int] | None:
    """The estimate's multiplier per biased exponent ``e``: ``2^(e - 118) / scale`` rounded (``|x| / scale`` is
    about ``mantissa * M[e] / 2^32``, the subnormals at ``e = 1``), capped where every float of the exponent
    saturates anyway. None where the subnormals' would be capped too (a scale below 2^-137)."""
    if 2.0 ** (1 - 118) / scale > QUANTIZE_M_CAP:
        return None
    return [min(round(2.0 ** (max(e, 1) - 118) / scale), QUANTIZE_M_CAP) for e in range(256)]


def threshold_quantize(kb: KernelBuilder, x: ir.Value, zero_point: int, multipliers, thresholds) -> ir.Value:
    """float32 -> int8 quantize in integer arithmetic only, bit-exact with the oracle for every non-NaN
    float (a NaN saturates by its sign): an estimate ``k`` of ``round(x / scale) + zero_point`` from the
    mantissa times a per-exponent multiplier (within 2^-9 of ``x / scale`` before its rounding, so the
    result is ``k - 1``, ``k`` or ``k + 1``), settled by comparing the float's order key with the two
    thresholds between them (:func:`vdla.graph.oracle.quantize_thresholds`). No division and no
    floating-point operation: for CPUs whose float division is slow (:class:`~vdla.cpu_fallback.codegen.
    CpuTraits`), and 5-8x faster than ``x / scale`` rounded on an emulated ARM core (benchmarks/arm_cpu.py)."""
    b = kb.b
    bits = b.bitcast(x, I32)
    key = b.xor(bits, b.and_(b.ashr(bits, ir.Constant(I32, 31)), ir.Constant(I32, FLOAT_KEY_MASK)))
    exponent = b.and_(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0xFF))
    fraction = b.and_(bits, ir.Constant(I32, 0x7FFFFF))
    normal = b.icmp_unsigned("!=", exponent, ir.Constant(I32, 0))
    mantissa = b.select(normal, b.or_(fraction, ir.Constant(I32, 1 << 23)), fraction)
    m = kb.table(multipliers, I32)(b.zext(exponent, I64))
    product = b.add(b.mul(b.zext(mantissa, I64), b.zext(m, I64)), i64(1 << 31))
    size = b.trunc(b.lshr(product, i64(32)), I32)
    estimate = b.select(b.icmp_signed("<", bits, ir.Constant(I32, 0)), b.neg(size), size)
    k = kb.clamp_int(b.add(estimate, ir.Constant(I32, zero_point)), INT8_MIN, INT8_MAX)
    table = kb.table([int(t) for t in thresholds], I32)
    index = b.zext(b.add(k, ir.Constant(I32, -INT8_MIN)), I64)
    above = [b.zext(b.icmp_signed(">=", key, table(i)), I32) for i in (index, b.add(index, i64(1)))]
    q = b.add(b.add(k, ir.Constant(I32, -1)), b.add(*above))
    return b.trunc(kb.smin(q, ir.Constant(I32, INT8_MAX)), I8)
