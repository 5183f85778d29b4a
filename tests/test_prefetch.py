"""The schedule search of a large model on two cores (:mod:`vdla.model.prefetch`): the forked helper fills the
schedule cache from the last layer backwards, the artifact is the same byte for byte, and a failing helper
changes nothing."""

from __future__ import annotations

import json
import os
import time
import zipfile

import numpy as np
import pytest
from test_graph_qdq import S_A, residual_graph

from vdla.compiler import ScheduleCache
from vdla.model import prefetch
from vdla.model.pipeline import compile_graph_model

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2, reason="needs fork, 2 CPUs")


def _wait_for(paths, timeout: float = 120.0) -> bool:
    """Whether every path exists before ``timeout`` seconds (the helper is a process of its own)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(p.exists() for p in paths):
            return True
        time.sleep(0.05)
    return False


def test_the_helper_runs_every_layer_backwards_and_is_stopped(tmp_path):
    marks = [tmp_path / f"layer{k}" for k in range(prefetch.MIN_LAYERS)]

    def compile_layer(path):
        path.write_text(str(time.monotonic_ns()))

    with prefetch.prefetch_schedules(compile_layer, marks, tmp_path / "schedules.json"):
        assert _wait_for(marks)
    stamps = [int(p.read_text()) for p in marks]
    assert stamps == sorted(stamps, reverse=True)  # the last layer first
    assert not list(tmp_path.glob("*.tmp"))


def test_no_helper_for_a_small_model_or_without_a_cache(tmp_path):
    marks = [tmp_path / f"layer{k}" for k in range(prefetch.MIN_LAYERS)]
    for layers, cache in ((marks[:-1], tmp_path / "schedules.json"), (marks, None)):
        with prefetch.prefetch_schedules(lambda p: p.write_text("x"), layers, cache):
            time.sleep(0.5)
        assert not any(p.exists() for p in marks)


def test_a_failing_helper_changes_nothing(tmp_path):
    def compile_layer(path):
        raise RuntimeError("the helper fails")

    marks = [tmp_path / f"layer{k}" for k in range(prefetch.MIN_LAYERS)]
    with prefetch.prefetch_schedules(compile_layer, marks, tmp_path / "schedules.json"):
        pass  # the compiler's own loop runs on


def _artifact_bytes(art, path):
    art.save(path)
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        manifest["meta"].pop("compile_seconds")
        return manifest, z.read("image.bin"), z.read("cpu.npz")


def test_the_artifact_is_the_same_with_the_helper(tmp_path, monkeypatch):
    """A model compiled with the helper (its minimum lowered to 2 layers) equals the one compiled without, byte for
    byte, and the helper's entries are in the cache."""
    graph = residual_graph(np.random.default_rng(0), S_A)
    monkeypatch.setattr(prefetch, "MIN_LAYERS", 10**6)
    alone, _ = compile_graph_model(graph, cache=ScheduleCache(tmp_path / "alone.json"))
    monkeypatch.setattr(prefetch, "MIN_LAYERS", 2)
    helped, _ = compile_graph_model(graph, cache=ScheduleCache(tmp_path / "helped.json"))
    assert sum(s.kind == "accel" for s in helped.steps) >= 2
    assert _artifact_bytes(alone, tmp_path / "a.vdla") == _artifact_bytes(helped, tmp_path / "b.vdla")
    assert (
        json.loads((tmp_path / "helped.json").read_text()).keys()
        == json.loads((tmp_path / "alone.json").read_text()).keys()
    )
