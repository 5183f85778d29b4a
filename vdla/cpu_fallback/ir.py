"""Small IR of the CPU fallback: tensor types, elementwise steps and operator signatures.

Every operator signature (a ``*Spec``) is a frozen, hashable dataclass holding only shapes, dtypes and
compile-time attributes: it is the key of the kernel cache and the input of the code generator.
Factories (``make_*``) validate a request and raise :class:`UnsupportedError` naming the operator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdla.errors import VdlaError

DTYPES = ("int8", "int32", "float32")
INT_RANGE = {"int8": (-128, 127), "int32": (-(2**31), 2**31 - 1)}


class UnsupportedError(VdlaError, ValueError):
    """An operator was asked for a dtype, shape or attribute combination it does not support."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__(f"{op}: {message}")
        self.op = op


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype name (one of :data:`DTYPES`) of a dense C-contiguous tensor."""

    shape: tuple[int, ...]
    dtype: str

    @staticmethod
    def of(value: np.ndarray | TensorType, op: str) -> TensorType:
        """Type of an array (or a type itself), checked to be a supported, non-empty tensor."""
        if isinstance(value, TensorType):
            t = value
        elif isinstance(value, np.ndarray):
            t = TensorType(tuple(int(d) for d in value.shape), value.dtype.name)
        else:
            raise UnsupportedError(op, f"expected a numpy array or TensorType, got {type(value).__name__}")
        if t.dtype not in DTYPES:
            raise UnsupportedError(op, f"dtype {t.dtype} is not supported (supported: {', '.join(DTYPES)})")
        if any(d < 1 for d in t.shape):
            raise UnsupportedError(op, f"empty or negative dimension in shape {t.shape}")
        return t

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)


def is_float(dtype: str) -> bool:
    return dtype == "float32"


# ---------------------------------------------------------------------------------------------------------
# Elementwise steps


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
    "quantize": ("scale", "zero_point"),
    "dequantize": ("scale", "zero_point"),
    "requantize": ("multiplier", "shift"),
    "cast": (),
}
BINARY_OPS = ("add", "sub", "mul", "max", "min")
# operator -> its attributes with their defaults (None: required)
EW_ATTRS: dict[str, dict[str, int | str | None]] = {
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
        return dict(self.attrs)[name]


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


def _fits(operand: Operand, dtype: str, inputs: tuple[TensorType, ...]) -> bool:
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
    if op in BINARY_OPS or op == "clip":
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
            return value if all(_fits(o, value, inputs) for o in (lo, hi)) else "int32"
        return "int32"
    if op in ("relu", "cast"):
        if op == "cast":
            _need(op, step.attr("dtype") in DTYPES, f"cannot cast to {step.attr('dtype')}")
            return str(step.attr("dtype"))
        return value
    if op in ("sigmoid", "tanh", "exp"):
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
    if op == "dequantize":
        _need(op, kinds["zero_point"] == "int", "zero_point must be an integer")
        return "float32"
    # requantize
    _need(op, kinds["multiplier"] == "int" and kinds["shift"] == "int", "multiplier and shift must be integers")
    m, s = operands["multiplier"], operands["shift"]
    _need(op, _fits(m, "int32", inputs), "multiplier must fit in int32")
    if isinstance(s, Const):
        _need(op, 0 <= s.value <= 62, f"shift must be in [0, 62], got {s.value}")
    lo, hi = int(step.attr("lo")), int(step.attr("hi"))
    _need(op, -128 <= lo <= hi <= 127, f"clamp range [{lo}, {hi}] must lie within int8")
    return "int8"


@dataclass(frozen=True)
class ChainSpec:
    """A stack of elementwise steps run as one loop nest over the broadcast shape of all inputs."""

    inputs: tuple[TensorType, ...]
    steps: tuple[EwStep, ...]
    out: TensorType


def broadcast_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise UnsupportedError(op, f"shapes {shapes} do not broadcast together") from None


def make_chain(inputs: tuple[TensorType, ...], steps: tuple[EwStep, ...], op: str = "chain") -> ChainSpec:
    """Validate a chain (dtype rules, broadcasting) and derive its output type."""
    _need(op, len(steps) > 0, "a chain needs at least one step")
    shape = broadcast_shape(op, [t.shape for t in inputs])
    dtype = inputs[0].dtype
    for step in steps:
        for o in step.operands:
            if isinstance(o, Arg):
                _need(step.op, 0 <= o.index < len(inputs), f"operand refers to missing input {o.index}")
        dtype = step_result_dtype(step, dtype, inputs)
    return ChainSpec(inputs, steps, TensorType(shape, dtype))


# ---------------------------------------------------------------------------------------------------------
# Other operators


@dataclass(frozen=True)
class Window:
    """2-D sliding-window geometry (kernel, stride, dilation, pads as top, left, bottom, right)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        pt, pl, pb, pr = self.pads
        return (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1


def _pair(op: str, name: str, v: int | tuple[int, ...], minimum: int) -> tuple[int, int]:
    t = (v, v) if isinstance(v, int) else tuple(v)
    _need(op, len(t) == 2 and all(isinstance(i, int) and i >= minimum for i in t), f"bad {name} {v}")
    return t[0], t[1]


def make_window(op: str, hw: tuple[int, int], kernel, stride, dilation, padding) -> tuple[Window, tuple[int, int]]:
    """Window from int-or-tuple attributes (padding: int, (ph, pw) or (top, left, bottom, right))."""
    p = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
    p = p * 2 if len(p) == 2 else p
    _need(op, len(p) == 4 and all(isinstance(i, int) and i >= 0 for i in p), f"bad padding {padding}")
    win = Window(_pair(op, "kernel", kernel, 1), _pair(op, "stride", stride, 1), _pair(op, "dilation", dilation, 1), p)
    oh, ow = win.out_size(*hw)
    _need(op, oh >= 1 and ow >= 1, f"window {win.kernel} with padding {p} does not fit input {hw}")
    return win, (oh, ow)


@dataclass(frozen=True)
class Pool2dSpec:
    """Max or average pooling of an NCHW tensor (average excludes padding unless count_include_pad)."""

    x: TensorType
    kind: str
    window: Window
    count_include_pad: bool
    out: TensorType


def make_pool2d(
    x: TensorType, kind: str, kernel, stride=None, padding=0, count_include_pad: bool = False
) -> Pool2dSpec:
    op = f"{kind}_pool2d"
    _need(op, kind in ("max", "avg"), "kind must be 'max' or 'avg'")
    _need(op, len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    _need(op, x.dtype in ("int8", "float32"), f"dtype {x.dtype} is not supported (int8, float32)")
    win, (oh, ow) = make_window(op, x.shape[2:], kernel, kernel if stride is None else stride, 1, padding)
    pt, pl, pb, pr = win.pads
    _need(op, max(pt, pb) < win.kernel[0] and max(pl, pr) < win.kernel[1], "padding must be smaller than kernel")
    return Pool2dSpec(x, kind, win, count_include_pad, TensorType((*x.shape[:2], oh, ow), x.dtype))


@dataclass(frozen=True)
class GlobalAvgPoolSpec:
    """Mean over H and W of an NCHW tensor, output (N, C, 1, 1); int8 rounds half up."""

    x: TensorType
    out: TensorType


def make_global_avg_pool(x: TensorType) -> GlobalAvgPoolSpec:
    op = "global_avg_pool"
    _need(op, len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    _need(op, x.dtype in ("int8", "float32"), f"dtype {x.dtype} is not supported (int8, float32)")
    return GlobalAvgPoolSpec(x, TensorType((*x.shape[:2], 1, 1), x.dtype))


@dataclass(frozen=True)
class SoftmaxSpec:
    """Softmax along one axis of a float32 tensor."""

    x: TensorType
    axis: int

    @property
    def out(self) -> TensorType:
        return self.x


def make_softmax(x: TensorType, axis: int = -1) -> SoftmaxSpec:
    _need("softmax", x.dtype == "float32", f"requires float32, got {x.dtype}")
    _need("softmax", -len(x.shape) <= axis < len(x.shape), f"axis {axis} out of range for {x.shape}")
    return SoftmaxSpec(x, axis % len(x.shape))


@dataclass(frozen=True)
class TransposeSpec:
    """Generic axis permutation (out.shape[i] = x.shape[perm[i]])."""

    x: TensorType
    perm: tuple[int, ...]
    out: TensorType


def make_transpose(x: TensorType, perm: tuple[int, ...]) -> TransposeSpec:
    perm = tuple(int(p) for p in perm)
    _need("transpose", sorted(perm) == list(range(len(x.shape))), f"bad permutation {perm} for {x.shape}")
    return TransposeSpec(x, perm, TensorType(tuple(x.shape[p] for p in perm), x.dtype))


@dataclass(frozen=True)
class PackSpec:
    """NCHW -> blocked (N, C/B, H, W, 1, B), zero-padding channels up to a multiple of B."""

    x: TensorType
    block: int
    out: TensorType


@dataclass(frozen=True)
class UnpackSpec:
    """Blocked (N, C/B, H, W, 1, B) -> NCHW with ``channels`` channels (padding channels dropped)."""

    x: TensorType
    channels: int
    out: TensorType


def make_pack(x: TensorType, block: int = 16) -> PackSpec:
    _need("pack_blocked", len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    _need("pack_blocked", block >= 1, f"block must be positive, got {block}")
    n, c, h, w = x.shape
    return PackSpec(x, block, TensorType((n, -(-c // block), h, w, 1, block), x.dtype))


def make_unpack(x: TensorType, channels: int) -> UnpackSpec:
    op = "unpack_blocked"
    _need(op, len(x.shape) == 6 and x.shape[4] == 1, f"expects (N, C/B, H, W, 1, B), got shape {x.shape}")
    n, cb, h, w, _, b = x.shape
    _need(op, (cb - 1) * b < channels <= cb * b, f"{channels} channels do not match {cb} blocks of {b}")
    return UnpackSpec(x, channels, TensorType((n, channels, h, w), x.dtype))


@dataclass(frozen=True)
class ConcatSpec:
    inputs: tuple[TensorType, ...]
    axis: int
    out: TensorType


def make_concat(inputs: tuple[TensorType, ...], axis: int) -> ConcatSpec:
    op = "concat"
    _need(op, len(inputs) >= 1, "needs at least one input")
    rank, dtype = len(inputs[0].shape), inputs[0].dtype
    _need(op, -rank <= axis < rank, f"axis {axis} out of range")
    axis %= rank
    for t in inputs:
        _need(op, t.dtype == dtype, f"mixed dtypes {dtype} and {t.dtype}")
        same = len(t.shape) == rank and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, inputs[0].shape, strict=True)) if i != axis
        )
        _need(op, same, f"shape {t.shape} does not match {inputs[0].shape} outside axis {axis}")
    shape = list(inputs[0].shape)
    shape[axis] = sum(t.shape[axis] for t in inputs)
    return ConcatSpec(inputs, axis, TensorType(tuple(shape), dtype))


@dataclass(frozen=True)
class PadSpec:
    """Constant padding: ``pads[i] = (before, after)`` for each axis."""

    x: TensorType
    pads: tuple[tuple[int, int], ...]
    value: int | float
    out: TensorType


def make_pad(x: TensorType, pads, value: int | float = 0) -> PadSpec:
    op = "pad"
    pads = tuple((int(a), int(b)) for a, b in pads)
    _need(op, len(pads) == len(x.shape) and all(a >= 0 and b >= 0 for a, b in pads), f"bad pads {pads}")
    if is_float(x.dtype):
        _need(op, math.isfinite(value), f"pad value must be finite, got {value}")
        value = float(value)
    else:
        _need(op, float(value).is_integer() and _fits(Const(int(value)), x.dtype, ()), f"bad value {value}")
        value = int(value)
    shape = tuple(d + a + b for d, (a, b) in zip(x.shape, pads, strict=True))
    return PadSpec(x, pads, value, TensorType(shape, x.dtype))


def _epilogue(op: str, acc: TensorType, inputs: tuple[TensorType, ...], steps: tuple[EwStep, ...]):
    if not steps:
        return None
    chain = make_chain((acc, *inputs), steps, op)
    _need(op, chain.out.shape == acc.shape, f"epilogue operands broadcast the output beyond {acc.shape}")
    return chain


@dataclass(frozen=True)
class DenseSpec:
    """``out[m, n] = sum_k x[m, k] * w[n, k]`` (int8 -> int32 or float32), then an optional epilogue chain.

    The epilogue's input 0 is the accumulator; its other inputs follow ``x`` and ``w`` in the kernel call.
    """

    x: TensorType
    w: TensorType
    acc: TensorType
    epilogue: ChainSpec | None

    @property
    def out(self) -> TensorType:
        return self.epilogue.out if self.epilogue else self.acc


def _acc_dtype(op: str, x: TensorType, w: TensorType) -> str:
    _need(
        op,
        x.dtype == w.dtype and x.dtype in ("int8", "float32"),
        f"unsupported dtypes x={x.dtype}, w={w.dtype}",
    )
    return "int32" if x.dtype == "int8" else "float32"


def make_dense(x: TensorType, w: TensorType, epilogue_inputs: tuple[TensorType, ...] = (), epilogue=()) -> DenseSpec:
    op = "dense"
    acc_dtype = _acc_dtype(op, x, w)
    ok = len(x.shape) == 2 and len(w.shape) == 2 and x.shape[1] == w.shape[1]
    _need(op, ok, f"expects x (M, K) and w (N, K), got {x.shape} and {w.shape}")
    acc = TensorType((x.shape[0], w.shape[0]), acc_dtype)
    return DenseSpec(x, w, acc, _epilogue(op, acc, epilogue_inputs, tuple(epilogue)))


@dataclass(frozen=True)
class Conv2dSpec:
    """Direct NCHW x OIHW convolution with groups (depthwise when groups == C), then an optional epilogue."""

    x: TensorType
    w: TensorType
    window: Window
    groups: int
    acc: TensorType
    epilogue: ChainSpec | None

    @property
    def out(self) -> TensorType:
        return self.epilogue.out if self.epilogue else self.acc


def make_conv2d(
    x: TensorType,
    w: TensorType,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    epilogue_inputs: tuple[TensorType, ...] = (),
    epilogue=(),
) -> Conv2dSpec:
    op = "conv2d"
    acc_dtype = _acc_dtype(op, x, w)
    _need(op, len(x.shape) == 4 and len(w.shape) == 4, f"expects NCHW x and OIHW w, got {x.shape}, {w.shape}")
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    _need(op, groups >= 1 and c % groups == 0 and oc % groups == 0, f"groups={groups} must divide C and O")
    _need(op, icg == c // groups, f"weight has {icg} input channels per group, expected {c // groups}")
    win, (oh, ow) = make_window(op, (h, wd), (kh, kw), stride, dilation, padding)
    acc = TensorType((n, oc, oh, ow), acc_dtype)
    return Conv2dSpec(x, w, win, groups, acc, _epilogue(op, acc, epilogue_inputs, tuple(epilogue)))


Spec = (
    ChainSpec
    | Pool2dSpec
    | GlobalAvgPoolSpec
    | SoftmaxSpec
    | TransposeSpec
    | PackSpec
    | UnpackSpec
    | ConcatSpec
    | PadSpec
    | DenseSpec
    | Conv2dSpec
)


def spec_inputs(spec: Spec) -> tuple[TensorType, ...]:
    """Types of the arrays a kernel for ``spec`` takes, in call order (the output comes last)."""
    if isinstance(spec, ChainSpec | ConcatSpec):
        return spec.inputs
    if isinstance(spec, DenseSpec | Conv2dSpec):
        return (spec.x, spec.w, *(spec.epilogue.inputs[1:] if spec.epilogue else ()))
    return (spec.x,)


_OP_NAMES = {
    ChainSpec: "chain",
    GlobalAvgPoolSpec: "global_avg_pool",
    SoftmaxSpec: "softmax",
    TransposeSpec: "transpose",
    PackSpec: "pack_blocked",
    UnpackSpec: "unpack_blocked",
    ConcatSpec: "concat",
    PadSpec: "pad",
    DenseSpec: "dense",
    Conv2dSpec: "conv2d",
}


def spec_op(spec: Spec) -> str:
    """Operator name of a spec, used in kernel names and error messages."""
    return f"{spec.kind}_pool2d" if isinstance(spec, Pool2dSpec) else _OP_NAMES[type(spec)]


# ---------------------------------------------------------------------------------------------------------
# Graph of CPU operators (what the partitioner leaves on the CPU)


@dataclass(frozen=True)
class Node:
    """One operator application: ``output = op(*inputs, **attrs)``; inputs and output are value names.

    Elementwise nodes take the running value as ``inputs[0]``; each operand of :data:`EW_OPERANDS` is a
    scalar attribute of that name, or else the next tensor in ``inputs[1:]``.
    """

    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Graph:
    """Topologically ordered nodes over named inputs and constant parameters."""

    inputs: dict[str, TensorType]
    nodes: list[Node]
    outputs: list[str]
    params: dict[str, np.ndarray] = field(default_factory=dict)
