"""The schedule search of a large model on two cores: a forked helper compiles the layers from the last one
backwards while the model compiler compiles them from the first, both through the schedule cache's file.

Each layer's schedule is a function of its cache key alone (what a warm cache relies on), so a schedule the
helper found and the compiler reads back is the one the compiler would have searched: the artifact is the
same, byte for byte. The helper only writes cache entries (its own compiled programs are thrown away); the
cache merges entries and writes the file atomically, so at worst an entry one of them wrote is lost and
searched again. The compiler never waits for the helper: it kills it when its own loop is done (or fails).
Nothing else is shared, and a helper that fails just stops helping.

Used where it pays and is safe: a cache file, at least :data:`MIN_LAYERS` accelerator layers, two or more
CPUs and ``os.fork`` (POSIX).
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

MIN_LAYERS = 16  # below this a model compiles in a few seconds: not worth a process


@contextmanager
def prefetch_schedules(
    compile_layer: Callable[[object], object], layers: Sequence[object], cache_file: Path | None
) -> Iterator[None]:
    """While the block runs (the compiler's own loop over ``layers``), a forked helper runs ``compile_layer``
    on them from the last backwards, filling the schedule cache at ``cache_file`` (None: no helper)."""
    pid = _fork_helper(compile_layer, layers) if _worth_it(layers, cache_file) else None
    try:
        yield
    finally:
        if pid is not None:
            _stop(pid, cache_file)


def _worth_it(layers: Sequence[object], cache_file: Path | None) -> bool:
    return cache_file is not None and len(layers) >= MIN_LAYERS and (os.cpu_count() or 1) >= 2 and hasattr(os, "fork")


def _fork_helper(compile_layer: Callable[[object], object], layers: Sequence[object]) -> int | None:
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
        for layer in reversed(layers):
            compile_layer(layer)
    finally:
        os._exit(0)


def _stop(pid: int, cache_file: Path | None) -> None:
    """Kill the helper, reap it and remove the temporary file it may have been writing."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    if cache_file is not None:
        cache_file.with_name(f"{cache_file.name}.{pid}.tmp").unlink(missing_ok=True)
