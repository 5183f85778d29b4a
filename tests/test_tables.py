"""Activation tables (``vdla.graph.tables``): elementwise functions of one int8 tensor tabulated as 256-entry
tables, bit-exact with the graph before (interpreter and CPU JIT) and with onnxruntime's int8 reference; the
table kernel against its numpy semantics; what ends a cone."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.cpu_fallback import compile_graph, get_kernel  # noqa: E402
from vdla.cpu_fallback.specs import make_table  # noqa: E402
from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph import oracle  # noqa: E402
from vdla.graph.graph import Graph, Node  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.graph.tables import BYTES, tabulate_chains  # noqa: E402
from vdla.graph.types import Quant, TensorType  # noqa: E402
from vdla.zoo.models import quantize_qdq  # noqa: E402

RNG = np.random.default_rng(5)
ACTIVATIONS = {  # ONNX nodes between two convolutions: (op, attributes, extra scalar inputs)
    "silu": None,
    "sigmoid": ("Sigmoid", {}),
    "tanh": ("Tanh", {}),
    "hardswish": ("HardSwish", {}),
    "hardsigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
    "leaky_relu": ("LeakyRelu", {"alpha": 0.1}),
    "elu": ("Elu", {"alpha": 0.7}),
    "gelu": ("Gelu", {}),
    "mish": ("Mish", {}),
    "softplus": ("Softplus", {}),
}


def _model(act: str, prelu_slopes: np.ndarray | None = None):
    """x -> conv -> activation(s) -> conv -> y (float, 16 channels, 8x8)."""
    w1 = numpy_helper.from_array(RNG.normal(0, 0.3, (16, 16, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(RNG.normal(0, 0.3, (16, 16, 3, 3)).astype(np.float32), "w2")
    nodes, inits = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * 4)], [w1, w2]
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["a"])]
    elif act == "prelu":
        inits.append(numpy_helper.from_array(prelu_slopes.astype(np.float32), "slope"))
        nodes.append(helper.make_node("PRelu", ["c", "slope"], ["a"]))
    else:
        op, attrs = ACTIVATIONS[act]
        nodes.append(helper.make_node(op, ["c"], ["a"], **attrs))
    nodes.append(helper.make_node("Conv", ["a", "w2"], ["y"], pads=[1] * 4))
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        act,
        [helper.make_tensor_value_info("x", f, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", f, [1, 16, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _qdq(model):
    return quantize_qdq(model, RNG.normal(0, 1, (8, 16, 8, 8)).astype(np.float32), input_name="x")


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_each_activation_tabulates_as_one_table_equal_to_the_int8_reference(act):
    qdq = _qdq(_model(act))
    lowered = lower_qdq(simplify(import_onnx(qdq)))
    tabled = tabulate_chains(lowered)
    tables = [n for n in tabled.nodes if n.op == "table"]
    assert len(tables) == 1, [n.op for n in tabled.nodes]
    ops = [n.op for n in tabled.nodes]
    assert ops.count("dequantize") == 1 and ops[-1] == "dequantize"  # the output's; no float between the convs
    kernel = compile_graph(tabled)
    for _ in range(3):
        x = RNG.normal(0, 1.5, (1, 16, 8, 8)).astype(np.float32)
        want = evaluate(lowered, {"x": x})["y"]
        np.testing.assert_array_equal(evaluate(tabled, {"x": x})["y"], want)
        np.testing.assert_array_equal(kernel(x=x)["y"], want)
        np.testing.assert_array_equal(want, reference_run(qdq, {"x": x})["y"])


def test_a_per_channel_constant_ends_the_cone_and_a_scalar_one_tabulates():
    per_channel = lower_qdq(simplify(import_onnx(_qdq(_model("prelu", RNG.uniform(0.05, 0.3, (16, 1, 1)))))))
    assert not any(n.op == "table" for n in tabulate_chains(per_channel).nodes)
    scalar = lower_qdq(simplify(import_onnx(_qdq(_model("prelu", np.array([0.2]))))))
    assert sum(n.op == "table" for n in tabulate_chains(scalar).nodes) == 1


def _graph(nodes: list[Node], outputs: list[str]) -> Graph:
    q = Quant((0.05,))
    return Graph({"x": TensorType((2, 8), "int8", q)}, nodes, outputs, name="g")


def test_a_value_read_outside_the_cone_is_kept():
    nodes = [
        Node("dequantize", ("x",), "d", {"scale": 0.05, "zero_point": 0}),
        Node("sigmoid", ("d",), "s"),
        Node("quantize", ("s",), "q", {"scale": 1 / 128, "zero_point": 0}),
        Node("tanh", ("d",), "t"),  # reads the dequantized value too, and is an output
    ]
    tabled = tabulate_chains(_graph(nodes, ["q", "t"]))
    assert [n.op for n in tabled.nodes] == [n.op for n in nodes]  # d is read by t: no cone ends at q
    x = RNG.integers(-128, 128, (2, 8)).astype(np.int8)
    tabled = tabulate_chains(_graph(nodes[:3], ["q"]))
    assert [n.op for n in tabled.nodes] == ["table"]
    np.testing.assert_array_equal(evaluate(tabled, {"x": x})["q"], evaluate(_graph(nodes[:3], ["q"]), {"x": x})["q"])


def test_table_kernel_equals_its_numpy_semantics():
    x = RNG.integers(-128, 128, (3, 5, 7)).astype(np.int8)
    entries = RNG.integers(-128, 128, 256).astype(np.int8)
    spec = make_table(TensorType.of(x, "table"), TensorType.of(entries, "table"))
    got = get_kernel(spec)(x, entries)
    np.testing.assert_array_equal(got, oracle.table(x, entries))
    np.testing.assert_array_equal(oracle.table(BYTES, entries), entries)  # entry b for the value whose byte is b
    assert oracle.table(np.int8(-1), entries) == entries[255]


def test_a_cpu_step_tabulates_dequantized_activations_as_float32_tables():
    """In a CPU step (cpu_tables), sigmoid(dequantize(x)) becomes one table of 256 float32 entries, equal
    bit for bit to the graph interpreter and run by the CPU's table kernel; a lone dequantize stays, and so
    does a float cone another value reads into."""
    from vdla.graph.tables import cpu_tables

    nodes = [
        Node("dequantize", ("x",), "d", {"scale": 0.05, "zero_point": 2}),
        Node("sigmoid", ("d",), "s"),
        Node("dequantize", ("y",), "e", {"scale": 0.1, "zero_point": 0}),
    ]
    g = Graph({"x": TensorType((2, 8, 3), "int8"), "y": TensorType((4,), "int8")}, nodes, ["s", "e"], name="g")
    tabled = cpu_tables(g)
    assert [n.op for n in tabled.nodes] == ["table", "dequantize"]
    assert tabled.params["s:table"].dtype == np.float32 and tabled.params["s:table"].shape == (256,)
    feeds = {"x": RNG.integers(-128, 128, (2, 8, 3)).astype(np.int8), "y": RNG.integers(-128, 128, 4).astype(np.int8)}
    want = evaluate(g, feeds)
    for got in (evaluate(tabled, feeds), compile_graph(tabled).run(feeds)):
        np.testing.assert_array_equal(got["s"].view(np.uint32), want["s"].view(np.uint32))
        np.testing.assert_array_equal(got["e"], want["e"])


def test_a_float_table_is_no_accelerator_epilogue_stage():
    """Only int8 tables are activation tables of a layer's epilogue; a float32 one is refused by the
    table operator's own checks where its input is not int8, and by the epilogue matcher."""
    from vdla.graph.epilogue import _int_table

    class _Walk:
        class dialect:  # noqa: N801
            params = {"t": np.zeros(256, np.float32)}

    assert _int_table(Node("table", ("x", "t"), "y"), _Walk()) is None
    entries = {"t": np.zeros(256, np.float32)}
    bad = Graph({"x": TensorType((4,), "float32")}, [Node("table", ("x", "t"), "y")], ["y"], entries)
    with pytest.raises(Exception, match="int8 tensor and 256 int8 or float32 entries"):
        evaluate(bad, {"x": np.zeros(4, np.float32)})


# ---------------------------------------------------------------------------------------------------------
# On the accelerator: the table is the layer's last epilogue stage (EPI lut, LOAD LUT)


@pytest.fixture(scope="module")
def silu_compiled():
    from vdla.model.pipeline import compile_model

    qdq = _qdq(_model("silu"))
    return qdq, compile_model(qdq)[0]


def test_an_activation_between_two_convolutions_runs_in_the_first_ones_epilogue(silu_compiled):
    _, artifact = silu_compiled
    assert [s.kind for s in artifact.steps] == ["cpu", "accel", "accel", "cpu"]  # input and output only
    assert not any(n.op == "table" for s in artifact.steps if s.kind == "cpu" for n in s.graph.nodes)
    assert artifact.accel_macs == artifact.total_macs


def test_the_table_on_the_accelerator_equals_the_int8_reference(silu_compiled, backend):
    _runs_as_the_graph(*silu_compiled, backend, sigma=1.5)


def _runs_as_the_graph(qdq, artifact, backend: str, sigma: float = 1.0, seeds: int = 3) -> None:
    """The compiled model on ``backend`` equals the lowered QDQ graph without tables or moved quantizations
    (the graph interpreter) exactly, and the int8 reference within one output step (the reference's float32
    requantization rounds the odd tie the other way)."""
    from vdla.model import Module
    from vdla.zoo.models import qdq_output_scale

    untabled = lower_qdq(simplify(import_onnx(qdq)))
    module, step = Module(artifact, backend), qdq_output_scale(qdq, "y")
    for seed in range(seeds):
        x = np.random.default_rng(seed).normal(0, sigma, (1, 16, 8, 8)).astype(np.float32)
        got = module.run(x)
        np.testing.assert_array_equal(got, evaluate(untabled, {"x": x})["y"])
        assert np.abs(got - reference_run(qdq, {"x": x})["y"]).max() <= step * 1.01
    module.close()


def test_a_max_pool_is_fused_before_a_monotonic_table_only():
    from vdla.compiler import CompileError
    from vdla.compiler.fused_pool import FusedPool
    from vdla.graph.epilogue import Epilogue
    from vdla.graph.window import make_window

    window, _ = make_window("max_pool2d", (8, 8), 2, 2, 1, 0)
    rising = BYTES.astype(np.int16).clip(0, 127).astype(np.int8)  # ReLU: non-decreasing in the int8 value
    FusedPool.for_layer(window, (8, 8), Epilogue(table=rising))
    silu_like = np.where(BYTES < 0, -(BYTES.astype(np.int16) // 4) - 20, BYTES).astype(np.int8)
    with pytest.raises(CompileError, match="activation table that is not non-decreasing"):
        FusedPool.for_layer(window, (8, 8), Epilogue(table=silu_like))


# ---------------------------------------------------------------------------------------------------------
# Quantizations moved through concatenations and pools; concatenations stored in place


def _fire(e1: int = 16, e3: int = 32):
    """SqueezeNet's fire module between two convolutions: squeeze, expand 1x1 and 3x3 with ReLUs,
    concatenated, max pooled, then a 1x1 convolution."""
    r = np.random.default_rng(8)

    def w(name, shape):
        return numpy_helper.from_array(r.normal(0, np.sqrt(2 / np.prod(shape[1:])), shape).astype(np.float32), name)

    inits = [w("ws", (16, 16, 1, 1)), w("we1", (e1, 16, 1, 1)), w("we3", (e3, 16, 3, 3)), w("wo", (16, e1 + e3, 1, 1))]
    nodes = [
        helper.make_node("Conv", ["x", "ws"], ["s0"]),
        helper.make_node("Relu", ["s0"], ["s"]),
        helper.make_node("Conv", ["s", "we1"], ["a0"]),
        helper.make_node("Relu", ["a0"], ["a"]),
        helper.make_node("Conv", ["s", "we3"], ["b0"], pads=[1] * 4),
        helper.make_node("Relu", ["b0"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
        helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "wo"], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "fire",
        [helper.make_tensor_value_info("x", f, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", f, [1, 16, 4, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


@pytest.fixture(scope="module")
def fire():
    from vdla.model.pipeline import compile_model

    qdq = _qdq(_fire())
    return qdq, compile_model(qdq)[0]


def test_a_quantization_moves_through_a_concatenation_and_a_pool_exactly(fire):
    from vdla.graph.tables import quantize_early

    qdq, _ = fire
    lowered = lower_qdq(simplify(import_onnx(qdq)))
    moved = tabulate_chains(quantize_early(lowered))
    ops = [n.op for n in moved.nodes]
    assert ops.count("quantize") == 1 and ops.count("dequantize") == 1  # the input's and the output's
    for seed in range(3):
        x = np.random.default_rng(seed).normal(0, 1, (1, 16, 8, 8)).astype(np.float32)
        np.testing.assert_array_equal(evaluate(moved, {"x": x})["y"], evaluate(lowered, {"x": x})["y"])


def test_a_concatenation_of_layers_is_stored_in_place(fire, backend):
    qdq, artifact = fire
    assert [s.kind for s in artifact.steps] == ["cpu", "accel", "accel", "accel", "accel", "accel", "cpu"]
    assert not any(n.op == "concat" for s in artifact.steps if s.kind == "cpu" for n in s.graph.nodes)
    _runs_as_the_graph(qdq, artifact, backend, seeds=2)


def test_a_concatenation_of_partial_channel_blocks_is_joined_on_the_accelerator():
    from vdla.model.pipeline import compile_model

    qdq = _qdq(_fire(e1=8, e3=24))  # 8 channels: not a whole block of 16, joined by selections (vdla.graph.copies)
    artifact = compile_model(qdq)[0]
    assert not any(n.op == "concat" for s in artifact.steps if s.kind == "cpu" for n in s.graph.nodes)
    assert [s.layer.get("copy") for s in artifact.steps if s.kind == "accel"].count("concat") == 2
    x = np.random.default_rng(0).normal(0, 1, (1, 16, 8, 8)).astype(np.float32)
    lowered = lower_qdq(simplify(import_onnx(qdq)))
    from vdla.model import Module

    np.testing.assert_array_equal(Module(artifact, "sim").run(x), evaluate(lowered, {"x": x})["y"])


def test_a_quantization_moves_through_a_split_and_the_halves_share_it():
    q = {"scale": 0.04, "zero_point": 0}
    nodes = [
        Node("dequantize", ("x",), "d", {"scale": 0.05, "zero_point": 0}),
        Node("sigmoid", ("d",), "s"),
        Node("mul", ("d", "s"), "m"),  # SiLU
        Node("slice", ("m",), "a", {"starts": (0, 0), "stops": (2, 4), "steps": (1, 1)}),
        Node("slice", ("m",), "b", {"starts": (0, 4), "stops": (2, 8), "steps": (1, 1)}),
        Node("quantize", ("a",), "qa", dict(q)),
        Node("quantize", ("b",), "qb", dict(q)),
    ]
    from vdla.graph.tables import quantize_early

    graph = _graph(nodes, ["qa", "qb"])
    moved = tabulate_chains(quantize_early(graph))
    assert sorted(n.op for n in moved.nodes) == ["slice", "slice", "table"]  # one SiLU table, int8 slices
    x = RNG.integers(-128, 128, (2, 8)).astype(np.int8)
    want, got = evaluate(graph, {"x": x}), evaluate(moved, {"x": x})
    for k in ("qa", "qb"):
        np.testing.assert_array_equal(got[k], want[k])
