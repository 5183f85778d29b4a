"""The math that elementwise operators are written in: one interface, a numpy and an LLVM backend.

Each elementwise operator of :mod:`vdla.graph.ew` defines its computation once, as an expression over a
:class:`Math`. :class:`vdla.graph.oracle.NumpyMath` evaluates the expression on numpy arrays (the oracle and
the graph interpreter), and ``vdla.cpu_fallback.ew_emit.LlvmMath`` emits it as LLVM IR, one element at a
time (the CPU kernels). So an operator's numpy semantics and its JIT kernel come from one definition.

A value is a backend value (an array, an LLVM value) of dtype int8, int32, float32 or bool, or a Python
number (a compile-time constant) until :meth:`Math.f32`, :meth:`Math.i32` or :meth:`Math.like` makes it one.
Comparisons give bool values; ``select`` takes one.

Invariants every backend keeps:

* integer arithmetic takes two values of one integer dtype and wraps in it; float arithmetic is IEEE
  float32 rounding to nearest even; ``minimum``/``maximum`` propagate NaN;
* the transcendental functions (``exp``, ``log``, ``tanh``, the trigonometric and hyperbolic functions and
  their inverses, ``pow``) may differ between the backends by a few ulp (numpy's libm; vectorizable
  polynomials in the JIT, the trigonometric and hyperbolic ones and ``pow`` evaluated in float64 and
  rounded once), and ``fma`` rounds once or twice; everything else agrees bit for bit;
* the fixed-point primitives are :mod:`vdla.isa.arith`'s, the accelerator ALU's (MUL, RSHR, REQ), so a
  CPU kernel and an accelerator epilogue agree bit for bit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Generic, TypeVar

V = TypeVar("V")
Number = int | float
# float32 functions of one argument that every backend provides by name (Math.function): floor and ceil
# exactly; sin, cos, tan of any float32 (the argument reduction is exact); NaN outside the domain of asin
# and acos ([-1, 1]), acosh ([1, inf]) and atanh ([-1, 1], +-inf at +-1)
FUNCTIONS = ("floor", "ceil", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")


class Math(ABC, Generic[V]):
    """The operations an elementwise expression may use (see the module docstring for their invariants)."""

    # -- values and conversions ------------------------------------------------------------------------
    @abstractmethod
    def f32(self, v: V | Number) -> V:
        """``v`` as float32: a constant, an integer value converted (rounding to nearest), a float unchanged."""

    @abstractmethod
    def i32(self, v: V | Number) -> V:
        """``v`` as int32: a constant, an int8/int32 value sign-extended, a bool value as 0 or 1."""

    @abstractmethod
    def like(self, value: Number, x: V) -> V:
        """The constant ``value`` in the dtype of ``x``."""

    @abstractmethod
    def cast(self, v: V, dtype: str) -> V:
        """Saturating conversion to ``dtype``; float to integer rounds half to even; to bool is ``v != 0``,
        from bool 0 or 1."""

    @abstractmethod
    def convert(self, v: V, dtype: str) -> V:
        """C's (and ONNX Cast's) conversion to ``dtype``: float to integer truncates toward zero (saturating
        out of range, NaN to 0), an integer keeps its low bits in a narrower one (wraps), to bool is
        ``v != 0``, from bool 0 or 1."""

    @abstractmethod
    def bitcast(self, v: V, dtype: str) -> V:
        """The bits of a float32 or int32 value read as the other (of one width: ONNX BitCast)."""

    @abstractmethod
    def narrow(self, v: V, dtype: str) -> V:
        """An int32 value, known to fit the integer ``dtype``, in that dtype."""

    # -- arithmetic ------------------------------------------------------------------------------------
    @abstractmethod
    def add(self, a: V, b: V) -> V: ...

    @abstractmethod
    def sub(self, a: V, b: V) -> V: ...

    @abstractmethod
    def mul(self, a: V, b: V) -> V: ...

    @abstractmethod
    def div(self, a: V, b: V) -> V:
        """float32 division (IEEE: x / 0 is +-inf or NaN)."""

    @abstractmethod
    def maximum(self, a: V, b: V) -> V: ...

    @abstractmethod
    def minimum(self, a: V, b: V) -> V: ...

    @abstractmethod
    def neg(self, a: V) -> V: ...

    @abstractmethod
    def abs(self, a: V) -> V: ...

    @abstractmethod
    def fma(self, a: V, b: V, c: V) -> V:
        """``a * b + c`` in float32, rounded once or twice."""

    @abstractmethod
    def fmod(self, a: V, b: V) -> V:
        """C's remainder ``a - trunc(a / b) * b``, the sign of ``a``: exact in float32 (NaN where ``b`` is 0
        or ``a`` infinite), and in int32 0 where ``b`` is 0."""

    # -- comparison and selection ----------------------------------------------------------------------
    @abstractmethod
    def less(self, a: V, b: V) -> V:
        """``a < b`` (false where either is NaN)."""

    @abstractmethod
    def equal(self, a: V, b: V) -> V:
        """``a == b`` (false where either is NaN)."""

    @abstractmethod
    def select(self, cond: V, a: V, b: V) -> V:
        """``a`` where the bool ``cond`` holds, else ``b``."""

    # -- bits (integers of one dtype, or bools) ----------------------------------------------------------
    @abstractmethod
    def bit_and(self, a: V, b: V) -> V: ...

    @abstractmethod
    def bit_or(self, a: V, b: V) -> V: ...

    @abstractmethod
    def bit_xor(self, a: V, b: V) -> V: ...

    @abstractmethod
    def bit_not(self, a: V) -> V:
        """Every bit flipped (a bool: its negation)."""

    @abstractmethod
    def shift_left(self, a: V, s: V) -> V:
        """int32 ``a << s`` for ``s`` in [0, 31] (wrapping)."""

    @abstractmethod
    def shift_right(self, a: V, s: V) -> V:
        """int32 arithmetic (sign-filling) ``a >> s`` for ``s`` in [0, 31]."""

    # -- float functions -------------------------------------------------------------------------------
    @abstractmethod
    def exp(self, x: V) -> V: ...

    @abstractmethod
    def log(self, x: V) -> V:
        """Natural logarithm (-inf at 0, NaN below)."""

    @abstractmethod
    def tanh(self, x: V) -> V: ...

    @abstractmethod
    def sqrt(self, x: V) -> V:
        """Correctly rounded square root (NaN below 0)."""

    @abstractmethod
    def rint(self, x: V) -> V:
        """Round half to even, to a float."""

    @abstractmethod
    def function(self, name: str, x: V) -> V:
        """The float32 function ``name`` (one of :data:`FUNCTIONS`) of ``x``."""

    @abstractmethod
    def pow(self, x: V, y: V) -> V:
        """C's ``powf(x, y)`` of a float32 ``x`` and a float32 or integer ``y`` (taken exactly; NaN for a
        finite negative ``x`` and a finite non-integer ``y``; 1 where ``y`` is 0 or ``x`` is 1)."""

    # -- fixed point (vdla.isa.arith) ------------------------------------------------------------------
    @abstractmethod
    def mul_shift(self, x: V, multiplier: V | int, shift: int) -> V:
        """int32 :func:`vdla.isa.arith.mul_shift`: the exact product rounded right by ``shift``, wrapped."""

    @abstractmethod
    def rounding_shift(self, x: V, shift: V | int) -> V:
        """int32 :func:`vdla.isa.arith.rounding_shift` of an integer value; a tensor shift is clamped to
        [0, MAX_SHIFT]."""

    @abstractmethod
    def requantize(self, x: V, multiplier: V | int, shift: V | int, lo: int, hi: int) -> V:
        """int8 :func:`vdla.isa.arith.requantize`; a tensor shift is clamped to [0, MUL_MAX_SHIFT]."""

    # -- derived ---------------------------------------------------------------------------------------
    def poly(self, x: V, coefficients: Sequence[float]) -> V:
        """``sum(c[i] * x^i)`` in float32 by Horner's rule on :meth:`fma`."""
        acc = self.f32(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = self.fma(acc, x, self.f32(c))
        return acc

    def log1p(self, t: V) -> V:
        """``log(1 + t)`` accurate for small ``t`` (Goldberg: ``log(u) * t / (u - 1)`` with ``u = 1 + t``
        rounded, exact where ``u`` is 1)."""
        one = self.f32(1.0)
        u = self.add(one, t)
        return self.select(self.equal(u, one), t, self.div(self.mul(self.log(u), t), self.sub(u, one)))

    def expm1(self, x: V) -> V:
        """``exp(x) - 1`` accurate for small ``x`` (Kahan: ``(u - 1) * x / log(u)`` with ``u = exp(x)``
        rounded, exact where ``u`` is 1; -1 where ``u - 1`` is, ``u`` where it overflows)."""
        one = self.f32(1.0)
        u = self.exp(x)
        um1 = self.sub(u, one)
        y = self.div(self.mul(um1, x), self.log(u))
        y = self.select(self.equal(um1, self.f32(-1.0)), um1, y)
        y = self.select(self.equal(u, self.f32(float("inf"))), u, y)
        return self.select(self.equal(u, one), x, y)
