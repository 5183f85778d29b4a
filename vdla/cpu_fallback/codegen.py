"""LLVM IR emission: kernel skeleton, loops, memory and vector helpers, vector-friendly math (exp, log, tanh).

Kernels are written as scalar loop nests over exact (compile-time) shapes; LLVM's loop and SLP vectorizers
widen them. Everything here avoids libm calls so that the vectorizer can widen the math too. A kernel's
CPython entry points are emitted by :mod:`vdla.cpu_fallback.entry`, the elementwise steps by
:mod:`vdla.cpu_fallback.ew_emit`; the LLVM types live in :mod:`vdla.cpu_fallback.lltypes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from llvmlite import ir

from vdla.cpu_fallback.abi import ObjectLayout
from vdla.cpu_fallback.entry import emit_entries
from vdla.cpu_fallback.lltypes import F32, I32, I64, LL_SIZES, LL_TYPES, PTR, declare, i64
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


class KernelBuilder:
    """One kernel: exported entries taking ndarray objects, and a body taking their noalias data pointers
    (the inputs, the output, then an optional scratch buffer).

    The entries are CPython vectorcall functions that check every array object against the compiled
    signature before running the body (see :func:`vdla.cpu_fallback.entry.emit_entries`).
    """

    def __init__(
        self,
        module: ir.Module,
        name: str,
        inputs: tuple[TensorType, ...],
        out: TensorType,
        layout: ObjectLayout,
        scratch: bool = False,
    ) -> None:
        self.module = module
        n_args = len(inputs) + 1 + scratch
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * n_args), name=f"{name}_body")
        self.fn.linkage = "internal"
        for a in self.fn.args:
            a.add_attribute("noalias")
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

        ``vector_width`` (elements) overrides the vectorizer's choice for this loop.
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
        if vector_width:
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
        """A constant lookup table of ``element`` s (i64 by default, or F32); returns a function loading
        entry ``i``."""
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
        return self.call("llvm.fmuladd.f32", F32, a, b, c)

    def fabs(self, v: ir.Value) -> ir.Value:
        return self.call("llvm.fabs.f32", F32, v)

    def sqrt(self, v: ir.Value) -> ir.Value:
        """IEEE square root (correctly rounded, NaN below zero), vectorizable like numpy's."""
        return self.call("llvm.sqrt.f32", F32, v)

    def rint(self, v: ir.Value) -> ir.Value:
        """Round half to even (the default floating-point environment)."""
        return self.call("llvm.rint.f32", F32, v)

    def widen(self, v: ir.Value, dtype: str, to: ir.IntType) -> ir.Value:
        """Sign-extend an integer value of ``dtype`` to ``to`` (no-op if already that wide)."""
        return v if LL_TYPES[dtype] == to else self.b.sext(v, to)

    def to_dtype(self, v: ir.Value, from_dtype: str, dtype: str) -> ir.Value:
        """Saturating conversion between dtypes (float -> int rounds half to even)."""
        b = self.b
        if from_dtype == dtype:
            return v
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
        r = self.fma(n, f(-LN2_HI), xc)
        r = self.fma(n, f(-LN2_LO), r)
        q = f(EXPM1_POLY[-1])
        for c in reversed(EXPM1_POLY[:-1]):
            q = self.fma(q, r, f(c))
        p = self.fma(b.fmul(r, r), q, r)  # expm1(r)
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
            b.fmul(z, self.fma(w, f(LOG_LG[2]), f(LOG_LG[0]))), b.fmul(w, self.fma(w, f(LOG_LG[3]), f(LOG_LG[1])))
        )
        hfsq = b.fmul(f(0.5), b.fmul(fr, fr))
        dk = b.sitofp(k, F32)
        y = self.fma(s, b.fadd(hfsq, r), b.fmul(dk, f(LN2_LO_LOG)))
        y = self.fma(dk, f(LN2_HI_LOG), b.fadd(b.fsub(y, hfsq), fr))
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
            num = self.fma(num, z, f(c))
        for c in reversed(TANH_Q[:-1]):
            den = self.fma(den, z, f(c))
        y = b.fdiv(b.fmul(xc, num), den)
        return self.fmin(self.fmax(y, f(-1.0)), f(1.0))


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
