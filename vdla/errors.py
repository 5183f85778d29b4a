"""The root of vdla's error hierarchy.

Every error vdla raises on purpose derives from :class:`VdlaError`, so a caller (the CLI among them)
can catch one class. Each module keeps its own subclass (``ConfigError``, ``IsaError``,
``CompileError``, ``UnsupportedError``, the runtime's ``RunError`` family, ...) whose message names
what was wrong and where; a subclass that reports bad input also derives from ``ValueError``. An
error raised while handling another chains it (``raise ... from e``) instead of discarding it.
"""

from __future__ import annotations


class VdlaError(Exception):
    """Base class of every error vdla raises on purpose."""
