"""Per-channel equalization before calibration (issue 51, ``vdla/graph/equalize.py``, ``--equalize``).

The models are trained-like: each layer's output channels carry gains spread over two decades that the next
layer's input weights undo (what training leaves and cross-layer equalization removes: Nagel et al. 2019, fig. 2),
a dead ReLU channel (a bias far below its inputs' reach) whose stale weights in the next layer are 100 times the
others, and a near-zero channel (1e-30). The float graph equalized must compute what the original does
(onnxruntime's float output of the original ONNX model, on random inputs); the int8 model equalized must track
the float model better than without.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.cli import main  # noqa: E402
from vdla.frontend import import_onnx  # noqa: E402
from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.graph.autofloat import auto_float  # noqa: E402
from vdla.graph.equalize import choose_scales, equalize, worth_equalizing  # noqa: E402
from vdla.graph.graph import Graph, Node  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.quantize import quantize_model  # noqa: E402
from vdla.graph.types import TensorType  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_model  # noqa: E402
from vdla.zoo.models import calibration_images, cosine  # noqa: E402

SHAPE = (3, 16, 16)


class _Cnn:
    """A trained-like CNN as ONNX: x -> conv3x3 (16) -> ReLU -> depthwise 3x3 -> ReLU -> 1x1 (16, linear) = p;
    p -> 1x1 -> ReLU -> 1x1 (linear) -> + p -> 1x1 (8) -> ReLU6 -> 1x1 (8) -> sigmoid -> global average ->
    dense (10). Each layer's output channel ``c`` is multiplied by a gain ``g[c]`` (10^-1..10^1) and the next
    layer's input channel ``c`` divided by it; the first layer's channel 0 is dead with stale weights after it,
    the depthwise layer's channel 5 near zero (1e-30)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def param(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def conv(self, x: str, name: str, w: np.ndarray, b: np.ndarray, group: int = 1) -> str:
        k = w.shape[2]
        inputs = [x, self.param(f"{name}.w", w), self.param(f"{name}.b", b)]
        self.nodes.append(helper.make_node("Conv", inputs, [name], pads=[k // 2] * 4, group=group, name=name))
        return name

    def act(self, op: str, x: str, name: str, *bounds: float) -> str:
        inputs = [x, *(self.param(f"{name}.{i}", np.array(v)) for i, v in enumerate(bounds))]
        self.nodes.append(helper.make_node(op, inputs, [name], name=name))
        return name

    def weights(self, cout: int, cin: int, k: int) -> np.ndarray:
        return self.rng.normal(0, np.sqrt(2 / (cin * k * k)), (cout, cin, k, k))

    def gains(self, n: int) -> np.ndarray:
        return 10 ** self.rng.uniform(-1, 1, n)

    def model(self) -> onnx.ModelProto:
        w1, g1 = self.weights(16, 3, 3), self.gains(16)
        b1 = self.rng.normal(0, 0.1, 16)
        b1[0] = -100.0  # dead on every input: its stale weights in the next layer are 100 times the others
        r1 = self.act("Relu", self.conv("image", "c1", w1 * g1[:, None, None, None], b1 * g1), "r1")
        wd, gd = self.weights(16, 1, 3) / g1[:, None, None, None], self.gains(16)
        wd[0] *= 100.0
        gd[5] = 1e-30  # near zero, with its bias (a batch norm's gamma decayed to nothing)
        r2 = self.act("Relu", self.conv(r1, "dw", wd * gd[:, None, None, None], 0.1 * gd, group=16), "r2")
        w3, g3 = self.weights(16, 16, 1) / gd.clip(1e-2)[None, :, None, None], self.gains(16)
        p = self.conv(r2, "c3", w3 * g3[:, None, None, None], self.rng.normal(0, 0.1, 16) * g3)
        w4 = self.weights(16, 16, 1) / g3[None, :, None, None]
        r4 = self.act("Relu", self.conv(p, "c4", w4, self.rng.normal(0, 0.1, 16)), "r4")
        w5 = self.weights(16, 16, 1) * g3[:, None, None, None] * 0.25
        s = "sum"
        self.nodes.append(helper.make_node("Add", [p, self.conv(r4, "c5", w5, np.zeros(16))], [s], name=s))
        w6 = self.weights(8, 16, 1) / g3[None, :, None, None]
        r6 = self.act("Clip", self.conv(s, "c6", w6, self.rng.normal(0, 0.1, 8)), "r6", 0.0, 6.0)
        sig = self.act("Sigmoid", self.conv(r6, "c7", self.weights(8, 8, 1), np.zeros(8)), "sig")
        fc = [self.param("fc.w", self.rng.normal(0, 1, (10, 8))), self.param("fc.b", np.zeros(10))]
        self.nodes += [
            helper.make_node("GlobalAveragePool", [sig], ["gap"]),
            helper.make_node("Flatten", ["gap"], ["flat"]),
            helper.make_node("Gemm", ["flat", *fc], ["logits"], transB=1),
        ]
        x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, *SHAPE])
        y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])
        graph = helper.make_graph(self.nodes, "trained_like", [x], [y], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(m)
        return m


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _Cnn().model()


@pytest.fixture(scope="module")
def calib() -> np.ndarray:
    return calibration_images(SHAPE, 16, seed=3)


def _onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = reference_session(model)
    return np.concatenate([sess.run(None, {"image": x[i : i + 1]})[0] for i in range(len(x))])


def _vdla(graph: Graph, x: np.ndarray) -> np.ndarray:
    return np.concatenate([evaluate(graph, {"image": x[i : i + 1]})["logits"] for i in range(len(x))])


def test_equalized_float_graph_computes_the_original(model, calib):
    graph = simplify(import_onnx(model))
    eq_graph, eq = equalize(graph, {"image": calib})
    x = np.random.default_rng(11).normal(0, 1, (4, *SHAPE)).astype(np.float32)  # random, not the calibration data
    want = _onnxruntime(model, x)
    np.testing.assert_allclose(_vdla(eq_graph, x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    groups = {g.producers: g for g in eq.groups}
    assert set(groups) == {("r1",), ("r2",), ("c3", "c5"), ("r4",)} or set(groups) == {
        ("c1",),
        ("dw",),
        ("c3", "c5"),
        ("c4",),
    }
    # each group value is the original divided by the group's scales along its channel axis
    before, after = evaluate(graph, {"image": x[:1]}, keep=True), evaluate(eq_graph, {"image": x[:1]}, keep=True)
    for g in eq.groups:
        for v, axis in zip(g.values, g.axes, strict=True):
            shape = [1] * before[v].ndim
            shape[axis] = -1
            np.testing.assert_allclose(after[v], before[v] / g.scales.reshape(shape), rtol=1e-4, atol=1e-6)
    assert all(g.spread_after < g.spread_before for g in eq.groups)
    assert any("ReLU6" in r or "clip" in r for r in eq.skipped.values())  # the clip at 6 ends its group
    assert any(r.startswith("sigmoid") for r in eq.skipped.values())  # a tabulated activation too
    assert eq_graph.nodes and [n.output for n in eq_graph.nodes] == [n.output for n in graph.nodes]


def test_dead_and_negligible_channels_keep_their_scale(model, calib):
    graph = simplify(import_onnx(model))
    _, eq = equalize(graph, {"image": calib})
    first = next(g for g in eq.groups if "r1" in g.values)
    assert first.scales[0] == first.scales.min()  # the dead ReLU channel: its stale weights after it shrink most
    second = next(g for g in eq.groups if "r2" in g.values)
    assert second.scales[5] == second.scales.min()  # the 1e-30 channel
    assert all(np.all(g.scales > 0) and g.scales.max() / g.scales.min() <= 2.0**8 for g in eq.groups)


def test_scales_balance_ranges_and_flatten_before_depthwise_layers():
    r_x, r_w = np.array([100.0, 1.0, 0.0, 4.0]), np.array([0.01, 1.0, 1.0, 0.0])
    s = choose_scales(r_x, r_w, 0.5)
    assert s[2] == s[:2].min() and s[3] == s[:2].max()  # a dead channel, a channel no consumer reads
    ratio = (r_x[:2] / s[:2]) / (r_w[:2] * s[:2])  # activation over weight range: one factor for every channel
    assert ratio[0] == pytest.approx(ratio[1]) and (r_x[:2] / s[:2]).max() == pytest.approx(100.0)
    np.testing.assert_allclose(r_x[:2] / s[:2], 100.0)  # sqrt(r_x r_w) is the same for both: flat
    flat = choose_scales(np.array([8.0, 2.0, 0.5]), np.ones(3), 1.0)
    np.testing.assert_allclose(np.array([8.0, 2.0, 0.5]) / flat, 8.0)
    narrow, ones = np.array([1.0, 2.0, 6.0]), np.ones(3)
    assert not worth_equalizing(narrow, ones, False) and worth_equalizing(np.array([1.0, 16.0]), ones[:2], False)
    dead = np.array([1.0, 2.0, 0.0])  # a dead channel a 1x1 convolution reads: its stale weights may set the scale
    assert worth_equalizing(dead, ones, False) and not worth_equalizing(dead, ones, True)


def test_layer_norm_outliers_move_into_the_dense_weights():
    """SmoothQuant's case: a layer norm whose scale holds outlier channels (x30), then a dense layer."""
    rng = np.random.default_rng(2)
    gamma = rng.uniform(0.5, 1.5, 32)
    gamma[[3, 17]] *= 30.0
    params = {
        "gamma": gamma.astype(np.float32),
        "beta": rng.normal(0, 0.1, 32).astype(np.float32),
        "w": rng.normal(0, 0.2, (24, 32)).astype(np.float32),
        "b": rng.normal(0, 0.1, 24).astype(np.float32),
        "w2": rng.normal(0, 0.2, (8, 24)).astype(np.float32),
    }
    nodes = [
        Node("layer_norm", ("x", "gamma", "beta"), "ln", {"axis": 2, "epsilon": 1e-5}),
        Node("reshape", ("ln",), "flat", {"shape": (16, 32)}),
        Node("dense", ("flat", "w", "b"), "h"),
        Node("relu", ("h",), "r"),
        Node("dense", ("r", "w2"), "y"),
    ]
    graph = Graph({"x": TensorType((1, 16, 32), "float32")}, nodes, ["y"], params, name="ln_dense")
    data = {"x": rng.normal(0, 1, (16, 16, 32)).astype(np.float32)}
    eq_graph, eq = equalize(graph, data)
    assert {g.producers for g in eq.groups} == {("ln",), ("h",)} and eq.groups[0].axes == (2, 1)
    x = {"x": rng.normal(0, 1, (1, 16, 32)).astype(np.float32)}
    np.testing.assert_allclose(evaluate(eq_graph, x)["y"], evaluate(graph, x)["y"], rtol=1e-4, atol=1e-5)
    ln = eq.groups[0]
    assert ln.spread_before > 30 and ln.spread_after < ln.spread_before / 4
    want = evaluate(graph, x)["y"]
    plain = cosine(evaluate(quantize_model(graph, data)[0], x)["y"], want)
    equalized = cosine(evaluate(quantize_model(graph, data, equalize=True)[0], x)["y"], want)
    assert equalized > plain


def _sim_cosine(artifact, model: onnx.ModelProto, x: np.ndarray) -> float:
    module = Module(artifact, "sim")
    got = np.concatenate([module.run(x[i : i + 1]) for i in range(len(x))])
    return cosine(got, _onnxruntime(model, x))


@pytest.mark.parametrize("power_of_two", [False, True])
def test_equalization_lifts_the_int8_model_on_sim(model, calib, power_of_two):
    """Measured: 0.98956 -> 0.99994 (per-channel weight scales), 0.91379 -> 0.99957 (power-of-two scales, one
    per weight tensor: the producers' weights get flatter too)."""
    x = calibration_images(SHAPE, 4, seed=9)
    plain, _ = compile_model(model, calib, config="pynq", power_of_two=power_of_two)
    equalized, report = compile_model(model, calib, config="pynq", equalize=True, power_of_two=power_of_two)
    assert report.quantization.equalization is not None and len(report.quantization.equalization.groups) == 4
    c_plain, c_eq = _sim_cosine(plain, model, x), _sim_cosine(equalized, model, x)
    assert c_eq > c_plain and c_eq >= 0.999, (c_plain, c_eq)


def test_cli_equalizes_and_reports(model, calib, tmp_path, capsys):
    path, npz, rep = tmp_path / "m.onnx", tmp_path / "c.npz", tmp_path / "q.json"
    onnx.save(model, str(path))
    np.savez(npz, image=calib)
    args = ["compile", str(path), "--calib", str(npz), "--equalize", "--report", str(rep), "-o", str(tmp_path / "m")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "equalization: 4 groups" in out and "skipped" in out
    doc = json.loads(rep.read_text())
    assert len(doc["equalization"]["groups"]) == 4 and doc["equalization"]["skipped"]
    # the per-tensor errors are measured against the equalized float graph: the stream keeps a high cosine
    assert min(t["cosine"] for t in doc["tensors"] if t["name"] in ("sum", "c3")) > 0.99


def test_auto_float_needs_no_layer_in_float_once_equalized(model, calib):
    """Without equalization --auto-float 0.999 keeps layers in float; equalized, int8 reaches it."""
    graph = simplify(import_onnx(model))
    plain = auto_float(graph, {"image": calib}, 0.999)
    equalized = auto_float(graph, {"image": calib}, 0.999, equalize=True)
    assert plain.report.kept and plain.quant.equalization is None
    assert equalized.report.kept == () and equalized.report.cosine_before >= 0.999
    assert equalized.quant.equalization is not None and len(equalized.quant.equalization.groups) == 4
