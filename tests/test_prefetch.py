"""A cold compile on two cores (:mod:`vdla.model.prefetch`): the forked helper fills the schedule cache and the
JIT's disk cache from the last item backwards, the artifact is the same byte for byte, and a failing helper
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
from vdla.cpu_fallback import jit
from vdla.cpu_fallback.stacking import compile_graph, graph_specs
from vdla.graph.interp import evaluate
from vdla.model import prefetch
from vdla.model.pipeline import compile_graph_model

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper is a forked process")


@pytest.fixture(autouse=True)
def _a_free_core(monkeypatch):
    """The helper as on an idle machine, whatever the load of the one running the tests."""
    monkeypatch.setattr(prefetch, "free_core", lambda: True)


def _wait_for(paths, timeout: float = 120.0) -> bool:
    """Whether every path exists before ``timeout`` seconds (the helper is a process of its own)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(p.exists() for p in paths):
            return True
        time.sleep(0.05)
    return False


def test_the_helper_runs_every_layer_backwards_and_is_stopped(tmp_path):
    marks = [tmp_path / f"layer{k}" for k in range(prefetch.MIN_ITEMS)]

    def compile_layer(path):
        path.write_text(str(time.monotonic_ns()))

    with prefetch.prefetch_schedules(compile_layer, marks, tmp_path / "schedules.json"):
        assert _wait_for(marks)
    stamps = [int(p.read_text()) for p in marks]
    assert stamps == sorted(stamps, reverse=True)  # the last layer first
    assert not list(tmp_path.glob("*.tmp"))


def test_no_helper_for_a_small_model_without_a_cache_or_a_free_core(tmp_path, monkeypatch):
    forks = []
    monkeypatch.setattr(prefetch.os, "fork", lambda: forks.append(1) or 1 / 0)
    marks = [tmp_path / f"layer{k}" for k in range(prefetch.MIN_ITEMS)]
    for layers, cache in ((marks[:-1], tmp_path / "schedules.json"), (marks, None)):
        with prefetch.prefetch_schedules(lambda p: p.write_text("x"), layers, cache):
            pass
    assert not forks
    monkeypatch.setattr(prefetch, "free_core", lambda: False)  # a busy machine
    with prefetch.prefetch_schedules(lambda p: p.write_text("x"), marks, tmp_path / "schedules.json"):
        pass
    assert not forks
    monkeypatch.setattr(prefetch, "free_core", lambda: True)
    with pytest.raises(ZeroDivisionError):  # the recorder sees a fork where one is due
        with prefetch.prefetch_schedules(lambda p: p.write_text("x"), marks, tmp_path / "schedules.json"):
            pass
    assert forks == [1]


def test_a_failing_helper_changes_nothing(tmp_path):
    def compile_layer(path):
        raise RuntimeError("the helper fails")

    marks = [tmp_path / f"layer{k}" for k in range(prefetch.MIN_ITEMS)]
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
    monkeypatch.setattr(prefetch, "MIN_ITEMS", 10**6)
    alone, _ = compile_graph_model(graph, cache=ScheduleCache(tmp_path / "alone.json"))
    monkeypatch.setattr(prefetch, "MIN_ITEMS", 2)
    helped, _ = compile_graph_model(graph, cache=ScheduleCache(tmp_path / "helped.json"))
    assert sum(s.kind == "accel" for s in helped.steps) >= 2
    assert _artifact_bytes(alone, tmp_path / "a.vdla") == _artifact_bytes(helped, tmp_path / "b.vdla")
    assert (
        json.loads((tmp_path / "helped.json").read_text()).keys()
        == json.loads((tmp_path / "alone.json").read_text()).keys()
    )


def test_the_helper_compiles_the_calibration_kernels_into_the_disk_cache(tmp_path, monkeypatch):
    """Every kernel of a graph JIT-compiled by the helper into an empty disk cache, which the compiler then reads
    (``from_disk``) and runs as it would its own (the interpreter's outputs)."""
    graph = residual_graph(np.random.default_rng(1), S_A)
    monkeypatch.setattr(prefetch, "MIN_ITEMS", 1)
    jit.set_disk_cache(tmp_path / "cpu")
    try:
        jit.clear_cache()
        specs = list(dict.fromkeys(graph_specs(graph)))
        files = [jit._disk_entry(s, jit.engine())[1] for s in specs]
        with prefetch.prefetch_kernels(graph):
            assert _wait_for(files)
        compiled = compile_graph(graph)
        assert all(group.kernel.from_disk for group in compiled.groups if group.kernel is not None)
        x = {k: np.random.default_rng(2).integers(-128, 128, t.shape).astype(t.dtype) for k, t in graph.inputs.items()}
        want = evaluate(graph, x)
        got = compiled.run(x)
        for name in graph.outputs:
            np.testing.assert_array_equal(got[name], want[name])
    finally:
        jit.set_disk_cache(None)
        jit._disk_override.clear()
        jit.clear_cache()
