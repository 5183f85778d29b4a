"""The graph builder the ONNX operator converters write into (no ``onnx`` import here).

The importer walks the ONNX nodes in order; each converter (:mod:`vdla.frontend.onnx_ops`) reads its
inputs from the :class:`Builder` and emits vdla graph nodes. Invariants kept while building:

* every ONNX value maps to a :class:`Value`: a constant (an ndarray in its ONNX dtype, used at import
  time for shapes, axes, pads, scales, ... and turned into a graph parameter only when a node reads it
  as a tensor) or a graph value with its :class:`TensorType`;
* a uint8 ONNX tensor is held as int8 holding ``value - 128`` (``Value.uint8``): quantize/dequantize
  shift their zero points by -128, so the mapping is exact; only operators that commute with the shift
  (max pooling, reshapes, transposes, concatenation) pass such a value on;
* an int64 ONNX tensor is held as int32 (``Value.int64``): a constant only when its values fit int32
  (else it is refused), a graph input is fed as int32; an operator takes such a value only where its
  result provably fits int32 (comparisons, selections, min/max, remainders, right shifts, bitwise
  operations, conversions from narrower types), and the values that only move data (reshapes,
  transposes, slices, concatenation, padding) keep the mark;
* a bool ONNX tensor is a bool graph value (one byte holding 0 or 1);
* every emitted node is typed at once by the operator's type rule (:func:`vdla.graph.ops.infer`), so a
  shape, dtype or attribute vdla cannot run is reported while importing, naming the ONNX node;
* vdla value names are the ONNX names (made unique and printable); values a converter adds are named
  after the ONNX output they lead to (``"<output>:<what>"``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdla.graph.graph import Node
from vdla.graph.opnames import CONCAT, PAD, RESHAPE, SLICE, TRANSPOSE
from vdla.graph.ops import infer
from vdla.graph.passes import fresh_name
from vdla.graph.types import DTYPES, INT_RANGE, TensorType, UnsupportedError

# what vdla holds an ONNX tensor as (named by errors about other dtypes)
HELD = "float32, int8, int32 and bool (uint8 as int8 value - 128, int64 as int32)"
# operators that only move their first input's values (an int64 tensor held as int32 stays one)
MOVES = (RESHAPE, TRANSPOSE, SLICE, CONCAT, PAD)


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return f"array({value.tolist()})"
        return f"array{tuple(value.shape)}"
    if isinstance(value, list) and len(value) > 16:
        return f"[{', '.join(map(repr, value[:16]))}, ...]"
    return repr(value)


@dataclass(frozen=True)
class OnnxNode:
    """One ONNX node as the converters see it: unique ``name``, ``op_type``, input and output value names
    (``""`` for an absent optional one), attributes as Python values (tensors as ndarrays, strings as
    ``str``) and the model's opset of the default domain."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    opset: int = 0
    domain: str = ""

    def attrs_text(self) -> str:
        return ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.attrs.items()))

    def describe(self) -> str:
        """``node 'name' (attributes: a=1, b=[2, 3])``, the prefix of every error about this node."""
        return f"node {self.name!r} (attributes: {self.attrs_text() or 'none'})"

    def input(self, i: int) -> str:
        """Name of input ``i``, ``""`` when absent."""
        return self.inputs[i] if i < len(self.inputs) else ""


def unsupported(node: OnnxNode, message: str, attr: str | None = None) -> UnsupportedError:
    """The error for a node vdla cannot run: names the node, its op type, its attributes and, when one
    attribute is the problem, that attribute and its value."""
    what = f"attribute {attr}={_short(node.attrs.get(attr))}: " if attr is not None else ""
    return UnsupportedError(node.op_type, f"{node.describe()}: {what}{message}")


@dataclass
class Value:
    """An ONNX value during import: a constant (``const``, in its ONNX dtype) or a graph value (``name``
    and ``type``); ``uint8`` marks an int8 value holding ``uint8 - 128``, ``int64`` an int32 value holding
    an int64 tensor; ``bad_dtype`` a graph input of a dtype vdla cannot hold (reported by the first node
    that reads it)."""

    name: str | None = None
    type: TensorType | None = None
    const: np.ndarray | None = None
    uint8: bool = False
    int64: bool = False
    bad_dtype: str | None = None
    param: str | None = None  # the parameter a constant became, once a node read it as a tensor

    @property
    def shape(self) -> tuple[int, ...]:
        if self.const is not None:
            return tuple(int(d) for d in self.const.shape)
        assert self.type is not None
        return self.type.shape

    @property
    def onnx_dtype(self) -> str:
        """The ONNX element type name (``uint8`` for a shifted int8 value, ``int64`` for a held int32)."""
        if self.const is not None:
            return self.const.dtype.name
        if self.bad_dtype is not None:
            return self.bad_dtype
        assert self.type is not None
        return "uint8" if self.uint8 else "int64" if self.int64 else self.type.dtype


_INVALID = re.compile(r"[^\x21-\x7e]")


def valid_name(name: str, fallback: str) -> str:
    """``name`` with whitespace and non-printable characters replaced by ``_`` (``fallback`` if empty)."""
    name = _INVALID.sub("_", name)
    return name or fallback


class Builder:
    """The graph under construction: nodes, parameters, the type of every vdla value and the map from
    ONNX value names to :class:`Value`."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.params: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}
        self.inputs: dict[str, TensorType] = {}
        self.taken: set[str] = set()
        self.preferred: dict[str, str] = {}  # ONNX value name -> its vdla name
        self.used: set[str] = set()  # ONNX values some node or the graph output reads
        self.int64: set[str] = set()  # vdla values (int32) holding an ONNX int64 tensor

    # -- names ------------------------------------------------------------------------------------------
    def reserve(self, onnx_names: Iterable[str]) -> None:
        """Give every ONNX value its vdla name up front, so added values never take one."""
        for n in onnx_names:
            if n and n not in self.preferred:
                self.preferred[n] = self.fresh(valid_name(n, "value"))

    def fresh(self, base: str) -> str:
        """A name not used yet, ``base`` itself when free."""
        return fresh_name(base, self.taken)

    def name_for(self, onnx_name: str) -> str:
        return self.preferred.get(onnx_name) or self.fresh(valid_name(onnx_name, "value"))

    # -- reading inputs -----------------------------------------------------------------------------------
    def has(self, node: OnnxNode, i: int) -> bool:
        return node.input(i) != ""

    def value(self, node: OnnxNode, i: int) -> Value:
        name = node.input(i)
        if name not in self.values:
            raise unsupported(node, f"input {i} {name!r} is not defined before the node")
        return self.values[name]

    def const(self, node: OnnxNode, i: int, what: str) -> np.ndarray | None:
        """The constant value of input ``i`` (None when absent); a computed input is unsupported."""
        if not self.has(node, i):
            return None
        v = self.value(node, i)
        if v.const is None:
            raise unsupported(node, f"{what} (input {i} {node.input(i)!r}) must be a constant (an initializer)")
        return v.const

    def dtype(self, node: OnnxNode, i: int) -> str:
        return self.value(node, i).onnx_dtype

    def shape(self, node: OnnxNode, i: int) -> tuple[int, ...]:
        return self.value(node, i).shape

    def is_const(self, node: OnnxNode, i: int) -> bool:
        return self.has(node, i) and self.value(node, i).const is not None

    def require_dtype(self, node: OnnxNode, i: int, allowed: Sequence[str]) -> str:
        d = self.dtype(node, i)
        if d not in allowed:
            raise unsupported(node, f"input {i} {node.input(i)!r} has dtype {d}; vdla runs this operator on {allowed}")
        return d

    def tensor(self, node: OnnxNode, i: int) -> str:
        """The vdla value of input ``i``; a constant becomes a parameter (float32, int8 or int32; a
        uint8 constant is stored as int8 ``value - 128``)."""
        v = self.value(node, i)
        if v.bad_dtype is not None:
            raise unsupported(node, f"input {i} {node.input(i)!r} has dtype {v.bad_dtype}; vdla holds {HELD}")
        if v.name is not None:
            return v.name
        assert v.const is not None
        if v.param is None:
            v.param = self.add_param(node.input(i), self.param_array(node, i, v.const), named=True)
            if v.const.dtype == np.int64:
                self.int64.add(v.param)
        return v.param

    def param_array(self, node: OnnxNode, i: int, a: np.ndarray) -> np.ndarray:
        """A constant as a graph parameter: uint8 as int8 ``value - 128``, int64 as int32 when its values fit."""
        if a.dtype == np.uint8:
            return (a.astype(np.int16) - 128).astype(np.int8)
        if a.dtype == np.int64 and a.size:
            lo, hi = INT_RANGE["int32"]
            if a.min() < lo or a.max() > hi:
                raise unsupported(
                    node, f"constant input {i} {node.input(i)!r}: int64 values {a.min()}..{a.max()} exceed int32 "
                    "(vdla holds int64 tensors as int32)"
                )  # fmt: skip
            return a.astype(np.int32)
        if a.dtype.name not in DTYPES:
            raise unsupported(node, f"constant input {i} {node.input(i)!r} has dtype {a.dtype.name}; vdla holds {HELD}")
        if a.size == 0:
            raise unsupported(node, f"constant input {i} {node.input(i)!r} is empty (shape {a.shape})")
        return np.asarray(a, order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)

    def is_uint8(self, node: OnnxNode, i: int) -> bool:
        return self.dtype(node, i) == "uint8"

    def add_param(self, base: str, array: np.ndarray, named: bool = False) -> str:
        """A new parameter; ``named``: ``base`` is an ONNX value name whose reserved name it takes."""
        name = self.preferred[base] if named and base in self.preferred else self.fresh(valid_name(base, "param"))
        self.params[name] = np.asarray(array, order="C")
        self.types[name] = TensorType.of(self.params[name], name)
        return name

    def type_of(self, vname: str) -> TensorType:
        return self.types[vname]

    # -- writing outputs ----------------------------------------------------------------------------------
    def emit(
        self,
        node: OnnxNode,
        op: str,
        inputs: Sequence[str],
        attrs: Mapping[str, Any] | None = None,
        out: str | None = None,
        suffix: str | None = None,
        uint8: bool = False,
        int64: bool | None = None,
    ) -> str:
        """Add a vdla node reading ``inputs``; ``out`` names the ONNX output it defines (bound to it), else
        the value is named ``<first output>:<suffix>``. The node is typed at once; a type rule's refusal
        becomes an error naming the ONNX node. ``int64`` marks the result as holding an int64 tensor (by
        default: when the node only moves the values of a first input that holds one)."""
        if out is not None:
            name = self.name_for(out)
        else:
            base = node.outputs[0] if node.outputs and node.outputs[0] else node.name
            name = self.fresh(f"{valid_name(base, 'value')}:{suffix or op}")
        vnode = Node(op, tuple(inputs), name, dict(attrs or {}))
        try:
            t = infer(vnode, [self.types[i] for i in vnode.inputs], self.params)
        except UnsupportedError as e:
            raise unsupported(node, f"as vdla {op}: {e}") from e
        self.nodes.append(vnode)
        self.types[name] = t
        held = (op in MOVES and inputs[0] in self.int64) if int64 is None else int64
        if held:
            self.int64.add(name)
        if out is not None:
            self.values[out] = Value(name=name, type=t, uint8=uint8, int64=name in self.int64)
        return name

    def alias(self, onnx_name: str, vname: str, uint8: bool = False) -> None:
        """Bind ONNX value ``onnx_name`` to the existing vdla value ``vname`` (Identity, Dropout, ...)."""
        self.values[onnx_name] = Value(name=vname, type=self.types[vname], uint8=uint8, int64=vname in self.int64)

    def temp(self, vname: str, uint8: bool = False) -> str:
        """A private ONNX-side name bound to vdla value ``vname``, so a converter can hand an intermediate
        result to code that reads node inputs (never collides: ONNX names hold no NUL)."""
        key = f"\0{vname}"
        self.values[key] = Value(name=vname, type=self.types[vname], uint8=uint8, int64=vname in self.int64)
        return key

    def finish(self, node: OnnxNode, vname: str, dtype: str, out: str | None = None, int64: bool = False) -> str:
        """Bind the node's output (``out``, default its first) to ``vname``, the last value emitted, cast
        to ``dtype`` when the vdla operator widened it (int8 max/min/clip compute in int32, exactly);
        ``int64``: the output holds an int64 tensor."""
        out = node.outputs[0] if out is None else out
        if self.types[vname].dtype != dtype:
            return self.emit(node, "cast", (vname,), {"dtype": dtype}, out=out, int64=int64)
        if not self.nodes or self.nodes[-1].output != vname:  # the value itself, as it is marked
            self.alias(out, vname)
            return vname
        last = self.nodes[-1]
        name = self.name_for(out)
        self.nodes[-1] = Node(last.op, last.inputs, name, last.attrs)
        self.types[name] = self.types.pop(vname)
        if int64 or vname in self.int64:
            self.int64.add(name)
        self.values[out] = Value(name=name, type=self.types[name], int64=name in self.int64)
        return name

    def bind_const(self, onnx_name: str, array: np.ndarray) -> None:
        self.values[onnx_name] = Value(const=np.asarray(array))

    def reshape(self, node: OnnxNode, x: str, shape: Sequence[int], out: str | None = None, uint8=False) -> str:
        """``x`` reshaped to ``shape`` (no node when the shape is already ``shape`` and ``out`` is None)."""
        shape = tuple(int(d) for d in shape)
        if out is None and self.types[x].shape == shape:
            return x
        return self.emit(node, "reshape", (x,), {"shape": shape}, out=out, suffix="reshape", uint8=uint8)


def broadcast_to_axis(scale: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A 1-D per-axis array shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[axis] = -1
    return scale.reshape(shape)


def size(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)
