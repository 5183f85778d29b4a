"""Whole models: compile a quantized graph, save and load the artifact, run it on sim and rtl, bit-exact
against the numpy interpreter of the same graph; memory plan; bad artifacts."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_graph_qdq import S_A, residual_graph  # noqa: E402

from vdla.config import dict_hash, load_config  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.model import ArtifactError, ModelInputError, Module, load, load_artifact  # noqa: E402
from vdla.model.memplan import Lifetime, PlanError, plan_memory  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402


@pytest.fixture(scope="module")
def compiled():
    artifact, report = compile_graph_model(residual_graph(s_b=S_A, s_out=S_A), "pynq")
    return artifact, report


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)


def test_partition_puts_both_convolutions_and_their_epilogues_on_the_accelerator(compiled):
    artifact, report = compiled
    accel = [s.layer["op"] for s in artifact.steps if s.kind == "accel"]
    assert accel == ["conv2d", "max_pool2d", "conv2d"]  # the int8 max pool runs on the ALU
    assert artifact.accel_macs == artifact.total_macs > 0
    accel_values = {v for v, where in report.placement.items() if where == "accel"}
    assert {"aq", "yq", "yq:sum"} <= accel_values  # the residual add runs in the epilogue
    assert artifact.memory["dram_arena_bytes"] <= artifact.memory["dram_arena_no_reuse_bytes"]


def test_bit_exact_against_the_interpreter_twice_without_leaking_dram(compiled, backend):
    artifact, _ = compiled
    module = Module(artifact, backend)
    free_before = list(module.device.dram._free)
    ref = lower_qdq(residual_graph(s_b=S_A, s_out=S_A))
    first = None
    for seed in (0, 1):
        x = _inputs(seed)
        y = module.run(x)
        np.testing.assert_array_equal(y, evaluate(ref, {"x": x})["y"])
        first = y if first is None else first
    np.testing.assert_array_equal(module.run(_inputs(0)), first)
    assert module.device.dram._free == free_before
    report = module.last_report
    assert report.accel_cycles > 0 and report.accel_mac_share == 1.0
    module.close()


def test_artifact_round_trip_and_refusals(compiled, tmp_path):
    artifact, _ = compiled
    path = artifact.save(tmp_path / "m.vdla")
    assert [p.name for p in tmp_path.iterdir()] == ["m.vdla"]  # no temporary file left behind
    module = load(path)
    x = _inputs(3)
    np.testing.assert_array_equal(module.run(x), Module(artifact).run(x))
    with pytest.raises(
        ArtifactError, match="compiled for config 'pynq-z2'.*runs 'osdi18'.*wgt_buff_bytes 131072 vs 32768"
    ):
        load_artifact(path, config=load_config("osdi18"))
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    manifest = json.loads(files["manifest.json"])
    # an artifact from before the board presets: preset 'pynq', no board keys, the whole dict hashed
    old = {k: v for k, v in manifest["config"].items() if k not in ("part", "boards", "reg_base_addr", "axi_addr_bits")}
    old["name"] = "pynq"
    before = tmp_path / "before.vdla"
    with zipfile.ZipFile(before, "w") as z:
        for n, data in files.items():
            m = {**manifest, "config": old, "config_hash": dict_hash(old)}
            z.writestr(n, json.dumps(m) if n == "manifest.json" else data)
    assert load_artifact(before, config=load_config("pynq-z2")).config.hash == load_config("pynq").hash
    np.testing.assert_array_equal(load(before).run(x), Module(artifact).run(x))
    manifest["format_version"] = 99
    bad = tmp_path / "old.vdla"
    with zipfile.ZipFile(bad, "w") as z:
        for n, data in files.items():
            z.writestr(n, json.dumps(manifest) if n == "manifest.json" else data)
    with pytest.raises(ArtifactError, match="version 99.*compile the model again"):
        load_artifact(bad)
    truncated = tmp_path / "cut.vdla"
    truncated.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ArtifactError, match="cut.vdla: not a readable"):
        load_artifact(truncated)


def test_wrong_inputs_are_named(compiled):
    module = Module(compiled[0])
    with pytest.raises(ModelInputError, match=r"input 'x' must have shape \(1, 8, 6, 6\)"):
        module.run(np.zeros((1, 8, 6, 7), np.float32))
    with pytest.raises(ModelInputError, match="missing \\['x'\\], unknown \\['y'\\]"):
        module.run({"y": np.zeros((1, 8, 6, 6), np.float32)})
    with pytest.raises(ModelInputError, match="must be float32, got int8"):
        module.run(np.zeros((1, 8, 6, 6), np.int8))


def test_non_finite_inputs_are_refused_naming_the_first_bad_index(compiled):
    module = Module(compiled[0])
    x = _inputs(5)
    x[0, 3, 2, 4], x[0, 5, 0, 0] = np.nan, np.inf
    with pytest.raises(
        ModelInputError, match=r"input 'x' has 2 non-finite value\(s\): the first is nan at index \[0, 3, 2, 4\]"
    ):
        module.run(x)
    big = _inputs(5).astype(np.float64)
    big[0, 1, 1, 1] = 1e300  # finite in float64, an infinity in float32
    with pytest.raises(ModelInputError, match=r"after conversion from float64 .* at index \[0, 1, 1, 1\]"):
        module.run(big)
    np.testing.assert_array_equal(module.run(_inputs(5)), Module(compiled[0]).run(_inputs(5)))  # nothing left behind


def test_other_float_dtypes_are_converted_with_a_note(compiled, capsys):
    module = Module(compiled[0])
    x = _inputs(6)
    want = module.run(x)
    for dtype in (np.float64, np.float16):
        np.testing.assert_array_equal(module.run(x.astype(dtype)), module.run(x.astype(dtype).astype(np.float32)))
    np.testing.assert_array_equal(module.run(x.astype(np.float64)), want)  # float64 of float32 values: the same
    module.run(x.astype(np.float64))
    err = capsys.readouterr().err
    assert err.count("note: input 'x' is float64: converted to float32") == 1  # once per module
    assert "note: input 'x' is float16: converted to float32" in err


def test_cli_output_is_written_exactly_where_asked(tmp_path, capsys):
    """--output: .npz keyed by output name (any count), .npy for one output, exactly at the path given;
    another extension, or .npy for several outputs, refused before the model runs, leaving no file."""
    from vdla.cli import main
    from vdla.graph import Graph, Node
    from vdla.graph.types import TensorType

    two = Graph(
        {"x": TensorType((2, 3), "float32")},
        [Node("relu", ("x",), "r"), Node("softmax", ("x",), "p", {"axis": 1})],
        ["r", "p"],
        {},
        {},
    )
    art, _ = compile_graph_model(two, "pynq")
    path = art.save(tmp_path / "two.vdla")
    x = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    run = ["run", str(path), "--input", str(tmp_path / "x.npy"), "--output"]
    assert main([*run, str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as y:
        assert sorted(y.files) == ["p", "r"] and np.array_equal(y["r"], np.maximum(x, 0))
    for bad, message in (("y.npy", "has 2 outputs"), ("y.txt", "not '.txt'"), ("y", "not ''")):
        capsys.readouterr()
        assert main([*run, str(tmp_path / "out" / bad)]) == 2
        assert message in " ".join(capsys.readouterr().out.split())
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two.vdla", "x.npy", "y.npz"]


def test_memory_plan_reuses_and_never_overlaps_live_tensors():
    rng = np.random.default_rng(0)
    tensors = []
    for i in range(60):
        first = int(rng.integers(0, 40))
        tensors.append(Lifetime(f"t{i}", int(rng.integers(1, 50_000)), first, first + int(rng.integers(0, 6))))
    plan = plan_memory(tensors)
    plan.check(tensors)  # raises on overlap
    for a in tensors:
        for b in tensors:
            if a is not b and a.overlaps(b):
                oa, ob = plan.offsets[a.name], plan.offsets[b.name]
                assert oa + a.nbytes <= ob or ob + b.nbytes <= oa
    assert plan.total < plan.no_reuse
    with pytest.raises(PlanError, match="t0"):
        plan_memory([Lifetime("t0", 10, 3, 2)])


def test_cli_runs_an_artifact(compiled, tmp_path, capsys):
    from vdla.cli import main

    artifact, _ = compiled
    path = artifact.save(tmp_path / "m.vdla")
    x = _inputs(4)
    np.save(tmp_path / "x.npy", x)
    args = ["run", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]
    args += ["--profile", str(tmp_path / "t.json"), "--json", str(tmp_path / "r.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "accel" in out and "MACs on the accelerator: 100.00%" in out
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), Module(artifact).run(x))
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y1.npz")]) == 0
    with np.load(tmp_path / "y1.npz") as y:  # one output in a .npz: keyed by its name
        assert y.files == ["y"] and np.array_equal(y["y"], Module(artifact).run(x))
    assert not list(tmp_path.glob("y1.npz.*")) and not list(tmp_path.glob(".*tmp"))
    trace = json.loads((tmp_path / "t.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"load", "compute", "store", "cpu"} <= tracks
    assert json.loads((tmp_path / "r.json").read_text())["accel_cycles"] > 0
    assert main(["run", str(path), "--input", str(tmp_path / "missing.npy")]) == 2
    assert "cannot read" in " ".join(capsys.readouterr().out.split())
    np.savez(tmp_path / "feeds.npz", x=x)  # inputs keyed by name, as --output writes outputs
    assert main(["run", str(path), "--input", str(tmp_path / "feeds.npz"), "--output", str(tmp_path / "y2.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y2.npy"), Module(artifact).run(x))
    np.savez(tmp_path / "other.npz", image=x)
    assert main(["run", str(path), "--input", str(tmp_path / "other.npz")]) == 2
    assert "holds ['image'], which are not inputs of ['x']" in " ".join(capsys.readouterr().out.split())
    x[0, 2, 1, 3] = np.inf
    np.save(tmp_path / "bad.npy", x)
    assert main(["run", str(path), "--input", str(tmp_path / "bad.npy"), "--output", str(tmp_path / "z.npz")]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "input 'x' has 1 non-finite value(s): the first is inf at index [0, 2, 1, 3]" in out
    assert not (tmp_path / "z.npz").exists()


def test_host_tensors_are_preallocated_and_reused(compiled):
    module = Module(compiled[0])
    plan = module.host_plan
    assert plan is not None and 0 < plan.total <= plan.no_reuse
    arena = module._host
    x = _inputs(5)
    y = module.run(x)
    assert not np.shares_memory(y, arena)  # outputs are copies: the arena is reused by the next run
    packed = next(b for bufs in module._buffers.values() for b in bufs.values())
    assert np.shares_memory(packed, arena)


def test_loading_and_running_an_artifact_imports_neither_onnx_nor_the_compiler(compiled, tmp_path):
    import subprocess

    artifact, _ = compiled
    path = artifact.save(tmp_path / "m.vdla")
    x = _inputs(6)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", Module(artifact).run(x))
    code = f"""
import importlib.abc, sys
COMPILER = ("vdla.model.pipeline", "vdla.model.lower", "vdla.model.lowering", "vdla.model.match", "vdla.model.place",
            "vdla.model.fusion_choice", "vdla.model.views", "vdla.model.lifetimes", "vdla.model.cpu_regions")
BLOCKED = ("onnx", "onnxruntime", "vdla.compiler", "vdla.frontend", *COMPILER)
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
sys.meta_path.insert(0, Block())
import numpy as np
import vdla
module = vdla.load({str(path)!r})
y = module.run(np.load({str(tmp_path / "x.npy")!r}))
assert (y == np.load({str(tmp_path / "want.npy")!r})).all()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr
