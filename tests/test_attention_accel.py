"""MatMul of two computed int8 tensors on the accelerator: the right operand packed into the weight layout at
run time, one dense layer per batch index with the requantizing epilogue; attention end to end."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.compiler import compile_dense
from vdla.graph import Graph, Node, TensorType, oracle
from vdla.graph.epilogue import Epilogue
from vdla.graph.interp import evaluate
from vdla.graph.qdq import lower_qdq
from vdla.model import Module
from vdla.model.pipeline import compile_model
from vdla.runtime import Device


def test_dense_with_run_time_weights_matches_the_oracle():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (5, 40)).astype(np.int8)
    w = rng.integers(-128, 128, (24, 40)).astype(np.int8)
    ep = Epilogue(None, np.full(24, 1 << 30), 37, clip=(-100, 120))
    layer = compile_dense(5, (24, 40), epilogue=ep, config="pynq")
    assert "wgt" not in layer.conv.constants
    got = layer.run(Device("pynq"), x, weights=w).out
    np.testing.assert_array_equal(got, oracle.dense_oracle(x, w, ep))


def _qdq_matmul_graph(a_shape, b_shape, relu: bool) -> Graph:
    """quantize both operands, dequantize, matmul, [relu], quantize, dequantize."""
    q = {"zero_point": 0}
    nodes = [
        Node("quantize", ("a",), "aq", {"scale": 0.03, **q}),
        Node("quantize", ("b",), "bq", {"scale": 0.02, **q}),
        Node("dequantize", ("aq",), "ad", {"scale": 0.03, **q}),
        Node("dequantize", ("bq",), "bd", {"scale": 0.02, **q}),
        Node("matmul", ("ad", "bd"), "mm"),
    ]
    last = "mm"
    if relu:
        nodes.append(Node("relu", ("mm",), "r"))
        last = "r"
    nodes += [
        Node("quantize", (last,), "yq", {"scale": 0.05, **q}),
        Node("dequantize", ("yq",), "y", {"scale": 0.05, **q}),
    ]
    inputs = {"a": TensorType(a_shape, "float32"), "b": TensorType(b_shape, "float32")}
    return Graph(inputs, nodes, ["y"], {}, name="qmatmul")


@pytest.mark.parametrize(
    "a_shape, b_shape, relu",
    [((2, 1, 6, 20), (3, 20, 18), True), ((6, 20), (20, 18), False), ((2, 6, 20), (20, 18), False)],
)
def test_lowering_is_one_dense_per_batch_index_and_keeps_the_qdq_semantics(a_shape, b_shape, relu):
    graph = _qdq_matmul_graph(a_shape, b_shape, relu)
    low = lower_qdq(graph)
    batch = int(np.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])))
    assert sum(n.op == "dense" for n in low.nodes) == batch and not any(n.op == "matmul" for n in low.nodes)
    rng = np.random.default_rng(1)
    for _ in range(3):
        feeds = {"a": rng.normal(0, 1, a_shape).astype(np.float32), "b": rng.normal(0, 1, b_shape).astype(np.float32)}
        got, want = evaluate(low, feeds)["y"], evaluate(graph, feeds)["y"]
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 0.05 * 1.01  # the requantization's rounding: at most one step
        assert np.mean(got == want) > 0.99


@pytest.fixture(scope="module")
def batched():
    graph = _qdq_matmul_graph((2, 1, 6, 20), (3, 20, 18), True)
    return graph, compile_model(graph)[0]


def test_batched_matmul_runs_its_denses_on_the_accelerator_bit_exact(batched, backend):
    graph, artifact = batched
    accel = [s for s in artifact.steps if s.kind == "accel"]
    assert len(accel) == 6 and artifact.accel_macs == artifact.total_macs
    module = Module(artifact, backend)
    rng = np.random.default_rng(2)
    feeds = {
        "a": rng.normal(0, 1, (2, 1, 6, 20)).astype(np.float32),
        "b": rng.normal(0, 1, (3, 20, 18)).astype(np.float32),
    }
    np.testing.assert_array_equal(module.run(feeds), evaluate(lower_qdq(graph), feeds)["y"])
    module.close()


@pytest.fixture(scope="module")
def attention_qdq():
    pytest.importorskip("onnxruntime")
    from vdla.zoo.models import attention, quantize_qdq

    calib = np.random.default_rng(3).normal(0, 1, (8, 8, 32)).astype(np.float32)
    return quantize_qdq(attention(), calib, input_name="x")


def test_attention_runs_every_matmul_on_the_accelerator(attention_qdq, backend):
    from vdla.frontend.onnx import import_onnx
    from vdla.frontend.reference import reference_run
    from vdla.graph.passes import simplify
    from vdla.zoo.models import qdq_output_scale

    artifact, _ = compile_model(attention_qdq)
    accel = [s for s in artifact.steps if s.kind == "accel"]
    assert len(accel) == 8  # the Q, K, V and output projections; Q K^T and softmax V, two heads each
    assert all(s.layer["op"] == "dense" for s in accel) and artifact.accel_macs == artifact.total_macs
    low = lower_qdq(simplify(import_onnx(attention_qdq)))
    module = Module(artifact, backend)
    step = qdq_output_scale(attention_qdq, "y")
    for seed in (4, 5):
        x = np.random.default_rng(seed).normal(0, 1, (1, 8, 32)).astype(np.float32)
        got = module.run(x)
        np.testing.assert_array_equal(got, evaluate(low, {"x": x})["y"])
        assert np.abs(got - reference_run(attention_qdq, {"x": x})["y"]).max() <= step * 1.01
    module.close()
