"""The operator registry: every operator of the graph, each defined once as an :class:`OpDef`.

An operator's definition holds or names everything about it: its pattern kind for fusion, its type rule,
its numpy semantics (evaluated by :mod:`vdla.graph.interp`), its CPU kernel (named, as the graph does not
import the CPU fallback: the kernel-spec factory of :mod:`vdla.cpu_fallback.specs`); its accelerator
lowering is the model compiler's (``vdla.model.lowering``), which the graph does not import. Elementwise
operators are defined in :mod:`vdla.graph.ew` (:class:`EwDef`) and registered here from their definition;
every other operator is defined below by :func:`register` on its type rule.

Every node of a :class:`~vdla.graph.graph.Graph` names one of these operators. The pattern kind is
TVM's, used by the fusion pass: ``injective`` (each output element depends on one input element:
elementwise ops, reshapes, layout changes), ``reduction`` (pooling, ``reduce``), ``complex`` (complex-out-fusable:
conv2d and dense, which take injective consumers into their epilogue) and ``opaque`` (nothing fuses
across it). The type rule maps the input types and attributes to the output type, quantization
included; it raises :class:`~vdla.graph.types.UnsupportedError` naming the operator and the problem.

Invariants: conv2d/dense on int8 accumulate into int32 (no quantization on the accumulator); a
quantized int8 tensor carries its :class:`~vdla.graph.types.Quant`; max pooling, ReLU, clip, reshape,
transpose, slice, take and gather (per-tensor), nearest resize, im2col (per-tensor), layout changes, a max/min
``reduce`` (per-tensor) and ``topk`` values keep the quantization of their input. Every index a take, gather or
scatter reads is checked by its type rule, when compiling (constant tables and offsets): their kernels do not
bounds-check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import vdla.graph.attention as att
import vdla.graph.layout as layout
import vdla.graph.opnames as opnames
import vdla.graph.oracle as oracle
from vdla.graph.ew import EW, EwDef, EwStep, node_steps, step_result_dtype
from vdla.graph.graph import Graph, Node, reshaped
from vdla.graph.layernorm import IntLayerNorm
from vdla.graph.layout import blocked_shape
from vdla.graph.types import INT_RANGE, Quant, TensorType, UnsupportedError, is_float
from vdla.graph.window import Window, make_window, pair

INJECTIVE, REDUCTION, COMPLEX, OPAQUE = "injective", "reduction", "complex", "opaque"

Infer = Callable[[Node, list[TensorType], Mapping[str, np.ndarray]], TensorType]
# (node, input arrays, input types, output type) -> the node's value
Eval = Callable[[Node, list[np.ndarray], list[TensorType], TensorType], np.ndarray]


@dataclass(frozen=True)
class CpuKernel:
    """How the CPU fallback runs an operator, named here because the graph does not import the CPU fallback:
    ``factory`` is the kernel-spec factory of :mod:`vdla.cpu_fallback.specs` the node's kernel comes from,
    called with the input types (each positionally, or all as one tuple when ``variadic``), then ``fixed``
    and the node's attributes as keywords. ``factory`` None: no kernel, the output is a view of the input
    (:data:`VIEW`)."""

    factory: str | None
    fixed: tuple[tuple[str, Any], ...] = ()
    variadic: bool = False


VIEW = CpuKernel(None)
CHAIN = CpuKernel("make_chain", variadic=True)  # elementwise operators: steps of a stacked chain


@dataclass(frozen=True)
class OpDef:
    """One operator of the graph, defined once.

    * ``kind``: its pattern kind for fusion; ``broadcast``: elementwise with numpy broadcasting (the
      fusion's ELEMWISE or BROADCAST pattern, :func:`vdla.graph.fusion.node_pattern`);
    * ``min_inputs``..``max_inputs`` tensor inputs and ``infer``, its type rule (raises
      :class:`UnsupportedError` naming the operator);
    * ``evaluate``: its numpy semantics (the interpreter, :mod:`vdla.graph.interp`);
    * ``cpu``: its CPU kernel (None: the CPU fallback cannot run it);
    * ``epilogue``: its kernel (accelerator layer and CPU kernel alike) takes a chain of elementwise
      consumers as its epilogue (the accelerator's lowerings are the model compiler's,
      ``vdla.model.lowering``);
    * ``ew``: for an elementwise operator, its :class:`~vdla.graph.ew.EwDef`, which all of the above
      derive from.
    """

    name: str
    kind: str
    min_inputs: int
    max_inputs: int
    infer: Infer
    evaluate: Eval
    cpu: CpuKernel | None = None
    epilogue: bool = False
    broadcast: bool = False
    ew: EwDef | None = None

    @property
    def epilogue_step(self) -> bool:
        """Whether the operator can be a step of an accelerator layer's epilogue (:attr:`EwDef.epilogue_step`)."""
        return self.ew is not None and self.ew.epilogue_step


OPS: dict[str, OpDef] = {}


def _need(op: str, cond: bool, message: str) -> None:
    if not cond:
        raise UnsupportedError(op, message)


def register(
    name: str,
    kind: str,
    min_inputs: int,
    max_inputs: int | None = None,
    *,
    evaluate: Eval,
    cpu: CpuKernel | None = None,
    **more: Any,
) -> Callable[[Infer], Infer]:
    """Decorator adding an operator with its type rule (the decorated function) to :data:`OPS`; ``more``
    sets the other fields of :class:`OpDef`."""

    def deco(fn: Infer) -> Infer:
        if name not in opnames.NAMES:
            raise ValueError(f"operator {name!r} has no constant in vdla.graph.opnames: add one")
        if name in OPS:
            raise ValueError(f"operator {name!r} is registered twice")
        hi = min_inputs if max_inputs is None else max_inputs
        OPS[name] = OpDef(name, kind, min_inputs, hi, fn, evaluate, cpu, **more)
        return fn

    return deco


def infer(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """The output type of ``node`` given its input types (``params`` holds the constant inputs)."""
    opdef = OPS.get(node.op)
    _need(node.op, opdef is not None, f"unknown operator (node {node.output!r})")
    n = len(inputs)
    _need(
        node.op,
        opdef.min_inputs <= n <= opdef.max_inputs,
        f"node {node.output!r} takes {opdef.min_inputs}..{opdef.max_inputs} inputs, got {n}",
    )
    return opdef.infer(node, inputs, params)


def infer_types(graph: Graph) -> dict[str, TensorType]:
    """The type of every value of ``graph``: its inputs, its parameters and every node's output."""
    types: dict[str, TensorType] = dict(graph.inputs)
    for name, value in graph.params.items():
        types[name] = graph.param_types.get(name) or TensorType.of(value, name)
    for node in graph.nodes:
        missing = [i for i in node.inputs if i not in types]
        _need(node.op, not missing, f"node {node.output!r} reads undefined values {missing}")
        types[node.output] = infer(node, [types[i] for i in node.inputs], graph.params)
    return types


def kind(op: str) -> str:
    """The pattern kind of ``op`` (opaque for an operator the registry does not know)."""
    return OPS[op].kind if op in OPS else OPAQUE


# ---------------------------------------------------------------------------------------------------------
# Elementwise: every operator of vdla.graph.ew, from its EwDef


def _ew_quant(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray], dtype: str) -> Quant | None:
    if "quant" in node.attrs:  # (scale, zero_point): the node's int8 result is quantized so
        _need(node.op, dtype == "int8", f"only an int8 result can carry quantization, this one is {dtype}")
        scale, zp = node.attrs["quant"]
        return Quant.of(scale, zp)
    rule = EW[node.op].quant
    return None if rule is None else rule(node, inputs, params, dtype)


def _elementwise(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    names = [node.inputs[0]]
    (step,) = node_steps([node], names)
    by_name = dict(zip(node.inputs, inputs, strict=True))
    types = tuple(by_name[n].plain for n in names)
    dtype = step_result_dtype(step, types[0].dtype, types)
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(*(t.shape for t in types)))
    except ValueError as e:
        raise UnsupportedError(node.op, f"shapes {[t.shape for t in types]} do not broadcast together") from e
    return TensorType(shape, dtype, _ew_quant(node, inputs, params, dtype))


def _evaluate_elementwise(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    names = [node.inputs[0]]
    steps = node_steps([node], names)
    by_name = dict(zip(node.inputs, zip(args, types, strict=True), strict=True))
    arrays = [by_name[n][0] for n in names]
    return oracle.chain(steps, [by_name[n][1].plain for n in names], arrays, out.shape, out.dtype)


for _d in EW.values():
    register(
        _d.name,
        INJECTIVE,
        1,
        1 + len(_d.operands),
        evaluate=_evaluate_elementwise,
        cpu=CHAIN,
        broadcast=True,
        ew=_d,
    )(_elementwise)


# ---------------------------------------------------------------------------------------------------------
# Compute


def _acc_dtype(op: str, x: TensorType, w: TensorType) -> str:
    ok = x.dtype == w.dtype and x.dtype in ("int8", "float32")
    _need(op, ok, f"unsupported dtypes x={x.dtype}, w={w.dtype} (int8 x int8 or float32 x float32)")
    return "int32" if x.dtype == "int8" else "float32"


def _check_bias(op: str, bias: list[TensorType], channels: int, acc: str) -> None:
    if bias:
        b = bias[0]
        _need(op, b.shape == (channels,), f"bias must have shape ({channels},), got {b.shape}")
        _need(op, b.dtype == acc, f"bias must be {acc} like the accumulator, got {b.dtype}")


def _eval_conv2d(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    x, w, *bias = args
    a = node.attrs
    win, _ = make_window(
        "conv2d", x.shape[2:], w.shape[2:], a.get("stride", 1), a.get("dilation", 1), a.get("padding", 0)
    )
    acc = oracle.conv2d(x, w, win, int(a.get("groups", 1)))
    return oracle.add_bias(acc, *bias)


@register(
    "conv2d",
    COMPLEX,
    2,
    3,
    evaluate=_eval_conv2d,
    cpu=CpuKernel("make_conv2d"),
    epilogue=True,
)
def _conv2d(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    x, w, *bias = inputs
    a = node.attrs
    _need("conv2d", len(x.shape) == 4 and len(w.shape) == 4, f"expects NCHW x and OIHW w, got {x.shape}, {w.shape}")
    acc = _acc_dtype("conv2d", x, w)
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    groups = int(a.get("groups", 1))
    _need("conv2d", groups >= 1 and c % groups == 0 and oc % groups == 0, f"groups={groups} must divide C and O")
    _need("conv2d", icg == c // groups, f"weight has {icg} input channels per group, expected {c // groups}")
    _, (oh, ow) = make_window(
        "conv2d", (h, wd), (kh, kw), a.get("stride", 1), a.get("dilation", 1), a.get("padding", 0)
    )
    _check_bias("conv2d", bias, oc, acc)
    return TensorType((n, oc, oh, ow), acc)


def _eval_dense(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    x, w, *bias = args
    return oracle.add_bias(oracle.dense(x, w), *bias)


@register(
    "dense",
    COMPLEX,
    2,
    3,
    evaluate=_eval_dense,
    cpu=CpuKernel("make_dense"),
    epilogue=True,
)
def _dense(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    x, w, *bias = inputs
    ok = len(x.shape) == 2 and len(w.shape) == 2 and x.shape[1] == w.shape[1]
    _need("dense", ok, f"expects x (M, K) and w (N, K), got {x.shape} and {w.shape}")
    acc = _acc_dtype("dense", x, w)
    _check_bias("dense", bias, w.shape[0], acc)
    return TensorType((x.shape[0], w.shape[0]), acc)


def matmul_type(a: TensorType, b: TensorType) -> TensorType:
    """The output type of numpy's ``a @ b`` on float32 operands of rank >= 2: ``(..., M, K) x (..., K, N)``
    with the batch dimensions broadcast (a 1-D operand is reshaped by the frontend)."""
    _need("matmul", a.dtype == b.dtype == "float32", f"float32 operands only, got {a.dtype}, {b.dtype}")
    ok = len(a.shape) >= 2 and len(b.shape) >= 2
    _need("matmul", ok, f"expects (..., M, K) x (..., K, N), got {a.shape}, {b.shape}")
    _need("matmul", a.shape[-1] == b.shape[-2], f"inner dimensions differ: {a.shape} x {b.shape}")
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError as e:
        raise UnsupportedError("matmul", f"batch dimensions of {a.shape} and {b.shape} do not broadcast") from e
    return TensorType((*batch, a.shape[-2], b.shape[-1]), "float32")


@register(
    "matmul", COMPLEX, 2, evaluate=lambda node, args, types, out: oracle.matmul(*args), cpu=CpuKernel("make_matmul")
)
def _matmul(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    return matmul_type(*inputs)


# ---------------------------------------------------------------------------------------------------------
# Transposed convolution (ConvTranspose). The accelerator runs an int8 one as stride-phase convolutions
# (the graph pass vdla.graph.convt rewrites it into conv2d layers before placement).


@dataclass(frozen=True)
class TransposedWindow:
    """The geometry of a 2-D transposed convolution: kernel, stride, dilation, output padding (each
    (rows, cols)) and pads (top, bottom, left, right; a negative pad extends the output). Input row ``iy``
    under kernel row ``ky`` lands on output row ``iy*sh + ky*dh - top``."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]
    output_padding: tuple[int, int] = (0, 0)

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        """``(in - 1) * stride + (kernel - 1) * dilation + 1 - pad_begin - pad_end + output_padding`` per axis."""
        top, bottom, left, right = self.pads
        return tuple(
            (n - 1) * s + (k - 1) * d + 1 - a - b + op
            for n, s, k, d, a, b, op in zip(
                (h, w), self.stride, self.kernel, self.dilation, (top, left), (bottom, right), self.output_padding
            )
        )


def transposed_window(
    x_hw: tuple[int, int], kernel, stride=1, dilation=1, padding=0, output_padding=0
) -> tuple[TransposedWindow, tuple[int, int]]:
    """The checked geometry of a transposed convolution over an ``x_hw`` input and its output size: stride
    and dilation at least 1, output padding smaller than the stride or the dilation (ONNX's rule), padding an
    int, (ph, pw) or (top, bottom, left, right), and an output of at least one pixel."""
    op = "conv_transpose"
    p = (padding,) * 4 if isinstance(padding, int) else tuple(int(v) for v in padding)
    p = (p[0], p[0], p[1], p[1]) if len(p) == 2 else p
    _need(op, len(p) == 4, f"padding must be an int, (ph, pw) or (top, bottom, left, right), got {padding!r}")
    win = TransposedWindow(
        pair(op, "kernel", kernel),
        pair(op, "stride", stride),
        pair(op, "dilation", dilation),
        p,
        pair(op, "output_padding", output_padding, minimum=0),
    )
    for axis in (0, 1):
        limit = max(win.stride[axis], win.dilation[axis])
        _need(op, win.output_padding[axis] < limit, f"output_padding {win.output_padding} must be below {limit}")
    oh, ow = win.out_size(*x_hw)
    _need(op, oh >= 1 and ow >= 1, f"geometry {win} gives an empty output over input {x_hw}")
    return win, (oh, ow)


def _ct_window(node: Node, x_hw: tuple[int, int], kernel) -> tuple[TransposedWindow, tuple[int, int]]:
    a = node.attrs
    return transposed_window(
        x_hw, kernel, a.get("stride", 1), a.get("dilation", 1), a.get("padding", 0), a.get("output_padding", 0)
    )


def _eval_conv_transpose(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    x, w, *bias = args
    win, hw = _ct_window(node, x.shape[2:], w.shape[2:])
    acc = oracle.conv_transpose(x, w, win.stride, win.dilation, win.pads, hw, int(node.attrs.get("groups", 1)))
    return oracle.add_bias(acc, *bias)


@register(
    "conv_transpose",
    COMPLEX,
    2,
    3,
    evaluate=_eval_conv_transpose,
    cpu=CpuKernel("make_conv_transpose"),
)
def _conv_transpose(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """NCHW ``x`` and ``w`` of shape (C, O/groups, KH, KW) (ONNX's layout) -> (N, O, OH, OW): int8 x int8
    accumulates into int32, float32 into float32; the optional bias has one value per output channel."""
    x, w, *bias = inputs
    op = "conv_transpose"
    _need(
        op, len(x.shape) == 4 and len(w.shape) == 4, f"expects NCHW x and (C, O/g, KH, KW) w, got {x.shape}, {w.shape}"
    )
    acc = _acc_dtype(op, x, w)
    groups = int(node.attrs.get("groups", 1))
    n, c = x.shape[:2]
    _need(op, groups >= 1 and c % groups == 0, f"groups={groups} must divide the {c} input channels")
    _need(op, w.shape[0] == c, f"weight has {w.shape[0]} input channels, expected {c}")
    oc = w.shape[1] * groups
    _, (oh, ow) = _ct_window(node, x.shape[2:], w.shape[2:])
    _check_bias(op, bias, oc, acc)
    return TensorType((n, oc, oh, ow), acc)


def interleave_type(inputs: list[TensorType] | tuple[TensorType, ...], stride) -> tuple[tuple[int, int], TensorType]:
    """The checked stride and the output type of interleaving ``sh * sw`` phases of one NCHW shape and dtype
    (row-major over the phase (py, px)) into (N, C, J*sh, I*sw); a quantization all phases share is kept."""
    op = "interleave"
    sh, sw = pair(op, "stride", stride)
    _need(op, len(inputs) == sh * sw, f"stride {(sh, sw)} interleaves {sh * sw} phases, got {len(inputs)}")
    first = inputs[0]
    _need(op, len(first.shape) == 4, f"expects NCHW phases, got shape {first.shape}")
    for t in inputs:
        _need(op, t.shape == first.shape and t.dtype == first.dtype, f"phases differ: {first} and {t}")
    quants = {t.quant for t in inputs}
    n, c, j, i = first.shape
    return (sh, sw), TensorType((n, c, j * sh, i * sw), first.dtype, quants.pop() if len(quants) == 1 else None)


@register(
    "interleave",
    INJECTIVE,
    1,
    1 << 16,
    evaluate=lambda node, args, types, out: oracle.interleave(args, interleave_type(types, node.attrs["stride"])[0]),
    cpu=CpuKernel("make_interleave", variadic=True),
)
def _interleave(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    return interleave_type(inputs, node.attrs["stride"])[1]


def _eval_batch_norm(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    x, scale, bias, mean, var = (v.astype(np.float64) for v in args)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    eps = float(node.attrs.get("epsilon", 1e-5))
    k = scale / np.sqrt(var + eps)
    return (x * k.reshape(shape) + (bias - mean * k).reshape(shape)).astype(np.float32)


@register("batch_norm", INJECTIVE, 5, evaluate=_eval_batch_norm, broadcast=True)  # folded by the passes
def _batch_norm(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    x, *stats = inputs
    _need("batch_norm", x.dtype == "float32" and len(x.shape) >= 2, f"expects a float32 (N, C, ...) x, got {x}")
    for t in stats:
        _need("batch_norm", t.shape == (x.shape[1],), f"statistics must have shape ({x.shape[1]},), got {t.shape}")
    return x


# ---------------------------------------------------------------------------------------------------------
# Pooling and reductions


POOL_KINDS = ("max", "avg", "lp")


def pool_window(
    op: str, x: TensorType, kernel, stride=None, padding=0, dilation=1, kind: str = "max", p: int = 2
) -> tuple[Window, TensorType]:
    """The window and output type of a 2-D pooling of NCHW ``x`` (stride defaults to the kernel). Every
    window holds at least one input element (:meth:`Window.covers`): ONNX's ceil mode is padding at the
    end, which a max pool fills with -inf and an average or Lp pool leaves out. Lp pooling
    (``(sum |x|^p)^(1/p)``, ``p`` a positive integer) is float32 only."""
    _need(op, kind in POOL_KINDS, f"kind must be one of {POOL_KINDS}, got {kind!r}")
    _need(op, len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    dtypes = ("float32",) if kind == "lp" else ("int8", "float32")
    _need(op, x.dtype in dtypes, f"dtype {x.dtype} is not supported ({', '.join(dtypes)})")
    _need(op, kernel is not None, "needs a kernel attribute")
    _need(op, kind != "lp" or (isinstance(p, int) and p >= 1), f"p must be a positive integer, got {p!r}")
    win, (oh, ow) = make_window(op, x.shape[2:], kernel, stride or kernel, dilation, padding)
    _need(op, win.covers(*x.shape[2:]), f"a window {win} over {x.shape[2:]} lies entirely in the padding")
    return win, TensorType((*x.shape[:2], oh, ow), x.dtype, x.quant)


def _pool(kind_: str) -> Infer:
    def rule(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
        return _pool_geometry(kind_, inputs[0], node.attrs)[1]

    return rule


def _pool_geometry(kind_: str, x: TensorType, a: Mapping[str, Any]) -> tuple[Window, TensorType]:
    extra = {"p": a.get("p", 2)} if kind_ == "lp" else {}
    return pool_window(
        f"{kind_}_pool2d", x, a.get("kernel"), a.get("stride"), a.get("padding", 0), a.get("dilation", 1), kind_,
        **extra,
    )  # fmt: skip


def _eval_pool(kind_: str) -> Eval:
    def rule(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
        (x,) = args
        a = node.attrs
        win, _ = _pool_geometry(kind_, types[0], a)
        return oracle.pool2d(x, win, kind_, bool(a.get("count_include_pad", False)), int(a.get("p", 2)))

    return rule


register(
    "max_pool2d",
    REDUCTION,
    1,
    evaluate=_eval_pool("max"),
    cpu=CpuKernel("make_pool2d", (("kind", "max"),)),
)(_pool("max"))
register("avg_pool2d", REDUCTION, 1, evaluate=_eval_pool("avg"), cpu=CpuKernel("make_pool2d", (("kind", "avg"),)))(
    _pool("avg")
)
register("lp_pool2d", REDUCTION, 1, evaluate=_eval_pool("lp"), cpu=CpuKernel("make_pool2d", (("kind", "lp"),)))(
    _pool("lp")
)


@register(
    "global_avg_pool",
    REDUCTION,
    1,
    evaluate=lambda node, args, types, out: oracle.global_avg_pool(args[0]),
    cpu=CpuKernel("make_global_avg_pool"),
)
def _global_avg_pool(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    (x,) = inputs
    _need("global_avg_pool", len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    _need("global_avg_pool", x.dtype in ("int8", "float32"), f"dtype {x.dtype} is not supported (int8, float32)")
    return TensorType((*x.shape[:2], 1, 1), x.dtype, x.quant)


@register(
    "global_sum_pool",
    REDUCTION,
    1,
    evaluate=lambda node, args, types, out: oracle.global_sum_pool(args[0]),
    cpu=CpuKernel("make_global_avg_pool", (("mean", False),)),
)
def _global_sum_pool(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """The int32 sum over H and W of an int8 NCHW tensor, (N, C, 1, 1): a quantized global average pool is
    this sum times the requantizing multiplier (``vdla.graph.qdq``)."""
    (x,) = inputs
    _need("global_sum_pool", len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    _need("global_sum_pool", x.dtype == "int8", f"sums int8 into int32, got {x.dtype}")
    return TensorType((*x.shape[:2], 1, 1), "int32")


SOFTMAX_KINDS = ("softmax", "log_softmax", "hardmax")


def softmax_type(op: str, x: TensorType, axis: int) -> tuple[int, TensorType]:
    """The normalised axis and the output type (``x``'s) of a softmax-like operator along ``axis`` of a
    float32 ``x``."""
    _need(op, x.dtype == "float32", f"requires float32, got {x.dtype}")
    _need(op, -len(x.shape) <= axis < len(x.shape), f"axis {axis} out of range for {x.shape}")
    return axis % len(x.shape), x


def _softmax_rule(op: str) -> Infer:
    def rule(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
        return softmax_type(op, inputs[0], int(node.attrs.get("axis", -1)))[1]

    return rule


for _kind in SOFTMAX_KINDS:  # softmax, log(softmax) and the one-hot of the (first) maximum along one axis
    register(
        _kind,
        OPAQUE,
        1,
        evaluate=lambda node, args, types, out, k=_kind: oracle.softmax(args[0], int(node.attrs.get("axis", -1)), k),
        cpu=CpuKernel("make_softmax", (("kind", _kind),)),
    )(_softmax_rule(_kind))


# ---------------------------------------------------------------------------------------------------------
# Shapes and layouts


@register("reshape", INJECTIVE, 1, evaluate=lambda node, args, types, out: args[0].reshape(out.shape), cpu=VIEW)
def _reshape(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    (x,) = inputs
    return TensorType(reshaped(x.shape, node.attrs["shape"]), x.dtype, x.quant)


def transpose_type(x: TensorType, perm) -> tuple[tuple[int, ...], TensorType]:
    """The checked permutation and the output type of ``x`` transposed (a per-axis quantization follows)."""
    perm = tuple(int(p) for p in perm)
    _need("transpose", sorted(perm) == list(range(len(x.shape))), f"bad permutation {perm} for {x.shape}")
    q = x.quant
    if q is not None and q.axis is not None:
        q = Quant(q.scale, q.zero_point, perm.index(q.axis))
    return perm, TensorType(tuple(x.shape[p] for p in perm), x.dtype, q)


@register(
    "transpose",
    INJECTIVE,
    1,
    evaluate=lambda node, args, types, out: np.ascontiguousarray(args[0].transpose(node.attrs["perm"])),
    cpu=CpuKernel("make_transpose"),
)
def _transpose(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    return transpose_type(inputs[0], node.attrs["perm"])[1]


def concat_type(inputs: list[TensorType] | tuple[TensorType, ...], axis: int) -> tuple[int, TensorType]:
    """The normalised axis and the output type of concatenating ``inputs`` (one dtype, equal shapes outside
    ``axis``; the quantization kept where all inputs share it)."""
    _need("concat", len(inputs) >= 1, "needs at least one input")
    rank, dtype = len(inputs[0].shape), inputs[0].dtype
    _need("concat", -rank <= axis < rank, f"axis {axis} out of range")
    axis %= rank
    for t in inputs:
        _need("concat", t.dtype == dtype, f"mixed dtypes {dtype} and {t.dtype}")
        same = len(t.shape) == rank and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, inputs[0].shape, strict=True)) if i != axis
        )
        _need("concat", same, f"shape {t.shape} does not match {inputs[0].shape} outside axis {axis}")
    shape = list(inputs[0].shape)
    shape[axis] = sum(t.shape[axis] for t in inputs)
    quants = {t.quant for t in inputs}
    return axis, TensorType(tuple(shape), dtype, quants.pop() if len(quants) == 1 else None)


@register(
    "concat",
    INJECTIVE,
    1,
    1 << 16,
    evaluate=lambda node, args, types, out: np.concatenate(args, axis=int(node.attrs.get("axis", 0))),
    cpu=CpuKernel("make_concat", variadic=True),
)
def _concat(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    return concat_type(inputs, int(node.attrs.get("axis", 0)))[1]


def pad_type(x: TensorType, pads) -> tuple[tuple[tuple[int, int], ...], TensorType]:
    """The checked ``(before, after)`` pairs (one per axis) and the output type of padding ``x``."""
    pads = tuple((int(a), int(b)) for a, b in pads)
    ok = len(pads) == len(x.shape) and all(a >= 0 and b >= 0 for a, b in pads)
    _need("pad", ok, f"pads {pads} must be one non-negative (before, after) pair per axis of {x.shape}")
    shape = tuple(d + a + b for d, (a, b) in zip(x.shape, pads, strict=True))
    return pads, TensorType(shape, x.dtype, x.quant)


def _eval_pad(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    value = node.attrs.get("value", 0)
    return np.pad(args[0], node.attrs["pads"], constant_values=value).astype(args[0].dtype)


@register("pad", INJECTIVE, 1, evaluate=_eval_pad, cpu=CpuKernel("make_pad"))
def _pad(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    return pad_type(inputs[0], node.attrs["pads"])[1]


def slice_type(x: TensorType, starts, stops, steps) -> tuple[tuple[range, ...], TensorType]:
    """The element indices along each axis (``range(start, stop, step)``, every index inside the axis, at
    least one) and the output type of slicing ``x``; a per-axis quantization keeps the sliced scales."""
    starts, stops, steps = (tuple(int(v) for v in t) for t in (starts, stops, steps))
    rank = len(x.shape)
    ok = len(starts) == len(stops) == len(steps) == rank
    _need("slice", ok, f"needs one start, stop and step per axis of {x.shape}, got {starts}, {stops}, {steps}")
    ranges = []
    for axis, (d, a, b, s) in enumerate(zip(x.shape, starts, stops, steps, strict=True)):
        _need("slice", s != 0, f"step 0 along axis {axis}")
        r = range(a, b, s)
        inside = len(r) >= 1 and 0 <= r[0] < d and 0 <= r[-1] < d
        _need("slice", inside, f"range({a}, {b}, {s}) along axis {axis} of size {d} must select 1 or more elements")
        ranges.append(r)
    q = x.quant
    if q is not None and q.axis is not None:
        q = Quant(tuple(q.scale[i] for i in ranges[q.axis]), q.zero_point, q.axis)
    return tuple(ranges), TensorType(tuple(len(r) for r in ranges), x.dtype, q)


def _eval_slice(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    a = node.attrs
    ranges, _ = slice_type(TensorType.of(args[0], "slice"), a["starts"], a["stops"], a["steps"])
    return np.ascontiguousarray(args[0][np.ix_(*ranges)])


@register("slice", INJECTIVE, 1, evaluate=_eval_slice, cpu=CpuKernel("make_slice"))
def _slice(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    a = node.attrs
    return slice_type(inputs[0], a["starts"], a["stops"], a["steps"])[1]


RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def resize_type(
    x: TensorType,
    mode: str,
    coordinate_mode: str,
    nearest_mode: str,
    scales,
    sizes,
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
    antialias: bool = False,
    roi=None,
    extrapolation_value: float = 0.0,
) -> tuple[tuple[oracle.ResizeFilter, ...], TensorType]:
    """The per-axis filters and the output type (shape ``sizes``) of resizing ``x``; ``scales`` are the
    per-axis factors the coordinate transformation divides by (ONNX's, which need not equal
    ``sizes / shape``), ``roi`` one (start, end) pair per axis for tf_crop_and_resize, whose output reads
    ``extrapolation_value`` outside the input. Nearest keeps the dtype and quantization of any tensor;
    linear and cubic interpolate float32."""
    rank = len(x.shape)
    _need("resize", mode in RESIZE_MODES, f"mode {mode!r} is not supported ({', '.join(RESIZE_MODES)})")
    _need("resize", coordinate_mode in COORDINATE_MODES, f"coordinate transformation {coordinate_mode!r} unknown")
    _need("resize", nearest_mode in NEAREST_MODES, f"nearest mode {nearest_mode!r} unknown")
    _need("resize", mode == "nearest" or x.dtype == "float32", f"{mode} resize needs float32, got {x.dtype}")
    ok = len(scales) == len(sizes) == rank
    _need("resize", ok, f"needs one scale and one size per axis of {x.shape}, got {scales}, {sizes}")
    ok = all(math.isfinite(float(s)) and float(s) > 0 for s in scales) and all(int(n) >= 1 for n in sizes)
    _need("resize", ok, f"scales {scales} must be positive and finite, sizes {sizes} at least 1")
    _need("resize", math.isfinite(float(cubic_coeff_a)), f"cubic_coeff_a {cubic_coeff_a} must be finite")
    roi = [(0.0, 1.0)] * rank if roi is None else [(float(a), float(b)) for a, b in roi]
    ok = len(roi) == rank and all(math.isfinite(a) and math.isfinite(b) for a, b in roi)
    _need("resize", ok, f"roi {roi} must give one finite (start, end) per axis of {x.shape}")
    _fill_value("resize", x.dtype, extrapolation_value)
    filters = tuple(
        oracle.ResizeFilter(
            mode, coordinate_mode, nearest_mode, float(cubic_coeff_a), bool(exclude_outside), bool(antialias), r
        )
        for r in roi
    )
    q = x.quant if mode == "nearest" and (x.quant is None or x.quant.axis is None) else None
    return filters, TensorType(tuple(int(n) for n in sizes), x.dtype, q)


RESIZE_OPTIONS = ("cubic_coeff_a", "exclude_outside", "antialias", "roi", "extrapolation_value")


def _resize_args(a: Mapping[str, Any]) -> tuple:
    return tuple(a[k] for k in ("mode", "coordinate_mode", "nearest_mode", "scales", "sizes"))


def _eval_resize(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    a = node.attrs
    filters, _ = resize_type(types[0], *_resize_args(a), **{k: a[k] for k in RESIZE_OPTIONS if k in a})
    return oracle.resize(args[0], filters, a["scales"], out.shape, float(a.get("extrapolation_value", 0.0)))


@register("resize", INJECTIVE, 1, evaluate=_eval_resize, cpu=CpuKernel("make_resize"))
def _resize(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    a = node.attrs
    return resize_type(inputs[0], *_resize_args(a), **{k: a[k] for k in RESIZE_OPTIONS if k in a})[1]


def im2col_type(x: TensorType, kernel, stride=1, padding=0, dilation=1) -> tuple[Window, TensorType]:
    """The window and output type of ``im2col`` of NCHW ``x``: (N, C*KH*KW, OH, OW), output channel
    ``(c*KH + ky)*KW + kx`` holding input channel ``c`` under kernel tap ``(ky, kx)`` (the order of a
    reshaped OIHW weight), zero where the tap falls in the padding; a per-tensor quantization is kept (a
    per-axis one cannot follow the channels, so it is dropped)."""
    _need("im2col", len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    win, (oh, ow) = make_window("im2col", x.shape[2:], kernel, stride, dilation, padding)
    n, c = x.shape[:2]
    q = x.quant if x.quant is not None and x.quant.axis is None else None
    return win, TensorType((n, c * win.kernel[0] * win.kernel[1], oh, ow), x.dtype, q)


def _eval_im2col(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    a = node.attrs
    x = TensorType.of(args[0], "im2col")
    win, _ = im2col_type(x, a["kernel"], a.get("stride", 1), a.get("padding", 0), a.get("dilation", 1))
    return oracle.im2col(args[0], win)


@register("im2col", INJECTIVE, 1, evaluate=_eval_im2col, cpu=CpuKernel("make_im2col"))
def _im2col(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    a = node.attrs
    return im2col_type(inputs[0], a["kernel"], a.get("stride", 1), a.get("padding", 0), a.get("dilation", 1))[1]


@register(
    "pack_blocked",
    INJECTIVE,
    1,
    evaluate=lambda node, args, types, out: layout.pack_activation(args[0], node.attrs["batch"], node.attrs["block"]),
    cpu=CpuKernel("make_pack"),
)
def _pack(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    (x,) = inputs
    _need("pack_blocked", len(x.shape) == 4, f"expects an NCHW tensor, got shape {x.shape}")
    return TensorType(blocked_shape(x.shape, node.attrs["batch"], node.attrs["block"]), x.dtype, x.quant)


@register(
    "unpack_blocked",
    INJECTIVE,
    1,
    evaluate=lambda node, args, types, out: layout.unpack_activation(args[0], out.shape[0], out.shape[1]),
    cpu=CpuKernel("make_unpack"),
)
def _unpack(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    (x,) = inputs
    _need("unpack_blocked", len(x.shape) == 6, f"expects (N/bn, C/B, H, W, bn, B), got shape {x.shape}")
    nb, _, h, w, bn, _ = x.shape
    images = int(node.attrs.get("images", nb * bn))
    return TensorType((images, int(node.attrs["channels"]), h, w), x.dtype, x.quant)


# ---------------------------------------------------------------------------------------------------------
# Indexing: per-axis gathers (take), gathers and scatters by flat offsets


def _fill_value(op: str, dtype: str, value, infinite: bool = False) -> int | float:
    """A fill value of ``dtype``: finite for float32 (``infinite``: or an infinity, which the operator only
    copies), an integer inside the range of an integer dtype."""
    if is_float(dtype):
        v = float(value)
        ok = math.isfinite(v) or (infinite and math.isinf(v))
        _need(op, ok, f"the fill value {value} must be {'a number' if infinite else 'finite'}")
        return v
    lo, hi = INT_RANGE[dtype]
    _need(op, float(value).is_integer() and lo <= int(value) <= hi, f"the fill value {value} does not fit {dtype}")
    return int(value)


def take_type(x: TensorType, index, value=0) -> tuple[tuple[tuple[int, ...] | None, ...], TensorType]:
    """The checked per-axis tables and the output type of ``take``: output index ``o`` along axis ``i`` reads
    input index ``index[i][o]`` (``None``: the axis is kept whole), ``-1`` reading the fill ``value``. A
    per-tensor quantization is kept, a per-axis one where its axis is kept whole."""
    _need("take", len(index) == len(x.shape), f"needs one table (or None) per axis of {x.shape}, got {len(index)}")
    tables: list[tuple[int, ...] | None] = []
    for axis, (d, t) in enumerate(zip(x.shape, index, strict=True)):
        if t is None:
            tables.append(None)
            continue
        t = tuple(int(i) for i in t)
        ok = len(t) >= 1 and all(-1 <= i < d for i in t)
        _need("take", ok, f"the table of axis {axis} (size {d}) must hold 1 or more indices in [-1, {d})")
        tables.append(t)
    _fill_value("take", x.dtype, value, infinite=True)
    shape = tuple(d if t is None else len(t) for d, t in zip(x.shape, tables, strict=True))
    q = x.quant if x.quant is None or x.quant.axis is None or tables[x.quant.axis] is None else None
    return tuple(tables), TensorType(shape, x.dtype, q)


def take_fill(x: TensorType, fill: TensorType) -> None:
    """Checks a fill value given as a tensor (computed at run time): one element of ``x``'s dtype."""
    ok = fill.size == 1 and fill.dtype == x.dtype
    _need("take", ok, f"a fill tensor must hold one {x.dtype} element, got {fill}")


def _eval_take(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    value = args[1].reshape(-1)[0] if len(args) > 1 else node.attrs.get("value", 0)
    return oracle.take(args[0], node.attrs["index"], value)


@register("take", INJECTIVE, 1, 2, evaluate=_eval_take, cpu=CpuKernel("make_take"))
def _take(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """Per-axis gather (slices with any steps, tiling, broadcasting, padding by edge, reflection or wrap,
    gathers along one axis by constant indices, crops and constant fills); the fill is the ``value``
    attribute or, with a second input, that one-element tensor's value."""
    if len(inputs) > 1:
        take_fill(inputs[0], inputs[1])
    return take_type(inputs[0], node.attrs["index"], node.attrs.get("value", 0))[1]


def offsets_type(
    op: str, x: TensorType, index: TensorType, params: Mapping[str, np.ndarray], name: str, computed: bool = False
) -> None:
    """Checks the flat offsets ``index`` into ``x`` of a gather or scatter: int32; a constant (a parameter)
    has every entry checked here, at compile time, to lie in ``[0, x.size)``; offsets computed at run time
    (``computed``: a gather's or a scatter's) are clamped into that range by the kernel."""
    _need(op, index.dtype == "int32", f"offsets must be int32, got {index.dtype}")
    if name not in params:
        _need(op, computed, f"offsets {name!r} must be a constant (vdla checks every offset when compiling)")
        return
    a = params[name]
    _need(op, bool(np.all((a >= 0) & (a < x.size))), f"offsets must lie in [0, {x.size}) for input {x}")


@register(
    "gather",
    INJECTIVE,
    2,
    evaluate=lambda node, args, types, out: oracle.gather(args[0], args[1]),
    cpu=CpuKernel("make_gather"),
)
def _gather(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """``out.flat[k] = x.flat[index.flat[k]]``, the output of the offsets' shape (GatherElements, GatherND and
    ReverseSequence as gathers of constant offsets; Gather of indices computed at run time, such as token
    ids, as a gather of computed offsets, which the kernel clamps into ``[0, x.size)``)."""
    x, index = inputs
    offsets_type("gather", x, index, params, node.inputs[1], computed=True)
    return TensorType(index.shape, x.dtype, x.quant if x.quant is None or x.quant.axis is None else None)


@register(
    "table",
    INJECTIVE,
    2,
    evaluate=lambda node, args, types, out: oracle.table(args[0], args[1]),
    cpu=CpuKernel("make_table"),
)
def _table(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """A function of one int8 tensor as its 256-entry table (``vdla.graph.tables``): entry ``b`` for the
    elements whose two's-complement byte is ``b``. int8 entries (an activation, on the accelerator or the CPU)
    give an int8 result with the quantization ``quant`` (scale, zero point) where given; float32 entries (a
    dequantized activation, on the CPU) a float32 one."""
    x, entries = inputs
    if x.dtype != "int8" or entries.dtype not in ("int8", "float32") or entries.size != 256:
        raise UnsupportedError("table", f"takes an int8 tensor and 256 int8 or float32 entries, got {x} and {entries}")
    quant = node.attrs.get("quant")  # (scale, zero_point), as elementwise results carry it
    if entries.dtype == "float32":
        return TensorType(x.shape, "float32")
    return TensorType(x.shape, "int8", None if quant is None else Quant.of(*quant))


SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


@register(
    "scatter",
    OPAQUE,
    3,
    evaluate=lambda node, args, types, out: oracle.scatter(*args, node.attrs.get("reduction", "none")),
    cpu=CpuKernel("make_scatter"),
)
def _scatter(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """``x`` with ``out.flat[index.flat[k]] = reduce(out.flat[index.flat[k]], updates.flat[k])`` applied for
    every ``k`` in order (reduction none: the update replaces it, so the last of repeated offsets wins);
    offsets computed at run time (ScatterElements/ScatterND of run-time indices) are clamped into ``x``."""
    x, index, updates = inputs
    reduction = node.attrs.get("reduction", "none")
    _need("scatter", reduction in SCATTER_REDUCTIONS, f"reduction {reduction!r} is not one of {SCATTER_REDUCTIONS}")
    _need("scatter", x.dtype in ("float32", "int32"), f"dtype {x.dtype} is not supported (float32, int32)")
    _need("scatter", updates.dtype == x.dtype, f"updates are {updates.dtype}, the input {x.dtype}")
    _need("scatter", updates.shape == index.shape, f"updates {updates.shape} and offsets {index.shape} differ")
    offsets_type("scatter", x, index, params, node.inputs[1], computed=True)
    return x.plain


def one_hot_type(indices: TensorType, values: TensorType, depth: int, axis: int) -> TensorType:
    """The output type of OneHot: ``indices``' shape with an axis of ``depth`` inserted at ``axis`` (in
    [0, rank]), the dtype (and quantization) of ``values``, which holds (off, on)."""
    op = "one_hot"
    _need(op, indices.dtype in ("float32", "int32", "int8"), f"indices are float32, int32 or int8, got {indices.dtype}")
    _need(op, values.shape == (2,), f"values must be (off, on), got shape {values.shape}")
    _need(op, isinstance(depth, int) and depth >= 1, f"depth must be a positive integer, got {depth!r}")
    _need(op, 0 <= axis <= len(indices.shape), f"axis {axis} out of range for indices {indices.shape}")
    shape = (*indices.shape[:axis], depth, *indices.shape[axis:])
    return TensorType(shape, values.dtype, values.quant if values.quant is None or values.quant.axis is None else None)


@register(
    "one_hot",
    INJECTIVE,
    2,
    evaluate=lambda node, args, types, out: oracle.one_hot(*args, node.attrs["depth"], node.attrs["axis"]),
    cpu=CpuKernel("make_one_hot"),
)
def _one_hot(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """``values[1]`` where an index (float ones truncated, negative ones counted from ``depth``) equals the
    position along the new axis, else ``values[0]``; an index outside [-depth, depth) (or NaN) is all off."""
    return one_hot_type(*inputs, node.attrs["depth"], node.attrs["axis"])


GRID_MODES = ("nearest", "linear", "cubic")
GRID_PADDING = ("zeros", "border", "reflection")


def grid_sample_type(x: TensorType, grid: TensorType, mode: str, padding_mode: str, align_corners: bool) -> TensorType:
    """The output type of sampling float32 ``x`` (N, C, spatial...) at ``grid`` (N, out spatial..., r), r the
    number of spatial axes: (N, C, out spatial...)."""
    op = "grid_sample"
    _need(op, mode in GRID_MODES, f"mode {mode!r} is not one of {GRID_MODES}")
    _need(op, padding_mode in GRID_PADDING, f"padding mode {padding_mode!r} is not one of {GRID_PADDING}")
    _need(op, x.dtype == grid.dtype == "float32", f"needs float32, got {x.dtype} and {grid.dtype}")
    r = len(x.shape) - 2
    ok = r >= 1 and grid.shape[0] == x.shape[0] and len(grid.shape) == r + 2 and grid.shape[-1] == r
    _need(op, ok, f"grid {grid.shape} must be (N, out spatial..., {r}) for input {x.shape}")
    flat = padding_mode == "reflection" and align_corners and 1 in x.shape[2:]
    _need(op, not flat, f"reflection with align_corners over an axis of size 1 ({x.shape}) has nothing to reflect on")
    return TensorType((*x.shape[:2], *grid.shape[1:-1]), "float32")


def _grid_attrs(a: Mapping[str, Any]) -> tuple[str, str, bool]:
    return a.get("mode", "linear"), a.get("padding_mode", "zeros"), bool(a.get("align_corners", False))


@register(
    "grid_sample",
    OPAQUE,
    2,
    evaluate=lambda node, args, types, out: oracle.grid_sample(*args, *_grid_attrs(node.attrs)),
    cpu=CpuKernel("make_grid_sample"),
)
def _grid_sample(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """ONNX GridSample: every output point interpolates the input (nearest, linear or cubic, per channel) at
    the point the grid gives for it, reading outside the input as zeros, the border or its reflection."""
    return grid_sample_type(*inputs, *_grid_attrs(node.attrs))


def attrs_text(attrs: Mapping[str, Any]) -> str:
    """Attributes as ``name=value`` pairs (arrays abbreviated), for dumps and error messages."""

    def short(v: Any) -> str:
        if isinstance(v, np.ndarray):
            return f"array{tuple(v.shape)}"
        return repr(v)

    return ", ".join(f"{k}={short(v)}" for k, v in sorted(attrs.items()))


# ---------------------------------------------------------------------------------------------------------
# Reductions on any axes, normalizations, scans and selections

# what each reduction computes over its axes: sums and products accumulate in float64 (int32 wrapping for
# integers), max/min propagate NaN, argmax/argmin give the (first, or last) index of the extreme as int32
REDUCE_KINDS = (
    "sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp", "sum_square", "argmax", "argmin",
)  # fmt: skip
ARG_KINDS = ("argmax", "argmin")
_REDUCE_DTYPES = {
    **{k: ("float32",) for k in ("mean", "l1", "l2", "log_sum", "log_sum_exp", "sum_square")},
    "sum": ("float32", "int32"),
    "prod": ("float32", "int32"),
    **{k: ("float32", "int32", "int8") for k in ("max", "min", *ARG_KINDS)},
}


def reduce_type(x: TensorType, kind: str, axes, keepdims: bool = True) -> tuple[tuple[int, ...], TensorType]:
    """The reduced axes (normalised, sorted, unique) and the output type of reducing ``x`` over ``axes``
    (no axes: every element is reduced alone, e.g. ``l2`` is ``|x|``); argmax/argmin take exactly one axis
    and give int32 indices; max/min keep a per-tensor quantization."""
    op = "reduce"
    _need(op, kind in REDUCE_KINDS, f"kind {kind!r} is not one of {', '.join(REDUCE_KINDS)}")
    ok = x.dtype in _REDUCE_DTYPES[kind]
    _need(op, ok, f"{kind} of {x.dtype} is not supported ({', '.join(_REDUCE_DTYPES[kind])})")
    rank = len(x.shape)
    raw = [int(a) for a in axes]
    _need(op, all(-rank <= a < rank for a in raw), f"axes {raw} out of range for shape {x.shape}")
    norm = tuple(sorted({a % rank for a in raw}))
    _need(op, len(norm) == len(raw), f"repeated axes {raw}")
    _need(op, kind not in ARG_KINDS or len(norm) == 1, f"{kind} takes exactly one axis, got {raw}")
    if keepdims:
        shape = tuple(1 if i in norm else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in norm)
    if kind in ARG_KINDS:
        return norm, TensorType(shape, "int32")
    q = x.quant if kind in ("max", "min") and x.quant is not None and x.quant.axis is None else None
    return norm, TensorType(shape, x.dtype, q)


def _eval_reduce(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    a = node.attrs
    axes, _ = reduce_type(types[0], a["kind"], a["axes"], bool(a.get("keepdims", True)))
    y = oracle.reduce(args[0], a["kind"], axes, bool(a.get("select_last_index", False)))
    return y.reshape(out.shape)


@register("reduce", REDUCTION, 1, evaluate=_eval_reduce, cpu=CpuKernel("make_reduce"))
def _reduce(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    a = node.attrs
    _need("reduce", "kind" in a and "axes" in a, "needs the kind and axes attributes")
    return reduce_type(inputs[0], a["kind"], a["axes"], bool(a.get("keepdims", True)))[1]


NORM_KINDS = ("layer_norm", "rms_norm")


def norm_type(op: str, inputs: list[TensorType] | tuple[TensorType, ...], axis: int) -> tuple[int, TensorType]:
    """The normalised axis and the output type (``x``'s) of ``layer_norm``/``rms_norm`` of float32 ``x``
    over the axes from ``axis`` on, the optional scale and bias broadcasting to ``x`` as numpy's."""
    x, *affine = inputs
    _need(op, x.dtype == "float32", f"requires float32, got {x.dtype}")
    rank = len(x.shape)
    _need(op, -rank <= axis < rank, f"axis {axis} out of range for {x.shape}")
    for t in affine:
        _need(op, t.dtype == "float32", f"scale and bias must be float32, got {t.dtype}")
        try:
            fits = len(t.shape) <= rank and np.broadcast_shapes(t.shape, x.shape) == x.shape
        except ValueError:
            fits = False
        _need(op, fits, f"scale/bias of shape {t.shape} does not broadcast to {x.shape}")
    return axis % rank, x


def _eval_norm(op: str) -> Eval:
    def rule(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
        a = node.attrs
        axis, _ = norm_type(op, types, int(a.get("axis", -1)))
        x, *affine = args
        return oracle.normalize(x, axis, float(a["epsilon"]), op == "layer_norm", *affine)

    return rule


def _norm_rule(op: str) -> Infer:
    def rule(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
        eps = node.attrs.get("epsilon")
        _need(op, eps is not None and math.isfinite(float(eps)) and float(eps) >= 0, f"bad epsilon {eps}")
        return norm_type(op, inputs, int(node.attrs.get("axis", -1)))[1]

    return rule


for _kind in NORM_KINDS:  # (x - mean) / sqrt(var + eps) and x / sqrt(mean(x^2) + eps), times scale, plus bias
    register(_kind, OPAQUE, 1, 3, evaluate=_eval_norm(_kind), cpu=CpuKernel("make_norm", (("kind", _kind),)))(
        _norm_rule(_kind)
    )


def _eval_layer_norm_int(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    p = IntLayerNorm.of_node(node, dict(zip(node.inputs[1:], args[1:], strict=True)))
    return oracle.layer_norm_int(args[0], p)


@register("layer_norm_int", OPAQUE, 3, evaluate=_eval_layer_norm_int)
def _layer_norm_int(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """LayerNorm over the last axis of int8 ``x`` in integers, as the accelerator computes it
    (:func:`vdla.graph.oracle.layer_norm_int`; :mod:`vdla.graph.layernorm`): inputs ``x`` and the int32 rows of
    gamma's multipliers and beta's biases (one per feature), attributes ``prescale``, ``epsilon``, ``gamma_shift``
    and the output's ``quant`` (scale, zero point 0). No CPU kernel: the QDQ lowering writes it only where the
    accelerator runs it (:func:`vdla.graph.qdq.lower_qdq`'s ``layer_norms``)."""
    x, m, b = inputs
    n = x.shape[-1] if x.shape else 0
    _need("layer_norm_int", x.dtype == "int8", f"requires int8, got {x.dtype}")
    _need("layer_norm_int", m.dtype == b.dtype == "int32", f"multipliers and biases must be int32, got {m}, {b}")
    _need("layer_norm_int", m.shape == b.shape == (n,), f"{n} multipliers and biases for {x}, got {m}, {b}")
    a = node.attrs
    _need("layer_norm_int", all(k in a for k in ("prescale", "epsilon", "gamma_shift", "quant")), f"attrs {a}")
    return TensorType(x.shape, "int8", Quant.of(*a["quant"]))


def _eval_attention_int(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    p, x = att.node_params(node), args[0]
    keep = args[1].ravel() if len(args) > 1 else None
    y = np.zeros(out.shape, np.int8)
    for h in att.node_heads(node):
        q, k, v = (x[:, at : at + p.d] for at in (h.q_at, h.k_at, h.v_at))
        head = oracle.attention_qdq if isinstance(p, att.QdqAttention) else oracle.attention_int
        y[:, h.out_at : h.out_at + p.d] = head(q, k, v, p, keep)
    return y


@register("attention_int", OPAQUE, 1, 2, evaluate=_eval_attention_int)
def _attention_int(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """The heads of an attention block in integers, as the accelerator computes them (each head
    :func:`vdla.graph.oracle.attention_int`; :mod:`vdla.graph.attention`): inputs int8 ``x`` (tokens, channels)
    holding every head's ``Q``, ``K``, ``V`` and optionally the per-key keep vector (int8 or bool, nonzero kept);
    attributes ``head`` (d), ``heads`` (each head's ``(q_at, k_at, v_at, out_at)`` channel offsets), ``scales``
    (:func:`vdla.graph.attention.attention_node`), the output's ``quant`` and, for a QDQ model's block, ``qdq``
    (:class:`~vdla.graph.attention.QdqAttention`, each head :func:`vdla.graph.oracle.attention_qdq`). The output
    (tokens, heads x d) holds head ``h``'s channels from its ``out_at``. No CPU kernel: the QDQ lowering writes it
    only where the accelerator runs it (:func:`vdla.graph.qdq.lower_qdq`'s ``attentions``)."""
    x, a = inputs[0], node.attrs
    _need("attention_int", all(k in a for k in ("head", "heads", "scales", "quant")), f"attrs {a}")
    _need("attention_int", x.dtype == "int8" and len(x.shape) == 2, f"requires int8 (tokens, channels), got {x}")
    d, heads = int(a["head"]), tuple(a["heads"])
    width = len(heads) * d
    inside = all(0 <= at and at + d <= x.shape[1] for h in heads for at in h[:3])
    _need("attention_int", inside and all(0 <= h[3] and h[3] + d <= width for h in heads), f"views {heads} of {x}")
    if len(inputs) > 1:
        k = inputs[1]
        ok = k.dtype in ("int8", "bool") and int(np.prod(k.shape)) == x.shape[0]
        _need("attention_int", ok, f"a keep vector of {x.shape[0]} int8 or bool values, got {k}")
    return TensorType((x.shape[0], width), "int8", Quant.of(*a["quant"]))


def scan_type(x: TensorType, axis: int) -> tuple[int, TensorType]:
    """The normalised axis and the output type of a cumulative sum (or product) of float32 or int32 ``x`` along
    ``axis``."""
    _need("cumsum", x.dtype in ("float32", "int32"), f"dtype {x.dtype} is not supported (float32, int32)")
    rank = len(x.shape)
    _need("cumsum", rank >= 1 and -rank <= axis < rank, f"axis {axis} out of range for {x.shape}")
    return axis % rank, x


def _eval_cumsum(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    a = node.attrs
    axis, _ = scan_type(types[0], int(a["axis"]))
    flags = (bool(a.get(k, False)) for k in ("exclusive", "reverse", "product"))
    return oracle.cumsum(args[0], axis, *flags)


@register("cumsum", OPAQUE, 1, evaluate=_eval_cumsum, cpu=CpuKernel("make_cumsum"))
def _cumsum(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """The cumulative sum along ``axis`` (``exclusive``: each element left out of its own; ``reverse``: from the
    end), or with ``product`` the cumulative product (CumProd; the exclusive one starts at 1)."""
    return scan_type(inputs[0], int(node.attrs["axis"]))[1]


def topk_type(x: TensorType, k: int, axis: int, indices: bool) -> tuple[int, TensorType]:
    """The normalised axis and the output type of the ``k`` largest (or smallest) entries of ``x`` along
    ``axis``: their values (``x``'s dtype and quantization) or their int32 ``indices``."""
    _need("topk", x.dtype in ("float32", "int32", "int8"), f"dtype {x.dtype} is not supported")
    rank = len(x.shape)
    _need("topk", rank >= 1 and -rank <= axis < rank, f"axis {axis} out of range for {x.shape}")
    axis %= rank
    _need("topk", 1 <= k <= x.shape[axis], f"k={k} must lie in [1, {x.shape[axis]}] (the axis size)")
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    return axis, TensorType(shape, "int32") if indices else TensorType(shape, x.dtype, x.quant)


def _topk_attrs(node: Node) -> tuple[int, int, bool]:
    a = node.attrs
    return int(a["k"]), int(a.get("axis", -1)), bool(a.get("indices", False))


def _eval_topk(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    k, axis, indices = _topk_attrs(node)
    axis, _ = topk_type(types[0], k, axis, indices)
    values, index = oracle.topk(args[0], k, axis, bool(node.attrs.get("largest", True)))
    return index if indices else values


@register("topk", OPAQUE, 1, evaluate=_eval_topk, cpu=CpuKernel("make_topk"))
def _topk(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    return topk_type(inputs[0], *_topk_attrs(node))[1]


@register(
    "trilu",
    INJECTIVE,
    1,
    evaluate=lambda node, args, types, out: oracle.trilu(
        args[0], bool(node.attrs.get("upper", True)), int(node.attrs.get("k", 0))
    ),
    cpu=CpuKernel("make_trilu"),
)
def _trilu(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """The upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two axes, zero elsewhere."""
    (x,) = inputs
    _need("trilu", len(x.shape) >= 2, f"needs a tensor of rank 2 or more, got shape {x.shape}")
    return x


def nll_type(inputs: list[TensorType] | tuple[TensorType, ...]) -> TensorType:
    """The output type (N, D1, ...) of the per-element negative log-likelihood of float32 ``x`` (N, C, D1, ...)
    at int32 class indices ``target`` (N, D1, ...), optionally weighted per class by a float32 (C,) tensor."""
    x, target, *weight = inputs
    op = "nll_loss"
    _need(op, x.dtype == "float32" and len(x.shape) >= 2, f"expects a float32 (N, C, ...) input, got {x}")
    want = (x.shape[0], *x.shape[2:])
    _need(op, target.dtype == "int32" and target.shape == want, f"target must be int32 of shape {want}, got {target}")
    for w in weight:
        _need(op, w.dtype == "float32" and w.shape == (x.shape[1],), f"weight must be float32 ({x.shape[1]},), got {w}")
    return TensorType(want, "float32")


@register(
    "nll_loss",
    OPAQUE,
    2,
    3,
    evaluate=lambda node, args, types, out: oracle.nll_loss(*args, ignore_index=node.attrs.get("ignore_index")),
    cpu=CpuKernel("make_nll_loss"),
)
def _nll_loss(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """``-x[n, t, d...] * weight[t]`` at each target ``t`` (0 where ``t`` is ``ignore_index``; NaN where ``t``
    lies outside the classes): the losses before their reduction."""
    return nll_type(inputs)


# ---------------------------------------------------------------------------------------------------------
# Recurrent cells: ONNX's RNN, GRU and LSTM as the recurrence over input gates projected beforehand (the
# importer makes X W^T + Wb one dense layer over every time step, which the accelerator can run)

RNN_CELLS = tuple(oracle.RNN_GATES)
RNN_DIRECTIONS = ("forward", "reverse")


@dataclass(frozen=True)
class RecurrenceAttrs:
    """The checked attributes of a ``recurrence`` node: the cell, whether each direction runs in reverse,
    each direction's activation slots in turn (float32 elementwise steps, the clip first where the cell
    clips), GRU's ``linear_before_reset`` and LSTM's ``input_forget``."""

    cell: str
    reverse: tuple[bool, ...]
    activations: tuple[tuple[EwStep, ...], ...]
    linear_before_reset: bool
    input_forget: bool


def activation_steps(op: str, activation: Any, clip: float | None = None) -> tuple[EwStep, ...]:
    """A recurrent activation written as a list of steps ``[name, *operand values]`` (``[["mul", 2.0],
    ["tanh"]]``), each a float32 elementwise operator of :mod:`vdla.graph.ew` with its operands as constants,
    as :class:`EwStep` s; a ``clip`` threshold becomes a clip to [-clip, clip] before them."""
    steps = [["clip", -clip, clip]] if clip is not None else []
    resolved = []
    for step in [*steps, *activation]:
        _need(
            op,
            isinstance(step, list | tuple) and len(step) >= 1,
            f"an activation step is [name, *operands], got {step!r}",
        )
        name, *values = step
        d = EW.get(name)
        _need(op, d is not None, f"unknown activation step {name!r}")
        _need(op, len(values) == len(d.operands), f"activation step {name!r} takes operands {d.operands}, got {values}")
        _need(
            op,
            all(math.isfinite(float(v)) for v in values),
            f"activation step {name!r} has a non-finite operand {values}",
        )
        node = Node(name, ("x",), "y", {k: float(v) for k, v in zip(d.operands, values, strict=True)})
        (es,) = node_steps([node], ["x"])
        try:
            ok = step_result_dtype(es, "float32", ()) == "float32"
        except UnsupportedError:
            ok = False
        _need(op, ok, f"activation step {name!r} does not map float32 to float32")
        resolved.append(es)
    return tuple(resolved)


def recurrence_attrs(a: Mapping[str, Any]) -> RecurrenceAttrs:
    """The checked attributes of a ``recurrence`` node (see :class:`RecurrenceAttrs`); ``clip`` None or absent
    is no clip, else a positive threshold applied to the gates' pre-activations (an LSTM's cell state goes to
    its activation h unclipped, as onnxruntime computes it)."""
    op = "recurrence"
    cell = a.get("cell")
    _need(op, cell in RNN_CELLS, f"cell {cell!r} is not one of {RNN_CELLS}")
    directions = list(a.get("directions", ["forward"]))
    _need(op, 1 <= len(directions) <= 2 and all(d in RNN_DIRECTIONS for d in directions),
          f"directions {directions} must be one or two of {RNN_DIRECTIONS}")  # fmt: skip
    clip = a.get("clip")
    _need(op, clip is None or (math.isfinite(float(clip)) and float(clip) > 0), f"clip {clip} must be positive")
    acts = list(a.get("activations", ()))
    k = oracle.RNN_ACTIVATIONS[cell]
    _need(op, len(acts) == k * len(directions), f"a {cell} takes {k} activations per direction, got {len(acts)}")
    clip = None if clip is None else float(clip)
    return RecurrenceAttrs(
        cell,
        tuple(d == "reverse" for d in directions),
        tuple(activation_steps(op, act, None if cell == "lstm" and i % k == 2 else clip) for i, act in enumerate(acts)),
        bool(a.get("linear_before_reset", False)),
        bool(a.get("input_forget", False)),
    )


def recurrence_type(inputs: list[TensorType] | tuple[TensorType, ...], attrs: RecurrenceAttrs) -> TensorType:
    """The output type of a recurrence: (T + S, D, B, H) float32, S = 2 for the LSTM (Y, Y_h, Y_c) and 1
    otherwise, for inputs gates (T, B, D, G*H), R (D, G*H, H), Rb (D, G*H), int32 lengths (B,), the initial
    state h0 (D, B, H) and for the LSTM c0 (D, B, H) and the peepholes P (D, 3*H)."""
    op = "recurrence"
    cell = attrs.cell
    want = 7 if cell == "lstm" else 5
    _need(op, len(inputs) == want, f"a {cell} takes {want} inputs, got {len(inputs)}")
    gates, r, rb, lens, h0, *lstm = inputs
    _need(op, len(gates.shape) == 4, f"gates must be (T, B, D, G*H), got {gates.shape}")
    t_n, b_n, d_n, gh = gates.shape
    _need(op, d_n == len(attrs.reverse), f"gates have {d_n} directions, the node {len(attrs.reverse)}")
    _need(op, len(r.shape) == 3 and r.shape[0] == d_n, f"R must be (D={d_n}, G*H, H), got {r.shape}")
    n = r.shape[2]
    g = oracle.RNN_GATES[cell]
    _need(op, n >= 1 and r.shape[1] == gh == g * n, f"R {r.shape} and gates {gates.shape} need G*H = {g}*{n}")
    expect = {"Rb": (rb, (d_n, g * n)), "h0": (h0, (d_n, b_n, n))}
    if cell == "lstm":
        expect |= {"c0": (lstm[0], (d_n, b_n, n)), "P": (lstm[1], (d_n, 3 * n))}
    for name, (t, shape) in {"gates": (gates, gates.shape), "R": (r, r.shape), **expect}.items():
        _need(op, t.dtype == "float32", f"{name} must be float32, got {t.dtype}")
        _need(op, t.shape == shape, f"{name} must have shape {shape}, got {t.shape}")
    _need(op, lens.dtype == "int32" and lens.shape == (b_n,), f"lengths must be int32 ({b_n},), got {lens}")
    return TensorType((t_n + oracle.RNN_STATES[cell], d_n, b_n, n), "float32")


def _eval_recurrence(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    a = recurrence_attrs(node.attrs)
    return oracle.recurrence(
        a.cell, *args, reverse=a.reverse, activations=a.activations,
        linear_before_reset=a.linear_before_reset, input_forget=a.input_forget,
    )  # fmt: skip


@register("recurrence", OPAQUE, 5, 7, evaluate=_eval_recurrence, cpu=CpuKernel("make_recurrence"))
def _recurrence(node: Node, inputs: list[TensorType], params: Mapping[str, np.ndarray]) -> TensorType:
    """ONNX's RNN, GRU or LSTM after the input projection: see :func:`recurrence_type` and
    :func:`vdla.graph.oracle.recurrence`."""
    return recurrence_type(inputs, recurrence_attrs(node.attrs))


def _check_every_name_registered() -> None:
    """Every name of :mod:`vdla.graph.opnames` is an operator of :data:`OPS` (checked once, at import)."""
    unregistered = sorted(opnames.NAMES - OPS.keys())
    if unregistered:
        raise ValueError(f"vdla.graph.opnames names operators the registry does not define: {unregistered}")


_check_every_name_registered()
