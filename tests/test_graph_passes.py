"""Graph simplification passes: each returns a verified graph computing the same outputs, under the same
names, as the numpy interpreter shows."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.graph import Graph, Node, TensorType, passes
from vdla.graph.interp import evaluate
from vdla.graph.passes import (
    PASSES,
    eliminate_dead_code,
    fold_batch_norm,
    fold_constants,
    remove_identities,
    simplify,
)
from vdla.graph.verify import GraphError, verify

RNG = np.random.default_rng(0)


def _f32(*shape, scale=1.0):
    return RNG.normal(0, scale, shape).astype(np.float32)


def _bn_params(prefix: str, c: int) -> dict[str, np.ndarray]:
    return {
        f"{prefix}_gamma": RNG.uniform(0.5, 1.5, c).astype(np.float32),
        f"{prefix}_beta": _f32(c, scale=0.1),
        f"{prefix}_mean": _f32(c, scale=0.1),
        f"{prefix}_var": RNG.uniform(0.5, 1.5, c).astype(np.float32),
    }


def _bn(x: str, out: str, prefix: str) -> Node:
    stats = tuple(f"{prefix}_{k}" for k in ("gamma", "beta", "mean", "var"))
    return Node("batch_norm", (x, *stats), out, {"epsilon": 1e-3})


def _same_outputs(a: Graph, b: Graph, feeds, rtol=1e-5) -> None:
    ya, yb = evaluate(a, feeds), evaluate(b, feeds)
    assert list(ya) == list(yb)
    for k in ya:
        np.testing.assert_allclose(yb[k], ya[k], rtol=rtol, atol=rtol * max(1.0, float(np.abs(ya[k]).max())))


def conv_bn_graph() -> Graph:
    params = {"w": _f32(6, 3, 3, 3, scale=0.3), "b": _f32(6, scale=0.1), **_bn_params("bn", 6), **_bn_params("bn2", 6)}
    params.update({"fw": _f32(4, 6 * 8 * 8, scale=0.05), **_bn_params("bn3", 4)})
    nodes = [
        Node("conv2d", ("x", "w", "b"), "conv", {"padding": 1}),
        _bn("conv", "bn", "bn"),  # folded into the conv
        Node("relu", ("bn",), "r"),
        _bn("r", "bn2_out", "bn2"),  # after a ReLU: mul + add
        Node("reshape", ("bn2_out",), "flat", {"shape": (1, -1)}),
        Node("dense", ("flat", "fw"), "fc"),
        _bn("fc", "y", "bn3"),  # folded into the dense layer (bias added)
    ]
    return Graph({"x": TensorType((1, 3, 8, 8), "float32")}, nodes, ["y"], params, name="conv_bn")


def test_fold_batch_norm_into_conv_and_dense_and_per_channel_affine_elsewhere():
    g = conv_bn_graph()
    folded = fold_batch_norm(g)
    verify(folded, after="fold_batch_norm")
    ops = [n.op for n in folded.nodes]
    assert "batch_norm" not in ops
    assert ops == ["conv2d", "relu", "mul", "add", "reshape", "dense"]
    conv = folded.nodes[0]
    assert conv.output == "bn" and len(conv.inputs) == 3  # takes the batch norm's name, gets a bias
    assert folded.nodes[-1].output == "y" and len(folded.nodes[-1].inputs) == 3
    mul = folded.nodes[2]
    assert folded.params[mul.inputs[1]].shape == (1, 6, 1, 1)
    _same_outputs(g, folded, {"x": _f32(1, 3, 8, 8)})


def test_batch_norm_is_not_folded_into_a_conv_whose_output_has_another_reader():
    params = {"w": _f32(4, 2, 1, 1), **_bn_params("bn", 4)}
    nodes = [
        Node("conv2d", ("x", "w"), "conv"),
        _bn("conv", "bn", "bn"),
        Node("add", ("bn", "conv"), "y"),
    ]
    g = Graph({"x": TensorType((1, 2, 3, 3), "float32")}, nodes, ["y"], params)
    folded = fold_batch_norm(g)
    assert [n.op for n in folded.nodes] == ["conv2d", "mul", "add", "add"]
    _same_outputs(g, folded, {"x": _f32(1, 2, 3, 3)})


def test_batch_norm_with_computed_statistics_is_left_alone():
    nodes = [Node("batch_norm", ("x", "g", "b", "m", "v"), "y")]
    stats = {k: TensorType((3,), "float32") for k in "gbmv"}
    g = Graph({"x": TensorType((2, 3, 4), "float32"), **stats}, nodes, ["y"])
    assert [n.op for n in fold_batch_norm(g).nodes] == ["batch_norm"]


def test_remove_identities_keeps_output_names_and_semantics():
    params = {"c": _f32(4)}
    nodes = [
        Node("reshape", ("x",), "same", {"shape": (2, 4)}),
        Node("transpose", ("same",), "t", {"perm": (0, 1)}),
        Node("add", ("t", "c"), "a"),
        Node("pad", ("a",), "p", {"pads": ((0, 0), (0, 0))}),
        Node("cast", ("p",), "y", {"dtype": "float32"}),  # a graph output: the add takes its name
        Node("concat", ("x",), "z", {"axis": 0}),  # reads a graph input: kept to define "z"
    ]
    g = Graph({"x": TensorType((2, 4), "float32")}, nodes, ["y", "z"], params)
    out = remove_identities(g)
    verify(out, after="remove_identities")
    assert [(n.op, n.inputs, n.output) for n in out.nodes] == [("add", ("x", "c"), "y"), ("concat", ("x",), "z")]
    _same_outputs(g, out, {"x": _f32(2, 4)})


def test_fold_constants_evaluates_parameter_only_nodes_but_keeps_dequantized_weights():
    w_q = RNG.integers(-127, 128, (4, 3, 1, 1), dtype=np.int8)
    params = {
        "a": _f32(4),
        "b": _f32(4),
        "w_q": w_q,
        "w_s": RNG.uniform(0.01, 0.02, (4, 1, 1, 1)).astype(np.float32),
        "bias_q": RNG.integers(-100, 100, 4).astype(np.int32),
    }
    nodes = [
        Node("add", ("a", "b"), "ab"),  # folded
        Node("relu", ("ab",), "bias"),  # folded (its input became a parameter)
        Node("dequantize", ("w_q", "w_s"), "w", {"zero_point": 0, "axis": 0}),  # kept: a conv weight
        Node("dequantize", ("bias_q",), "bias2", {"scale": 0.001, "zero_point": 0}),  # folded
        Node("conv2d", ("x", "w", "bias"), "c"),
        Node("add", ("c",), "y", {"b": 1.0}),
        Node("add", ("bias2",), "unused", {"b": 1.0}),
    ]
    g = Graph({"x": TensorType((1, 3, 2, 2), "float32")}, nodes, ["y"], params)
    folded = fold_constants(g)
    verify(folded, after="fold_constants")
    assert [n.op for n in folded.nodes] == ["dequantize", "conv2d", "add"]
    assert {"ab", "bias", "bias2", "unused"} <= set(folded.params)
    np.testing.assert_array_equal(folded.params["bias"], np.maximum(params["a"] + params["b"], 0))
    _same_outputs(g, folded, {"x": _f32(1, 3, 2, 2)})
    clean = eliminate_dead_code(folded)
    assert set(clean.params) == {"w_q", "w_s", "bias"}


def test_fold_constants_keeps_the_quantization_of_a_folded_int8_value():
    nodes = [Node("quantize", ("a",), "q", {"scale": 0.1, "zero_point": 0}), Node("add", ("x", "q"), "y")]
    g = Graph({"x": TensorType((3,), "int8")}, nodes, ["y"], {"a": np.array([0.1, -0.2, 0.35], np.float32)})
    folded = fold_constants(g)
    assert [n.op for n in folded.nodes] == ["add"]
    assert folded.params["q"].dtype == np.int8 and folded.param_types["q"].quant.scale == (0.1,)
    assert verify(folded)["q"].quant is not None


def test_eliminate_dead_code_drops_unread_nodes_and_params():
    nodes = [
        Node("relu", ("x",), "used"),
        Node("mul", ("x", "p_dead"), "dead"),
        Node("relu", ("dead",), "dead2"),
        Node("add", ("used", "p_live"), "y"),
    ]
    params = {"p_dead": _f32(3), "p_live": _f32(3)}
    g = Graph({"x": TensorType((3,), "float32")}, nodes, ["y"], params)
    out = eliminate_dead_code(g)
    assert [n.output for n in out.nodes] == ["used", "y"] and set(out.params) == {"p_live"}
    assert set(out.inputs) == {"x"}


def test_simplify_runs_every_pass_verified(monkeypatch):
    g = conv_bn_graph()
    out = simplify(g, verify=True)
    assert [n.op for n in out.nodes] == ["conv2d", "relu", "mul", "add", "reshape", "dense"]
    _same_outputs(g, out, {"x": _f32(1, 3, 8, 8)})
    assert [name for name, _ in PASSES] == [
        "remove_identities",
        "fold_constants",
        "fold_batch_norm",
        "fuse_layer_norm",
        "patch_rows",
        "sink_reshapes",
        "merge_projections",
        "constant_rows_first",
        "select_rows_first",
        "eliminate_dead_code",
    ]
    # a broken input is reported as such, a pass that breaks an invariant by its name
    broken = g.copy(nodes=[Node("relu", ("nowhere",), "y")])
    with pytest.raises(GraphError, match="after the input of simplify: node 0 'relu'"):
        simplify(broken, verify=True)

    def drop_first(graph: Graph) -> Graph:
        return graph.copy(nodes=graph.nodes[1:])

    monkeypatch.setattr(passes, "PASSES", (*PASSES[:2], ("drop_first", drop_first), *PASSES[2:]))
    monkeypatch.setenv("VDLA_VERIFY", "1")
    with pytest.raises(GraphError, match=r"after drop_first: node 0 'batch_norm' -> 'bn': reads \['conv'\]"):
        simplify(g)


def _projections(bias_input: bool, feed_product: bool) -> Graph:
    """Three dense layers over ``x`` (16, 32) — Q, K and V of one head: the first two with a bias add (or with
    ``bias_input`` a bias input), V without a bias; with ``feed_product`` Q K^T and (Q K^T) V, else their sum."""
    params, nodes = {}, []
    for name, bias in (("q", True), ("k", True), ("v", False)):
        params[f"w{name}"] = _f32(24 if name == "v" else 32, 32, scale=0.2)
        inputs = ("x", f"w{name}")
        if bias:
            params[f"b{name}"] = _f32(32, scale=0.1)
        if bias and bias_input:
            nodes.append(Node("dense", (*inputs, f"b{name}"), name))
            continue
        nodes.append(Node("dense", inputs, name if not bias else f"{name}:d"))
        if bias:
            nodes.append(Node("add", (f"{name}:d", f"b{name}"), name))
    if feed_product:
        nodes += [
            Node("transpose", ("k",), "kt", {"perm": (1, 0)}),
            Node("mul", ("q",), "qs", {"b": 0.125}),
            Node("matmul", ("qs", "kt"), "s"),
            Node("softmax", ("s",), "p", {"axis": 1}),
            Node("matmul", ("p", "v"), "y"),
        ]
    else:
        nodes += [Node("add", ("q", "k"), "qk"), Node("relu", ("v",), "y2"), Node("add", ("qk", "q"), "y")]
    outputs = ["y", "y2"] if not feed_product else ["y"]
    return Graph({"x": TensorType((16, 32), "float32")}, nodes, outputs, params)


@pytest.mark.parametrize("bias_input", [False, True])
def test_merge_projections_makes_one_dense_layer_of_attentions_three(bias_input):
    g = _projections(bias_input, feed_product=True)
    merged = passes.merge_projections(g)
    verify(merged)
    dense = [n for n in merged.nodes if n.op == "dense"]
    assert len(dense) == 1 and merged.params[dense[0].inputs[1]].shape == (88, 32)
    assert [n.attrs["stops"][1] - n.attrs["starts"][1] for n in merged.nodes if n.op == "slice"] == [32, 32, 24]
    x = {"x": _f32(16, 32)}
    np.testing.assert_allclose(evaluate(merged, x)["y"], evaluate(g, x)["y"], rtol=1e-5, atol=1e-6)


def test_merge_projections_leaves_layers_that_feed_no_product():
    g = _projections(False, feed_product=False)
    assert passes.merge_projections(g) is g
