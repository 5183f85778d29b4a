"""Elementwise arithmetic, activations, math, comparisons, logic and casts (no ``onnx`` import here).

Each ONNX operator of these families becomes one elementwise graph node (an :class:`~vdla.graph.ew.EwDef`),
or a short chain of them where a held dtype needs it. Dtypes: float32, int8, int32 and bool as themselves; a
uint8 tensor is held as int8 ``value - 128`` and an int64 tensor as int32 (:mod:`vdla.frontend.builder`):

* operators that commute with the uint8 shift (comparisons, min/max, selections) take the held values; the
  others compute on the values widened to int32 and hold the result again;
* an int64 operand is taken only where the result provably fits int32 (comparisons, selections, min/max,
  remainders, sign, right shifts, bitwise operations, casts from narrower types); an int64 result that
  could exceed int32 (sums, products, negation, powers, left shifts, casts from float) is refused;
* the arithmetic operators (Add, Sub, Mul, Div) and the activations take float32 (Add, Sub, Mul, Relu and
  Clip int32 too, Relu and Clip int8) and refuse held dtypes.

A scalar constant operand becomes the node's attribute (the kernel bakes it in), any other operand a tensor
input broadcast like numpy's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, size, unsupported
from vdla.frontend.onnx_ops.registry import ARITH, FLOAT, Converter, attr, converter, scalar_of, unary
from vdla.graph.opnames import ADD, MAX, MIN, MUL
from vdla.graph.types import INT_RANGE

NUMBERS = ("float32", "int8", "int32")
HELD_INT = ("uint8", "int64")  # held as int8 value - 128, as int32
# ONNX dtype -> the graph dtype holding it
GRAPH_DTYPE = {"float32": "float32", "int8": "int8", "int32": "int32", "bool": "bool", "uint8": "int8",
               "int64": "int32"}  # fmt: skip
# comparisons: ONNX op -> (graph op, the graph op of the operands swapped)
COMPARISONS = {
    "Equal": ("equal", "equal"),
    "Less": ("less", "greater"),
    "LessOrEqual": ("less_equal", "greater_equal"),
    "Greater": ("greater", "less"),
    "GreaterOrEqual": ("greater_equal", "less_equal"),
}
LOGIC = {"And": "bit_and", "Or": "bit_or", "Xor": "bit_xor", "BitwiseAnd": "bit_and", "BitwiseOr": "bit_or",
         "BitwiseXor": "bit_xor"}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Operands


def _same_dtype(b: Builder, node: OnnxNode, allowed: Sequence[str]) -> str:
    """The one ONNX dtype of the node's inputs, one of ``allowed``."""
    present = [i for i in range(len(node.inputs)) if b.has(node, i)]
    dt = b.require_dtype(node, present[0], allowed)
    for i in present[1:]:
        b.require_dtype(node, i, (dt,))
    return dt


def _scalar(b: Builder, node: OnnxNode, i: int, dt: str) -> int | float | None:
    """Input ``i`` as a scalar attribute in its held form (uint8 shifted by -128), when it is a one-element
    constant whose held value fits; else None (it is passed as a tensor)."""
    if not b.is_const(node, i):
        return None
    c = b.const(node, i, "operand")
    if c.size != 1 or dt == "bool":
        return None
    v = scalar_of("float32" if dt == "float32" else "int32", c)
    v = v - 128 if dt == "uint8" else v
    return v if dt == "float32" or INT_RANGE["int32"][0] <= v <= INT_RANGE["int32"][1] else None


def _binary_node(
    b: Builder,
    node: OnnxNode,
    op: str,
    dt: str,
    out: str | None,
    swapped: str | None = None,
    attrs: dict[str, Any] | None = None,
    **flags: bool,
) -> str:
    """``op(input 0, input 1)`` as one node with ``attrs``: a scalar constant operand as the attribute ``b``
    (the inputs swapped, and ``op`` replaced by ``swapped``, when it is input 0); ``flags`` mark the
    result (uint8, int64)."""
    i, j = 0, 1
    if swapped is not None and _scalar(b, node, 0, dt) is not None and not b.is_const(node, 1):
        i, j, op = 1, 0, swapped
    x = b.tensor(node, i)
    c = _scalar(b, node, j, dt)
    attrs = dict(attrs or {})
    if c is not None and len(b.shape(node, j)) <= len(b.type_of(x).shape):
        return b.emit(node, op, (x,), {**attrs, "b": c}, out=out, suffix=op, **flags)
    return b.emit(node, op, (x, b.tensor(node, j)), attrs, out=out, suffix=op, **flags)


def _widened(b: Builder, node: OnnxNode, x: str, dt: str) -> str:
    """Graph value ``x`` of ONNX dtype ``dt`` holding its ONNX values (a uint8 as int32)."""
    if dt != "uint8":
        return x
    return b.emit(node, "add", (b.emit(node, "cast", (x,), {"dtype": "int32"}, suffix="widen"),), {"b": 128},
                  suffix="uint8")  # fmt: skip


def _held(b: Builder, node: OnnxNode, v: str, dt: str, out: str | None) -> str:
    """The integer graph value ``v`` (ONNX values that fit ``dt``) as ONNX dtype ``dt`` is held, bound to
    ``out``: uint8 as int8 value - 128, int64 as int32, int8 and int32 as themselves."""
    if dt == "uint8":
        if b.type_of(v).dtype == "bool":
            v = b.emit(node, "cast", (v,), {"dtype": "int32"}, suffix="widen")
        v = b.emit(node, "add", (v,), {"b": -128}, suffix="shift")
        return b.emit(node, "convert", (v,), {"dtype": "int8"}, out=out, suffix="held", uint8=True)
    return b.emit(node, "convert", (v,), {"dtype": GRAPH_DTYPE[dt]}, out=out, suffix="held", int64=dt == "int64")


def _finite(node: OnnxNode, name: str, default: float) -> float:
    """The node's attribute ``name`` (else ``default``), checked finite."""
    v = float(attr(node, name, default))
    if not math.isfinite(v):
        raise unsupported(node, f"{name} must be finite", name)
    return v


# ---------------------------------------------------------------------------------------------------------
# Arithmetic and activations


COMMUTATIVE = (ADD, MUL, MAX, MIN)


def _arith(b: Builder, node: OnnxNode, op: str, out: str | None, allowed: Sequence[str] = ARITH) -> str:
    """``op(input 0, input 1)`` of ``allowed`` operands as one node (:func:`_binary_node`), a constant input 0
    of a commutative ``op`` swapped to the right (a scalar one then is the attribute ``b``)."""
    dt = b.require_dtype(node, 0, allowed)
    b.require_dtype(node, 1, allowed)
    if op in COMMUTATIVE and b.is_const(node, 0) and not b.is_const(node, 1):
        inputs = (node.inputs[1], node.inputs[0])
        node = OnnxNode(node.name, node.op_type, inputs, node.outputs, node.attrs, node.opset)
    return _binary_node(b, node, op, dt, out)


@converter("Add", "Mul")
def _add_mul(b: Builder, node: OnnxNode) -> None:
    _arith(b, node, node.op_type.lower(), node.outputs[0])


@converter("Sub")
def _sub(b: Builder, node: OnnxNode) -> None:
    if b.is_const(node, 0) and not b.is_const(node, 1):  # c - x = (-x) + c, exact in float and int32
        b.require_dtype(node, 1, ARITH)
        neg = b.emit(node, "mul", (b.tensor(node, 1),), {"b": -1}, suffix="neg")
        swapped = OnnxNode(node.name, node.op_type, (b.temp(neg), node.inputs[0]), node.outputs, node.attrs)
        _arith(b, swapped, "add", node.outputs[0])
        return
    _arith(b, node, "sub", node.outputs[0])


@converter("Div")
def _div(b: Builder, node: OnnxNode) -> None:
    """A constant divisor becomes a multiplication by its float32 reciprocal (one rounding more than a
    division, well within float32 tolerances, and it fuses as a multiplier); a computed one a float32
    division (IEEE, as onnxruntime's)."""
    b.require_dtype(node, 0, FLOAT)
    b.require_dtype(node, 1, FLOAT)
    if not b.is_const(node, 1):
        _arith(b, node, "div", node.outputs[0], FLOAT)
        return
    c = np.asarray(b.const(node, 1, "the divisor"), np.float32)
    if np.any(c == 0) or not np.all(np.isfinite(c)):
        raise unsupported(node, "a constant divisor must be finite and non-zero")
    recip = (np.float32(1) / c).astype(np.float32)
    x = b.tensor(node, 0)
    if recip.size == 1 and recip.ndim <= len(b.type_of(x).shape):
        b.emit(node, "mul", (x,), {"b": float(recip.reshape(()))}, out=node.outputs[0])
    else:
        b.emit(node, "mul", (x, b.add_param(node.input(1) + ":reciprocal", recip)), out=node.outputs[0])


converter("Relu")(unary("relu", ("float32", "int8", "int32")))
converter("Sigmoid")(unary("sigmoid", FLOAT))
converter("Tanh")(unary("tanh", FLOAT))
converter("Exp")(unary("exp", FLOAT))
converter("Sqrt")(unary("sqrt", FLOAT))
converter("Softplus")(unary("softplus", FLOAT))
converter("Erf")(unary("erf", FLOAT))


def _hard_sigmoid(b: Builder, node: OnnxNode, x: str, alpha: float, beta: float, out: str | None) -> str:
    y = b.emit(node, "mul", (x,), {"b": alpha}, suffix="alpha")
    y = b.emit(node, "add", (y,), {"b": beta}, suffix="beta")
    return b.emit(node, "clip", (y,), {"lo": 0.0, "hi": 1.0}, out=out, suffix="hard_sigmoid")


@converter("HardSigmoid", attrs=("alpha", "beta"))
def _hardsigmoid(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    alpha, beta = float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))
    _hard_sigmoid(b, node, b.tensor(node, 0), alpha, beta, node.outputs[0])


@converter("HardSwish")
def _hardswish(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    x = b.tensor(node, 0)
    gate = _hard_sigmoid(b, node, x, 1.0 / 6.0, 0.5, None)
    b.emit(node, "mul", (x, gate), out=node.outputs[0])


@converter("Clip")
def _clip(b: Builder, node: OnnxNode) -> None:
    """``clip(x, lo, hi)``; an absent or infinite bound (``-inf`` min, ``+inf`` max: what ``torch.clamp(min=)``
    exports) is no bound, a NaN bound is refused. With one constant bound the other is the unbounded value of
    the dtype (``-inf``/``+inf`` for float32, the integer range otherwise), so the node stays a ``clip``: the
    epilogue folds it like a ReLU."""
    dt = b.require_dtype(node, 0, ("float32", "int8", "int32"))
    x = b.tensor(node, 0)
    bounds = [_clip_bound(b, node, i, name, dt) for i, name in ((1, "min"), (2, "max"))]
    lo, hi = bounds
    if lo is None and hi is None:
        b.alias(node.outputs[0], x)
        return
    if not any(isinstance(v, str) for v in bounds):
        unbounded = (-math.inf, math.inf) if dt == "float32" else INT_RANGE[dt]
        lo, hi = (unbounded[k] if v is None else v for k, v in enumerate(bounds))
        if lo > hi:
            raise unsupported(node, f"min={lo} is greater than max={hi}")
        b.finish(node, b.emit(node, "clip", (x,), {"lo": lo, "hi": hi}, suffix="clip"), dt)
        return
    value = x  # np.clip(x, lo, hi) = minimum(maximum(x, lo), hi)
    for op, v in (("max", lo), ("min", hi)):
        if isinstance(v, str):
            value = b.emit(node, op, (value, v), suffix=op)
        elif v is not None:
            value = b.emit(node, op, (value,), {"b": v}, suffix=op)
    b.finish(node, value, dt)


def _clip_bound(b: Builder, node: OnnxNode, i: int, name: str, dt: str) -> int | float | str | None:
    """Clip's bound input ``i``: a number, a computed scalar (graph value), or None where absent or infinite
    on its own side (``-inf`` min, ``+inf`` max). NaN, ``+inf`` min and ``-inf`` max are refused."""
    if not b.has(node, i):
        return None
    b.require_dtype(node, i, (dt,))
    v = b.value(node, i)
    if size(v.shape) != 1:
        raise unsupported(node, f"{name} must be a scalar, got shape {v.shape}")
    if v.const is None:
        return b.reshape(node, b.tensor(node, i), ())
    bound = scalar_of(dt, v.const)
    if math.isnan(bound):
        raise unsupported(node, f"{name} is NaN (input {node.inputs[i]!r})")
    if math.isinf(bound):
        if (bound < 0) == (name == "min"):
            return None  # no bound
        raise unsupported(node, f"{name} is {bound} (input {node.inputs[i]!r}): every value would be {bound}")
    return bound


# ---------------------------------------------------------------------------------------------------------
# Math

for _op_type, _op in (("Log", "log"), ("Reciprocal", "reciprocal"), ("Floor", "floor"), ("Ceil", "ceil"),
                      ("Round", "round"), ("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Asin", "asin"),
                      ("Acos", "acos"), ("Atan", "atan"), ("Sinh", "sinh"), ("Cosh", "cosh"), ("Asinh", "asinh"),
                      ("Acosh", "acosh"), ("Atanh", "atanh"), ("Softsign", "softsign"),
                      ("Mish", "mish")):  # fmt: skip
    converter(_op_type)(unary(_op, FLOAT))
converter("IsNaN")(unary("isnan", FLOAT))


@converter("Neg", "Abs")
def _neg_abs(b: Builder, node: OnnxNode) -> None:
    """In the input's own dtype (int8 and int32 wrap, like ONNX); int64 could exceed int32 (-(-2^31))."""
    b.require_dtype(node, 0, NUMBERS)
    b.emit(node, node.op_type.lower(), (b.tensor(node, 0),), out=node.outputs[0])


@converter("Sign")
def _sign(b: Builder, node: OnnxNode) -> None:
    dt = b.require_dtype(node, 0, (*NUMBERS, "int64"))
    b.emit(node, "sign", (b.tensor(node, 0),), out=node.outputs[0], int64=dt == "int64")


@converter("Pow")
def _pow(b: Builder, node: OnnxNode) -> None:
    """A float32 base to any float32 or integer exponent; an int32 base to a constant non-negative integer
    exponent (by squaring, wrapping like ONNX's int32)."""
    dt = b.require_dtype(node, 0, ("float32", "int32"))
    et = b.require_dtype(node, 1, ("float32", "int8", "int32", "int64"))
    x = b.tensor(node, 0)
    y = _scalar(b, node, 1, et)
    if y is not None and len(b.shape(node, 1)) <= len(b.type_of(x).shape):
        if dt == "int32" and not (float(y).is_integer() and 0 <= y < 2**31):
            raise unsupported(node, f"an int32 base needs a non-negative integer exponent, got {y}")
        b.emit(node, "pow", (x,), {"y": int(y) if dt == "int32" else y}, out=node.outputs[0])
        return
    if dt == "int32":
        raise unsupported(node, "an int32 base needs a constant exponent (a computed one is not supported)")
    b.emit(node, "pow", (x, b.tensor(node, 1)), out=node.outputs[0])


@converter("Mod", attrs=("fmod",))
def _mod(b: Builder, node: OnnxNode) -> None:
    """C's remainder (fmod=1) or the floored one (fmod=0); the result's magnitude stays below the
    divisor's, so int64 operands fit; uint8 computes on the widened values."""
    fmod = int(attr(node, "fmod", 0))
    if fmod not in (0, 1):
        raise unsupported(node, "fmod must be 0 or 1", "fmod")
    dt = _same_dtype(b, node, (*NUMBERS, *HELD_INT))
    if dt != "uint8":
        _binary_node(b, node, "mod", dt, node.outputs[0], attrs={"fmod": fmod}, int64=dt == "int64")
        return
    x, y = (_widened(b, node, b.tensor(node, i), dt) for i in (0, 1))
    _held(b, node, b.emit(node, "mod", (x, y), {"fmod": fmod}, suffix="mod"), dt, node.outputs[0])


def _activation(op: str, **params: float) -> Converter:
    """A float32 activation whose ONNX attributes (finite; their ONNX defaults given) are its operands."""

    def convert(b: Builder, node: OnnxNode) -> None:
        b.require_dtype(node, 0, FLOAT)
        attrs = {k: _finite(node, k, v) for k, v in params.items()}
        b.emit(node, op, (b.tensor(node, 0),), attrs, out=node.outputs[0])

    return convert


converter("Elu", attrs=("alpha",))(_activation("elu", alpha=1.0))
converter("Selu", attrs=("alpha", "gamma"))(
    _activation("selu", alpha=1.67326319217681884765625, gamma=1.05070102214813232421875)
)
converter("ThresholdedRelu", attrs=("alpha",))(_activation("thresholded_relu", alpha=1.0))
converter("Shrink", attrs=("bias", "lambd"))(_activation("shrink", lambd=0.5, bias=0.0))
converter("Swish", attrs=("alpha",))(_activation("swish", alpha=1.0))


@converter("SwiGLU", attrs=("alpha",))
def _swiglu(b: Builder, node: OnnxNode) -> None:
    """``swish(A, alpha) * B`` (opset 28): the Swish step and a product; A and B have one shape."""
    for i in (0, 1):
        b.require_dtype(node, i, FLOAT)
    if b.shape(node, 0) != b.shape(node, 1):
        raise unsupported(node, f"A {b.shape(node, 0)} and B {b.shape(node, 1)} must have one shape (no broadcasting)")
    gate = b.emit(node, "swish", (b.tensor(node, 0),), {"alpha": _finite(node, "alpha", 1.0)}, suffix="gate")
    b.emit(node, "mul", (gate, b.tensor(node, 1)), out=node.outputs[0])


@converter("Celu", attrs=("alpha",))
def _celu(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    alpha = _finite(node, "alpha", 1.0)
    if alpha == 0:
        raise unsupported(node, "alpha must not be 0 (Celu divides by it)", "alpha")
    b.emit(node, "celu", (b.tensor(node, 0),), {"alpha": alpha}, out=node.outputs[0])


@converter("Gelu", attrs=("approximate",))
def _gelu(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    approximate = str(attr(node, "approximate", "none"))
    if approximate not in ("none", "tanh"):
        raise unsupported(node, "approximate must be none or tanh", "approximate")
    b.emit(node, "gelu", (b.tensor(node, 0),), {"approximate": approximate}, out=node.outputs[0])


@converter("LeakyRelu", attrs=("alpha",))
def _leaky_relu(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    b.emit(node, "prelu", (b.tensor(node, 0),), {"slope": _finite(node, "alpha", 0.01)}, out=node.outputs[0])


@converter("PRelu")
def _prelu(b: Builder, node: OnnxNode) -> None:
    """``x`` where ``x >= 0``, else ``slope * x``, the slope broadcast to ``x`` (a scalar one baked in)."""
    _same_dtype(b, node, FLOAT)
    x = b.tensor(node, 0)
    slope = _scalar(b, node, 1, "float32")
    if slope is not None and len(b.shape(node, 1)) <= len(b.type_of(x).shape):
        b.emit(node, "prelu", (x,), {"slope": slope}, out=node.outputs[0])
        return
    b.emit(node, "prelu", (x, b.tensor(node, 1)), out=node.outputs[0])


@converter("IsInf", attrs=("detect_negative", "detect_positive"))
def _isinf(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    attrs = {k: int(bool(attr(node, k, 1))) for k in ("detect_negative", "detect_positive")}
    b.emit(node, "isinf", (b.tensor(node, 0),), attrs, out=node.outputs[0])


# ---------------------------------------------------------------------------------------------------------
# Variadic: numpy broadcasting over any number of inputs, chained left to right


def _chain_inputs(b: Builder, node: OnnxNode, op: str, dt: str) -> str:
    """``op`` applied left to right over the present inputs (the running value a tensor, scalar constants
    attributes)."""
    present = [i for i in range(len(node.inputs)) if b.has(node, i)]
    acc = node.inputs[present[0]]
    for j in present[1:]:
        step = OnnxNode(node.name, node.op_type, (acc, node.inputs[j]), node.outputs, node.attrs, node.opset)
        acc = b.temp(_binary_node(b, step, op, dt, None, op))
    return b.values[acc].name


@converter("Max", "Min")
def _max_min(b: Builder, node: OnnxNode) -> None:
    """The result is one of the inputs, so int64 fits; uint8's shift commutes with it."""
    dt = _same_dtype(b, node, (*NUMBERS, *HELD_INT))
    y = _chain_inputs(b, node, node.op_type.lower(), dt)
    if dt == "uint8":
        b.emit(node, "cast", (y,), {"dtype": "int8"}, out=node.outputs[0], uint8=True)
        return
    b.finish(node, y, GRAPH_DTYPE[dt], int64=dt == "int64")


@converter("Sum")
def _sum(b: Builder, node: OnnxNode) -> None:
    dt = _same_dtype(b, node, ARITH)
    b.finish(node, _chain_inputs(b, node, "add", dt), dt)


@converter("Mean")
def _mean(b: Builder, node: OnnxNode) -> None:
    _same_dtype(b, node, FLOAT)
    n = sum(b.has(node, i) for i in range(len(node.inputs)))
    b.emit(node, "mul", (_chain_inputs(b, node, "add", "float32"),), {"b": 1.0 / n}, out=node.outputs[0])


# ---------------------------------------------------------------------------------------------------------
# Comparisons and logic


@converter(*COMPARISONS)
def _compare(b: Builder, node: OnnxNode) -> None:
    """Numbers of one dtype (bools for Equal) -> bool; the uint8 shift commutes with the order."""
    allowed = (*NUMBERS, *HELD_INT, *(("bool",) if node.op_type == "Equal" else ()))
    dt = _same_dtype(b, node, allowed)
    op, swapped = COMPARISONS[node.op_type]
    _binary_node(b, node, op, dt, node.outputs[0], swapped)


@converter("Not")
def _not(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, ("bool",))
    b.emit(node, "bit_not", (b.tensor(node, 0),), out=node.outputs[0])


@converter("BitwiseNot")
def _bitwise_not(b: Builder, node: OnnxNode) -> None:
    """~x; a held uint8 h = v - 128 gives ~h = (255 - v) - 128, the held result."""
    dt = b.require_dtype(node, 0, ("int8", "int32", *HELD_INT))
    b.emit(node, "bit_not", (b.tensor(node, 0),), out=node.outputs[0], uint8=dt == "uint8", int64=dt == "int64")


@converter(*LOGIC)
def _logic(b: Builder, node: OnnxNode) -> None:
    """And/Or/Xor of bools, Bitwise* of integers. A held uint8 is the value with its top bit flipped, so
    the operation runs on the flipped values and flips the result's top bit back."""
    op = LOGIC[node.op_type]
    dt = _same_dtype(b, node, ("bool",) if node.op_type in ("And", "Or", "Xor") else ("int8", "int32", *HELD_INT))
    if dt != "uint8":
        _binary_node(b, node, op, dt, node.outputs[0], op, int64=dt == "int64")
        return
    x, y = (b.emit(node, "bit_xor", (b.tensor(node, i),), {"b": -128}, suffix="flip") for i in (0, 1))
    r = b.emit(node, op, (x, y), suffix=op)
    b.emit(node, "bit_xor", (r,), {"b": -128}, out=node.outputs[0], uint8=True)


@converter("BitShift", attrs=("direction",))
def _bitshift(b: Builder, node: OnnxNode) -> None:
    """In the input's width; int64 shifts right only (a left shift could exceed int32); uint8 shifts its
    widened values (a logical shift) and keeps the low 8 bits."""
    direction = str(attr(node, "direction", ""))
    if direction not in ("LEFT", "RIGHT"):
        raise unsupported(node, "direction must be LEFT or RIGHT", "direction")
    dt = _same_dtype(b, node, ("int8", "int32", *HELD_INT))
    op = f"shift_{direction.lower()}"
    if dt == "int64" and op == "shift_left":
        raise unsupported(node, "a left shift of int64 values could exceed int32, which vdla holds int64 as")
    if dt != "uint8":
        _binary_node(b, node, op, dt, node.outputs[0], int64=dt == "int64")
        return
    x, s = (_widened(b, node, b.tensor(node, i), dt) for i in (0, 1))
    y = b.emit(node, op, (x, s), suffix=op)
    if op == "shift_left":
        y = b.emit(node, "bit_and", (y,), {"b": 255}, suffix="low_bits")
    _held(b, node, y, dt, node.outputs[0])


@converter("Where")
def _where(b: Builder, node: OnnxNode) -> None:
    """``x`` where ``condition``, else ``y``, broadcast together; a held value's shift commutes with it."""
    b.require_dtype(node, 0, ("bool",))
    dt = b.require_dtype(node, 1, (*NUMBERS, *HELD_INT, "bool"))
    b.require_dtype(node, 2, (dt,))
    cond = b.tensor(node, 0)
    attrs: dict[str, Any] = {}
    inputs = [cond]
    for name, i in (("a", 1), ("b", 2)):
        c = _scalar(b, node, i, dt) if dt == "float32" else None
        if c is not None and len(b.shape(node, i)) <= len(b.type_of(cond).shape):
            attrs[name] = c
        else:
            inputs.append(b.tensor(node, i))
    b.emit(node, "where", inputs, attrs, out=node.outputs[0], uint8=dt == "uint8", int64=dt == "int64")


# ---------------------------------------------------------------------------------------------------------
# Casts


def _cast_const(node: OnnxNode, c: np.ndarray, to: str) -> np.ndarray:
    """ONNX Cast of a constant, in numpy (C's conversions)."""
    try:
        return np.asarray(c).astype(np.dtype(to))
    except (TypeError, ValueError) as e:
        raise unsupported(node, f"cannot cast a {c.dtype.name} constant to {to}: {e}") from e


def cast_value(b: Builder, node: OnnxNode, i: int, to: str, out: str) -> None:
    """Bind ``out`` to input ``i`` converted to the ONNX dtype ``to`` with ONNX Cast's rules: float to
    integer truncates toward zero (out of range, which ONNX leaves undefined, saturates), an integer keeps
    its low bits, to bool is ``!= 0``. The exact widenings are vdla's ``cast``; int64 results only from
    dtypes whose values fit int32."""
    src = b.dtype(node, i)
    held = (*GRAPH_DTYPE,)
    if src not in held or to not in held:
        bad = to if src in held else src
        raise unsupported(node, f"cast from {src} to {to}: vdla holds no {bad} tensors (it holds {', '.join(held)})",
                          "to" if bad == to else None)  # fmt: skip
    if src == to:
        v = b.value(node, i)
        b.alias(out, b.tensor(node, i), uint8=v.uint8)
        return
    if to == "int64" and src == "float32":
        raise unsupported(node, "a float32 to int64 cast can exceed int32, which vdla holds int64 as", "to")
    x = _widened(b, node, b.tensor(node, i), src)
    real = b.type_of(x).dtype
    if to in ("uint8", "int64"):
        if real == "float32":  # uint8: truncate and saturate to [0, 255] (ONNX leaves out of range undefined)
            x = b.emit(node, "clip", (b.emit(node, "convert", (x,), {"dtype": "int32"}, suffix="truncate"),),
                       {"lo": 0, "hi": 255}, suffix="saturate")  # fmt: skip
        _held(b, node, x, to, out)
        return
    exact = real == "bool" or (to != "bool" and real in ("int8", "int32") and to in ("int32", "float32"))
    b.emit(node, "cast" if exact else "convert", (x,), {"dtype": to}, out=out)


@converter("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(b: Builder, node: OnnxNode) -> None:
    """``saturate`` and ``round_mode`` concern float8 targets only, which vdla does not hold."""
    cast_value(b, node, 0, str(attr(node, "to")), node.outputs[0])


@converter("BitCast", attrs=("to",))
def _bitcast(b: Builder, node: OnnxNode) -> None:
    """The bits read as another type of one width: float32 <-> int32 as vdla ``bitcast``; int8 <-> uint8 (uint8
    held as int8 ``value - 128``, whose bits are the uint8's with the top one flipped: a ``bit_xor`` with
    -128) and bool -> uint8 (0 or 1) exactly; other pairs are refused."""
    src, to = b.dtype(node, 0), str(attr(node, "to"))
    x = b.tensor(node, 0)
    out = node.outputs[0]
    if src == to:
        b.alias(out, x, uint8=src == "uint8")
    elif {src, to} == {"float32", "int32"}:
        b.emit(node, "bitcast", (x,), {"dtype": to}, out=out)
    elif {src, to} == {"int8", "uint8"}:
        b.emit(node, "bit_xor", (x,), {"b": -128}, out=out, uint8=to == "uint8")
    elif (src, to) == ("bool", "uint8"):
        held = b.emit(node, "add", (b.emit(node, "convert", (x,), {"dtype": "int32"}, suffix="widen"),), {"b": -128},
                      suffix="shifted")  # fmt: skip
        b.emit(node, "cast", (held,), {"dtype": "int8"}, out=out, uint8=True)
    else:
        raise unsupported(node, f"bit cast of {src} to {to}: vdla reinterprets float32/int32, int8/uint8 and "
                          "bool to uint8 (it holds no other pair of one width)", "to")  # fmt: skip


@converter("CastLike", attrs=("saturate", "round_mode"))
def _cast_like(b: Builder, node: OnnxNode) -> None:
    """Cast to input 1's dtype; a constant input is converted now (the exponent of an expanded function)."""
    to = b.dtype(node, 1)
    if b.is_const(node, 0):
        b.bind_const(node.outputs[0], _cast_const(node, b.const(node, 0, "input"), to))
        return
    cast_value(b, node, 0, to, node.outputs[0])
