"""The ndarray object fields that kernels read directly, located by probing live arrays (not assumed).

Kernels take the array objects themselves and check them in generated code: pulling data pointers out
through ``ndarray.ctypes`` and checking shapes in Python would cost more than many kernels do. The fields
are those of numpy's public ``PyArrayObject_fields``; their offsets are found once per process by matching
values of known arrays, and :func:`runtime_values` gives the per-process addresses the checks compare with.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from .ir import DTYPES

C_CONTIGUOUS = 0x0001  # NPY_ARRAY_C_CONTIGUOUS
WRITEABLE = 0x0400  # NPY_ARRAY_WRITEABLE
NDARRAY_TYPE = "vdla_ndarray_type"  # names of the i64 globals every kernel module reads


def descr_global(dtype: str) -> str:
    return f"vdla_descr_{dtype}"


@dataclass(frozen=True)
class ArrayLayout:
    """Byte offsets in an ndarray object: type pointer, data, ndim (int), dims pointer, descr, flags (int)."""

    ob_type: int
    data: int
    nd: int
    dims: int
    descr: int
    flags: int


def _word(a: np.ndarray, off: int, ctype=ctypes.c_uint64) -> int:
    return ctype.from_address(id(a) + off).value


def _find(probes: list[np.ndarray], ctype, expected, what: str, start: int = 0) -> int:
    for off in range(start, 160, ctypes.sizeof(ctype)):
        if all(_word(a, off, ctype) == expected(a) for a in probes):
            return off
    raise RuntimeError(f"cannot locate the {what} field in numpy's array struct")


def probe() -> ArrayLayout:
    """Locate the fields by matching known values of a few differently shaped arrays."""
    probes = [np.empty(3, np.float32), np.empty((2, 5), np.int8)[:, ::2], np.empty((4, 1, 2), np.int32)]
    data = _find(probes, ctypes.c_uint64, lambda a: a.ctypes.data, "data")
    nd = _find(probes, ctypes.c_int32, lambda a: a.ndim, "ndim", data + 8)
    dims = nd + 8  # the dimensions pointer follows ndim; checked by reading the shapes through it
    for a in probes:
        if tuple((ctypes.c_int64 * a.ndim).from_address(_word(a, dims))) != a.shape:
            raise RuntimeError("cannot locate the dimensions field in numpy's array struct")
    return ArrayLayout(
        ob_type=_find(probes, ctypes.c_uint64, lambda a: id(np.ndarray), "type"),
        data=data,
        nd=nd,
        dims=dims,
        descr=_find(probes, ctypes.c_uint64, lambda a: id(a.dtype), "descr", dims),
        flags=_find(probes, ctypes.c_int32, lambda a: a.flags.num, "flags", dims),
    )


def runtime_values() -> dict[str, int]:
    """Values of the kernels' globals in this process: the ndarray type and canonical dtype objects."""
    return {NDARRAY_TYPE: id(np.ndarray), **{descr_global(d): id(np.dtype(d)) for d in DTYPES}}
