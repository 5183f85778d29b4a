"""Elementwise operators, each defined once (:class:`EwDef`), and the steps that stack them into one loop
nest (chains, conv/dense epilogues).

An elementwise operator's definition holds its operands and attributes, its dtype rule, its computation as
an expression over :class:`~vdla.graph.ewmath.Math` (from which both its numpy semantics and its JIT kernel
come), how an int8 result keeps a quantization, and whether an accelerator layer's epilogue can run it.
Adding one is adding a :func:`define` below; :mod:`vdla.graph.ops` registers every definition as an
operator of the graph.

Two forms of a step:

* :class:`Step`, what a user asks for, with scalars or arrays (or :class:`TensorType` s) as operands,
  built by each operator's constructor ``ew.<name>`` (``ew.add(b)``, ``ew.requantize(m, s)``, ...:
  :func:`step_constructor`, made from its definition);
* :class:`EwStep`, the resolved, hashable form a kernel is compiled from: every operand is a
  compile-time :class:`Const` or an :class:`Arg` index into the chain's inputs.

Integer arithmetic (add, sub, mul, max, min) produces int32 (numpy int32 wrap-around); a float value
never mixes silently with an int operand: dequantize, quantize or cast between the two. Division and
square root are float32 only (IEEE, correctly rounded, like numpy's). Comparisons, ``isnan`` and
``isinf`` produce bools, which the logical (``bit_*``), ``where`` and conversion operators take and
arithmetic refuses; the remainders, shifts and bitwise operators keep an integer value's dtype.
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

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from vdla.graph.ewmath import FUNCTIONS, Math
from vdla.graph.graph import Node
from vdla.graph.types import DTYPES, INT_RANGE, Quant, TensorType, UnsupportedError, dtype_kind, is_float
from vdla.isa.arith import INT8_MAX, INT8_MIN, MAX_SHIFT, MUL_MAX_SHIFT


@dataclass(frozen=True)
class Const:
    """A compile-time scalar operand (baked into the kernel)."""

    value: int | float


@dataclass(frozen=True)
class Arg:
    """A tensor operand: index into the inputs of the chain (0 is the chain's primary input)."""

    index: int


Operand = Const | Arg
# node attributes that annotate the result's type (quantization axis, quantization) rather than the computation
ANNOTATIONS = ("axis", "quant")


@dataclass(frozen=True)
class EwStep:
    """One resolved elementwise step: ``value = op(value, *operands)`` with attributes.

    ``attrs`` is a sorted tuple of (name, value) pairs: ``lo``/``hi`` for requantize, ``dtype`` for cast.
    """

    op: str
    operands: tuple[Operand, ...] = ()
    attrs: tuple[tuple[str, int | str], ...] = ()

    def attr(self, name: str) -> int | str:
        """The attribute's value, else its default in the operator's :class:`EwDef`."""
        given = dict(self.attrs)
        if name in given:
            return given[name]
        d = EW.get(self.op)
        default = None if d is None else d.defaults.get(name)
        if default is None:
            raise KeyError(f"{self.op} step has no attribute {name!r}")
        return default


# ---------------------------------------------------------------------------------------------------------
# The definition of an elementwise operator


@dataclass(frozen=True)
class StepTyping:
    """What a dtype rule sees of a step: the running value's dtype, the operands by name with their kind
    ('int' or 'float'), and the chain's input types (which an :class:`Arg` indexes)."""

    step: EwStep
    value: str
    operands: Mapping[str, Operand]
    kinds: Mapping[str, str]
    inputs: tuple[TensorType, ...]

    @property
    def op(self) -> str:
        return self.step.op

    @property
    def fl(self) -> bool:
        return is_float(self.value)

    @property
    def kind(self) -> str:
        """The running value's kind: 'float', 'int' or 'bool'."""
        return dtype_kind(self.value)


@dataclass(frozen=True)
class StepTypes:
    """What an expression sees of its step: the step (its attributes), the running value's dtype and the
    result's (:func:`step_result_dtype`)."""

    step: EwStep
    dtype: str
    out: str

    @property
    def fl(self) -> bool:
        return is_float(self.dtype)


Rule = Callable[[StepTyping], str]
# (math, running value, operand values in EwDef.operands order, types) -> result
Expr = Callable[[Math, Any, tuple[Any, ...], StepTypes], Any]
# (node, input types, parameters, result dtype) -> the quantization of the node's int8 result
QuantRule = Callable[[Node, list[TensorType], Mapping[str, np.ndarray], str], Quant | None]


@dataclass(frozen=True)
class EwDef:
    """One elementwise operator, defined once; :mod:`vdla.graph.ops` registers it as an operator of the
    graph (pattern kind injective, type rule and numpy evaluation through it, CPU kernel a stacked chain).

    * ``operands``: the names of its operands after the running value; in a node each is a scalar attribute
      of that name or else the node's next tensor input;
    * ``attrs``: its other attributes with their defaults (None: required), as (name, default) pairs;
    * ``rule``: the result dtype from the value's dtype and the operands' kinds, raising
      :class:`UnsupportedError` naming the operator for a combination it does not take;
    * ``expr``: the computation over :class:`~vdla.graph.ewmath.Math`, the one source of its numpy
      semantics (:func:`vdla.graph.oracle.ew_step`) and of its JIT code (``vdla.cpu_fallback.ew_emit``);
    * ``quant``: how an int8 result's quantization follows from the node (None: it has none);
    * ``streaming``: cheap enough that a chain of such steps runs at memory speed (the CPU kernel then
      aligns its stores, ``vdla.cpu_fallback.kernels``);
    * ``epilogue_step``: it can be an ALU step of an accelerator layer's epilogue (a conv2d/dense layer's,
      ``vdla.compiler.epilogue_passes.alu_passes``);
    * ``operand_defaults``: operands its step constructor may leave out, with their value, as (name, value)
      pairs (a graph node gives every operand);
    * ``api_name``: the name of its step constructor ``ew.<name>`` and CPU function ``functions.<name>``
      (:attr:`api`) where that is not the operator's own name.
    """

    name: str
    rule: Rule
    expr: Expr
    operands: tuple[str, ...] = ()
    attrs: tuple[tuple[str, int | str | None], ...] = ()
    quant: QuantRule | None = None
    streaming: bool = False
    epilogue_step: bool = False
    operand_defaults: tuple[tuple[str, int | float], ...] = ()
    api_name: str | None = None

    @property
    def defaults(self) -> dict[str, int | str | None]:
        return dict(self.attrs)

    @property
    def api(self) -> str:
        """The name of its step constructor (:func:`step_constructor`) and CPU function
        (``vdla.cpu_fallback.functions``)."""
        return self.api_name or self.name


EW: dict[str, EwDef] = {}


def define(d: EwDef) -> EwDef:
    """Add an elementwise operator to :data:`EW` (and so to the graph's operators)."""
    if d.name in EW:
        raise ValueError(f"elementwise operator {d.name!r} is defined twice")
    EW[d.name] = d
    return d


def is_elementwise(node: Node) -> bool:
    """Whether ``node`` is an elementwise step (its operator is in :data:`EW`)."""
    return node.op in EW


# ---------------------------------------------------------------------------------------------------------
# Dtype rules


# the infinite constants an operand may take: a clip's -inf lo or +inf hi is no bound; a comparison with an
# infinity and a selection of one are exact (neither computes with it: attention's -inf masks)
_EITHER = (-math.inf, math.inf)
UNBOUNDED = {
    ("clip", "lo"): (-math.inf,),
    ("clip", "hi"): (math.inf,),
    ("where", "a"): _EITHER,
    ("where", "b"): _EITHER,
}
UNBOUNDED |= {(op, "b"): _EITHER for op in ("equal", "less", "greater", "less_equal", "greater_equal")}


def _operand_kind(op: str, name: str, operand: Operand, inputs: tuple[TensorType, ...]) -> str:
    """'int', 'float' or 'bool' kind of an operand (a constant is a finite int or float, or an infinity of
    :data:`UNBOUNDED`)."""
    if isinstance(operand, Arg):
        return dtype_kind(inputs[operand.index].dtype)
    v = operand.value
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise UnsupportedError(op, f"operand {name} must be a number or an array, got {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v) and v not in UNBOUNDED.get((op, name), ()):
        raise UnsupportedError(op, f"operand {name} must be finite, got {v}")
    return "int" if isinstance(v, int) else "float"


def operand_fits(operand: Operand, dtype: str, inputs: tuple[TensorType, ...]) -> bool:
    """Whether every value ``operand`` can take fits the integer (or bool: 0 and 1) ``dtype``."""
    lo, hi = _VALUE_RANGE[dtype]
    if isinstance(operand, Const):
        return lo <= operand.value <= hi
    src = inputs[operand.index].dtype
    return src in _VALUE_RANGE and lo <= _VALUE_RANGE[src][0] and _VALUE_RANGE[src][1] <= hi


_VALUE_RANGE = {**INT_RANGE, "bool": (0, 1)}


def _need(op: str, cond: bool, message: str) -> None:
    if not cond:
        raise UnsupportedError(op, message)


def step_result_dtype(step: EwStep, value: str, inputs: tuple[TensorType, ...]) -> str:
    """Dtype produced by ``step`` applied to a value of dtype ``value``; raises for unsupported combinations.

    Checks what every elementwise operator shares (its operands and attributes), then its :class:`EwDef`'s
    rule. Integer arithmetic is done in int32 (wrapping like numpy int32); ints and floats never mix silently.
    """
    op = step.op
    _need(op, op in EW, "unknown elementwise operator")
    d = EW[op]
    names = d.operands
    _need(op, len(step.operands) == len(names), f"expected operands {names}, got {len(step.operands)}")
    known = d.defaults
    given = dict(step.attrs)
    _need(op, set(given) <= set(known), f"unknown attributes {sorted(set(given) - set(known))}")
    _need(op, all(k in given for k, v in known.items() if v is None), f"needs attributes {sorted(known)}")
    kinds = {n: _operand_kind(op, n, o, inputs) for n, o in zip(names, step.operands, strict=True)}
    return d.rule(StepTyping(step, value, dict(zip(names, step.operands, strict=True)), kinds, inputs))


def _matching_operands(t: StepTyping, kinds: tuple[str, ...] = ("float", "int")) -> None:
    """The value is of one of ``kinds``; each operand of a float value is float or an int constant, each
    operand of an int (bool) value is int (bool)."""
    _need(t.op, t.kind in kinds, f"takes {' or '.join(kinds)} values, got {t.value}")
    for n, k in t.kinds.items():
        ok = k == t.kind or (t.fl and isinstance(t.operands[n], Const) and k == "int")
        _need(t.op, ok, f"cannot combine a {t.value} value with a {k} operand {n}; (de)quantize or cast first")


def arith_rule(t: StepTyping) -> str:
    """float32 for a float value, else int32 (numpy int32 arithmetic); operands of the value's kind."""
    _matching_operands(t)
    return "float32" if t.fl else "int32"


def _widest(t: StepTyping) -> str:
    """The integer dtype every operand and the value fit: the value's when they all fit it, else int32."""
    return t.value if all(operand_fits(o, t.value, t.inputs) for o in t.operands.values()) else "int32"


def same_kind_rule(t: StepTyping) -> str:
    """float32 for a float value, else the integer dtype the value and its int operands all fit."""
    _matching_operands(t)
    return "float32" if t.fl else _widest(t)


def bits_rule(t: StepTyping) -> str:
    """Bools give a bool; integers the dtype they all fit (bitwise operations of sign-extended values)."""
    _matching_operands(t, ("int", "bool"))
    return t.value if t.kind == "bool" else _widest(t)


def compare_rule(t: StepTyping) -> str:
    """A bool, from numbers of one kind (an int constant may meet a float value) or, for equality, bools."""
    _matching_operands(t, ("float", "int", "bool") if t.op == "equal" else ("float", "int"))
    return "bool"


def _mul_rule(t: StepTyping) -> str:
    sh = t.step.attr("shift")
    if sh:
        _need(t.op, not t.fl and t.kinds["b"] == "int", "a shifted product needs integer operands")
        ok = isinstance(sh, int) and 0 <= sh <= MUL_MAX_SHIFT
        _need(t.op, ok, f"shift must be in [0, {MUL_MAX_SHIFT}], got {sh}")
    return arith_rule(t)


def _div_rule(t: StepTyping) -> str:
    _need(t.op, t.fl, f"requires a float32 value, got {t.value} (vdla divides floats only)")
    return arith_rule(t)


def _clip_rule(t: StepTyping) -> str:
    """An int value keeps its dtype when both bounds fit in it, else becomes int32."""
    _matching_operands(t)
    if t.fl:
        return "float32"
    lo, hi = t.operands["lo"], t.operands["hi"]
    if isinstance(lo, Const) and isinstance(hi, Const):
        _need(t.op, lo.value <= hi.value, f"lo={lo.value} is greater than hi={hi.value}")
    return t.value if all(operand_fits(o, t.value, t.inputs) for o in (lo, hi)) else "int32"


def numeric_rule(t: StepTyping) -> str:
    """The value's own dtype, a number (float32, int8 or int32), with operands of its kind."""
    _matching_operands(t)
    return t.value


def _bitcast_rule(t: StepTyping) -> str:
    """float32 <-> int32 (the two held dtypes of one width)."""
    to = t.step.attr("dtype")
    _need(t.op, {t.value, to} <= {"float32", "int32"}, f"reinterprets float32 and int32 only, got {t.value} to {to}")
    return str(to)


def _cast_rule(t: StepTyping) -> str:
    _need(t.op, t.step.attr("dtype") in DTYPES, f"cannot cast to {t.step.attr('dtype')}")
    return str(t.step.attr("dtype"))


def float_rule(t: StepTyping) -> str:
    """float32 -> float32 only (float operands or int constants)."""
    _need(t.op, t.fl, f"requires a float32 input, got {t.value}")
    _matching_operands(t)
    return "float32"


def _scale(t: StepTyping) -> None:
    _need(t.op, t.kinds["scale"] == "float", "scale must be a float")
    scale = t.operands["scale"]
    if isinstance(scale, Const):
        _need(t.op, scale.value > 0, f"scale must be positive, got {scale.value}")


def _int_input(t: StepTyping) -> None:
    _need(t.op, t.kind == "int", f"requires an int8 or int32 input, got {t.value}")


def _quantize_rule(t: StepTyping) -> str:
    _scale(t)
    _need(t.op, t.fl, f"requires a float32 input, got {t.value}")
    _need(t.op, t.kinds["zero_point"] == "int", "zero_point must be an integer")
    return "int8"


def _dequantize_rule(t: StepTyping) -> str:
    _scale(t)
    _int_input(t)
    _need(t.op, t.kinds["zero_point"] == "int", "zero_point must be an integer")
    return "float32"


def _rshift_rule(t: StepTyping) -> str:
    _int_input(t)
    _need(t.op, t.kinds["shift"] == "int", "shift must be an integer")
    s = t.operands["shift"]
    if isinstance(s, Const):
        _need(t.op, 0 <= s.value <= MAX_SHIFT, f"shift must be in [0, {MAX_SHIFT}], got {s.value}")
    return "int32"


def _requantize_rule(t: StepTyping) -> str:
    _int_input(t)
    _need(t.op, t.kinds["multiplier"] == "int" and t.kinds["shift"] == "int", "multiplier and shift must be integers")
    m, s = t.operands["multiplier"], t.operands["shift"]
    _need(t.op, operand_fits(m, "int32", t.inputs), "multiplier must fit in int32")
    if isinstance(s, Const):
        _need(t.op, 0 <= s.value <= MUL_MAX_SHIFT, f"shift must be in [0, {MUL_MAX_SHIFT}], got {s.value}")
    lo, hi = int(t.step.attr("lo")), int(t.step.attr("hi"))
    _need(t.op, INT8_MIN <= lo <= hi <= INT8_MAX, f"clamp range [{lo}, {hi}] must lie within int8")
    return "int8"


# ---------------------------------------------------------------------------------------------------------
# Quantization rules


def keep_quant(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray], dtype: str) -> Quant | None:
    """An int8 result of an int8 input keeps the input's quantization (the step commutes with it)."""
    return inputs[0].quant if dtype == "int8" and inputs[0].dtype == "int8" else None


def _quantize_quant(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray], dtype: str) -> Quant | None:
    """The quantization its constant scale and zero point give (per channel along ``axis``)."""
    scale = operand_value(node, "scale", params)
    zp = operand_value(node, "zero_point", params)
    if scale is None:
        return None
    axis = node.attrs.get("axis", 1 if np.asarray(scale).size > 1 else None)
    return Quant.of(scale, 0 if zp is None else zp, axis)


# ---------------------------------------------------------------------------------------------------------
# The elementwise operators


def binary(method: str) -> Expr:
    """``m.<method>(value, b)`` of a float value and a float ``b``, or of int32 views of an int value and ``b``."""

    def expr(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
        fn = getattr(m, method)
        return fn(x, m.f32(o[0])) if t.fl else fn(m.i32(x), m.i32(o[0]))

    return expr


def _mul(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """``x * b``; of integers with a ``shift``, the exact product rounded right by it and wrapped to int32
    (:func:`vdla.isa.arith.mul_shift`, the ALU's MUL reading a row)."""
    shift = int(t.step.attr("shift"))
    if not t.fl and shift:
        return m.mul_shift(x, o[0], shift)
    return binary("mul")(m, x, o, t)


def _clip(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    lo, hi = o
    if t.fl:
        return m.minimum(m.maximum(x, m.f32(lo)), m.f32(hi))
    return m.narrow(m.minimum(m.maximum(m.i32(x), m.i32(lo)), m.i32(hi)), t.out)


def _sigmoid(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    return m.div(m.f32(1.0), m.add(m.f32(1.0), m.exp(m.neg(x))))


def _logistic(m: Math, y: Any) -> Any:
    """1 / (1 + exp(-y)) as e / (1 + e) for negative y (e = exp(-|y|)): no overflow to 0 where the result
    is a tiny float (the sigmoid operator keeps its own form, 0 below about -88)."""
    e = m.exp(m.neg(m.abs(y)))
    one = m.add(m.f32(1.0), e)
    return m.select(m.less(y, m.f32(0.0)), m.div(e, one), m.div(m.f32(1.0), one))


def _quantize(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """saturate(round_half_even(x / scale) + zero_point) to int8, like onnx QuantizeLinear."""
    scale, zero_point = o
    return m.cast(m.add(m.rint(m.div(x, m.f32(scale))), m.f32(zero_point)), "int8")


def _dequantize(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """(x - zero_point) * scale in float32."""
    scale, zero_point = o
    return m.mul(m.f32(m.sub(m.i32(x), m.i32(zero_point))), m.f32(scale))


def _requantize(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """int32 -> int8: :func:`vdla.isa.arith.requantize`, ``clamp(rounding_shift(wrap32(x * multiplier), shift),
    lo, hi)``; a tensor shift is clamped to [0, 31] (a constant one outside it is refused)."""
    return m.requantize(x, *o, int(t.step.attr("lo")), int(t.step.attr("hi")))


def _rshift(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """int -> int32: :func:`vdla.isa.arith.rounding_shift`, ``(x + 2^(s-1)) >> s`` (the ALU's RSHR); a tensor
    shift is clamped to [0, 31] (a constant one outside it is refused)."""
    return m.rounding_shift(x, o[0])


def _cast(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """Saturating conversion to ``dtype``; float -> int rounds half to even."""
    return m.cast(x, t.out)


def _softplus(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow for large x, no cancellation for
    very negative x."""
    return m.add(m.maximum(x, m.f32(0.0)), m.log1p(m.exp(m.neg(m.abs(x)))))


# erf(x) = x + x P(x^2) for |x| < ERF_SPLIT, else sign(x) (1 - exp(Q(min(|x|, 4)))) with Q(t) ~ log(erfc(t))
# (erf(4) rounds to 1 in float32): least-squares fits reweighted towards minimax, of erf(x)/x - 1 and of
# log(erfc(t)) weighted by erfc(t); in float32 within 1.4 ulp of erf (float64 math.erf) on [-6, 6]
ERF_SPLIT, ERF_CLAMP = 0.921875, 4.0
ERF_P = (
    0.12837916612625122,
    -0.37612634897232056,
    0.11283701658248901,
    -0.02685970440506935,
    0.005201720166951418,
    -0.0008149845525622368,
    8.397939382120967e-05,
)
ERF_Q = (
    0.0001763616019161418,
    -1.1295231580734253,
    -0.6333299279212952,
    -0.10829910635948181,
    0.0251319482922554,
    -0.00417590094730258,
    0.0004354777920525521,
    -2.1184241631999612e-05,
)


def _erf(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    a = m.abs(x)
    small = m.fma(x, m.poly(m.mul(x, x), ERF_P), x)
    large = m.sub(m.f32(1.0), m.exp(m.poly(m.minimum(a, m.f32(ERF_CLAMP)), ERF_Q)))
    return m.select(m.less(a, m.f32(ERF_SPLIT)), small, m.select(m.less(x, m.f32(0.0)), m.neg(large), large))


_ARITH = {"rule": arith_rule, "operands": ("b",), "streaming": True}
define(EwDef("add", expr=binary("add"), epilogue_step=True, **_ARITH))
define(EwDef("sub", expr=binary("sub"), **_ARITH))
define(EwDef("mul", _mul_rule, _mul, ("b",), (("shift", 0),), streaming=True, epilogue_step=True))
define(EwDef("max", expr=binary("maximum"), quant=keep_quant, api_name="maximum", **_ARITH))
define(EwDef("min", expr=binary("minimum"), quant=keep_quant, api_name="minimum", **_ARITH))
define(EwDef("div", _div_rule, binary("div"), ("b",)))
define(
    EwDef(
        "relu",
        numeric_rule,
        lambda m, x, o, t: m.maximum(x, m.like(0, x)),
        quant=keep_quant,
        streaming=True,
        epilogue_step=True,
    )
)
define(EwDef("clip", _clip_rule, _clip, ("lo", "hi"), quant=keep_quant, streaming=True, epilogue_step=True))
define(EwDef("sigmoid", float_rule, _sigmoid))
define(EwDef("tanh", float_rule, lambda m, x, o, t: m.tanh(x)))
define(EwDef("exp", float_rule, lambda m, x, o, t: m.exp(x)))
define(EwDef("sqrt", float_rule, lambda m, x, o, t: m.sqrt(x)))
define(EwDef("softplus", float_rule, _softplus))
define(EwDef("erf", float_rule, _erf))
_ZERO_POINT = {"operands": ("scale", "zero_point"), "operand_defaults": (("zero_point", 0),)}
define(EwDef("quantize", _quantize_rule, _quantize, quant=_quantize_quant, **_ZERO_POINT))
define(EwDef("dequantize", _dequantize_rule, _dequantize, streaming=True, **_ZERO_POINT))
define(
    EwDef(
        "requantize",
        _requantize_rule,
        _requantize,
        ("multiplier", "shift"),
        (("lo", INT8_MIN), ("hi", INT8_MAX)),
    )
)
define(EwDef("rshift", _rshift_rule, _rshift, ("shift",), epilogue_step=True))
define(
    EwDef(
        "cast",
        _cast_rule,
        _cast,
        attrs=(("dtype", None),),
        quant=keep_quant,
        streaming=True,
        epilogue_step=True,
    )
)


# ---------------------------------------------------------------------------------------------------------
# Math, comparisons, logic and conversions


def _typed(m: Math, v: Any, dtype: str) -> Any:
    """Operand ``v`` (a value of ``dtype``, an integer value or a constant) as a value of ``dtype``."""
    if is_float(dtype):
        return m.f32(v)
    if dtype == "int32":
        return m.i32(v)
    return m.narrow(m.i32(v), dtype) if isinstance(v, int | float) else v


def _pair(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> tuple[Any, Any]:
    """The value and its operand ``b`` as float32, or as int32 views (integers and bools)."""
    return (x, m.f32(o[0])) if t.fl else (m.i32(x), m.i32(o[0]))


def _float_to_bool_rule(t: StepTyping) -> str:
    _need(t.op, t.fl, f"requires a float32 input, got {t.value}")
    return "bool"


def _sign(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """1, -1, or ``x`` itself (0, -0, NaN)."""
    zero = m.like(0, x)
    return m.select(m.less(zero, x), m.like(1, x), m.select(m.less(x, zero), m.like(-1, x), x))


def _isinf(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    pos, neg = m.equal(x, m.f32(math.inf)), m.equal(x, m.f32(-math.inf))
    if not int(t.step.attr("detect_negative")):
        return pos if int(t.step.attr("detect_positive")) else m.bit_and(pos, neg)  # never both: all false
    return m.bit_or(pos, neg) if int(t.step.attr("detect_positive")) else neg


def _less_equal(m: Math, a: Any, b: Any) -> Any:
    """``a <= b``, false where either is NaN."""
    return m.bit_or(m.less(a, b), m.equal(a, b))


def _bits(method: str) -> Expr:
    """``m.<method>`` of bools, or of int32 views of integers narrowed back to the result's dtype."""

    def expr(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
        if t.out == "bool":
            return getattr(m, method)(x, *o)
        return m.narrow(getattr(m, method)(m.i32(x), *(m.i32(v) for v in o)), t.out)

    return expr


def _shift_rule(t: StepTyping) -> str:
    """The integer value's own dtype, shifted by an integer."""
    _matching_operands(t, ("int",))
    return t.value


def _shift(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """ONNX BitShift in the value's dtype (int8 computes in int32 and keeps the low 8 bits; a right shift
    sign-fills): a shift outside [0, 31] leaves what the sign fill alone gives, 0 to the left, 0 or -1 to
    the right."""
    v, s = m.i32(x), m.i32(o[0])
    inside = m.bit_and(m.less(m.i32(-1), s), m.less(s, m.i32(32)))
    s = m.select(inside, s, m.i32(31))
    if t.step.op == "shift_left":
        return m.narrow(m.select(inside, m.shift_left(v, s), m.i32(0)), t.out)
    return m.narrow(m.shift_right(v, s), t.out)


def _mod(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """ONNX Mod: with ``fmod`` C's remainder (the sign of ``x``), else the floored one (the sign of ``b``:
    the remainder plus ``b`` where their signs differ; a zero has the sign of ``b``)."""
    a, b = _pair(m, x, o, t)
    r = m.fmod(a, b)
    if not int(t.step.attr("fmod")):
        zero = m.like(0, r)
        flip = m.bit_and(m.bit_not(m.equal(r, zero)), m.bit_xor(m.less(r, zero), m.less(b, zero)))
        r = m.select(flip, m.add(r, b), r)
        if t.fl:
            r = m.select(m.equal(r, zero), m.select(m.less(b, zero), m.f32(-0.0), m.f32(0.0)), r)
    return r if t.fl else m.narrow(r, t.out)


# float exponents at most this are raised by multiplications (at most two roundings more than powf)
POW_MULTIPLY_MAX = 4


def _pow_rule(t: StepTyping) -> str:
    """A float base takes any number exponent; an integer one a constant non-negative integer (int32)."""
    y = t.operands["y"]
    if t.fl:
        _need(t.op, t.kinds["y"] in ("float", "int"), f"the exponent must be a number, got {t.kinds['y']}")
        return "float32"
    ok = t.kind == "int" and isinstance(y, Const) and isinstance(y.value, int) and y.value >= 0
    _need(t.op, ok, "an integer base needs a constant non-negative integer exponent")
    return "int32"


def _power(m: Math, x: Any, n: int) -> Any:
    """``x ** n`` by squaring (wrapping like int32 for an int32 ``x``)."""
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else m.mul(result, base)
        n >>= 1
        if n:
            base = m.mul(base, base)
    return m.like(1, x) if result is None else result


def _pow(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """C's powf; a constant exponent 0..4 as multiplications, 0.5 as a square root (+inf at -inf), -1 as a
    division; an integer base to a constant exponent by squaring."""
    y = o[0]
    if not t.fl:
        return _power(m, m.i32(x), int(y))
    if isinstance(y, int | float):
        if float(y).is_integer() and 0 <= y <= POW_MULTIPLY_MAX:
            return _power(m, x, int(y))
        if y == 0.5:
            return m.select(m.equal(x, m.f32(-math.inf)), m.f32(math.inf), m.sqrt(x))
        if y == -1:
            return m.div(m.f32(1.0), x)
        y = m.f32(y)
    return m.pow(x, y)


def _where_rule(t: StepTyping) -> str:
    """A bool condition; the result has the dtype of the tensor operands (one dtype), else float32 for a
    float constant, else int32; a constant must fit the result's dtype."""
    _need(t.op, t.kind == "bool", f"the condition must be bool, got {t.value}")
    tensors = {t.inputs[o.index].dtype for o in t.operands.values() if isinstance(o, Arg)}
    consts = [o for o in t.operands.values() if isinstance(o, Const)]
    _need(t.op, len(tensors) <= 1, f"both choices must have one dtype, got {sorted(tensors)}")
    if not tensors:
        return "float32" if any(isinstance(c.value, float) for c in consts) else "int32"
    dtype = tensors.pop()
    for c in consts:
        ok = is_float(dtype) or (isinstance(c.value, int) and dtype in INT_RANGE and operand_fits(c, dtype, ()))
        _need(t.op, ok, f"the constant {c.value} does not fit the {dtype} choice")
    return dtype


def _elu(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    return m.select(m.less(x, m.f32(0.0)), m.mul(m.f32(o[0]), m.expm1(x)), x)


def _selu(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    alpha, gamma = (m.f32(v) for v in o)
    return m.mul(gamma, m.select(m.less(m.f32(0.0), x), x, m.mul(alpha, m.expm1(x))))


def _celu(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    alpha, zero = m.f32(o[0]), m.f32(0.0)
    return m.add(m.maximum(x, zero), m.minimum(zero, m.mul(alpha, m.expm1(m.div(x, alpha)))))


def _shrink(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    lambd, bias = (m.f32(v) for v in o)
    inner = m.select(m.less(lambd, x), m.sub(x, bias), m.f32(0.0))
    return m.select(m.less(x, m.neg(lambd)), m.add(x, bias), inner)


# erfc(u) = s exp(-u^2 + R(s)), s = 1 / (1 + u/2), for u >= GELU_SPLIT (the form of Numerical Recipes'
# erfcc): a least-squares fit of log(erfc(u) / s) + u^2 on [0.5, 10.1] (erfc underflows beyond), within
# 2e-9; u^2 is carried as two floats so that its rounding does not reach the exponential
GELU_SPLIT = 0.5
ERFC_R = (
    -1.265533447265625,
    1.0006248950958252,
    0.36701032519340515,
    0.14177881181240082,
    -0.3556005358695984,
    0.668519139289856,
    -1.6755058765411377,
    1.8994550704956055,
    -0.9325446486473083,
    0.12337949126958847,
    0.028467314317822456,
)
SQRT_HALF = 0.7071067811865476
SQRT_HALF_LO = SQRT_HALF - float(np.float32(SQRT_HALF))


def _erfc_tail(m: Math, x: Any) -> Any:
    """erfc(-x / sqrt(2)) for x <= -GELU_SPLIT sqrt(2), u = -x / sqrt(2) carried as u_hi + u_lo."""
    c = m.f32(-SQRT_HALF)
    u = m.mul(x, c)
    u_lo = m.add(m.fma(x, c, m.neg(u)), m.mul(x, m.f32(-SQRT_HALF_LO)))
    sq = m.mul(u, u)
    sq_lo = m.fma(m.add(u, u), u_lo, m.fma(u, u, m.neg(sq)))
    s = m.div(m.f32(1.0), m.fma(u, m.f32(0.5), m.f32(1.0)))
    return m.mul(m.mul(s, m.exp(m.neg(sq))), m.exp(m.sub(m.poly(s, ERFC_R), sq_lo)))


def _gelu_rule(t: StepTyping) -> str:
    approximate = t.step.attr("approximate")
    _need(t.op, approximate in ("none", "tanh"), f"approximate must be none or tanh, got {approximate!r}")
    return float_rule(t)


def _gelu(m: Math, x: Any, o: tuple[Any, ...], t: StepTypes) -> Any:
    """0.5 x (1 + erf(x / sqrt(2))), as 0.5 x erfc(-x / sqrt(2)) where the sum would cancel; the tanh form
    0.5 x (1 + tanh(z)) as x sigmoid(2 z), z = sqrt(2 / pi) (x + 0.044715 x^3), which does not cancel."""
    if t.step.attr("approximate") == "tanh":
        z = m.mul(m.f32(2 * math.sqrt(2 / math.pi)), m.fma(m.mul(m.f32(0.044715), x), m.mul(x, x), x))
        return m.mul(x, _logistic(m, z))
    half = m.mul(m.f32(0.5), x)
    erf = _erf(m, m.mul(x, m.f32(SQRT_HALF)), (), t)
    tail = m.less(x, m.f32(-GELU_SPLIT / SQRT_HALF))
    return m.mul(half, m.select(tail, _erfc_tail(m, x), m.add(m.f32(1.0), erf)))


define(EwDef("neg", numeric_rule, lambda m, x, o, t: m.neg(x), streaming=True))
define(EwDef("abs", numeric_rule, lambda m, x, o, t: m.abs(x), streaming=True))
define(EwDef("sign", numeric_rule, _sign, streaming=True))
define(EwDef("reciprocal", float_rule, lambda m, x, o, t: m.div(m.f32(1.0), x)))
define(EwDef("round", float_rule, lambda m, x, o, t: m.rint(x)))
define(EwDef("log", float_rule, lambda m, x, o, t: m.log(x)))
for _name in FUNCTIONS:
    define(EwDef(_name, float_rule, lambda m, x, o, t: m.function(t.step.op, x)))
define(EwDef("pow", _pow_rule, _pow, ("y",)))
define(EwDef("mod", same_kind_rule, _mod, ("b",), (("fmod", 0),)))
define(EwDef("isnan", _float_to_bool_rule, lambda m, x, o, t: m.bit_not(m.equal(x, x))))
define(EwDef("isinf", _float_to_bool_rule, _isinf, attrs=(("detect_negative", 1), ("detect_positive", 1))))
_COMPARE = {"rule": compare_rule, "operands": ("b",), "streaming": True}
define(EwDef("equal", expr=lambda m, x, o, t: m.equal(*_pair(m, x, o, t)), **_COMPARE))
define(EwDef("less", expr=lambda m, x, o, t: m.less(*_pair(m, x, o, t)), **_COMPARE))
define(EwDef("greater", expr=lambda m, x, o, t: m.less(*reversed(_pair(m, x, o, t))), **_COMPARE))
define(EwDef("less_equal", expr=lambda m, x, o, t: _less_equal(m, *_pair(m, x, o, t)), **_COMPARE))
define(EwDef("greater_equal", expr=lambda m, x, o, t: _less_equal(m, *reversed(_pair(m, x, o, t))), **_COMPARE))
for _name in ("bit_and", "bit_or", "bit_xor"):
    define(EwDef(_name, bits_rule, _bits(_name), ("b",), streaming=True))
define(EwDef("bit_not", bits_rule, _bits("bit_not"), streaming=True))
define(EwDef("shift_left", _shift_rule, _shift, ("s",)))
define(EwDef("shift_right", _shift_rule, _shift, ("s",)))
define(EwDef("where", _where_rule, lambda m, x, o, t: m.select(x, *(_typed(m, v, t.out) for v in o)), ("a", "b"),
             streaming=True))  # fmt: skip
define(EwDef("convert", _cast_rule, lambda m, x, o, t: m.convert(x, t.out), attrs=(("dtype", None),), streaming=True))
define(
    EwDef("bitcast", _bitcast_rule, lambda m, x, o, t: m.bitcast(x, t.out), attrs=(("dtype", None),), streaming=True)
)
define(EwDef("elu", float_rule, _elu, ("alpha",)))
define(EwDef("selu", float_rule, _selu, ("alpha", "gamma")))
define(EwDef("celu", float_rule, _celu, ("alpha",)))
define(EwDef("thresholded_relu", float_rule, lambda m, x, o, t: m.select(m.less(m.f32(o[0]), x), x, m.f32(0.0)),
             ("alpha",)))  # fmt: skip
define(EwDef("shrink", float_rule, _shrink, ("lambd", "bias")))
define(EwDef("softsign", float_rule, lambda m, x, o, t: m.div(x, m.add(m.f32(1.0), m.abs(x)))))
define(EwDef("mish", float_rule, lambda m, x, o, t: m.mul(x, m.tanh(_softplus(m, x, o, t)))))
define(EwDef("swish", float_rule, lambda m, x, o, t: m.mul(x, _logistic(m, m.mul(m.f32(o[0]), x))), ("alpha",)))
define(EwDef("prelu", float_rule, lambda m, x, o, t: m.select(m.less(x, m.f32(0.0)), m.mul(x, m.f32(o[0])), x),
             ("slope",)))  # fmt: skip
define(EwDef("gelu", _gelu_rule, _gelu, attrs=(("approximate", "none"),)))


def operand_input(node: Node, name: str) -> str | None:
    """The tensor input an elementwise node takes for operand ``name`` (None: an attribute or absent)."""
    tensors = iter(node.inputs[1:])
    for opname in EW[node.op].operands:
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
    (new names are appended). Each operand of the node's :class:`EwDef` is the node's scalar attribute of
    that name, or else its next tensor input after ``inputs[0]`` (the running value)."""
    steps = []
    for node in nodes:
        d = EW[node.op]
        tensors = iter(node.inputs[1:])
        operands: list[Const | Arg] = []
        for opname in d.operands:
            if opname in node.attrs:
                operands.append(Const(node.attrs[opname]))
                continue
            name = next(tensors, None)
            if name is None:
                raise UnsupportedError(node.op, f"node {node.output!r} misses operand {opname}")
            if name not in names:
                names.append(name)
            operands.append(Arg(names.index(name)))
        defaults = {k: v for k, v in d.attrs if v is not None}
        attrs = defaults | {k: v for k, v in node.attrs.items() if k not in d.operands and k not in ANNOTATIONS}
        steps.append(EwStep(node.op, tuple(operands), tuple(sorted(attrs.items()))))
    return tuple(steps)


# ---------------------------------------------------------------------------------------------------------
# Requested steps

StepOperand = int | float | np.ndarray | TensorType


@dataclass(eq=False)
class Step:
    """A requested elementwise step: operator name, operands, attributes (see its :class:`EwDef` in :data:`EW`)."""

    op: str
    operands: tuple[StepOperand, ...] = ()
    attrs: dict[str, int | str] = field(default_factory=dict)


@cache
def _constructor(d: EwDef) -> Callable[..., Step]:
    P = inspect.Parameter
    omitted = dict(d.operand_defaults)
    params = [P(n, P.POSITIONAL_OR_KEYWORD, default=omitted.get(n, P.empty)) for n in d.operands]
    params += [P(n, P.POSITIONAL_OR_KEYWORD, default=P.empty if v is None else v) for n, v in d.attrs]
    signature = inspect.Signature(params)

    def make(*args: Any, **kwargs: Any) -> Step:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        attrs = {n: np.dtype(given[n]).name if n == "dtype" else given[n] for n, _ in d.attrs}
        return Step(d.name, tuple(given[n] for n in d.operands), attrs)

    make.__name__ = make.__qualname__ = d.api
    make.__signature__ = signature
    make.__doc__ = f"A ``{d.name}`` step (:data:`EW`). {d.expr.__doc__ or ''}".rstrip()
    return make


def step_constructor(api: str) -> Callable[..., Step]:
    """``ew.<api>``: the :class:`Step` constructor of the elementwise operator whose :attr:`EwDef.api` is ``api``.

    It takes the operator's operands (positionally or by name; those of ``operand_defaults`` may be left out),
    then its attributes (each defaulting to its definition's; a ``dtype`` as anything ``np.dtype`` takes), and
    the step carries every attribute, given or defaulted, as :func:`node_steps` writes them. Raises
    AttributeError when no operator has that name.
    """
    d = next((d for d in EW.values() if d.api == api), None)
    if d is None:
        named = f" (operator {api!r} goes by {EW[api].api!r})" if api in EW else ""
        raise AttributeError(f"no elementwise operator is called {api!r}{named}")
    return _constructor(d)


def __getattr__(name: str) -> Callable[..., Step]:
    """The step constructors: ``ew.add(b)``, ``ew.requantize(m, s)``, ... (:func:`step_constructor`)."""
    try:
        return step_constructor(name)
    except AttributeError as e:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}: {e}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *(d.api for d in EW.values())})
