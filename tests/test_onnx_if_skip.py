"""Only the branch taken runs (issue 51): an ``If`` on a computed condition compiles both branches, and the
executor skips the steps of the one not taken, on every backend (the skipping is the executor's, above the
backend's one ``run``).

Each model here is compiled with vdla's calibration (both branches on the accelerator) and without (all on the
CPU), and run on inputs taking each branch. The outputs are checked against onnxruntime's float model (cosine),
and exactly against the same artifact with its guards removed (every step run, as before); which steps ran is
read from the backend's own runs and the CPU steps' calls, not from the report alone.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from test_onnx_control import COS_MIN, OPSET, SHAPE, _head, _init, _inputs, if_model  # noqa: E402

from vdla.cli import main  # noqa: E402
from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.graph.branches import guards, holds  # noqa: E402
from vdla.graph.graph import Graph, Node  # noqa: E402
from vdla.graph.ops import infer_types  # noqa: E402
from vdla.graph.types import TensorType  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.artifact import Artifact, load_artifact  # noqa: E402
from vdla.model.pipeline import compile_model  # noqa: E402
from vdla.zoo.models import cosine  # noqa: E402


class Recorder:
    """A module whose backend runs and CPU step calls are recorded: the step indices that really ran."""

    def __init__(self, artifact: Artifact, backend: str = "sim"):
        self.module = Module(artifact, backend)
        self.art = artifact
        self.ran: set[int] = set()
        backend, run_cpu = self.module.device.backend, self.module._run_cpu
        programs = {s.insn_addr: {i} for i, s in enumerate(artifact.steps) if s.kind == "accel"}
        programs.update({s.insn_addr: set(range(s.first, s.first + s.count)) for s in artifact.streams})
        real_run = backend.run

        def run(dram, addr, count, **kw):
            self.ran |= programs[addr]
            return real_run(dram, addr, count, **kw)

        def cpu(i, step, env):
            self.ran.add(i)
            return run_cpu(i, step, env)

        backend.run, self.module._run_cpu = run, cpu

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.ran = set()
        return self.module.run(x)


def run_both(artifact: Artifact) -> Artifact:
    """``artifact`` with every guard removed: every step runs on every input (vdla before branch skipping)."""
    return replace(artifact, steps=[replace(s, when=()) for s in artifact.steps])


def check_runs(
    artifact: Artifact, model: onnx.ModelProto, xs: list[np.ndarray], backend: str = "sim"
) -> list[dict[str, bool]]:
    """Run ``xs`` on ``artifact`` on ``backend``: each output within cosine 0.99 of onnxruntime's float model and
    equal to the run-both artifact's (on sim); the steps that ran are exactly those whose guard holds, the
    accelerator's cycles those of the steps that ran. Returns the conditions of each run."""
    rec, both, session = Recorder(artifact, backend), Module(run_both(artifact), "sim"), reference_session(model)
    seen = []
    for x in xs:
        y = rec(x)
        report = rec.module.last_report
        np.testing.assert_array_equal(y, both.run(x))
        assert cosine(y, session.run(None, {"x": x})[0]) >= COS_MIN
        held = {i for i, s in enumerate(artifact.steps) if holds(s.when, report.conditions)[0]}
        assert rec.ran == held, (report.conditions, sorted(rec.ran), sorted(held))
        assert {i for i, s in enumerate(report.steps) if not s.skipped} == held
        assert report.accel_cycles == sum(s.cycles for s in report.ran)
        skipped_accel = [s for s in report.steps if s.skipped and s.where == "accel"]
        assert all(s.cycles == 0 for s in skipped_accel)
        if skipped_accel and backend == "sim":
            assert report.accel_cycles < both.last_report.accel_cycles
        seen.append(report.conditions)
    return seen


@pytest.fixture(scope="module")
def gated():
    model = if_model()
    then_x, else_x = _inputs(model, 2, 1)
    calib = np.concatenate([*_inputs(model, 8, 2)[0], *_inputs(model, 8, 2)[1]])
    art, _ = compile_model(model, calib={"x": calib}, input_shapes={"x": SHAPE})
    return model, then_x, else_x, calib, art


def _branch_steps(art: Artifact, branch: str) -> set[int]:
    return {i for i, s in enumerate(art.steps) if s.name.startswith(f"If_7.{branch}/")}


def test_the_gate_is_computed_before_either_branch(gated):
    """The condition has a CPU step of its own before the branches; each branch's steps (accelerator layers and
    their CPU conversions) carry its guard and nothing else does."""
    _, _, _, _, art = gated
    gate = next(i for i, s in enumerate(art.steps) if s.kind == "cpu" and "gate" in s.graph.outputs)
    then, other = _branch_steps(art, "then"), _branch_steps(art, "else")
    assert then and other and min(then | other) > gate
    assert any(art.steps[i].kind == "accel" for i in then) and any(art.steps[i].kind == "accel" for i in other)
    for i, s in enumerate(art.steps):
        want = (("gate", True),) if i in then else (("gate", False),) if i in other else ()
        assert s.when == want, (i, s.name, s.when)
    for stream in art.streams:  # a stream runs or is skipped whole
        assert len({art.steps[k].when for k in range(stream.first, stream.first + stream.count)}) == 1


def test_only_the_taken_branch_runs_calibrated(gated, backend):
    """On sim and on the RTL (the skipping is the executor's, the same for every backend, a board's too)."""
    model, then_x, else_x, _, art = gated
    seen = check_runs(art, model, [*then_x, *else_x], backend)
    assert seen == [{"gate": True}] * len(then_x) + [{"gate": False}] * len(else_x)


def test_only_the_taken_branch_runs_in_float():
    """Without calibration every step is a CPU step: the branch not taken is not computed."""
    model = if_model()
    then_x, else_x = _inputs(model, 2, 1)
    art, _ = compile_model(model, input_shapes={"x": SHAPE})
    assert any(s.when for s in art.steps)
    seen = check_runs(art, model, [*then_x, *else_x])
    assert [c["gate"] for c in seen] == [True, True, False, False]


def test_guards_round_trip_and_old_artifacts_run_both(gated, tmp_path):
    """The guards are saved in the manifest and read back; an artifact written before them (no ``when``) loads
    and runs every step, with the same outputs."""
    model, then_x, else_x, _, art = gated
    path = art.save(tmp_path / "gated.vdla")
    loaded = load_artifact(path)
    assert [s.when for s in loaded.steps] == [s.when for s in art.steps]
    old = tmp_path / "old.vdla"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "manifest.json":
                manifest = json.loads(data)
                assert any("when" in s for s in manifest["steps"])
                for s in manifest["steps"]:
                    s.pop("when", None)
                data = json.dumps(manifest).encode()
            dst.writestr(item, data)
    old_art = load_artifact(old)
    assert all(s.when == () for s in old_art.steps)
    module, old_module = Module(loaded, "sim"), Module(old_art, "sim")
    for x in [then_x[0], else_x[0]]:
        np.testing.assert_array_equal(module.run(x), old_module.run(x))
        assert not any(s.skipped for s in old_module.last_report.steps)
        assert any(s.skipped for s in module.last_report.steps)


def test_cli_run_shows_the_branch_taken(gated, tmp_path, capsys):
    model, then_x, else_x, _, art = gated
    path = art.save(tmp_path / "gated.vdla")
    for x, taken, skipped in [(then_x[0], "true", "else"), (else_x[0], "false", "then")]:
        np.save(tmp_path / "x.npy", x)
        capsys.readouterr()
        args = ["run", str(path), "--input", str(tmp_path / "x.npy"), "--json", str(tmp_path / "r.json")]
        assert main(args) == 0
        text = capsys.readouterr().out
        assert f"branches: gate = {taken}; 2 steps skipped" in text, text
        doc = json.loads((tmp_path / "r.json").read_text())
        assert doc["conditions"] == {"gate": taken == "true"}
        names = {s["name"] for s in doc["steps"] if s["skipped"]}
        assert names == {art.steps[i].name for i in _branch_steps(art, skipped)}


def _gate_nodes(prefix: str, src: str, channel: int) -> list[onnx.NodeProto]:
    """``{prefix}`` = Sigmoid(GlobalAveragePool(channel ``channel`` of ``src``, by a 1x1 conv)) >= 0.5."""
    return [
        helper.make_node("Conv", [src, f"{prefix}_w"], [f"{prefix}0"]),
        helper.make_node("GlobalAveragePool", [f"{prefix}0"], [f"{prefix}1"]),
        helper.make_node("Sigmoid", [f"{prefix}1"], [f"{prefix}2"]),
        helper.make_node("ReduceMax", [f"{prefix}2"], [f"{prefix}3"], keepdims=0),
        helper.make_node("GreaterOrEqual", [f"{prefix}3", "half"], [prefix]),
    ]


def _gate_weight(prefix: str, channel: int) -> onnx.TensorProto:
    w = np.zeros((1, 3, 1, 1), np.float32)
    w[0, channel] = 1.0
    return _init(f"{prefix}_w", w)


def nested_if_model(seed: int = 0) -> onnx.ModelProto:
    """trunk t = relu(conv(x)); outer = mean(x[:, 0]) >= 0; inner = mean(x[:, 1]) >= 0, computed inside the outer
    If's then branch, which is If(inner, head_a, head_c); its else branch head_b. The If's output feeds two more
    convolutions (accelerator layers after the branches)."""
    rng = np.random.default_rng(seed)
    inner_nodes = [*_gate_nodes("inner", "x", 1)]
    inner_if = helper.make_node("If", ["inner"], ["a_out"], then_branch=_head("a", rng), else_branch=_head("c", rng))
    out = helper.make_tensor_value_info("a_out", TensorProto.FLOAT, [1, 4, 8, 8])
    then = helper.make_graph([*inner_nodes, inner_if], "then", [], [out], initializer=[_gate_weight("inner", 1)])
    inits = [
        _init("w0", rng.normal(0, 0.4, (8, 3, 3, 3))),
        _init("b0", rng.normal(0, 0.1, 8)),
        _init("w1", rng.normal(0, 0.3, (8, 4, 3, 3))),
        _init("w2", rng.normal(0, 0.3, (4, 8, 1, 1))),
        _init("half", np.array(0.5)),
        _gate_weight("outer", 0),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["t0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["t0"], ["t"]),
        *_gate_nodes("outer", "x", 0),
        helper.make_node("If", ["outer"], ["h"], then_branch=then, else_branch=_head("b", rng)),
        helper.make_node("Conv", ["h", "w1"], ["u0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["u0"], ["u"]),
        helper.make_node("Conv", ["u", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "nested", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _steered(seed: int, signs: tuple[float, float]) -> np.ndarray:
    """An input whose channels 0 and 1 have means of the given signs (well away from 0)."""
    x = np.random.default_rng(seed).normal(0, 1, SHAPE).astype(np.float32)
    x[0, 0] += 1.5 * signs[0]
    x[0, 1] += 1.5 * signs[1]
    return x


@pytest.mark.parametrize("calibrated", [True, False], ids=["calibrated", "float"])
def test_nested_ifs_feeding_later_layers(calibrated):
    """Three paths (outer then + inner then, outer then + inner else, outer else): the inner condition is computed
    only on the outer then branch, and the convolutions after the If run on every input."""
    model = nested_if_model()
    paths = [(1, 1), (1, -1), (-1, 1), (-1, -1)]
    xs = [_steered(k, s) for k, s in enumerate(paths)]
    calib = {"x": np.concatenate([_steered(10 + k, paths[k % 4]) for k in range(16)])} if calibrated else None
    art, _ = compile_model(model, calib=calib, input_shapes={"x": SHAPE})
    inner = next(c for s in art.steps for c, _ in s.when if c.endswith("inner"))
    guarded = {s.name: s.when for s in art.steps if s.when}
    assert any(len(w) == 2 for w in guarded.values()), guarded  # the inner heads: both conditions
    if calibrated:
        assert sum(s.kind == "accel" and not s.when for s in art.steps[-4:]) >= 1  # a layer after the If
    seen = check_runs(art, model, xs)
    assert seen == [{"outer": True, inner: True}, {"outer": True, inner: False}, {"outer": False}] + [{"outer": False}]


def test_guards_of_a_graph():
    """A value read by both branches is guarded by nothing; one read by a branch and outside it too, by nothing;
    a select on a constant condition guards nothing."""
    f = TensorType((4,), "float32")
    c = TensorType((), "bool")
    nodes = [
        Node("relu", ("x",), "shared"),
        Node("neg", ("shared",), "t"),  # then only
        Node("abs", ("shared",), "e"),  # else only
        Node("exp", ("x",), "both"),  # then, and read by the output sum too
        Node("add", ("t", "both"), "t2"),
        Node("where", ("c", "t2", "e"), "sel"),
        Node("add", ("sel", "both"), "y"),
        Node("where", ("k", "x", "x"), "z"),
    ]
    g = Graph({"x": f, "c": c}, nodes, ["y", "z"], {"k": np.array(True)}, {"k": c})
    got = guards(g, infer_types(g))
    assert got == {
        "shared": (),
        "t": (("c", True),),
        "e": (("c", False),),
        "both": (),
        "t2": (("c", True),),
        "sel": (),
        "y": (),
        "z": (),
    }
