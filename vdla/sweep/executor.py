"""Run one function on many items, locally or on a Ray cluster, with retries and timeouts: the engine of
``vdla sweep`` (and ``vdla fuzz``). It knows nothing about what the items are.

:func:`run_tasks` yields one :class:`Outcome` per item, in the order the items finish. Invariants:

- every item yields exactly one Outcome, under its key, whatever happens to the workers: no item is lost, none
  is reported twice, and no path waits forever (a worker that dies, hangs past ``timeout`` or raises is a failed
  try; the generator always ends);
- an item is tried at most ``1 + retries`` times; its Outcome has ``error`` None and fn's value when a try
  succeeded, else ``value`` None and the last try's error;
- with ``ray`` set, the items run as Ray tasks on that cluster or not at all: an address that cannot be reached
  raises :class:`RayUnavailableError` within 30 s and nothing runs locally in its place.

Locally, the items run in a process pool (``spawn``: workers share no state with the caller, so fn must be a
module-level function and the items picklable). At most ``workers`` items are in flight at once, so a task's
clock starts when it starts. A worker that dies breaks the whole pool, which cannot tell which task killed it:
a task that was alone in the pool counts a failed try; when several were in flight, none is charged, the pool is
rebuilt, and those it reported broken run again one at a time, alone, before anything else starts (a suspect that
dies alone is the culprit and counts the try), so one task's crash never uses up another's tries. A task past its
timeout is a failed try; its worker cannot be stopped alone, so the pool's processes are killed and the other
tasks in flight are resubmitted without counting a try.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from vdla.errors import VdlaError

RAY_CONNECT_SECONDS = 30.0  # an unreachable Ray address fails within this
TRACEBACK_LINES = 12  # the tail of a failed try's traceback kept in Outcome.error


class ExecutorError(VdlaError):
    """The executor cannot run at all (bad arguments, no Ray where Ray was asked for)."""


class RayUnavailableError(ExecutorError):
    """Ray was asked for but is not installed, or its cluster cannot be reached: never a silent local run."""


@dataclass(frozen=True)
class Outcome:
    """What became of one item: fn's value, or the last try's error after every try failed."""

    key: str
    value: Any  # fn(item)'s return when it succeeded, else None
    error: str | None  # the last try's error ("Type: message" + traceback tail) when every try failed
    attempts: int
    seconds: float  # wall time of the tries, summed

    @property
    def ok(self) -> bool:
        return self.error is None


def run_tasks(
    fn: Callable[[Any], Any],
    items: Mapping[str, Any],
    *,
    workers: int | None = None,
    ray: str | None = None,
    retries: int = 2,
    timeout: float | None = None,
) -> Iterator[Outcome]:
    """fn (a module-level, picklable function) on every item, yielding each Outcome as it finishes (any order).

    ``workers``: the tasks in flight at once (default: one per core; on Ray, the cluster's CPUs). ``ray``: None
    runs a local process pool; ``"auto"`` or an address (``host:port``, ``ray://host:port``) runs each item as a
    Ray task on that existing cluster (or the one this process has already initialized). ``retries``: further
    tries of a task that raised, died or timed out. ``timeout``: seconds a try may take (None: no limit).
    """
    if retries < 0:
        raise ExecutorError(f"retries must be >= 0, got {retries}")
    if workers is not None and workers < 1:
        raise ExecutorError(f"workers must be >= 1, got {workers}")
    if timeout is not None and timeout <= 0:
        raise ExecutorError(f"timeout must be > 0 seconds, got {timeout}")
    if not items:
        return iter(())
    if ray is not None:
        return _run_ray(fn, dict(items), ray, workers, retries, timeout)
    return _run_pool(fn, dict(items), workers or os.cpu_count() or 1, retries, timeout)


def _error_text(e: BaseException) -> str:
    """'Type: message' and the tail of the traceback (the worker's, where the pool sent it along)."""
    head = f"{type(e).__name__}: {e}"
    remote = e.__cause__  # concurrent.futures' _RemoteTraceback: the worker's formatted traceback
    tb = str(remote) if remote is not None and type(remote).__name__ == "_RemoteTraceback" else ""
    if not tb:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    tail = [ln for ln in tb.strip("\n ").splitlines() if ln.strip() and ln.strip() != '"""'][-TRACEBACK_LINES:]
    return head + ("\n" + "\n".join(tail) if tail else "")


class _Tries:
    """Per-key try counts and summed seconds; decides retry-or-give-up after a failed try."""

    def __init__(self, retries: int):
        self.retries = retries
        self.count: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def start(self, key: str) -> None:
        self.count[key] = self.count.get(key, 0) + 1

    def add_time(self, key: str, s: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + s

    def succeeded(self, key: str, value: Any) -> Outcome:
        return Outcome(key, value, None, self.count[key], self.seconds.get(key, 0.0))

    def failed(self, key: str, error: str) -> Outcome | None:
        """The final Outcome when the tries are used up, else None (try again)."""
        if self.count[key] > self.retries:
            return Outcome(key, None, error, self.count[key], self.seconds.get(key, 0.0))
        return None


# ---- the local process pool ---------------------------------------------------------------------------------


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Stop every worker now (a hung task cannot be cancelled otherwise) and drop the pool."""
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        if p.is_alive():
            p.kill()
    pool.shutdown(wait=True, cancel_futures=True)


def _run_pool(fn, items: dict, workers: int, retries: int, timeout: float | None) -> Iterator[Outcome]:
    tries = _Tries(retries)
    todo = list(items)  # keys waiting to start, in order; retries go to the front
    suspects: list[str] = []  # in flight when a worker died beside others: each runs again alone, first
    running: dict[Future, tuple[str, float]] = {}
    pool = _new_pool(workers)

    def submit(key: str, queue: list[str]) -> bool:
        """Start ``key`` on the pool; False (``key`` back at the front of ``queue``, its try not counted) when
        the pool broke since the last wait: a worker died after its task's result came back."""
        tries.start(key)
        try:
            running[pool.submit(fn, items[key])] = (key, time.monotonic())
        except BrokenProcessPool:
            tries.count[key] -= 1
            queue.insert(0, key)
            return False
        return True

    try:
        while todo or running or suspects:
            ok = True
            if suspects and not running:
                ok = submit(suspects.pop(0), suspects)
            while ok and todo and not suspects and len(running) < workers:
                ok = submit(todo.pop(0), todo)
            if not ok:  # a new pool; the tasks in flight on the broken one run again alone, uncharged
                _kill_pool(pool)
                for key, _ in running.values():
                    tries.count[key] -= 1
                    suspects.append(key)
                running.clear()
                pool = _new_pool(workers)
                continue
            wait_for = None
            if timeout is not None:
                first_deadline = min(t0 for _, t0 in running.values()) + timeout
                wait_for = max(0.0, first_deadline - time.monotonic()) + 0.05
            done, _ = wait(list(running), timeout=wait_for, return_when=FIRST_COMPLETED)
            now = time.monotonic()
            broken, alone = False, len(running) == 1
            for fut in done:
                key, t0 = running.pop(fut)
                tries.add_time(key, now - t0)
                try:
                    value = fut.result()
                except BrokenProcessPool as e:
                    broken = True
                    if not alone:  # which of the tasks in flight killed it is unknown: none is charged
                        tries.count[key] -= 1
                        suspects.append(key)
                        continue
                    out = tries.failed(key, f"WorkerDied: the worker process died ({e})")
                except BaseException as e:  # fn's own exception, re-raised here by the pool
                    out = tries.failed(key, _error_text(e))
                else:
                    out = tries.succeeded(key, value)
                if out is None:
                    todo.insert(0, key)
                else:
                    yield out
            late = [f for f, (_, t0) in running.items() if timeout is not None and now - t0 > timeout]
            if late or broken:
                # the pool must go: kill it; the late tasks count a failed try, the others start again untried
                _kill_pool(pool)
                for fut, (key, t0) in list(running.items()):
                    del running[fut]
                    tries.add_time(key, now - t0)
                    if fut in late:
                        out = tries.failed(key, f"TimeoutError: the task took over {timeout:g} s (its worker killed)")
                        if out is not None:
                            yield out
                            continue
                    else:
                        tries.count[key] -= 1  # not its fault: this try does not count
                    todo.insert(0, key)
                pool = _new_pool(workers)
    finally:
        _kill_pool(pool)


# ---- Ray ----------------------------------------------------------------------------------------------------


def _reachable(address: str) -> None:
    """A TCP connection to host:port within the connect limit, or RayUnavailableError (ray.init may hang)."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailableError(f"Ray address {address!r}: expected 'auto', HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=RAY_CONNECT_SECONDS / 3):
            pass
    except OSError as e:
        raise RayUnavailableError(f"cannot reach the Ray cluster at {address}: {e}; nothing was run") from None


def connect_ray(address: str):
    """Import Ray and connect to the cluster at ``address`` (or reuse this process's connection): the module."""
    try:
        import ray  # optional: the dist extra
    except ImportError:
        raise RayUnavailableError("--ray needs Ray: pip install 'vdla[dist]'") from None
    if ray.is_initialized():
        return ray
    if address != "auto":
        _reachable(address)
    elif not os.environ.get("RAY_ADDRESS") and not _local_ray_running():
        raise RayUnavailableError("--ray auto: no Ray cluster is running on this machine (start one: ray start --head)")
    t0 = time.monotonic()
    try:
        ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
    except Exception as e:  # ConnectionError, RuntimeError, TimeoutError: Ray's own
        raise RayUnavailableError(
            f"cannot connect to the Ray cluster at {address} ({time.monotonic() - t0:.0f} s): {type(e).__name__}: {e}"
        ) from None
    return ray


def _local_ray_running() -> bool:
    """Whether ``ray start`` left a cluster address for this machine (what address='auto' reads)."""
    return os.path.exists("/tmp/ray/ray_current_cluster")


def _run_ray(fn, items: dict, address: str, workers: int | None, retries: int, timeout: float | None):
    ray = connect_ray(address)  # raised here, before the first next(): the caller's call fails, not a later step
    return _ray_loop(ray, fn, items, workers, retries, timeout)


def _ray_loop(ray, fn, items: dict, workers: int | None, retries: int, timeout: float | None) -> Iterator[Outcome]:
    # Ray schedules each try; retries are counted here (max_retries=0) so that Outcome.attempts is exact and a
    # worker's death, an exception and a timeout are treated alike
    remote = ray.remote(max_retries=0, retry_exceptions=False)(fn)
    limit = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    tries = _Tries(retries)
    todo = list(items)
    running: dict[Any, tuple[str, float]] = {}
    try:
        while todo or running:
            while todo and len(running) < limit:
                key = todo.pop(0)
                tries.start(key)
                running[remote.remote(items[key])] = (key, time.monotonic())
            wait_for = None
            if timeout is not None:
                wait_for = max(0.0, min(t0 for _, t0 in running.values()) + timeout - time.monotonic()) + 0.05
            done, _ = ray.wait(list(running), num_returns=1, timeout=wait_for)
            now = time.monotonic()
            for ref in done:
                key, t0 = running.pop(ref)
                tries.add_time(key, now - t0)
                try:
                    out = tries.succeeded(key, ray.get(ref))
                except Exception as e:  # RayTaskError (fn raised; its cause's traceback), WorkerCrashedError, ...
                    cause = getattr(e, "cause", None)
                    text = _error_text(cause) if isinstance(cause, BaseException) else f"{type(e).__name__}: {e}"
                    out = tries.failed(key, text.strip())
                if out is None:
                    todo.insert(0, key)
                else:
                    yield out
            for ref, (key, t0) in list(running.items()):
                if timeout is not None and now - t0 > timeout:
                    ray.cancel(ref, force=True)
                    del running[ref]
                    tries.add_time(key, now - t0)
                    out = tries.failed(key, f"TimeoutError: the task took over {timeout:g} s (cancelled)")
                    if out is None:
                        todo.insert(0, key)
                    else:
                        yield out
    finally:
        for ref in running:
            ray.cancel(ref, force=True)
