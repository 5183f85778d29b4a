"""Value types of the graph: element types and the dense tensor type every node input and output has.

``TensorType`` is frozen and hashable: it is part of every kernel and schedule cache key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vdla.errors import VdlaError
from vdla.isa.arith import INT8_MAX, INT8_MIN

# the element types of the graph: bool is one byte holding 0 or 1 (numpy's bool_)
DTYPES = ("int8", "int32", "float32", "bool")
INT_RANGE = {"int8": (INT8_MIN, INT8_MAX), "int32": (-(2**31), 2**31 - 1)}  # the integer dtypes


def narrow_integers(a: np.ndarray, dtype: str) -> np.ndarray:
    """Integer array ``a`` (an ONNX model's int64 token ids, say) as integer ``dtype`` (int8 or int32),
    exactly: a value outside ``dtype``'s range raises ``ValueError`` naming it, its index and the range."""
    lo, hi = INT_RANGE[dtype]
    bad = (a < lo) | (a > hi)
    if bad.any():
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))
        raise ValueError(f"{int(bad.sum())} value(s) outside {dtype}'s [{lo}, {hi}]: {a[first]} at {list(first)}")
    return a.astype(dtype)


class UnsupportedError(VdlaError, ValueError):
    """An operator was asked for a dtype, shape or attribute combination it does not support."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__(f"{op}: {message}")
        self.op = op


@dataclass(frozen=True)
class Quant:
    """Quantization of an integer tensor: ``real = (q - zero_point) * scale``.

    ``scale`` has one entry (per tensor) or one per slice along ``axis`` (per channel); every scale is
    positive and finite. vdla's accelerator path uses symmetric int8 (zero point 0).
    """

    scale: tuple[float, ...]
    zero_point: int = 0
    axis: int | None = None

    def __post_init__(self) -> None:
        if not self.scale or not all(math.isfinite(s) and s > 0 for s in self.scale):
            raise UnsupportedError("quant", f"scales must be positive and finite, got {self.scale}")
        if len(self.scale) > 1 and self.axis is None:
            raise UnsupportedError("quant", f"{len(self.scale)} scales need an axis")

    @staticmethod
    def of(scale, zero_point=0, axis: int | None = None) -> Quant:
        """From a scalar or 1-D scale (numpy or Python) and an integer zero point."""
        s = tuple(float(v) for v in np.atleast_1d(np.asarray(scale, np.float64)).ravel())
        zp = np.asarray(zero_point).ravel()
        if zp.size and np.any(zp != zp[0]):
            raise UnsupportedError("quant", f"per-channel zero points are not supported, got {zp.tolist()}")
        return Quant(s, int(zp[0]) if zp.size else 0, axis if len(s) > 1 else None)

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1

    def scales(self) -> np.ndarray:
        return np.asarray(self.scale, np.float64)


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype name (one of :data:`DTYPES`) of a dense C-contiguous tensor, and, for a quantized
    integer tensor, its :class:`Quant` (``None`` for float tensors and plain integers)."""

    shape: tuple[int, ...]
    dtype: str
    quant: Quant | None = None

    @property
    def plain(self) -> TensorType:
        """The type without its quantization (what a kernel signature holds)."""
        return self if self.quant is None else TensorType(self.shape, self.dtype)

    def __str__(self) -> str:
        q = ""
        if self.quant is not None:
            s = self.quant.scale
            q = f" q(scale={s[0]:.4g}{'..' if len(s) > 1 else ''}, zp={self.quant.zero_point})"
        return f"{self.dtype}[{'x'.join(map(str, self.shape))}]{q}"

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


def dtype_kind(dtype: str) -> str:
    """What arithmetic a dtype takes: 'float' (float32), 'int' (int8, int32) or 'bool'."""
    return "float" if is_float(dtype) else "int" if dtype in INT_RANGE else "bool"
