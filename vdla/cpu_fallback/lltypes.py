"""LLVM types (and function declaration) shared by the CPU fallback's kernel builder and entry points.

A leaf module (it imports only llvmlite), so that :mod:`codegen`, :mod:`entry`, :mod:`ew_emit` and
:mod:`kernels` can all use it without import cycles. ``LL_TYPES`` and ``LL_SIZES`` cover exactly the
tensor dtypes the kernels take.
"""

from __future__ import annotations

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
LL_TYPES = {"int8": I8, "int32": I32, "float32": F32, "bool": I8}
LL_SIZES = {"int8": 1, "int32": 4, "float32": 4, "bool": 1}


def i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """The function ``name`` of ``module``, declared with this signature if the module lacks it."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    return fn
