"""Helpers of the tests that take a compiled artifact apart: its test input and copies of it with members edited."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np


def sample_input(seed: int = 0) -> np.ndarray:
    """An input of the tests' small conv net (1x8x6x6), seeded."""
    return np.random.default_rng(seed).normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)


def rewrite_zip(src: Path, dst: Path, edit: Callable[[dict[str, bytes]], None]) -> Path:
    """A copy of the zip ``src`` at ``dst`` with ``edit(files)`` applied to its members (name -> bytes)."""
    with zipfile.ZipFile(src) as z:
        files = {n: z.read(n) for n in z.namelist()}
    edit(files)
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
    return dst
