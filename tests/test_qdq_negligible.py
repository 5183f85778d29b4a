"""Near-zero per-channel weight scales in QDQ models (issue 51): a dead channel of a trained network, its weights
x1e-30, keeps a weight scale near 1e-32 in the model onnxruntime's ``quantize_static`` writes, whose
requantization multiplier rounds to zero. vdla computes such a channel as the zero channel (its weights dropped,
its bias carried at 2^-shift of a step: :meth:`vdla.graph.qdq._QdqLowering.requantization`) and must then agree
with onnxruntime's int8 reference (optimizations off) within one output step, the dead channels exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from qdq_check import accel_between, lowered_graph  # noqa: E402

from vdla.cli import main  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.qdq import negligible_channels  # noqa: E402
from vdla.isa import IsaError  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_model  # noqa: E402
from vdla.zoo.models import qdq_output_scale, quantize_qdq  # noqa: E402

SHAPE = (1, 3, 16, 16)
DEAD = {"w1": [2, 7], "w2": [5, 11], "w3": [3]}  # the dead output channels of each layer


def _f(name: str, a) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def trained_like_net(seed: int = 0) -> onnx.ModelProto:
    """A float conv net with trained-like weights: dead channels (x1e-30, their bias 0 as pruning leaves it),
    channel magnitudes spread over two decades, a first layer without bias, a residual block and a head.
    conv1 3->16 (no bias) -> relu -> conv2 16->16 -> add(skip) -> relu -> conv3 16->8 -> y."""
    rng = np.random.default_rng(seed)

    def weights(name: str, shape: tuple[int, ...]) -> np.ndarray:
        w = rng.normal(0, 1, shape) * np.exp(rng.uniform(np.log(0.01), np.log(1.0), (shape[0], 1, 1, 1)))
        w[DEAD[name]] *= 1e-30
        return w / np.sqrt(np.prod(shape[1:]))

    b2, b3 = rng.normal(0, 0.2, 16), rng.normal(0, 0.2, 8)
    b2[DEAD["w2"]], b3[DEAD["w3"]] = 0.0, 0.0
    inits = [
        _f("w1", weights("w1", (16, 3, 3, 3))),
        _f("w2", weights("w2", (16, 16, 3, 3))),
        _f("b2", b2),
        _f("w3", weights("w3", (8, 16, 1, 1))),
        _f("b3", b3),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s2"]),
        helper.make_node("Relu", ["s2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "dead_channels", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _inputs(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1, SHAPE) * rng.uniform(0.3, 3.0)).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def qdq():
    return quantize_qdq(trained_like_net(), np.concatenate(_inputs(16, 1)), "x")


def _weight_scales(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    dequantized = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in init]
    return {n.input[0]: init[n.input[1]] for n in dequantized if init[n.input[0]].ndim == 4}


def test_the_quantizer_keeps_near_zero_scales(qdq):
    """The premise: onnxruntime's per-channel weight scales of the dead channels are ~1e-32, 1e-28 of the rest,
    and (as the scale follows the channel) their int8 weights are not zero."""
    scales = _weight_scales(qdq)
    for name, dead in DEAD.items():
        s = next(v for k, v in scales.items() if k.startswith(name))
        alive = np.delete(s, dead)
        assert s[dead].max() < 1e-28 * alive.min(), (name, s)


def check_against_onnxruntime(qdq: onnx.ModelProto, module: Module, lowered) -> None:
    """Every output equals the lowered integer graph's and lies within one output step of onnxruntime's int8
    reference (optimizations off); the dead channels of the last layer are exactly its."""
    step = qdq_output_scale(qdq, "y")
    for x in _inputs(4, 7):
        got, want = module.run(x), reference_run(qdq, {"x": x})["y"]
        np.testing.assert_array_equal(got, evaluate(lowered, {"x": x})["y"])
        assert np.abs(got - want).max() <= step * 1.01
        np.testing.assert_array_equal(got[:, DEAD["w3"]], want[:, DEAD["w3"]])
        assert np.mean(got == want) > 0.99  # all but rounding ties


def test_dead_channels_compile_on_the_accelerator_and_match_onnxruntime(qdq):
    art, _ = compile_model(qdq)
    assert len(accel_between(art)) >= 3  # every conv on the accelerator
    check_against_onnxruntime(qdq, Module(art, "sim"), lowered_graph(qdq))


def test_dead_channels_from_the_command_line(qdq, tmp_path, capsys):
    onnx.save(qdq, tmp_path / "dead_qdq.onnx")
    out = tmp_path / "dead.vdla"
    assert main(["compile", str(tmp_path / "dead_qdq.onnx"), "-o", str(out)]) == 0, capsys.readouterr().out
    step, x = qdq_output_scale(qdq, "y"), _inputs(1, 9)[0]
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    assert np.abs(np.load(tmp_path / "y.npy") - reference_run(qdq, {"x": x})["y"]).max() <= step * 1.01


def hand_qdq(s_w: list[float], b_q: list[int], w_q: np.ndarray, s_x: float, s_y: float) -> onnx.ModelProto:
    """x -> Q/DQ(s_x) -> Conv(DQ(w_q, s_w per channel), DQ(b_q, s_x * s_w)) -> Q/DQ(s_y) -> y: the QDQ form
    onnxruntime writes, with chosen scales."""
    oc = len(s_w)
    inits = [
        _f("sx", s_x),
        _f("sy", s_y),
        numpy_helper.from_array(np.int8(0), "z8"),
        numpy_helper.from_array(w_q.astype(np.int8), "wq"),
        _f("sw", s_w),
        numpy_helper.from_array(np.zeros(oc, np.int8), "zw"),
        numpy_helper.from_array(np.asarray(b_q, np.int32), "bq"),
        _f("sb", np.float32(s_x) * np.asarray(s_w, np.float32)),
        numpy_helper.from_array(np.zeros(oc, np.int32), "zb"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "z8"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "z8"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "sy", "z8"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "z8"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "hand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, 8, 8])], initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_dead_channel_keeps_its_bias():
    """Where the multiplier cannot represent a channel but its bias is a few output steps (a large int32 bias at
    a tiny scale), the channel outputs its bias's contribution: onnxruntime's value within one step."""
    rng = np.random.default_rng(3)
    w_q = rng.integers(-127, 128, (4, 3, 3, 3))
    s_x, s_y = 0.05, 0.05 / 64  # the live channels' scales s_x * s_w / s_y up to 32: shift 25
    s_w = [0.5, 0.3, 0.4, 2e-10]  # channel 3: s_x * s_w / s_y = 1.28e-8, under 2^-26
    b_q = [100, -200, 300, 1_500_000_000]  # channel 3's bias: 19.2 output steps
    model = hand_qdq(s_w, b_q, w_q, s_x, s_y)
    art, _ = compile_model(model)
    assert negligible_channels(np.asarray(s_w) * s_x / s_y).tolist() == [False, False, False, True]
    module = Module(art, "sim")
    for seed in range(3):
        x = np.random.default_rng(seed).normal(0, 2, (1, 3, 8, 8)).astype(np.float32)
        got, want = module.run(x), reference_run(model, {"x": x})["y"]
        assert np.abs(got - want).max() <= s_y * 1.01
        np.testing.assert_array_equal(got[0, 3], np.full((8, 8), 19 * np.float32(s_y), np.float32))
        np.testing.assert_array_equal(got[0, 3], want[0, 3])


def test_a_channel_whose_weights_still_count_is_refused_naming_it():
    """A channel below the multiplier's resolution whose int8 weights could still move the output by a step or
    more (a layer whose largest scale is huge) is not negligible: refused, naming the layer and the channel."""
    w_q = np.full((2, 3, 3, 3), 127)
    model = hand_qdq([2.0**20, 2.0**-12], [0, 0], w_q, 1 / 16, 1 / 16)
    with pytest.raises(IsaError, match=r"conv2d .*channel 1's scale .* is below the multiplier's resolution.*not negl"):
        compile_model(model)
