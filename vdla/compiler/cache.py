"""The schedule cache: the search's choice per (layer shape, epilogue, thread request, hardware config).

A JSON file, ``schedules.json`` in the cache root (:func:`vdla.paths.cache_root`), updated atomically and
merged with concurrent writers' entries: each read-merge-write holds an exclusive lock on ``schedules.json.lock``
(POSIX ``flock``), so that two processes writing at once (the compiler and its helper, :mod:`vdla.model.prefetch`)
keep both their entries. Entries carry a schema version so a compiler change that alters schedules can
invalidate them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vdla.compiler.spec import Conv2dSpec, EpilogueSpec, InputUpsample, OutputView
from vdla.config import HwConfig
from vdla.paths import cache_root

SCHEMA = 15  # 4: Schedule.res_inp (an int8 residual in INP, added by the identity GEMM); 5: column-subsampled windows;
# 6: fused depthwise steps share their scratch and load resident weights step by step (their cycles changed);
# 7: FusedSchedule.split (one band, its steps dealt to the threads in turn); 8: max pools by doubling (cycles changed);
# 9: a layer's per-channel rows load as one tensor (prologue cycles changed); 10: whole-row pairs copied by a GEMM
# reading OUT, zero weight blocks skipped (cycles changed); 11: tilings of half the rows among the candidates, the
# shortest compute span among near-ties; 12: half-row variants of the 24 lowest-bound candidates only; 13: the
# read arbiter's tie-break in the cycle model (cycles of two-thread programs changed); 14: ties among equal bounds
# in a fixed order (they followed the process's string hashes: a cached choice may be the other one); 15: tiles of
# several batch groups (Schedule.tn) for 1x1 layers over 1x1 images, a tile's accumulators batch-group-major


def cache_key(
    cfg: HwConfig,
    spec: Conv2dSpec,
    epi: EpilogueSpec,
    vthreads: int | str,
    view: OutputView | None = None,
    copy_view: OutputView | None = None,
    up: InputUpsample | None = None,
    zero: str = "",
) -> str:
    """The entry of a layer: schema, config name and hash, shape, epilogue structure, thread request, the
    output view where the layer stores into a larger tensor, the view of a copy it also stores, the input
    blocks it reads from the tensor they upsample, and the key of its zero weight blocks."""
    key = f"v{SCHEMA}:{cfg.name}:{cfg.hash:08x}:{spec.key()}:{epi.key()}:vt{vthreads}"
    key = key if view is None else f"{key}:{view.key()}"
    key = key if copy_view is None else f"{key}:copy:{copy_view.key()}"
    key = key if up is None else f"{key}:{up.key()}"
    return f"{key}:{zero}" if zero else key


class ScheduleCache:
    """Read-through cache of chosen schedules in one JSON file."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else cache_root() / "schedules.json"

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> dict | None:
        """The cached record, or None (a missing or unreadable file counts as empty)."""
        return self._read().get(key)

    def put(self, key: str, record: dict) -> None:
        """Add a record, merged with the file's current entries and written atomically, under the file's lock
        (:func:`_locked`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.path.with_name(f"{self.path.name}.lock")):
            data = self._read()
            data[key] = record
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            tmp.replace(self.path)


LOCK_SECONDS = 10.0  # the longest a put waits for another process's (then it writes unlocked: an entry may be lost)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` while the block runs, waited for at most :data:`LOCK_SECONDS` (a holder
    that dies releases it); without ``fcntl`` (not POSIX), or past the wait, the block runs unlocked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        deadline, locked = time.monotonic() + LOCK_SECONDS, False
        while not locked:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.002)
        try:
            yield
        finally:
            if locked:
                fcntl.flock(f, fcntl.LOCK_UN)
