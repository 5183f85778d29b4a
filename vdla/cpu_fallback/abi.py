"""The object fields that kernels read directly, located by probing live objects (not assumed).

Kernels are called like builtins (see :class:`codegen.KernelBuilder`) with the array objects themselves,
and check them in generated code: pulling data pointers out through ``ndarray.ctypes`` and checking shapes
in Python would cost more than many kernels do. The ndarray fields are those of numpy's public
``PyArrayObject_fields``, the tuple ones (for keyword argument names) those of CPython's ``PyTupleObject``;
their offsets are found once per process by matching values of known objects, :func:`runtime_values` gives
the per-process addresses the checks compare with, and :func:`python_api` the C API functions called.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import numpy as np

from vdla.errors import VdlaError
from vdla.graph.types import DTYPES


class AbiError(VdlaError, RuntimeError):
    """This CPython or numpy lays out its objects in a way the kernels' entry checks cannot find."""


C_CONTIGUOUS = 0x0001  # NPY_ARRAY_C_CONTIGUOUS
WRITEABLE = 0x0400  # NPY_ARRAY_WRITEABLE
NDARRAY_TYPE = "vdla_ndarray_type"  # names of the i64 globals every kernel module reads
OUT_NAME = "vdla_out_name"  # the interned string "out" (keyword argument names are interned)
# C API functions the kernels' entries call
INCREF = "Py_IncRef"
VECTORCALL = "PyObject_Vectorcall"
SAVE_THREAD = "PyEval_SaveThread"
RESTORE_THREAD = "PyEval_RestoreThread"
PYTHON_API = (INCREF, VECTORCALL, SAVE_THREAD, RESTORE_THREAD)


def descr_global(dtype: str) -> str:
    return f"vdla_descr_{dtype}"


@dataclass(frozen=True)
class ObjectLayout:
    """Byte offsets in an ndarray object (type pointer, data, ndim (int), dims pointer, descr, flags (int))
    and in a tuple (size, first item)."""

    ob_type: int
    data: int
    nd: int
    dims: int
    descr: int
    flags: int
    tuple_size: int
    tuple_items: int


def _word(a: object, off: int, ctype=ctypes.c_uint64) -> int:
    return ctype.from_address(id(a) + off).value


def _find(probes: list, ctype, expected, what: str, start: int = 0) -> int:
    for off in range(start, 160, ctypes.sizeof(ctype)):
        if all(_word(a, off, ctype) == expected(a) for a in probes):
            return off
    raise AbiError(f"cannot locate the {what} field in the object struct")


def probe() -> ObjectLayout:
    """Locate the fields by matching known values of a few differently shaped arrays and tuples."""
    probes = [np.empty(3, np.float32), np.empty((2, 5), np.int8)[:, ::2], np.empty((4, 1, 2), np.int32)]
    data = _find(probes, ctypes.c_uint64, lambda a: a.ctypes.data, "data")
    nd = _find(probes, ctypes.c_int32, lambda a: a.ndim, "ndim", data + 8)
    dims = nd + 8  # the dimensions pointer follows ndim; checked by reading the shapes through it
    for a in probes:
        if tuple((ctypes.c_int64 * a.ndim).from_address(_word(a, dims))) != a.shape:
            raise AbiError("cannot locate the dimensions field in numpy's array struct")
    tuples = [tuple(probes[:n]) for n in (1, 2, 3)]
    tuple_size = _find(tuples, ctypes.c_int64, len, "tuple size", 8)
    return ObjectLayout(
        ob_type=_find(probes, ctypes.c_uint64, lambda a: id(np.ndarray), "type"),
        data=data,
        nd=nd,
        dims=dims,
        descr=_find(probes, ctypes.c_uint64, lambda a: id(a.dtype), "descr", dims),
        flags=_find(probes, ctypes.c_int32, lambda a: a.flags.num, "flags", dims),
        tuple_size=tuple_size,
        tuple_items=_find(tuples, ctypes.c_uint64, lambda t: id(t[0]), "tuple items", tuple_size + 8),
    )


def runtime_values() -> dict[str, int]:
    """Values of the kernels' globals in this process: the ndarray type, canonical dtype objects, "out"."""
    return {
        NDARRAY_TYPE: id(np.ndarray),
        OUT_NAME: id(sys.intern("out")),
        **{descr_global(d): id(np.dtype(d)) for d in DTYPES},
    }


def python_api() -> dict[str, int]:
    """Addresses of the :data:`PYTHON_API` functions in this process, for the JIT's symbol resolution."""
    return {name: ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value for name in PYTHON_API}
