"""The ONNX converter registry: :data:`CONVERTERS` (ONNX op type -> converter), :data:`ATTRS` (the attributes
each converter understands: any other is refused by the importer before the converter runs) and the helpers
every converter family shares. The families (:mod:`vdla.frontend.onnx_ops.linear`, ...) register with
:func:`converter`; ``vdla.frontend.onnx_ops`` imports them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, unsupported

Converter = Callable[[Builder, OnnxNode], None]
CONVERTERS: dict[str, Converter] = {}
ATTRS: dict[str, frozenset[str]] = {}

FLOAT = ("float32",)
ARITH = ("float32", "int32")  # ONNX integer Add/Sub/Mul wrap in their own width: vdla's int math is int32
ANY = ("float32", "int8", "int32", "uint8")


def converter(*op_types: str, attrs: Sequence[str] = ()) -> Callable[[Converter], Converter]:
    """Register a converter for ``op_types`` understanding ``attrs``."""

    def deco(fn: Converter) -> Converter:
        for t in op_types:
            CONVERTERS[t] = fn
            ATTRS[t] = frozenset(attrs)
        return fn

    return deco


def unary(op: str, allowed: Sequence[str]) -> Converter:
    """The converter of a one-input operator: the vdla elementwise operator ``op`` on ``allowed`` dtypes."""

    def convert(b: Builder, node: OnnxNode) -> None:
        b.require_dtype(node, 0, allowed)
        b.emit(node, op, (b.tensor(node, 0),), out=node.outputs[0])

    return convert


def attr(node: OnnxNode, name: str, default: Any = None) -> Any:
    return node.attrs.get(name, default)


def ints(node: OnnxNode, name: str, default: Sequence[int] | None = None) -> list[int] | None:
    v = node.attrs.get(name)
    return None if v is None and default is None else [int(i) for i in (default if v is None else v)]


def axis_of(node: OnnxNode, axis: int, rank: int, what: str = "axis", name: str | None = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise unsupported(node, f"{what} {axis} is out of range for rank {rank}", name if name in node.attrs else None)
    return axis % max(rank, 1)


def scalar_of(dtype: str, value: np.ndarray) -> int | float:
    v = np.asarray(value).reshape(())
    return float(v) if dtype == "float32" else int(v)


def compact(values: Sequence[int]) -> int | tuple[int, ...]:
    """An int when every entry is the same (the form vdla's window attributes take), else a tuple."""
    t = tuple(int(v) for v in values)
    return t[0] if len(set(t)) == 1 else t
