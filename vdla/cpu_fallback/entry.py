"""Entry points of a kernel: the vectorcall glue between Python and the kernel's body (JIT), or a plain C
entry (ahead-of-time code for another machine, :func:`emit_c_entry`).

A kernel's body (see :class:`vdla.cpu_fallback.codegen.KernelBuilder`) takes noalias data pointers; its
entries, emitted here, take the ndarray objects themselves and are called like builtins (see
:mod:`vdla.cpu_fallback.jit`). Invariants: an entry runs the body only after every argument passed all
checks against the compiled signature, reads nothing past an object's header before knowing it is an
ndarray of the right rank, and always returns a new reference. The struct offsets come from
:mod:`vdla.cpu_fallback.abi`; the runtime globals (ndarray type, dtype objects, the ``out`` name) are
zero here and set when the code is loaded (``jit._Engine.load``).
"""

from __future__ import annotations

from llvmlite import ir

from vdla.cpu_fallback.abi import (
    C_CONTIGUOUS,
    INCREF,
    NDARRAY_TYPE,
    OUT_NAME,
    RESTORE_THREAD,
    SAVE_THREAD,
    VECTORCALL,
    WRITEABLE,
    ObjectLayout,
    descr_global,
)
from vdla.cpu_fallback.lltypes import I8, I32, I64, LL_SIZES, PTR, declare, i64
from vdla.graph.types import TensorType

# kernels touching at least this many bytes of arrays run without the GIL (releasing it costs ~0.1 us)
GIL_RELEASE_BYTES = 1 << 18


def emit_entries(
    module: ir.Module, body: ir.Function, name: str, types: list[TensorType], n_args: int, layout: ObjectLayout
) -> None:
    """Emit the exported entries of the kernel whose body is ``body``.

    ``types`` are the inputs then the output; ``n_args`` counts the body's arguments (one more than
    ``types`` with a scratch buffer). The entries are CPython vectorcall functions, so that a call from
    Python costs what a builtin's does:

    - ``name(self, args, nargs)`` (``METH_FASTCALL``) takes the inputs, the output and the scratch buffer
      if any, and returns a new reference to the output, or to ``self`` when it refuses the arguments;
    - ``name_call(self, args, nargs, kwnames)`` (``METH_FASTCALL | METH_KEYWORDS``, kernels without
      scratch) takes ``(*inputs, out=out)``, returns a new reference to ``out``, and hands any call it
      does not take (no ``out``, refused arguments) to ``self``, the Python implementation of the call.

    Both check the argument count and every array object against the compiled signature (type, ndim,
    shape, dtype object, C-contiguity, writeable output, no overlap of output and inputs) using the
    struct offsets in ``layout`` (found by :mod:`vdla.cpu_fallback.abi`), then run the body, without the
    GIL when it touches at least ``GIL_RELEASE_BYTES``.
    """
    run = _emit_run(module, body, name, types, n_args, layout)
    n_in = len(types) - 1

    entry = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), name=name)
    self_obj, argv, nargs = entry.args
    b = _EntryBuilder(entry, "refuse")
    b.require(b.icmp_signed("==", nargs, i64(n_args)))
    b.require(b.call(run, [argv]))
    b.ret(b.incref(b.arg(argv, n_in)))
    b.position_at_end(b.fail)
    b.ret(b.incref(self_obj))

    if n_args > len(types):
        return  # the scratch buffer comes from Python: no keyword entry
    call = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64, PTR]), name=f"{name}_call")
    self_obj, argv, nargs, kwnames = call.args
    b = _EntryBuilder(call, "python")
    b.require(b.icmp_unsigned("!=", kwnames, ir.Constant(PTR, None)))
    b.require(b.icmp_signed("==", nargs, i64(n_in)))
    b.require(b.icmp_signed("==", b.field(kwnames, layout.tuple_size, I64), i64(1)))
    b.require(b.icmp_unsigned("==", b.field(kwnames, layout.tuple_items, I64), b.runtime_global(OUT_NAME)))
    b.require(b.call(run, [argv]))  # args holds the positional arguments, then the keyword values
    b.ret(b.incref(b.arg(argv, n_in)))
    b.position_at_end(b.fail)
    b.ret(b.py_call(VECTORCALL, PTR, self_obj, argv, nargs, kwnames))


def _emit_run(
    module: ir.Module, body: ir.Function, name: str, types: list[TensorType], n_args: int, layout: ObjectLayout
) -> ir.Function:
    """``i1 run(args)``: check the array objects ``args[:n_args]`` and run the body (true), or refuse."""
    run = ir.Function(module, ir.FunctionType(ir.IntType(1), [PTR]), name=f"{name}_run")
    run.linkage = "internal"
    b = _EntryBuilder(run, "refuse")
    objs = [b.arg(run.args[0], i) for i in range(n_args)]
    data = []
    for i, (obj, t) in enumerate(zip(objs, types, strict=False)):
        # read nothing past the object header before knowing it is an ndarray of the right rank
        b.require(b.icmp_unsigned("==", b.field(obj, layout.ob_type, I64), b.runtime_global(NDARRAY_TYPE)))
        b.require(b.icmp_signed("==", b.field(obj, layout.nd, I32), ir.Constant(I32, len(t.shape))))
        mask = C_CONTIGUOUS | (WRITEABLE if i == len(types) - 1 else 0)
        flags = b.and_(b.field(obj, layout.flags, I32), ir.Constant(I32, mask))
        ok = b.and_(
            b.icmp_unsigned("==", flags, ir.Constant(I32, mask)),
            b.icmp_unsigned("==", b.field(obj, layout.descr, I64), b.runtime_global(descr_global(t.dtype))),
        )
        dims = b.field(obj, layout.dims, PTR)
        for j, d in enumerate(t.shape):
            dim = b.load(b.gep(dims, [i64(j)], source_etype=I64), typ=I64)
            ok = b.and_(ok, b.icmp_signed("==", dim, i64(d)))
        b.require(ok)
        data.append(b.field(obj, layout.data, PTR))
    out_lo = b.ptrtoint(data[-1], I64)
    out_hi = b.add(out_lo, i64(types[-1].size * LL_SIZES[types[-1].dtype]))
    for ptr, t in zip(data[:-1], types[:-1], strict=True):
        lo = b.ptrtoint(ptr, I64)
        hi = b.add(lo, i64(t.size * LL_SIZES[t.dtype]))
        b.require(b.not_(b.and_(b.icmp_unsigned("<", out_lo, hi), b.icmp_unsigned("<", lo, out_hi))))
    args = data + [b.field(obj, layout.data, PTR) for obj in objs[len(types) :]]
    if sum(t.size * LL_SIZES[t.dtype] for t in types) >= GIL_RELEASE_BYTES:
        state = b.py_call(SAVE_THREAD, PTR)
        b.call(body, args)
        b.py_call(RESTORE_THREAD, ir.VoidType(), state)
    else:
        b.call(body, args)
    b.ret(ir.Constant(ir.IntType(1), 1))
    b.position_at_end(b.fail)
    b.ret(ir.Constant(ir.IntType(1), 0))
    return run


def emit_c_entry(module: ir.Module, body: ir.Function, name: str, n_args: int) -> None:
    """Emit ``void name(void **args)``: the plain C entry of ahead-of-time code (:mod:`vdla.cpu_fallback.aot`).

    ``args`` holds the data pointers of the inputs, the output, then the scratch buffer if any: ``n_args``
    pointers to C-contiguous buffers of exactly the compiled shapes and dtypes, the output overlapping no
    input. The entry checks nothing (it cannot see the arrays): its caller (:class:`vdla.cpu_fallback.native.
    NativeKernel`) does. It depends on no Python or numpy object layout, so one object serves any Python.
    """
    entry = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=name)
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    argv = entry.args[0]
    b.call(body, [b.load(b.gep(argv, [i64(i)], source_etype=PTR), typ=PTR) for i in range(n_args)])
    b.ret_void()


class _EntryBuilder(ir.IRBuilder):
    """Builder of an entry function: object fields, runtime globals, C API calls, and ``require``, which
    branches to the ``fail`` block (positioned at by the caller once the success path is done)."""

    def __init__(self, fn: ir.Function, fail: str) -> None:
        super().__init__(fn.append_basic_block("entry"))
        self.fail = fn.append_basic_block(fail)

    def require(self, cond: ir.Value) -> None:
        ok = self.function.append_basic_block("ok")
        self.cbranch(cond, ok, self.fail)
        self.position_at_end(ok)

    def field(self, obj: ir.Value, off: int, ty: ir.Type) -> ir.Value:
        return self.load(self.gep(obj, [i64(off)], source_etype=I8), typ=ty)

    def arg(self, argv: ir.Value, i: int) -> ir.Value:
        return self.load(self.gep(argv, [i64(i)], source_etype=PTR), typ=PTR)

    def runtime_global(self, name: str) -> ir.Value:
        module = self.function.module
        g = module.globals.get(name) or ir.GlobalVariable(module, I64, name=name)
        g.initializer = ir.Constant(I64, 0)  # set after loading (see jit._Engine.load)
        return self.load(g, typ=I64)

    def py_call(self, symbol: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
        """Call a C API function of this Python (resolved when the code is loaded, abi.PYTHON_API)."""
        return self.call(declare(self.function.module, symbol, ret, [a.type for a in args]), list(args))

    def incref(self, obj: ir.Value) -> ir.Value:
        self.py_call(INCREF, ir.VoidType(), obj)
        return obj
