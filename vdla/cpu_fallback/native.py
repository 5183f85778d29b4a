"""Ahead-of-time CPU code on the machine that runs it: the CPU targets, and loading their shared objects with
ctypes. Needs numpy and nothing else (no llvmlite, compiler or linker): this is what a board runs.

A :class:`NativeLibrary` is one target's kernels, compiled on the host by :mod:`vdla.cpu_fallback.aot` and
shipped in a model artifact: the shared object's bytes, their SHA-256, and the kernels it exports (symbol ->
float32 scratch elements). A kernel's symbol is derived from its frozen spec (:func:`kernel_symbol`), so the
machine that runs an artifact finds each CPU step's kernels by rebuilding the steps' specs from their graphs,
exactly as the JIT does. Every kernel has the plain C entry ``void f(void **args)`` (data pointers of the
inputs, the output, then the scratch buffer; :func:`vdla.cpu_fallback.entry.emit_c_entry`): it depends on no
Python or numpy object layout, so one object serves any CPython of its machine.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vdla.cpu_fallback.specs import Spec, spec_inputs, spec_op
from vdla.errors import VdlaError
from vdla.graph.types import TensorType, UnsupportedError


class NativeCodeError(VdlaError, ValueError):
    """Ahead-of-time CPU code that cannot be used here: corrupt, of another hash, or lacking a kernel."""


@dataclass(frozen=True)
class CpuTarget:
    """A machine that ahead-of-time CPU code is compiled for.

    ``name`` is the ``--cpu-target`` value; ``triple``, ``cpu`` and ``features`` configure LLVM; ``zig`` is the
    target the linker (``python -m ziglang cc``) takes; ``machines`` are the ``platform.machine()`` values
    of the Linux machines that run the code.
    """

    name: str
    triple: str
    cpu: str
    features: str
    zig: str
    machines: tuple[str, ...]


# The boards' CPUs: the PYNQ-Z1/Z2's dual Cortex-A9 (armv7l Linux, VFPv3 and NEON), the Cortex-A53 of
# Zynq UltraScale+ boards (Ultra96, ZCU104, KV260), and a portable x86-64 baseline.
TARGETS: dict[str, CpuTarget] = {
    t.name: t
    for t in (
        CpuTarget(
            "armv7-linux-gnueabihf",
            "armv7-none-linux-gnueabihf",
            "cortex-a9",
            "+neon,+vfp3,+thumb2",
            "arm-linux-gnueabihf",
            ("armv7l", "armv7"),
        ),
        CpuTarget(
            "aarch64-linux-gnu",
            "aarch64-none-linux-gnu",
            "cortex-a53",
            "+neon",
            "aarch64-linux-gnu",
            ("aarch64", "arm64"),
        ),
        CpuTarget("x86_64-linux-gnu", "x86_64-pc-linux-gnu", "x86-64-v2", "", "x86_64-linux-gnu", ("x86_64", "amd64")),
    )
}
HOST = "host"  # the --cpu-target naming the target of the machine that compiles
PRESET_TARGETS = {"pynq": ("armv7-linux-gnueabihf",)}  # the default --cpu-target of a preset's boards


def machine() -> str:
    """This machine as ``platform.machine()`` names it, lower case."""
    return platform.machine().lower()


def target_for_machine(name: str) -> CpuTarget | None:
    """The known target whose code runs on ``platform.machine()`` value ``name`` (None: none does)."""
    return next((t for t in TARGETS.values() if name.lower() in t.machines), None)


def resolve_target(name: str) -> CpuTarget:
    """The target a ``--cpu-target`` value names (``host``: the one of this machine); an unknown name is an
    error listing the known ones."""
    if name == HOST:
        t = target_for_machine(machine())
        if t is None:
            raise NativeCodeError(f"--cpu-target host: no known target runs on this machine ({machine()})")
        return t
    if name not in TARGETS:
        raise NativeCodeError(f"unknown --cpu-target {name!r}: known targets are {', '.join([HOST, *TARGETS])}")
    return TARGETS[name]


def kernel_symbol(spec: Spec) -> str:
    """The exported name of ``spec``'s kernel in ahead-of-time code: its operator and a hash of the spec."""
    return f"vdla_{spec_op(spec)}_{hashlib.sha256(repr(spec).encode()).hexdigest()[:24]}"


def sha256(code: bytes) -> str:
    return hashlib.sha256(code).hexdigest()


@dataclass(frozen=True)
class NativeLibrary:
    """One target's ahead-of-time kernels: the shared object ``code``, its ``sha256`` as recorded when it was
    built, and its kernels (symbol -> float32 scratch elements)."""

    target: str
    code: bytes = field(repr=False)
    sha256: str
    kernels: dict[str, int] = field(hash=False)

    def check(self) -> None:
        """Refuse code whose bytes do not hash to the recorded SHA-256 (corrupt or replaced)."""
        got = sha256(self.code)
        if got != self.sha256:
            raise NativeCodeError(
                f"the {self.target} CPU code is corrupt: its {len(self.code)} bytes hash to {got[:16]}..., the "
                f"artifact records {self.sha256[:16]}...; compile the model again with --cpu-target {self.target}"
            )

    def load(self) -> LoadedLibrary:
        """Check the hash, then load the code into this process (it must run on this machine)."""
        self.check()
        return LoadedLibrary(self)


class LoadedLibrary:
    """A :class:`NativeLibrary` loaded with ctypes; :meth:`kernel` gives a spec's kernel."""

    def __init__(self, lib: NativeLibrary) -> None:
        self.lib = lib
        fd, path = tempfile.mkstemp(prefix=f"vdla-{lib.target}-", suffix=".so")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(lib.code)
            self._dll = ctypes.CDLL(path)  # the mapping outlives the file
        except OSError as e:
            raise NativeCodeError(f"the {lib.target} CPU code does not load on this machine ({machine()}): {e}") from e
        finally:
            Path(path).unlink(missing_ok=True)

    def kernel(self, spec: Spec) -> NativeKernel:
        symbol = kernel_symbol(spec)
        if symbol not in self.lib.kernels:
            raise NativeCodeError(
                f"the artifact's {self.lib.target} CPU code has no kernel for {spec_op(spec)} ({symbol}): it was "
                "compiled by another vdla version; compile the model again"
            )
        fn = getattr(self._dll, symbol)
        fn.restype, fn.argtypes = None, [ctypes.c_void_p]
        return NativeKernel(spec, fn, self.lib.kernels[symbol], self)


class NativeKernel:
    """A kernel of ahead-of-time code, called like :class:`vdla.cpu_fallback.jit.Kernel`:
    ``kernel(*inputs, out=None)`` with C-contiguous arrays of exactly the compiled shapes and dtypes, ``out``
    (allocated when not given) overlapping no input. The checks run here, in Python, since the C entry
    cannot see the arrays."""

    def __init__(self, spec: Spec, fn: ctypes._CFuncPtr, scratch: int, owner: object) -> None:
        self.spec, self.op = spec, spec_op(spec)
        self.inputs: tuple[TensorType, ...] = spec_inputs(spec)
        self.out: TensorType = spec.out
        self._fn, self._scratch, self._owner = fn, scratch, owner  # the library stays loaded while used
        self._sig = [(t.shape, np.dtype(t.np_dtype)) for t in (*self.inputs, self.out)]
        self._argv_type = ctypes.c_void_p * (len(self._sig) + (scratch > 0))

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if len(arrays) != len(self.inputs):
            raise UnsupportedError(self.op, f"expected {len(self.inputs)} input arrays, got {len(arrays)}")
        if out is None:
            out = np.empty(self.out.shape, self.out.np_dtype)
        for i, (a, (shape, dtype)) in enumerate(zip((*arrays, out), self._sig, strict=True)):
            what = "out" if i == len(arrays) else f"input {i}"
            if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype:
                got = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise UnsupportedError(self.op, f"{what} has {got}, kernel compiled for {dtype}{shape}")
            if not a.flags.c_contiguous:
                raise UnsupportedError(self.op, f"{what} must be C-contiguous (use np.ascontiguousarray)")
        if not out.flags.writeable:
            raise UnsupportedError(self.op, "out is read-only")
        if any(np.may_share_memory(out, a) for a in arrays):
            raise UnsupportedError(self.op, "out must not overlap an input")
        ptrs = [a.ctypes.data for a in (*arrays, out)]
        if self._scratch:
            scratch = np.empty(self._scratch, np.float32)
            ptrs.append(scratch.ctypes.data)
        self._fn(self._argv_type(*ptrs))
        return out

    def __repr__(self) -> str:
        return f"NativeKernel({self.op}, out={self.out})"
