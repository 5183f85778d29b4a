"""``vdla compile --auto-float TARGET`` (:mod:`vdla.graph.autofloat`): the fewest layers kept in float that bring
the int8 model to a target cosine against the float model.

The model is trained-like: its first layer has a dead ReLU channel (a bias far below its activations, as
training leaves some), and the second layer's weights reading that channel are large and stale (no gradient
reaches them through a dead input). They contribute nothing to the float model, but each output channel's
per-channel weight scale is set by them, so the weights that matter round to a few int8 levels: plain int8
misses 0.999, keeping that one layer in float reaches it. The search's logic is checked on its own against
synthetic cosine curves (monotone and not), including a target no set reaches."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vdla.errors import VdlaError
from vdla.graph.autofloat import AutoFloatError, check_target, search
from vdla.model import Module
from vdla.model.pipeline import CompileOptions, compile_model

HARD = "c2"  # the layer plain int8 cannot quantize well
STALE = 100.0  # how much larger the stale weights are than the live ones


def _model() -> onnx.ModelProto:
    """x (1x3x16x16) -> conv c1 + ReLU (channel 0 dead) -> conv c2 + ReLU -> conv c3 + ReLU -> global average ->
    dense y (10 classes)."""
    rng = np.random.default_rng(0)
    p = {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)),
        "b1": rng.normal(0, 0.1, 8),
        "w2": rng.normal(0, 0.15, (8, 8, 3, 3)),
        "b2": rng.normal(0, 0.1, 8),
        "w3": rng.normal(0, 0.15, (8, 8, 3, 3)),
        "b3": rng.normal(0, 0.1, 8),
        "wd": rng.normal(0, 0.3, (8, 10)),
        "bd": rng.normal(0, 0.1, 10),
    }
    p["b1"][0] = -50.0  # dead: no input drives channel 0 of c1 above 0
    p["w2"][:, 0] *= STALE  # c2's stale weights reading it
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in p.items()]
    conv = lambda x, i, y: helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], pads=[1, 1, 1, 1])  # noqa: E731
    nodes = [
        conv("x", 1, "c1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        conv("r1", 2, "c2"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        conv("r2", 3, "c3"),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "wd", "bd"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dead_channel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _calib(n: int = 16) -> np.ndarray:
    return np.random.default_rng(1).normal(0, 1, (n, 3, 16, 16)).astype(np.float32)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def _sim_cosine(artifact, model: onnx.ModelProto, x: np.ndarray) -> float:
    """The artifact on sim against onnxruntime's float model, all samples as one vector."""
    from vdla.frontend.reference import reference_session

    sess = reference_session(model)
    module = Module(artifact, "sim")
    got = np.concatenate([module.run(x[i : i + 1]) for i in range(len(x))])
    ref = np.concatenate([sess.run(None, {"x": x[i : i + 1]})[0] for i in range(len(x))])
    return _cosine(got, ref)


def test_keeps_the_hard_layer_and_the_artifact_reaches_the_target():
    model, x = _model(), _calib()
    plain, _ = compile_model(model, x)
    held = x[12:]  # 16 samples: the last 4 are held out
    assert _sim_cosine(plain, model, held) < 0.99  # plain int8 misses the target
    artifact, report = compile_model(model, x, CompileOptions(auto_float=0.999))
    auto = report.auto_float
    assert auto.kept == (HARD,) and auto.held_out and (auto.calib_samples, auto.eval_samples) == (12, 4)
    assert auto.ranking[0][0] == HARD  # the ranking's worst, by the error it adds alone (vdla.graph.qerror)
    assert auto.cosine_before < 0.99 <= 0.999 <= auto.cosine_after
    assert [e.phase for e in auto.evaluations] == ["int8", "grow"]
    assert auto.artifact_cosine >= 0.999
    assert _sim_cosine(artifact, model, held) >= 0.999  # against onnxruntime's float model, on sim
    assert _sim_cosine(artifact, model, x[:12]) >= 0.999  # and on the samples it calibrated on
    assert report.quantization.kept_float == (HARD,)
    assert 0.40 < auto.float_share < 0.45  # c2: 147,456 of 350,288 MACs
    cpu = [s for s in artifact.steps if s.kind == "cpu" and s.macs]
    assert sum(s.macs for s in cpu) == auto.float_macs == 147_456


def test_cli_prints_the_layers_kept_and_the_cosines(tmp_path, capsys):
    from vdla.cli import main

    onnx.save(_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", x=_calib(8))  # 8 samples: too few to hold out
    out, rep = tmp_path / "m.vdla", tmp_path / "q.json"
    args = ["compile", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "calib.npz"), "-o", str(out)]
    assert main([*args, "--auto-float", "0.999", "--report", str(rep)]) == 0
    text = capsys.readouterr().out
    assert "auto-float: layers kept in float32" in text and "share of MACs" in text
    assert "c2" in text and "conv2d" in text and "147,456" in text and "42.10%" in text
    assert "1 of 4 layers kept in float" in text and "2 evaluations" in text
    assert "the first 8 of the 8 calibration samples (too few to hold out)" in text
    assert "the compiled model on sim: cosine 0.99" in text
    doc = json.loads(rep.read_text())
    assert doc["kept_float"] == ["c2"] and [k["name"] for k in doc["auto_float"]["kept"]] == ["c2"]
    assert doc["auto_float"]["artifact_cosine"] >= 0.999 and not doc["auto_float"]["held_out"]
    assert out.exists()


def test_a_target_int8_reaches_keeps_nothing():
    import vdla

    module = vdla.compile(_model(), _calib(8), auto_float=0.3)  # the public API takes the option too
    artifact, report = module.artifact, module.compile_report
    auto = report.auto_float
    assert auto.kept == () and len(auto.evaluations) == 1 and auto.cosine_before >= 0.3
    assert report.quantization.kept_float == () and artifact.accel_macs == artifact.total_macs
    from vdla.model.cli import auto_float_lines

    assert "no layer needs to stay in float" in auto_float_lines(auto)[0]


def test_keep_float_combines_the_users_layers_always_float():
    _, report = compile_model(_model(), _calib(8), keep_float=("c3",), auto_float=0.999)
    auto = report.auto_float
    assert auto.user_kept == ("c3",) and auto.kept == (HARD,)
    assert set(report.quantization.kept_float) == {"c3", HARD}
    assert "c3" not in dict(auto.ranking)  # never ranked, never counted
    _, report = compile_model(_model(), _calib(8), keep_float=(HARD,), auto_float=0.999)
    assert report.auto_float.kept == () and report.quantization.kept_float == (HARD,)


@pytest.mark.parametrize("target", [0, -0.5, 1.5, float("nan"), "high"])
def test_a_target_outside_0_1_is_refused(target):
    with pytest.raises(VdlaError, match=r"auto_float: the target is a cosine in \(0, 1\]"):
        CompileOptions(auto_float=target)
    assert check_target(1) == 1.0


def test_auto_float_without_calibration_is_refused(tmp_path, capsys):
    with pytest.raises(VdlaError, match="auto_float needs calibration data"):
        compile_model(_model(), auto_float=0.99)
    from vdla.cli import main

    onnx.save(_model(), tmp_path / "m.onnx")
    assert main(["compile", str(tmp_path / "m.onnx"), "--auto-float", "0.99", "-o", str(tmp_path / "m.vdla")]) == 2
    assert "auto_float needs calibration data" in capsys.readouterr().out
    assert main(["compile", str(tmp_path / "m.onnx"), "--calib", "random", "--auto-float", "2"]) == 2
    assert "(0, 1]" in capsys.readouterr().out
    assert not (tmp_path / "m.vdla").exists()


def test_auto_float_on_a_qdq_model_is_refused():
    from vdla.zoo.models import quantize_qdq

    qdq = quantize_qdq(_model(), _calib(4), input_name="x")
    with pytest.raises(VdlaError, match=r"already quantized \(QDQ\) and keeps the scales it carries: drop auto_float"):
        compile_model(qdq, auto_float=0.99)
    with pytest.raises(VdlaError, match="already quantized"):  # with calibration data: refused as ever
        compile_model(qdq, _calib(4), auto_float=0.99)


# the search on its own: layers "a".."h" ranked worst first


def _curve(needed: set[str]):
    """A cosine that is 1 where every layer of ``needed`` is kept, else 0.9."""
    return lambda kept: 1.0 if needed <= set(kept) else 0.9


RANKED = list("abcdefgh")


def test_search_grows_geometrically_then_bisects():
    kept, evals, pruned, skipped = search(RANKED, _curve(set("abcde")), 0.99)
    assert kept == tuple("abcde") and not pruned and not skipped
    assert [len(e.kept) for e in evals] == [0, 1, 2, 4, 8, 6, 5, 4, 4, 4, 4]
    assert [e.phase for e in evals[:7]] == ["int8", "grow", "grow", "grow", "all", "bisect", "bisect"]
    assert all(e.phase == "prune" for e in evals[7:])  # d, c, b, a tried once each (without e: known to miss)


def test_search_prunes_layers_a_prefix_does_not_need():
    kept, evals, pruned, _ = search(RANKED, _curve({"a", "c"}), 0.99)  # b is ranked high but not needed
    assert kept == ("a", "c") and pruned == ("b",)
    assert all(e.cosine >= 0.99 for e in evals if set(e.kept) == set(kept))


def test_search_prunes_only_when_cheap():
    ranked = [f"l{i}" for i in range(40)]  # 40 layers: the prune tries at most max(16, 20) of them
    kept, evals, _, skipped = search(ranked, _curve(set(ranked[:22])), 0.99)
    assert len(kept) == 22 and skipped and evals[-1].phase == "bisect"
    kept, evals, pruned, skipped = search(ranked, _curve(set(ranked[:21])), 0.99)
    assert len(kept) == 21 and not skipped and not pruned and evals[-1].phase == "prune"


def test_search_keeps_none_or_refuses_an_unreachable_target():
    kept, evals, _, _ = search(RANKED, lambda kept: 0.995, 0.99)
    assert kept == () and len(evals) == 1
    with pytest.raises(AutoFloatError, match=r"cannot be reached: with every one of the 8 .* cosine 0\.950000"):
        search(RANKED, lambda kept: 0.9 + 0.05 * (len(kept) == 8), 0.99)
    with pytest.raises(AutoFloatError, match="every one of the 0"):
        search([], lambda kept: 0.9, 0.99)


def test_the_statistics_cache_changes_nothing():
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify
    from vdla.graph.quantize import quantize_model

    graph, data = simplify(import_onnx(_model())), {"x": _calib(8)}
    cache: dict = {}
    quantize_model(graph, data, keep_float=("c1",), stats_cache=cache)
    assert "x" not in cache  # c1 in float: the model input is not quantized
    cached = quantize_model(graph, data, stats_cache=cache)
    fresh = quantize_model(graph, data)
    assert cached[1] == fresh[1] and "x" in cache
    assert cached[0].params.keys() == fresh[0].params.keys()
    assert all(np.array_equal(cached[0].params[k], fresh[0].params[k]) for k in fresh[0].params)
