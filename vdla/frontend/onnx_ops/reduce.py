"""Converters of reductions on any axes, ArgMax/ArgMin, the normalizations (Softmax, LogSoftmax, Hardmax,
Layer, RMS, Instance, Group, Lp, MeanVariance), CumSum, TopK and Trilu (no ``onnx`` import here).

Each ONNX operator becomes the registry's ``reduce``, ``softmax``/``log_softmax``/``hardmax``,
``layer_norm``/``rms_norm``, ``cumsum``, ``topk`` or ``trilu`` node, or a composition of those and elementwise
nodes with the ONNX function's float semantics (within float32 rounding: vdla accumulates in float64 and rounds
once). Axes, k and the like must be constants (vdla compiles for fixed shapes); int64 indices (ArgMax, TopK)
are held as int32 and can only be graph outputs (:class:`~vdla.frontend.builder.Value`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, size, unsupported
from vdla.frontend.onnx_ops.pool import global_pool
from vdla.frontend.onnx_ops.registry import FLOAT, attr, axis_of, converter

# ONNX reduction -> the kind of vdla's reduce, and the dtypes it runs on (uint8: max and min commute with the
# int8 encoding value - 128)
_REDUCTIONS = {
    "ReduceSum": ("sum", ("float32", "int32")),
    "ReduceMean": ("mean", FLOAT),
    "ReduceMax": ("max", ("float32", "int32", "int8", "uint8")),
    "ReduceMin": ("min", ("float32", "int32", "int8", "uint8")),
    "ReduceProd": ("prod", ("float32", "int32")),
    "ReduceL1": ("l1", FLOAT),
    "ReduceL2": ("l2", FLOAT),
    "ReduceLogSum": ("log_sum", FLOAT),
    "ReduceLogSumExp": ("log_sum_exp", FLOAT),
    "ReduceSumSquare": ("sum_square", FLOAT),
}
# stash_type values accepted: float32 and float64 statistics (vdla computes them in float64)
_STASH = {1: "float", 11: "double"}


def _reduce_axes(b: Builder, node: OnnxNode, rank: int) -> list[int] | None:
    """The node's reduced axes (attribute, or constant input 1 from opset 13/18 on), normalised; None for
    the empty or absent list, which ``noop_with_empty_axes`` decides on."""
    if "axes" in node.attrs:
        raw, where = [int(a) for a in node.attrs["axes"]], "axes"
    elif b.has(node, 1):
        raw, where = [int(a) for a in np.asarray(b.const(node, 1, "axes")).ravel()], None
    else:
        return None
    if not raw:
        return None
    axes = sorted({axis_of(node, a, rank, "axis", where) for a in raw})
    if len(axes) != len(raw):
        raise unsupported(node, f"repeated axes {raw}", where)
    return axes


@converter(*_REDUCTIONS, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def _reduce(b: Builder, node: OnnxNode) -> None:
    """One ``reduce`` node on any axes; a float mean or max over H and W of an NCHW tensor is the global pooling
    operator the quantized lowering and the accelerator know (``global_avg_pool`` / ``max_pool2d``)."""
    kind, dtypes = _REDUCTIONS[node.op_type]
    dt = b.require_dtype(node, 0, dtypes)
    rank = len(b.shape(node, 0))
    x = b.tensor(node, 0)
    axes = _reduce_axes(b, node, rank)
    if axes is None:
        # no axes: every axis, or with noop_with_empty_axes none (each element alone: ReduceL1 is |x|)
        axes = [] if int(attr(node, "noop_with_empty_axes", 0)) else list(range(rank))
        if not axes and kind in ("sum", "mean", "max", "min", "prod"):
            b.alias(node.outputs[0], x, uint8=dt == "uint8")
            return
    keep = bool(int(attr(node, "keepdims", 1)))
    if kind in ("mean", "max") and dt == "float32" and rank == 4 and axes == [2, 3]:
        y = global_pool(b, node, x, node.outputs[0] if keep else None, "avg" if kind == "mean" else "max")
        if not keep:
            b.reshape(node, y, b.type_of(x).shape[:2], out=node.outputs[0])
        return
    attrs = {"kind": kind, "axes": tuple(axes), "keepdims": keep}
    b.emit(node, "reduce", (x,), attrs, out=node.outputs[0], uint8=dt == "uint8")


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def _arg(b: Builder, node: OnnxNode) -> None:
    """The int32 index of the first (or last) extreme along one axis, held as the int64 ONNX output."""
    b.require_dtype(node, 0, ("float32", "int32", "int8", "uint8"))
    rank = len(b.shape(node, 0))
    if rank == 0:
        raise unsupported(node, f"{node.op_type} of a scalar")
    axis = axis_of(node, int(attr(node, "axis", 0)), rank)
    attrs = {
        "kind": node.op_type.lower(),
        "axes": (axis,),
        "keepdims": bool(int(attr(node, "keepdims", 1))),
        "select_last_index": bool(int(attr(node, "select_last_index", 0))),
    }
    b.emit(node, "reduce", (b.tensor(node, 0),), attrs, out=node.outputs[0], int64=True)


# ---------------------------------------------------------------------------------------------------------
# Normalizations


def _stash(node: OnnxNode) -> None:
    stash = int(attr(node, "stash_type", 1))
    if stash not in _STASH:
        raise unsupported(node, "statistics are computed in float32 or float64 (stash_type 1 or 11)", "stash_type")


def _affine(b: Builder, node: OnnxNode, indices: Sequence[int], shape: tuple[int, ...] | None = None) -> list[str]:
    """The float32 scale/bias inputs at ``indices`` (leading ones, up to the first absent), reshaped to
    ``shape`` when given."""
    out: list[str] = []
    for i in indices:
        if not b.has(node, i):
            break
        b.require_dtype(node, i, FLOAT)
        t = b.tensor(node, i)
        out.append(t if shape is None else b.reshape(node, t, shape))
    return out


def _normalized_axis(b: Builder, node: OnnxNode) -> tuple[int, int]:
    b.require_dtype(node, 0, FLOAT)
    rank = len(b.shape(node, 0))
    if rank == 0:
        raise unsupported(node, f"{node.op_type} of a scalar")
    return axis_of(node, int(attr(node, "axis", -1)), rank), rank


def _epsilon(node: OnnxNode, default: float = 1e-5) -> float:
    eps = float(attr(node, "epsilon", default))
    if not (np.isfinite(eps) and eps >= 0):
        raise unsupported(node, "epsilon must be finite and non-negative", "epsilon")
    return eps


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(b: Builder, node: OnnxNode) -> None:
    """``layer_norm``; the optional Mean and InvStdDev outputs, where read, as the ONNX function computes
    them (a mean, the mean of squared deviations, ``1 / sqrt(var + epsilon)``)."""
    axis, rank = _normalized_axis(b, node)
    _stash(node)
    eps = _epsilon(node)
    x = b.tensor(node, 0)
    affine = _affine(b, node, (1, 2))
    if not affine:
        raise unsupported(node, "the Scale input is required")
    b.emit(node, "layer_norm", (x, *affine), {"axis": axis, "epsilon": eps}, out=node.outputs[0])
    mean_out, inv_out = (o if o in b.used else None for o in (*node.outputs[1:3], "", "")[:2])
    if mean_out is None and inv_out is None:
        return
    axes = {"kind": "mean", "axes": tuple(range(axis, rank)), "keepdims": True}
    mean = b.emit(node, "reduce", (x,), axes, out=mean_out, suffix="mean")
    if inv_out is None:
        return
    d = b.emit(node, "sub", (x, mean), suffix="deviation")
    var = b.emit(node, "reduce", (b.emit(node, "mul", (d, d), suffix="square"),), axes, suffix="variance")
    std = b.emit(node, "sqrt", (b.emit(node, "add", (var,), {"b": eps}, suffix="var_eps"),), suffix="std")
    one = b.add_param(f"{node.outputs[0]}:one", np.ones((1,) * rank, np.float32))
    b.emit(node, "div", (one, std), out=inv_out)


@converter("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def _rms_norm(b: Builder, node: OnnxNode) -> None:
    axis, _ = _normalized_axis(b, node)
    _stash(node)
    attrs = {"axis": axis, "epsilon": _epsilon(node)}
    b.emit(node, "rms_norm", (b.tensor(node, 0), *_affine(b, node, (1,))), attrs, out=node.outputs[0])


def _channels_first(b: Builder, node: OnnxNode) -> tuple[int, ...]:
    xs = b.shape(node, 0)
    if len(xs) < 3:
        raise unsupported(node, f"needs an (N, C, D1, ...) input, got shape {xs}")
    return xs


@converter("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(b: Builder, node: OnnxNode) -> None:
    """``layer_norm`` over the spatial axes, the per-channel scale and bias shaped (C, 1, ...)."""
    b.require_dtype(node, 0, FLOAT)
    xs = _channels_first(b, node)
    per_channel = (xs[1],) + (1,) * (len(xs) - 2)
    affine = _affine(b, node, (1, 2), per_channel)
    attrs = {"axis": 2, "epsilon": _epsilon(node)}
    b.emit(node, "layer_norm", (b.tensor(node, 0), *affine), attrs, out=node.outputs[0])


@converter("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def _group_norm(b: Builder, node: OnnxNode) -> None:
    """``layer_norm`` of the (N, G, C/G, D) view over its last two axes; the scale and bias per channel
    (opset 21) or per group (opset 18's form) shaped to broadcast over that view."""
    b.require_dtype(node, 0, FLOAT)
    xs = _channels_first(b, node)
    _stash(node)
    n, c = xs[:2]
    groups = int(attr(node, "num_groups", 0))
    if groups < 1 or c % groups:
        raise unsupported(node, f"num_groups must divide the {c} channels", "num_groups")
    sizes = {size(b.shape(node, i)) for i in (1, 2) if b.has(node, i)}
    if not sizes <= {c, groups} or len(sizes) > 1:
        raise unsupported(node, f"scale and bias must both hold {c} (per channel) or {groups} (per group) values")
    per_group = sizes == {groups} and groups != c
    affine = _affine(b, node, (1, 2), (groups, 1, 1) if per_group else (groups, c // groups, 1))
    view = b.reshape(node, b.tensor(node, 0), (n, groups, c // groups, size(xs[2:])))
    y = b.emit(node, "layer_norm", (view, *affine), {"axis": 2, "epsilon": _epsilon(node)}, suffix="group_norm")
    b.reshape(node, y, xs, out=node.outputs[0])


@converter("LpNormalization", attrs=("axis", "p"))
def _lp_norm(b: Builder, node: OnnxNode) -> None:
    """``x / norm(x)`` along the axis (the L1 or L2 norm, a ``reduce``), 0 where the norm is 0 (as ONNX's
    reference and onnxruntime): the norm is raised to the smallest positive float32 first, which changes
    nothing else (a non-zero norm is at least that), and a zero norm means the slice is all zeros."""
    axis, _ = _normalized_axis(b, node)
    p = int(attr(node, "p", 2))
    if p not in (1, 2):
        raise unsupported(node, "only the L1 and L2 norms (p=1, p=2) are defined", "p")
    x = b.tensor(node, 0)
    norm = b.emit(node, "reduce", (x,), {"kind": f"l{p}", "axes": (axis,), "keepdims": True}, suffix="norm")
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    safe = b.emit(node, "max", (norm,), {"b": tiny}, suffix="nonzero_norm")
    b.emit(node, "div", (x, safe), out=node.outputs[0])


@converter("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(b: Builder, node: OnnxNode) -> None:
    """Local response normalization across channels: ``x / (bias + alpha / size * s) ** beta``, ``s`` the sum
    of the squares over the ``size`` channels around each one (``(size - 1) // 2`` before, the rest after,
    zeros beyond the edges): the squares padded along the channels, ``size`` slices of them summed in order."""
    b.require_dtype(node, 0, FLOAT)
    xs = b.shape(node, 0)
    if len(xs) < 3:
        raise unsupported(node, f"needs an (N, C, D1, ...) input, got shape {xs}")
    n = int(attr(node, "size", 0))
    if n < 1:
        raise unsupported(node, "size must be a positive channel count", "size")
    alpha, beta, bias = (float(attr(node, k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    if not np.all(np.isfinite((alpha, beta, bias))):
        raise unsupported(node, "alpha, beta and bias must be finite")
    x = b.tensor(node, 0)
    squares = b.emit(node, "mul", (x, x), suffix="square")
    before, after = (n - 1) // 2, n - 1 - (n - 1) // 2
    pads = tuple((before, after) if a == 1 else (0, 0) for a in range(len(xs)))
    padded = b.emit(node, "pad", (squares,), {"pads": pads, "value": 0.0}, suffix="padded") if n > 1 else squares
    total = None
    for j in range(n):
        starts, stops = [0] * len(xs), list(xs)
        starts[1], stops[1] = j, j + xs[1]
        attrs = {"starts": tuple(starts), "stops": tuple(stops), "steps": (1,) * len(xs)}
        part = b.emit(node, "slice", (padded,), attrs, suffix="window") if n > 1 else padded
        total = part if total is None else b.emit(node, "add", (total, part), suffix="window_sum")
    assert total is not None
    base = b.emit(node, "add", (b.emit(node, "mul", (total,), {"b": alpha / n}, suffix="scaled"),), {"b": bias},
                  suffix="base")  # fmt: skip
    b.emit(node, "div", (x, b.emit(node, "pow", (base,), {"y": beta}, suffix="denominator")), out=node.outputs[0])


@converter("MeanVarianceNormalization", attrs=("axes",))
def _mvn(b: Builder, node: OnnxNode) -> None:
    """The ONNX function: ``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`` over the axes (default 0, 2, 3)."""
    b.require_dtype(node, 0, FLOAT)
    rank = len(b.shape(node, 0))
    raw = [int(a) for a in attr(node, "axes", [0, 2, 3])]
    axes = tuple(sorted({axis_of(node, a, rank, "axis", "axes") for a in raw}))
    x = b.tensor(node, 0)
    mean_of = {"kind": "mean", "axes": axes, "keepdims": True}
    mean = b.emit(node, "reduce", (x,), mean_of, suffix="mean")
    mean_sq = b.emit(node, "reduce", (b.emit(node, "mul", (x, x), suffix="square"),), mean_of, suffix="mean_square")
    var = b.emit(node, "sub", (mean_sq, b.emit(node, "mul", (mean, mean), suffix="squared_mean")), suffix="variance")
    std = b.emit(node, "add", (b.emit(node, "sqrt", (var,), suffix="std"),), {"b": 1e-9}, suffix="std_eps")
    b.emit(node, "div", (b.emit(node, "sub", (x, mean), suffix="centered"), std), out=node.outputs[0])


@converter("Softmax", "LogSoftmax", "Hardmax", attrs=("axis",))
def _softmax(b: Builder, node: OnnxNode) -> None:
    """Along one axis (opset 13 on); before opset 13, per row of the input coerced to 2-D at the axis."""
    op = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Hardmax": "hardmax"}[node.op_type]
    b.require_dtype(node, 0, FLOAT)
    xs = b.shape(node, 0)
    rank = len(xs)
    if rank == 0:
        raise unsupported(node, f"{op} of a scalar")
    x = b.tensor(node, 0)
    if node.opset >= 13:
        axis = axis_of(node, int(attr(node, "axis", -1)), rank)
        b.emit(node, op, (x,), {"axis": axis}, out=node.outputs[0])
        return
    # opset < 13: the input is coerced to 2-D (prod(shape[:axis]), prod(shape[axis:])) and normalized per row
    axis = int(attr(node, "axis", 1))
    if not -rank <= axis <= rank:
        raise unsupported(node, f"axis out of range for rank {rank}", "axis")
    axis %= rank + 1 if axis >= 0 else rank
    if axis == rank - 1:
        b.emit(node, op, (x,), {"axis": -1}, out=node.outputs[0])
        return
    x2 = b.reshape(node, x, (size(xs[:axis]), size(xs[axis:])))
    y = b.emit(node, op, (x2,), {"axis": -1}, suffix=op)
    b.reshape(node, y, xs, out=node.outputs[0])


# ---------------------------------------------------------------------------------------------------------
# Scans and selections


def _const_int(b: Builder, node: OnnxNode, i: int, what: str) -> int:
    v = np.asarray(b.const(node, i, what))
    if v.size != 1 or v.dtype.kind not in "iu":
        raise unsupported(node, f"{what} must be one integer, got {v.dtype.name} of shape {v.shape}")
    return int(v.reshape(()))


@converter("CumSum", "CumProd", attrs=("exclusive", "reverse"))
def _cumsum(b: Builder, node: OnnxNode) -> None:
    """vdla ``cumsum`` along the constant axis; CumProd (opset 26) is its ``product`` form."""
    b.require_dtype(node, 0, ("float32", "int32"))
    rank = len(b.shape(node, 0))
    if rank == 0:
        raise unsupported(node, f"{node.op_type} of a scalar")
    axis = axis_of(node, _const_int(b, node, 1, "axis"), rank, "axis", None)
    attrs = {"axis": axis, **{k: bool(int(attr(node, k, 0))) for k in ("exclusive", "reverse")}}
    if node.op_type == "CumProd":
        attrs["product"] = True
    b.emit(node, "cumsum", (b.tensor(node, 0),), attrs, out=node.outputs[0])


@converter("TopK", attrs=("axis", "k", "largest", "sorted"))
def _topk(b: Builder, node: OnnxNode) -> None:
    """One ``topk`` node per output read: the values (uint8 too: the order commutes with its encoding; int64
    held as int32) and the indices (held int64). ``sorted=0`` leaves the order unspecified: vdla's sorted
    order is one."""
    dt = b.require_dtype(node, 0, ("float32", "int32", "int8", "uint8", "int64"))
    xs = b.shape(node, 0)
    if not xs:
        raise unsupported(node, "TopK of a scalar")
    axis = axis_of(node, int(attr(node, "axis", -1)), len(xs))
    k = int(attr(node, "k")) if "k" in node.attrs else _const_int(b, node, 1, "K")
    if not 1 <= k <= xs[axis]:
        where = "k" if "k" in node.attrs else None
        raise unsupported(node, f"k={k} must lie in [1, {xs[axis]}] (vdla has no empty tensors)", where)
    x = b.tensor(node, 0)
    base = {"k": k, "axis": axis, "largest": bool(int(attr(node, "largest", 1)))}
    for i, out in enumerate(node.outputs[:2]):
        if out and (out in b.used or i == 0):
            attrs = {**base, "indices": i == 1}
            values = i == 0
            int64 = not values or dt == "int64"
            b.emit(node, "topk", (x,), attrs, out=out, suffix="topk", uint8=values and dt == "uint8", int64=int64)


@converter("Trilu", attrs=("upper",))
def _trilu(b: Builder, node: OnnxNode) -> None:
    """vdla ``trilu``; an int64 tensor (held as int32) too: the operator only zeroes elements."""
    dt = b.require_dtype(node, 0, ("float32", "int32", "int8", "int64"))
    if len(b.shape(node, 0)) < 2:
        raise unsupported(node, f"needs a tensor of rank 2 or more, got shape {b.shape(node, 0)}")
    k = _const_int(b, node, 1, "k") if b.has(node, 1) else 0
    attrs = {"upper": bool(int(attr(node, "upper", 1))), "k": k}
    b.emit(node, "trilu", (b.tensor(node, 0),), attrs, out=node.outputs[0], int64=dt == "int64")


# ---------------------------------------------------------------------------------------------------------
# Losses (forward)


def _loss(b: Builder, node: OnnxNode, log_prob: str, quirk: bool) -> None:
    """The per-element ``nll_loss`` of ``log_prob`` at the node's targets (input 1: a constant, checked here,
    or a tensor computed or fed at run time), then the reduction: none, sum, or the mean weighted by the
    targets' class weights (1 each without ``weight``; ignored targets left out).
    ``quirk``: NegativeLogLikelihoodLoss's reference averages over every element when ignore_index is -1
    and no weight is given, where its other forms leave ignored elements out; that ambiguous case is refused
    (for run-time targets whenever it can arise). A target outside the classes, and not ignore_index, gives a
    NaN loss (ONNX leaves it undefined)."""
    xs = b.type_of(log_prob).shape
    if len(xs) < 2:
        raise unsupported(node, f"needs an (N, C, ...) input, got shape {xs}")
    reduction = str(attr(node, "reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise unsupported(node, "reduction must be none, sum or mean", "reduction")
    want = (xs[0], *xs[2:])
    ignore = attr(node, "ignore_index")
    weight = b.tensor(node, 2) if b.has(node, 2) else None
    if weight is not None:
        b.require_dtype(node, 2, FLOAT)
    ambiguous = quirk and weight is None and ignore is not None and int(ignore) == -1 and reduction == "mean"
    if b.is_const(node, 1):
        target = np.asarray(b.const(node, 1, "target"))
        if target.dtype.kind not in "iu" or target.shape != want:
            raise unsupported(node, f"target must hold integers of shape {want}, got {target.shape}")
        ignored = target == int(ignore) if ignore is not None else np.zeros(target.shape, bool)
        if np.any(~ignored & ((target < 0) | (target >= xs[1]))):
            raise unsupported(node, f"target classes outside [0, {xs[1]}) (and not ignore_index)")
        ambiguous = ambiguous and bool(ignored.any())
        t = b.add_param(f"{node.input(1)}:int32", target.astype(np.int32))
    else:
        b.require_dtype(node, 1, ("int32", "int64"))
        if b.shape(node, 1) != want:
            raise unsupported(node, f"target must have shape {want}, got {b.shape(node, 1)}")
        t = b.tensor(node, 1)
    if ambiguous:
        raise unsupported(node, "mean with ignored targets and no weight: the reference counts them", "ignore_index")
    attrs = {"ignore_index": None if ignore is None else int(ignore)}
    out = node.outputs[0]
    inputs = (log_prob, t, *([weight] if weight is not None else []))
    if reduction == "none":
        b.emit(node, "nll_loss", inputs, attrs, out=out)
        return
    losses = b.emit(node, "nll_loss", inputs, attrs, suffix="losses")
    every = {"kind": "sum", "axes": tuple(range(len(xs) - 1)), "keepdims": False}
    total = b.emit(node, "reduce", (losses,), every, out=out if reduction == "sum" else None, suffix="sum")
    if reduction == "sum":
        return
    # the mean's divisor, the targets' weights' sum, is the loss of -1s (0 / 0 is NaN, as the reference's
    # mean of no element)
    minus_one = b.add_param(f"{out}:minus_one", np.full(xs, -1, np.float32))
    weights = b.emit(node, "nll_loss", (minus_one, *inputs[1:]), attrs, suffix="target_weights")
    b.emit(node, "div", (total, b.emit(node, "reduce", (weights,), every, suffix="weight_sum")), out=out)


@converter("NegativeLogLikelihoodLoss", attrs=("ignore_index", "reduction"))
def _nll(b: Builder, node: OnnxNode) -> None:
    b.require_dtype(node, 0, FLOAT)
    _loss(b, node, b.tensor(node, 0), quirk=True)


@converter("SoftmaxCrossEntropyLoss", attrs=("ignore_index", "reduction"))
def _softmax_cross_entropy(b: Builder, node: OnnxNode) -> None:
    """``log_softmax`` over the classes (axis 1; the optional log_prob output), then the loss."""
    b.require_dtype(node, 0, FLOAT)
    if len(b.shape(node, 0)) < 2:
        raise unsupported(node, f"needs an (N, C, ...) input, got shape {b.shape(node, 0)}")
    wants_log_prob = len(node.outputs) > 1 and node.outputs[1] in b.used
    out = node.outputs[1] if wants_log_prob else None
    log_prob = b.emit(node, "log_softmax", (b.tensor(node, 0),), {"axis": 1}, out=out, suffix="log_prob")
    _loss(b, node, log_prob, quirk=False)
