"""Value types of the graph: element types and the dense tensor type every node input and output has.

``TensorType`` is frozen and hashable: it is part of every kernel and schedule cache key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
