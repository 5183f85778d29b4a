"""ONNX elementwise math, comparisons, logic and casts (vdla/frontend/onnx_ops/math.py) imported and run by the
CPU JIT and by the numpy interpreter, against onnxruntime; the held dtypes (uint8 as int8 value - 128, int64
as int32, bool) end to end; and what is refused at import, named."""

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
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402

RNG = np.random.default_rng(3)
ONNX_TYPES = {"float32": TensorProto.FLOAT, "int8": TensorProto.INT8, "int32": TensorProto.INT32,
              "uint8": TensorProto.UINT8, "int64": TensorProto.INT64, "bool": TensorProto.BOOL,
              "uint16": TensorProto.UINT16}  # fmt: skip


def _model(op_type: str, inputs: dict[str, np.ndarray], out_dtype: str, opset: int = 20, consts=None, **attrs):
    """A one-node model: graph inputs ``inputs`` (name -> an example array), initializers ``consts``."""
    consts = consts or {}
    names = [*inputs, *consts]
    node = helper.make_node(op_type, names, ["y"], name=op_type.lower(), **attrs)
    vis = [helper.make_tensor_value_info(k, ONNX_TYPES[a.dtype.name], list(a.shape)) for k, a in inputs.items()]
    shape = np.broadcast_shapes(*(np.shape(a) for a in [*inputs.values(), *consts.values()]))
    y = helper.make_tensor_value_info("y", ONNX_TYPES[out_dtype], list(shape))
    inits = [numpy_helper.from_array(np.asarray(a), k) for k, a in consts.items()]
    graph = helper.make_graph([node], op_type, vis, [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _fed(a: np.ndarray) -> np.ndarray:
    """An input as vdla takes it: uint8 and int64 as int32 holding the values."""
    return a.astype(np.int32) if a.dtype in (np.uint8, np.int64) else a


def _check(model, inputs: dict[str, np.ndarray], exact: bool, **tol) -> list[str]:
    """Run ``model`` by onnxruntime, the JIT and the interpreter; the outputs agree (exactly for integer and
    bool results); returns the vdla operators of the imported graph."""
    want = reference_run(model, inputs)["y"]
    graph = import_onnx(model)
    feeds = {k: _fed(a) for k, a in inputs.items()}
    for got in (compile_graph(graph)(**feeds)["y"], evaluate(graph, feeds)["y"]):
        assert got.shape == want.shape
        if exact or want.dtype.kind in "iub":
            assert got.dtype == (np.int32 if want.dtype in (np.uint8, np.int64) else want.dtype)
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, equal_nan=True, **(tol or {"rtol": 2e-6, "atol": 1e-30}))
    return [n.op for n in graph.nodes]


def _floats(shape, scale=3.0) -> np.ndarray:
    x = (RNG.standard_normal(shape) * scale).astype(np.float32)
    x.flat[:6] = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5]
    return x


UNARY = [
    ("Log", {}, lambda x: np.abs(x) + 0.1),
    ("Reciprocal", {}, None),
    ("Floor", {}, None),
    ("Ceil", {}, None),
    ("Round", {}, None),
    ("Sin", {}, lambda x: x * 30),
    ("Cos", {}, lambda x: x * 30),
    ("Tan", {}, None),
    ("Asin", {}, lambda x: np.tanh(x)),
    ("Acos", {}, lambda x: np.tanh(x)),
    ("Atan", {}, None),
    ("Sinh", {}, None),
    ("Cosh", {}, None),
    ("Asinh", {}, None),
    ("Acosh", {}, lambda x: np.abs(x) + 1),
    ("Atanh", {}, lambda x: np.tanh(x)),
    ("Neg", {}, None),
    ("Abs", {}, None),
    ("Sign", {}, None),
    ("Softsign", {}, None),
    ("Mish", {}, None),
    ("Elu", {"alpha": 0.7}, None),
    ("Selu", {}, None),
    ("Celu", {"alpha": 1.5}, None),
    ("ThresholdedRelu", {"alpha": 0.4}, None),
    ("Shrink", {"lambd": 0.7, "bias": 0.2}, None),
    ("Gelu", {}, None),
    ("Gelu", {"approximate": "tanh"}, None),
    ("LeakyRelu", {"alpha": 0.2}, None),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, None),
    ("HardSwish", {}, None),
]


@pytest.mark.parametrize(("op_type", "attrs", "domain"), UNARY)
def test_float_operators_agree_with_onnxruntime(op_type, attrs, domain):
    x = _floats((2, 3, 41))
    x = (domain(x) if domain else x).astype(np.float32)
    ops = _check(_model(op_type, {"x": x}, "float32", **attrs), {"x": x}, False, rtol=4e-6, atol=1e-6)
    assert len(ops) == 1 or op_type in ("HardSigmoid", "HardSwish"), ops  # those two: mul, add, clip (mul)


@pytest.mark.parametrize(
    ("exponent", "vdla_attr"), [(2.0, True), (3.0, True), (0.5, True), (-1.0, True), (1.7, True), (None, False)]
)
def test_pow_by_constants_and_tensors_agrees_with_onnxruntime(exponent, vdla_attr):
    """A scalar constant exponent is the node's attribute (0..4, 0.5 and -1 lowered to multiplications, a
    square root, a division); a tensor one broadcasts."""
    x = np.abs(_floats((3, 17))) + 0.01
    if exponent is None:
        k = (RNG.standard_normal((17,)) * 2).astype(np.float32)
        model, feeds = _model("Pow", {"x": x, "k": k}, "float32"), {"x": x, "k": k}
    else:
        model, feeds = _model("Pow", {"x": x}, "float32", consts={"k": np.float32(exponent)}), {"x": x}
    assert _check(model, feeds, False, rtol=2e-6, atol=0) == ["pow"]
    graph = import_onnx(model)
    assert ("y" in graph.nodes[-1].attrs) == vdla_attr


def test_pow_with_an_integer_exponent_tensor_and_an_int32_base():
    x = _floats((4, 5))
    n = RNG.integers(-6, 7, (4, 5)).astype(np.int32)
    _check(_model("Pow", {"x": x, "n": n}, "float32"), {"x": x, "n": n}, False, rtol=2e-6, atol=0)
    i = RNG.integers(-9, 10, (4, 5)).astype(np.int32)
    _check(_model("Pow", {"i": i}, "int32", consts={"e": np.int32(3)}), {"i": i}, True)


@pytest.mark.parametrize(  # onnxruntime takes a float Mod with fmod=1 only (fmod=0 floats: test_ew_functions.py)
    ("dtype", "fmod"), [("float32", 1), *((d, f) for d in ("int8", "int32", "uint8", "int64") for f in (0, 1))]
)
def test_mod_agrees_with_onnxruntime(dtype, fmod):
    hi = 100 if dtype != "uint8" else 250
    lo = 0 if dtype == "uint8" else -hi
    a = RNG.integers(lo, hi, (3, 20)).astype(dtype)
    b = RNG.integers(lo, hi, (20,)).astype(dtype)
    b[b == 0] = 7
    if dtype == "float32":
        a, b = a + np.float32(0.25), b + np.float32(0.5)
    _check(_model("Mod", {"a": a, "b": b}, dtype, fmod=fmod), {"a": a, "b": b}, True)


COMPARISONS = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@pytest.mark.parametrize("dtype", ["float32", "int8", "int32", "uint8", "int64"])
@pytest.mark.parametrize("op_type", COMPARISONS)
def test_comparisons_give_bools_for_every_held_dtype(op_type, dtype):
    a = RNG.integers(0 if dtype == "uint8" else -5, 6, (4, 1, 6)).astype(dtype)
    b = RNG.integers(0 if dtype == "uint8" else -5, 6, (3, 1)).astype(dtype)
    if dtype == "float32":
        a.flat[0], b.flat[0] = np.nan, np.nan
    ops = _check(_model(op_type, {"a": a, "b": b}, "bool"), {"a": a, "b": b}, True)
    assert ops[-1] == {"Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater"}.get(
        op_type, "greater_equal"
    )
    assert len(ops) == 1 + 4 * (dtype == "uint8"), ops  # a uint8 input is fed as int32: add -128, cast to int8


def test_a_scalar_constant_first_operand_becomes_the_attribute_of_the_mirrored_comparison():
    x = _floats((5, 6))
    model = _model("Less", {"x": x}, "bool", consts={"c": np.float32(0.5)})
    node = model.graph.node[0]
    node.input[:] = ["c", "x"]  # 0.5 < x
    graph = import_onnx(model)
    assert [(n.op, n.attrs) for n in graph.nodes] == [("greater", {"b": 0.5})]
    np.testing.assert_array_equal(compile_graph(graph)(x=x)["y"], 0.5 < x)


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logic_of_bools(op_type):
    a = RNG.integers(0, 2, (3, 4, 5)).astype(bool)
    b = RNG.integers(0, 2, (4, 1)).astype(bool)
    _check(_model(op_type, {"a": a, "b": b}, "bool"), {"a": a, "b": b}, True)
    _check(_model("Not", {"a": a}, "bool"), {"a": a}, True)
    _check(_model("Equal", {"a": a, "b": b}, "bool"), {"a": a, "b": b}, True)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "int64"])
@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_bitwise_operators_on_every_held_integer(op_type, dtype):
    info = np.iinfo(np.int32 if dtype == "int64" else dtype)
    a = RNG.integers(info.min, info.max, (3, 8), endpoint=True).astype(dtype)
    b = RNG.integers(info.min, info.max, (8,), endpoint=True).astype(dtype)
    inputs = {"a": a} if op_type == "BitwiseNot" else {"a": a, "b": b}
    _check(_model(op_type, inputs, dtype, opset=18), inputs, True)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_of_uint8_is_logical_and_keeps_eight_bits(direction):
    x = RNG.integers(0, 256, (4, 16)).astype(np.uint8)
    s = np.tile(np.arange(16, dtype=np.uint8) % 9, (4, 1))
    _check(_model("BitShift", {"x": x, "s": s}, "uint8", opset=11, direction=direction), {"x": x, "s": s}, True)


@pytest.mark.parametrize("dtype", ["float32", "int8", "int32", "uint8", "int64", "bool"])
def test_where_selects_any_held_dtype_with_broadcasting(dtype):
    cond = RNG.integers(0, 2, (3, 1, 4)).astype(bool)
    a = RNG.integers(0, 100, (5, 4)).astype(dtype)
    b = RNG.integers(0, 100, (3, 5, 1)).astype(dtype)
    model, feeds = _model("Where", {"c": cond, "a": a, "b": b}, dtype), {"c": cond, "a": a, "b": b}
    if dtype not in ("uint8", "bool"):  # onnxruntime has no uint8 or bool Where
        _check(model, feeds, True)
    graph = import_onnx(model)
    got = compile_graph(graph)(**{k: _fed(v) for k, v in feeds.items()})["y"]
    np.testing.assert_array_equal(got, np.where(cond, a, b))


@pytest.mark.parametrize("op_type", ["Max", "Min", "Sum", "Mean"])
def test_variadic_operators_broadcast_over_three_inputs(op_type):
    inputs = {"a": _floats((2, 1, 5)), "b": _floats((3, 1)), "c": _floats((5,))}
    _check(_model(op_type, inputs, "float32"), inputs, False, rtol=1e-6, atol=1e-6)
    if op_type in ("Max", "Min"):
        for dtype in ("int8", "uint8", "int64"):
            ints = {k: RNG.integers(0, 120, a.shape).astype(dtype) for k, a in inputs.items()}
            _check(_model(op_type, ints, dtype, opset=13), ints, True)


CAST_VALUES = {  # values every held dtype converts among with defined ONNX results
    "float32": np.array([[0.0, -0.0, 1.7, -1.7, 100.9, -100.9, 3.0, 0.2]], np.float32),
    "int8": np.array([[0, -1, 7, -7, 127, -128, 3, 1]], np.int8),
    "int32": np.array([[0, -1, 300, -300, 70000, -129, 3, 255]], np.int32),
    "uint8": np.array([[0, 1, 7, 128, 255, 200, 3, 9]], np.uint8),
    "int64": np.array([[0, -1, 300, -300, 2**31 - 1, -(2**31), 3, 255]], np.int64),
    "bool": np.array([[True, False, True, True, False, True, False, True]]),
}


@pytest.mark.parametrize("src", sorted(CAST_VALUES))
@pytest.mark.parametrize("to", sorted(CAST_VALUES))
def test_cast_among_the_held_dtypes_agrees_with_onnxruntime(src, to):
    x = CAST_VALUES[src]
    if src == "float32" and to in ("uint8", "int64"):  # out of range is undefined; int64 from float is refused
        x = np.abs(x)
    model = _model("Cast", {"x": x}, to, to=ONNX_TYPES[to])
    if src == "float32" and to == "int64":
        with pytest.raises(UnsupportedError, match=r"Cast: node 'cast' .*to='int64'.*can exceed int32"):
            import_onnx(model)
        return
    _check(model, {"x": x}, True)


def test_castlike_of_a_constant_is_converted_at_import_and_of_a_tensor_is_a_cast():
    x = _floats((2, 3))
    model = _model("CastLike", {"x": x}, "int32", consts={"t": np.zeros(1, np.int32)})
    _check(model, {"x": x}, True)
    model = _model("Mul", {"x": x}, "float32", consts={"c": np.float64(2.5)})
    like = helper.make_node("CastLike", ["c", "x"], ["c32"], name="castlike")
    model.graph.node.insert(0, like)
    model.graph.node[1].input[:] = ["x", "c32"]
    graph = import_onnx(model)
    assert [(n.op, n.attrs) for n in graph.nodes] == [("mul", {"b": 2.5})]


def test_int64_inputs_and_outputs_are_held_as_int32():
    a = RNG.integers(-(2**31), 2**31, (4, 6)).astype(np.int64)
    b = RNG.integers(-50, 50, (6,)).astype(np.int64)
    b[b == 0] = 3
    model = _model("Mod", {"a": a, "b": b}, "int64")
    graph = import_onnx(model)
    assert {t.dtype for t in graph.inputs.values()} == {"int32"}
    _check(model, {"a": a, "b": b}, True)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (_model("Add", {"a": CAST_VALUES["int64"]}, "int64", consts={"b": np.int64(1)}),
         r"Add: node 'add' \(attributes: none\): input 0 'a' has dtype int64"),
        (_model("BitShift", {"a": CAST_VALUES["int64"], "b": CAST_VALUES["int64"]}, "int64", 28, direction="LEFT"),
         r"BitShift: node 'bitshift' \(attributes: direction='LEFT'\): a left shift of int64 values could exceed"),
        (_model("Pow", {"a": CAST_VALUES["int32"], "b": CAST_VALUES["int32"]}, "int32"),
         r"Pow: node 'pow' .*an int32 base needs a constant exponent"),
        (_model("Equal", {"a": np.zeros(3, np.uint16), "b": np.zeros(3, np.uint16)}, "bool"),
         r"Equal: node 'equal' .*input 0 'a' has dtype uint16; vdla runs this operator on"),
        (_model("Celu", {"x": CAST_VALUES["float32"]}, "float32", alpha=0.0),
         r"Celu: node 'celu' \(attributes: alpha=0.0\): attribute alpha=0.0: alpha must not be 0"),
        (_model("Mod", {"a": CAST_VALUES["int32"], "b": CAST_VALUES["int32"]}, "int32", fmod=2),
         r"Mod: node 'mod' \(attributes: fmod=2\): attribute fmod=2: fmod must be 0 or 1"),
        (_model("Max", {"a": CAST_VALUES["int64"]}, "int64", consts={"b": np.array([2**40], np.int64)}),
         r"Max: node 'max' .*int64 values 1099511627776..1099511627776 exceed int32"),
    ],
)  # fmt: skip
def test_what_vdla_cannot_compute_exactly_is_refused_at_import_naming_node_and_attribute(model, message):
    with pytest.raises(UnsupportedError, match=message):
        import_onnx(model)


def test_rank_zero_values_stay_rank_zero_on_the_jit_and_the_interpreter():
    x, n = np.array(0.75, np.float32), np.array(2, np.int64)
    assert _check(_model("Cos", {"x": x}, "float32"), {"x": x}, False) == ["cos"]
    _check(_model("Less", {"n": n}, "bool", consts={"k": np.int64(3)}), {"n": n}, True)


def test_infinite_constants_where_they_are_exact():
    """An infinity compared with, selected or padded with (attention's -inf masks) is exact, on the JIT and
    the interpreter as in onnxruntime; in arithmetic it stays refused."""
    x = _floats((3, 4))
    x.flat[6:9] = [-np.inf, np.inf, np.nan]
    ninf, pinf = (numpy_helper.from_array(np.float32(v), n) for v, n in ((-np.inf, "ninf"), (np.inf, "pinf")))
    nodes = [
        helper.make_node("Equal", ["x", "ninf"], ["eq"]),
        helper.make_node("Less", ["x", "pinf"], ["lt"]),
        helper.make_node("GreaterOrEqual", ["x", "ninf"], ["ge"]),
        helper.make_node("Where", ["lt", "x", "ninf"], ["sel"]),
        helper.make_node("Where", ["eq", "pinf", "x"], ["sel2"]),
        helper.make_node("Pad", ["x", "pads", "ninf"], ["pad"]),
    ]
    pads = numpy_helper.from_array(np.array([0, 1, 2, 0], np.int64), "pads")
    outs = [("eq", "bool", (3, 4)), ("lt", "bool", (3, 4)), ("ge", "bool", (3, 4)), ("sel", "float32", (3, 4)),
            ("sel2", "float32", (3, 4)), ("pad", "float32", (5, 5))]  # fmt: skip
    graph = helper.make_graph(
        nodes, "inf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info(n, ONNX_TYPES[d], list(s)) for n, d, s in outs], initializer=[ninf, pinf, pads],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    want = reference_run(model, {"x": x})
    g = import_onnx(model)
    for got in (compile_graph(g)(x=x), evaluate(g, {"x": x})):
        for name, w in want.items():
            np.testing.assert_array_equal(got[name], w, err_msg=name)
    add = _model("Add", {"x": x}, "float32", consts={"c": np.float32(-np.inf)})
    with pytest.raises(UnsupportedError, match=r"Add: node 'add' .*operand b must be finite, got -inf"):
        import_onnx(add)


def test_swiglu_is_swish_of_the_gate_times_the_value():
    """SwiGLU (opset 28) against numpy: ``a * sigmoid(alpha * a) * b``; inputs of two shapes are refused."""
    a, v = _floats((3, 8)), _floats((3, 8))
    model = _model("SwiGLU", {"a": a, "v": v}, "float32", opset=28, alpha=1.702)
    graph = import_onnx(model)
    want = a * (1 / (1 + np.exp(-1.702 * a.astype(np.float64)))) * v
    for got in (compile_graph(graph)(a=a, v=v)["y"], evaluate(graph, {"a": a, "v": v})["y"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(UnsupportedError, match=r"SwiGLU: node 'swiglu' .*must have one shape"):
        import_onnx(_model("SwiGLU", {"a": a, "v": v[:1]}, "float32", opset=28))


@pytest.mark.parametrize(
    "shape,axis,attrs,length",
    [
        ((2, 7, 3, 1), 1, {}, None),  # real input, the first signal axis
        ((2, 7, 3, 2), 2, {}, 5),  # complex, another axis, truncated to 5
        ((2, 7, 3, 2), -2, {"inverse": 1}, 9),  # inverse, zero padded to 9
        ((3, 8, 1), 1, {"onesided": 1}, None),  # rfft: 5 bins
        ((3, 5, 2), 1, {"onesided": 1, "inverse": 1}, None),  # irfft: 8 real samples
        ((3, 5, 2), 1, {"onesided": 1, "inverse": 1}, 9),  # irfft of odd length
    ],
)
def test_dft_is_a_dense_layer_matching_onnx_reference(shape, axis, attrs, length):
    """DFT (opset 20: dft_length and axis inputs) as one dense layer of a constant matrix: numpy's fft, ifft,
    rfft and irfft with their truncation and padding, as ONNX's reference computes them."""
    from onnx.reference import ReferenceEvaluator

    x = _floats(shape)
    consts = {"axis": np.array(axis, np.int64)}
    names = ["x", "len" if length else "", "axis"]
    if length:
        consts["len"] = np.array(length, np.int64)
    node = helper.make_node("DFT", names, ["y"], **attrs)
    inits = [numpy_helper.from_array(a, k) for k, a in consts.items()]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "dft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], [out],
                              initializer=inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, want.shape))
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes if n.op in ("dense", "matmul")] == ["dense"]
    got = compile_graph(graph)(x=x)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_eye_like_is_a_constant_of_the_input_shape():
    """EyeLike reads only its input's shape: a constant at import, here added to the input (onnxruntime)."""
    x = _floats((3, 5))
    eye = helper.make_node("EyeLike", ["x"], ["e"], k=1)
    add = helper.make_node("Add", ["x", "e"], ["y"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])
    graph = helper.make_graph([eye, add], "eye", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    assert [n.op for n in import_onnx(model).nodes] == ["add"]
    _check(model, {"x": x}, True)


@pytest.mark.parametrize("k,past,bias,activation", [(4, True, True, "silu"), (3, False, False, "none"),
                                                    (2, True, False, "swish")])  # fmt: skip
def test_causal_conv_with_state_matches_onnx_reference(k, past, bias, activation):
    """CausalConvWithState (opset 27) with weights, bias and past state fed at run time: the output and the
    present state, as ONNX's reference computes them."""
    from onnx.reference import ReferenceEvaluator

    feeds = {"x": _floats((2, 3, 6)), "w": _floats((3, 1, k))}
    if bias:
        feeds["b"] = _floats((3,))
    if past:
        feeds["s"] = _floats((2, 3, k - 1))
    names = ["x", "w", "b" if bias else "", "s" if past else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], activation=activation)
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 6]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 3, k - 1])]  # fmt: skip
    model = helper.make_model(helper.make_graph([node], "ccs", ins, outs), opset_imports=[helper.make_opsetid("", 27)])
    want = dict(zip(("y", "state"), ReferenceEvaluator(model).run(None, feeds), strict=True))
    graph = import_onnx(model)
    for got in (compile_graph(graph)(**feeds), evaluate(graph, feeds)):
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_bitcast_reinterprets_the_bits_it_holds():
    """BitCast (opset 26) float32 <-> int32 (NaN payloads, infinities and -0.0 kept bit for bit, on the JIT and
    the interpreter), int8 -> uint8 and bool -> uint8 against numpy's views; other pairs are refused."""
    f = np.array([1.5, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.25], np.float32)
    f.view(np.int32)[4] = 0x7FC01234  # a NaN with a payload
    i = f.view(np.int32).copy()
    for x, to, want in [(f, "int32", i), (i, "float32", f), (np.array([-128, -1, 0, 127], np.int8), "uint8", None),
                        (np.array([True, False]), "uint8", None)]:  # fmt: skip
        model = _model("BitCast", {"x": x}, to, opset=26, to=ONNX_TYPES[to])
        graph = import_onnx(model)
        want = want if want is not None else x.view(np.uint8).astype(np.int32)
        for got in (compile_graph(graph)(x=x)["y"], evaluate(graph, {"x": x})["y"]):
            np.testing.assert_array_equal(np.asarray(got).view(np.int32), np.asarray(want).view(np.int32))
    model = _model("BitCast", {"x": np.zeros(3, np.int8)}, "bool", opset=26, to=TensorProto.BOOL)
    with pytest.raises(UnsupportedError, match=r"BitCast: node 'bitcast' .*bit cast of int8 to bool"):
        import_onnx(model)


@pytest.mark.parametrize("shape", [(3, 3), (4, 2, 2), (2, 3, 1, 1), (2, 3, 3)])
def test_det_of_small_matrices_matches_onnxruntime(shape):
    """Det as the cofactor expansion of 1x1, 2x2 and 3x3 matrices; a 4x4 one is refused."""
    x = _floats(shape, scale=1.0)
    model = _model("Det", {"x": x}, "float32", opset=22)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape[:-2])))
    _check(model, {"x": x}, False, rtol=1e-5, atol=1e-5)
    with pytest.raises(UnsupportedError, match=r"Det: node 'det' .*1x1, 2x2 and 3x3 matrices"):
        import_onnx(_model("Det", {"x": _floats((4, 4))}, "float32", opset=22))


@pytest.mark.parametrize("window,onesided", [(False, None), (True, 0), (True, None)])
def test_stft_matches_onnx_reference(window, onesided):
    """STFT (opset 17): frames of the signal (one take), the window fed at run time, and each frame's DFT as one
    dense layer; onesided defaults to 1 (ONNX's shape inference reads its absence as 0: not checked there)."""
    from onnx.reference import ReferenceEvaluator

    feeds = {"s": _floats((2, 40, 1))}
    names = ["s", "step", "w" if window else "", "len"]
    if window:
        feeds["w"] = np.hanning(10).astype(np.float32)
    attrs = {} if onesided is None else {"onesided": onesided}
    node = helper.make_node("STFT", names, ["y"], **attrs)
    inits = [
        numpy_helper.from_array(np.array(6, np.int64), "step"),
        numpy_helper.from_array(np.array(10, np.int64), "len"),
    ]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()]
    bins = 10 if onesided == 0 else 6
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, bins, 2])
    model = helper.make_model(
        helper.make_graph([node], "stft", ins, [out], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = compile_graph(import_onnx(model))(**feeds)["y"]
    assert got.shape == want.shape == (2, 6, bins, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
