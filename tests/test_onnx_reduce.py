"""The ONNX converters of reductions, ArgMax/ArgMin, the softmax family, the normalizations, CumSum, TopK and
Trilu: import -> simplify -> CPU JIT against onnxruntime (the reference helper), and refusals at import naming
the node, the attribute and its value."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.cpu_fallback import compile_graph  # noqa: E402
from vdla.frontend import import_onnx  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(3)
X = (RNG.standard_normal((2, 3, 4, 5)) * 2).astype(np.float32)


def model(nodes, inputs, outputs, inits=(), opset: int = 18):
    """A checked model of ``nodes``; ``inputs``/``outputs`` are (name, elem type, shape) triples, ``inits``
    (name, array) pairs."""
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(m)
    return m


def matches_onnxruntime(m, feeds: dict[str, np.ndarray], rtol: float = 1e-5) -> dict[str, np.ndarray]:
    """vdla's float CPU path on ``m`` equals onnxruntime's (floats within ``rtol`` of the largest magnitude,
    integers exactly); returns vdla's outputs."""
    got = compile_graph(simplify(import_onnx(m), verify=True))(**feeds)
    want = reference_run(m, feeds)
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, name
        if w.dtype.kind == "f":
            scale = max(1.0, float(np.nanmax(np.abs(w[np.isfinite(w)]), initial=0)))
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=name)
        else:
            np.testing.assert_array_equal(g.astype(np.int64), w.astype(np.int64), err_msg=name)
    return got


REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]  # fmt: skip


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions_on_any_axes_match_onnxruntime(op):
    """Axes as an input (opset 18), negative, unsorted, none (every axis), keepdims 0 and 1, and
    noop_with_empty_axes."""
    x = np.abs(X) + np.float32(0.5) if op in ("ReduceLogSum", "ReduceProd") else X
    cases = [((0, 2), 1), ((-1, 1), 0), ((3,), 1), ((2, 3), 0), ((0, 1, 2, 3), 0), ((1,), 1)]
    nodes, inits, outputs = [], [], []
    for k, (axes, keep) in enumerate(cases):
        inits.append((f"axes{k}", np.array(axes, np.int64)))
        nodes.append(helper.make_node(op, ["x", f"axes{k}"], [f"y{k}"], keepdims=keep))
        shape = [1 if i in [a % 4 for a in axes] else d for i, d in enumerate(x.shape)]
        outputs.append((f"y{k}", F, shape if keep else [d for i, d in enumerate(x.shape) if shape[i] != 1 or d == 1]))
    nodes.append(helper.make_node(op, ["x"], ["all"], keepdims=0))
    nodes.append(helper.make_node(op, ["x"], ["noop"], noop_with_empty_axes=1))
    outputs += [("all", F, []), ("noop", F, list(x.shape))]
    matches_onnxruntime(model(nodes, [("x", F, x.shape)], outputs, inits), {"x": x})


def test_reductions_with_axes_attributes_and_integer_inputs_match_onnxruntime():
    xi = RNG.integers(-50, 50, (3, 4, 5)).astype(np.int32)
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], axes=[0, 2], keepdims=0),
        helper.make_node("ReduceMax", ["x"], ["m"], axes=[-1]),
        helper.make_node("ReduceMin", ["x"], ["n"], axes=[1], keepdims=0),
        helper.make_node("ReduceProd", ["x"], ["p"], axes=[1], keepdims=1),
    ]
    outs = [("s", TensorProto.INT32, [4]), ("m", TensorProto.INT32, [3, 4, 1]), ("n", TensorProto.INT32, [3, 5]),
            ("p", TensorProto.INT32, [3, 1, 5])]  # fmt: skip
    matches_onnxruntime(model(nodes, [("x", TensorProto.INT32, xi.shape)], outs, opset=12), {"x": xi})


def test_spatial_mean_and_max_stay_global_pools():
    """The quantized lowering knows global_avg_pool and max_pool2d: a spatial ReduceMean/ReduceMax keeps them."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["a"], axes=[2, 3]),
             helper.make_node("ReduceMax", ["x"], ["b"], axes=[2, 3], keepdims=0)]  # fmt: skip
    m = model(nodes, [("x", F, X.shape)], [("a", F, [2, 3, 1, 1]), ("b", F, [2, 3])], opset=13)
    assert [n.op for n in import_onnx(m).nodes if n.op != "reshape"] == ["global_avg_pool", "max_pool2d"]
    matches_onnxruntime(m, {"x": X})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_argmin_match_onnxruntime(op):
    x = RNG.integers(-3, 3, (4, 6, 5)).astype(np.float32)  # many ties
    nodes, outs = [], []
    for k, (axis, keep, last) in enumerate([(0, 1, 0), (1, 0, 1), (-1, 1, 1), (2, 0, 0)]):
        nodes.append(helper.make_node(op, ["x"], [f"y{k}"], axis=axis, keepdims=keep, select_last_index=last))
        shape = [1 if i == axis % 3 else d for i, d in enumerate(x.shape)]
        outs.append((f"y{k}", I64, shape if keep else [d for i, d in enumerate(x.shape) if i != axis % 3]))
    got = matches_onnxruntime(model(nodes, [("x", F, x.shape)], outs, opset=13), {"x": x})
    assert all(v.dtype == np.int32 for v in got.values())  # int64 indices come back as int32


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_on_any_axis_matches_onnxruntime(op):
    x = X.copy()
    x[0, 0, 0, :2] = 7.0  # a tie for hardmax
    nodes = [helper.make_node(op, ["x"], [f"y{a}"], axis=a) for a in (-4, 1, 2, -1)]
    outs = [(f"y{a}", F, x.shape) for a in (-4, 1, 2, -1)]
    matches_onnxruntime(model(nodes, [("x", F, x.shape)], outs, opset=13), {"x": x})


def test_log_softmax_and_hardmax_take_softmax_s_opset_11_coercion_to_2d():
    nodes = [helper.make_node(op, ["x"], [op], axis=2) for op in ("LogSoftmax", "Hardmax", "Softmax")]
    outs = [(op, F, X.shape) for op in ("LogSoftmax", "Hardmax", "Softmax")]
    matches_onnxruntime(model(nodes, [("x", F, X.shape)], outs, opset=11), {"x": X})


def test_layer_norm_with_mean_and_inverse_std_outputs_matches_onnxruntime():
    s, b = RNG.standard_normal((4, 5)).astype(np.float32), RNG.standard_normal((5,)).astype(np.float32)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=2, epsilon=1e-3),
        helper.make_node("LayerNormalization", ["x", "s1"], ["z"], axis=-1),
    ]
    inits = [("s", s), ("b", b), ("s1", s[0])]
    outs = [("y", F, X.shape), ("mean", F, [2, 3, 1, 1]), ("inv", F, [2, 3, 1, 1]), ("z", F, X.shape)]
    matches_onnxruntime(model(nodes, [("x", F, X.shape)], outs, inits, opset=17), {"x": X})


def test_rms_instance_group_lp_and_mean_variance_normalizations_match_onnxruntime():
    x = X + np.float32(1)
    x[0, 0, :, :] = 0  # an all-zero slice: LpNormalization gives 0 there, not NaN
    c = RNG.standard_normal((3,)).astype(np.float32)
    nodes = [
        helper.make_node("RMSNormalization", ["x", "rs"], ["rms"], axis=1, epsilon=1e-4),
        helper.make_node("InstanceNormalization", ["x", "c1", "c2"], ["inst"], epsilon=1e-3),
        helper.make_node("LpNormalization", ["x"], ["l2"], axis=1),
        helper.make_node("LpNormalization", ["x"], ["l1"], axis=-1, p=1),
        helper.make_node("MeanVarianceNormalization", ["x"], ["mvn"], axes=[0, 2, 3]),
    ]
    inits = [("rs", RNG.standard_normal((3, 4, 5)).astype(np.float32)), ("c1", c), ("c2", -c)]
    outs = [(n, F, x.shape) for n in ("rms", "inst", "l2", "l1", "mvn")]
    matches_onnxruntime(model(nodes, [("x", F, x.shape)], outs, inits, opset=23), {"x": x})
    group = model(
        [helper.make_node("GroupNormalization", ["x", "gs", "gb"], ["y"], num_groups=2, epsilon=1e-3)],
        [("x", F, (2, 4, 3, 5))], [("y", F, (2, 4, 3, 5))],
        [("gs", RNG.standard_normal(4).astype(np.float32)), ("gb", RNG.standard_normal(4).astype(np.float32))], 21,
    )  # fmt: skip
    matches_onnxruntime(group, {"x": RNG.standard_normal((2, 4, 3, 5)).astype(np.float32)})


def test_cumsum_topk_trilu_match_onnxruntime():
    x = RNG.integers(-4, 4, (3, 4, 6)).astype(np.float32)
    nodes = [
        helper.make_node("CumSum", ["x", "ax1"], ["c0"]),
        helper.make_node("CumSum", ["x", "ax2"], ["c1"], exclusive=1, reverse=1),
        helper.make_node("TopK", ["x", "k"], ["v0", "i0"], axis=1),
        helper.make_node("TopK", ["x", "k"], ["v1", "i1"], axis=-1, largest=0),
        helper.make_node("Trilu", ["x", "kd"], ["t0"]),
        helper.make_node("Trilu", ["x"], ["t1"], upper=0),
    ]
    inits = [("ax1", np.array(1, np.int32)), ("ax2", np.array(-1, np.int64)), ("k", np.array([3], np.int64)),
             ("kd", np.array(-1, np.int64))]  # fmt: skip
    outs = [("c0", F, x.shape), ("c1", F, x.shape), ("v0", F, (3, 3, 6)), ("i0", I64, (3, 3, 6)),
            ("v1", F, (3, 4, 3)), ("i1", I64, (3, 4, 3)), ("t0", F, x.shape), ("t1", F, x.shape)]  # fmt: skip
    matches_onnxruntime(model(nodes, [("x", F, x.shape)], outs, inits, opset=14), {"x": x})


@pytest.mark.parametrize("size,attrs", [(5, {"alpha": 1e-3, "beta": 0.75, "bias": 2.0}), (2, {}), (1, {})])
def test_lrn_matches_onnxruntime(size, attrs):
    """LRN across channels: odd and even windows (one channel more after than before; onnxruntime takes odd
    sizes only, so the even one is checked against the operator's definition in numpy; onnx.reference's LRN
    loops over the batch where it means the channels) and a window of one."""
    x = (RNG.standard_normal((2, 6, 3, 4)) * 3).astype(np.float32)
    node = helper.make_node("LRN", ["x"], ["y"], size=size, **attrs)
    m = model([node], [("x", F, x.shape)], [("y", F, x.shape)], opset=13)
    if size % 2:
        matches_onnxruntime(m, {"x": x})
        return
    got = compile_graph(simplify(import_onnx(m), verify=True))(x=x)["y"]
    sq = x.astype(np.float64) ** 2
    s = np.stack([sq[:, max(0, c - (size - 1) // 2) : c + size // 2 + 1].sum(1) for c in range(6)], 1)
    np.testing.assert_allclose(got, x / (1.0 + 1e-4 / size * s) ** 0.75, rtol=1e-5, atol=1e-6)


def test_cumprod_matches_onnx_reference():
    """CumProd (opset 26) is vdla's cumsum with ``product``: exclusive (from 1) and reverse, float32 and int32."""
    from onnx.reference import ReferenceEvaluator

    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    n = RNG.integers(-3, 4, (3, 4, 5)).astype(np.int32)
    nodes = [
        helper.make_node("CumProd", ["x", "ax"], ["a"]),
        helper.make_node("CumProd", ["x", "ax"], ["b"], exclusive=1, reverse=1),
        helper.make_node("CumProd", ["n", "ax2"], ["c"], exclusive=1),
    ]
    outs = [("a", F, x.shape), ("b", F, x.shape), ("c", TensorProto.INT32, n.shape)]
    inits = [("ax", np.array(1, np.int64)), ("ax2", np.array(-1, np.int32))]
    m = model(nodes, [("x", F, x.shape), ("n", TensorProto.INT32, n.shape)], outs, inits, opset=26)
    got = compile_graph(simplify(import_onnx(m), verify=True))(x=x, n=n)
    for o, want in zip(("a", "b", "c"), ReferenceEvaluator(m).run(None, {"x": x, "n": n}), strict=True):
        np.testing.assert_allclose(got[o], want, rtol=1e-6, err_msg=o)


def test_trilu_topk_and_one_hot_of_int64_tensors_match_onnxruntime():
    """int64 tensors fed at run time (int32 inside vdla): Trilu zeroes them, TopK orders them (ties: the lower
    index first), OneHot takes them as indices (negative ones count from the end, outside ones give off)."""
    x = RNG.integers(-50, 50, (3, 4, 6)).astype(np.int64)
    x[0, 0, :3] = 7
    idx = np.array([[0, -1, 5], [-6, 2, 9]], np.int64)
    nodes = [
        helper.make_node("Trilu", ["x", "kd"], ["t0"]),
        helper.make_node("Trilu", ["x"], ["t1"], upper=0),
        helper.make_node("TopK", ["x", "k"], ["v0", "i0"], axis=-1),
        helper.make_node("TopK", ["x", "k"], ["v1", "i1"], axis=1, largest=0),
        helper.make_node("OneHot", ["idx", "depth", "vals"], ["oh"], axis=1),
    ]
    inits = [("kd", np.array(1, np.int64)), ("k", np.array([3], np.int64)), ("depth", np.array(6, np.int64)),
             ("vals", np.array([-1.0, 2.0], np.float32))]  # fmt: skip
    outs = [("t0", I64, x.shape), ("t1", I64, x.shape), ("v0", I64, (3, 4, 3)), ("i0", I64, (3, 4, 3)),
            ("v1", I64, (3, 3, 6)), ("i1", I64, (3, 3, 6)), ("oh", F, (2, 6, 3))]  # fmt: skip
    m = model(nodes, [("x", I64, x.shape), ("idx", I64, idx.shape)], outs, inits, opset=14)
    got = compile_graph(simplify(import_onnx(m), verify=True))(x=x.astype(np.int32), idx=idx.astype(np.int32))
    for name, want in reference_run(m, {"x": x, "idx": idx}).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)


@pytest.mark.parametrize(
    "node, inputs, shape, opset, why",
    [
        (helper.make_node("LpNormalization", ["x"], ["y"], p=3), [], X.shape, 18, "attribute p=3"),
        (helper.make_node("LayerNormalization", ["x", "s"], ["y"], stash_type=10), [("s", X[0, 0, 0])], X.shape, 18,
         "attribute stash_type=10"),
        (helper.make_node("GroupNormalization", ["x", "g", "g"], ["y"], num_groups=2), [("g", np.ones(3, np.float32))],
         X.shape, 21, "attribute num_groups=2"),
        (helper.make_node("ReduceSumSquare", ["x", "ax"], ["y"]), [("ax", np.array([1, -3], np.int64))],
         (2, 1, 4, 5), 18, "repeated axes"),
    ],
)  # fmt: skip
def test_unsupported_attributes_are_refused_at_import_naming_them(node, inputs, shape, opset, why):
    m = model([node], [("x", F, X.shape)], [(node.output[0], F, shape)], inputs, opset=opset)
    with pytest.raises(UnsupportedError, match=why) as e:
        import_onnx(m)
    assert str(e.value).startswith(f"{node.op_type}: node '{node.op_type}_0'")


def test_int64_indices_move_but_are_not_added():
    """ArgMax's int64 indices are held as int32 (exact: far below 2^31): they move through data movement
    (Identity) and come out equal to the reference; arithmetic that could exceed int32 on them is refused."""
    nodes = [helper.make_node("ArgMax", ["x"], ["i"], axis=1), helper.make_node("Identity", ["i"], ["j"])]
    m = model(nodes, [("x", F, X.shape)], [("j", I64, (2, 1, 4, 5))], opset=13)
    x = RNG.standard_normal(X.shape).astype(np.float32)
    got = compile_graph(simplify(import_onnx(m), verify=True))(x=x)["j"]
    np.testing.assert_array_equal(got, reference_run(m, {"x": x})["j"])
    nodes = [helper.make_node("ArgMax", ["x"], ["i"], axis=1), helper.make_node("Add", ["i", "i"], ["j"])]
    m = model(nodes, [("x", F, X.shape)], [("j", I64, (2, 1, 4, 5))], opset=13)
    with pytest.raises(UnsupportedError, match="int64"):
        import_onnx(m)


def _decomposed_layer_norm(
    axes, eps_as_input: bool, extra_reader: str | None = None, opset: int = 13, square: str = "Mul"
):
    """LayerNorm as exporters write it out: ReduceMean, Sub, Mul or Pow 2 (the square, ``square``), ReduceMean,
    Add eps, Sqrt, Div, Mul scale, Add bias; ``extra_reader`` also makes that intermediate a graph output."""
    s = RNG.standard_normal(X.shape[axes[0] :]).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=axes),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node(square, ["d", "d" if square == "Mul" else "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=axes),
        helper.make_node("Add", ["var", "eps"] if eps_as_input else ["eps", "var"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["n"]),
        helper.make_node("Mul", ["n", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["y"]),
    ]
    inits = [("eps", np.float32(1e-5)), ("scale", s), ("bias", s[..., ::-1].copy()), ("two", np.float32(2.0))]
    outs = [("y", F, X.shape)]
    if extra_reader:
        kept = [1 if i >= axes[0] % 4 else d for i, d in enumerate(X.shape)]
        outs.append((extra_reader, F, X.shape if extra_reader == "d" else kept))
    return model(nodes, [("x", F, X.shape)], outs, inits, opset)


@pytest.mark.parametrize("square", ["Mul", "Pow"])  # torch's opset-13 export writes Pow(d, 2)
@pytest.mark.parametrize("axes", [[-1], [2, 3], [1, 2, 3]])
def test_decomposed_layer_norm_becomes_one_layer_norm_node_with_the_same_values(axes, square):
    m = _decomposed_layer_norm(axes, eps_as_input=axes != [2, 3], square=square)
    graph = simplify(import_onnx(m), verify=True)
    assert [n.op for n in graph.nodes] == ["layer_norm"]
    assert graph.nodes[0].attrs["axis"] == axes[0] % 4 and len(graph.nodes[0].inputs) == 3
    np.testing.assert_allclose(graph.nodes[0].attrs["epsilon"], 1e-5, rtol=1e-6)
    matches_onnxruntime(m, {"x": X})


@pytest.mark.parametrize("reader", ["d", "mean"])
def test_layer_norm_pattern_with_an_intermediate_read_elsewhere_is_left_alone(reader):
    m = _decomposed_layer_norm([-1], eps_as_input=True, extra_reader=reader)
    graph = simplify(import_onnx(m), verify=True)
    assert "layer_norm" not in [n.op for n in graph.nodes]
    matches_onnxruntime(m, {"x": X})


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_losses_match_onnxruntime(reduction):
    """NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (with its log_prob output), with and without class
    weights (constant and computed) and an ignored class."""
    x = RNG.standard_normal((3, 5, 2, 4)).astype(np.float32)
    target = RNG.integers(0, 5, (3, 2, 4)).astype(np.int64)
    target[0, 0, :2] = 2
    w = RNG.uniform(0.5, 2, 5).astype(np.float32)
    out = [] if reduction == "none" else ()
    shape = (3, 2, 4) if reduction == "none" else out
    nodes = [
        helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["a"], reduction=reduction),
        helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["b"], reduction=reduction, ignore_index=2),
        helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "wc"], ["c", "logp"], reduction=reduction),
        helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["d"], reduction=reduction, ignore_index=2),
    ]
    outs = [("a", F, shape), ("b", F, shape), ("c", F, shape), ("logp", F, x.shape), ("d", F, shape)]
    m = model(nodes, [("x", F, x.shape), ("w", F, (5,))], outs, [("t", target), ("wc", w)], opset=13)
    matches_onnxruntime(m, {"x": x, "w": w[::-1].copy()})


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_losses_with_run_time_targets_match_onnxruntime(reduction):
    """Targets fed at run time (an int64 graph input, int32 inside vdla): with and without class weights,
    an ignored class, an (N, C) input and a mean over targets that are all ignored (0 / 0, NaN)."""
    x = RNG.standard_normal((3, 5, 2, 4)).astype(np.float32)
    target = RNG.integers(0, 5, (3, 2, 4)).astype(np.int64)
    target[0, 0, :2] = 2
    w = RNG.uniform(0.5, 2, 5).astype(np.float32)
    shape = (3, 2, 4) if reduction == "none" else ()
    nodes = [
        helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["a"], reduction=reduction),
        helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["b"], reduction=reduction, ignore_index=2),
        helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["c", "logp"], reduction=reduction),
        helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["d"], reduction=reduction, ignore_index=2),
        helper.make_node("SoftmaxCrossEntropyLoss", ["x2", "t2"], ["e"], reduction=reduction, ignore_index=1),
    ]
    outs = [("a", F, shape), ("b", F, shape), ("c", F, shape), ("logp", F, x.shape), ("d", F, shape)]
    outs.append(("e", F, (4,) if reduction == "none" else ()))
    inputs = [("x", F, x.shape), ("t", I64, target.shape), ("w", F, (5,)), ("x2", F, (4, 3)), ("t2", I64, (4,))]
    m = model(nodes, inputs, outs, opset=13)
    feeds = {"x": x, "t": target, "w": w, "x2": RNG.standard_normal((4, 3)).astype(np.float32)}
    feeds["t2"] = np.ones(4, np.int64)  # every target ignored: the mean is NaN
    got = compile_graph(simplify(import_onnx(m), verify=True))(
        **{k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feeds.items()}
    )
    want = reference_run(m, feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-5, err_msg=name)
    assert np.isnan(got["e"]).all() == (reduction == "mean")


@pytest.mark.filterwarnings("ignore:.*ONNX shape inference fails")
def test_run_time_loss_targets_are_checked_at_import():
    """A run-time target of the wrong shape or type, and NegativeLogLikelihoodLoss's ambiguous mean (no
    weight, ignore_index -1) that a run-time target may reach, are refused naming the node."""
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="sum")
    m = model([node], [("x", F, (2, 3)), ("t", I64, (3,))], [("y", F, ())], opset=13)
    with pytest.raises(UnsupportedError, match=r"NegativeLogLikelihoodLoss_0.*target must have shape \(2,\)"):
        import_onnx(m)
    m = model([node], [("x", F, (2, 3)), ("t", F, (2,))], [("y", F, ())], opset=13)
    with pytest.raises(UnsupportedError, match="input 1 't' has dtype float32"):
        import_onnx(m)
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], ignore_index=-1)
    m = model([node], [("x", F, (2, 3)), ("t", I64, (2,))], [("y", F, ())], opset=13)
    with pytest.raises(UnsupportedError, match="attribute ignore_index=-1"):
        import_onnx(m)


def test_loss_targets_are_checked_at_import():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="sum")
    m = model([node], [("x", F, x.shape)], [("y", F, ())], [("t", np.array([0, 3], np.int64))], opset=13)
    with pytest.raises(UnsupportedError, match=r"target classes outside \[0, 3\)"):
        import_onnx(m)
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], ignore_index=-1)
    m = model([node], [("x", F, x.shape)], [("y", F, ())], [("t", np.array([0, -1], np.int64))], opset=13)
    with pytest.raises(UnsupportedError, match="attribute ignore_index=-1"):
        import_onnx(m)
