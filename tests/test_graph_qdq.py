"""QDQ lowering: quantized conv/dense layers (with ReLU and residual adds) become the accelerator's
integer epilogue, within one quantization step of the float-between-QDQ semantics."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.graph import Graph, Node, TensorType
from vdla.graph.interp import evaluate
from vdla.graph.qdq import lower_qdq
from vdla.graph.verify import verify

S_IN, S_A, S_B, S_OUT = 0.05, 0.04, 0.045, 0.08  # calibrated: no value saturates before the last quantize


def _qconv(nodes, params, rng, name, x_dq, c_in, c_out, k, relu=True):
    """dequantized int8 weights (per channel) and int32 bias around a float conv, then relu."""
    w = rng.integers(-127, 128, (c_out, c_in, k, k), dtype=np.int8)
    sw = rng.uniform(0.0002, 0.001, c_out)
    params[f"{name}_w"] = w
    params[f"{name}_ws"] = sw.astype(np.float32).reshape(-1, 1, 1, 1)
    b = rng.integers(-2000, 2000, c_out).astype(np.int32)
    params[f"{name}_b"] = b
    params[f"{name}_bs"] = (S_IN * sw).astype(np.float32)
    nodes += [
        Node("dequantize", (f"{name}_w", f"{name}_ws"), f"{name}_wf", {"zero_point": 0, "axis": 0}),
        Node("dequantize", (f"{name}_b", f"{name}_bs"), f"{name}_bf", {"zero_point": 0, "axis": 0}),
        Node("conv2d", (x_dq, f"{name}_wf", f"{name}_bf"), f"{name}_y", {"padding": k // 2}),
    ]
    if relu:
        nodes.append(Node("relu", (f"{name}_y",), f"{name}_r"))
    return nodes[-1].output


def residual_graph(seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    nodes, params = [], {}
    nodes += [
        Node("quantize", ("x",), "xq", {"scale": S_IN, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": S_IN, "zero_point": 0}),
    ]
    a = _qconv(nodes, params, rng, "c1", "xd", 8, 16, 3)
    nodes += [
        Node("quantize", (a,), "aq", {"scale": S_A, "zero_point": 0}),
        Node("dequantize", ("aq",), "ad", {"scale": S_A, "zero_point": 0}),
        Node("max_pool2d", ("ad",), "pd", {"kernel": 1}),
        Node("quantize", ("pd",), "pq", {"scale": S_A, "zero_point": 0}),
        Node("dequantize", ("pq",), "pdd", {"scale": S_A, "zero_point": 0}),
    ]
    b = _qconv(nodes, params, rng, "c2", "pdd", 16, 16, 3, relu=False)
    nodes += [
        Node("quantize", (b,), "bq", {"scale": S_B, "zero_point": 0}),
        Node("dequantize", ("bq",), "bd", {"scale": S_B, "zero_point": 0}),
        Node("add", ("bd", "pdd"), "sum"),
        Node("relu", ("sum",), "sr"),
        Node("quantize", ("sr",), "yq", {"scale": S_OUT, "zero_point": 0}),
        Node("dequantize", ("yq",), "y", {"scale": S_OUT, "zero_point": 0}),
    ]
    return Graph({"x": TensorType((1, 8, 6, 6), "float32")}, nodes, ["y"], params, name="residual")


def test_residual_block_lowers_to_integer_epilogues_within_one_step():
    g = residual_graph()
    low = lower_qdq(g)
    types = verify(low, after="lower_qdq")
    ops = [n.op for n in low.nodes]
    assert ops.count("conv2d") == 2 and "dequantize" in ops  # the output stays float
    assert types["c2_y:acc" if "c2_y:acc" in types else "yq:acc"].dtype == "int32"
    assert "max_pool2d" in ops and types[next(n.output for n in low.nodes if n.op == "max_pool2d")].dtype == "int8"
    assert sum(op == "rshift" for op in ops) == 3  # two epilogues, one skip rescale (S_A != S_OUT)
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)
        want = evaluate(g, {"x": x})["y"] / S_OUT
        got = evaluate(low, {"x": x})["y"] / S_OUT
        assert np.abs(np.rint(got) - np.rint(want)).max() <= 1


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
