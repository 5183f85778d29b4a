"""Ahead-of-time CPU code: kernels compiled on the host for another machine's CPU (a board's Cortex-A9 or
A53) and linked into one shared object that the machine loads with ctypes (:mod:`vdla.cpu_fallback.native`).

The kernel bodies are the JIT's (:func:`vdla.cpu_fallback.kernels.emit`, the same IR and the same -O3 pipeline,
:func:`vdla.cpu_fallback.jit.emit_object`); only the entry differs: a plain C function of the data pointers
instead of the CPython vectorcall entries. llvmlite's LLVM emits the objects for every target it was built
with (the x86 wheel includes ARM and AArch64); the ``ziglang`` package's clang and lld link them, with the
target's compiler runtime (64-bit division on armv7 ...) and against its glibc (memcpy, memset), into a
shared object needing nothing but the C library. Objects are cached on disk like the JIT's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

import vdla.cpu_fallback.jit as jit
import vdla.cpu_fallback.kernels as kernels
from vdla.cpu_fallback.native import CpuTarget, NativeCodeError, NativeLibrary, kernel_symbol, sha256
from vdla.cpu_fallback.specs import Spec
from vdla.errors import VdlaError

AOT_EXTRA = "aot"  # the extra of pyproject.toml that installs the linker (and llvmlite)


class LinkerError(VdlaError, RuntimeError):
    """The linker of ahead-of-time code is missing or failed."""


def target_machine(target: CpuTarget) -> llvm.TargetMachine:
    """LLVM's target machine for ``target``: position-independent code for a shared object."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    try:
        t = llvm.Target.from_triple(target.triple)
    except RuntimeError as e:
        raise NativeCodeError(f"this llvmlite's LLVM cannot emit code for {target.triple}: {e}") from e
    return t.create_target_machine(cpu=target.cpu, features=target.features, opt=3, reloc="pic", codemodel="default")


def compile_object(spec: Spec, target: CpuTarget) -> bytes:
    """Object code of ``spec``'s kernel for ``target``, exporting :func:`kernel_symbol` (disk-cached)."""
    symbol = kernel_symbol(spec)
    traits = jit.cpu_traits(target.triple, target.features)
    key = f"{jit.source_fingerprint()}|{llvmlite.__version__}|{target!r}|{traits!r}|{spec!r}"
    key = hashlib.sha256(key.encode())
    cache_dir = jit.disk_cache_dir()
    path = cache_dir / f"aot-{key.hexdigest()}.o" if cache_dir is not None else None
    obj = jit.read_disk(path)
    if obj is None:
        module = ir.Module(name=symbol)
        kernels.emit(spec, module, symbol, None, traits)
        obj = jit.emit_object(module, target_machine(target))
        jit.write_disk(path, obj)
    return obj


def linker_command() -> list[str]:
    """The linker driver: the ``ziglang`` package's ``zig cc``; missing, an error naming the extra."""
    if importlib.util.find_spec("ziglang") is None:
        raise LinkerError(
            "linking ahead-of-time CPU code (--cpu-target) needs the ziglang package (clang and lld for every "
            f"target): pip install 'vdla[{AOT_EXTRA}]'"
        )
    return [sys.executable, "-m", "ziglang", "cc"]


def link(objects: list[bytes], target: CpuTarget) -> bytes:
    """Link ``objects`` into one shared object for ``target`` (with its compiler runtime, against glibc)."""
    command = linker_command()
    with tempfile.TemporaryDirectory(prefix="vdla-link-") as tmp:
        paths = []
        for i, obj in enumerate(objects):
            paths.append(Path(tmp) / f"k{i}.o")
            paths[-1].write_bytes(obj)
        out = Path(tmp) / "kernels.so"
        cmd = [*command, "-target", target.zig, "-shared", "-fPIC", "-o", str(out), *map(str, paths)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise LinkerError(f"linking the {target.name} CPU code failed: {' '.join(cmd[:6])} ...\n{r.stderr}")
        return out.read_bytes()


def build_library(specs: Iterable[Spec], target: CpuTarget) -> NativeLibrary:
    """The shared object of ``specs``' kernels for ``target`` (each distinct spec once)."""
    unique = {kernel_symbol(s): s for s in specs}
    code = link([compile_object(s, target) for s in unique.values()], target)
    scratch = {symbol: kernels.scratch_elements(s) for symbol, s in unique.items()}
    return NativeLibrary(target.name, code, sha256(code), scratch)
