"""Models as real exporters write them (paddle2onnx, tf2onnx, torch.onnx, ultralytics), hand-built with each
exporter's habits: dynamic (-1, 0, symbolic, missing) dimensions fixed by input_shapes, stale value_info,
shape subgraphs folded once the shapes are fixed, If on a constant condition, opsets 7 to 10 in their old
attribute forms, float16 and float64 models. Each is imported, compiled (vdla.compile) and run against
onnxruntime (vdla.frontend.reference), and one through the command line."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_onnx_frontend import F, Model, _close  # noqa: E402

import vdla  # noqa: E402
from vdla.frontend import FrontendError, import_onnx  # noqa: E402
from vdla.frontend.errors import OnnxImportWarning  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph.ops import infer_types  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402

I64 = TensorProto.INT64


def _const(m: Model, name: str, value) -> str:
    return m.init(name, np.asarray(value, np.int64) if isinstance(value, list) else np.asarray(value))


def _compiled_matches_reference(model, feeds, input_shapes=None, rtol=1e-4, ref_feeds=None, ref_model=None):
    """vdla.compile (float, on the CPU) run on ``feeds`` against onnxruntime on the model as written (or on
    ``ref_model`` with ``ref_feeds``)."""
    module = vdla.compile(model, input_shapes=input_shapes or {})
    got = module.run(feeds)
    got = got if isinstance(got, dict) else {model.graph.output[0].name: got}
    want = reference_run(ref_model or model, ref_feeds or feeds)
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        _close(got[name], w.astype(np.float32) if w.dtype.kind == "f" else w, rtol)
    return module


def _no_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnnxImportWarning)
        return fn(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# Dynamic dimensions and value_info hints


def paddle_classifier(batch_dim=-1, stale: bool = True, opset: int = 11):
    """paddle2onnx's habits: a -1 batch dimension on the input, value_info and output shapes written with
    -1 and with the batch size of the export (1), both stale for any other batch."""
    m = Model(3)
    x = m.conv_bn_relu("x", 3, 8, 3, 2, "stem")
    x = m.node("GlobalAveragePool", [x], "pool")
    x = m.node("Reshape", [x, _const(m, "flat_shape", [-1, 8])], "flat")
    m.node("MatMul", [x, m.weight("fc_w", (8, 2))], "logits")
    model = m.build([("x", F, [batch_dim, 3, 32, 32])], [("logits", F, [batch_dim, 2])], opset=opset)
    if stale:
        model.graph.value_info.extend(
            [
                helper.make_tensor_value_info("flat", F, [-1, 2]),  # wrong even for a dynamic batch
                helper.make_tensor_value_info("pool", F, [1, 8, 1, 1]),  # the export's batch of 1
            ]
        )
    return model


def test_minus_one_batch_is_fixed_by_input_shapes_and_stale_value_info_is_a_warning():
    model = paddle_classifier()
    with pytest.raises(FrontendError) as e:
        import_onnx(model)
    msg = str(e.value)
    assert "input 'x' dimension 0 (-1) is dynamic" in msg and "--input-shape x=1x3x32x32" in msg
    with pytest.warns(OnnxImportWarning, match=r"'flat' stored \(\?, 2\), computed \(4, 8\)") as caught:
        graph = import_onnx(model, input_shapes={"x": (4, 3, 32, 32)})
    assert "'pool' stored (1, 8, 1, 1), computed (4, 8, 1, 1)" in str(caught[0].message)
    assert graph.inputs["x"].shape == (4, 3, 32, 32)
    x = np.random.default_rng(0).normal(size=(4, 3, 32, 32)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OnnxImportWarning)
        _compiled_matches_reference(model, {"x": x}, {"x": (4, 3, 32, 32)})
    with pytest.raises(FrontendError, match="'x' dimension 1 is 3 in the model, input_shapes gives 4"):
        import_onnx(model, input_shapes={"x": (4, 4, 32, 32)})
    # a fixed dimension given again with its own value is fine; a batch of 1 makes 'pool' hold: 'flat' still warns
    with pytest.warns(OnnxImportWarning) as caught:
        import_onnx(model, input_shapes={"x": (1, 3, 32, 32)})
    assert "'flat'" in str(caught[0].message) and "'pool'" not in str(caught[0].message)
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1  # an output stored for the export's batch
    with pytest.warns(OnnxImportWarning, match=r"'logits' stored \(1, 2\), computed \(4, 2\)"):
        assert import_onnx(model, input_shapes={"x": (4, 3, 32, 32)}).outputs == ["logits"]


def test_symbolic_zero_and_missing_dimensions_are_dynamic():
    m = Model()
    m.node("Relu", ["x"], "y")
    model = m.build([("x", F, ["batch", 0, 5, 6])], [("y", F, ["batch", 0, 5, 6])])
    model.graph.input[0].type.tensor_type.shape.dim[2].Clear()  # neither a size nor a symbol
    with pytest.raises(FrontendError) as e:
        import_onnx(model)
    assert "input 'x' dimensions 0 ('batch'), 1 (0), 2 (unknown) are dynamic" in str(e.value)
    assert "--input-shape x=1x1x1x6" in str(e.value)
    graph = _no_warnings(import_onnx, model, {"x": (2, 3, 5, 6)})  # dynamic output hints: nothing to warn about
    assert graph.inputs["x"].shape == (2, 3, 5, 6)
    x = np.random.default_rng(1).normal(size=(2, 3, 5, 6)).astype(np.float32)
    symbolic = onnx.ModelProto()
    symbolic.CopyFrom(model)
    symbolic.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"  # onnxruntime takes 0 as a size
    _compiled_matches_reference(model, {"x": x}, {"x": (2, 3, 5, 6)}, ref_model=symbolic)
    with pytest.raises(FrontendError, match="'x' dimension 3 is 6 in the model, input_shapes gives 7"):
        import_onnx(model, {"x": (2, 3, 5, 7)})


# ---------------------------------------------------------------------------------------------------------
# Shape subgraphs


def torch_dynamic_shapes():
    """torch.onnx and ultralytics shape arithmetic on a symbolic batch: view(x.size(0), -1) (Shape -> Gather
    -> Unsqueeze -> Concat -> Reshape, with torch's Where(Equal(shape, 0)) guard), ultralytics' Shape ->
    Slice -> Concat -> Reshape, paddle's Shape -> Slice -> Cast -> Concat, and Range, ConstantOfShape,
    Expand, Squeeze, Mul/Add/Sub/Div on shapes: all folded once the input shape is fixed."""
    m = Model(5)
    s = m.node("Shape", ["x"], "s")
    n = m.node("Gather", [s, _const(m, "zero", np.array(0, np.int64))], "n", axis=0)
    n1 = m.node("Unsqueeze", [n, _const(m, "ax0", [0])], "n1")
    c = m.node("Gather", [s, _const(m, "one_idx", [1])], "c", axis=0)  # (1,)
    # ultralytics: x.view(n, c, -1) from Shape -> Slice -> Concat
    nc = m.node("Slice", [s, _const(m, "st0", [0]), _const(m, "en2", [2])], "nc")
    flat3 = m.node("Concat", [nc, _const(m, "minus1", [-1])], "flat3_shape", axis=0)
    y = m.node("Reshape", ["x", flat3], "flat3")
    y = m.node("ReduceMean", [y], "mean", axes=[2], keepdims=0)  # (N, C)
    # Range(1, C + 1) as float weights, expanded to (N, C) over ConstantOfShape's ones
    c0 = m.node("Squeeze", [c, _const(m, "ax0b", [0])], "c_scalar")
    top = m.node("Add", [c0, _const(m, "one", np.array(1, np.int64))], "c_plus_1")
    r = m.node("Range", [_const(m, "one_b", np.array(1, np.int64)), top, _const(m, "step", np.array(1, np.int64))], "r")
    rf = m.node("Cast", [r], "rf", to=TensorProto.FLOAT)
    nc_shape = m.node("Concat", [n1, c], "nc_shape", axis=0)
    ones = m.node("ConstantOfShape", [nc_shape], "ones", value=numpy_helper.from_array(np.ones(1, np.float32)))
    w = m.node("Mul", [m.node("Expand", [rf, nc_shape], "w_expanded"), ones], "w")
    y = m.node("Mul", [y, w], "weighted")
    # torch: view(x.size(0), -1) with the Where(Equal(target, 0), shape, target) guard of dynamic reshapes
    target = m.node("Concat", [n1, _const(m, "minus1b", [-1])], "target", axis=0)
    zero_mask = m.node("Equal", [target, _const(m, "zeros2", [0, 0])], "zero_mask")
    guarded = m.node("Where", [zero_mask, m.node("Shape", [y], "y_shape"), target], "guarded")
    y = m.node("Reshape", [y, guarded], "viewed")
    # paddle: Shape -> Slice -> Cast -> Concat; (C * 2 - C) / 1 as the last dimension
    ps = m.node("Cast", [m.node("Slice", [s, _const(m, "st0b", [0]), _const(m, "en1", [1])], "ps")], "psf", to=F)
    last = m.node("Sub", [m.node("Mul", [c, _const(m, "two", [2])], "c2"), c], "c_again")
    lastf = m.node("Div", [m.node("Cast", [last], "lastf", to=F), m.init("onef", np.ones(1, np.float32))], "lastd")
    final = m.node("Cast", [m.node("Concat", [ps, lastf], "psc", axis=0)], "final_shape", to=I64)
    m.node("Reshape", [y, final], "y")
    return m.build([("x", F, ["N", 3, 4, 5])], [("y", F, ["N", 3])], opset=13)


def test_torch_ultralytics_and_paddle_shape_subgraphs_fold_once_the_shapes_are_fixed():
    model = torch_dynamic_shapes()
    graph = _no_warnings(import_onnx, model, {"x": (2, 3, 4, 5)})
    assert all(n.op not in ("cast", "concat", "slice") for n in graph.nodes), [n.op for n in graph.nodes]
    assert all(a.dtype == np.float32 for a in graph.params.values())
    x = np.random.default_rng(2).normal(size=(2, 3, 4, 5)).astype(np.float32)
    _compiled_matches_reference(model, {"x": x}, {"x": (2, 3, 4, 5)})


def if_on_batch():
    """torch's habit of checking a shape at run time: If(Shape(x)[0] == 1) squeezes the batch in one branch
    (reading an outer value and a branch initializer), flattens in the other."""
    then_init = numpy_helper.from_array(np.array([0], np.int64), "then_axes")
    then = helper.make_graph(
        [helper.make_node("Squeeze", ["x_relu", "then_axes"], ["then_out"])],
        "then", [], [helper.make_tensor_value_info("then_out", F, None)], [then_init],
    )  # fmt: skip
    other = helper.make_graph(
        [helper.make_node("Flatten", ["x_relu"], ["else_out"], axis=1)],
        "else", [], [helper.make_tensor_value_info("else_out", F, None)],
    )  # fmt: skip
    m = Model()
    m.node("Relu", ["x"], "x_relu")
    s = m.node("Shape", ["x"], "s")
    n = m.node("Gather", [s, _const(m, "zero", np.array(0, np.int64))], "n", axis=0)
    cond = m.node("Equal", [n, _const(m, "one", np.array(1, np.int64))], "is_one")
    m.node("If", [cond], "branch", then_branch=then, else_branch=other)
    m.node("Mul", ["branch", m.init("half", np.array(0.5, np.float32))], "y")
    return m.build([("x", F, ["N", 4, 3])], [("y", F, ["d0", "d1"])], opset=13)


@pytest.mark.parametrize("batch", [1, 2])
def test_if_on_a_constant_condition_inlines_the_taken_branch(batch):
    model = if_on_batch()
    graph = _no_warnings(import_onnx, model, {"x": (batch, 4, 3)})
    assert infer_types(graph)[graph.outputs[0]].shape == ((4, 3) if batch == 1 else (batch, 12))
    x = np.random.default_rng(batch).normal(size=(batch, 4, 3)).astype(np.float32)
    _compiled_matches_reference(model, {"x": x}, {"x": (batch, 4, 3)})


def test_if_on_a_computed_condition_with_branches_of_different_shapes_is_refused_naming_the_node():
    """Both branches of a run-time If are compiled: they must agree (here (4, 3) against (1, 12))."""
    model = if_on_batch()
    node = next(n for n in model.graph.node if n.op_type == "If")
    del node.input[:]
    node.input.append("flag")
    model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    with pytest.raises(UnsupportedError, match=r"node 'branch'.*then branch gives float32\[4, 3\], the else branch"):
        import_onnx(model, {"x": (1, 4, 3)})


# ---------------------------------------------------------------------------------------------------------
# Opsets 7 to 10: the old forms


def _bn(m: Model, x: str, spatial: bool) -> str:
    c = 4
    stats = [
        m.init("g", m.rng.uniform(0.5, 1.5, c).astype(np.float32)),
        m.init("b", m.rng.normal(0, 0.1, c).astype(np.float32)),
        m.init("mu", m.rng.normal(0, 0.1, c).astype(np.float32)),
        m.init("var", m.rng.uniform(0.5, 1.5, c).astype(np.float32)),
    ]
    return m.node("BatchNormalization", [x, *stats], "bn", epsilon=1e-3, **({"spatial": 1} if spatial else {}))


def paddle_upsample_slice_pad(m: Model, opset: int) -> None:
    """paddle2onnx's opset 9 (and 7/8): Upsample (scales an input from 9), Slice and Pad with attributes,
    BatchNormalization (with spatial before 9)."""
    if opset >= 9:
        m.node("Upsample", ["x", m.init("sc", np.array([1, 1, 2, 2], np.float32))], "up", mode="nearest")
    else:
        m.node("Upsample", ["x"], "up", mode="nearest", scales=[1.0, 1.0, 2.0, 2.0])
    m.node("Slice", ["up"], "sl", starts=[1, 2], ends=[11, 100], axes=[2, 3])
    m.node("Pad", ["sl"], "pad", pads=[0, 0, 1, 0, 0, 0, 0, 2], value=0.25)
    m.node("Relu", [_bn(m, "pad", opset < 9)], "y")


def upsample_fractional(m: Model, opset: int) -> None:
    m.node("Upsample", ["x"], "y", scales=[1.0, 1.0, 1.5, 2.5])  # nearest by default


def upsample_linear(m: Model, opset: int) -> None:
    m.node("Upsample", ["x", m.init("sc", np.array([1, 1, 2, 3], np.float32))], "y", mode="linear")


def resize10(mode: str, scales: list[float]):
    def build(m: Model, opset: int) -> None:
        m.node("Resize", ["x", m.init("sc", np.array(scales, np.float32))], "y", mode=mode)

    return build


def attribute_forms(m: Model, opset: int) -> None:
    """Clip (before 11), Dropout (before 12), Split, ReduceSum/ReduceMean, Unsqueeze/Squeeze (before 13) with
    their attributes, Softmax over the coerced 2-D input (before opset 13: the last 36 values of each row)."""
    if opset < 11:
        m.node("Clip", ["x"], "clip", min=-0.5, max=0.75)
    else:
        m.node(
            "Clip", ["x", m.init("lo", np.array(-0.5, np.float32)), m.init("hi", np.array(0.75, np.float32))], "clip"
        )
    m.node("Split", ["clip"], ["s0", "s1"], axis=1, split=[1, 3])
    m.node("ReduceSum", ["s1"], "rs", axes=[1], keepdims=1)
    m.node("ReduceMean", ["s0"], "rm", axes=[2], keepdims=0)
    m.node("Unsqueeze", ["rm"], "rm4", axes=[2])
    m.node("Add", ["rs", "rm4"], "sum")
    m.node("Squeeze", ["sum"], "sq", axes=[1])
    m.node("Dropout", ["sq"], "drop", **({"ratio": 0.3} if opset < 12 else {}))
    m.node("Softmax", ["drop"], "y", axis=1)


def pools(m: Model, opset: int) -> None:
    m.node("MaxPool", ["x"], "mp", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    m.node("AveragePool", ["mp"], "y", kernel_shape=[2, 2], pads=[1, 1, 0, 0], count_include_pad=1)


OLD_FORMS = [  # (builder, opsets, input shape)
    (paddle_upsample_slice_pad, (7, 8, 9), (1, 4, 6, 6)),
    (upsample_fractional, (7,), (1, 4, 6, 6)),
    (upsample_linear, (9,), (1, 4, 6, 6)),
    (resize10("nearest", [1, 1, 1.5, 2]), (10,), (1, 4, 6, 6)),
    (resize10("nearest", [1, 1, 0.6, 0.5]), (10,), (1, 4, 6, 6)),
    (resize10("linear", [1, 1, 2, 0.5]), (10,), (1, 4, 6, 6)),
    (attribute_forms, (7, 9, 10, 12), (1, 4, 6, 6)),
    (pools, (7, 8), (1, 4, 6, 6)),
]


@pytest.mark.parametrize(
    ("build", "opset", "shape"),
    [
        pytest.param(build, opset, shape, id=f"{build.__qualname__.split('.')[0]}{k}-opset{opset}")
        for k, (build, opsets, shape) in enumerate(OLD_FORMS)
        for opset in opsets
    ],
)
def test_old_opset_forms_match_onnxruntime(build, opset, shape):
    m = Model(opset)
    build(m, opset)
    dims = [f"d{i}" for i in range(len(shape) - (build is attribute_forms))]  # exporters' symbolic outputs
    model = m.build([("x", F, list(shape))], [("y", F, dims)], opset=opset)
    x = np.random.default_rng(7).normal(size=shape).astype(np.float32)
    _compiled_matches_reference(model, {"x": x})


def test_old_resize_that_both_upsamples_and_downsamples_is_refused():
    m = Model()
    m.node("Resize", ["x", m.init("sc", np.array([1, 1, 2, 0.5], np.float32))], "y", mode="nearest")
    model = m.build([("x", F, [1, 1, 4, 4])], [("y", F, [1, 1, 8, 2])], opset=10)
    with pytest.raises(UnsupportedError, match=r"upsample one axis and downsample another"):
        import_onnx(model)


def test_a_model_the_checker_rejects_is_refused_naming_the_file(tmp_path: Path):
    m = Model()
    m.node("Relu", ["x"], "y")
    model = m.build([("x", F, [2])], [("y", F, [2])], opset=9)
    model.graph.node[0].output[0] = "x"  # not single assignment: the checker says no
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(FrontendError, match=rf"{path}: the ONNX checker rejects the model"):
        import_onnx(path)


# ---------------------------------------------------------------------------------------------------------
# float16 and float64 models


def wide_float_model(dtype: int):
    """A two-layer classifier entirely in ``dtype`` (weights, input, output, a Constant), with a Cast to
    ``dtype`` of a float32 value inside (as mixed-precision exports have)."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    m = Model(11)
    y = m.node("MatMul", ["x", m.init("w", m.rng.normal(0, 0.3, (12, 8)).astype(np_dtype))], "mm")
    y = m.node("Relu", [m.node("Add", [y, m.init("b1", m.rng.normal(0, 0.1, 8).astype(np_dtype))], "mm_b")], "relu")
    y32 = m.node("Cast", [y], "as_float", to=F)
    y = m.node("Cast", [m.node("Sigmoid", [y32], "sig")], "back", to=dtype)
    bias = helper.make_tensor("bias_value", dtype, [3], np.array([0.1, -0.2, 0.3], np_dtype).tolist())
    m.node("Constant", [], "bias", value=bias)
    m.node("Gemm", [y, m.init("fc", m.rng.normal(0, 0.5, (3, 8)).astype(np_dtype)), "bias"], "y", transB=1)
    return m.build([("x", dtype, [2, 12])], [("y", dtype, [2, 3])], opset=13)


@pytest.mark.parametrize(("dtype", "name", "rtol"), [(TensorProto.FLOAT16, "float16", 2e-2),
                                                     (TensorProto.DOUBLE, "float64", 1e-5)])  # fmt: skip
def test_float16_and_float64_models_are_computed_in_float32_with_a_warning(dtype, name, rtol):
    model = wide_float_model(dtype)
    with pytest.warns(OnnxImportWarning, match=rf"{name} computed in float32") as caught:
        graph = import_onnx(model)
    msg = str(caught[0].message)
    for what in ("3 initializers ('w', 'b1', 'fc')", "input 'x'", "output 'y'", "Cast 'back'", "Constant 'bias'"):
        assert what in msg, what
    assert graph.inputs["x"].dtype == "float32" and infer_types(graph)["y"].dtype == "float32"
    x = np.random.default_rng(3).normal(size=(2, 12)).astype(helper.tensor_dtype_to_np_dtype(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OnnxImportWarning)
        module = _compiled_matches_reference(model, {"x": x.astype(np.float32)}, rtol=rtol, ref_feeds={"x": x})
    assert module.run(x).dtype == np.float32  # the model's own dtype is converted at run time too (with a note)


def test_a_bfloat16_model_is_computed_in_float32_within_bfloat16s_precision():
    """bfloat16 (initializers, input, output, a Cast target) is computed in float32 as float16 is, with the
    warning; the result agrees with ONNX's reference within bfloat16's precision, and the compiled module
    takes a bfloat16 input (converted, with a note)."""
    from onnx.reference import ReferenceEvaluator

    bf16 = helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16)
    m = Model(11)
    y = m.node("MatMul", ["x", m.init("w", m.rng.normal(0, 0.3, (12, 8)).astype(bf16))], "mm")
    y32 = m.node("Cast", [m.node("Celu", [y], "celu", alpha=1.5)], "as_float", to=F)
    m.node("Cast", [m.node("Sigmoid", [y32], "sig")], "y", to=TensorProto.BFLOAT16)
    model = m.build([("x", TensorProto.BFLOAT16, [2, 12])], [("y", TensorProto.BFLOAT16, [2, 8])], opset=13)
    with pytest.warns(OnnxImportWarning, match=r"bfloat16 computed in float32.*initializer 'w'"):
        graph = import_onnx(model)
    assert graph.inputs["x"].dtype == "float32"
    x = np.random.default_rng(3).normal(size=(2, 12)).astype(bf16)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0].astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OnnxImportWarning)
        got = vdla.compile(model).run(x)
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-7)


# ---------------------------------------------------------------------------------------------------------
# The command line


def test_cli_compiles_and_runs_an_exported_model_with_dynamic_dimensions(tmp_path: Path, capsys):
    from vdla.cli import main

    model = paddle_classifier()
    onnx.save(model, tmp_path / "m.onnx")
    x = np.random.default_rng(4).normal(size=(1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.vdla")]) == 2
    assert "--input-shape x=1x3x32x32" in " ".join(capsys.readouterr().out.split())
    args = ["compile", str(tmp_path / "m.onnx"), "--input-shape", "x=1x3x32x32", "-o", str(tmp_path / "m.vdla")]
    with pytest.warns(OnnxImportWarning, match="'flat' stored"):
        assert main(args) == 0
    args = ["run", str(tmp_path / "m.vdla"), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz")]
    assert main(args) == 0
    with np.load(tmp_path / "y.npz") as y:
        _close(y["logits"], reference_run(model, {"x": x})["logits"])


OLD_NODES = [  # (op type, opset of the old form, attributes, input shape)
    ("TopK", 9, {"k": 3, "axis": 1}, (3, 7)),
    ("Slice", 9, {"starts": [1, -3], "ends": [3, 100], "axes": [0, 1]}, (3, 7)),
    ("Pad", 10, {"pads": [0, 1, 2, 0], "value": 1.5}, (3, 7)),
    ("Clip", 10, {"min": -0.3, "max": 0.4}, (3, 7)),
    ("Dropout", 11, {"ratio": 0.25}, (3, 7)),
    ("Split", 12, {"axis": 1, "split": [2, 5]}, (3, 7)),
    ("Squeeze", 12, {"axes": [0]}, (1, 7)),
    ("Unsqueeze", 12, {"axes": [0, 3]}, (3, 7)),
    ("ReduceSum", 12, {"axes": [1], "keepdims": 0}, (3, 7)),
    ("ReduceMax", 17, {"axes": [0]}, (3, 7)),
]


def _reference(node, opset: int, shape, x: np.ndarray, consts: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``node`` run by onnx.reference at ``opset`` on input ``x`` and constant inputs ``consts``."""
    from onnx.reference import ReferenceEvaluator

    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    vi = [helper.make_tensor_value_info("x", F, list(shape))]
    vo = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
    graph = helper.make_graph([node], node.op_type, vi, vo, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {"x": x})


@pytest.mark.parametrize(("op", "opset", "attrs", "shape"), OLD_NODES, ids=[c[0] for c in OLD_NODES])
def test_modernized_nodes_compute_what_the_old_forms_do(op, opset, attrs, shape):
    """Each old form against its modernized node, both run by onnx.reference at their own opset (TopK has
    no converter yet: its new form is what the family adding one will see)."""
    from vdla.frontend.builder import Builder, OnnxNode
    from vdla.frontend.onnx_ops.legacy import ATTR_INPUTS, modernize

    outputs = ["y", "z"] if op in ("TopK", "Split") else ["y"]
    b = Builder(opset)
    new = modernize(b, OnnxNode(op, op, ("x",), tuple(outputs), attrs, opset))
    since, moved = ATTR_INPUTS[op]
    assert not set(new.attrs) & {a for a, _ in moved}
    names = [i.strip("\0") for i in new.inputs]  # the private names of the constants, made plain
    consts = {n: b.values[i].const for n, i in zip(names[1:], new.inputs[1:], strict=True) if i}
    x = np.random.default_rng(5).normal(size=shape).astype(np.float32)
    old = _reference(helper.make_node(op, ["x"], outputs, **attrs), opset, shape, x, {})
    modern = _reference(helper.make_node(op, names, outputs, **new.attrs), since, shape, x, consts)
    for want, got in zip(old, modern, strict=True):
        np.testing.assert_array_equal(got, want)
