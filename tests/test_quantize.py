"""Profile-guided int8 quantization of float models: calibration statistics and the three threshold methods
against numpy, the plan and the QDQ rewrite, bad input, and end to end the small ResNet quantized by vdla,
compiled, run on the simulator and compared with onnxruntime's float output (cosine of the logits, top-1);
``keep_float`` on one convolution; ``vdla compile --calib``.

Measured on the 32 test inputs (calibration on 32 others): cosine of the logits with onnxruntime's float
output min / mean, top-1 agreement: minmax 0.9857 / 0.99896 / 32, percentile 0.9885 / 0.99909 / 32, entropy
0.9825 / 0.99869 / 32; onnxruntime's own static int8 quantization of the same model (QDQ, MinMax, per
channel) 0.9858 / 0.99902 / 32. One input is hard for every int8 version (cosine about 0.985); the bounds
below sit under these figures. A random-weight ResNet has nearly flat logits, so a top-1 disagreement must
be a near tie of the float logits (under 3 output quantization steps apart).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from vdla.graph.calibrate import (
    BINS,
    QuantizationError,
    _Accumulator,
    calibrate,
    check_calibration,
    choose_threshold,
    entropy_threshold,
)
from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate
from vdla.graph.qdq import lower_qdq
from vdla.graph.quantize import QuantizationWarning, plan_quantization, quantize_model, weight_scales
from vdla.graph.types import TensorType
from vdla.isa import IsaError


def _stats(x: np.ndarray, chunks: int = 7):
    acc = _Accumulator("t")
    for part in np.array_split(np.asarray(x, np.float32), chunks):  # the range grows chunk by chunk
        acc.add(part, "test")
    return acc.stats()


# ---------------------------------------------------------------------------------------------------------
# Statistics and thresholds


def test_histogram_counts_every_element_in_its_bin_after_regrowing():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 0.01, 5000), rng.normal(0, 1, 5000), rng.normal(0, 40, 100)])
    st = _stats(x)
    assert st.count == x.size and st.hist.sum() == x.size
    assert st.min == pytest.approx(x.min()) and st.max == pytest.approx(x.max())
    assert st.absmax <= st.width * BINS < 2 * st.absmax * (1 + 1e-5)  # the range stays within twice the max
    want, _ = np.histogram(np.abs(x.astype(np.float32)), bins=BINS, range=(0, BINS * st.width))
    assert np.abs(st.hist - want).sum() <= 4  # exact re-binning: at most float ties at bin edges differ


def test_minmax_is_the_largest_magnitude():
    x = np.array([-3.5, 0.25, 2.0, 1.0], np.float32)
    assert choose_threshold(_stats(x, 2), "minmax") == 3.5


@pytest.mark.parametrize("p", [90.0, 99.0, 99.9, 99.99])
def test_percentile_matches_numpy_within_one_bin(p):
    x = np.random.default_rng(1).standard_t(5, 200_000).astype(np.float32)
    st = _stats(x)
    assert abs(choose_threshold(st, "percentile", p) - np.percentile(np.abs(x), p)) <= st.width


def _naive_entropy(hist: np.ndarray, levels: int) -> int:
    """The TensorRT pseudo code, loop by loop: the best number of kept bins."""
    best, best_i = math.inf, None
    for i in range(levels, len(hist) + 1):
        p = [float(v) for v in hist[:i]]
        p[-1] += float(sum(hist[i:]))
        n = i // levels
        q = [0.0] * i
        for j in range(levels):
            lo, hi = j * n, (i if j == levels - 1 else (j + 1) * n)
            nonzero = [k for k in range(lo, hi) if p[k] != 0]
            for k in nonzero:
                q[k] = float(sum(hist[lo:hi])) / len(nonzero)
        if not any(q):
            continue

        def smooth(d):
            nz = [v != 0 for v in d]
            take = 1e-4 * nz.count(False) / nz.count(True)
            least = min(v for v in d if v != 0)
            eps = 1e-4
            if take >= least:
                eps, take = eps * 0.5 * least / take, 0.5 * least
            return [v - take if z else eps for v, z in zip(d, nz, strict=True)]

        ps, qs = smooth(p), smooth(q)
        ps, qs = [v / sum(ps) for v in ps], [v / sum(qs) for v in qs]
        kl = sum(a * math.log(a / b) for a, b in zip(ps, qs, strict=True))
        if kl < best:
            best, best_i = kl, i
    return best_i


def test_entropy_matches_the_tensorrt_procedure_written_out():
    rng = np.random.default_rng(2)
    for seed in range(3):
        hist = np.histogram(np.abs(rng.laplace(0, 1 + seed, 20_000)), bins=96)[0]
        assert entropy_threshold(hist, 1.0, levels=16) == _naive_entropy(hist, 16)


def test_entropy_clips_heavy_tails_and_keeps_bounded_distributions():
    rng = np.random.default_rng(3)
    heavy = _stats(rng.standard_t(4, 300_000))
    t = choose_threshold(heavy, "entropy")
    assert np.percentile(np.abs(rng.standard_t(4, 300_000)), 99) < t < 0.6 * heavy.absmax
    uniform = _stats(rng.uniform(-1, 1, 300_000))
    assert choose_threshold(uniform, "entropy") > 0.95 * uniform.absmax
    gauss = _stats(rng.normal(0, 1, 300_000))  # a smooth, light tail: little to gain from clipping
    assert 3.0 < choose_threshold(gauss, "entropy") <= gauss.absmax


def test_entropy_ignores_exact_zeros():
    """Half of a ReLU's outputs are exactly zero: they quantize exactly, so the threshold is that of the
    positive values alone (with the zeros it would be pulled far down)."""
    x = np.random.default_rng(4).normal(0, 1, 200_000).astype(np.float32)
    relu, positive = _stats(np.maximum(x, 0), 1), _stats(x[x > 0], 1)
    assert relu.zeros == int((x <= 0).sum())
    assert choose_threshold(relu, "entropy") == choose_threshold(positive, "entropy")
    assert choose_threshold(relu, "entropy") > 0.7 * relu.absmax


def test_clipped_fraction_counts_values_beyond_the_threshold():
    x = np.random.default_rng(5).normal(0, 1, 100_000).astype(np.float32)
    st = _stats(x)
    for t in (0.5, 2.0, 3.0):
        assert st.clipped_fraction(t) == pytest.approx((np.abs(x) > t).mean(), abs=2e-3)
    assert st.clipped_fraction(st.absmax) == 0.0


def test_unknown_method_and_bad_percentile():
    st = _stats(np.ones(10))
    with pytest.raises(QuantizationError, match="unknown calibration method 'kl'"):
        choose_threshold(st, "kl")
    with pytest.raises(QuantizationError, match="percentile"):
        choose_threshold(st, "percentile", 0.0)


# ---------------------------------------------------------------------------------------------------------
# Calibration data


INPUTS = {"x": TensorType((1, 2, 4, 4), "float32")}


def test_calibration_data_is_checked_and_named():
    good = np.zeros((5, 2, 4, 4), np.float64)
    assert check_calibration(INPUTS, {"arr_0": good})["x"].dtype == np.float32  # one array: any name
    assert check_calibration(INPUTS, {"x": good[:, None]})["x"].shape == (5, 2, 4, 4)  # (N, *shape)
    two = {"x": INPUTS["x"], "y": TensorType((1, 3), "float32")}
    cases = [
        (two, {"x": good}, r"input 'y' is missing: the model takes float32 Nx3"),
        (two, {"x": good, "y": np.zeros((5, 3)), "z": good}, r"array 'z' \(float64 \(5, 2, 4, 4\)\) is unknown"),
        (INPUTS, {"x": np.zeros((5, 2, 4, 3))}, r"'x': shape \(5, 2, 4, 3\) does not match Nx2x4x4"),
        (INPUTS, {"x": np.zeros((5, 2, 4, 4), np.uint8)}, "'x': dtype uint8, the model takes float32"),
        (INPUTS, {"x": np.zeros((0, 2, 4, 4))}, "'x' has no samples"),
        (two, {"x": good, "y": np.zeros((4, 3))}, "different numbers of samples"),
    ]
    for inputs, data, message in cases:
        with pytest.raises(QuantizationError, match=message):
            check_calibration(inputs, data)
    bad = good.copy()
    bad[3, 1, 2, 2] = np.nan
    with pytest.raises(QuantizationError, match="'x' has NaN or infinite values in sample 3"):
        check_calibration(INPUTS, {"x": bad})


def test_integer_calibration_inputs_are_taken_exactly():
    """Token ids and a mask calibrate as the integers they are (int64 narrowed where every value fits)."""
    inputs = {"ids": TensorType((1, 6), "int32"), "x": TensorType((1, 6), "float32")}
    ids = np.arange(-20, 28, dtype=np.int64).reshape(8, 6)
    data = check_calibration(inputs, {"ids": ids, "x": np.ones((8, 6))})
    assert data["ids"].dtype == np.int32 and np.array_equal(data["ids"], ids)
    ids[5, 4] = 2**33
    with pytest.raises(QuantizationError, match=r"'ids' \(int64\) for int32: 1 value\(s\) .* at \[5, 4\]"):
        check_calibration(inputs, {"ids": ids, "x": np.ones((8, 6))})


def _conv_graph(w: np.ndarray, b: np.ndarray) -> Graph:
    """x -> conv -> relu -> max pool -> conv -> y, float."""
    nodes = [
        Node("conv2d", ("x", "w1", "b1"), "c1", {"padding": 1}),
        Node("relu", ("c1",), "r1"),
        Node("max_pool2d", ("r1",), "p1", {"kernel": (2, 2)}),
        Node("conv2d", ("p1", "w2"), "y", {"padding": 1}),
    ]
    w2 = np.random.default_rng(6).normal(0, 0.3, (3, 4, 3, 3)).astype(np.float32)
    return Graph(dict(INPUTS), nodes, ["y"], {"w1": w, "b1": b, "w2": w2}, name="two_convs")


def test_plan_and_rewrite_of_a_small_graph():
    rng = np.random.default_rng(7)
    g = _conv_graph(rng.normal(0, 0.3, (4, 2, 3, 3)).astype(np.float32), rng.normal(0, 0.1, 4).astype(np.float32))
    plan = plan_quantization(g)
    assert plan.anchors == ("c1", "y") and plan.chains == {"c1": "r1", "y": "y"}
    assert plan.points == {"x": "x", "r1": "r1", "p1": "r1", "y": "y"}  # the max pool keeps the scale
    data = {"x": rng.normal(0, 1, (16, 2, 4, 4)).astype(np.float32)}
    q, report = quantize_model(g, data, "minmax")
    assert report.samples == 16 and [t.name for t in report.tensors] == ["x", "r1", "p1", "y"]
    low = lower_qdq(q)
    ops = [n.op for n in low.nodes]
    assert ops.count("conv2d") == 2 and "dequantize" not in ops[:-1]  # both convolutions in integer form
    x = data["x"][:1]
    want, got = evaluate(g, {"x": x})["y"], evaluate(low, {"x": x})["y"]
    step = [t.scale for t in report.tensors if t.name == "y"][0]
    assert np.abs(want - got).max() <= 6 * step  # a few output steps after two int8 layers


def test_a_constant_residual_is_quantized_at_the_sums_scale_and_added_in_the_epilogue():
    """A dense layer whose output is added to a constant of its shape (a position embedding after a patch
    embedding): the add ends the layer's epilogue chain, the constant quantized at the sum's scale (rounded half to
    even, as QuantizeLinear), the lowered epilogue adding that int8 tensor as a skip, within a step of the float
    sum."""
    rng = np.random.default_rng(8)
    params = {
        "w": rng.normal(0, 0.3, (16, 16)).astype(np.float32),
        "pos": rng.normal(0, 0.5, (8, 16)).astype(np.float32),
    }
    nodes = [Node("dense", ("x", "w"), "d"), Node("add", ("d", "pos"), "y")]
    g = Graph({"x": TensorType((8, 16), "float32")}, nodes, ["y"], params)
    plan = plan_quantization(g)
    assert plan.chains == {"d": "y"} and plan.constant_skips == {"y": ("pos", "y")}
    data = {"x": rng.normal(0, 1, (16, 8, 16)).astype(np.float32)}
    q, report = quantize_model(g, data, "minmax")
    low = lower_qdq(q)
    (add,) = [n for n in low.nodes if n.op == "add"]
    pos_q = low.params[add.inputs[1]]
    step = [t.scale for t in report.tensors if t.name == "y"][0]
    assert pos_q.dtype == np.int8 and np.array_equal(
        pos_q, np.clip(np.rint(params["pos"] / np.float32(step)), -128, 127)
    )
    x = data["x"][0]
    want, got = evaluate(g, {"x": x})["y"], evaluate(low, {"x": x})["y"]
    assert np.abs(want - got).max() <= 2.5 * step  # the input's, the layer's and the constant's roundings


def test_grouped_convolutions_and_kept_nodes_stay_float_with_quantized_boundaries():
    rng = np.random.default_rng(10)
    g = _conv_graph(rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32), np.zeros(4, np.float32))
    g.nodes[0] = Node("conv2d", ("x", "w1", "b1"), "c1", {"padding": 1, "groups": 2})  # depthwise-like
    plan = plan_quantization(g)
    assert plan.anchors == ("y",) and plan.points == {"p1": "p1", "y": "y"}  # the float pool output is quantized
    g = _conv_graph(rng.normal(0, 0.3, (4, 2, 3, 3)).astype(np.float32), np.zeros(4, np.float32))
    plan = plan_quantization(g, keep_float=["p1"])  # a kept max pool does not carry the scale through
    assert plan.anchors == ("c1", "y") and plan.points == {"x": "x", "r1": "r1", "p1": "p1", "y": "y"}
    q, _ = quantize_model(g, {"x": rng.normal(0, 1, (4, 2, 4, 4)).astype(np.float32)}, keep_float=["p1"])
    pool = next(n for n in q.nodes if n.op == "max_pool2d")
    assert pool.inputs == ("r1",) and q.producers()["r1"].op == "dequantize"  # float pool between DQ and Q


def test_zero_tensor_warns_and_bad_weights_and_names_are_refused():
    g = _conv_graph(np.zeros((4, 2, 3, 3), np.float32), np.full(4, -1.0, np.float32))  # relu output always 0
    data = {"x": np.random.default_rng(8).normal(0, 1, (4, 2, 4, 4)).astype(np.float32)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, report = quantize_model(g, data, "entropy")
    assert any(issubclass(w.category, QuantizationWarning) and "'r1' is zero" in str(w.message) for w in caught)
    assert report.warnings and "'r1'" in report.warnings[0]
    with pytest.raises(QuantizationError, match="has no node 'c2'.*close names: c1"):
        quantize_model(g, data, keep_float=["c2"])
    nan_w = np.ones((4, 2, 3, 3), np.float32)
    nan_w[1, 0, 0, 0] = np.inf
    with pytest.raises(QuantizationError, match=r"conv2d 'c1' \(weights 'w1'\): .*NaN or infinite"):
        quantize_model(_conv_graph(nan_w, np.zeros(4, np.float32)), data)


def test_negligible_channels_are_quantized_as_zero_channels():
    """Trained layers hold channels of weights far below the rest (1e-30, a denormal 1e-40): such a channel takes
    the layer's largest scale, its weights round to 0 and its bias is kept at that accumulator scale; a small
    channel above 2^-16 of the largest keeps its own scale."""
    rng = np.random.default_rng(12)
    w = rng.normal(0, 0.5, (4, 2, 3, 3)).astype(np.float32)
    w[1] *= np.float32(1e-30)
    w[2] = np.float32(1e-40) * np.sign(w[2])  # denormal in float32
    w[3] *= np.float32(2.0**-14)  # small, but not negligible
    scales = weight_scales(w, "test")
    largest = np.abs(w[0]).max() / 127
    assert scales[1] == scales[2] == np.float32(largest) and scales[3] == np.float32(np.abs(w[3]).max() / 127)
    b = np.array([0.1, 0.3691, -0.2, 0.05], np.float32)
    data = {"x": rng.normal(0, 1, (8, 2, 4, 4)).astype(np.float32)}
    q, report = quantize_model(_conv_graph(w, b), data, "minmax")
    assert report.layers[0].weight_scale_min == pytest.approx(float(scales[3]))
    w_q, b_q, b_s = (q.params[f"c1:{k}"] for k in ("w_q", "b_q", "b_scale"))
    assert not w_q[1:3].any() and np.abs(w_q[3]).max() == 127  # the negligible channels are zero
    np.testing.assert_allclose(b_q * b_s.astype(np.float64), b, rtol=1e-3)  # every bias at its own scale
    low = lower_qdq(q)
    x = data["x"][:1]
    want, got = evaluate(_conv_graph(w, b), {"x": x})["y"], evaluate(low, {"x": x})["y"]
    assert np.abs(want - got).max() <= 6 * next(t.scale for t in report.tensors if t.name == "y")


def test_quantization_errors_name_the_node_the_tensor_and_the_channel():
    """A bias that truly cannot fit int32 (a small, not negligible channel with a large bias) is refused naming the
    node, tensor and channel. A QDQ model whose own weight scales span more than the multiplier resolves keeps the
    unresolvable channel as the zero channel with its bias (here 0: its int8 output is 0), and is refused, naming
    the channel, only where the channel's weights could still move the output by a step (a huge largest scale)."""
    rng = np.random.default_rng(13)
    w = rng.normal(0, 0.5, (4, 2, 3, 3)).astype(np.float32)
    w[2] *= np.float32(1e-4)
    b = np.array([0.1, 0.2, 1e4, 0.3], np.float32)
    data = {"x": rng.normal(0, 1, (8, 2, 4, 4)).astype(np.float32)}
    with pytest.raises(QuantizationError, match=r"conv2d 'c1': bias 'b1' channel 2 does not fit int32 .*b = 1e\+04"):
        quantize_model(_conv_graph(w, b), data, "minmax")
    q, _ = quantize_model(_conv_graph(w, b.clip(-1, 1)), data, "minmax")
    q.params["c1:w_scale"], q.params["c1:b_q"] = q.params["c1:w_scale"].copy(), q.params["c1:b_q"].copy()
    q.params["c1:w_scale"][3], q.params["c1:b_q"][3] = 1e-38, 0  # a QDQ model keeps the scales it carries
    low = lower_qdq(q)
    assert not evaluate(low, {"x": data["x"][:1]}, keep=True)["r1:q"][:, 3].any()
    q.params["c1:w_scale"] = q.params["c1:w_scale"].copy()
    q.params["c1:w_scale"][0] *= 2.0**28  # the layer's largest scale (near 1e6): its shift falls near 10
    q.params["c1:w_scale"][3] = q.params["c1:w_scale"][0] * 2.0**-33  # below the resolution, yet steps of output
    named = r"conv2d 'c1' \(weights 'c1:w_q', output 'r1:q'\), s_x \* s_w\[c\] / s_y: channel 3's scale .* is below"
    with pytest.raises(IsaError, match=named + r".*not negligible"):
        lower_qdq(q)


def test_calibration_observes_intermediate_values_and_reports_progress():
    g = _conv_graph(np.ones((4, 2, 3, 3), np.float32), np.zeros(4, np.float32))
    data = {"x": np.random.default_rng(9).normal(0, 1, (6, 2, 4, 4)).astype(np.float32)}
    seen = []
    stats = calibrate(g, data, ["x", "c1", "y"], progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 6) for i in range(1, 7)]
    c1 = np.concatenate([evaluate(g, {"x": data["x"][i : i + 1]}, keep=True)["c1"].ravel() for i in range(6)])
    assert stats["c1"].min == c1.min() and stats["c1"].max == c1.max() and stats["c1"].count == c1.size


# ---------------------------------------------------------------------------------------------------------
# End to end: the small ResNet


onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.model import Module, load_artifact  # noqa: E402
from vdla.model.pipeline import CompileError, compile_graph_model, compile_model  # noqa: E402
from vdla.zoo.models import calibration_images, cosine_rows, quantize_qdq, small_resnet  # noqa: E402

SHAPE = (3, 32, 32)
SAMPLES = 32


@pytest.fixture(scope="module")
def model():
    return small_resnet(seed=0)


@pytest.fixture(scope="module")
def calib():
    return calibration_images(SHAPE, 32, seed=1)


@pytest.fixture(scope="module")
def float_logits(model):
    session = reference_session(model)
    images = calibration_images(SHAPE, SAMPLES, seed=7)
    return images, np.concatenate([session.run(None, {"image": x[None]})[0] for x in images])


def _agreement(module: Module, images: np.ndarray, want: np.ndarray, step: float) -> tuple[np.ndarray, int]:
    got = np.concatenate([module.run(x[None])["logits"] for x in images])
    cos = cosine_rows(got, want)
    agree = got.argmax(axis=1) == want.argmax(axis=1)
    top2 = np.sort(want, axis=1)[:, -2:]
    margin = (top2[:, 1] - top2[:, 0]) / step
    assert np.all(margin[~agree] < 3), margin[~agree]  # a disagreement is a near tie of the float logits
    return cos, int(agree.sum())


@pytest.mark.parametrize(
    "method, cos_min, top1_min",
    [("minmax", 0.98, 30), ("percentile", 0.98, 30), ("entropy", 0.98, 30)],
)
def test_quantized_small_resnet_on_sim_tracks_the_float_model(model, calib, float_logits, method, cos_min, top1_min):
    art, report = compile_model(model, calib={"image": calib}, calibration=method)
    accel = [s.layer["op"] for s in art.steps if s.kind == "accel"]
    assert sum(op.split("+")[0] in ("conv2d", "dense") for op in accel) == 7  # every conv and dense
    assert "conv2d+max_pool2d" in accel  # the max pool in the stem's tiles
    assert art.accel_macs == art.total_macs
    q = report.quantization
    assert q.method == method and q.samples == 32 and len(q.layers) == 7
    step = next(t.scale for t in q.tensors if t.name == "logits")
    cos, agree = _agreement(Module(art, "sim"), *float_logits, step)
    assert cos.min() >= cos_min and cos.mean() >= 0.998, (cos.min(), cos.mean())
    assert agree >= top1_min, agree


def test_sim_is_bit_exact_against_the_lowered_quantized_graph(model, calib):
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify

    qgraph, _ = quantize_model(simplify(import_onnx(model)), {"image": calib}, "entropy")
    art, _ = compile_graph_model(qgraph, "pynq")
    module, low = Module(art, "sim"), lower_qdq(qgraph)
    for x in calibration_images(SHAPE, 4, seed=11):
        got, want = module.run(x[None]), evaluate(low, {"image": x[None]})
        np.testing.assert_array_equal(got["logits"], want["logits"])


def test_keep_float_leaves_one_convolution_on_the_cpu(model, calib, float_logits):
    art, report = compile_model(model, calib={"image": calib}, calibration="percentile", keep_float=["bn12"])
    assert report.quantization.kept_float == ("bn12",)
    assert sum(s.kind == "accel" and s.layer["op"].split("+")[0] in ("conv2d", "dense") for s in art.steps) == 6
    assert report.placement["bn12"] == "cpu"
    cpu = [s for s in art.steps if s.kind == "cpu" and any(n.output == "bn12" for n in s.graph.nodes)]
    conv = next(n for n in cpu[0].graph.nodes if n.output == "bn12")
    assert conv.op == "conv2d" and cpu[0].graph.params[conv.inputs[1]].dtype == np.float32  # float weights
    step = next(t.scale for t in report.quantization.tensors if t.name == "logits")
    cos, _ = _agreement(Module(art, "sim"), *float_logits, step)
    assert cos.min() >= 0.98 and cos.mean() >= 0.998, (cos.min(), cos.mean())  # measured 0.9889 / 0.99914


def test_qdq_models_keep_their_scales(model, calib):
    qdq = quantize_qdq(model, calib[:8])
    with pytest.raises(CompileError, match="already quantized.*keeps the scales it carries"):
        compile_model(qdq, calib={"image": calib})
    with pytest.raises(CompileError, match="keep_float needs calibration data"):
        compile_model(model, keep_float=["bn12"])
    with pytest.raises(CompileError, match="calib must be an .npz path, a dict of arrays by input name or one array"):
        compile_model(model, calib=[calib])


def test_a_single_input_model_takes_the_calibration_array_itself(model, calib):
    import vdla

    module = vdla.compile(model, calib=calib[:4], calibration="minmax", keep_float=["bn12"])
    q = module.compile_report.quantization
    assert q.method == "minmax" and q.samples == 4 and q.kept_float == ("bn12",) and q.tensors[0].name == "image"


def test_every_compile_option_reaches_the_compiler(model, calib, tmp_path):
    """vdla.compile takes every CompileOptions field (the options vdla.compile once dropped: power-of-two
    scales, separate residual scales, the report path), the CLI sets every field, an unknown one is refused."""
    import dataclasses

    import vdla
    from vdla.model.cli import compile_options
    from vdla.model.pipeline import CompileOptions

    rep = tmp_path / "q.json"
    module = vdla.compile(model, calib[:4], power_of_two=True, quant_report=rep)
    assert module.compile_report.quantization.power_of_two and json.loads(rep.read_text())["power_of_two"]
    separate = vdla.compile(model, calib[:4], align_residuals=False).compile_report.quantization
    aligned = compile_model(model, calib[:4], CompileOptions())[1].quantization
    assert len({t.scale for t in aligned.tensors}) < len({t.scale for t in separate.tensors})  # skips keep theirs
    with pytest.raises(CompileError, match=r"unknown compile option\(s\) \['calibraton'\]; the options are config"):
        vdla.compile(model, calib[:4], calibraton="entropy")
    from vdla.cli import build_parser

    args = ["compile", "m.onnx", "--config", "osdi18", "--input-shape", "image=1x3x32x32"]
    options = compile_options(build_parser().parse_args([*args, "--cpu-target", "aarch64-linux-gnu"]))
    assert {f.name for f in dataclasses.fields(options)} == {
        "config", "input_shapes", "calibration", "percentile", "keep_float", "auto_float", "align_residuals",
        "power_of_two", "equalize", "dump", "quant_report", "cpu_targets", "fuse_depthwise", "fuse_adds",
        "fuse_squeeze_excite",
        "pair_rows",
    }  # fmt: skip
    assert options.config == "osdi18" and options.input_shapes == {"image": (1, 3, 32, 32)}
    assert options.cpu_targets == ("aarch64-linux-gnu",) and options.fuse_depthwise
    assert not compile_options(build_parser().parse_args([*args, "--no-fuse-depthwise"])).fuse_depthwise
    assert options.fuse_adds and not compile_options(build_parser().parse_args([*args, "--no-fuse-adds"])).fuse_adds
    apart = compile_options(build_parser().parse_args([*args, "--no-fuse-squeeze-excite"]))
    assert options.fuse_squeeze_excite and not apart.fuse_squeeze_excite
    unpaired = compile_options(build_parser().parse_args([*args, "--no-pair-rows"]))
    old_flag = compile_options(build_parser().parse_args([*args, "--no-fold-narrow"]))  # the old name still works
    assert options.pair_rows and not unpaired.pair_rows and not old_flag.pair_rows


def test_cli_compiles_with_calibration(model, calib, tmp_path, capsys):
    from vdla.cli import main

    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", image=calib[:16])
    out, rep = tmp_path / "m.vdla", tmp_path / "quant.json"
    args = ["compile", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "calib.npz"), "-o", str(out)]
    args += ["--calibration", "percentile", "--percentile", "99.9", "--keep-float", "bn12", "--report", str(rep)]
    assert main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "int8 quantization: percentile 99.9, 16 calibration samples" in text and "relu26" in text
    report = json.loads(rep.read_text())
    assert report["method"] == "percentile" and report["percentile"] == 99.9 and report["kept_float"] == ["bn12"]
    by_name = {t["name"]: t for t in report["tensors"]}
    assert by_name["pool9"]["scale_of"] == "relu8" and by_name["pool9"]["scale"] == by_name["relu8"]["scale"]
    assert 0 < by_name["image"]["clipped"] < 0.01
    x = calib[20:21]
    assert Module(load_artifact(out)).run(x)["logits"].shape == (1, 10)
    assert main([*args[:-2], "--keep-float", "conv1"]) == 2
    assert "has no node 'conv1'" in " ".join(capsys.readouterr().out.split())
    np.savez(tmp_path / "bad.npz", images=calib[:4], other=calib[:4])
    assert main(["compile", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "bad.npz"), "-o", str(out)]) == 2
    text = " ".join(capsys.readouterr().out.split())
    assert "input 'image' is missing" in text and "array 'images'" in text and "array 'other'" in text


def test_residual_skips_share_their_sums_scale_and_run_on_the_accelerator(model, calib):
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify

    graph = simplify(import_onnx(model))
    plan = plan_quantization(graph)
    groups: dict[str, set[str]] = {}
    for v, rep in plan.ties.items():
        groups.setdefault(rep, set()).add(v)
    assert groups and all(len(g) >= 2 for g in groups.values())
    qgraph, report = quantize_model(graph, {"image": calib}, "entropy")
    scale = {t.name: t.scale for t in report.tensors}
    for members in groups.values():
        assert len({scale[v] for v in members}) == 1, {v: scale[v] for v in members}
    # the thresholds are the group's largest, so no member is clipped more than its own calibration says
    alone, own_report = quantize_model(graph, {"image": calib}, "entropy", align_residuals=False)
    own = {t.name: t.threshold for t in own_report.tensors}
    for members in groups.values():
        shared = next(t.threshold for t in report.tensors if t.name in members)
        assert max(own[v] for v in members) == pytest.approx(shared)
    low = lower_qdq(qgraph)
    skips = [n for n in low.nodes if n.op == "mul" and n.output.endswith(":skip")]
    assert not skips  # no rescaling of a skip: the epilogue adds the int8 skip as it is
    assert [n for n in lower_qdq(alone).nodes if n.op == "mul" and n.output.endswith(":skip")]
    art, _ = compile_graph_model(qgraph, "pynq")
    cpu = [s for s in art.steps if s.kind == "cpu"]
    art_sep, _ = compile_graph_model(alone, "pynq")
    assert len(cpu) < len([s for s in art_sep.steps if s.kind == "cpu"])
    module = Module(art, "sim")
    for x in calibration_images(SHAPE, 2, seed=5):
        np.testing.assert_array_equal(module.run(x[None])["logits"], evaluate(low, {"image": x[None]})["logits"])


def test_power_of_two_scales_make_every_requantization_a_shift(model, calib, float_logits):
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify

    qgraph, report = quantize_model(simplify(import_onnx(model)), {"image": calib}, "entropy", power_of_two=True)
    assert report.power_of_two and report.to_dict()["power_of_two"] is True
    for t in report.tensors:
        assert math.log2(t.scale) == round(math.log2(t.scale)), t
        assert t.threshold == pytest.approx(t.scale * 127)
    for layer in report.layers:
        assert layer.weight_scale_min == layer.weight_scale_max  # one scale per weight tensor
        assert math.log2(layer.weight_scale_min) == round(math.log2(layer.weight_scale_min))
    art, _ = compile_graph_model(qgraph, "pynq")
    convs = [s for s in art.steps if s.kind == "accel" and s.layer.get("op") in ("conv2d", "dense")]
    assert convs and all("mnone" in s.layer["epilogue"] for s in convs)  # no multiplier pass anywhere
    module, low = Module(art, "sim"), lower_qdq(qgraph)
    for x in calibration_images(SHAPE, 2, seed=3):
        np.testing.assert_array_equal(module.run(x[None])["logits"], evaluate(low, {"image": x[None]})["logits"])
    step = next(t.scale for t in report.tensors if t.name == "logits")
    cos, _ = _agreement(module, *float_logits, step)
    assert cos.mean() >= 0.99, cos.mean()  # coarser than per-channel scales, still tracking the float model
