"""Where vdla keeps what it caches on disk, and the keys a machine trusts: one home for each location.

``cache_root()`` is ``$VDLA_CACHE_DIR`` when set, else ``~/.cache/vdla``. The schedule cache
(:mod:`vdla.compiler.cache`, ``schedules.json``) and the CPU fallback's object code (:mod:`vdla.cpu_fallback.jit`,
``cpu/``) live below it; the test suite points it at ``.vdla_cache`` inside the checkout (git-ignored), so a
test run never reads or writes a user's cache.

``trust_dir()`` is the trust store (:mod:`vdla.model.trust`): the public keys whose signed artifacts may load
their native code here. It is ``$VDLA_TRUST_DIR`` when set, else ``vdla/trusted-keys`` in the user's config
directory (``$XDG_CONFIG_HOME``, else ``~/.config``); the test suite points it at a folder of its own.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$VDLA_CACHE_DIR, else ~/.cache/vdla (read on every call: the environment may change)."""
    return Path(os.environ.get("VDLA_CACHE_DIR") or Path.home() / ".cache" / "vdla")


def trust_dir() -> Path:
    """$VDLA_TRUST_DIR, else $XDG_CONFIG_HOME/vdla/trusted-keys, else ~/.config/vdla/trusted-keys (read on every
    call)."""
    if os.environ.get("VDLA_TRUST_DIR"):
        return Path(os.environ["VDLA_TRUST_DIR"])
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "vdla" / "trusted-keys"
