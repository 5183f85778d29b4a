"""Schedule search: the cost model tracks the simulator, the search picks fast schedules, the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from vdla.compiler import ScheduleCache, compile_conv2d
from vdla.compiler.conv_lowering import ConvLowering
from vdla.compiler.costmodel import CostModel
from vdla.compiler.search import build_stream, search, timed, timed_span
from vdla.compiler.spec import Conv2dSpec, EpilogueSpec
from vdla.compiler.tiling import candidate_tiles, half_rows
from vdla.config import load_config
from vdla.graph.epilogue import Epilogue
from vdla.paths import cache_root

EPI = EpilogueSpec(bias=True, shift=8, clip=(0, 127))


def lowering(shape=(1, 64, 14, 14), oc=64, k=3, s=1, cfg="pynq") -> ConvLowering:
    return ConvLowering(Conv2dSpec.make(shape, oc, k, s, "same"), EPI, load_config(cfg))


@pytest.mark.parametrize(
    "args", [((1, 64, 14, 14), 64, 3, 1), ((1, 64, 28, 28), 128, 1, 2), ((1, 3, 32, 32), 16, 7, 2)]
)
def test_cost_model_tracks_the_simulator(args):
    low = lowering(*args)
    model = CostModel(low)
    cands = [s for v in (1, 2, 4) for s in candidate_tiles(low, v)]
    for s in cands[:: max(1, len(cands) // 6)]:
        est = model.estimate(s)
        assert model.bound(s) <= est.cycles
        assert est.cycles == pytest.approx(timed(low, build_stream(low, s)).cycles, rel=0.05)


@pytest.mark.parametrize("args", [((1, 64, 14, 14), 64, 3, 1), ((1, 64, 28, 28), 128, 1, 2)])
def test_cost_model_tracks_the_simulator_with_the_residual_in_inp(args):
    """A residual in INP: its LOADs are load-stage work of the tile's last step, its identity GEMM compute."""
    shape, oc, k, s = args
    epi = EpilogueSpec(bias=True, multiplier="row", shift=12, clip=(0, 127), residual="int8")
    low = ConvLowering(Conv2dSpec.make(shape, oc, k, s, "same"), epi, load_config("pynq"))
    model = CostModel(low)
    cands = [s for v in (1, 2, 4) for s in candidate_tiles(low, v) if s.res_inp]
    assert cands
    for s in cands[:: max(1, len(cands) // 6)]:
        est = model.estimate(s)
        assert model.bound(s) <= est.cycles
        assert est.cycles == pytest.approx(timed(low, build_stream(low, s)).cycles, rel=0.05)


@pytest.mark.parametrize("rescale", [None, (-128, 127, 13, 11, 20)])
@pytest.mark.parametrize("args", [((1, 64, 14, 14), 64, 3, 1), ((1, 32, 56, 56), 32, 1, 1)])
def test_cost_model_tracks_the_simulator_with_the_residual_in_the_accumulators(args, rescale):
    """A residual LOADed into the accumulators on the compute stage (as it is, or rescaled): the LOAD, after the
    tile's last GEMM, waits for the load-stage instruction then in flight on the DRAM read channel."""
    shape, oc, k, s = args
    epi = EpilogueSpec(bias=True, multiplier="row", shift=12, clip=(0, 127), residual="int8", rescale=rescale)
    low = ConvLowering(Conv2dSpec.make(shape, oc, k, s, "same"), epi, load_config("pynq"))
    model = CostModel(low)
    cands = [s for v in (1, 2, 4) for s in candidate_tiles(low, v) if not s.res_inp]
    assert cands
    for s in cands[:: max(1, len(cands) // 6)]:
        est = model.estimate(s)
        assert model.bound(s) <= est.cycles
        assert est.cycles == pytest.approx(timed(low, build_stream(low, s)).cycles, rel=0.05)


def test_half_row_tilings_of_the_best_candidates_are_searched():
    """half_rows gives the most rows that fit of at most half a schedule's (None for one row); the search bounds
    those of its best candidates too; its choice's cycles and compute span are those the simulator gives."""
    low = lowering((1, 32, 40, 40), 32, 3, 1)
    cands = [s for v in (1, 2) for s in candidate_tiles(low, v)]
    for s in cands:
        h = half_rows(low, s)
        if s.toh == 1:
            assert h is None
        else:
            assert h is not None and 2 * h.toh <= s.toh + 1 and not low.problems(h)
            assert (h.toc, h.tow, h.tic, h.vthreads, h.order, h.res_inp) == (
                s.toc,
                s.tow,
                s.tic,
                s.vthreads,
                s.order,
                s.res_inp,
            )
    found = search(low, "auto")
    assert found.candidates > len([s for v in (1, 2, 3, 4) for s in candidate_tiles(low, v, skip_idle=v > 1)])
    cycles, span = timed_span(low, build_stream(low, found.schedule))
    assert cycles.cycles == found.cycles and 0 < span < cycles.cycles


_SEARCH_ONE = """
from vdla.compiler.conv_lowering import ConvLowering
from vdla.compiler.search import search
from vdla.compiler.spec import Conv2dSpec, EpilogueSpec
from vdla.config import load_config
epi = EpilogueSpec(bias=True, multiplier="row", shift=39, clip=(-128, 127))
low = ConvLowering(Conv2dSpec.make((1, 80, 10, 10), 80, 3, 1, "same"), epi, load_config("pynq-z2"))
print(search(low).schedule)
"""


def test_the_choice_does_not_depend_on_the_processes_string_hashes():
    """YOLOv8n's 3x3 layer of 80 channels at 10x10: candidates of equal bound were ordered by a set of
    schedules, whose iteration follows the per-process string hash of ``order``; seeds 1 and 2 chose
    different schedules (vt2 and vt3), and so did the model's artifact."""
    chosen = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", _SEARCH_ONE], env=env, capture_output=True, text=True, check=True)
        chosen.add(run.stdout.strip())
    assert len(chosen) == 1, chosen


def test_search_confirms_with_the_simulator_and_beats_one_thread():
    low = lowering((1, 64, 28, 28), 64, 1, 1)
    auto, one = search(low, "auto"), search(low, 1)
    assert auto.simulated >= 2 and auto.candidates > auto.simulated and auto.seconds > 0
    assert auto.cycles == timed(low, build_stream(low, auto.schedule)).cycles
    assert one.schedule.vthreads == 1
    assert auto.cycles < 0.95 * one.cycles


def test_schedule_cache(tmp_path):
    cache = ScheduleCache(tmp_path / "s.json")
    w = np.ones((32, 32, 3, 3), np.int8)
    first = compile_conv2d((1, 32, 10, 10), w, padding=1, epilogue=Epilogue(shift=4), cache=cache)
    assert not first.search.cached
    entries = json.loads((tmp_path / "s.json").read_text())
    assert len(entries) == 1 and next(iter(entries.values()))["schedule"] == first.schedule.to_dict()
    again = compile_conv2d((1, 32, 10, 10), w, padding=1, epilogue=Epilogue(shift=4), cache=cache)
    assert again.search.cached and again.schedule == first.schedule
    other = compile_conv2d((1, 32, 10, 10), w, padding=1, epilogue=Epilogue(shift=4), cache=cache, config="block8")
    fixed = compile_conv2d((1, 32, 10, 10), w, padding=1, epilogue=Epilogue(shift=4), cache=cache, vthreads=1)
    assert not other.search.cached and not fixed.search.cached  # keyed by config hash and thread request
    assert len(json.loads((tmp_path / "s.json").read_text())) == 3


def test_corrupt_cache_file_is_replaced(tmp_path):
    (tmp_path / "s.json").write_text("{not json")
    cache = ScheduleCache(tmp_path / "s.json")
    layer = compile_conv2d((1, 16, 6, 6), np.ones((16, 16, 1, 1), np.int8), cache=cache)
    assert not layer.search.cached and len(json.loads((tmp_path / "s.json").read_text())) == 1


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("VDLA_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path and ScheduleCache().path == tmp_path / "schedules.json"


def test_concurrent_puts_keep_every_entry(tmp_path):
    """Two processes putting entries into one cache file at once (the compiler and its prefetch helper) keep every
    entry: each read-merge-write holds the file's lock."""
    path = tmp_path / "s.json"
    pids = []
    for p in range(2):
        pid = os.fork()
        if pid == 0:  # the child writes its entries and leaves at once
            try:
                cache = ScheduleCache(path)
                for i in range(60):
                    cache.put(f"p{p}:{i}", {"cycles": i})
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    assert sorted(json.loads(path.read_text())) == sorted(f"p{p}:{i}" for p in range(2) for i in range(60))
