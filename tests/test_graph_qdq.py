"""QDQ lowering: quantized conv/dense layers (with ReLU and residual adds) become the accelerator's
integer epilogue, within one quantization step of the float-between-QDQ semantics."""

from __future__ import annotations

import numpy as np
import pytest
from qdq_check import qdq_conv

from vdla.graph import Graph, Node, TensorType
from vdla.graph.interp import evaluate
from vdla.graph.qdq import lower_qdq
from vdla.graph.verify import verify

S_IN, S_A, S_B, S_OUT = 0.05, 0.04, 0.045, 0.08  # calibrated: no value saturates before the last quantize
W_SCALES = (0.0002, 0.001)


def residual_graph(seed: int = 0, hop: bool = True, s_b: float = S_B, s_out: float = S_OUT) -> Graph:
    """x -> quantize -> conv+relu -> max pool -> conv -> [quantize(s_b) -> dequantize] -> add(pooled) -> relu
    -> quantize(s_out): onnxruntime's QDQ layout with ``hop``, a single rounding without."""
    rng = np.random.default_rng(seed)
    nodes, params = [], {}
    nodes += [
        Node("quantize", ("x",), "xq", {"scale": S_IN, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": S_IN, "zero_point": 0}),
    ]
    a = qdq_conv(nodes, params, rng, "c1", "xd", 8, 16, 3, S_IN, w_scales=W_SCALES)
    nodes += [
        Node("quantize", (a,), "aq", {"scale": S_A, "zero_point": 0}),
        Node("dequantize", ("aq",), "ad", {"scale": S_A, "zero_point": 0}),
        Node("max_pool2d", ("ad",), "pd", {"kernel": 3, "stride": 1, "padding": 1}),  # its own layer (3 >= 2 x 1)
        Node("quantize", ("pd",), "pq", {"scale": S_A, "zero_point": 0}),
        Node("dequantize", ("pq",), "pdd", {"scale": S_A, "zero_point": 0}),
    ]
    b = qdq_conv(nodes, params, rng, "c2", "pdd", 16, 16, 3, S_IN, act=None, w_scales=W_SCALES)
    if hop:
        nodes += [
            Node("quantize", (b,), "bq", {"scale": s_b, "zero_point": 0}),
            Node("dequantize", ("bq",), "bd", {"scale": s_b, "zero_point": 0}),
        ]
    nodes += [
        Node("add", ("bd" if hop else b, "pdd"), "sum"),
        Node("quantize", ("sum",), "sq", {"scale": s_out, "zero_point": 0}),
        Node("dequantize", ("sq",), "sd", {"scale": s_out, "zero_point": 0}),
        Node("relu", ("sd",), "sr"),
        Node("quantize", ("sr",), "yq", {"scale": s_out, "zero_point": 0}),
        Node("dequantize", ("yq",), "y", {"scale": s_out, "zero_point": 0}),
    ]
    return Graph({"x": TensorType((1, 8, 6, 6), "float32")}, nodes, ["y"], params, name="residual")


def _steps(g: Graph, low: Graph, seeds=range(5)) -> int:
    """The largest difference, in output steps, between the graph and its lowering."""
    rng, worst = np.random.default_rng(1), 0
    for _ in seeds:
        x = rng.normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)
        want, got = evaluate(g, {"x": x})["y"] / S_OUT, evaluate(low, {"x": x})["y"] / S_OUT
        worst = max(worst, int(np.abs(np.rint(got) - np.rint(want)).max()))
    return worst


@pytest.mark.parametrize("case", ["one scale", "no hop, rescaled skip"])
def test_residual_adds_fuse_where_one_rounding_reproduces_the_model(case):
    g = residual_graph(s_b=S_A, s_out=S_A) if case == "one scale" else residual_graph(hop=False)
    low = lower_qdq(g)
    types = verify(low, after="lower_qdq")
    ops = [n.op for n in low.nodes]
    assert ops.count("conv2d") == 2 and ops.count("dequantize") == 1  # only the output stays float
    assert "max_pool2d" in ops and types[next(n.output for n in low.nodes if n.op == "max_pool2d")].dtype == "int8"
    sums = [n for n in low.nodes if n.op == "add" and n.output.endswith(":sum")]
    assert len(sums) == 1  # the residual add is in the second layer's epilogue
    skip_rescaled = any(n.output.endswith(":skip") for n in low.nodes)
    assert skip_rescaled == (case != "one scale")
    assert _steps(g, low) <= 1


def test_a_residual_add_after_rounding_at_another_scale_rounds_twice_in_the_epilogue():
    s_b, s_out = 0.04371, 0.07913  # calibrated scales are arbitrary floats: no sum is an exact tie
    g = residual_graph(s_b=s_b, s_out=s_out)  # conv -> quantize(s_b) -> add at s_out: the model rounds twice
    low = lower_qdq(g)
    verify(low, after="lower_qdq")
    ops = [n.op for n in low.nodes]
    assert ops.count("dequantize") == 1 and not any(n.op == "add" and types_float(low, n) for n in low.nodes)
    names = {n.output.rsplit(":", 1)[-1] for n in low.nodes}
    assert {"y", "y_scaled", "skip", "sum", "rounded"} <= names  # y rounded and clamped, then the sum
    # both roundings reproduced (an exact tie would differ: the epilogue rounds half up where
    # QuantizeLinear rounds half to even; scales with a small rational ratio make many)
    rng, off = np.random.default_rng(3), []
    for _ in range(20):
        x = rng.normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)
        want, got = evaluate(g, {"x": x})["y"] / s_out, evaluate(low, {"x": x})["y"] / s_out
        off.append(np.abs(np.rint(got) - np.rint(want)).ravel())
    off = np.concatenate(off)
    # the float model's own float32 sums put a value within 1e-7 of a boundary now and then
    assert off.max() <= 1 and (off == 0).mean() >= 0.999, np.bincount(off.astype(int))


def types_float(g: Graph, node: Node) -> bool:
    from vdla.graph.ops import infer_types

    return infer_types(g)[node.output].dtype == "float32"


@pytest.mark.parametrize("relu", [True, False])
def test_dense_lowering_and_exact_equal_scale_commuting(relu):
    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, (10, 32), dtype=np.int8)
    params = {"w": w, "ws": np.full((10, 1), 0.01, np.float32), "b": np.arange(10, dtype=np.float32)}
    nodes = [
        Node("quantize", ("x",), "xq", {"scale": 0.1, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": 0.1, "zero_point": 0}),
        Node("reshape", ("xd",), "xr", {"shape": (1, 32)}),
        Node("quantize", ("xr",), "xrq", {"scale": 0.1, "zero_point": 0}),
        Node("dequantize", ("xrq",), "xrd", {"scale": 0.1, "zero_point": 0}),
        Node("dequantize", ("w", "ws"), "wf", {"zero_point": 0, "axis": 0}),
        Node("dense", ("xrd", "wf", "b"), "y"),
    ]
    if relu:
        nodes.append(Node("relu", ("y",), "yr"))
    nodes += [
        Node("quantize", (nodes[-1].output,), "yq", {"scale": 0.2, "zero_point": 0}),
        Node("dequantize", ("yq",), "out", {"scale": 0.2, "zero_point": 0}),
    ]
    g = Graph({"x": TensorType((1, 2, 4, 4), "float32")}, nodes, ["out"], params)
    low = lower_qdq(g)
    verify(low, after="lower_qdq")
    assert [n.op for n in low.nodes].count("dense") == 1 and "reshape" in [n.op for n in low.nodes]
    dense = next(n for n in low.nodes if n.op == "dense")
    assert dense.inputs[1] == "w"  # the int8 weights themselves
    x = rng.normal(0, 2, (1, 2, 4, 4)).astype(np.float32)
    want, got = evaluate(g, {"x": x})["out"], evaluate(low, {"x": x})["out"]
    assert np.abs(np.rint(got / 0.2) - np.rint(want / 0.2)).max() <= 1


def test_unmatched_patterns_stay_float():
    g = residual_graph()
    g.nodes[4] = Node("conv2d", ("xd", "c1_wf", "c1_bf"), "c1_y", {"padding": 2, "dilation": 2})
    low = lower_qdq(g)
    assert any(n.op == "conv2d" and n.inputs[0] == "xd" for n in low.nodes)  # dilation 2: left in float
