"""vdla sweep: the spec refused naming the key, the points (grid, random, NSGA-II), invalid points and models
that do not compile recorded with their reasons, the results streamed and resumed (each point computed once),
a killed worker retried, Ray and the process pool giving the same records, the Pareto front, the report files
and the command line."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from vdla.cli import main
from vdla.sweep import SpecError, run
from vdla.sweep.point import evaluate
from vdla.sweep.report import pareto_front
from vdla.sweep.space import grid, random_points
from vdla.sweep.spec import load_spec, spec_from_dict

COUNT_DIR = "VDLA_TEST_SWEEP_DIR"  # where the tasks below leave their marks (the workers inherit it)


def counting(item: dict) -> dict:
    """point.evaluate, leaving a mark per finished evaluation (to count them)."""
    rec = evaluate(item)
    Path(os.environ[COUNT_DIR], f"{item['hash']}.{os.getpid()}.{random.random()}").touch()
    return rec


def dies_once(item: dict) -> dict:
    """The worker dies (os._exit) on the first try of the first point it is given to."""
    mark = Path(os.environ[COUNT_DIR], "died")
    if not mark.exists():
        mark.write_text(item["hash"])
        os._exit(9)
    return evaluate(item)


def raises_on_block8(item: dict) -> dict:
    if item["params"].get("block_in") == 8:
        raise RuntimeError("this point always fails")
    return evaluate(item)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A small residual CNN (vdla.zoo.models.small_resnet: 3x32x32) as ONNX with its calibration .npz."""
    import onnx

    from vdla.zoo.models import calibration_images, small_resnet

    d = tmp_path_factory.mktemp("tiny")
    onnx.save(small_resnet(seed=0), str(d / "small.onnx"))
    np.savez(d / "calib.npz", image=calibration_images((3, 32, 32), 4, seed=1))
    return d


def write_spec(d: Path, space: str, extra: str = "") -> Path:
    path = d / "spec.toml"
    path.write_text(
        f'base = "pynq-z2"\nmodels = [{{onnx = "small.onnx", calib = "calib.npz"}}]\n{extra}\n[space]\n{space}\n'
    )
    return path


# block_in 16 runs; block_in 8 (with 16 out) is refused by the model compiler (square blocks), a model error;
# an ACC buffer of 1 MiB does not fit the xc7z020's block RAM: invalid
SPACE = "block_in = [16, 8]\nblock_out = [16]\ninp_buff_bytes = [16384]\nacc_buff_bytes = [131072, 1048576]"


def records_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "sweep.jsonl").read_text().splitlines()]


def without_timings(records: list[dict]) -> dict:
    return {r["hash"]: {k: v for k, v in r.items() if k != "timings"} for r in records}


@pytest.fixture()
def marks(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "marks"
    d.mkdir()
    monkeypatch.setenv(COUNT_DIR, str(d))
    return d


def test_sweep_records_every_point_and_reports(tiny, tmp_path):
    res = run(write_spec(tiny, SPACE), tmp_path / "out", workers=2)
    by = {tuple(sorted(r["params"].items())): r for r in res.records}
    assert res.records[0]["base"] and res.records[0]["params"] == {} and res.records[0]["status"] == "ok"
    ok = by[(("acc_buff_bytes", 131072), ("block_in", 16), ("block_out", 16), ("inp_buff_bytes", 16384))]
    m = ok["models"]["small"]
    assert ok["status"] == "ok" and m["cycles"] > 0 and m["ratio"] >= 1
    assert m["latency_ms"] == pytest.approx(m["cycles"] / 1e5, rel=1e-3) and m["mac_bound_cycles"] == m["macs"] // 256
    assert ok["estimate"]["used"]["DSP"] > 0 and ok["determined_by"]["rtl_hash"] and ok["determined_by"]["vdla"]
    bad = by[(("acc_buff_bytes", 131072), ("block_in", 8), ("block_out", 16), ("inp_buff_bytes", 16384))]
    assert bad["status"] == "model_error" and "square blocks" in bad["models"]["small"]["error"]
    for r in res.records:
        if r["params"].get("acc_buff_bytes") == 1048576:
            assert r["status"] == "invalid" and r["error"].startswith("config 'pynq-z2': ")  # the reason
    assert res.evaluated == 3 and len(res.records) == 5
    for name in ("sweep.csv", "pareto_small.png", "pareto_small.svg", "sweep.jsonl"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    header = (tmp_path / "out" / "sweep.csv").read_text().splitlines()[0]
    assert "small.latency_ms" in header and "small.front" in header and "est.BRAM36" in header
    assert res.report["resources"] == "estimate" and res.report["best"]["small"]


def test_interrupted_sweep_resumes_each_point_once(tiny, tmp_path, marks):
    spec = write_spec(tiny, "wgt_buff_bytes = [32768, 65536, 131072]")  # the base's 131072: the same point
    first = run(spec, tmp_path / "out", workers=1, limit=2, evaluate=counting)
    assert first.evaluated == 2
    (tmp_path / "out" / "sweep.jsonl").open("a").write('{"hash": "torn')  # a crash while writing a record
    second = run(spec, tmp_path / "out", workers=1, evaluate=counting)
    assert second.evaluated == 1 and second.reused == 2
    third = run(spec, tmp_path / "out", workers=1, evaluate=counting)
    assert third.evaluated == 0
    done = [p.name.split(".")[0] for p in marks.iterdir()]
    assert sorted(done) == sorted({r["hash"] for r in third.records}) and len(done) == 3, "each point computed once"
    assert all(r["status"] == "ok" for r in third.records)


def test_sweep_interrupted_by_ctrl_c_resumes(tiny, tmp_path, marks):
    """A KeyboardInterrupt after the second record (as Ctrl-C): the records so far are kept, the workers stopped,
    and the next run computes only the rest."""
    spec = write_spec(tiny, "wgt_buff_bytes = [16384, 32768, 65536]")

    def interrupt(ev: dict) -> None:
        if ev["record"] is not None and ev["done"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(spec, tmp_path / "out", workers=1, evaluate=counting, progress=interrupt)
    assert len(records_of(tmp_path / "out")) == 2
    res = run(spec, tmp_path / "out", workers=1, evaluate=counting)
    assert res.evaluated == 2 and res.reused == 2 and all(r["status"] == "ok" for r in res.records)
    done = [p.name.split(".")[0] for p in marks.iterdir()]
    assert sorted(done) == sorted(r["hash"] for r in res.records), "each point computed once"


def test_killed_worker_is_retried(tiny, tmp_path, marks):
    res = run(write_spec(tiny, "wgt_buff_bytes = [32768, 65536]"), tmp_path / "out", workers=2, evaluate=dies_once)
    killed = (marks / "died").read_text()
    assert all(r["status"] == "ok" for r in res.records) and len(res.records) == 3, "nothing lost"
    # its death counts a try only if it was alone in the pool (else it ran again alone: vdla.sweep.executor)
    assert {r["hash"]: r["attempts"] for r in res.records}[killed] in (1, 2)


def test_failed_point_recorded_and_sweep_goes_on(tiny, tmp_path):
    spec = write_spec(tiny, "block_in = [8, 16]\nblock_out = [16]\ninp_buff_bytes = [16384]", "[run]\nretries = 1")
    res = run(spec, tmp_path / "out", workers=2, evaluate=raises_on_block8)
    failed = [r for r in res.records if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["attempts"] == 2
    assert failed[0]["error"].startswith("RuntimeError: this point always fails")
    assert sum(r["status"] == "ok" for r in res.records) == 2
    assert run(spec, tmp_path / "out", workers=1, evaluate=raises_on_block8).evaluated == 1, "failed points retried"


@pytest.mark.parametrize(
    "text, key",
    [
        ("[space]\nblock_size = [8]", "space.block_size: unknown parameter"),
        ('[space]\nwgt_buff_bytes = [65536, "big"]', "space.wgt_buff_bytes[1]: expected an integer"),
        ("[space]\ndepthwise_mode = [1]", "space.depthwise_mode[0]: expected true or false"),
        ("[space]\nwgt_buff_bytes = []", "space.wgt_buff_bytes: empty"),
        ("[space]\nwgt_buff_bytes = {min = 65536, max = 1024, scale = 'pow2'}", "space.wgt_buff_bytes: empty range"),
        ("[space]\nclock_mhz = {min = 100, max = 150}", "space.clock_mhz.step: missing"),
        ("[space]\nblock = [8]\nblock_in = [8]", "space.block: sets block_in and block_out"),
        ("[serach]\nmethod = 'grid'", "serach: unknown key"),
        ("[search]\nmethod = 'anneal'", "search.method: 'anneal' is not one of"),
        ("[search]\nmethod = 'random'", "search.samples: the random search needs a number of points"),
        ("[run]\nretries = -1", "run.retries: must be >= 0"),
        ("[run]\nworker = 2", "run.worker: unknown key"),
        ("measure = ['sim', 'synth']", "measure[1]: 'synth' is not one of"),
        ("base = 'pynq-z9'", "base: no preset or file named"),
    ],
)
def test_bad_spec_refused_naming_the_key(tiny, text, key):
    path = tiny / "bad.toml"
    path.write_text(f"models = ['unet']\n{text}")
    with pytest.raises(SpecError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_spec(path)


def test_bad_models_refused(tiny):
    for models, key in [
        ([], "models: empty"),
        (["resnet19"], r"models\[0\]: no model 'resnet19'"),
        ([{"onnx": "missing.onnx"}], r"models\[0\].onnx: no file"),
        ([{"onnx": "small.onnx", "calib": "nope.npz"}], r"models\[0\].calib: no file"),
        (["unet", "unet"], r"models\[1\]: the name 'unet' is used twice"),
    ]:
        with pytest.raises(SpecError, match=key):
            spec_from_dict({"models": models}, tiny)


def test_ranges_grid_and_random():
    spec = spec_from_dict(
        {
            "models": ["unet"],
            "space": {
                "wgt_buff_bytes": {"min": 30000, "max": 131072, "scale": "pow2"},
                "clock_mhz": {"min": 100, "max": 150, "step": 25},
                "uram_buffers": [[], ["acc"]],
            },
        }
    )
    values = spec.parameters
    assert values["wgt_buff_bytes"] == (32768, 65536, 131072) and values["clock_mhz"] == (100.0, 125.0, 150.0)
    assert values["uram_buffers"] == ((), ("acc",))
    points = grid(spec.space)
    assert len(points) == 18 and points[1] == {"wgt_buff_bytes": 32768, "clock_mhz": 100.0, "uram_buffers": ("acc",)}
    sample = random_points(spec.space, 5, seed=3)
    assert sample == random_points(spec.space, 5, seed=3) and len({json.dumps(p) for p in sample}) == 5
    assert random_points(spec.space, 100, seed=3) == points


def test_pareto_front_against_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n, d = int(rng.integers(1, 40)), int(rng.integers(1, 4))
        pts = rng.integers(0, 6, (n, d)).astype(float)  # small integers: many ties
        want = [not any(np.all(q <= p) and np.any(q < p) for q in pts) for p in pts]
        assert pareto_front([tuple(p) for p in pts]) == want
        if d == 2:  # the 2-D front is also the staircase of the points sorted by the first objective
            best = min(pts[:, 1][pts[:, 0] == pts[:, 0].min()])
            assert any(on and p[0] == pts[:, 0].min() and p[1] == best for p, on in zip(pts, want))


def test_nsga2_search(tiny, tmp_path):
    pytest.importorskip("optuna", reason="--search nsga2 is the sweep extra: pip install 'vdla[sweep]'")
    spec = write_spec(tiny, "wgt_buff_bytes = [32768, 65536, 131072]\ninp_buff_bytes = [16384, 32768]")
    res = run(spec, tmp_path / "out", workers=2, method="nsga2", samples=4)
    assert res.records[0]["base"] and all(r["status"] == "ok" for r in res.records)
    assert 1 < len(res.records) <= 5 and res.report["fronts"]["small"]
    # a new folder: every point was evaluated in this run, those NSGA-II asked twice once
    assert res.reused == 0 and res.evaluated == len(res.records)


def test_unreachable_ray_refused(tiny, tmp_path):
    pytest.importorskip("ray", reason="Ray is the dist extra: pip install 'vdla[dist]'")
    from vdla.sweep.executor import RayUnavailableError

    with pytest.raises(RayUnavailableError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        run(write_spec(tiny, "wgt_buff_bytes = [65536]"), tmp_path / "out", ray="127.0.0.1:1")
    assert not (tmp_path / "out").exists(), "refused before any work, never run locally"


def test_ray_and_pool_give_the_same_records(tiny, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is the dist extra: pip install 'vdla[dist]'")
    spec = write_spec(tiny, SPACE)
    pool = run(spec, tmp_path / "pool", workers=2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run(spec, tmp_path / "ray", ray="auto")
    finally:
        ray.shutdown()
    assert on_ray.evaluated == pool.evaluated == 3
    assert without_timings(on_ray.records) == without_timings(pool.records)


def test_cli_sweep(tiny, tmp_path, capsys):
    from vdla.sweep import cli, spec

    assert cli.METHODS == spec.METHODS
    spec = write_spec(tiny, "wgt_buff_bytes = [65536]")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "small ms" in text and "resources by estimate" in text and "fastest small within the budget" in text
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"sweep.jsonl", "sweep.csv", "pareto_small.svg"}
    bad = tiny / "bad_cli.toml"
    bad.write_text("models = ['unet']\n[space]\nblock_size = [8]\n")
    assert main(["sweep", str(bad), "--out", str(tmp_path / "bad")]) == 2
    assert "space.block_size: unknown parameter" in capsys.readouterr().out
    assert not (tmp_path / "bad").exists(), "refused before any work"


def test_fit_cached_by_content_and_reported(tmp_path, monkeypatch):
    """point.fit: the Yosys fit in short with its failfast margins, cached by RTL and config hash (run_fit is
    replaced here: a synthesis takes minutes); the report then ranks by the fit's LUT, DSP and BRAM36."""
    import vdla.hw.fit
    from vdla.config import load_config
    from vdla.sweep import point
    from vdla.sweep.report import summarize, table, write_report

    monkeypatch.setenv("VDLA_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def fake_fit(cfg):
        calls.append(cfg)
        used = {"LUT": 30000.0, "FF": 40000.0, **cfg.hard_block_estimate()}
        return {"used": used, "budget": cfg.part_spec.budget(used), "logic_levels": {"levels": 8},
                "rtl_hash": vdla.hw.fit.rtl_hash(cfg), "tool": "fake", "seconds": 1.0}  # fmt: skip

    monkeypatch.setattr(vdla.hw.fit, "run_fit", fake_fit)
    cfg = load_config("pynq-z2")
    first = point.fit(cfg)
    assert point.fit(cfg) == first and len(calls) == 1, "the second fit comes from the cache"
    assert first["margins"]["LUT"] == pytest.approx(0.70 - 30000 / 53200, abs=1e-4) and first["within"]
    assert first["level_budget"] == 8 and set(first["used"]) == {"LUT", "FF", "DSP", "BRAM36", "URAM"}
    spec = spec_from_dict({"models": ["unet"], "measure": ["fit"], "space": {"wgt_buff_bytes": [65536]}})
    recs = []
    for i, lut in enumerate((30000.0, 20000.0, 45000.0)):
        f = dict(first, used=dict(first["used"], LUT=lut), within=lut <= 37240)
        models = {"unet": {"latency_ms": 2.0 - i * 0.5, "ratio": 1.2}}
        recs.append({"hash": f"h{i}", "params": {}, "base": i == 0, "status": "ok", "fit": f,
                     "estimate": point.estimate(cfg), "models": models})  # fmt: skip
    s = summarize(recs, spec)
    assert s["resources"] == "fit" and s["fronts"]["unet"] == ["h1", "h2"] and s["best"]["unet"] == "h1"
    files, _ = write_report(recs, spec, tmp_path)
    assert "fit.margin.LUT" in files["csv"].read_text().splitlines()[0] and (tmp_path / "pareto_unet.png").is_file()
    assert "LUT" in [c.header for c in table(recs, spec, s).columns]


@pytest.mark.slow
def test_rtl_measured(tiny, tmp_path):
    """measure = ["rtl"]: the RTL's cycles and its outputs bit-exact with the simulator's (a Verilator build of
    the point's configuration: minutes when not cached)."""
    spec = write_spec(tiny, "bus_width_bits = [64]", 'measure = ["sim", "rtl"]')
    res = run(spec, tmp_path / "out", workers=1)
    (rec,) = res.records
    assert rec["base"] and rec["params"] == {}, "the grid's one point is the base preset's"
    m = rec["models"]["small"]
    assert m["rtl_bit_exact"] and abs(m["rtl_cycles"] - m["cycles"]) <= 0.05 * m["cycles"]


def test_a_pool_broken_between_waits_is_replaced(monkeypatch):
    """A worker can die after its task's result came back: the pool is then broken when the next task is
    submitted (not in any result). The executor starts a new pool and runs every task, each try counted once."""
    from concurrent.futures.process import BrokenProcessPool

    import vdla.sweep.executor as ex

    real, made = ex._new_pool, []

    class BrokenOnce:
        """A real pool whose first submit fails as a broken pool's does."""

        def __init__(self, pool, fail: bool):
            self.pool, self.fail, self._processes = pool, fail, pool._processes

        def submit(self, *args):
            if self.fail:
                self.fail = False
                raise BrokenProcessPool("a worker died")
            return self.pool.submit(*args)

        def shutdown(self, **kw):
            self.pool.shutdown(**kw)

    def new_pool(workers):
        made.append(BrokenOnce(real(workers), not made))
        return made[-1]

    monkeypatch.setattr(ex, "_new_pool", new_pool)
    outs = list(ex._run_pool(abs, {"a": -1, "b": -2, "c": -3}, 2, 0, None))
    assert sorted((o.key, o.value, o.error, o.attempts) for o in outs) == [
        ("a", 1, None, 1),
        ("b", 2, None, 1),
        ("c", 3, None, 1),
    ]
    assert len(made) == 2
