"""Where vdla keeps what it caches on disk: one root for every cache.

``cache_root()`` is ``$VDLA_CACHE_DIR`` when set, else ``~/.cache/vdla``. The schedule cache
(:mod:`vdla.compiler.cache`, ``schedules.json``) and the CPU fallback's object code (:mod:`vdla.cpu_fallback.jit`,
``cpu/``) live below it; the test suite points it at ``.vdla_cache`` inside the checkout (git-ignored), so a
test run never reads or writes a user's cache.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$VDLA_CACHE_DIR, else ~/.cache/vdla (read on every call: the environment may change)."""
    return Path(os.environ.get("VDLA_CACHE_DIR") or Path.home() / ".cache" / "vdla")
