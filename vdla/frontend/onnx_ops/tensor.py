"""Shape, layout and indexing converters (no ``onnx`` import here): the views and copies (Identity, Dropout,
Flatten, Reshape, Squeeze, Unsqueeze, Transpose, Concat, Slice, Split), the shapes and constants (Shape, Size,
Constant; ConstantOfShape and Range when folded), and Pad (every mode), Tile, Expand, Gather, Compress,
CenterCropPad, DepthToSpace, SpaceToDepth, GatherElements, GatherND, ReverseSequence, OneHot, ScatterElements,
Scatter and ScatterND, TensorScatter, Col2Im, Resize, GridSample, AffineGrid, DeformConv and RoiAlign.

A view or copy is vdla's ``reshape``, ``transpose``, ``concat`` or ``slice``, or an alias of its input where
it moves nothing; a uint8 input stays held as int8 ``value - 128`` through it. Shape, Size and Constant bind
constants at import time; ConstantOfShape and Range are imported only when their inputs are constants (the
importer evaluates them).

vdla compiles for fixed shapes, so every index the indexing operators read (but OneHot's and Gather's) is a
constant known at import time (an initializer, or a value folded from constants): it is normalised (negative
indices counted from the end) and checked here, and an index a node computes at run time is refused. The
mapping onto vdla's operators:

* whatever gathers along each axis independently (padding by edge, reflection or wrap, cropping,
  tiling, broadcasting, a gather along one axis, compressing) is one ``take``: a table of input
  indices per axis, ``-1`` reading the fill value;
* whatever gathers element by element (GatherElements, GatherND, ReverseSequence) is one ``gather`` of
  constant flat offsets (an int32 parameter shaped like the output); a Gather, GatherElements or GatherND of
  indices computed at run time (token ids, a loss's targets) is one ``gather`` of offsets computed from them;
  OneHot is vdla ``one_hot``, whose indices may be computed at run time;
* the scatters are one ``scatter`` of flat offsets (one per update element, in the order ONNX applies them)
  with their reduction: constant offsets, or offsets computed from indices known at run time;
* DepthToSpace and SpaceToDepth are a reshape, a transpose and a reshape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, size, unsupported
from vdla.frontend.onnx_ops.registry import ANY, FLOAT, attr, axis_of, converter, ints
from vdla.graph.types import INT_RANGE

SCATTER_TYPES = ("float32", "int32")
PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _ints(b: Builder, node: OnnxNode, i: int, what: str) -> np.ndarray:
    """Constant input ``i`` as int64 (refused when computed at run time)."""
    v = b.const(node, i, what)
    if v is None:
        raise unsupported(node, f"needs the {what} input")
    return np.asarray(v).astype(np.int64)


def _indices(node: OnnxNode, idx: np.ndarray, n: int, what: str = "indices") -> np.ndarray:
    """Indices into an axis of size ``n``, negative ones counted from the end; any outside is refused."""
    if np.any((idx < -n) | (idx >= n)):
        bad = idx[(idx < -n) | (idx >= n)].ravel()[:4].tolist()
        raise unsupported(node, f"{what} {bad} lie outside an axis of size {n}")
    return np.where(idx < 0, idx + n, idx)


def _take(b: Builder, node: OnnxNode, x: str, tables: Sequence[Sequence[int] | None], value=0,
          out: str | None = None, uint8: bool = False, fill: str | None = None) -> str:  # fmt: skip
    """Emit ``take`` (or an alias when every table keeps its axis whole and in order); ``fill``: a value
    computed at run time that -1 entries read instead of ``value``."""
    xs = b.type_of(x).shape
    whole = [None if t is not None and list(t) == list(range(d)) else t for d, t in zip(xs, tables, strict=True)]
    if all(t is None for t in whole):
        if out is not None:
            b.alias(out, x, uint8=uint8)
        return x
    index = tuple(None if t is None else tuple(int(i) for i in t) for t in whole)
    inputs = (x,) if fill is None else (x, fill)
    return b.emit(node, "take", inputs, {"index": index, "value": value}, out=out, suffix="take", uint8=uint8)


def _gather_offsets(b: Builder, node: OnnxNode, x: str, offsets: np.ndarray, uint8: bool) -> None:
    """Emit ``gather`` of constant flat ``offsets`` into ``x`` (an int32 parameter; a scalar result is the
    one-element gather reshaped)."""
    offsets = np.asarray(offsets)
    name = b.add_param(f"{node.outputs[0]}:offsets", offsets.astype(np.int32).reshape(offsets.shape or (1,)))
    if offsets.ndim:
        b.emit(node, "gather", (x, name), out=node.outputs[0], uint8=uint8)
        return
    y = b.emit(node, "gather", (x, name), suffix="gather", uint8=uint8)
    b.reshape(node, y, (), out=node.outputs[0], uint8=uint8)


def _fill(node: OnnxNode, dt: str, value, infinite: bool = False) -> int | float:
    """A fill value of ONNX dtype ``dt`` as vdla holds it (uint8 as int8 ``value - 128``); ``infinite``: a
    float32 fill may be an infinity (a pad copies it, exactly), never NaN."""
    if dt == "float32":
        v = float(value)
        if math.isnan(v) or (math.isinf(v) and not infinite):
            raise unsupported(node, f"the fill value {v} must be {'a number' if infinite else 'finite'}")
        return v
    v = int(value) - (128 if dt == "uint8" else 0)
    lo, hi = INT_RANGE["int32" if dt == "int32" else "int8"]
    if not lo <= v <= hi:
        raise unsupported(node, f"the fill value {value} does not fit {dt}")
    return v


# ---------------------------------------------------------------------------------------------------------
# Views and copies: identities, reshapes, transposes, concatenations, slices


@converter("Identity")
def _identity(b: Builder, node: OnnxNode) -> None:
    v = b.value(node, 0)
    b.alias(node.outputs[0], b.tensor(node, 0), uint8=v.uint8)


@converter("Dropout", attrs=("seed",))
def _dropout(b: Builder, node: OnnxNode) -> None:
    """The identity (the mask all true): at inference, and in training mode with a ratio of 0 (no element
    dropped); other training-mode ratios drop random elements and are refused."""
    training = b.const(node, 2, "training_mode")
    if training is not None and bool(np.asarray(training).reshape(())):
        ratio = b.const(node, 1, "ratio") if b.has(node, 1) else None
        if ratio is None or float(np.asarray(ratio).reshape(())) != 0.0:
            raise unsupported(node, "training_mode=True with a ratio above 0: vdla drops no random elements "
                              "(it runs inference, where Dropout is the identity)")  # fmt: skip
    v = b.value(node, 0)
    b.alias(node.outputs[0], b.tensor(node, 0), uint8=v.uint8)
    if len(node.outputs) > 1 and node.outputs[1]:
        b.bind_const(node.outputs[1], np.ones(v.shape, bool))


def _reshape_to(b: Builder, node: OnnxNode, shape: Sequence[int]) -> None:
    v = b.value(node, 0)
    if any(int(d) < 1 for d in shape):
        raise unsupported(node, f"the result shape {tuple(shape)} is empty")
    b.reshape(node, b.tensor(node, 0), shape, out=node.outputs[0], uint8=v.uint8)


@converter("Flatten", attrs=("axis",))
def _flatten(b: Builder, node: OnnxNode) -> None:
    xs = b.shape(node, 0)
    axis = int(attr(node, "axis", 1))
    if not -len(xs) <= axis <= len(xs):
        raise unsupported(node, f"axis out of range for rank {len(xs)}", "axis")
    axis %= len(xs) + 1 if axis >= 0 else len(xs)
    _reshape_to(b, node, (size(xs[:axis]), size(xs[axis:])))


@converter("Reshape", attrs=("allowzero",))
def _reshape(b: Builder, node: OnnxNode) -> None:
    xs = b.shape(node, 0)
    target = [int(d) for d in np.asarray(b.const(node, 1, "shape")).ravel()]
    allowzero = int(attr(node, "allowzero", 0))
    if allowzero and 0 in target:
        raise unsupported(node, f"allowzero=1 with a 0 in shape {target} makes an empty tensor", "allowzero")
    if any(d == 0 and i >= len(xs) for i, d in enumerate(target)):
        raise unsupported(node, f"target shape {target} copies (0) a dimension the input {xs} does not have")
    out = [xs[i] if d == 0 else d for i, d in enumerate(target)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise unsupported(node, f"bad target shape {target} for input {xs}")
    if -1 in out:
        known = size(d for d in out if d != -1)
        if known == 0 or size(xs) % known:
            raise unsupported(node, f"cannot reshape {xs} to {target}")
        out[out.index(-1)] = size(xs) // known
    if size(out) != size(xs):
        raise unsupported(node, f"cannot reshape {xs} ({size(xs)} elements) to {target}")
    _reshape_to(b, node, out)


def _axes(b: Builder, node: OnnxNode) -> list[int] | None:
    """The axes input (None when absent, which differs from an empty one)."""
    return _ints(b, node, 1, "axes").ravel().tolist() if b.has(node, 1) else None


@converter("Squeeze")
def _squeeze(b: Builder, node: OnnxNode) -> None:
    xs = b.shape(node, 0)
    axes = _axes(b, node)
    if axes is None:
        drop = {i for i, d in enumerate(xs) if d == 1}
    else:
        drop = {axis_of(node, a, len(xs), "axis", None) for a in axes}
        if any(xs[i] != 1 for i in drop):
            raise unsupported(node, f"cannot squeeze axes {sorted(drop)} of shape {xs}: not all of size 1")
    _reshape_to(b, node, [d for i, d in enumerate(xs) if i not in drop])


@converter("Unsqueeze")
def _unsqueeze(b: Builder, node: OnnxNode) -> None:
    xs = b.shape(node, 0)
    axes = _axes(b, node)
    if axes is None:
        raise unsupported(node, "Unsqueeze needs axes")
    rank = len(xs) + len(axes)
    norm = {axis_of(node, a, rank, "axis", None) for a in axes}
    if len(norm) != len(axes):
        raise unsupported(node, f"repeated axes {axes}")
    it = iter(xs)
    _reshape_to(b, node, [1 if i in norm else next(it) for i in range(rank)])


@converter("Transpose", attrs=("perm",))
def _transpose(b: Builder, node: OnnxNode) -> None:
    v = b.value(node, 0)
    rank = len(v.shape)
    perm = ints(node, "perm", list(range(rank))[::-1])
    if sorted(perm) != list(range(rank)):
        raise unsupported(node, f"not a permutation of {rank} axes", "perm")
    x = b.tensor(node, 0)
    if perm == list(range(rank)):
        b.alias(node.outputs[0], x, uint8=v.uint8)
        return
    b.emit(node, "transpose", (x,), {"perm": tuple(perm)}, out=node.outputs[0], uint8=v.uint8)


@converter("Concat", attrs=("axis",))
def _concat(b: Builder, node: OnnxNode) -> None:
    present = [i for i in range(len(node.inputs)) if b.has(node, i)]
    dtypes = {b.dtype(node, i) for i in present}
    if len(dtypes) != 1 or not dtypes <= set(ANY):
        raise unsupported(node, f"input dtypes {sorted(dtypes)}: vdla concatenates float32, int8, int32 or uint8")
    rank = len(b.shape(node, present[0]))
    axis = axis_of(node, int(attr(node, "axis", 0)), rank)
    uint8 = dtypes == {"uint8"}
    inputs = [b.tensor(node, i) for i in present if size(b.shape(node, i)) > 0]
    if len(inputs) == 1:
        b.alias(node.outputs[0], inputs[0], uint8=uint8)
        return
    b.emit(node, "concat", inputs, {"axis": axis}, out=node.outputs[0], uint8=uint8)


def _const_ints(b: Builder, node: OnnxNode, i: int, what: str) -> list[int] | None:
    """The integers of constant input ``i`` (None when absent or empty)."""
    return (_ints(b, node, i, what).ravel().tolist() or None) if b.has(node, i) else None


def _slice_onnx(b: Builder, node: OnnxNode, x: str, starts: dict[int, int], out: str, ends: dict[int, int],
                steps: dict[int, int], uint8: bool) -> None:  # fmt: skip
    """Emit vdla ``slice`` for ONNX-style per-axis bounds (negative counted from the end, then clamped as
    ONNX Slice clamps); axes not given are kept whole."""
    xs = b.type_of(x).shape
    full = ([0] * len(xs), list(xs), [1] * len(xs))
    for axis, step in steps.items():
        d = xs[axis]
        lo, hi = (0, d) if step > 0 else (0, d - 1)
        start = starts[axis] + d if starts[axis] < 0 else starts[axis]
        end = ends[axis] + d if ends[axis] < 0 else ends[axis]
        full[0][axis] = min(max(start, lo), hi)
        full[1][axis] = min(max(end, lo if step > 0 else -1), hi)
        full[2][axis] = step
        if not range(full[0][axis], full[1][axis], step):
            raise unsupported(node, f"the slice of axis {axis} (size {d}) is empty: vdla has no empty tensors")
    if full == ([0] * len(xs), list(xs), [1] * len(xs)):
        b.alias(out, x, uint8=uint8)
        return
    b.emit(node, "slice", (x,), {"starts": full[0], "stops": full[1], "steps": full[2]}, out=out, uint8=uint8)


@converter("Slice")
def _slice(b: Builder, node: OnnxNode) -> None:
    dt = b.require_dtype(node, 0, ANY)
    rank = len(b.shape(node, 0))
    starts = _const_ints(b, node, 1, "starts") or []
    ends = _const_ints(b, node, 2, "ends") or []
    axes = _const_ints(b, node, 3, "axes")
    axes = list(range(len(starts))) if axes is None else [axis_of(node, a, rank, "axis", None) for a in axes]
    steps = _const_ints(b, node, 4, "steps") or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        raise unsupported(node, f"starts {starts}, ends {ends}, axes {axes}, steps {steps}: one of each per axis")
    if 0 in steps:
        raise unsupported(node, f"steps {steps}: a step of 0")
    _slice_onnx(
        b, node, b.tensor(node, 0), dict(zip(axes, starts, strict=True)), node.outputs[0],
        dict(zip(axes, ends, strict=True)), dict(zip(axes, steps, strict=True)), dt == "uint8",
    )  # fmt: skip


def _split_sizes(b: Builder, node: OnnxNode, d: int) -> list[int]:
    """The part sizes of a Split along an axis of size ``d``: given (the split input), else equal parts
    (opset 18's num_outputs: the last part smaller when ``d`` does not divide)."""
    given = _const_ints(b, node, 1, "split")
    n = len(node.outputs)
    if given is not None:
        parts = given
    elif "num_outputs" in node.attrs:
        n = int(node.attrs["num_outputs"])
        chunk = -(-d // max(n, 1))
        parts = [min(chunk, max(d - k * chunk, 0)) for k in range(n)]
    elif d % n:
        raise unsupported(node, f"an axis of size {d} does not split into {n} equal parts")
    else:
        parts = [d // n] * n
    if len(parts) != len(node.outputs) or sum(parts) != d or any(p < 0 for p in parts):
        raise unsupported(node, f"parts {parts} do not split an axis of size {d} into {len(node.outputs)} outputs")
    return parts


@converter("Split", attrs=("axis", "num_outputs"))
def _split(b: Builder, node: OnnxNode) -> None:
    """Each output is a slice of the input along the axis; an empty part is an empty constant (it holds no
    value: Concat leaves it out; as a kernel's input or a graph output it is refused, named)."""
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    axis = axis_of(node, int(attr(node, "axis", 0)), len(xs))
    parts = _split_sizes(b, node, xs[axis])
    x = b.tensor(node, 0)
    offset = 0
    for part, out in zip(parts, node.outputs, strict=True):
        if out and part == 0:
            b.bind_const(out, np.zeros((*xs[:axis], 0, *xs[axis + 1 :]), np.dtype(dt)))
        elif out:
            _slice_onnx(b, node, x, {axis: offset}, out, {axis: offset + part}, {axis: 1}, dt == "uint8")
        offset += part


# ---------------------------------------------------------------------------------------------------------
# Shapes and constants (bound at import time)


@converter("Shape", attrs=("start", "end"))
def _shape(b: Builder, node: OnnxNode) -> None:
    xs = b.shape(node, 0)
    start, end = int(attr(node, "start", 0)), attr(node, "end")
    b.bind_const(node.outputs[0], np.array(xs[start : None if end is None else int(end)], np.int64))


@converter("Size")
def _size(b: Builder, node: OnnxNode) -> None:
    b.bind_const(node.outputs[0], np.array(size(b.shape(node, 0)), np.int64))


@converter("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                              "value_strings", "sparse_value"))  # fmt: skip
def _constant(b: Builder, node: OnnxNode) -> None:
    a = node.attrs
    if "value" in a:
        v = np.asarray(a["value"])
    elif "value_float" in a:
        v = np.array(a["value_float"], np.float32)
    elif "value_floats" in a:
        v = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        v = np.array(a["value_int"], np.int64)
    elif "value_ints" in a:
        v = np.array(a["value_ints"], np.int64)
    else:
        raise unsupported(node, "only tensor, float and int constants are supported", next(iter(a), None))
    b.bind_const(node.outputs[0], v)


@converter("ConstantOfShape", "Range", attrs=("value",))
def _fold_only(b: Builder, node: OnnxNode) -> None:
    """Operators vdla imports only when their inputs are constants (the importer evaluates those)."""
    raise unsupported(node, "needs constant inputs (vdla compiles for fixed shapes)")


@converter("EyeLike", attrs=("dtype", "k"))
def _eye_like(b: Builder, node: OnnxNode) -> None:
    """Ones on the ``k``-th diagonal of a 2-D tensor of the input's shape: a constant (only the input's shape is
    read), of the ``dtype`` attribute's type or else the input's."""
    xs = b.shape(node, 0)
    if len(xs) != 2:
        raise unsupported(node, f"needs a 2-D input, got shape {xs}")
    dt = str(attr(node, "dtype", b.dtype(node, 0)))
    try:
        dtype = np.dtype(dt)
    except TypeError as e:
        raise unsupported(node, f"dtype {dt} is not a numpy type", "dtype") from e
    b.bind_const(node.outputs[0], np.eye(xs[0], xs[1], int(attr(node, "k", 0)), dtype=dtype))


# ---------------------------------------------------------------------------------------------------------
# Per-axis gathers


def pad_table(node: OnnxNode, n: int, before: int, after: int, mode: str) -> list[int]:
    """Input index of every output index of an axis of size ``n`` padded by ``before`` and ``after`` (negative:
    cropped, constant mode only): -1 for the constant, else the edge, the reflection (no repeated edge, pads
    smaller than the axis) or the wrapped index."""
    i = np.arange(-before, n + after, dtype=np.int64)
    if mode == "constant":
        return np.where((i >= 0) & (i < n), i, -1).tolist()
    if before < 0 or after < 0:
        raise unsupported(node, f"negative pads (cropping) with mode {mode!r}: only constant padding crops", "mode")
    if mode == "edge":
        return np.clip(i, 0, n - 1).tolist()
    if mode == "wrap":
        return (i % n).tolist()
    if max(before, after) >= n:
        raise unsupported(node, f"reflect padding of {max(before, after)} needs an axis longer than {n}", "mode")
    return np.where(i < 0, -i, np.where(i >= n, 2 * (n - 1) - i, i)).tolist()


@converter("Pad", attrs=("mode", "pads", "value"))
def _pad(b: Builder, node: OnnxNode) -> None:
    """Constant padding without cropping is vdla ``pad``; every other mode, and cropping (negative pads), is a
    ``take`` (as is a constant value computed at run time). The pads must be constants."""
    dt = b.require_dtype(node, 0, ANY)
    mode = str(attr(node, "mode", "constant"))
    if mode not in PAD_MODES:
        raise unsupported(node, f"unknown padding mode (vdla pads with {', '.join(PAD_MODES)})", "mode")
    xs = b.shape(node, 0)
    rank = len(xs)
    if "pads" in node.attrs:
        pads = [int(p) for p in node.attrs["pads"]]
        value = attr(node, "value", 0.0)
    else:
        pads = [int(p) for p in _ints(b, node, 1, "pads").ravel()]
        cv = b.const(node, 2, "constant_value") if b.is_const(node, 2) or not b.has(node, 2) else None
        value = 0 if cv is None or cv.size == 0 else np.asarray(cv).reshape(-1)[0]
    fill = None
    if b.has(node, 2) and not b.is_const(node, 2) and mode == "constant":  # a value computed at run time
        b.require_dtype(node, 2, (dt,))
        fill = b.tensor(node, 2)
    axes = list(range(rank))
    if b.has(node, 3):
        axes = [axis_of(node, int(a), rank, "axis", None) for a in _ints(b, node, 3, "axes").ravel()]
    if len(pads) != 2 * len(axes):
        raise unsupported(node, f"{len(pads)} pads for {len(axes)} axes")
    pairs = [(0, 0)] * rank
    for k, a in enumerate(axes):
        pairs[a] = (pads[k], pads[len(axes) + k])
    if any(d + p0 + p1 < 1 for d, (p0, p1) in zip(xs, pairs, strict=True)):
        raise unsupported(node, f"pads {pads} leave an axis empty: vdla has no empty tensors")
    value = _fill(node, dt, value, infinite=True)
    x, uint8 = b.tensor(node, 0), dt == "uint8"
    if mode == "constant" and fill is None and all(p0 >= 0 and p1 >= 0 for p0, p1 in pairs):
        if not any(p0 or p1 for p0, p1 in pairs):
            b.alias(node.outputs[0], x, uint8=uint8)
            return
        b.emit(node, "pad", (x,), {"pads": tuple(pairs), "value": value}, out=node.outputs[0], uint8=uint8)
        return
    tables = [pad_table(node, d, p0, p1, mode) for d, (p0, p1) in zip(xs, pairs, strict=True)]
    _take(b, node, x, tables, value if mode == "constant" else 0, node.outputs[0], uint8, fill)


@converter("Tile")
def _tile(b: Builder, node: OnnxNode) -> None:
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    repeats = _ints(b, node, 1, "repeats").ravel()
    if len(repeats) != len(xs) or np.any(repeats < 1):
        raise unsupported(node, f"repeats {repeats.tolist()} must be one positive count per axis of {xs}")
    tables = [list(range(d)) * int(r) for d, r in zip(xs, repeats, strict=True)]
    _take(b, node, b.tensor(node, 0), tables, 0, node.outputs[0], dt == "uint8")


@converter("Expand")
def _expand(b: Builder, node: OnnxNode) -> None:
    """numpy broadcasting of the input to the shape input (which may also broadcast against it)."""
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    target = [int(d) for d in _ints(b, node, 1, "shape").ravel()]
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(tuple(xs), tuple(target)))
    except ValueError:
        raise unsupported(node, f"shape {target} does not broadcast with the input shape {xs}") from None
    if size(shape) < 1:
        raise unsupported(node, f"the result shape {shape} is empty: vdla has no empty tensors")
    x = b.reshape(node, b.tensor(node, 0), (1,) * (len(shape) - len(xs)) + tuple(xs))
    full = b.type_of(x).shape
    tables = [None if d == n else [0] * n for d, n in zip(full, shape, strict=True)]
    _take(b, node, x, tables, 0, node.outputs[0], dt == "uint8")


@converter("Gather", attrs=("axis",))
def _gather(b: Builder, node: OnnxNode) -> None:
    """A gather of constant indices (any shape) along one axis: a ``take`` of that axis, reshaped; of indices
    computed at run time (token ids): a ``gather`` of computed flat offsets (:func:`_runtime_gather`)."""
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    axis = axis_of(node, int(attr(node, "axis", 0)), len(xs))
    if not b.is_const(node, 1):
        _runtime_gather(b, node, xs, axis, dt == "uint8")
        return
    idx = _indices(node, _ints(b, node, 1, "indices"), xs[axis])
    tables: list[list[int] | None] = [None] * len(xs)
    tables[axis] = idx.ravel().tolist()
    out_shape = (*xs[:axis], *idx.shape, *xs[axis + 1 :])
    if size(out_shape) < 1:
        raise unsupported(node, f"the result shape {out_shape} is empty: vdla has no empty tensors")
    y = _take(b, node, b.tensor(node, 0), tables)
    b.reshape(node, y, out_shape, out=node.outputs[0], uint8=dt == "uint8")


def _runtime_gather(b: Builder, node: OnnxNode, xs: tuple[int, ...], axis: int, uint8: bool) -> None:
    """Gather along ``axis`` of indices known only at run time: flat offsets ``outer * n * inner +
    mod(index, n) * inner + i`` computed in int32 (``mod`` wraps negative indices as ONNX counts them, so
    indices outside ``[-n, n)``, which ONNX leaves undefined, wrap too), then one ``gather``."""
    b.require_dtype(node, 1, ("int64", "int32"))
    n, inner = xs[axis], size(xs[axis + 1 :])
    ishape = b.shape(node, 1)
    out_shape = (*xs[:axis], *ishape, *xs[axis + 1 :])
    if size(out_shape) < 1:
        raise unsupported(node, f"the result shape {out_shape} is empty: vdla has no empty tensors")
    if size(xs) >= 2**31:
        raise unsupported(node, f"an input of {size(xs)} elements: int32 offsets address at most 2**31 - 1")
    idx = b.tensor(node, 1)
    one = (1,) * len(ishape)
    wrapped = b.emit(node, "mod", (idx, b.add_param(f"{node.outputs[0]}:n", np.full(one, n, np.int32))))
    scaled = b.emit(node, "mul", (wrapped, b.add_param(f"{node.outputs[0]}:inner", np.full(one, inner, np.int32))))
    lead = (1,) * axis
    placed = b.reshape(node, scaled, (*lead, *ishape, *(1,) * (len(xs) - axis - 1)))
    outer = np.arange(size(xs[:axis]), dtype=np.int32).reshape(xs[:axis]) * (n * inner)
    base = outer.reshape((*xs[:axis], *one, *(1,) * (len(xs) - axis - 1)))
    base = base + np.arange(inner, dtype=np.int32).reshape((1,) * (axis + len(ishape)) + xs[axis + 1 :])
    offsets = b.emit(node, "add", (placed, b.add_param(f"{node.outputs[0]}:base", base)), suffix="offsets")
    if not out_shape:  # a scalar index into a vector: the one-element gather, reshaped
        y = b.emit(node, "gather", (b.tensor(node, 0), b.reshape(node, offsets, (1,))), suffix="gather", uint8=uint8)
        b.reshape(node, y, (), out=node.outputs[0], uint8=uint8)
        return
    b.emit(node, "gather", (b.tensor(node, 0), offsets), out=node.outputs[0], uint8=uint8)


@converter("Compress", attrs=("axis",))
def _compress(b: Builder, node: OnnxNode) -> None:
    """The slices along the axis (of the flattened input without one) that a constant condition selects."""
    dt = b.require_dtype(node, 0, ANY)
    cond = np.asarray(b.const(node, 1, "condition")).astype(bool).ravel()
    x, xs = b.tensor(node, 0), b.shape(node, 0)
    if "axis" in node.attrs:
        axis = axis_of(node, int(attr(node, "axis")), len(xs))
    else:
        x, xs, axis = b.reshape(node, x, (size(xs),)), (size(xs),), 0
    if len(cond) > xs[axis]:
        raise unsupported(node, f"a condition of {len(cond)} entries for an axis of size {xs[axis]}")
    chosen = np.flatnonzero(cond).tolist()
    if not chosen:
        raise unsupported(node, "the condition selects nothing: vdla has no empty tensors")
    tables: list[list[int] | None] = [None] * len(xs)
    tables[axis] = chosen
    _take(b, node, x, tables, 0, node.outputs[0], dt == "uint8")


def crop_pad_table(n: int, target: int) -> list[int]:
    """CenterCropPad along an axis of size ``n`` to ``target``: centred, the odd element at the end."""
    if target <= n:
        start = (n - target) // 2
        return list(range(start, start + target))
    before = (target - n) // 2
    return [-1] * before + list(range(n)) + [-1] * (target - n - before)


@converter("CenterCropPad", attrs=("axes",))
def _center_crop_pad(b: Builder, node: OnnxNode) -> None:
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    target = _ints(b, node, 1, "shape").ravel()
    axes = [axis_of(node, int(a), len(xs), "axis", "axes") for a in attr(node, "axes", range(len(xs)))]
    if len(target) != len(axes) or np.any(target < 1):
        raise unsupported(node, f"shape {target.tolist()} must give one positive size per axis {axes}")
    tables: list[list[int] | None] = [None] * len(xs)
    for a, t in zip(axes, target, strict=True):
        tables[a] = crop_pad_table(xs[a], int(t))
    _take(b, node, b.tensor(node, 0), tables, _fill(node, dt, 0), node.outputs[0], dt == "uint8")


@converter("DepthToSpace", "SpaceToDepth", attrs=("blocksize", "mode"))
def _depth_space(b: Builder, node: OnnxNode) -> None:
    """A reshape to 6-D, a transpose and a reshape back (ONNX's own definition, DCR or CRD order)."""
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    bs = int(attr(node, "blocksize", 0))
    mode = str(attr(node, "mode", "DCR"))
    if mode not in ("DCR", "CRD"):
        raise unsupported(node, "mode must be DCR or CRD", "mode")
    if len(xs) != 4 or bs < 1:
        raise unsupported(node, f"needs an NCHW input and a positive blocksize, got shape {xs}", "blocksize")
    n, c, h, w = xs
    if node.op_type == "DepthToSpace":
        if c % (bs * bs):
            raise unsupported(node, f"{c} channels are not a multiple of blocksize^2 = {bs * bs}", "blocksize")
        cb = c // (bs * bs)
        view, perm = ((n, bs, bs, cb, h, w), (0, 3, 4, 1, 5, 2)) if mode == "DCR" else (
            (n, cb, bs, bs, h, w), (0, 1, 4, 2, 5, 3))  # fmt: skip
        final = (n, cb, h * bs, w * bs)
    else:
        if h % bs or w % bs:
            raise unsupported(node, f"height {h} and width {w} must be multiples of the blocksize", "blocksize")
        view = (n, c, h // bs, bs, w // bs, bs)
        perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
        final = (n, c * bs * bs, h // bs, w // bs)
    uint8 = dt == "uint8"
    x6 = b.reshape(node, b.tensor(node, 0), view)
    y = b.emit(node, "transpose", (x6,), {"perm": perm}, suffix="transpose", uint8=uint8)
    b.reshape(node, y, final, out=node.outputs[0], uint8=uint8)


# ---------------------------------------------------------------------------------------------------------
# Element-by-element gathers and scatters (constant flat offsets)


def elements_offsets(node: OnnxNode, xs: Sequence[int], idx: np.ndarray, axis: int) -> np.ndarray:
    """Flat offsets into a tensor of shape ``xs`` of GatherElements / ScatterElements: the element at the
    coordinates of each index with the axis coordinate replaced by the index."""
    if idx.ndim != len(xs) or any(t > d for k, (t, d) in enumerate(zip(idx.shape, xs, strict=True)) if k != axis):
        raise unsupported(node, f"indices of shape {idx.shape} do not fit the input shape {tuple(xs)}")
    coords = list(np.indices(idx.shape))
    coords[axis] = _indices(node, idx, xs[axis])
    return np.ravel_multi_index(coords, tuple(xs))


def nd_offsets(node: OnnxNode, xs: Sequence[int], idx: np.ndarray, batch: int) -> tuple[np.ndarray, tuple]:
    """Flat offsets into a tensor of shape ``xs`` of GatherND / ScatterND (``batch`` leading batch axes):
    one per element of the slices that the last axis of ``idx`` addresses, shaped (batch, indices, slice)."""
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim < 1 or batch < 0 or batch + k > len(xs) or tuple(idx.shape[:batch]) != tuple(xs[:batch]):
        raise unsupported(node, f"indices of shape {idx.shape} (batch_dims {batch}) do not fit the input {tuple(xs)}")
    rest = tuple(xs[batch + k :])
    out_shape = (*idx.shape[:-1], *rest)
    grid = np.indices(out_shape) if out_shape else np.zeros((0,), np.int64)
    lead = idx.shape[:-1]
    coords = [grid[d] for d in range(batch)]
    for j in range(k):
        part = _indices(node, idx[..., j], xs[batch + j]).reshape(lead + (1,) * len(rest))
        coords.append(np.broadcast_to(part, out_shape))
    coords += [grid[len(lead) + d] for d in range(len(rest))]
    return np.ravel_multi_index(coords, tuple(xs)), out_shape


@converter("GatherElements", attrs=("axis",))
def _gather_elements(b: Builder, node: OnnxNode) -> None:
    """A ``gather`` of flat offsets: constant ones for constant indices, else computed at run time
    (:func:`_runtime_elements_offsets`)."""
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    axis = axis_of(node, int(attr(node, "axis", 0)), len(xs))
    if b.is_const(node, 1):
        offsets = elements_offsets(node, xs, _ints(b, node, 1, "indices"), axis)
        _gather_offsets(b, node, b.tensor(node, 0), offsets, dt == "uint8")
        return
    offsets = _runtime_elements_offsets(b, node, xs, axis)
    b.emit(node, "gather", (b.tensor(node, 0), offsets), out=node.outputs[0], uint8=dt == "uint8")


def _int32_offsets(node: OnnxNode, xs: Sequence[int], out_shape: Sequence[int]) -> None:
    if size(out_shape) < 1:
        raise unsupported(node, f"the result shape {tuple(out_shape)} is empty: vdla has no empty tensors")
    if size(xs) >= 2**31:
        raise unsupported(node, f"an input of {size(xs)} elements: int32 offsets address at most 2**31 - 1")


def _runtime_elements_offsets(b: Builder, node: OnnxNode, xs: tuple[int, ...], axis: int) -> str:
    """The flat offsets of GatherElements / ScatterElements for indices (input 1) computed at run time:
    ``base + mod(index, n) * stride`` in int32, ``base`` the offsets of the index's other coordinates (``mod``
    wraps negative indices as ONNX counts them; indices outside ``[-n, n)``, undefined in ONNX, wrap too)."""
    b.require_dtype(node, 1, ("int64", "int32"))
    ishape = b.shape(node, 1)
    if len(ishape) != len(xs) or any(t > d for k, (t, d) in enumerate(zip(ishape, xs, strict=True)) if k != axis):
        raise unsupported(node, f"indices of shape {ishape} do not fit the input shape {tuple(xs)}")
    _int32_offsets(node, xs, ishape)
    out, one = node.outputs[0], (1,) * len(xs)
    coords = list(np.indices(ishape))
    coords[axis] = np.zeros(ishape, np.int64)
    base = np.ravel_multi_index(coords, tuple(xs)).astype(np.int32)
    wrapped = b.emit(node, "mod", (b.tensor(node, 1), b.add_param(f"{out}:n", np.full(one, xs[axis], np.int32))))
    stride = np.full(one, size(xs[axis + 1 :]), np.int32)
    scaled = b.emit(node, "mul", (wrapped, b.add_param(f"{out}:stride", stride)))
    return b.emit(node, "add", (scaled, b.add_param(f"{out}:base", base)), suffix="offsets")


@converter("GatherND", attrs=("batch_dims",))
def _gather_nd(b: Builder, node: OnnxNode) -> None:
    """A ``gather`` of flat offsets: constant ones for constant indices; for indices (..., k) computed at run
    time, the sum over the last axis of ``mod(index, n_j) * stride_j`` (int32) plus the constant offsets of
    the batch and slice coordinates."""
    dt = b.require_dtype(node, 0, ANY)
    batch = int(attr(node, "batch_dims", 0))
    if not b.is_const(node, 1):
        offsets = _runtime_nd_offsets(b, node, b.shape(node, 0), batch)
        b.emit(node, "gather", (b.tensor(node, 0), offsets), out=node.outputs[0], uint8=dt == "uint8")
        return
    offsets, _ = nd_offsets(node, b.shape(node, 0), _ints(b, node, 1, "indices"), batch)
    if offsets.size < 1:
        raise unsupported(node, "the result is empty: vdla has no empty tensors")
    _gather_offsets(b, node, b.tensor(node, 0), offsets, dt == "uint8")


def _runtime_nd_offsets(b: Builder, node: OnnxNode, xs: tuple[int, ...], batch: int) -> str:
    """The flat offsets of GatherND / ScatterND for indices (..., k) (input 1) computed at run time, shaped
    (indices, slice): the sum over the last axis of ``mod(index_j, n_j) * stride_j`` (int32) plus the constant
    offsets of the batch and slice coordinates."""
    b.require_dtype(node, 1, ("int64", "int32"))
    ishape = b.shape(node, 1)
    k = ishape[-1] if ishape else 0
    if not ishape or k < 1 or batch < 0 or batch + k > len(xs) or tuple(ishape[:batch]) != tuple(xs[:batch]):
        raise unsupported(node, f"indices of shape {ishape} (batch_dims {batch}) do not fit the input {tuple(xs)}")
    lead, rest = tuple(ishape[:-1]), tuple(xs[batch + k :])
    out_shape = (*lead, *rest)
    _int32_offsets(node, xs, out_shape)
    out = node.outputs[0]
    strides = np.array([size(xs[a + 1 :]) for a in range(batch, batch + k)], np.int32)
    dims = np.array(xs[batch : batch + k], np.int32)
    wrapped = b.emit(node, "mod", (b.tensor(node, 1), b.add_param(f"{out}:dims", dims)))
    scaled = b.emit(node, "mul", (wrapped, b.add_param(f"{out}:strides", strides)))
    summed = b.emit(node, "reduce", (scaled,), {"kind": "sum", "axes": (len(ishape) - 1,), "keepdims": False},
                    suffix="index_offsets")  # fmt: skip
    placed = b.reshape(node, summed, (*lead, *(1,) * len(rest)))
    grid = np.indices(out_shape)
    coords = [grid[d] for d in range(batch)] + [np.zeros(out_shape, np.int64)] * k
    coords += [grid[len(lead) + d] for d in range(len(rest))]
    base = np.ravel_multi_index(coords, tuple(xs)).astype(np.int32)
    return b.emit(node, "add", (placed, b.add_param(f"{out}:base", base)), suffix="offsets")


@converter("ReverseSequence", attrs=("batch_axis", "time_axis"))
def _reverse_sequence(b: Builder, node: OnnxNode) -> None:
    """Along the time axis, the first ``lens[i]`` elements of batch entry ``i`` reversed: a gather of constant
    offsets for constant lengths, else of offsets computed at run time (the time coordinate ``lens - 1 - t``
    where ``t < lens``, in int32)."""
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    batch = axis_of(node, int(attr(node, "batch_axis", 1)), len(xs), "batch_axis", "batch_axis")
    time = axis_of(node, int(attr(node, "time_axis", 0)), len(xs), "time_axis", "time_axis")
    if batch == time or len(xs) < 2:
        raise unsupported(node, f"batch_axis and time_axis must be two axes of the input {xs}")
    if not b.is_const(node, 1):
        b.require_dtype(node, 1, ("int32", "int64"))
        if b.shape(node, 1) != (xs[batch],):
            raise unsupported(node, f"sequence_lens of shape {b.shape(node, 1)} for {xs[batch]} batch entries")
        one = [1] * len(xs)
        lens_shape, t_shape = list(one), list(one)
        lens_shape[batch], t_shape[time] = xs[batch], xs[time]
        out = node.outputs[0]
        n = b.reshape(node, b.tensor(node, 1), tuple(lens_shape))
        t = np.arange(xs[time], dtype=np.int32).reshape(t_shape)
        t_value = b.add_param(f"{out}:time", t)
        reversed_t = b.emit(node, "sub", (n, b.add_param(f"{out}:time_plus_one", t + 1)), suffix="reversed_time")
        inside = b.emit(node, "less", (t_value, n), suffix="inside")
        coord = b.emit(node, "where", (inside, reversed_t, t_value), suffix="time_coordinate")
        coords = list(np.indices(xs))
        coords[time] = np.zeros(xs, np.int64)
        base = b.add_param(f"{out}:base", np.ravel_multi_index(coords, xs).astype(np.int32))
        stride = size(xs[time + 1 :])
        offsets = b.emit(node, "add", (b.emit(node, "mul", (coord,), {"b": stride}, suffix="time_offsets"), base),
                         suffix="offsets")  # fmt: skip
        b.emit(node, "gather", (b.tensor(node, 0), offsets), out=out, uint8=dt == "uint8")
        return
    lens = _ints(b, node, 1, "sequence_lens").ravel()
    if batch == time or len(xs) < 2 or len(lens) != xs[batch] or np.any((lens < 0) | (lens > xs[time])):
        raise unsupported(node, f"sequence_lens {lens.tolist()} must give one length in [0, {xs[time]}] per batch")
    coords = list(np.indices(xs))
    t, n = coords[time], np.expand_dims(lens, [a for a in range(len(xs)) if a != batch]).astype(np.int64)
    coords[time] = np.where(t < n, n - 1 - t, t)
    _gather_offsets(b, node, b.tensor(node, 0), np.ravel_multi_index(coords, xs), dt == "uint8")


@converter("OneHot", attrs=("axis",))
def _one_hot(b: Builder, node: OnnxNode) -> None:
    """vdla ``one_hot`` of the indices (float32, int32, int8 or int64 computed at run time, or constants of any
    integer type, which an out-of-range index keeps out of range) and the (off, on) values; the depth fixes
    the output shape, so it must be a constant."""
    dt = b.require_dtype(node, 2, ANY)
    depth_v = np.asarray(b.const(node, 1, "depth")).ravel()
    if depth_v.size != 1 or not np.isfinite(depth_v[0]) or int(depth_v[0]) < 1:
        raise unsupported(node, f"depth {depth_v.tolist()} must be one positive number")
    depth = int(depth_v[0])
    if b.is_const(node, 0):
        idx = np.asarray(b.const(node, 0, "indices"))
        if idx.dtype.kind == "f":
            idx = np.trunc(np.nan_to_num(idx.astype(np.float64), nan=-2.0 * depth))
        far = -(depth + 1)  # stays outside [-depth, depth) in int32
        idx = np.where((idx >= -depth) & (idx < depth), idx, far).astype(np.int32)
        indices = b.add_param(f"{node.outputs[0]}:indices", idx)
    else:
        b.require_dtype(node, 0, ("float32", "int32", "int8", "int64"))  # (int64 held as int32)
        indices = b.tensor(node, 0)
    rank = len(b.shape(node, 0)) + 1
    axis = axis_of(node, int(attr(node, "axis", -1)), rank)
    attrs = {"depth": depth, "axis": axis}
    b.emit(node, "one_hot", (indices, b.tensor(node, 2)), attrs, out=node.outputs[0], uint8=dt == "uint8")


def _scatter(b: Builder, node: OnnxNode, offsets: np.ndarray | str) -> None:
    """Emit ``scatter`` of the updates (input 2) at flat ``offsets`` into the data (input 0): constant ones, or
    a value computed at run time (which the kernel clamps into the data)."""
    b.require_dtype(node, 0, SCATTER_TYPES)
    b.require_dtype(node, 2, SCATTER_TYPES)
    reduction = str(attr(node, "reduction", "none"))
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise unsupported(node, "reduction must be none, add, mul, max or min", "reduction")
    shape = b.type_of(offsets).shape if isinstance(offsets, str) else tuple(offsets.shape)
    if shape != b.shape(node, 2):
        raise unsupported(node, f"updates of shape {b.shape(node, 2)} where the indices address {shape}")
    if not isinstance(offsets, str):
        offsets = b.add_param(f"{node.outputs[0]}:offsets", offsets.astype(np.int32))
    x, updates = b.tensor(node, 0), b.tensor(node, 2)
    b.emit(node, "scatter", (x, offsets, updates), {"reduction": reduction}, out=node.outputs[0])


@converter("ScatterElements", "Scatter", attrs=("axis", "reduction"))
def _scatter_elements(b: Builder, node: OnnxNode) -> None:
    xs = b.shape(node, 0)
    axis = axis_of(node, int(attr(node, "axis", 0)), len(xs))
    if not b.is_const(node, 1):
        _scatter(b, node, _runtime_elements_offsets(b, node, xs, axis))
        return
    _scatter(b, node, elements_offsets(node, xs, _ints(b, node, 1, "indices"), axis))


@converter("ScatterND", attrs=("reduction",))
def _scatter_nd(b: Builder, node: OnnxNode) -> None:
    if not b.is_const(node, 1):
        _scatter(b, node, _runtime_nd_offsets(b, node, b.shape(node, 0), 0))
        return
    _scatter(b, node, nd_offsets(node, b.shape(node, 0), _ints(b, node, 1, "indices"), 0)[0])


@converter("TensorScatter", attrs=("axis", "mode"))
def _tensor_scatter(b: Builder, node: OnnxNode) -> None:
    """The cache with the update written along the sequence axis from each batch entry's write index (0 when
    absent; ``circular``: modulo the cache length): one ``scatter`` of the update at flat offsets, constant ones
    for constant indices, else computed in int32 (a linear write past the cache's end, undefined in ONNX, is
    clamped into the cache by the kernel)."""
    b.require_dtype(node, 0, SCATTER_TYPES)
    b.require_dtype(node, 1, SCATTER_TYPES)
    cs, us = b.shape(node, 0), b.shape(node, 1)
    axis = axis_of(node, int(attr(node, "axis", -2)), len(cs))
    mode = str(attr(node, "mode", "linear"))
    if mode not in ("linear", "circular"):
        raise unsupported(node, "mode must be linear or circular", "mode")
    if axis == 0 or len(us) != len(cs) or any(u != c for k, (u, c) in enumerate(zip(us, cs, strict=True)) if k != axis):
        raise unsupported(node, f"update {us} must have the cache's shape {cs} but along the sequence axis {axis} "
                          "(not the batch axis)")  # fmt: skip
    if us[axis] > cs[axis]:
        raise unsupported(node, f"an update of {us[axis]} positions for a cache of {cs[axis]}")
    out = node.outputs[0]
    grid = np.indices(us)
    seq = grid[axis]
    stride = size(cs[axis + 1 :])
    coords = list(grid)
    coords[axis] = np.zeros(us, np.int64)
    base = np.ravel_multi_index(coords, tuple(cs))
    if not b.has(node, 2) or b.is_const(node, 2):
        start = np.zeros(cs[0], np.int64) if not b.has(node, 2) else np.asarray(b.const(node, 2, "write_indices"))
        pos = start.reshape((-1,) + (1,) * (len(cs) - 1)) + seq
        pos = pos % cs[axis] if mode == "circular" else np.clip(pos, 0, cs[axis] - 1)
        offsets: np.ndarray | str = (base + pos * stride).astype(np.int32)
    else:
        b.require_dtype(node, 2, ("int32", "int64"))
        if b.shape(node, 2) != (cs[0],):
            raise unsupported(node, f"write_indices of shape {b.shape(node, 2)} for a batch of {cs[0]}")
        start = b.reshape(node, b.tensor(node, 2), (cs[0],) + (1,) * (len(cs) - 1))
        pos = b.emit(node, "add", (start, b.add_param(f"{out}:positions", seq.astype(np.int32))), suffix="positions")
        if mode == "circular":
            pos = b.emit(node, "mod", (pos,), {"b": cs[axis]}, suffix="wrapped")
        scaled = b.emit(node, "mul", (pos,), {"b": stride}, suffix="position_offsets")
        offsets = b.emit(node, "add", (scaled, b.add_param(f"{out}:base", base.astype(np.int32))), suffix="offsets")
    if not isinstance(offsets, str):
        offsets = b.add_param(f"{out}:offsets", offsets)
    b.emit(node, "scatter", (b.tensor(node, 0), offsets, b.tensor(node, 1)), out=out)


@converter("Col2Im", attrs=("dilations", "pads", "strides"))
def _col2im(b: Builder, node: OnnxNode) -> None:
    """The sliding blocks (N, C * prod(block), L) summed back into the image (N, C, *image_shape): one ``scatter``
    add of the input at constant flat offsets into zeros with one extra element, where the block elements that
    fall in the padding land, then a slice and a reshape. image_shape and block_shape must be constants."""
    b.require_dtype(node, 0, FLOAT)
    xs = b.shape(node, 0)
    image = [int(v) for v in _ints(b, node, 1, "image_shape").ravel()]
    block = [int(v) for v in _ints(b, node, 2, "block_shape").ravel()]
    nd = len(image)
    dil = [int(v) for v in attr(node, "dilations", [1] * nd)]
    strides = [int(v) for v in attr(node, "strides", [1] * nd)]
    pads = [int(v) for v in attr(node, "pads", [0] * 2 * nd)]
    if len(block) != nd or len(dil) != nd or len(strides) != nd or len(pads) != 2 * nd or nd < 1:
        raise unsupported(node, f"image_shape {image}, block_shape {block}, dilations, strides and pads must "
                          "describe the same spatial axes")  # fmt: skip
    if min(image + block + dil + strides) < 1 or min(pads) < 0:
        raise unsupported(node, "image and block sizes, dilations and strides must be positive, pads non-negative")
    k = size(block)
    blocks = [(image[d] + pads[d] + pads[nd + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(nd)]
    if len(xs) != 3 or xs[1] % k or min(blocks) < 1 or xs[2] != size(blocks):
        raise unsupported(node, f"input of shape {xs} is not (N, C * {k}, {size(blocks)}) for the blocks {blocks}")
    n, c = xs[0], xs[1] // k
    grid = np.indices((n, c, *block, *blocks))
    inside = np.ones(grid.shape[1:], bool)
    pixel = np.zeros(grid.shape[1:], np.int64)
    for d in range(nd):
        coord = grid[2 + nd + d] * strides[d] - pads[d] + grid[2 + d] * dil[d]
        inside &= (coord >= 0) & (coord < image[d])
        pixel = pixel * image[d] + coord
    total = n * c * size(image)
    if total + 1 >= 2**31:
        raise unsupported(node, f"an image of {total} elements: int32 offsets address at most 2**31 - 1")
    offsets = np.where(inside, (grid[0] * c + grid[1]) * size(image) + pixel, total).reshape(-1)
    out = node.outputs[0]
    zeros = b.add_param(f"{out}:zeros", np.zeros(total + 1, np.float32))
    index = b.add_param(f"{out}:offsets", offsets.astype(np.int32))
    flat = b.reshape(node, b.tensor(node, 0), (offsets.size,))
    summed = b.emit(node, "scatter", (zeros, index, flat), {"reduction": "add"}, suffix="col2im")
    image_flat = b.emit(node, "slice", (summed,), {"starts": (0,), "stops": (total,), "steps": (1,)}, suffix="image")
    b.reshape(node, image_flat, (n, c, *image), out=out)


# ---------------------------------------------------------------------------------------------------------
# Resize

RESIZE_ATTRS = ("antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode")  # fmt: skip


def resize_geometry(b: Builder, node: OnnxNode, xs: tuple[int, ...], axes: list[int]) -> tuple[list[float], list[int]]:
    """Per-axis scales (what the coordinate transformation divides by) and output sizes, as ONNX's
    reference computes them from the ``scales`` or ``sizes`` input, ``axes`` and the aspect-ratio policy."""
    rank = len(xs)
    scales = np.asarray(b.const(node, 2, "scales"), np.float32).ravel() if b.has(node, 2) else np.zeros(0)
    sizes = np.asarray(b.const(node, 3, "sizes"), np.int64).ravel() if b.has(node, 3) else np.zeros(0, np.int64)
    if (scales.size == 0) == (sizes.size == 0):
        raise unsupported(node, "needs exactly one of the scales and sizes inputs")
    given = scales if scales.size else sizes
    if given.size != len(axes) or len(set(axes)) != len(axes):
        raise unsupported(node, f"{given.size} scales/sizes for axes {axes}")
    full_scales, full_sizes = [1.0] * rank, list(xs)
    policy = str(attr(node, "keep_aspect_ratio_policy", "stretch"))
    if scales.size:
        for a, s in zip(axes, scales.astype(np.float64), strict=True):
            if not (math.isfinite(s) and s > 0):
                raise unsupported(node, f"scale {s} must be positive and finite")
            full_scales[a], full_sizes[a] = float(s), int(s * xs[a])
    elif policy == "stretch":
        for a, n in zip(axes, sizes, strict=True):
            full_scales[a], full_sizes[a] = int(n) / xs[a], int(n)
    elif policy in ("not_larger", "not_smaller"):
        ratios = [int(n) / xs[a] for a, n in zip(axes, sizes, strict=True)]
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        for a in axes:
            full_scales[a], full_sizes[a] = scale, int(scale * xs[a] + 0.5)
    else:
        raise unsupported(node, "unknown policy", "keep_aspect_ratio_policy")
    if any(n < 1 for n in full_sizes):
        raise unsupported(node, f"output shape {tuple(full_sizes)} is empty: vdla has no empty tensors")
    return full_scales, full_sizes


def _roi(b: Builder, node: OnnxNode, rank: int, axes: list[int]) -> list[tuple[float, float]]:
    """tf_crop_and_resize's region per axis from the (constant) roi input: starts then ends of ``axes``."""
    roi = np.asarray(b.const(node, 1, "roi"), np.float64).ravel() if b.has(node, 1) else np.zeros(0)
    if roi.size != 2 * len(axes):
        raise unsupported(node, f"tf_crop_and_resize needs a roi of {2 * len(axes)} values, got {roi.size}")
    pairs = [(0.0, 1.0)] * rank
    for k, a in enumerate(axes):
        pairs[a] = (float(roi[k]), float(roi[len(axes) + k]))
    return pairs


@converter("Resize", attrs=RESIZE_ATTRS)
def _resize(b: Builder, node: OnnxNode) -> None:
    """Nearest (any dtype, a gather), linear and cubic (float32) resizing in every coordinate transformation,
    with antialiased downsampling, exclude_outside and tf_crop_and_resize's region and extrapolation."""
    dt = b.require_dtype(node, 0, ANY)
    xs = b.shape(node, 0)
    rank = len(xs)
    mode = str(attr(node, "mode", "nearest"))
    if mode not in ("nearest", "linear", "cubic"):
        raise unsupported(node, "mode must be nearest, linear or cubic", "mode")
    if mode != "nearest" and dt != "float32":
        raise unsupported(node, f"{mode} interpolation of {dt}: vdla interpolates float32", "mode")
    coord = str(attr(node, "coordinate_transformation_mode", "half_pixel"))
    exclude = int(attr(node, "exclude_outside", 0))
    if mode == "nearest" and exclude:
        raise unsupported(node, "exclude_outside=1 with nearest interpolation is not supported", "exclude_outside")
    axes = [axis_of(node, a, rank, "axis", "axes") for a in attr(node, "axes", list(range(rank)))]
    scales, sizes = resize_geometry(b, node, xs, axes)
    attrs: dict[str, Any] = {
        "mode": mode,
        "coordinate_mode": coord,
        "nearest_mode": str(attr(node, "nearest_mode", "round_prefer_floor")),
        "scales": tuple(scales),
        "sizes": tuple(sizes),
    }
    if mode == "cubic":
        attrs["cubic_coeff_a"] = float(attr(node, "cubic_coeff_a", -0.75))
    if exclude:
        attrs["exclude_outside"] = True
    if int(attr(node, "antialias", 0)) and mode != "nearest":
        attrs["antialias"] = True
    if coord == "tf_crop_and_resize":
        attrs["roi"] = tuple(_roi(b, node, rank, axes))
        attrs["extrapolation_value"] = _fill(node, dt, attr(node, "extrapolation_value", 0.0))
    b.emit(node, "resize", (b.tensor(node, 0),), attrs, out=node.outputs[0], uint8=dt == "uint8")


def affine_base_grid(sizes: Sequence[int], align_corners: bool) -> np.ndarray:
    """The homogeneous coordinates ``(x, y, [z,] 1)`` of every output point of AffineGrid, (prod(sizes), d + 1)
    in float64: each axis normalised to [-1, 1], at the pixel centres or (``align_corners``) the corners, the
    last (width) axis first, as ONNX's reference builds them."""
    axes = []
    for n in sizes:
        if align_corners:
            axes.append(np.array([-1.0]) if n == 1 else -1 + np.arange(n) * (2.0 / (n - 1)))
        else:
            axes.append(-1 + 1.0 / n + np.arange(n) * (2.0 / n))
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in reversed(mesh)]
    return np.stack([*coords, np.ones(coords[0].shape)], axis=1)


@converter("DeformConv", attrs=("dilations", "group", "kernel_shape", "offset_group", "pads", "strides"))
def _deform_conv(b: Builder, node: OnnxNode) -> None:
    """A 2-D deformable convolution as ONNX's reference computes it: every kernel tap of every output point
    samples the input bilinearly (zeros outside) at its place moved by the offsets, one ``grid_sample`` per
    offset group (align_corners: pixel coordinates map exactly), times the mask; then the grouped
    contraction with the weights as one batched ``matmul``, plus the bias."""
    for i in range(5):
        if b.has(node, i):
            b.require_dtype(node, i, FLOAT)
    xs, ws, offs = b.shape(node, 0), b.shape(node, 1), b.shape(node, 2)
    if len(xs) != 4 or len(ws) != 4 or len(offs) != 4:
        raise unsupported(node, f"X {xs}, W {ws}, offset {offs}: vdla runs 2-D deformable convolutions")
    (n, c, ih, iw), (oc, cpg, kh, kw), (oh, ow) = xs, ws, offs[2:]
    kernel = [int(v) for v in attr(node, "kernel_shape", [kh, kw])]
    dil = [int(v) for v in attr(node, "dilations", [1, 1])]
    strides = [int(v) for v in attr(node, "strides", [1, 1])]
    pads = [int(v) for v in attr(node, "pads", [0, 0, 0, 0])]
    group, og = int(attr(node, "group", 1)), int(attr(node, "offset_group", 1))
    k = kh * kw
    ok = kernel == [kh, kw] and len(dil) == 2 and len(strides) == 2 and len(pads) == 4 and group >= 1 and og >= 1
    if not ok or c != cpg * group or oc % group or c % og or offs[:2] != (n, og * k * 2):
        raise unsupported(node, f"X {xs}, W {ws}, offset {offs} do not fit group {group}, offset_group {og} and "
                          f"kernel_shape {kernel}")  # fmt: skip
    if (oh, ow) != tuple((size_ + pads[a] + pads[a + 2] - (kern - 1) * dil[a] - 1) // strides[a] + 1
                         for a, (size_, kern) in enumerate(((ih, kh), (iw, kw)))):  # fmt: skip
        raise unsupported(node, f"the offsets' {oh}x{ow} output does not fit the input, kernel, pads and strides")
    if ih < 2 or iw < 2:
        raise unsupported(node, f"an input of {ih}x{iw}: the sampling grid normalizes by (size - 1)")
    if b.has(node, 4) and b.shape(node, 4) != (n, og * k, oh, ow):
        raise unsupported(node, f"mask of shape {b.shape(node, 4)} where {(n, og * k, oh, ow)} is needed")
    out = node.outputs[0]
    p = oh * ow
    # the grid: normalized (x, y) per (batch and offset group, tap, output point)
    taps = np.indices((kh, kw)).reshape(2, k, 1, 1)
    points = np.indices((oh, ow)).reshape(2, 1, oh, ow)
    base = [-pads[a] + strides[a] * points[a] + dil[a] * taps[a] for a in (0, 1)]  # (K, oh, ow) each
    scale = [2.0 / (ih - 1), 2.0 / (iw - 1)]
    offsets = b.reshape(node, b.tensor(node, 2), (n * og, k, 2, p))
    coords = []
    for a in (1, 0):  # x (width) first, as GridSample takes it
        off = b.emit(node, "slice", (offsets,), {"starts": (0, 0, a, 0), "stops": (n * og, k, a + 1, p),
                                                 "steps": (1, 1, 1, 1)}, suffix="offset_axis")  # fmt: skip
        shifted = b.emit(node, "mul", (b.reshape(node, off, (n * og, k, p, 1)),), {"b": scale[a]}, suffix="scaled")
        start = (base[a] * scale[a] - 1.0).reshape(1, k, p, 1).astype(np.float32)
        coords.append(b.emit(node, "add", (shifted, b.add_param(f"{out}:grid_base{a}", start)), suffix="coord"))
    grid = b.emit(node, "concat", coords, {"axis": 3}, suffix="grid")
    x = b.reshape(node, b.tensor(node, 0), (n * og, c // og, ih, iw))
    attrs = {"mode": "linear", "padding_mode": "zeros", "align_corners": True}
    sampled = b.emit(node, "grid_sample", (x, grid), attrs, suffix="sampled")  # (N * OG, C / OG, K, P)
    if b.has(node, 4):
        mask = b.reshape(node, b.tensor(node, 4), (n * og, 1, k, p))
        sampled = b.emit(node, "mul", (sampled, mask), suffix="masked")
    columns = b.reshape(node, sampled, (n, group, cpg * k, p))
    weights = b.reshape(node, b.tensor(node, 1), (1, group, oc // group, cpg * k))
    y = b.emit(node, "matmul", (weights, columns), suffix="deform_conv")  # (N, G, OC / G, P)
    y = b.reshape(node, y, (n, oc, oh, ow))
    if b.has(node, 3):
        y = b.emit(node, "add", (y, b.reshape(node, b.tensor(node, 3), (1, oc, 1, 1))), suffix="biased")
    b.finish(node, y, "float32")


_ROI_ATTRS = ("coordinate_transformation_mode", "mode", "output_height", "output_width", "sampling_ratio",
              "spatial_scale")  # fmt: skip


@converter("RoiAlign", attrs=_ROI_ATTRS)
def _roi_align(b: Builder, node: OnnxNode) -> None:
    """Average RoiAlign as ONNX's reference computes it: each region's ``sampling_ratio`` x ``sampling_ratio``
    points per output bin, sampled bilinearly from its batch entry's image with coordinates clamped into the
    image (one ``grid_sample``, border padding, align_corners), a point more than one pixel outside counting
    0, and the points averaged (a ``reduce``). The regions and batch indices may be computed at run time.
    Max mode (the reference takes the maximum of the weighted corners, not of the samples) and the adaptive
    sampling ratio 0 (its point count depends on the regions' run-time sizes) are refused."""
    b.require_dtype(node, 0, FLOAT)
    b.require_dtype(node, 1, FLOAT)
    b.require_dtype(node, 2, ("int32", "int64"))
    if str(attr(node, "mode", "avg")) != "avg":
        raise unsupported(node, "only mode='avg' (max takes the maximum of weighted corners, not of samples)", "mode")
    cmode = str(attr(node, "coordinate_transformation_mode", "half_pixel" if node.opset >= 16 else "output_half_pixel"))
    if cmode not in ("half_pixel", "output_half_pixel"):
        raise unsupported(node, "coordinate_transformation_mode must be half_pixel or output_half_pixel",
                          "coordinate_transformation_mode")  # fmt: skip
    g = int(attr(node, "sampling_ratio", 0))
    if g < 1:
        raise unsupported(node, "sampling_ratio 0 (adaptive) samples a number of points that depends on the "
                          "regions' run-time sizes", "sampling_ratio")  # fmt: skip
    oh, ow = int(attr(node, "output_height", 1)), int(attr(node, "output_width", 1))
    scale = float(attr(node, "spatial_scale", 1.0))
    (_, c, ih, iw), rs = b.shape(node, 0), b.shape(node, 1)
    if len(b.shape(node, 0)) != 4 or len(rs) != 2 or rs[1] != 4 or b.shape(node, 2) != (rs[0],) or oh < 1 or ow < 1:
        raise unsupported(node, f"X {b.shape(node, 0)}, rois {rs}, batch_indices {b.shape(node, 2)}: needs "
                          "(N, C, H, W), (R, 4), (R,) and a positive output size")  # fmt: skip
    if ih < 2 or iw < 2:
        raise unsupported(node, f"an input of {ih}x{iw}: the sampling grid normalizes by (size - 1)")
    r, out = rs[0], node.outputs[0]
    half = cmode == "half_pixel"
    rois = b.tensor(node, 1)

    def column(j: int) -> str:
        col = b.emit(node, "slice", (rois,), {"starts": (0, j), "stops": (r, j + 1), "steps": (1, 1)}, suffix="roi")
        scaled = b.emit(node, "mul", (col,), {"b": scale}, suffix="roi_scaled")
        return b.emit(node, "sub", (scaled,), {"b": 0.5}, suffix="roi_shifted") if half else scaled

    grid_axes = []
    for start_col, size_px, bins, what in ((0, iw, ow, "x"), (1, ih, oh, "y")):
        start, end = column(start_col), column(start_col + 2)
        extent = b.emit(node, "sub", (end, start), suffix=f"roi_{what}_extent")
        if not half:
            extent = b.emit(node, "max", (extent,), {"b": 1.0}, suffix=f"roi_{what}_extent_min1")
        frac = ((np.arange(bins)[:, None] + (np.arange(g)[None, :] + 0.5) / g) / bins).reshape(1, bins * g)
        pos = b.emit(node, "add", (start, b.emit(node, "mul", (extent, b.add_param(f"{out}:{what}_fractions",
                     frac.astype(np.float32))), suffix=f"{what}_span")), suffix=f"{what}_points")  # fmt: skip
        inside = b.emit(node, "bit_and", (b.emit(node, "greater_equal", (pos,), {"b": -1.0}, suffix="not_before"),
                        b.emit(node, "less_equal", (pos,), {"b": float(size_px)}, suffix="not_after")),
                        suffix=f"{what}_inside")  # fmt: skip
        norm = b.emit(node, "add", (b.emit(node, "mul", (pos,), {"b": 2.0 / (size_px - 1)}, suffix="normalized"),),
                      {"b": -1.0}, suffix=f"{what}_grid")  # fmt: skip
        grid_axes.append((norm, inside, bins * g))
    (gx, ix, nx), (gy, iy, ny) = grid_axes
    zeros = b.add_param(f"{out}:grid_zeros", np.zeros((1, ny, nx, 1), np.float32))
    gx4 = b.emit(node, "add", (b.reshape(node, gx, (r, 1, nx, 1)), zeros), suffix="grid_x")
    gy4 = b.emit(node, "add", (b.reshape(node, gy, (r, ny, 1, 1)), zeros), suffix="grid_y")
    grid = b.emit(node, "concat", (gx4, gy4), {"axis": 3}, suffix="grid")
    # each region's image: a gather of its batch entry (flat offsets index * C*H*W + position)
    per_image = c * ih * iw
    idx = b.emit(node, "mul", (b.reshape(node, b.tensor(node, 2), (r, 1)),), {"b": per_image}, suffix="image_offset")
    offsets = b.emit(node, "add", (idx, b.add_param(f"{out}:image_positions",
                     np.arange(per_image, dtype=np.int32).reshape(1, per_image))), suffix="offsets")  # fmt: skip
    images = b.reshape(node, b.emit(node, "gather", (b.tensor(node, 0), offsets), suffix="images"), (r, c, ih, iw))
    attrs = {"mode": "linear", "padding_mode": "border", "align_corners": True}
    sampled = b.emit(node, "grid_sample", (images, grid), attrs, suffix="sampled")  # (R, C, ny, nx)
    valid = b.emit(node, "bit_and", (b.reshape(node, iy, (r, 1, ny, 1)), b.reshape(node, ix, (r, 1, 1, nx))),
                   suffix="valid")  # fmt: skip
    kept = b.emit(node, "where", (valid, sampled), {"b": 0.0}, suffix="kept")
    bins6 = b.reshape(node, kept, (r, c, oh, g, ow, g))
    b.emit(node, "reduce", (bins6,), {"kind": "mean", "axes": (3, 5), "keepdims": False}, out=out)


@converter("AffineGrid", attrs=("align_corners",))
def _affine_grid(b: Builder, node: OnnxNode) -> None:
    """The sampling grid (N, [D,] H, W, d) of the affine maps theta (N, d, d + 1) computed at run time: one
    batched ``matmul`` of the constant homogeneous base grid (:func:`affine_base_grid`) and theta transposed.
    The size input must be a constant."""
    b.require_dtype(node, 0, FLOAT)
    ts = b.shape(node, 0)
    size_v = [int(v) for v in _ints(b, node, 1, "size").ravel()]
    d = len(size_v) - 2
    if d not in (2, 3) or ts != (size_v[0], d, d + 1) or min(size_v) < 1:
        raise unsupported(node, f"theta of shape {ts} and size {size_v}: needs (N, 2, 3) with (N, C, H, W) or "
                          "(N, 3, 4) with (N, C, D, H, W)")  # fmt: skip
    spatial = size_v[2:]
    base = affine_base_grid(spatial, bool(int(attr(node, "align_corners", 0))))
    grid = b.add_param(f"{node.outputs[0]}:base_grid", base.astype(np.float32).reshape(1, *base.shape))
    theta_t = b.emit(node, "transpose", (b.tensor(node, 0),), {"perm": (0, 2, 1)}, suffix="theta_t")
    y = b.emit(node, "matmul", (grid, theta_t), suffix="grid")
    b.reshape(node, y, (size_v[0], *spatial, d), out=node.outputs[0])


@converter("GridSample", attrs=("align_corners", "mode", "padding_mode"))
def _grid_sample(b: Builder, node: OnnxNode) -> None:
    """float32 sampling at a grid computed at run time, in any number of spatial axes (opset 16's bilinear and
    bicubic are linear and cubic)."""
    b.require_dtype(node, 0, ("float32",))
    b.require_dtype(node, 1, ("float32",))
    mode = str(attr(node, "mode", "bilinear" if node.opset < 20 else "linear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise unsupported(node, "mode must be nearest, linear or cubic", "mode")
    padding = str(attr(node, "padding_mode", "zeros"))
    if padding not in ("zeros", "border", "reflection"):
        raise unsupported(node, "padding_mode must be zeros, border or reflection", "padding_mode")
    if mode == "cubic" and padding == "border":  # onnxruntime (as PyTorch) clamps each tap, not the coordinate
        raise unsupported(node, "cubic sampling with border padding: ONNX's reference and onnxruntime differ",
                          "padding_mode")  # fmt: skip
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": bool(int(attr(node, "align_corners", 0)))}
    b.emit(node, "grid_sample", (b.tensor(node, 0), b.tensor(node, 1)), attrs, out=node.outputs[0])
