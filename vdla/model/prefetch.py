"""A cold compile of a large model on two cores: a forked helper does the compiler's cacheable work from the
last item backwards while the compiler does it from the first, the two meeting through a cache on disk.

Two kinds of work are cached on disk and dominate a cold compile: the schedule search of each accelerator layer
(the schedule cache's file, :func:`prefetch_schedules`) and the LLVM compilation of the calibration's JIT kernels
(the JIT's disk cache, :func:`prefetch_kernels`). Each cached result is a function of its key alone (what a warm
cache relies on), so what the compiler reads back from the helper is what it would have computed itself: the
artifact is the same, byte for byte. Both caches write atomically, the schedule cache merging entries under
its file's lock (:mod:`vdla.compiler.cache`), so no entry is lost. The helper only writes cache entries, its other
results are thrown away; the compiler never waits for it and kills it when its own loop is done (or fails; a
lock it holds goes with it); a helper that fails just stops helping.

Used where it pays and is possible: at least :data:`MIN_ITEMS` items, a cache on disk, ``os.fork`` (POSIX) and a
free core (:func:`free_core`). On a busy machine a helper only splits the compile's share of the cores, and the
two overlap where they meet (both at one layer or kernel; the helper also emits the programs it throws away):
about an eighth more CPU in all, a slower compile there.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

MIN_ITEMS = 16  # below this the work takes a few seconds: not worth a process


@contextmanager
def forked_helper(work: Callable[[object], object], items: Sequence[object], cache: Path | None) -> Iterator[None]:
    """While the block runs (the compiler's own loop over ``items``), a forked helper runs ``work`` on them from
    the last backwards, filling the cache at ``cache`` (a file or folder; None: no helper)."""
    pid = _fork(work, items) if _worth_it(items, cache) else None
    try:
        yield
    finally:
        if pid is not None:
            _stop(pid, cache)


def prefetch_schedules(
    compile_layer: Callable[[object], object], layers: Sequence[object], cache_file: Path | None
) -> Iterator[None]:
    """:func:`forked_helper` compiling accelerator layers into the schedule cache's file ``cache_file``."""
    return forked_helper(compile_layer, layers, cache_file)


def prefetch_kernels(graph) -> Iterator[None]:
    """:func:`forked_helper` JIT-compiling the kernels of ``graph`` (a :class:`vdla.graph.Graph` that
    :func:`vdla.cpu_fallback.compile_graph` compiles in the block) into the JIT's disk cache, those not in it."""
    from vdla.cpu_fallback.jit import disk_cache_dir, get_kernel, is_cached
    from vdla.cpu_fallback.stacking import graph_specs

    folder = disk_cache_dir()
    specs = [] if folder is None else [s for s in dict.fromkeys(graph_specs(graph)) if not is_cached(s)]
    return forked_helper(get_kernel, specs, folder)


def _worth_it(items: Sequence[object], cache: Path | None) -> bool:
    return cache is not None and len(items) >= MIN_ITEMS and hasattr(os, "fork") and free_core()


def free_core() -> bool:
    """Whether a core is free for a helper: the 1-minute load average (the compile's own process included) is
    below the CPU count minus a half (on 2 CPUs: below 1.5)."""
    try:
        return os.getloadavg()[0] < (os.cpu_count() or 1) - 0.5
    except OSError:
        return False


def _fork(work: Callable[[object], object], items: Sequence[object]) -> int | None:
    """The helper's process id (None where it cannot be started). The helper never returns into the caller:
    it leaves through ``os._exit``, its output going nowhere."""
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return pid
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        warnings.simplefilter("ignore")
        for item in reversed(items):
            work(item)
    finally:
        os._exit(0)


def _stop(pid: int, cache: Path | None) -> None:
    """Kill the helper, reap it and remove the schedule cache's temporary file it may have been writing (the
    JIT's temporary files have random names: one a helper killed while writing leaves is never read)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    if cache is not None and not cache.is_dir():
        cache.with_name(f"{cache.name}.{pid}.tmp").unlink(missing_ok=True)
