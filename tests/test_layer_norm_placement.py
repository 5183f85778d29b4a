"""LayerNorm placed on the accelerator inside models (issue 53): ``dequantize -> layer_norm -> quantize`` over the
last axis lowered to one ``layer_norm_int`` node (the integer reference), run by :mod:`vdla.compiler.layer_norm`
between dense layers with no CPU step, the residual add before it in the previous dense layer's epilogue
(``sink_reshapes`` makes the residual stream (tokens, features)); a LayerNorm the integer form or the accelerator
refuses stays on the CPU with the reason in the step's note."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from vdla.graph import Graph, Node, TensorType
from vdla.graph.interp import evaluate
from vdla.graph.passes import sink_reshapes
from vdla.graph.verify import verify

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from qdq_check import assert_lowered_and_near_float, initializer_adder, outlier_projection  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.graph.quantize import quantize_model  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402

TOKENS, DIM, HIDDEN = 20, 64, 128
RNG = np.random.default_rng(530)


def block_model(dim: int = DIM, axis: int = -1, seed: int = 0) -> onnx.ModelProto:
    """A pre-norm transformer block on (1, TOKENS, dim) as torch exports it, with weights shaped like trained ones:
    an embedding projection whose output channel 5 is an outlier of the residual stream (8x the weights, a bias of
    3), ``LayerNormalization``, the MLP (MatMul + Add, Gelu, MatMul + Add), the residual Add, a second
    ``LayerNormalization`` (a near-zero gamma channel, a negative one) and a last projection."""
    rng = np.random.default_rng(seed)
    inits = []
    c = initializer_adder(inits)

    w0, b0 = outlier_projection(rng, dim)
    g1 = rng.uniform(0.5, 1.5, dim)
    g1[3] = 1e-4
    g2 = rng.uniform(0.5, 1.5, dim)
    g2[7] = -0.2
    ln = dict(axis=axis, epsilon=1e-6)
    nodes = [
        helper.make_node("MatMul", ["x", c("w0", w0)], ["m0"]),
        helper.make_node("Add", ["m0", c("b0", b0)], ["r0"]),
        helper.make_node("LayerNormalization", ["r0", c("g1", g1), c("be1", rng.normal(0, 0.05, dim))], ["a"], **ln),
        helper.make_node("MatMul", ["a", c("w1", rng.normal(0, dim**-0.5, (dim, HIDDEN)))], ["m1"]),
        helper.make_node("Add", ["m1", c("b1", rng.normal(0, 0.1, HIDDEN))], ["h"]),
        helper.make_node("Gelu", ["h"], ["gl"]),
        helper.make_node("MatMul", ["gl", c("w2", rng.normal(0, HIDDEN**-0.5, (HIDDEN, dim)))], ["m2"]),
        helper.make_node("Add", ["m2", c("b2", rng.normal(0, 0.1, dim))], ["f"]),
        helper.make_node("Add", ["r0", "f"], ["r1"]),
        helper.make_node("LayerNormalization", ["r1", c("g2", g2), c("be2", rng.normal(0, 0.05, dim))], ["n2"], **ln),
        helper.make_node("MatMul", ["n2", c("w3", rng.normal(0, dim**-0.5, (dim, dim)))], ["m3"]),
        helper.make_node("Add", ["m3", c("b3", rng.normal(0, 0.1, dim))], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", f, [1, TOKENS, dim])],
        [helper.make_tensor_value_info("y", f, [1, TOKENS, dim])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _inputs(count: int, seed: int, dim: int = DIM) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count, 1, TOKENS, dim)).astype(np.float32)


@functools.cache
def compiled_block(dim: int = DIM, axis: int = -1, config: str = "pynq") -> tuple:
    """The block quantized by vdla's calibration: the ONNX model, its quantized graph and the artifact."""
    model = block_model(dim, axis)
    qgraph, _ = quantize_model(simplify(import_onnx(model)), {"x": _inputs(8, 1, dim)[:, 0]}, "percentile")
    return model, qgraph, compile_graph_model(qgraph, config)[0]


def test_sink_reshapes_moves_a_residual_add_and_its_layer_norm_to_the_rows():
    """``dense -> reshape -> add(residual) -> layer_norm -> reshape -> dense`` becomes ``dense -> add ->
    layer_norm -> dense`` on (tokens, features): the residual stream (1, T, D) reshaped where it is read, the
    LayerNorm over the last axis moved as a function of each row; values unchanged, bit for bit."""
    params = {
        "w1": RNG.normal(0, 0.2, (DIM, DIM)).astype(np.float32),
        "w2": RNG.normal(0, 0.2, (DIM, DIM)).astype(np.float32),
        "g": RNG.uniform(0.5, 1.5, (DIM,)).astype(np.float32),
        "b": RNG.normal(0, 0.1, (1, 1, DIM)).astype(np.float32),
    }
    nodes = [
        Node("reshape", ("x",), "x2", {"shape": (TOKENS, DIM)}),
        Node("dense", ("x2", "w1"), "h2"),
        Node("reshape", ("h2",), "h", {"shape": (1, TOKENS, DIM)}),
        Node("add", ("x", "h"), "r"),  # the residual stream: a (1, T, D) value, not a reshape
        Node("layer_norm", ("r", "g", "b"), "n", {"axis": 2, "epsilon": 1e-5}),
        Node("reshape", ("n",), "n2", {"shape": (TOKENS, DIM)}),
        Node("dense", ("n2", "w2"), "y"),
    ]
    g = Graph({"x": TensorType((1, TOKENS, DIM), "float32")}, nodes, ["y", "r"], params)
    out = sink_reshapes(g)
    verify(out, after="sink_reshapes")
    # x flattened where the add reads it; r, a graph output, shaped back beside the LayerNorm reading r:flat
    assert [n.op for n in out.nodes] == ["reshape", "reshape", "dense", "add", "reshape", "layer_norm", "dense"]
    ln = next(n for n in out.nodes if n.op == "layer_norm")
    assert ln.attrs["axis"] == 1 and ln.inputs[0] == "r:flat"
    x = RNG.normal(0, 1, (1, TOKENS, DIM)).astype(np.float32)
    want, got = evaluate(g, {"x": x}), evaluate(out, {"x": x})
    for k in ("y", "r"):
        np.testing.assert_array_equal(got[k], want[k])


def test_sink_reshapes_leaves_a_layer_norm_over_other_axes():
    nodes = [
        Node("reshape", ("x",), "r", {"shape": (1, TOKENS, DIM)}),
        Node("layer_norm", ("r",), "y", {"axis": 1, "epsilon": 1e-5}),
    ]
    g = Graph({"x": TensorType((TOKENS, DIM), "float32")}, nodes, ["y"])
    assert [n.op for n in sink_reshapes(g).nodes] == ["reshape", "layer_norm"]


def test_layer_norm_runs_on_the_accelerator_between_the_dense_layers():
    """vdla's calibration: both LayerNorms accelerator steps, the residual add in the second MLP layer's epilogue,
    no CPU step but the input's and the output's; bit-exact against the lowered integer graph (whose LayerNorms
    are ``layer_norm_int``), close to onnxruntime's float model."""
    model, qgraph, art = compiled_block()
    kinds = [s.kind for s in art.steps]
    assert kinds == ["cpu", *["accel"] * 6, "cpu"], [(s.kind, s.name, getattr(s, "note", "")) for s in art.steps]
    ops = [s.layer["op"] for s in art.steps if s.kind == "accel"]
    assert ops == ["dense", "layer_norm", "dense", "dense", "layer_norm", "dense"]
    fc2, ln2 = (s for s in art.steps[4:6])
    assert len(fc2.reads) == 2 and ln2.reads == [f"{fc2.name}@16"]  # the residual read by fc2's epilogue
    low = lower_qdq(qgraph)
    assert sum(n.op == "layer_norm_int" for n in low.nodes) == 2
    assert not any(n.op == "layer_norm" for n in low.nodes)
    from vdla.model.cli import _placement_table

    assert _placement_table(art, None).row_count == len(art.steps)  # the step table describes its steps
    assert_lowered_and_near_float(art, low, model, _inputs(3, 9))


def test_layer_norm_placed_is_bit_exact_on_each_backend(backend):
    _, qgraph, art = compiled_block()
    module, low = Module(art, backend), lower_qdq(qgraph)
    x = _inputs(1, 12)[0]
    np.testing.assert_array_equal(module.run(x), evaluate(low, {"x": x})["y"])
    module.close()


@pytest.mark.parametrize(
    "dim, axis, why",
    [
        (DIM, 1, "layer_norm over axes 1.. of rank 3: the integer form normalizes the last axis only"),
        (400, -1, "a row of 400 values: the integer statistics take 1 to 362"),
    ],
)
def test_a_layer_norm_the_integer_form_refuses_stays_on_the_cpu_with_the_reason(dim, axis, why):
    _, qgraph, art = compiled_block(dim, axis)
    cpu = [s for s in art.steps if s.kind == "cpu" and any(n.op == "layer_norm" for n in s.graph.nodes)]
    assert cpu and all(why in s.note for s in cpu), [s.note for s in cpu]
    assert not any(s.kind == "accel" and s.layer["op"] == "layer_norm" for s in art.steps)


def test_a_batch_of_two_leaves_the_layer_norm_in_float_naming_the_config():
    """The accelerator runs LayerNorm at batch 1 only: on ``batch2`` the QDQ lowering keeps it in float (no
    ``layer_norm_int`` reaches a CPU step) and the note says why."""
    _, qgraph, art = compiled_block(config="batch2")
    notes = [s.note for s in art.steps if s.kind == "cpu" and any(n.op == "layer_norm" for n in s.graph.nodes)]
    assert notes and all("batch 1" in n for n in notes), notes
    assert not any(n.op == "layer_norm_int" for s in art.steps if s.kind == "cpu" for n in s.graph.nodes)


def test_onnxruntime_qdq_block_runs_its_layer_norms_on_the_accelerator():
    """onnxruntime's QDQ model of the block (DequantizeLinear -> LayerNormalization -> QuantizeLinear): the
    LayerNorms and the residual add on the accelerator with no CPU step between the layers, the compiled model
    bit-exact against the lowered graph. Each LayerNorm, fed onnxruntime's own int8 input, is within one step of
    onnxruntime's output, and differs only where the float LayerNorm lies within the integer method's 0.02 steps
    of a rounding tie (``compare_layers`` counts those as ties)."""
    from qdq_check import lowered_graph

    from vdla.frontend.reference import compare_layers, reference_run
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import qdq_output_scale, quantize_qdq

    qmodel = quantize_qdq(block_model(), _inputs(8, 1)[:, 0], input_name="x")
    art, _ = compile_model(qmodel)
    assert [s.kind for s in art.steps] == ["cpu", *["accel"] * 6, "cpu"]
    low = lowered_graph(qmodel)
    assert sum(n.op == "layer_norm_int" for n in low.nodes) == 2
    module, step = Module(art, "sim"), qdq_output_scale(qmodel, "y")
    feeds = [{"x": x} for x in _inputs(2, 3)]
    for f in feeds:
        got = module.run(f["x"])
        np.testing.assert_array_equal(got, evaluate(low, f)["y"])
        assert np.abs(got - reference_run(qmodel, f)["y"]).max() <= 4 * step  # the LayerNorms' steps, propagated
    module.close()
    layers = compare_layers(qmodel, low, feeds)
    lns = [a for a in layers if a.value.startswith(("a_", "n2_"))]
    assert len(lns) == 2 and all(a.worst <= 1 for a in lns)
    assert sum(a.differing for a in layers) == sum(a.ties for a in layers)


def test_vdla_quantizer_keeps_a_cpu_computed_layer_norm_input_and_an_embedding_add_in_float():
    """The embeddings ``x + pos`` (an add of a constant, which the accelerator does not move) are the residual
    stream's first value: quantized for the dense layer's epilogue that adds them, but their input ``x`` is not
    (one rounding, not two), and the LayerNorm reading them on the CPU reads the float value itself (a row of
    small spread, a class token, cannot bear the stream's int8 step)."""
    from vdla.graph.quantize import plan_quantization

    params = {
        "pos": RNG.normal(0, 0.02, (1, TOKENS, DIM)).astype(np.float32),
        "w": RNG.normal(0, DIM**-0.5, (DIM, DIM)).astype(np.float32),
    }
    nodes = [
        Node("add", ("x", "pos"), "e"),
        Node("layer_norm", ("e",), "n", {"axis": 2, "epsilon": 1e-6}),
        Node("reshape", ("n",), "n2", {"shape": (TOKENS, DIM)}),
        Node("dense", ("n2", "w"), "h"),
        Node("reshape", ("h",), "h3", {"shape": (1, TOKENS, DIM)}),
        Node("add", ("e", "h3"), "r"),
    ]
    g = simplify(Graph({"x": TensorType((1, TOKENS, DIM), "float32")}, nodes, ["r"], params))
    plan = plan_quantization(g)
    assert "e" in plan.points and "e" in plan.cpu_values and "x" not in plan.points
    q, _ = quantize_model(g, {"x": _inputs(4, 2)[:, 0]}, "percentile")
    ln = next(n for n in q.nodes if n.op == "layer_norm")
    assert q.producers()[ln.inputs[0]].op == "add"  # e as computed, not dequantize(quantize(e))
    assert not any(n.op == "quantize" and n.inputs[0] == "x" for n in q.nodes)


def test_a_dequantized_residual_stream_is_flattened_on_the_int8_side():
    """``reshape(dequantize(s_q))`` read by the residual add (the stream flattened for a dense layer's epilogue)
    becomes ``dequantize(reshape(s_q))``, so the epilogue finds its int8 skip; values unchanged."""
    from vdla.graph.passes import eliminate_dead_code
    from vdla.graph.qdq import reshapes_inside_qdq

    q = {"scale": 0.05, "zero_point": 0}
    nodes = [
        Node("dequantize", ("s",), "sf", q),
        Node("reshape", ("sf",), "s2", {"shape": (TOKENS, DIM)}),
        Node("dequantize", ("h",), "hf", q),
        Node("add", ("s2", "hf"), "y"),
    ]
    types = {"s": TensorType((1, TOKENS, DIM), "int8"), "h": TensorType((TOKENS, DIM), "int8")}
    g = Graph(types, nodes, ["y"])
    out = eliminate_dead_code(reshapes_inside_qdq(g))
    assert [n.op for n in out.nodes] == ["reshape", "dequantize", "dequantize", "add"]
    feeds = {k: RNG.integers(-128, 128, t.shape).astype(np.int8) for k, t in types.items()}
    np.testing.assert_array_equal(evaluate(out, feeds)["y"], evaluate(g, feeds)["y"])
