"""Elementwise step constructors for chains and epilogues.

Operands are scalars (baked into the kernel) or arrays broadcastable to the output (passed at run time)::

    from vdla.cpu_fallback import compile_chain, ew
    steps = [ew.requantize(m, s), ew.add(residual), ew.relu(), ew.clip(0, 127), ew.cast("int8")]
    k = compile_chain(acc, steps)
    y = k(acc, residual)

Integer arithmetic (add, sub, mul, maximum, minimum) produces int32 (numpy int32 wrap-around); a float
value never mixes silently with an int operand: dequantize, quantize or cast between the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vdla.cpu_fallback.ir import TensorType

Operand = int | float | np.ndarray | TensorType


@dataclass(eq=False)
class Step:
    """A requested elementwise step: operator name, operands, attributes (see :data:`ir.EW_OPERANDS`)."""

    op: str
    operands: tuple[Operand, ...] = ()
    attrs: dict[str, int | str] = field(default_factory=dict)


def add(b: Operand) -> Step:
    return Step("add", (b,))


def sub(b: Operand) -> Step:
    return Step("sub", (b,))


def mul(b: Operand) -> Step:
    return Step("mul", (b,))


def maximum(b: Operand) -> Step:
    return Step("max", (b,))


def minimum(b: Operand) -> Step:
    return Step("min", (b,))


def relu() -> Step:
    return Step("relu")


def clip(lo: Operand, hi: Operand) -> Step:
    return Step("clip", (lo, hi))


def sigmoid() -> Step:
    return Step("sigmoid")


def tanh() -> Step:
    return Step("tanh")


def exp() -> Step:
    return Step("exp")


def quantize(scale: Operand, zero_point: Operand = 0) -> Step:
    """float32 -> int8: saturate(round_half_even(x / scale) + zero_point), like onnx QuantizeLinear."""
    return Step("quantize", (scale, zero_point))


def dequantize(scale: Operand, zero_point: Operand = 0) -> Step:
    """int8/int32 -> float32: (x - zero_point) * scale."""
    return Step("dequantize", (scale, zero_point))


def requantize(multiplier: Operand, shift: Operand, lo: int = -128, hi: int = 127) -> Step:
    """int32 -> int8: clamp(round_half_up((x * multiplier) >> shift), lo, hi) in int64 arithmetic.

    Tensor shifts are clamped to [0, 62]; a scalar shift outside that range is an error.
    """
    return Step("requantize", (multiplier, shift), {"lo": lo, "hi": hi})


def cast(dtype: str | np.dtype | type) -> Step:
    """Saturating conversion to ``dtype``; float -> int rounds half to even."""
    return Step("cast", (), {"dtype": np.dtype(dtype).name})
