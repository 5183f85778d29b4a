"""JIT engine: host target machine, -O3 pipeline with loop/SLP vectorization, kernel caches, kernel calls.

Calling convention: a kernel's entries are C functions called like builtins (CPython's vectorcall), with
the ndarray *objects*; they check them against the signature in generated code and read the data pointers
from the array struct (see :mod:`abi`). ``kernel(*inputs, out=out)`` runs no Python at all; Python only
allocates a missing output and turns a refusal into a precise error.

Caches: compiled kernels are kept in memory by signature (the frozen spec); object code is also stored
on disk under ``cpu/`` of the cache root (:func:`vdla.paths.cache_root`) unless ``VDLA_CPU_DISK_CACHE=0``
or :func:`set_disk_cache` disables it. The disk key covers the spec, the host CPU and its features,
llvmlite's version and a hash of the code generator's sources.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
import time
import types
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

import vdla.cpu_fallback.abi as abi
import vdla.cpu_fallback.kernels as kernels
import vdla.cpu_fallback.kernels_layout as kernels_layout
import vdla.cpu_fallback.kernels_reduce as kernels_reduce  # registers its emitters with kernels.emit
import vdla.cpu_fallback.kernels_rnn as kernels_rnn  # registers its emitter with kernels.emit
from vdla.cpu_fallback.codegen import CpuTraits
from vdla.cpu_fallback.specs import Spec, spec_inputs, spec_op
from vdla.graph.types import TensorType, UnsupportedError
from vdla.paths import cache_root


def source_fingerprint() -> str:
    """Hash of the code generator's sources: any change to them invalidates the disk cache."""
    import vdla.cpu_fallback.codegen as codegen
    import vdla.cpu_fallback.entry as entry
    import vdla.cpu_fallback.ew_emit as ew_emit
    import vdla.cpu_fallback.lltypes as lltypes
    import vdla.cpu_fallback.specs as specs
    from vdla.graph import ew, ewmath, ops, oracle, types, window
    from vdla.isa import arith

    h = hashlib.sha256()
    modules = (abi, lltypes, entry, codegen, ew_emit, specs, kernels, kernels_layout, kernels_reduce, kernels_rnn)
    modules += (ew, ewmath, ops, oracle, types, window, arith)
    for mod in modules:
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()[:16]


def emit_object(module: ir.Module, tm: llvm.TargetMachine) -> bytes:
    """Optimize ``module`` at -O3 (loop + SLP vectorization) for ``tm``'s target and CPU; its object code.
    The one pipeline of the JIT and of ahead-of-time code (:mod:`vdla.cpu_fallback.aot`)."""
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    mod = llvm.parse_assembly(str(module))
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod)


def cpu_traits(triple: str, features: str) -> CpuTraits:
    """A CPU's (LLVM triple, feature string) traits: a fused multiply-add on every AArch64 CPU, x86 with FMA3
    and 32-bit ARM with VFPv4; fast float division and int8 dot products on float FMAs on x86 only. The
    boards' cores divide slowly: the Cortex-A9's VFP in ~15 cycles, unpipelined (NEON has no division), the
    Cortex-A53 in ~8-9 cycles per float lane, against ~20 dual-issued integer instructions for a quantize
    without division; and their int8 products go to NEON's integer lanes (armv7 NEON float is not IEEE, so
    LLVM leaves float loops scalar there)."""
    flags = set(features.split(","))
    arm = triple.startswith(("aarch64", "arm", "thumb"))  # arm64 too
    fma = triple.startswith(("aarch64", "arm64")) or bool(flags & {"+fma", "+vfp4", "+vfp4d16"})
    return CpuTraits(fma=fma, fast_divide=not arm, float_int8_dot=not arm)


class _Engine:
    """Process-wide LLVM state: host target machine and optimization pipeline settings."""

    def __init__(self) -> None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.cpu = llvm.get_host_cpu_name()
        self.features = llvm.get_host_cpu_features().flatten()
        self.traits = cpu_traits(llvm.get_process_triple(), self.features)
        self.tm = self._target_machine()
        self.layout = abi.probe()
        for symbol, address in abi.python_api().items():
            llvm.add_symbol(symbol, address)
        self.fingerprint = "|".join(
            (source_fingerprint(), llvmlite.__version__, self.cpu, self.features, repr(self.layout))
        )

    def _target_machine(self) -> llvm.TargetMachine:
        target = llvm.Target.from_triple(llvm.get_process_triple())
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=3, jit=True)

    def compile(self, module: ir.Module) -> bytes:
        """Optimize at -O3 (loop + SLP vectorization) for the host CPU and emit object code."""
        return emit_object(module, self.tm)

    def load(self, obj: bytes, name: str) -> tuple[llvm.ExecutionEngine, tuple[int, int]]:
        """Load object code into a new engine (which owns and frees its own target machine); returns the
        engine and the addresses of the kernel's two entries (the keyword one is 0 if there is none)."""
        ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._target_machine())
        ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
        ee.finalize_object()
        for symbol, value in abi.runtime_values().items():
            addr = ee.get_global_value_address(symbol)
            if addr:
                ctypes.c_uint64.from_address(addr).value = value
        return ee, (ee.get_function_address(name), ee.get_function_address(f"{name}_call"))


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``."""

    _fields_ = [
        ("ml_name", ctypes.c_char_p),
        ("ml_meth", ctypes.c_void_p),
        ("ml_flags", ctypes.c_int),
        ("ml_doc", ctypes.c_char_p),
    ]


METH_KEYWORDS, METH_FASTCALL = 0x0002, 0x0080
_new_builtin = ctypes.pythonapi.PyCFunction_New
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.c_void_p, ctypes.py_object]


class Kernel:
    """A compiled kernel. Call it with C-contiguous arrays of exactly the compiled shapes and dtypes.

    ``kernel(*inputs, out=None)`` returns the output array (allocated unless ``out`` is given; ``out`` must
    not overlap the inputs). ``compile_s`` is the time it took to build (or load from disk).
    """

    def __init__(
        self,
        spec: Spec,
        name: str,
        engine: llvm.ExecutionEngine,
        addrs: tuple[int, int],
        compile_s: float,
        from_disk: bool,
    ) -> None:
        self.spec, self.name, self.compile_s, self.from_disk = spec, name, compile_s, from_disk
        self.op = spec_op(spec)
        self.inputs: tuple[TensorType, ...] = spec_inputs(spec)
        self.out: TensorType = spec.out
        self._engine = engine  # keeps the code alive
        self._sig = [(t.shape, t.np_dtype) for t in self.inputs]
        self._n_inputs = len(self._sig)
        self._out_shape, self._out_dtype = self.out.shape, self.out.np_dtype
        # The entries are C functions wrapped as builtins (see entry.emit_entries). ``_fn(*inputs, out)``
        # returns ``out`` after running, anything else when it refuses the arrays.
        entry, call = addrs
        self._methods = [_MethodDef(name.encode(), entry, METH_FASTCALL, None)]
        entry = _new_builtin(ctypes.byref(self._methods[0]), None)
        scratch = kernels.scratch_elements(spec)
        self._fn = (lambda *args: entry(*args, np.empty(scratch, np.float32))) if scratch else entry
        if call:
            # ``kernel(*inputs, out=out)`` calls the keyword entry without running any Python; it hands every
            # other call to the Python ``Kernel.__call__``. Only a class attribute can serve calls, hence
            # a subclass of this one kernel.
            self._methods.append(_MethodDef(name.encode(), call, METH_FASTCALL | METH_KEYWORDS, None))
            call = _new_builtin(ctypes.byref(self._methods[1]), types.MethodType(Kernel.__call__, self))
            self.__class__ = type("Kernel", (Kernel,), {"__call__": staticmethod(call)})

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(self._out_shape, self._out_dtype)
        if self._fn(*arrays, out) is not out:
            self._retry(arrays, out)
        return out

    def _check(self, what: str, a: object, shape: tuple[int, ...], dtype: np.dtype) -> None:
        if not isinstance(a, np.ndarray):
            raise UnsupportedError(self.op, f"{what} must be a numpy array, got {type(a).__name__}")
        if a.shape != shape or a.dtype != dtype:
            raise UnsupportedError(self.op, f"{what} has {a.dtype}{a.shape}, kernel compiled for {dtype}{shape}")
        if not a.flags.c_contiguous:
            raise UnsupportedError(self.op, f"{what} must be C-contiguous (use np.ascontiguousarray)")
        if what == "out" and not a.flags.writeable:
            raise UnsupportedError(self.op, "out is read-only")

    def _retry(self, arrays: tuple[np.ndarray, ...], out: np.ndarray) -> None:
        """The generated checks refused an argument: name the problem, or, for arrays that are valid but
        not plain (subclasses, equal but non-canonical dtype objects), run on plain views of them."""
        if len(arrays) != self._n_inputs:
            raise UnsupportedError(self.op, f"expected {self._n_inputs} input arrays, got {len(arrays)}")
        for i, (a, (shape, dtype)) in enumerate(zip(arrays, self._sig, strict=True)):
            self._check(f"input {i}", a, shape, dtype)
        self._check("out", out, self._out_shape, self._out_dtype)
        if any(np.may_share_memory(out, a) for a in arrays):
            raise UnsupportedError(self.op, "out must not overlap an input")
        plain = tuple(np.asarray(a).view(dtype) for a, (_, dtype) in zip(arrays, self._sig, strict=True))
        view = np.asarray(out).view(self._out_dtype)
        if self._fn(*plain, view) is not view:
            raise RuntimeError(f"{self.op}: kernel refused validated arrays")

    def __repr__(self) -> str:
        return f"Kernel({self.op}, {self.name}, out={self.out})"


_lock = threading.RLock()
_engine: _Engine | None = None
_kernels: dict[Spec, Kernel] = {}
_disk_override: list[Path | None] = []


def engine() -> _Engine:
    global _engine
    with _lock:
        if _engine is None:
            _engine = _Engine()
        return _engine


def set_disk_cache(path: Path | str | None) -> None:
    """Use ``path`` for the object-code cache (``None`` disables it), overriding the environment."""
    _disk_override[:] = [None if path is None else Path(path)]


def disk_cache_dir() -> Path | None:
    """Directory of the on-disk object cache, or None if disabled."""
    if _disk_override:
        return _disk_override[0]
    if os.environ.get("VDLA_CPU_DISK_CACHE", "1") == "0":
        return None
    return cache_root() / "cpu"


def clear_cache() -> None:
    """Forget compiled kernels kept in memory (the disk cache is untouched)."""
    with _lock:
        _kernels.clear()


def read_disk(path: Path | None) -> bytes | None:
    try:
        return path.read_bytes() if path is not None else None
    except OSError:
        return None


def write_disk(path: Path | None, obj: bytes) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as f:
            f.write(obj)
        os.replace(f.name, path)
    except OSError:
        pass  # the disk cache is an optimization: an unwritable directory only costs a recompile


def _disk_entry(spec: Spec, eng: _Engine) -> tuple[str, Path | None]:
    """The kernel's symbol name and its object file in the disk cache (None: no disk cache)."""
    key = hashlib.sha256(f"{eng.fingerprint}|{spec!r}".encode()).hexdigest()
    cache_dir = disk_cache_dir()
    return f"vdla_{spec_op(spec)}_{key[:20]}", cache_dir / f"{key}.o" if cache_dir is not None else None


def is_cached(spec: Spec) -> bool:
    """Whether :func:`get_kernel` has ``spec``'s kernel without compiling it (in memory or on disk)."""
    with _lock:
        if spec in _kernels:
            return True
        path = _disk_entry(spec, engine())[1]
    return path is not None and path.exists()


def get_kernel(spec: Spec) -> Kernel:
    """The kernel for ``spec``: from the memory cache, else the disk cache, else JIT-compiled."""
    with _lock:
        kernel = _kernels.get(spec)
        if kernel is not None:
            return kernel
        eng = engine()
        t0 = time.perf_counter()
        name, path = _disk_entry(spec, eng)
        obj = read_disk(path)
        from_disk = obj is not None
        if obj is None:
            module = ir.Module(name=name)
            kernels.emit(spec, module, name, eng.layout, eng.traits)
            obj = eng.compile(module)
            write_disk(path, obj)
        ee, addrs = eng.load(obj, name)
        kernel = Kernel(spec, name, ee, addrs, time.perf_counter() - t0, from_disk)
        _kernels[spec] = kernel
        return kernel
