"""Transformer operators on the accelerator (issue 53): GELU in the epilogue of the dense layer computing its
input, as exporters write it (ONNX Gelu, exact erf or tanh form, and both written out), for a MatMul over a
(batch, tokens, features) input; the flattening reshape moved out of the way (``sink_reshapes``), the compiled
model bit-exact against the lowered quantized graph and close to onnxruntime's float model."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from vdla.graph import Graph, Node, TensorType
from vdla.graph.interp import evaluate
from vdla.graph.passes import sink_reshapes
from vdla.graph.verify import verify

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from qdq_check import assert_lowered_and_near_float  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.graph.quantize import quantize_model  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402
from vdla.zoo.models import cosine  # noqa: E402

RNG = np.random.default_rng(53)
TOKENS, DIM, HIDDEN = 24, 48, 96


def test_sink_reshapes_moves_the_flattening_after_the_bias_and_activation():
    params = {
        "w1": RNG.normal(0, 0.2, (HIDDEN, DIM)).astype(np.float32),
        "b1": RNG.normal(0, 0.1, (HIDDEN,)).astype(np.float32),
        "w2": RNG.normal(0, 0.2, (DIM, HIDDEN)).astype(np.float32),
        "b2": RNG.normal(0, 0.1, (1, 1, DIM)).astype(np.float32),
    }
    nodes = [
        Node("reshape", ("x",), "x2", {"shape": (TOKENS, DIM)}),
        Node("dense", ("x2", "w1"), "h2"),
        Node("reshape", ("h2",), "h", {"shape": (1, TOKENS, HIDDEN)}),
        Node("add", ("h", "b1"), "hb"),
        Node("gelu", ("hb",), "g", {"approximate": "none"}),
        Node("reshape", ("g",), "g2", {"shape": (TOKENS, HIDDEN)}),
        Node("dense", ("g2", "w2"), "y2"),
        Node("reshape", ("y2",), "y3", {"shape": (1, TOKENS, DIM)}),
        Node("add", ("y3", "b2"), "y"),  # a (1, 1, N) bias: reshaped to (N,) as it moves
    ]
    g = Graph({"x": TensorType((1, TOKENS, DIM), "float32")}, nodes, ["y"], params)
    out = sink_reshapes(g)
    verify(out, after="sink_reshapes")
    assert [n.op for n in out.nodes] == ["reshape", "dense", "add", "gelu", "dense", "add", "reshape"]
    x = RNG.normal(0, 1, (1, TOKENS, DIM)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(out, {"x": x})["y"], evaluate(g, {"x": x})["y"])


@pytest.mark.parametrize(
    "x_shape, shape",
    [((3, 4), (2, 6)), ((1, 2, 5, 8), (2, 5, 8))],  # the last axis moves; no (rows, columns) value (a head's slice)
)
def test_sink_reshapes_leaves_other_reshapes(x_shape, shape):
    nodes = [
        Node("reshape", ("x",), "r", {"shape": shape}),
        Node("quantize", ("r",), "y", {"scale": 0.5, "zero_point": 0}),
    ]
    g = Graph({"x": TensorType(x_shape, "float32")}, nodes, ["y"])
    assert [n.op for n in sink_reshapes(g).nodes] == ["reshape", "quantize"]


def _gelu_nodes(form: str, x: str, y: str) -> tuple[list, list]:
    """ONNX nodes computing GELU of ``x`` into ``y`` as exporters write it, with their constants."""
    if form in ("none", "tanh"):
        return [helper.make_node("Gelu", [x], [y], approximate=form)], []
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    if form == "erf":  # x * 0.5 * (1 + erf(x / sqrt(2))): torch's and HF's exact form
        nodes = [
            helper.make_node("Div", [x, "sqrt2"], ["u"]),
            helper.make_node("Erf", ["u"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"]),
            helper.make_node("Mul", [x, "e1"], ["xe"]),
            helper.make_node("Mul", ["xe", "half"], [y]),
        ]
        return nodes, [c("sqrt2", math.sqrt(2)), c("one", 1.0), c("half", 0.5)]
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): the tanh form written out (GPT-2's, BERT exports')
    nodes = [
        helper.make_node("Pow", [x, "three"], ["x3"]),
        helper.make_node("Mul", ["x3", "k"], ["kx3"]),
        helper.make_node("Add", [x, "kx3"], ["inner"]),
        helper.make_node("Mul", ["inner", "s"], ["si"]),
        helper.make_node("Tanh", ["si"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["half", x], ["hx"]),
        helper.make_node("Mul", ["hx", "t1"], [y]),
    ]
    consts = [c("three", 3.0), c("k", 0.044715), c("s", math.sqrt(2 / math.pi)), c("one", 1.0), c("half", 0.5)]
    return nodes, consts


def mlp_model(form: str) -> onnx.ModelProto:
    """A transformer's MLP block on (1, TOKENS, DIM): MatMul, bias Add, GELU, MatMul, bias Add (torch's Linear
    on a 3-D input as the exporter writes it)."""
    w1 = numpy_helper.from_array(RNG.normal(0, DIM**-0.5, (DIM, HIDDEN)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(RNG.normal(0, 0.1, (HIDDEN,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(RNG.normal(0, HIDDEN**-0.5, (HIDDEN, DIM)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(RNG.normal(0, 0.1, (DIM,)).astype(np.float32), "b2")
    gelu, consts = _gelu_nodes(form, "h", "g")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["h"]),
        *gelu,
        helper.make_node("MatMul", ["g", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, DIM])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, DIM])],
        [w1, b1, w2, b2, *consts],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _activations(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count, 1, TOKENS, DIM)).astype(np.float32)


@functools.cache
def compiled_mlp(form: str) -> tuple:
    """The MLP block with GELU in ``form``: the ONNX model, its quantized graph (vdla's calibration) and the
    artifact for ``pynq``."""
    model = mlp_model(form)
    qgraph, _ = quantize_model(simplify(import_onnx(model)), {"x": _activations(8, 1)[:, 0]}, "percentile")
    return model, qgraph, compile_graph_model(qgraph, "pynq")[0]


@pytest.mark.parametrize("form", ["none", "tanh", "erf", "tanh_written_out"])
def test_gelu_runs_in_the_epilogue_of_the_dense_layer_before_it(form):
    model, qgraph, art = compiled_mlp(form)
    accel = [s for s in art.steps if s.kind == "accel"]
    assert [s.layer["op"] for s in accel] == ["dense", "dense"]
    assert art.accel_macs == art.total_macs
    # the GELU is the first layer's table: no CPU step between the layers (the input's and the output's only)
    kinds = [s.kind for s in art.steps]
    assert kinds == ["cpu", "accel", "accel", "cpu"], [(s.kind, s.name, getattr(s, "note", "")) for s in art.steps]
    cpu_ops = {n.op for s in art.steps if s.kind == "cpu" for n in s.graph.nodes}
    assert not cpu_ops & {"gelu", "erf", "tanh", "table"}
    assert_lowered_and_near_float(art, lower_qdq(qgraph), model, _activations(2, 9), least=0.995)


def test_gelu_in_the_epilogue_is_bit_exact_on_each_backend(backend):
    _, qgraph, art = compiled_mlp("erf")
    module, low = Module(art, backend), lower_qdq(qgraph)
    for x in _activations(2, 11):
        np.testing.assert_array_equal(module.run(x), evaluate(low, {"x": x})["y"])
    module.close()


def test_deit_as_torch_exports_it_runs_gelu_on_the_accelerator_and_one_layer_norm_node():
    """DeiT-Tiny's block in torch's opset-13 form (LayerNorm written out with Pow, GELU with Erf), one layer at
    64x64: every LayerNorm one node on the accelerator (the last one a step for each of the two tokens the heads
    read), every GELU in a dense layer's table; CPU steps only for the patches and the heads' mean; close to
    onnxruntime's float model."""
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import deit_tiny
    from vdla.zoo.suite import suite_images

    model = deit_tiny(depth=1, image=64, classes=10)
    art, _ = compile_model(model, {"image": suite_images(4, 64, 1)}, input_shapes={"image": (1, 3, 64, 64)})
    cpu_ops = {n.op for s in art.steps if s.kind == "cpu" for n in s.graph.nodes}
    assert not cpu_ops & {"layer_norm", "pow", "sqrt", "reduce", "erf", "gelu"}, cpu_ops
    assert [s.kind for s in art.steps].count("cpu") == 2
    assert [s.layer["op"] for s in art.steps if s.kind == "accel"].count("layer_norm") == 4
    # the MLP's two layers back to back, the second reading the first's (GELU-tabled) output
    fc1 = next(i for i, s in enumerate(art.steps) if s.kind == "accel" and s.layer["output"][1] == 4 * 192)
    fc2 = art.steps[fc1 + 1]
    assert fc2.kind == "accel" and fc2.reads[0] == f"{art.steps[fc1].name}@16"
    assert len(fc2.reads) == 2  # and the residual stream: the residual add in its epilogue
    module, session = Module(art, "sim"), reference_session(model)
    for x in suite_images(2, 64, 7):
        assert cosine(module.run(x[None]), session.run(None, {"image": x[None]})[0]) >= 0.99
    module.close()


@pytest.mark.parametrize("form", ["none", "erf"])
def test_onnxruntime_qdq_mlp_runs_its_gelu_in_the_dense_epilogue(form):
    """onnxruntime's QDQ model of the MLP block (quantize/dequantize pairs around the bias add and the GELU):
    the two layers back to back on the accelerator, within one output step of onnxruntime's int8 reference."""
    from vdla.frontend.reference import reference_run
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import qdq_output_scale, quantize_qdq

    qmodel = quantize_qdq(mlp_model(form), _activations(8, 1)[:, 0], input_name="x")
    art, _ = compile_model(qmodel)
    assert [s.kind for s in art.steps] == ["cpu", "accel", "accel", "cpu"], [s.name for s in art.steps]
    step = qdq_output_scale(qmodel, "y")
    module = Module(art, "sim")
    for x in _activations(2, 13):
        got, want = module.run(x), reference_run(qmodel, {"x": x})["y"]
        assert np.abs(got - want).max() <= step * 1.01 and np.mean(got == want) > 0.95
    module.close()
