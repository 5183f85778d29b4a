"""LLVM IR emission: kernel skeleton, loops, memory and vector helpers, vector-friendly math (exp, log, tanh in
float32; the trigonometric and hyperbolic functions, their inverses and pow evaluated in float64 and rounded
once; C's fmod, exactly, in integers), conversions.

Kernels are written as scalar loop nests over exact (compile-time) shapes; LLVM's loop and SLP vectorizers
widen them. Everything here avoids libm calls so that the vectorizer can widen the math too. A kernel's
CPython entry points are emitted by :mod:`vdla.cpu_fallback.entry`, the elementwise steps by
:mod:`vdla.cpu_fallback.ew_emit`; the LLVM types live in :mod:`vdla.cpu_fallback.lltypes`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from vdla.cpu_fallback.abi import ObjectLayout
from vdla.cpu_fallback.entry import emit_c_entry, emit_entries
from vdla.cpu_fallback.lltypes import F32, F64, I1, I32, I64, LL_SIZES, LL_TYPES, PTR, declare, i64
from vdla.graph.types import INT_RANGE, TensorType, is_float

# flags allowing LLVM to reorder float reductions (needed to vectorize sums and dot products)
REASSOC = ("reassoc", "contract")

LOG2E = 1.4426950408889634
LN2_HI = 0.693359375  # few significant bits: n * LN2_HI is exact for the n used here
LN2_LO = -2.12194440e-4
EXPM1_POLY = (1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040)  # Taylor terms of (expm1(r) - r) / r^2
# tanh(x) = x P(x^2) / Q(x^2) on [-9, 9]: relative-error least-squares fit reweighted by 1/Q (Loeffler)
TANH_CLAMP = 9.0
TANH_P = (1.0, 1.29339427e-01, 2.93640071e-03, 9.40645623e-06, -1.31823255e-08, 1.92423143e-11)
TANH_Q = (1.0, 4.6267250e-01, 2.3827681e-02, 2.3023735e-04)
# log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)), s = f / (2 + f): the reduction and minimax coefficients of
# FreeBSD's logf (e_logf.c), R(z) = z (LG1 + z LG3) + z^2 (LG2 + z LG4) with z = s^2
LOG_LG = (0.66666662693, 0.40000972152, 0.28498786688, 0.24279078841)
LN2_HI_LOG, LN2_LO_LOG = 6.9313812256e-01, 9.0580006145e-06
SQRT_HALF_BITS = 0x3F3504F3  # float32 bits of sqrt(1/2): the reduced mantissa lies in [sqrt(1/2), sqrt(2))

# float64 kernels of float32 functions (sin ... atanh, pow): each evaluated in float64 to well below float32's
# rounding and rounded to float32 once. exp: Cody-Waite reduction (fdlibm's ln2 split) and the Taylor
# polynomial of expm1 to degree 12 (|r| <= ln2/2: error below 1e-15); log: x = 2^k m, log(m) = 2 atanh(s),
# s = (m - 1) / (m + 1), by its Taylor series to s^19 (|s| <= 0.172: error below 1e-15); sin and cos: Taylor
# polynomials to degree 15 and 16 on [-pi/4, pi/4] (error below 1e-16); atan: a least-squares fit of
# (atan(u) - u) / u^3 on |u| <= tan(pi/8) (relative error 1.7e-12), after atan(t) = pi/4 + atan((t - 1) /
# (t + 1)) and atan(t) = pi/2 - atan(1/t)
EXP64_CLAMP = 150.0  # exp beyond +-150 rounds to 0 or inf in float32
LN2_HI64, LN2_LO64 = 6.93147180369123816490e-01, 1.90821492927058770002e-10
SQRT_HALF_BITS64 = 0x3FE6A09E667F3BCD
EXP_TAYLOR = tuple(1 / math.factorial(k) for k in range(13))
LOG_ATANH = tuple(2 / (2 * k + 1) for k in range(10))
SIN_TAYLOR = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, 8))
COS_TAYLOR = tuple((-1) ** k / math.factorial(2 * k) for k in range(9))
SINH_TAYLOR = tuple(1 / math.factorial(2 * k + 1) for k in range(1, 7))  # |x| < 1/2: error below 1e-14
ATAN_P = (
    -0.3333333330406049,
    0.19999995203833928,
    -0.14285455840977998,
    0.11104560127861204,
    -0.09001755443143869,
    0.07012736449984093,
    -0.03829427296894931,
)
TAN_PI_8 = 0.41421356237309503


def _two_over_pi(bits: int) -> int:
    """floor(2/pi * 2^bits), from Machin's formula pi = 16 atan(1/5) - 4 atan(1/239) in integers."""
    one = 1 << (bits + 32)

    def atan_inv(n: int) -> int:
        total, term, k = 0, one // n, 0
        while term:
            total += (-1) ** k * (term // (2 * k + 1))
            term //= n * n
            k += 1
        return total

    pi = 16 * atan_inv(5) - 4 * atan_inv(239)  # pi * 2^(bits + 32), within a few units
    return (2 << (2 * bits + 64)) // pi >> 32


def _pio2_tables() -> tuple[list[float], list[float], list[float]]:
    """For each float32 biased exponent e: 2/pi * 2^(max(e, 1) - 150) modulo 4 (a float32 is m 2^(e - 150),
    m < 2^24 an integer, so m times it is x 2/pi modulo 4) split as A + B + C: A in steps of 2^-26 (28
    bits, so m A is exact in float64), B in steps of 2^-54 below 2^-26 (m B exact), C the rest."""
    frac, precision = 210, 400  # fixed-point fraction bits (2^-149 2/pi keeps 60 bits), 2/pi's bits
    two_over_pi = _two_over_pi(precision)
    tables: tuple[list[float], list[float], list[float]] = ([], [], [])
    for e in range(256):
        shift = precision - (max(e, 1) - 150) - frac
        c = (two_over_pi >> shift) % (4 << frac)
        tables[0].append(math.ldexp(c >> (frac - 26), -26))
        tables[1].append(math.ldexp((c >> (frac - 54)) & ((1 << 28) - 1), -54))
        tables[2].append(math.ldexp(float(c & ((1 << (frac - 54)) - 1)), -frac))
    return tables


PIO2_TABLES = _pio2_tables()


@dataclass(frozen=True)
class CpuTraits:
    """What code generation must know of the target CPU beyond LLVM's target machine (which picks the
    instructions): where the generated arithmetic itself has to differ."""

    fma: bool = True  # a fused multiply-add (see KernelBuilder.fma and rint)
    fast_divide: bool = True  # pipelined SIMD float division; without it a float32 quantize by constants
    # runs in integers (vdla.cpu_fallback.ew_emit.threshold_quantize)
    float_int8_dot: bool = True  # int8 convolutions summed on float32 FMAs (exact in chunks: x86's FMA
    # throughput); without, in int32 SIMD lanes (NEON's widening multiply-accumulates)


X86_TRAITS = CpuTraits()  # the default: an FMA, fast division, int8 dot products on float FMAs (x86 with FMA3)


class KernelBuilder:
    """One kernel: exported entries taking ndarray objects, and a body taking their noalias data pointers
    (the inputs, the output, then an optional scratch buffer).

    With an object ``layout`` (the JIT), the entries are CPython vectorcall functions that check every array
    object against the compiled signature before running the body (see :func:`vdla.cpu_fallback.entry.
    emit_entries`); without one (ahead-of-time code for another machine), the one entry is a plain C function
    taking the data pointers (:func:`vdla.cpu_fallback.entry.emit_c_entry`). The body is the same either way.
    """

    def __init__(
        self,
        module: ir.Module,
        name: str,
        inputs: tuple[TensorType, ...],
        out: TensorType,
        layout: ObjectLayout | None,
        scratch: bool = False,
        traits: CpuTraits = X86_TRAITS,
    ) -> None:
        self.module = module
        self.host_tuning = layout is not None  # code for this process's CPU (the JIT)
        self.traits = traits
        n_args = len(inputs) + 1 + scratch
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * n_args), name=f"{name}_body")
        self.fn.linkage = "internal"
        for a in self.fn.args:
            a.add_attribute("noalias")
        if layout is None:
            emit_c_entry(module, self.fn, name, n_args)
        else:
            emit_entries(module, self.fn, name, [*inputs, out], n_args, layout)
        self._allocas = ir.IRBuilder(self.fn.append_basic_block("allocas"))
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        args = list(self.fn.args)
        self.inputs: list[ir.Argument] = args[: len(inputs)]
        self.out: ir.Argument = args[len(inputs)]
        self.scratch: ir.Argument | None = args[len(inputs) + 1] if scratch else None

    def finish(self) -> None:
        self.b.ret_void()
        self._allocas.branch(self.fn.blocks[1])

    # -- memory ------------------------------------------------------------------------------------------
    def alloca(self, dtype: str, count: int) -> ir.Value:
        """A stack buffer allocated in the first block (so LLVM can promote it to registers)."""
        return self._allocas.alloca(LL_TYPES[dtype], size=count)

    def alloca_of(self, ty: ir.Type) -> ir.Value:
        """One stack slot of type ``ty`` (e.g. a vector accumulator that LLVM keeps in a register)."""
        return self._allocas.alloca(ty)

    def gep(self, dtype: str, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
        idx = i64(index) if isinstance(index, int) else index
        return self.b.gep(ptr, [idx], source_etype=LL_TYPES[dtype], inbounds=True)

    def load(self, dtype: str, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
        return self.b.load(self.gep(dtype, ptr, index), typ=LL_TYPES[dtype])

    def store(self, value: ir.Value, dtype: str, ptr: ir.Value, index: ir.Value | int) -> None:
        """Store one element (a bool held as an i1 is stored as a byte)."""
        if value.type == I1:
            value = self.b.zext(value, LL_TYPES[dtype])
        self.b.store(value, self.gep(dtype, ptr, index))

    def load_vec(self, dtype: str, ptr: ir.Value, index: ir.Value, n: int) -> ir.Value:
        """Load ``n`` consecutive elements as one vector (unaligned)."""
        ty = ir.VectorType(LL_TYPES[dtype], n)
        return self.b.load(self.gep(dtype, ptr, index), typ=ty, align=LL_SIZES[dtype])

    def store_vec(self, value: ir.Value, dtype: str, ptr: ir.Value, index: ir.Value) -> None:
        self.b.store(value, self.gep(dtype, ptr, index), align=LL_SIZES[dtype])

    def splat(self, v: ir.Value, n: int) -> ir.Value:
        """Vector of ``n`` copies of scalar ``v``."""
        vec = self.b.insert_element(ir.Constant(ir.VectorType(v.type, n), None), v, ir.Constant(I32, 0))
        return self.b.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(I32, n), [0] * n))

    def range_mask(self, start: ir.Value, n: int, size: int) -> ir.Value:
        """<n x i1> mask of the lanes i with 0 <= start + i < size."""
        lanes = self.b.add(self.splat(start, n), ir.Constant(ir.VectorType(I64, n), list(range(n))))
        lo = self.b.icmp_signed(">=", lanes, ir.Constant(ir.VectorType(I64, n), [0] * n))
        return self.b.and_(lo, self.b.icmp_signed("<", lanes, ir.Constant(ir.VectorType(I64, n), [size] * n)))

    def masked_load(self, dtype: str, ptr: ir.Value, index: ir.Value, mask: ir.Value) -> ir.Value:
        """Vector load of the lanes set in ``mask`` (others read as zero and touch no memory, so the
        address may lie outside the buffer: the pointer arithmetic is not marked inbounds)."""
        n = mask.type.count
        ty = ir.VectorType(LL_TYPES[dtype], n)
        addr = self.b.gep(ptr, [index], source_etype=LL_TYPES[dtype])
        suffix = f"v{n}{'f32' if is_float(dtype) else 'i' + str(LL_TYPES[dtype].width)}"
        zero = ir.Constant(ty, [0.0 if is_float(dtype) else 0] * n)
        align = ir.Constant(I32, LL_SIZES[dtype])
        return self.call(f"llvm.masked.load.{suffix}.p0", ty, addr, align, mask, zero)

    def transpose(self, rows: list[ir.Value]) -> list[ir.Value]:
        """Transpose an n x n tile held as n vectors (n a power of two) in log2(n) perfect-shuffle rounds.

        Each round pairs rows i and i + n/2 and interleaves their low halves (row 2i) and high halves
        (row 2i + 1); after log2(n) rounds row j holds column j.
        """
        n = len(rows)
        lo = ir.Constant(ir.VectorType(I32, n), [k // 2 + (n if k % 2 else 0) for k in range(n)])
        hi = ir.Constant(ir.VectorType(I32, n), [n // 2 + k // 2 + (n if k % 2 else 0) for k in range(n)])
        for _ in range(n.bit_length() - 1):
            nxt = []
            for i in range(n // 2):
                a, c = rows[i], rows[i + n // 2]
                nxt += [self.b.shuffle_vector(a, c, lo), self.b.shuffle_vector(a, c, hi)]
            rows = nxt
        return rows

    # -- control flow ------------------------------------------------------------------------------------
    @contextmanager
    def loop(
        self, start: ir.Value | int, stop: ir.Value | int, step: int = 1, vector_width: int = 0
    ) -> Iterator[ir.Value]:
        """``for i in range(start, stop, step)`` over i64; yields ``i`` and leaves the builder after it.

        ``vector_width`` (elements) overrides the vectorizer's choice for this loop in the JIT's code, a tuning
        for the host; ahead-of-time code for another CPU leaves the choice to LLVM's cost model for that CPU
        (a forced width that it cannot honour, such as float loops on armv7's non-IEEE NEON, is reported).
        """
        b = self.b
        if isinstance(start, int) and isinstance(stop, int) and start < stop <= start + step:
            yield i64(start)  # a single iteration needs no loop
            return
        start = i64(start) if isinstance(start, int) else start
        stop = i64(stop) if isinstance(stop, int) else stop
        pre = b.block
        head = self.fn.append_basic_block("loop")
        body = self.fn.append_basic_block("body")
        done = self.fn.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, stop), body, done)
        b.position_at_end(body)
        yield i
        nxt = b.add(i, i64(step), flags=("nsw",))
        i.add_incoming(nxt, b.block)
        latch = b.branch(head)
        if vector_width and self.host_tuning:
            latch.set_metadata("llvm.loop", self._loop_id(("llvm.loop.vectorize.width", vector_width)))
        b.position_at_end(done)

    def _loop_id(self, *hints: tuple[str, int]) -> ir.MDValue:
        """A loop's metadata: a new node that lists itself first (as LLVM requires), then ``hints``."""
        ops = [self.module.add_metadata([name, ir.Constant(I32, v)]) for name, v in hints]
        node = ir.MDValue(self.module, [], name=str(len(self.module.metadata)))
        node.operands = (node, *ops)
        return node

    def loops(self, extents: list[int]) -> _Nest:
        return _Nest(self, extents)

    def table(self, values: list[int] | list[float], element: ir.Type = I64) -> Callable[[ir.Value], ir.Value]:
        """A constant lookup table of ``element`` s (i64 by default, F32 or F64); returns a function loading
        entry ``i`` (an i64)."""
        ty = ir.ArrayType(element, len(values))
        g = ir.GlobalVariable(self.module, ty, name=f"{self.fn.name}_table{len(self.module.globals)}")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, values)
        return lambda i: self.b.load(self.b.gep(g, [i64(0), i], source_etype=ty, inbounds=True), typ=element)

    def linear(self, coords: list[ir.Value], strides: list[int], base: ir.Value | int = 0) -> ir.Value:
        """``base + sum(c * s)``, outer coordinates first so loop-invariant partial sums get hoisted."""
        off = i64(base) if isinstance(base, int) else base
        for c, s in zip(coords, strides, strict=True):
            if s:
                off = self.b.add(off, c if s == 1 else self.b.mul(c, i64(s)))
        return off

    # -- intrinsics --------------------------------------------------------------------------------------
    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        return declare(self.module, name, ret, args)

    def call(self, name: str, ret: ir.Type, *args: ir.Value, fastmath: tuple[str, ...] = ()) -> ir.Value:
        return self.b.call(self.intrinsic(name, ret, [a.type for a in args]), list(args), fastmath=fastmath)

    # -- scalar helpers (vectorizable) -------------------------------------------------------------------
    def smax(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed(">", a, b), a, b)

    def smin(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", a, b), a, b)

    def clamp_int(self, v: ir.Value, lo: int, hi: int) -> ir.Value:
        return self.smin(self.smax(v, ir.Constant(v.type, lo)), ir.Constant(v.type, hi))

    def fmax(self, a: ir.Value, b: ir.Value) -> ir.Value:
        """IEEE maximum: propagates NaN like numpy.maximum (the sign of a zero result is unspecified)."""
        return self.call("llvm.maximum.f32", F32, a, b, fastmath=("nsz",))

    def fmin(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.call("llvm.minimum.f32", F32, a, b, fastmath=("nsz",))

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """``a * b + c`` (float32 scalars or vectors) rounded once (IEEE fusedMultiplyAdd) on every CPU, so that
        code for a board rounds as the host's does (``llvm.fmuladd`` fuses or not as the CPU has an FMA or not):
        the hardware's FMA where the target has one, else in float64: the product is exact, the sum is rounded
        to odd (an inexact float64 sum with an even last bit moves one unit towards the exact value, found by
        TwoSum), and the final rounding to float32 is then the one correct rounding (53 >= 24 + 2 bits)."""
        lanes = a.type.count if isinstance(a.type, ir.VectorType) else 0
        if self.traits.fma:
            return self.call(f"llvm.fma.v{lanes}f32" if lanes else "llvm.fma.f32", a.type, a, b, c)

        def typed(t: ir.Type) -> ir.Type:
            return ir.VectorType(t, lanes) if lanes else t

        def const(t: ir.Type, v: float | int) -> ir.Constant:
            return ir.Constant(typed(t), [v] * lanes if lanes else v)

        b_ = self.b
        p = b_.fmul(b_.fpext(a, typed(F64)), b_.fpext(b, typed(F64)))
        cd = b_.fpext(c, typed(F64))
        s = b_.fadd(p, cd)
        v = b_.fsub(s, p)
        err = b_.fadd(b_.fsub(p, b_.fsub(s, v)), b_.fsub(cd, v))  # p + cd - s exactly (NaN for infinities)
        bits = b_.bitcast(s, typed(I64))
        even = b_.icmp_unsigned("==", b_.and_(bits, const(I64, 1)), const(I64, 0))
        inexact = b_.fcmp_ordered("one", err, const(F64, 0.0))
        outward = b_.icmp_unsigned(
            "==", b_.fcmp_ordered("ogt", err, const(F64, 0.0)), b_.fcmp_ordered("ogt", s, const(F64, 0.0))
        )
        odd = b_.select(outward, b_.add(bits, const(I64, 1)), b_.sub(bits, const(I64, 1)))
        return b_.fptrunc(b_.bitcast(b_.select(b_.and_(inexact, even), odd, bits), typed(F64)), a.type)

    def fabs(self, v: ir.Value) -> ir.Value:
        return self.call("llvm.fabs.f32", F32, v)

    def sqrt(self, v: ir.Value) -> ir.Value:
        """IEEE square root (correctly rounded, NaN below zero), vectorizable like numpy's."""
        return self.call("llvm.sqrt.f32", F32, v)

    def rint(self, v: ir.Value) -> ir.Value:
        """Round half to even (the default floating-point environment). Where the target has no FMA (the
        Cortex-A9's VFPv3, which has no rounding instruction either: LLVM would call the C library's
        ``rintf``), inline: ``(|v| + 2^23) - 2^23`` rounds ``|v| < 2^23`` to an integer half to even, the sign
        copied back (``-0.0`` kept); larger values, infinities and NaN are their own rounding. The same bits as
        ``llvm.rint`` on every CPU."""
        if self.traits.fma:
            return self.call("llvm.rint.f32", F32, v)
        b, big = self.b, ir.Constant(F32, 8388608.0)
        a = self.call("llvm.fabs.f32", F32, v)
        r = self.call("llvm.copysign.f32", F32, b.fsub(b.fadd(a, big), big), v)
        return b.select(b.fcmp_ordered("<", a, big), r, v)

    def muladd(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """``a * b + c`` rounded twice (multiply, then add; never contracted): the same bits on every CPU at two
        float operations, where :meth:`fma` costs about 15 without a hardware FMA. The polynomial steps of
        ``exp``, ``log`` and ``tanh`` and the float32 convolution use it."""
        return self.b.fadd(self.b.fmul(a, b), c)

    def widen(self, v: ir.Value, dtype: str, to: ir.IntType) -> ir.Value:
        """Sign-extend an integer value of ``dtype`` to ``to`` (no-op if already that wide)."""
        return v if LL_TYPES[dtype] == to else self.b.sext(v, to)

    def to_dtype(self, v: ir.Value, from_dtype: str, dtype: str) -> ir.Value:
        """Saturating conversion between dtypes (float -> int rounds half to even); to bool is ``v != 0``
        (a bool value is an i1)."""
        b = self.b
        if from_dtype == dtype:
            return v
        if dtype == "bool":
            return self.nonzero(v)
        if from_dtype == "bool":
            return self._from_bool(v, dtype)
        if is_float(dtype):
            return b.sitofp(v, F32)
        if is_float(from_dtype):
            lo, hi = INT_RANGE[dtype]
            if dtype == "int32":  # bounds not representable in float32: saturating conversion
                return self.call("llvm.fptosi.sat.i32.f32", I32, self.rint(v))
            # maxnum/minnum send NaN to a bound, so the conversion below is always defined
            v = self.call("llvm.maxnum.f32", F32, self.rint(v), ir.Constant(F32, float(lo)))
            v = self.call("llvm.minnum.f32", F32, v, ir.Constant(F32, float(hi)))
            return b.fptosi(v, LL_TYPES[dtype])
        v = self.widen(v, from_dtype, I32)
        if dtype == "int32":
            return v
        return b.trunc(self.clamp_int(v, *INT_RANGE[dtype]), LL_TYPES[dtype])

    # -- transcendental functions --------------------------------------------------------------------
    def exp(self, x: ir.Value) -> ir.Value:
        """exp(x) by Cody-Waite reduction x = n ln2 + r and a polynomial for expm1(r).

        2^n is applied as two factors, so that overflow gives inf and underflow is gradual.
        """
        b = self.b
        f = lambda v: ir.Constant(F32, v)  # noqa: E731
        xc = b.select(b.fcmp_ordered("<", x, f(-104.0)), f(-104.0), x)
        xc = b.select(b.fcmp_ordered(">", xc, f(89.0)), f(89.0), xc)
        n = self.rint(b.fmul(xc, f(LOG2E)))
        r = self.muladd(n, f(-LN2_HI), xc)
        r = self.muladd(n, f(-LN2_LO), r)
        q = f(EXPM1_POLY[-1])
        for c in reversed(EXPM1_POLY[:-1]):
            q = self.muladd(q, r, f(c))
        p = self.muladd(b.fmul(r, r), q, r)  # expm1(r)
        ni = b.fptosi(n, I32)
        half = b.ashr(ni, ir.Constant(I32, 1))
        pow2 = lambda k: b.bitcast(b.shl(b.add(k, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)  # noqa: E731
        y = b.fmul(b.fmul(b.fadd(p, f(1.0)), pow2(half)), pow2(b.sub(ni, half)))
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def log(self, x: ir.Value) -> ir.Value:
        """log(x) as FreeBSD's logf: x = 2^k m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^25
        first), log(m) from f = m - 1 by a minimax polynomial in s = f / (2 + f), k ln2 added in two parts
        (within 1 ulp). log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN propagates."""
        b = self.b
        f = lambda v: ir.Constant(F32, v)  # noqa: E731
        i = lambda v: ir.Constant(I32, v)  # noqa: E731
        sub = b.fcmp_ordered("<", x, f(1.17549435e-38))  # subnormal (zero and negatives are patched below)
        bits = b.bitcast(b.select(sub, b.fmul(x, f(33554432.0)), x), I32)  # 2^25
        bits = b.add(bits, i(0x3F800000 - SQRT_HALF_BITS))
        k = b.sub(b.sub(b.lshr(bits, i(23)), i(127)), b.select(sub, i(25), i(0)))
        m = b.bitcast(b.add(b.and_(bits, i(0x007FFFFF)), i(SQRT_HALF_BITS)), F32)
        fr = b.fsub(m, f(1.0))
        s = b.fdiv(fr, b.fadd(f(2.0), fr))
        z = b.fmul(s, s)
        w = b.fmul(z, z)
        r = b.fadd(
            b.fmul(z, self.muladd(w, f(LOG_LG[2]), f(LOG_LG[0]))), b.fmul(w, self.muladd(w, f(LOG_LG[3]), f(LOG_LG[1])))
        )
        hfsq = b.fmul(f(0.5), b.fmul(fr, fr))
        dk = b.sitofp(k, F32)
        y = self.muladd(s, b.fadd(hfsq, r), b.fmul(dk, f(LN2_LO_LOG)))
        y = self.muladd(dk, f(LN2_HI_LOG), b.fadd(b.fsub(y, hfsq), fr))
        y = b.select(b.fcmp_ordered("==", x, f(float("inf"))), x, y)
        y = b.select(b.fcmp_ordered("==", x, f(0.0)), f(float("-inf")), y)
        return b.select(b.fcmp_unordered("<", x, f(0.0)), f(float("nan")), y)

    def tanh(self, x: ir.Value) -> ir.Value:
        """tanh(x) ~ x P(x^2) / Q(x^2) on |x| <= 9 (beyond, tanh rounds to +-1): at most ~6 ulp off."""
        b = self.b
        f = lambda v: ir.Constant(F32, v)  # noqa: E731
        xc = self.fmin(self.fmax(x, f(-TANH_CLAMP)), f(TANH_CLAMP))
        z = b.fmul(xc, xc)
        num, den = f(TANH_P[-1]), f(TANH_Q[-1])
        for c in reversed(TANH_P[:-1]):
            num = self.muladd(num, z, f(c))
        for c in reversed(TANH_Q[:-1]):
            den = self.muladd(den, z, f(c))
        y = b.fdiv(b.fmul(xc, num), den)
        return self.fmin(self.fmax(y, f(-1.0)), f(1.0))

    # -- conversions ---------------------------------------------------------------------------------------
    def nonzero(self, v: ir.Value) -> ir.Value:
        """``v != 0`` as an i1 (NaN is nonzero)."""
        if isinstance(v.type, ir.FloatType):
            return self.b.fcmp_unordered("!=", v, ir.Constant(F32, 0.0))
        return self.b.icmp_signed("!=", v, ir.Constant(v.type, 0))

    def _from_bool(self, v: ir.Value, dtype: str) -> ir.Value:
        return self.b.uitofp(v, F32) if is_float(dtype) else self.b.zext(v, LL_TYPES[dtype])

    def convert(self, v: ir.Value, from_dtype: str, dtype: str) -> ir.Value:
        """C's conversion (ONNX Cast): float -> int truncates toward zero, saturating (NaN -> 0); an integer
        keeps its low bits in a narrower one; to bool is ``v != 0`` (a bool value is an i1)."""
        if from_dtype == dtype:
            return v
        if dtype == "bool" or from_dtype == "bool" or is_float(dtype):
            return self.to_dtype(v, from_dtype, dtype)
        to = LL_TYPES[dtype]
        if is_float(from_dtype):
            return self.call(f"llvm.fptosi.sat.i{to.width}.f32", to, v)
        return self.b.trunc(v, to) if v.type.width > to.width else self.widen(v, from_dtype, to)

    # -- float64 kernels of float32 functions (see the constants above) -------------------------------------
    def _fma64(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """Fused on every CPU (a call to the C library's ``fma`` where the target has no FMA), see :meth:`fma`."""
        return self.call("llvm.fma.f64", F64, a, b, c)

    def _poly64(self, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
        acc = _d(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = self._fma64(acc, x, _d(c))
        return acc

    def _f64(self, v: ir.Value) -> ir.Value:
        """A float32 or integer value as float64 (exact)."""
        return self.b.fpext(v, F64) if isinstance(v.type, ir.FloatType) else self.b.sitofp(v, F64)

    def _finish(self, v: ir.Value, x: ir.Value | None = None) -> ir.Value:
        """float64 ``v`` rounded to float32, with the sign of ``x`` when given (an odd function)."""
        y = self.b.fptrunc(v, F32)
        return y if x is None else self.call("llvm.copysign.f32", F32, y, x)

    def exp64(self, x: ir.Value) -> ir.Value:
        """exp of a float64, its argument clamped to +-EXP64_CLAMP; NaN propagates."""
        b = self.b
        xc = b.select(b.fcmp_ordered("<", x, _d(-EXP64_CLAMP)), _d(-EXP64_CLAMP), x)
        xc = b.select(b.fcmp_ordered(">", xc, _d(EXP64_CLAMP)), _d(EXP64_CLAMP), xc)
        n = self.call("llvm.rint.f64", F64, b.fmul(xc, _d(LOG2E)))
        r = self._fma64(n, _d(-LN2_HI64), xc)
        r = self._fma64(n, _d(-LN2_LO64), r)
        scale = b.bitcast(b.shl(b.add(b.fptosi(n, I64), i64(1023)), i64(52)), F64)
        return b.select(b.fcmp_unordered("uno", x, x), x, b.fmul(self._poly64(r, EXP_TAYLOR), scale))

    def log64(self, x: ir.Value) -> ir.Value:
        """log of a float64 that is 0, normal, infinite or NaN: -inf at 0, NaN below, inf at inf."""
        b = self.b
        bits = b.add(b.bitcast(x, I64), i64(0x3FF0000000000000 - SQRT_HALF_BITS64))
        k = b.sitofp(b.sub(b.lshr(bits, i64(52)), i64(1023)), F64)
        m = b.bitcast(b.add(b.and_(bits, i64((1 << 52) - 1)), i64(SQRT_HALF_BITS64)), F64)
        f = b.fsub(m, _d(1.0))
        s = b.fdiv(f, b.fadd(_d(2.0), f))
        y = self._fma64(k, _d(LN2_HI64), self._fma64(k, _d(LN2_LO64), b.fmul(s, self._poly64(b.fmul(s, s), LOG_ATANH))))
        y = b.select(b.fcmp_ordered("==", x, _d(math.inf)), x, y)
        y = b.select(b.fcmp_ordered("==", x, _d(0.0)), _d(-math.inf), y)
        return b.select(b.fcmp_unordered("<", x, _d(0.0)), _d(math.nan), y)

    def log1p64(self, t: ir.Value) -> ir.Value:
        """log(1 + t) of a float64 (Goldberg's correction, as :meth:`vdla.graph.ewmath.Math.log1p`)."""
        b = self.b
        u = b.fadd(_d(1.0), t)
        y = b.fdiv(b.fmul(self.log64(u), t), b.fsub(u, _d(1.0)))
        y = b.select(b.fcmp_ordered("==", u, _d(1.0)), t, y)
        return b.select(b.fcmp_ordered("==", u, _d(math.inf)), u, y)

    def atan64(self, x: ir.Value) -> ir.Value:
        b = self.b
        a = self.call("llvm.fabs.f64", F64, x)
        inv = b.fcmp_ordered(">", a, _d(1.0))
        t = b.select(inv, b.fdiv(_d(1.0), a), a)
        big = b.fcmp_ordered(">", t, _d(TAN_PI_8))
        u = b.select(big, b.fdiv(b.fsub(t, _d(1.0)), b.fadd(t, _d(1.0))), t)
        z = b.fmul(u, u)
        y = self._fma64(b.fmul(u, z), self._poly64(z, ATAN_P), u)
        y = b.select(big, b.fadd(y, _d(math.pi / 4)), y)
        y = b.select(inv, b.fsub(_d(math.pi / 2), y), y)
        return self.call("llvm.copysign.f64", F64, y, x)

    def float_parts(self, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """A float32 as i32s: its bits without the sign, and |x| = m 2^(e - 150) with e = max(biased
        exponent, 1) and the integer m < 2^24 (exact for subnormals too)."""
        b = self.b
        i32 = lambda v: ir.Constant(I32, v)  # noqa: E731
        bits = b.and_(b.bitcast(x, I32), i32(0x7FFFFFFF))
        e = b.lshr(bits, i32(23))
        hidden = b.select(b.icmp_unsigned("!=", e, i32(0)), i32(1 << 23), i32(0))
        return bits, self.smax(e, i32(1)), b.or_(b.and_(bits, i32(0x7FFFFF)), hidden)

    def _reduce_pio2(self, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """|x| = (k + r) pi/2 for a float32 ``x``: r pi/2 in [-pi/4, pi/4] (float64) and k mod 4 (i32),
        exact for every finite float32 (:data:`PIO2_TABLES`; the sum of the parts by TwoSum)."""
        b = self.b
        _, e, mant = self.float_parts(x)
        m = b.uitofp(mant, F64)
        ta, tb, tc = (self.table(t, F64)(b.zext(e, I64)) for t in PIO2_TABLES)
        pa = b.fmul(m, ta)
        y = b.fsub(pa, b.fmul(_d(4.0), self.call("llvm.floor.f64", F64, b.fmul(pa, _d(0.25)))))  # exact
        mb = b.fmul(m, tb)  # exact
        k = self.call("llvm.rint.f64", F64, b.fadd(y, mb))
        hi = b.fsub(y, k)  # exact
        s = b.fadd(hi, mb)
        bb = b.fsub(s, hi)
        err = b.fadd(b.fsub(hi, b.fsub(s, bb)), b.fsub(mb, bb))
        r = b.fadd(s, b.fadd(err, b.fmul(m, tc)))
        return b.fmul(r, _d(math.pi / 2)), b.and_(b.fptosi(k, I32), ir.Constant(I32, 3))

    def _sin_cos(self, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """sin and cos (float64) of the reduced |x|, and its quadrant k mod 4 (i32)."""
        b = self.b
        r, q = self._reduce_pio2(x)
        z = b.fmul(r, r)
        s = self._fma64(b.fmul(r, z), self._poly64(z, SIN_TAYLOR), r)
        return s, self._poly64(z, COS_TAYLOR), q

    def _bit(self, q: ir.Value, mask: int) -> ir.Value:
        return self.b.icmp_unsigned("!=", self.b.and_(q, ir.Constant(I32, mask)), ir.Constant(I32, 0))

    def _trig(self, x: ir.Value, v: ir.Value, odd: bool) -> ir.Value:
        """float64 ``v`` of |x| rounded to float32, signed like ``x`` when ``odd``; NaN at +-inf and NaN."""
        b = self.b
        y = self._finish(v)
        if odd:
            y = b.select(b.icmp_signed("<", b.bitcast(x, I32), ir.Constant(I32, 0)), b.fneg(y), y)
        return b.select(b.fcmp_unordered("==", self.fabs(x), ir.Constant(F32, math.inf)), b.fsub(x, x), y)

    def sin(self, x: ir.Value) -> ir.Value:
        """sin(|x|) is sin r, cos r, -sin r, -cos r in quadrants 0..3."""
        b = self.b
        s, c, q = self._sin_cos(x)
        v = b.select(self._bit(q, 1), c, s)
        return self._trig(x, b.select(self._bit(q, 2), b.fneg(v), v), True)

    def cos(self, x: ir.Value) -> ir.Value:
        """cos(|x|) is cos r, -sin r, -cos r, sin r in quadrants 0..3."""
        b = self.b
        s, c, q = self._sin_cos(x)
        v = b.select(self._bit(q, 1), s, c)
        return self._trig(x, b.select(self._bit(b.add(q, ir.Constant(I32, 1)), 2), b.fneg(v), v), False)

    def tan(self, x: ir.Value) -> ir.Value:
        """tan(|x|) is sin r / cos r, or -cos r / sin r in odd quadrants."""
        b = self.b
        s, c, q = self._sin_cos(x)
        return self._trig(x, b.select(self._bit(q, 1), b.fdiv(b.fneg(c), s), b.fdiv(s, c)), True)

    def asin(self, x: ir.Value) -> ir.Value:
        """atan(x / sqrt((1 - x)(1 + x))) (pi/2 at 1, NaN beyond)."""
        b = self.b
        xd = self._f64(x)
        root = self.call("llvm.sqrt.f64", F64, b.fmul(b.fsub(_d(1.0), xd), b.fadd(_d(1.0), xd)))
        return self._finish(self.atan64(b.fdiv(xd, root)))

    def acos(self, x: ir.Value) -> ir.Value:
        """2 atan(sqrt((1 - x) / (1 + x))) (pi at -1, NaN beyond [-1, 1])."""
        b = self.b
        xd = self._f64(x)
        root = self.call("llvm.sqrt.f64", F64, b.fdiv(b.fsub(_d(1.0), xd), b.fadd(_d(1.0), xd)))
        return self._finish(b.fmul(_d(2.0), self.atan64(root)))

    def atan(self, x: ir.Value) -> ir.Value:
        return self._finish(self.atan64(self._f64(x)))

    def sinh(self, x: ir.Value) -> ir.Value:
        """Taylor below |x| = 1/2, else (e - 1/e) / 2 with e = exp(|x|)."""
        b = self.b
        a = self.call("llvm.fabs.f64", F64, self._f64(x))
        e = self.exp64(a)
        z = b.fmul(a, a)
        small = self._fma64(b.fmul(a, z), self._poly64(z, SINH_TAYLOR), a)
        big = b.fmul(_d(0.5), b.fsub(e, b.fdiv(_d(1.0), e)))
        return self._finish(b.select(b.fcmp_ordered("<", a, _d(0.5)), small, big), x)

    def cosh(self, x: ir.Value) -> ir.Value:
        b = self.b
        e = self.exp64(self.call("llvm.fabs.f64", F64, self._f64(x)))
        return self._finish(b.fmul(_d(0.5), b.fadd(e, b.fdiv(_d(1.0), e))))

    def asinh(self, x: ir.Value) -> ir.Value:
        """log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|, signed like x."""
        b = self.b
        a = self.call("llvm.fabs.f64", F64, self._f64(x))
        sq = b.fmul(a, a)
        t = b.fadd(a, b.fdiv(sq, b.fadd(_d(1.0), self.call("llvm.sqrt.f64", F64, b.fadd(_d(1.0), sq)))))
        y = b.select(b.fcmp_ordered("==", a, _d(math.inf)), a, self.log1p64(t))
        return self._finish(y, x)

    def acosh(self, x: ir.Value) -> ir.Value:
        """log1p(d + sqrt(d (x + 1))), d = x - 1 (NaN below 1)."""
        b = self.b
        xd = self._f64(x)
        d = b.fsub(xd, _d(1.0))
        y = self.log1p64(b.fadd(d, self.call("llvm.sqrt.f64", F64, b.fmul(d, b.fadd(xd, _d(1.0))))))
        return self._finish(b.select(b.fcmp_ordered("<", xd, _d(1.0)), _d(math.nan), y))

    def atanh(self, x: ir.Value) -> ir.Value:
        """(log1p(x) - log1p(-x)) / 2 (+-inf at +-1, NaN beyond)."""
        b = self.b
        xd = self._f64(x)
        return self._finish(b.fmul(_d(0.5), b.fsub(self.log1p64(xd), self.log1p64(b.fneg(xd)))))

    def pow(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """C's powf(x, y), ``y`` float32 or an integer: exp(y log|x|) in float64, negated for a negative
        ``x`` (its sign bit) and an odd integer ``y``; NaN for a finite negative ``x`` and a finite
        non-integer ``y``; 1 where ``y`` is 0, ``x`` is 1, or ``|x|`` is 1 and ``y`` infinite."""
        b = self.b
        xd, yd = self._f64(x), self._f64(y)
        ax = self.call("llvm.fabs.f64", F64, xd)
        ay = self.call("llvm.fabs.f64", F64, yd)
        r = self.exp64(b.fmul(yd, self.log64(ax)))
        rint = lambda v: self.call("llvm.rint.f64", F64, v)  # noqa: E731
        integer = b.fcmp_ordered("==", rint(yd), yd)
        half = b.fmul(yd, _d(0.5))
        odd = b.and_(integer, b.fcmp_unordered("!=", rint(half), half))
        negative = b.icmp_signed("<", b.bitcast(x, I32), ir.Constant(I32, 0))
        r = b.select(b.and_(negative, odd), b.fneg(r), r)
        finite_negative = b.and_(b.fcmp_ordered("<", xd, _d(0.0)), b.fcmp_ordered(">", xd, _d(-math.inf)))
        fraction = b.and_(b.not_(integer), b.fcmp_ordered("<", ay, _d(math.inf)))
        r = b.select(b.and_(finite_negative, fraction), _d(math.nan), r)
        one = b.or_(b.fcmp_ordered("==", yd, _d(0.0)), b.fcmp_ordered("==", xd, _d(1.0)))
        one = b.or_(one, b.and_(b.fcmp_ordered("==", ax, _d(1.0)), b.fcmp_ordered("==", ay, _d(math.inf))))
        return self._finish(b.select(one, _d(1.0), r))

    def fmod(self, a: ir.Value, d: ir.Value) -> ir.Value:
        """C's fmodf, exactly, with integers: |a| = ma 2^ea and |d| = md 2^ed (ma, md < 2^24); for ea >= ed
        the remainder is (ma 2^(ea - ed) mod md) 2^ed, 2^(ea - ed) mod md by square-and-multiply in i64;
        for ea < ed, |a| < |d| and the remainder is ``a``. NaN where ``d`` is 0 or NaN or ``a`` is not
        finite."""
        b = self.b
        i32 = lambda v: ir.Constant(I32, v)  # noqa: E731
        abits, ea, ma = self.float_parts(a)
        dbits, ed, md = self.float_parts(d)
        ma, md = b.zext(ma, I64), b.zext(md, I64)
        mod = b.select(b.icmp_unsigned("==", md, i64(0)), i64(1), md)
        shift = self.smax(b.sub(ea, ed), i32(0))
        acc, base = i64(1), b.urem(i64(2), mod)
        for k in range(8):  # shift <= 253
            use = b.icmp_unsigned("!=", b.and_(shift, i32(1 << k)), i32(0))
            acc = b.select(use, b.urem(b.mul(acc, base), mod), acc)
            base = b.urem(b.mul(base, base), mod)
        rem = b.urem(b.mul(b.urem(ma, mod), acc), mod)
        scale = b.bitcast(b.shl(b.add(b.zext(ed, I64), i64(1023 - 150)), i64(52)), F64)
        y = self.call("llvm.copysign.f32", F32, b.fptrunc(b.fmul(b.uitofp(rem, F64), scale), F32), a)
        y = b.select(b.icmp_signed("<", ea, ed), a, y)
        bad = b.or_(b.icmp_unsigned(">=", abits, i32(0x7F800000)), b.icmp_unsigned(">", dbits, i32(0x7F800000)))
        bad = b.or_(bad, b.icmp_unsigned("==", dbits, i32(0)))
        return b.select(bad, ir.Constant(F32, math.nan), y)


def _d(v: float) -> ir.Constant:
    return ir.Constant(F64, v)


class _Nest:
    """Context manager opening one loop per extent; yields the list of indices."""

    def __init__(self, kb: KernelBuilder, extents: list[int]) -> None:
        self.kb, self.extents, self._stack = kb, extents, []

    def __enter__(self) -> list[ir.Value]:
        idx = []
        for e in self.extents:
            cm = self.kb.loop(0, e)
            idx.append(cm.__enter__())
            self._stack.append(cm)
        return idx

    def __exit__(self, *exc) -> None:
        while self._stack:
            self._stack.pop().__exit__(None, None, None)
