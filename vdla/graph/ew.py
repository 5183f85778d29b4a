"""Elementwise steps: the operators that stack into one loop nest (chains, conv/dense epilogues).

Two forms of a step:

* :class:`Step`, what a user asks for, with scalars or arrays (or :class:`TensorType` s) as operands,
  built by the constructors below (``ew.add(b)``, ``ew.requantize(m, s)``, ...);
* :class:`EwStep`, the resolved, hashable form a kernel is compiled from: every operand is a
  compile-time :class:`Const` or an :class:`Arg` index into the chain's inputs.

Integer arithmetic (add, sub, mul, max, min) produces int32 (numpy int32 wrap-around); a float value
never mixes silently with an int operand: dequantize, quantize or cast between the two. Division and
square root are float32 only (IEEE, correctly rounded, like numpy's).
Requantization is :func:`vdla.isa.arith.requantize`, the accelerator's own (int32 product, rounding
shift in [0, 31]), so a CPU group and an accelerator epilogue agree bit for bit.

Example::

    from vdla.cpu_fallback import compile_chain
    from vdla.graph import ew
    steps = [ew.requantize(m, s), ew.add(residual), ew.relu(), ew.clip(0, 127), ew.cast("int8")]
    k = compile_chain(acc, steps)
    y = k(acc, residual)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from vdla.graph.graph import Node
from vdla.graph.types import DTYPES, INT_RANGE, TensorType, UnsupportedError, is_float
from vdla.isa.arith import MAX_SHIFT, MUL_MAX_SHIFT


@dataclass(frozen=True)
class Const:
    """A compile-time scalar operand (baked into the kernel)."""

    value: int | float


@dataclass(frozen=True)
class Arg:
    """A tensor operand: index into the inputs of the chain (0 is the chain's primary input)."""

    index: int


Operand = Const | Arg

# operator -> names of its operands (the running value is implicit)
EW_OPERANDS: dict[str, tuple[str, ...]] = {
    "add": ("b",),
    "sub": ("b",),
    "mul": ("b",),
    "max": ("b",),
    "min": ("b",),
    "relu": (),
    "clip": ("lo", "hi"),
    "sigmoid": (),
    "tanh": (),
    "exp": (),
    "div": ("b",),
    "sqrt": (),
    "quantize": ("scale", "zero_point"),
    "dequantize": ("scale", "zero_point"),
    "requantize": ("multiplier", "shift"),
    "rshift": ("shift",),
    "cast": (),
}
BINARY_OPS = ("add", "sub", "mul", "max", "min")
# node attributes that annotate the result's type (quantization axis, quantization) rather than the computation
ANNOTATIONS = ("axis", "quant")
# operator -> its attributes with their defaults (None: required)
EW_ATTRS: dict[str, dict[str, int | str | None]] = {
    "mul": {"shift": 0},  # integer mul: the exact product rounded right by it (vdla.isa.arith.mul_shift)
    "requantize": {"lo": -128, "hi": 127},
    "cast": {"dtype": None},
}


@dataclass(frozen=True)
class EwStep:
    """One resolved elementwise step: ``value = op(value, *operands)`` with attributes.

    ``attrs`` is a sorted tuple of (name, value) pairs: ``lo``/``hi`` for requantize, ``dtype`` for cast.
    """

    op: str
    operands: tuple[Operand, ...] = ()
    attrs: tuple[tuple[str, int | str], ...] = ()

    def attr(self, name: str) -> int | str:
        """The attribute's value, else its default in :data:`EW_ATTRS`."""
        given = dict(self.attrs)
        if name in given:
            return given[name]
        default = EW_ATTRS.get(self.op, {}).get(name)
        if default is None:
            raise KeyError(f"{self.op} step has no attribute {name!r}")
        return default


def _operand_kind(op: str, name: str, operand: Operand, inputs: tuple[TensorType, ...]) -> str:
    """'int' or 'float' kind of an operand, checking scalar constants are finite numbers."""
    if isinstance(operand, Arg):
        return "float" if is_float(inputs[operand.index].dtype) else "int"
    v = operand.value
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise UnsupportedError(op, f"operand {name} must be a number or an array, got {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        raise UnsupportedError(op, f"operand {name} must be finite, got {v}")
    return "int" if isinstance(v, int) else "float"


def operand_fits(operand: Operand, dtype: str, inputs: tuple[TensorType, ...]) -> bool:
    """Whether every value ``operand`` can take fits the integer ``dtype``."""
    lo, hi = INT_RANGE[dtype]
    if isinstance(operand, Const):
        return lo <= operand.value <= hi
    src_lo, src_hi = INT_RANGE[inputs[operand.index].dtype]
    return lo <= src_lo and src_hi <= hi


def _need(op: str, cond: bool, message: str) -> None:
    if not cond:
        raise UnsupportedError(op, message)


def step_result_dtype(step: EwStep, value: str, inputs: tuple[TensorType, ...]) -> str:
    """Dtype produced by ``step`` applied to a value of dtype ``value``; raises for unsupported combinations.

    Integer arithmetic is done in int32 (wrapping like numpy int32); ints and floats never mix silently.
    """
    op = step.op
    _need(op, op in EW_OPERANDS, "unknown elementwise operator")
    names = EW_OPERANDS[op]
    _need(op, len(step.operands) == len(names), f"expected operands {names}, got {len(step.operands)}")
    known = EW_ATTRS.get(op, {})
    given = dict(step.attrs)
    _need(op, set(given) <= set(known), f"unknown attributes {sorted(set(given) - set(known))}")
    _need(op, all(k in given for k, v in known.items() if v is None), f"needs attributes {sorted(known)}")
    kinds = {n: _operand_kind(op, n, o, inputs) for n, o in zip(names, step.operands, strict=True)}
    operands = dict(zip(names, step.operands, strict=True))
    vfloat = is_float(value)
    if op == "mul" and step.attr("shift"):
        sh = step.attr("shift")
        _need(op, not vfloat and kinds["b"] == "int", "a shifted product needs integer operands")
        _need(op, isinstance(sh, int) and 0 <= sh <= MUL_MAX_SHIFT, f"shift must be in [0, {MUL_MAX_SHIFT}], got {sh}")
    if op in BINARY_OPS or op in ("clip", "div"):
        _need(op, vfloat or op != "div", f"requires a float32 value, got {value} (vdla divides floats only)")
        for n, k in kinds.items():
            # an int constant is accepted for a float value; anything else must match the value's kind
            ok = k == ("float" if vfloat else "int") or (vfloat and isinstance(operands[n], Const) and k == "int")
            _need(op, ok, f"cannot combine a {value} value with a {k} operand {n}; (de)quantize or cast first")
        if vfloat:
            return "float32"
        if op == "clip":
            lo, hi = operands["lo"], operands["hi"]
            if isinstance(lo, Const) and isinstance(hi, Const):
                _need(op, lo.value <= hi.value, f"lo={lo.value} is greater than hi={hi.value}")
            return value if all(operand_fits(o, value, inputs) for o in (lo, hi)) else "int32"
        return "int32"
    if op in ("relu", "cast"):
        if op == "cast":
            _need(op, step.attr("dtype") in DTYPES, f"cannot cast to {step.attr('dtype')}")
            return str(step.attr("dtype"))
        return value
    if op in ("sigmoid", "tanh", "exp", "sqrt"):
        _need(op, vfloat, f"requires a float32 input, got {value}")
        return "float32"
    _need(op, kinds.get("scale", "float") == "float", "scale must be a float")
    scale = operands.get("scale")
    if isinstance(scale, Const):
        _need(op, scale.value > 0, f"scale must be positive, got {scale.value}")
    if op == "quantize":
        _need(op, vfloat, f"requires a float32 input, got {value}")
        _need(op, kinds["zero_point"] == "int", "zero_point must be an integer")
        return "int8"
    _need(op, not vfloat, f"requires an int8 or int32 input, got {value}")
    if op == "rshift":
        _need(op, kinds["shift"] == "int", "shift must be an integer")
        s = operands["shift"]
        if isinstance(s, Const):
            _need(op, 0 <= s.value <= MAX_SHIFT, f"shift must be in [0, {MAX_SHIFT}], got {s.value}")
        return "int32"
    if op == "dequantize":
        _need(op, kinds["zero_point"] == "int", "zero_point must be an integer")
        return "float32"
    # requantize
    _need(op, kinds["multiplier"] == "int" and kinds["shift"] == "int", "multiplier and shift must be integers")
    m, s = operands["multiplier"], operands["shift"]
    _need(op, operand_fits(m, "int32", inputs), "multiplier must fit in int32")
    if isinstance(s, Const):
        _need(op, 0 <= s.value <= MUL_MAX_SHIFT, f"shift must be in [0, {MUL_MAX_SHIFT}], got {s.value}")
    lo, hi = int(step.attr("lo")), int(step.attr("hi"))
    _need(op, -128 <= lo <= hi <= 127, f"clamp range [{lo}, {hi}] must lie within int8")
    return "int8"


def operand_input(node: Node, name: str) -> str | None:
    """The tensor input an elementwise node takes for operand ``name`` (None: an attribute or absent)."""
    tensors = iter(node.inputs[1:])
    for opname in EW_OPERANDS[node.op]:
        if opname in node.attrs:
            continue
        value = next(tensors, None)
        if opname == name:
            return value
    return None


def operand_value(node: Node, name: str, params: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The constant value of operand ``name`` of an elementwise node: its attribute, or its tensor input
    when that is a parameter; None when the operand is a computed tensor."""
    if name in node.attrs:
        return np.asarray(node.attrs[name])
    source = operand_input(node, name)
    return None if source is None else params.get(source)


def node_steps(nodes: list[Node], names: list[str]) -> tuple[EwStep, ...]:
    """EwSteps of elementwise graph nodes; tensor operands are numbered by their position in ``names``
    (new names are appended). Each operand of :data:`EW_OPERANDS` is the node's scalar attribute of that
    name, or else its next tensor input after ``inputs[0]`` (the running value)."""
    steps = []
    for node in nodes:
        tensors = iter(node.inputs[1:])
        operands: list[Const | Arg] = []
        for opname in EW_OPERANDS[node.op]:
            if opname in node.attrs:
                operands.append(Const(node.attrs[opname]))
                continue
            name = next(tensors, None)
            if name is None:
                raise UnsupportedError(node.op, f"node {node.output!r} misses operand {opname}")
            if name not in names:
                names.append(name)
            operands.append(Arg(names.index(name)))
        defaults = {k: v for k, v in EW_ATTRS.get(node.op, {}).items() if v is not None}
        attrs = defaults | {
            k: v for k, v in node.attrs.items() if k not in EW_OPERANDS[node.op] and k not in ANNOTATIONS
        }
        steps.append(EwStep(node.op, tuple(operands), tuple(sorted(attrs.items()))))
    return tuple(steps)


# ---------------------------------------------------------------------------------------------------------
# Requested steps

StepOperand = int | float | np.ndarray | TensorType


@dataclass(eq=False)
class Step:
    """A requested elementwise step: operator name, operands, attributes (see :data:`EW_OPERANDS`)."""

    op: str
    operands: tuple[StepOperand, ...] = ()
    attrs: dict[str, int | str] = field(default_factory=dict)


def add(b: StepOperand) -> Step:
    return Step("add", (b,))


def sub(b: StepOperand) -> Step:
    return Step("sub", (b,))


def mul(b: StepOperand, shift: int = 0) -> Step:
    """``x * b``; with integers and a ``shift``, the exact product rounded right by it and wrapped to int32
    (:func:`vdla.isa.arith.mul_shift`, the ALU's MUL reading a row)."""
    return Step("mul", (b,), {"shift": shift} if shift else {})


def maximum(b: StepOperand) -> Step:
    return Step("max", (b,))


def minimum(b: StepOperand) -> Step:
    return Step("min", (b,))


def div(b: StepOperand) -> Step:
    """float32 division ``x / b`` (IEEE: x / 0 is +-inf or NaN, like numpy)."""
    return Step("div", (b,))


def relu() -> Step:
    return Step("relu")


def clip(lo: StepOperand, hi: StepOperand) -> Step:
    return Step("clip", (lo, hi))


def sigmoid() -> Step:
    return Step("sigmoid")


def tanh() -> Step:
    return Step("tanh")


def exp() -> Step:
    return Step("exp")


def sqrt() -> Step:
    """float32 square root (IEEE, correctly rounded; NaN for negative inputs, like numpy)."""
    return Step("sqrt")


def quantize(scale: StepOperand, zero_point: StepOperand = 0) -> Step:
    """float32 -> int8: saturate(round_half_even(x / scale) + zero_point), like onnx QuantizeLinear."""
    return Step("quantize", (scale, zero_point))


def dequantize(scale: StepOperand, zero_point: StepOperand = 0) -> Step:
    """int8/int32 -> float32: (x - zero_point) * scale."""
    return Step("dequantize", (scale, zero_point))


def requantize(multiplier: StepOperand, shift: StepOperand, lo: int = -128, hi: int = 127) -> Step:
    """int32 -> int8: :func:`vdla.isa.arith.requantize`, clamp(rounding_shift(wrap32(x * multiplier), shift), lo, hi).

    Tensor shifts are clamped to [0, 31]; a scalar shift outside that range is an error.
    """
    return Step("requantize", (multiplier, shift), {"lo": lo, "hi": hi})


def rshift(shift: StepOperand) -> Step:
    """int -> int32: :func:`vdla.isa.arith.rounding_shift`, ``(x + 2^(s-1)) >> s`` (the ALU's RSHR).

    Tensor shifts are clamped to [0, 31]; a scalar shift outside that range is an error.
    """
    return Step("rshift", (shift,))


def cast(dtype: str | np.dtype | type) -> Step:
    """Saturating conversion to ``dtype``; float -> int rounds half to even."""
    return Step("cast", (), {"dtype": np.dtype(dtype).name})
