"""The ONNX frontend on hand-built models: import, simplify and the float CPU path against onnxruntime;
clear errors for dynamic shapes, unsupported operators and attributes, bad files; QDQ models from
onnxruntime's static quantizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.cpu_fallback import compile_graph  # noqa: E402
from vdla.frontend import FrontendError, import_onnx  # noqa: E402
from vdla.frontend.onnx import max_opset  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph import Graph  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402
from vdla.graph.verify import verify  # noqa: E402


def run_float_cpu(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float CPU path: simplify (verified after every pass), then the CPU JIT."""
    return compile_graph(simplify(graph, verify=True))(**feeds)


def run_ort(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return reference_run(model, feeds)


class Model:
    """A tiny onnx.helper model builder with seeded initializers."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) or 1
        s = scale if scale is not None else np.sqrt(2.0 / fan_in)
        return self.init(name, self.rng.normal(0, s, shape).astype(np.float32))

    def node(self, op: str, inputs, outputs, name: str | None = None, **attrs) -> str:
        outputs = [outputs] if isinstance(outputs, str) else outputs
        self.nodes.append(helper.make_node(op, list(inputs), outputs, name=name or outputs[0], **attrs))
        return outputs[0]

    def conv_bn_relu(self, x: str, cin: int, cout: int, k: int, stride: int, name: str, relu: bool = True) -> str:
        w = self.weight(f"{name}_w", (cout, cin, k, k))
        y = self.node("Conv", [x, w], f"{name}_conv", pads=[k // 2] * 4, strides=[stride] * 2, kernel_shape=[k, k])
        bn = [
            self.init(f"{name}_gamma", self.rng.uniform(0.5, 1.5, cout).astype(np.float32)),
            self.init(f"{name}_beta", self.rng.normal(0, 0.1, cout).astype(np.float32)),
            self.init(f"{name}_mean", self.rng.normal(0, 0.1, cout).astype(np.float32)),
            self.init(f"{name}_var", self.rng.uniform(0.5, 1.5, cout).astype(np.float32)),
        ]
        y = self.node("BatchNormalization", [y, *bn], f"{name}_bn", epsilon=1e-5)
        return self.node("Relu", [y], f"{name}_relu") if relu else y

    def build(self, inputs, outputs, opset: int = 13, name: str = "model"):
        vi = [helper.make_tensor_value_info(n, dt, s) for n, dt, s in inputs]
        vo = [helper.make_tensor_value_info(n, dt, s) for n, dt, s in outputs]
        graph = helper.make_graph(self.nodes, name, vi, vo, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        onnx.checker.check_model(model)
        return model


F = TensorProto.FLOAT


def mlp(batch=4, seed=0):
    m = Model(seed)
    h = m.node("Gemm", ["x", m.weight("w1", (32, 20)), m.weight("b1", (32,), 0.1)], "h", transB=1)
    h = m.node("Relu", [h], "h_relu")
    y = m.node("Gemm", [h, m.weight("w2", (32, 10)), m.weight("b2", (10,), 0.1)], "logits", alpha=0.5, beta=2.0)
    m.node("Softmax", [y], "probs", axis=-1)
    return m.build([("x", F, [batch, 20])], [("logits", F, [batch, 10]), ("probs", F, [batch, 10])])


def small_cnn(seed=0, batch=1, dynamic=False):
    """Conv+BN+ReLU stem, max pool, a residual block, global average pool, flatten, dense, softmax."""
    m = Model(seed)
    x = m.conv_bn_relu("image", 3, 8, 3, 1, "stem")
    x = m.node("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = m.conv_bn_relu(x, 8, 8, 3, 1, "block_a")
    y = m.conv_bn_relu(y, 8, 8, 3, 1, "block_b", relu=False)
    y = m.node("Add", [y, x], "residual")
    y = m.node("Relu", [y], "block_out")
    y = m.node("GlobalAveragePool", [y], "gap")
    y = m.node("Flatten", [y], "flat", axis=1)
    y = m.node("Gemm", [y, m.weight("fc_w", (10, 8)), m.weight("fc_b", (10,), 0.1)], "logits", transB=1)
    m.node("Softmax", [y], "probs", axis=1)
    n = "N" if dynamic else batch
    return m.build([("image", F, [n, 3, 16, 16])], [("logits", F, [n, 10]), ("probs", F, [n, 10])])


def _close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4) -> None:
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, float(np.abs(want).max())))


def test_mlp_matches_onnxruntime():
    model = mlp()
    graph = import_onnx(model)
    assert list(graph.inputs) == ["x"] and graph.outputs == ["logits", "probs"]
    assert [n.op for n in graph.nodes].count("dense") == 2
    x = np.random.default_rng(1).normal(0, 1, (4, 20)).astype(np.float32)
    got, want = run_float_cpu(graph, {"x": x}), run_ort(model, {"x": x})
    for name in ("logits", "probs"):
        _close(got[name], want[name])


def test_small_cnn_matches_onnxruntime_with_batch_norm_folded():
    model = small_cnn()
    graph = import_onnx(model)
    assert {"conv2d", "batch_norm", "max_pool2d", "global_avg_pool", "dense", "softmax"} <= {n.op for n in graph.nodes}
    simple = simplify(graph, verify=True)
    assert "batch_norm" not in {n.op for n in simple.nodes}  # folded into the convolutions
    assert sum(n.op == "conv2d" for n in simple.nodes) == 3
    x = np.random.default_rng(2).normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    got, want = compile_graph(simple)(image=x), run_ort(model, {"image": x})
    for name in ("logits", "probs"):
        _close(got[name], want[name])
    np.testing.assert_allclose(evaluate(graph, {"image": x})["logits"], want["logits"], rtol=1e-4, atol=1e-4)


def test_dynamic_batch_needs_input_shapes():
    model = small_cnn(dynamic=True)
    with pytest.raises(FrontendError) as e:
        import_onnx(model)
    msg = str(e.value)
    assert "'image'" in msg and "dimension 0" in msg and "'N'" in msg and "input_shapes" in msg
    graph = import_onnx(model, input_shapes={"image": (2, 3, 16, 16)})
    assert graph.inputs["image"].shape == (2, 3, 16, 16)
    x = np.random.default_rng(3).normal(0, 1, (2, 3, 16, 16)).astype(np.float32)
    _close(run_float_cpu(graph, {"image": x})["probs"], run_ort(model, {"image": x})["probs"])
    with pytest.raises(FrontendError, match="'image' dimension 1 is 3 in the model, input_shapes gives 4"):
        import_onnx(model, input_shapes={"image": (2, 4, 16, 16)})
    with pytest.raises(FrontendError, match="'img'.*not graph inputs"):
        import_onnx(model, input_shapes={"img": (2, 3, 16, 16)})


def test_unsupported_operator_names_node_op_type_and_attributes():
    m = Model()
    m.node("Relu", ["x"], "r")
    m.node("RandomUniformLike", ["r"], "y", name="randomize_me", low=-1.0, high=2.0)
    model = m.build([("x", F, [2, 8])], [("y", F, [2, 8])])
    with pytest.raises(UnsupportedError) as e:
        import_onnx(model)
    msg = str(e.value)
    assert "'randomize_me'" in msg and "RandomUniformLike" in msg and "high=2.0" in msg and "low=-1.0" in msg


def test_unsupported_attribute_value_is_named():
    m = Model()
    pads = m.init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))
    m.node("Pad", ["x", pads], "y", name="mirror", mode="mirror")
    model = m.build([("x", F, [1, 2, 4, 4])], [("y", F, [1, 2, 6, 6])])
    with pytest.raises(UnsupportedError, match=r"'mirror'.*attribute mode='mirror': unknown padding mode"):
        import_onnx(model)
    m = Model()
    m.node("LpPool", ["x"], "y", name="norm0", kernel_shape=[2, 2], p=0)
    model = m.build([("x", F, [1, 2, 8, 8])], [("y", F, [1, 2, 7, 7])])
    with pytest.raises(UnsupportedError, match=r"LpPool: node 'norm0'.*attribute p=0: p must be a positive integer"):
        import_onnx(model)


def test_unsupported_dtype_is_named_and_every_bad_node_is_reported_before_running():
    m = Model()
    m.node("Add", ["a", "b"], "s", name="int8_add")
    m.node("Cast", ["s"], "f", name="to_float", to=TensorProto.FLOAT)
    m.node("Relu", ["f"], "y")
    m.node("RandomUniformLike", ["x"], "z", name="random")  # an operator vdla does not import
    i8 = TensorProto.INT8
    model = m.build([("a", i8, [4]), ("b", i8, [4]), ("x", F, [4])], [("y", F, [4]), ("z", F, [4])], opset=14)
    with pytest.raises(UnsupportedError) as e:
        import_onnx(model)
    msg = str(e.value)
    assert "2 nodes cannot be imported" in msg  # the Cast and Relu after the bad Add are not blamed
    assert "'int8_add'" in msg and "dtype int8" in msg and "'random'" in msg and "RandomUniformLike" in msg


def test_truncated_and_malformed_files_name_the_file(tmp_path: Path):
    data = small_cnn().SerializeToString()
    for name, blob in (("truncated.onnx", data[: len(data) // 2]), ("garbage.onnx", b"\xff\x00 not a model")):
        path = tmp_path / name
        path.write_bytes(blob)
        with pytest.raises(FrontendError) as e:
            import_onnx(path)
        assert str(path) in str(e.value)
    with pytest.raises(FrontendError, match="no such ONNX file"):
        import_onnx(tmp_path / "missing.onnx")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(FrontendError, match=str(empty)):
        import_onnx(str(empty))


def test_opsets_outside_the_supported_range_are_refused_naming_the_file(tmp_path: Path):
    m = Model()
    m.node("Relu", ["x"], "y")
    model = m.build([("x", F, [2])], [("y", F, [2])], opset=6)
    path = tmp_path / "old.onnx"
    onnx.save(model, path)
    with pytest.raises(FrontendError, match=rf"{path}: opset 6 is not supported: vdla imports opsets 7 to \d+"):
        import_onnx(path)
    model.opset_import[0].version = max_opset() + 1
    onnx.save(model, path)
    with pytest.raises(FrontendError, match=rf"{path}: opset {max_opset() + 1} is not supported: vdla imports opsets"):
        import_onnx(path)
    model.opset_import[0].version = 7  # the oldest supported one imports
    assert [n.op for n in import_onnx(model).nodes] == ["relu"]


def test_identity_and_dropout_are_removed_and_output_names_kept():
    m = Model()
    a = m.node("Identity", ["x"], "a")
    b = m.node("Relu", [a], "b")
    c = m.node("Dropout", [b], "c")
    m.node("Identity", [c], "y")
    model = m.build([("x", F, [3, 4])], [("y", F, [3, 4])], opset=13)
    graph = import_onnx(model)
    assert [(n.op, n.inputs, n.output) for n in graph.nodes] == [("relu", ("x",), "y")]
    x = np.random.default_rng(0).normal(0, 1, (3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_float_cpu(graph, {"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [1, 0, 2, 1]},  # asymmetric: (top, left, bottom, right) in ONNX
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
        {"auto_pad": "VALID", "dilations": [2, 1]},
        {"group": 4, "pads": [1, 1, 1, 1]},  # depthwise
    ],
)
def test_conv_attributes_match_onnxruntime(attrs):
    m = Model(7)
    cin = 4
    cout = 4 if attrs.get("group") else 6
    w = m.weight("w", (cout, cin // attrs.get("group", 1), 3, 3))
    b = m.weight("b", (cout,), 0.1)
    m.node("Conv", ["x", w, b], "y", kernel_shape=[3, 3], **attrs)
    model = m.build([("x", F, [1, cin, 9, 10])], [("y", F, ["n", "c", "h", "w"])])
    graph = import_onnx(model)
    conv = next(n for n in graph.nodes if n.op == "conv2d")
    if attrs.get("pads") == [1, 0, 2, 1]:
        assert conv.attrs["padding"] == (1, 2, 0, 1)  # vdla: (top, bottom, left, right)
    x = np.random.default_rng(8).normal(0, 1, (1, cin, 9, 10)).astype(np.float32)
    _close(run_float_cpu(graph, {"x": x})["y"], run_ort(model, {"x": x})["y"])


def test_mobilenet_v2_block_with_relu6_clip_matches_onnxruntime():
    m = Model(3)
    six = [m.init("zero", np.array(0.0, np.float32)), m.init("six", np.array(6.0, np.float32))]
    x = m.conv_bn_relu("x", 8, 8, 1, 1, "head", relu=False)
    x = m.node("Clip", [x, *six], "head_relu6")
    y = m.conv_bn_relu(x, 8, 32, 1, 1, "expand", relu=False)
    y = m.node("Clip", [y, *six], "expand_relu6")
    dw = m.weight("dw_w", (32, 1, 3, 3))
    y = m.node("Conv", [y, dw], "dw", group=32, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    y = m.node("Clip", [y, *six], "dw_relu6")
    y = m.conv_bn_relu(y, 32, 8, 1, 1, "project", relu=False)
    y = m.node("Add", [x, y], "sum")
    y = m.node("ReduceMean", [y], "pooled", axes=[2, 3], keepdims=0)
    m.node("MatMul", [y, m.weight("fc", (8, 5))], "out")
    model = m.build([("x", F, [1, 8, 12, 12])], [("out", F, [1, 5])], opset=13)
    graph = import_onnx(model)
    clips = [n for n in graph.nodes if n.op == "clip"]
    assert len(clips) == 3 and all(n.attrs == {"lo": 0.0, "hi": 6.0} for n in clips)
    xin = np.random.default_rng(4).normal(0, 1, (1, 8, 12, 12)).astype(np.float32)
    _close(run_float_cpu(graph, {"x": xin})["out"], run_ort(model, {"x": xin})["out"])


def test_shape_ops_softmax_coercion_and_constant_folding_match_onnxruntime():
    """Opset 11 semantics: Squeeze/Unsqueeze axes as attributes, Softmax over the coerced 2-D view;
    Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to a constant shape at import."""
    m = Model(5)
    t = m.node("Transpose", ["x"], "t", perm=[0, 2, 1, 3])  # (2, 4, 3, 5)
    u = m.node("Unsqueeze", [t], "u", axes=[0])  # (1, 2, 4, 3, 5)
    s = m.node("Squeeze", [u], "s", axes=[0])
    shape = m.node("Shape", [s], "shape")
    batch = m.node("Gather", [shape, m.init("zero", np.array(0, np.int64))], "batch", axis=0)
    batch = m.node("Unsqueeze", [batch], "batch_1d", axes=[0])
    target = m.node("Concat", [batch, m.init("rest", np.array([-1], np.int64))], "target", axis=0)
    flat = m.node("Reshape", [s, target], "flat")  # (2, 60)
    r = m.node("Reshape", [flat, m.init("shape3", np.array([0, 4, -1], np.int64))], "r")  # (2, 4, 15)
    m.node("Softmax", [r], "y", axis=1)  # opset 11: normalize over the last 4 * 15 elements of each row
    model = m.build([("x", F, [2, 3, 4, 5])], [("y", F, [2, 4, 15])], opset=11)
    graph = import_onnx(model)
    assert {n.op for n in graph.nodes} <= {"transpose", "reshape", "softmax"}
    x = np.random.default_rng(6).normal(0, 2, (2, 3, 4, 5)).astype(np.float32)
    _close(run_float_cpu(graph, {"x": x})["y"], run_ort(model, {"x": x})["y"])


def test_attention_block_matches_onnxruntime():
    """Batched matmuls of computed operands (Q K^T, then weights V), a division by a computed tensor and a
    square root, on the CPU JIT against onnxruntime."""
    m = Model(11)
    heads, seq, dim = 2, 5, 8
    q = m.node("MatMul", ["x", m.weight("wq", (16, 16))], "q")
    k = m.node("MatMul", ["x", m.weight("wk", (16, 16))], "k")
    v = m.node("MatMul", ["x", m.weight("wv", (16, 16))], "v")
    split = m.init("split_shape", np.array([1, seq, heads, dim], np.int64))
    qh, kh, vh = (
        m.node("Transpose", [m.node("Reshape", [t, split], f"{t}_r")], f"{t}_h", perm=[0, 2, 1, 3]) for t in (q, k, v)
    )
    kt = m.node("Transpose", [kh], "kt", perm=[0, 1, 3, 2])
    scores = m.node("MatMul", [qh, kt], "scores")  # (1, heads, seq, seq): both operands computed
    norm = m.node("Sqrt", [m.node("Abs", [scores], "abs")], "norm")
    scaled = m.node("Div", [scores, m.node("Add", [norm, m.init("one", np.array(1.0, np.float32))], "den")], "scaled")
    probs = m.node("Softmax", [scaled], "probs", axis=-1)
    ctx = m.node("MatMul", [probs, vh], "ctx")  # (1, heads, seq, dim)
    ctx_t = m.node("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])
    m.node("Reshape", [ctx_t, m.init("out_shape", np.array([1, seq, 16], np.int64))], "y")
    model = m.build([("x", F, [1, seq, 16])], [("y", F, [1, seq, 16])])
    graph = import_onnx(model)
    ops = [n.op for n in graph.nodes]
    assert ops.count("matmul") == 2 and "div" in ops and "sqrt" in ops
    x = np.random.default_rng(12).normal(0, 1, (1, seq, 16)).astype(np.float32)
    _close(run_float_cpu(graph, {"x": x})["y"], run_ort(model, {"x": x})["y"])


@pytest.mark.parametrize(
    ("sa", "sb"), [((3, 4), (4,)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,)), ((2, 3, 4), (4, 6))]
)
def test_matmul_shapes_match_onnxruntime(sa, sb):
    """numpy's broadcasting and 1-D rules for two computed operands (and the dense path for the 2-D one)."""
    m = Model()
    m.node("MatMul", ["a", "b"], "y")
    out = np.matmul(np.zeros(sa), np.zeros(sb)).shape
    model = m.build([("a", F, list(sa)), ("b", F, list(sb))], [("y", F, list(out))])
    rng = np.random.default_rng(13)
    feeds = {"a": rng.normal(0, 1, sa).astype(np.float32), "b": rng.normal(0, 1, sb).astype(np.float32)}
    got = run_float_cpu(import_onnx(model), feeds)["y"]
    assert got.shape == out
    _close(got, run_ort(model, feeds)["y"])


def test_slice_split_match_onnxruntime():
    m = Model()
    starts, ends = m.init("starts", np.array([1, -1, 0], np.int64)), m.init("ends", np.array([3, -100, 9], np.int64))
    axes, steps = m.init("axes", np.array([1, 2, 3], np.int64)), m.init("steps", np.array([1, -2, 3], np.int64))
    m.node("Slice", ["x", starts, ends, axes, steps], "s")
    m.node("Split", ["x", m.init("parts", np.array([1, 3], np.int64))], ["p0", "p1"], axis=1)
    model = m.build(
        [("x", F, [2, 4, 5, 9])], [("s", F, [2, 2, 3, 3]), ("p0", F, [2, 1, 5, 9]), ("p1", F, [2, 3, 5, 9])]
    )
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["slice"] * 3
    x = np.random.default_rng(14).normal(0, 1, (2, 4, 5, 9)).astype(np.float32)
    got, want = run_float_cpu(graph, {"x": x}), run_ort(model, {"x": x})
    for name in ("s", "p0", "p1"):
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize(
    ("mode", "coord", "nearest", "out"),
    [
        ("nearest", "asymmetric", "floor", (1, 3, 10, 14)),
        ("nearest", "half_pixel", "round_prefer_floor", (1, 3, 7, 5)),
        ("nearest", "align_corners", "round_prefer_ceil", (1, 3, 9, 11)),
        ("nearest", "tf_half_pixel_for_nn", "ceil", (1, 3, 8, 12)),
        ("linear", "half_pixel", "round_prefer_floor", (1, 3, 10, 14)),
        ("linear", "pytorch_half_pixel", "round_prefer_floor", (1, 3, 3, 1)),
        ("linear", "align_corners", "round_prefer_floor", (1, 3, 9, 11)),
        ("linear", "asymmetric", "round_prefer_floor", (1, 3, 4, 4)),
    ],
)
def test_resize_matches_onnxruntime(mode, coord, nearest, out):
    """Resize given output sizes (scales = sizes / input): up and down, every coordinate mode."""
    m = Model()
    sizes = m.init("sizes", np.array(out, np.int64))
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    m.node("Resize", ["x", "", "", sizes], "y", **attrs)
    model = m.build([("x", F, [1, 3, 5, 7])], [("y", F, list(out))])
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["resize"]
    x = np.random.default_rng(15).normal(0, 1, (1, 3, 5, 7)).astype(np.float32)
    _close(run_float_cpu(graph, {"x": x})["y"], run_ort(model, {"x": x})["y"], rtol=1e-5)


def test_resize_by_scales_and_unsupported_modes():
    m = Model()
    scales = m.init("scales", np.array([1, 1, 2, 0.5], np.float32))
    m.node("Resize", ["x", "", scales], "y", mode="linear")
    model = m.build([("x", F, [1, 2, 4, 6])], [("y", F, [1, 2, 8, 3])])
    x = np.random.default_rng(16).normal(0, 1, (1, 2, 4, 6)).astype(np.float32)
    _close(run_float_cpu(import_onnx(model), {"x": x})["y"], run_ort(model, {"x": x})["y"], rtol=1e-5)
    refused = (({"mode": "bicubic"}, "mode='bicubic'"), ({"exclude_outside": 1}, "exclude_outside=1"))
    for attrs, what in refused:
        m = Model()
        m.node("Resize", ["x", "", m.init("scales", np.array([1, 1, 0.5, 0.5], np.float32))], "y", **attrs)
        model = m.build([("x", F, [1, 2, 4, 6])], [("y", F, [1, 2, 2, 3])], opset=18)
        with pytest.raises(UnsupportedError, match=f"node 'y'.*attribute {what}"):
            import_onnx(model)


def test_batch_norm_with_computed_statistics_matches_onnxruntime():
    m = Model()
    m.node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], "y", epsilon=1e-3)
    c = [("scale", F, [3]), ("bias", F, [3]), ("mean", F, [3]), ("var", F, [3])]
    model = m.build([("x", F, [2, 3, 4, 4]), *c], [("y", F, [2, 3, 4, 4])])
    rng = np.random.default_rng(17)
    feeds = {k: rng.normal(0, 1, s).astype(np.float32) for k, _, s in [("x", F, [2, 3, 4, 4]), *c]}
    feeds["var"] = np.abs(feeds["var"])
    _close(run_float_cpu(import_onnx(model), feeds)["y"], run_ort(model, feeds)["y"])


@pytest.mark.parametrize("const_stats", [False, True])
def test_batch_norm_in_training_mode_matches_onnx_reference(const_stats):
    """training_mode=1: the batch's mean and biased variance normalize; the running mean and variance mix the
    given ones with the batch's by the momentum (given statistics fed or constant)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(19)
    shapes = {"x": [2, 3, 4, 5], "scale": [3], "bias": [3], "mean": [3], "var": [3]}
    arrays = {k: rng.normal(0, 1, s).astype(np.float32) for k, s in shapes.items()}
    arrays["var"] = np.abs(arrays["var"])
    m = Model()
    names = ["x"] + [m.init(k, arrays[k]) if const_stats and k != "x" else k for k in list(shapes)[1:]]
    m.node("BatchNormalization", names, ["y", "rmean", "rvar"], epsilon=1e-3, momentum=0.8, training_mode=1)
    fed = {k: a for k, a in arrays.items() if k == "x" or not const_stats}
    model = m.build([(k, F, shapes[k]) for k in fed], [("y", F, shapes["x"]), ("rmean", F, [3]), ("rvar", F, [3])],
                    opset=15)  # fmt: skip
    got = run_float_cpu(import_onnx(model), fed)
    for name, want in zip(("y", "rmean", "rvar"), ReferenceEvaluator(model).run(None, fed), strict=True):
        _close(got[name], want, rtol=1e-5)


def test_depthwise_convolution_matches_onnxruntime():
    m = Model()
    w = m.weight("w", (6, 1, 3, 3))
    m.node("Conv", ["x", w, m.weight("b", (6,), 0.1)], "y", group=6, pads=[1, 1, 1, 1], strides=[2, 2])
    model = m.build([("x", F, [1, 6, 9, 9])], [("y", F, [1, 6, 5, 5])])
    graph = import_onnx(model)
    assert graph.nodes[0].attrs["groups"] == 6
    x = np.random.default_rng(18).normal(0, 1, (1, 6, 9, 9)).astype(np.float32)
    _close(run_float_cpu(graph, {"x": x})["y"], run_ort(model, {"x": x})["y"])


def test_uint8_quantize_dequantize_are_exact():
    """uint8 tensors are held as int8 (value - 128); a uint8 graph output is returned as int32."""
    m = Model()
    s, zp = m.init("s", np.array(0.05, np.float32)), m.init("zp", np.array(120, np.uint8))
    q = m.node("QuantizeLinear", ["x", s, zp], "q")
    p = m.node("MaxPool", [q], "p", kernel_shape=[2, 2], strides=[2, 2])
    m.node("DequantizeLinear", [p, s, zp], "y")
    model = m.build(
        [("x", F, [1, 2, 6, 6])], [("y", F, [1, 2, 3, 3]), ("p", TensorProto.UINT8, [1, 2, 3, 3])], opset=13
    )
    graph = import_onnx(model)
    types = verify(graph)
    assert types["q"].dtype == "int8" and types["p_1" if "p_1" in types else "p"].dtype in ("int8", "int32")
    x = np.random.default_rng(9).normal(0, 4, (1, 2, 6, 6)).astype(np.float32)
    got, want = run_float_cpu(graph, {"x": x}), run_ort(model, {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    assert got["p"].dtype == np.int32
    np.testing.assert_array_equal(got["p"], want["p"].astype(np.int32))


def _qdq_model(tmp_path: Path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(11)
            self.batches = iter([{"image": rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    src, dst = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(small_cnn(seed=12), src)
    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return onnx.load(str(dst))


def test_qdq_model_from_onnxruntime_runs_on_the_float_cpu_path_within_one_step(tmp_path: Path):
    model = _qdq_model(tmp_path)
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    graph = import_onnx(model)
    ops = [n.op for n in graph.nodes]
    assert "quantize" in ops and "dequantize" in ops
    simple = simplify(graph, verify=True)
    # the int8 weights stay int8 behind their dequantize (what the QDQ lowering consumes)
    conv = next(n for n in simple.nodes if n.op == "conv2d")
    w = next(n for n in simple.nodes if n.output == conv.inputs[1])
    assert w.op == "dequantize" and simple.params[w.inputs[0]].dtype == np.int8 and w.attrs.get("axis") == 0
    compiled = compile_graph(simple)
    rng = np.random.default_rng(13)
    for _ in range(3):
        x = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
        got, want = compiled(image=x), run_ort(model, {"image": x})
        for name in graph.outputs:
            dq = next(n for n in simple.nodes if n.output == name)
            assert dq.op == "dequantize"  # each output is quantized: one step is its scale
            step = float(dq.attrs["scale"])
            assert np.abs(got[name] - want[name]).max() <= step * 1.0001, name


def _c(m: Model, name: str, value) -> str:
    return m.init(name, np.asarray(value))


def _variant_models():
    """(id, model, feeds): operator forms the node tests do not reach (constant operands folded into
    attributes and parameters, opset-dependent attributes, 1-D windows, reductions, int8/uint8 paths)."""
    rng = np.random.default_rng(21)
    x4 = rng.normal(0, 1, (2, 3, 6, 7)).astype(np.float32)
    x2 = rng.normal(0, 1, (4, 5)).astype(np.float32)
    x3 = rng.normal(0, 1, (2, 3, 9)).astype(np.float32)
    i8 = rng.integers(-128, 128, (2, 3, 4), dtype=np.int8)
    cases = []

    def add(name, build, feeds, opset=13):
        m = Model(hash(name) % 1000)
        ins, outs = build(m)
        cases.append((name, m.build(ins, outs, opset=opset), feeds))

    add("sub_const_first", lambda m: (
        m.node("Sub", [_c(m, "c", rng.normal(0, 1, (1, 3, 1, 1)).astype(np.float32)), "x"], "y"),
        ([("x", F, x4.shape)], [("y", F, x4.shape)]))[1], {"x": x4})  # fmt: skip
    add("div_by_constants", lambda m: (
        m.node("Div", ["x", _c(m, "d", np.float32(4.0))], "a"),
        m.node("Div", ["a", _c(m, "v", rng.uniform(1, 2, (1, 3, 1, 7)).astype(np.float32))], "y"),
        ([("x", F, x4.shape)], [("y", F, x4.shape)]))[2], {"x": x4})  # fmt: skip
    add("gemm_transA_constB_noT_alpha_beta_matrixC", lambda m: (
        m.node("Gemm", ["x", _c(m, "b", rng.normal(0, 1, (4, 6)).astype(np.float32)),
                        _c(m, "cc", rng.normal(0, 1, (5, 6)).astype(np.float32))], "y",
               transA=1, alpha=0.7, beta=-1.5),
        ([("x", F, x2.shape)], [("y", F, (5, 6))]))[1], {"x": x2})  # fmt: skip
    add("gemm_scalar_C_computed_B", lambda m: (
        m.node("Gemm", ["x", "b", _c(m, "cc", np.array([0.25], np.float32))], "y", alpha=2.0),
        ([("x", F, x2.shape), ("b", F, (5, 3))], [("y", F, (4, 3))]))[1],
        {"x": x2, "b": rng.normal(0, 1, (5, 3)).astype(np.float32)})  # fmt: skip
    add("matmul_3d_by_constant_then_bias", lambda m: (
        m.node("MatMul", ["x", _c(m, "w", rng.normal(0, 1, (9, 4)).astype(np.float32))], "h"),
        m.node("Add", ["h", _c(m, "bias", rng.normal(0, 1, (4,)).astype(np.float32))], "y"),
        ([("x", F, x3.shape)], [("y", F, (2, 3, 4))]))[2], {"x": x3})  # fmt: skip
    add("matmul_vector_by_constant", lambda m: (
        m.node("MatMul", ["x", _c(m, "w", rng.normal(0, 1, (9,)).astype(np.float32))], "y"),
        ([("x", F, x3.shape)], [("y", F, (2, 3))]))[1], {"x": x3})  # fmt: skip
    add("conv1d_maxpool1d_avgpool1d", lambda m: (
        m.node("Conv", ["x", _c(m, "w", rng.normal(0, 1, (4, 3, 3)).astype(np.float32))], "c",
               pads=[2, 0], strides=[2], kernel_shape=[3]),
        m.node("MaxPool", ["c"], "p", kernel_shape=[2], strides=[1], pads=[0, 1]),
        m.node("AveragePool", ["p"], "y", kernel_shape=[3], pads=[1, 1], count_include_pad=1),
        ([("x", F, x3.shape)], [("y", F, (2, 4, 5))]))[3], {"x": x3})  # fmt: skip
    add("avgpool_excluding_pads_and_ceil_that_keeps_the_size", lambda m: (
        m.node("AveragePool", ["x"], "a", kernel_shape=[3, 3], pads=[1, 1, 0, 1], strides=[2, 2], ceil_mode=1),
        m.node("GlobalMaxPool", ["a"], "y"),
        ([("x", F, x4.shape)], [("y", F, (2, 3, 1, 1))]))[2], {"x": x4})  # fmt: skip
    add("reductions_keepdims", lambda m: (
        m.node("ReduceMean", ["x"], "a", axes=[1, 3], keepdims=0),
        m.node("ReduceMax", ["x"], "b", axes=[-1], keepdims=1),
        m.node("ReduceSum", ["x", _c(m, "ax", np.array([0, 2], np.int64))], "c", keepdims=1),
        ([("x", F, x4.shape)], [("a", F, (2, 6)), ("b", F, (2, 3, 6, 1)), ("c", F, (1, 3, 1, 7))]))[3],
        {"x": x4}, 13)  # fmt: skip
    add("reduce_sum_opset13_axes_input_and_min_opset18", lambda m: (
        m.node("ReduceMin", ["x", _c(m, "ax", np.array([1], np.int64))], "y", keepdims=0),
        ([("x", F, x4.shape)], [("y", F, (2, 6, 7))]))[1], {"x": x4}, 18)  # fmt: skip
    add("clip_only_min_only_max_and_relu6", lambda m: (
        m.node("Clip", ["x", _c(m, "lo", np.float32(-0.5))], "a"),
        m.node("Clip", ["a", "", _c(m, "hi", np.float32(0.7))], "b"),
        m.node("Clip", ["b", _c(m, "z", np.float32(0)), _c(m, "six", np.float32(6))], "y"),
        ([("x", F, x4.shape)], [("y", F, x4.shape)]))[3], {"x": x4})  # fmt: skip
    add("pad_opset18_axes_and_value", lambda m: (
        m.node("Pad", ["x", _c(m, "p", np.array([1, 2, 0, 3], np.int64)), _c(m, "v", np.float32(-2.5)),
                       _c(m, "ax", np.array([1, -1], np.int64))], "y"),
        ([("x", F, x4.shape)], [("y", F, (2, 4, 6, 12))]))[1], {"x": x4}, 18)  # fmt: skip
    add("softmax_opset11_axis0_and_opset13_axis1", lambda m: (
        m.node("Softmax", ["x"], "y", axis=0),
        ([("x", F, x4.shape)], [("y", F, x4.shape)]))[1], {"x": x4}, 11)  # fmt: skip
    add("softmax_opset13_middle_axis", lambda m: (
        m.node("Softmax", ["x"], "y", axis=1),
        ([("x", F, x4.shape)], [("y", F, x4.shape)]))[1], {"x": x4}, 13)  # fmt: skip
    add("leaky_relu_prelu_hardswish", lambda m: (
        m.node("LeakyRelu", ["x"], "a", alpha=1.5),
        m.node("PRelu", ["a", _c(m, "slope", rng.uniform(0, 1, (3, 1, 1)).astype(np.float32))], "b"),
        m.node("HardSwish", ["b"], "y"),
        ([("x", F, x4.shape)], [("y", F, x4.shape)]))[3], {"x": x4}, 14)  # fmt: skip
    add("concat_with_constant_and_flatten_axis0", lambda m: (
        m.node("Concat", ["x", _c(m, "k", rng.normal(0, 1, (2, 1, 6, 7)).astype(np.float32))], "a", axis=-3),
        m.node("Flatten", ["a"], "y", axis=0),
        ([("x", F, x4.shape)], [("y", F, (1, 2 * 4 * 42))]))[2], {"x": x4})  # fmt: skip
    add("int8_max_min_relu_cast", lambda m: (
        m.node("Max", ["x", _c(m, "lo", np.int8(-100))], "a"),
        m.node("Min", ["a", "x"], "b"),
        m.node("Relu", ["b"], "r"),
        m.node("Cast", ["r"], "y", to=TensorProto.INT32),
        ([("x", TensorProto.INT8, i8.shape)], [("y", TensorProto.INT32, i8.shape)]))[4], {"x": i8}, 14)  # fmt: skip
    add("int32_arithmetic_wraps_like_onnx", lambda m: (
        m.node("Mul", ["x", _c(m, "big", np.int32(2**30 + 7))], "a"),
        m.node("Sub", ["a", "x"], "b"),
        m.node("Neg", ["b"], "c"),
        m.node("Abs", ["c"], "y"),
        ([("x", TensorProto.INT32, (6,))], [("y", TensorProto.INT32, (6,))]))[4],
        {"x": np.array([0, 1, -3, 2**20, -(2**31), 2**31 - 1], np.int32)})  # fmt: skip
    add("quantize_per_axis_constants_int8", lambda m: (
        m.node("QuantizeLinear", ["x", _c(m, "s", rng.uniform(0.01, 0.03, 3).astype(np.float32)),
                                  _c(m, "zp", np.full(3, 5, np.int8))], "q", axis=1),
        m.node("DequantizeLinear", ["q", _c(m, "s2", np.float32(0.02)), _c(m, "zp2", np.int8(-3))], "y"),
        ([("x", F, x4.shape)], [("y", F, x4.shape), ("q", TensorProto.INT8, x4.shape)]))[2], {"x": x4})  # fmt: skip
    add("qlinear_matmul_constant_int8_weight", lambda m: (
        m.node("QuantizeLinear", ["x", _c(m, "sx", np.float32(0.02)), _c(m, "zx", np.int8(0))], "xq"),
        m.node("QLinearMatMul", ["xq", "sx", "zx", _c(m, "w", rng.integers(-127, 128, (5, 3), dtype=np.int8)),
                                 _c(m, "sw", np.float32(0.01)), _c(m, "zw", np.int8(0)),
                                 _c(m, "sy", np.float32(0.004)), _c(m, "zy", np.int8(0))], "yq"),
        m.node("DequantizeLinear", ["yq", "sy", "zy"], "y"),
        ([("x", F, x2.shape)], [("y", F, (4, 3))]))[3], {"x": x2})  # fmt: skip
    add("qlinear_conv_uint8", lambda m: (
        m.node("QuantizeLinear", ["x", _c(m, "sx", np.float32(0.02)), _c(m, "zx", np.uint8(128))], "xq"),
        m.node("QLinearConv", ["xq", "sx", "zx", _c(m, "w", rng.integers(0, 256, (4, 3, 3, 3), dtype=np.uint8)),
                               _c(m, "sw", rng.uniform(0.001, 0.002, 4).astype(np.float32)),
                               _c(m, "zw", np.full(4, 128, np.uint8)), _c(m, "sy", np.float32(0.05)),
                               _c(m, "zy", np.uint8(100)), _c(m, "b", rng.integers(-500, 500, 4).astype(np.int32))],
               "yq", pads=[1, 1, 1, 1]),
        m.node("DequantizeLinear", ["yq", "sy", "zy"], "y"),
        ([("x", F, x4.shape)], [("y", F, (2, 4, 6, 7))]))[3], {"x": x4})  # fmt: skip
    add("output_is_an_input_and_shared_outputs", lambda m: (
        m.node("Identity", ["x"], "same"),
        m.node("Relu", ["x"], "r"),
        m.node("Identity", ["r"], "r2"),
        ([("x", F, x2.shape)], [("same", F, x2.shape), ("r", F, x2.shape), ("r2", F, x2.shape)]))[3],
        {"x": x2})  # fmt: skip
    return cases


VARIANTS = _variant_models()


@pytest.mark.parametrize("name, model, feeds", VARIANTS, ids=[c[0] for c in VARIANTS])
def test_operator_variants_match_onnxruntime(name, model, feeds):
    graph = import_onnx(model)
    got = run_float_cpu(graph, feeds)
    want = run_ort(model, feeds)
    assert graph.outputs == list(want)
    for k, w in want.items():
        if w.dtype.kind == "f":
            if "qlinear" in name:  # float emulation of the integer pipeline: within one output step
                step = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "sy")
                np.testing.assert_allclose(got[k], w, rtol=0, atol=float(step) * 1.0001)
            else:
                _close(got[k], w)
        else:
            np.testing.assert_array_equal(got[k].astype(np.int64), w.astype(np.int64))
