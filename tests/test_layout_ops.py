"""Layout, indexing, pooling and resize operators: hand-built ONNX models through import -> simplify -> CPU
JIT against onnxruntime (the independent reference), the JIT kernels of take / gather / scatter against
their numpy semantics, and the refusals at import time."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

sys.path.insert(0, str(Path(__file__).parent))
from test_onnx_frontend import F, Model, _close, run_float_cpu, run_ort  # noqa: E402

import vdla  # noqa: E402
from vdla.cpu_fallback import get_kernel  # noqa: E402
from vdla.cpu_fallback.specs import (  # noqa: E402
    make_gather,
    make_grid_sample,
    make_one_hot,
    make_pool2d,
    make_scatter,
    make_take,
)
from vdla.frontend import import_onnx  # noqa: E402
from vdla.graph import oracle  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.types import TensorType, UnsupportedError  # noqa: E402
from vdla.graph.window import make_window  # noqa: E402
from vdla.model import ModelInputError  # noqa: E402

I64, I32 = 7, 6  # TensorProto.INT64, INT32
RNG = np.random.default_rng(42)
X4 = RNG.normal(0, 1, (2, 3, 7, 9)).astype(np.float32)
X3 = RNG.normal(0, 1, (2, 3, 11)).astype(np.float32)
X5 = RNG.normal(0, 1, (1, 2, 5, 6, 7)).astype(np.float32)


def _i64(m: Model, name: str, values) -> str:
    return m.init(name, np.asarray(values, np.int64))


def _check(build, x: np.ndarray, opset: int = 18, exact: bool = False) -> None:
    """The model ``build(m)`` (returning its output shape) on ``x``: vdla's CPU path equals onnxruntime, and
    the graph interpreter (the operators' numpy semantics) equals the compiled kernels."""
    m = Model()
    shape = build(m)
    model = m.build([("x", F, list(x.shape))], [("y", F, list(shape))], opset=opset)
    graph = import_onnx(model)
    got = run_float_cpu(graph, {"x": x})["y"]
    want = run_ort(model, {"x": x})["y"]
    assert got.shape == want.shape
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        _close(got, want, rtol=1e-5)
    np.testing.assert_allclose(evaluate(graph, {"x": x})["y"], got, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Layout and indexing against onnxruntime

LAYOUT = {
    "pad_reflect_axes": lambda m: (
        m.node("Pad", ["x", _i64(m, "p", [2, 1, 3, 0]), "", _i64(m, "a", [2, -1])], "y", mode="reflect"),
        (2, 3, 12, 10),
    )[1],  # fmt: skip
    "pad_edge": lambda m: (
        m.node("Pad", ["x", _i64(m, "p", [0, 1, 2, 3, 0, 0, 4, 5])], "y", mode="edge"),
        (2, 4, 13, 17),
    )[1],  # fmt: skip
    "pad_wrap": lambda m: (
        m.node("Pad", ["x", _i64(m, "p", [0, 0, 3, 8, 0, 0, 1, 2])], "y", mode="wrap"),
        (2, 3, 11, 19),
    )[1],  # fmt: skip
    "pad_constant_cropping": lambda m: (
        m.node("Pad", ["x", _i64(m, "p", [0, 0, -2, 3, 0, 0, 1, -4]), m.init("v", np.float32(2.5))], "y"),
        (2, 3, 6, 8),
    )[1],  # fmt: skip
    "tile": lambda m: (m.node("Tile", ["x", _i64(m, "r", [1, 2, 3, 1])], "y"), (2, 6, 21, 9))[1],
    "expand_broadcasting_both_ways": lambda m: (
        m.node("Slice", ["x", _i64(m, "s", [0]), _i64(m, "e", [1]), _i64(m, "ax", [1])], "s1"),
        m.node("Expand", ["s1", _i64(m, "shape", [3, 1, 4, 1, 1])], "y"),
        (3, 2, 4, 7, 9),
    )[2],  # fmt: skip
    "gather_negative_2d_indices": lambda m: (
        m.node("Gather", ["x", _i64(m, "i", [[-1, 0, 2], [3, -9, 8]])], "y", axis=-1),
        (2, 3, 7, 2, 3),
    )[1],
    "gather_scalar_index": lambda m: (m.node("Gather", ["x", _i64(m, "i", -2)], "y", axis=2), (2, 3, 9))[1],
    "gather_elements": lambda m: (
        m.node("GatherElements", ["x", _i64(m, "i", RNG.integers(-7, 7, (2, 2, 5, 9)))], "y", axis=2),
        (2, 2, 5, 9),
    )[1],  # fmt: skip
    "gather_nd_batch": lambda m: (
        m.node("GatherND", ["x", _i64(m, "i", RNG.integers(0, 3, (2, 4, 2)) * [1, 2])], "y", batch_dims=1),
        (2, 4, 9),
    )[1],  # fmt: skip
    "gather_nd_one_element": lambda m: (m.node("GatherND", ["x", _i64(m, "i", [1, -1, 6, 3])], "y"), ())[1],
    "depth_to_space_dcr": lambda m: (
        m.node("Slice", ["x", _i64(m, "st", [0, 0]), _i64(m, "en", [6, 8]), _i64(m, "ax", [2, 3])], "s"),
        m.node("Reshape", ["s", _i64(m, "sh", [2, 12, 2, 6])], "r"),
        m.node("DepthToSpace", ["r"], "y", blocksize=2, mode="DCR"),
        (2, 3, 4, 12),
    )[3],  # fmt: skip
    "space_to_depth_then_depth_to_space_crd": lambda m: (
        m.node("Slice", ["x", _i64(m, "st", [0, 0]), _i64(m, "en", [6, 9]), _i64(m, "ax", [2, 3])], "s"),
        m.node("SpaceToDepth", ["s"], "d", blocksize=3),
        m.node("DepthToSpace", ["d"], "y", blocksize=3, mode="CRD"),
        (2, 3, 6, 9),
    )[3],  # fmt: skip
    "center_crop_pad": lambda m: (
        m.node("CenterCropPad", ["x", _i64(m, "s", [4, 12])], "y", axes=[-2, 3]),
        (2, 3, 4, 12),
    )[1],
    "compress_constant_condition": lambda m: (
        m.node("Compress", ["x", m.init("c", np.array([1, 0, 1, 1, 0, 0, 1], bool))], "y", axis=2),
        (2, 3, 4, 9),
    )[1],  # fmt: skip
    "reverse_sequence": lambda m: (
        m.node("Reshape", ["x", _i64(m, "s", [6, 63])], "r"),
        m.node("ReverseSequence", ["r", _i64(m, "lens", [63, 1, 0, 5, 20, 2])], "y", batch_axis=0, time_axis=1),
        (6, 63),
    )[2],  # fmt: skip
    "scatter_elements_add": lambda m: (
        m.node(
            "ScatterElements",
            ["x", _i64(m, "i", [[[[1, -1, 1]]]]), m.init("u", np.ones((1, 1, 1, 3), np.float32))],
            "y",
            axis=3,
            reduction="add",
        ),
        (2, 3, 7, 9),
    )[1],  # fmt: skip
    "scatter_nd_max": lambda m: (
        m.node(
            "ScatterND",
            ["x", _i64(m, "i", [[1, 2], [0, 0], [1, 2]]), m.init("u", RNG.normal(0, 2, (3, 7, 9)).astype(np.float32))],
            "y",
            reduction="max",
        ),
        (2, 3, 7, 9),
    )[1],  # fmt: skip
}


@pytest.mark.parametrize("name", sorted(LAYOUT))
def test_layout_and_indexing_match_onnxruntime(name):
    _check(LAYOUT[name], X4, exact=True)


def test_one_hot_of_constant_indices_gathers_its_runtime_values():
    m = Model()
    m.node("OneHot", [_i64(m, "i", [[0, -1], [7, 2]]), m.init("d", np.float32(5)), "x"], "y", axis=1)
    model = m.build([("x", F, [2])], [("y", F, [2, 5, 2])], opset=18)
    x = np.array([-1.5, 4.0], np.float32)
    np.testing.assert_array_equal(run_float_cpu(import_onnx(model), {"x": x})["y"], run_ort(model, {"x": x})["y"])


@pytest.mark.parametrize("dtype", [F, I32])
def test_one_hot_of_indices_computed_at_run_time_matches_onnxruntime(dtype):
    m = Model()  # types onnxruntime implements: float indices and depth, or int32 indices and depth
    depth = m.init("d", np.float32(6) if dtype == F else np.int32(6))
    m.node("OneHot", ["i", depth, m.init("v", np.array([2, -3], np.float32))], "y", axis=-2)
    model = m.build([("i", dtype, [3, 4])], [("y", F, [3, 6, 4])], opset=18)
    i = RNG.integers(-8, 8, (3, 4)).astype(np.float32 if dtype == F else np.int32)
    np.testing.assert_array_equal(run_float_cpu(import_onnx(model), {"i": i})["y"], run_ort(model, {"i": i})["y"])


def test_one_hot_kernel_truncates_float_indices_and_never_matches_nan():
    i = np.array([[1.9, -0.5, -1.2, np.nan], [np.inf, -np.inf, 4.0, -5.0]], np.float32)
    values = np.array([0.25, 8.0], np.float32)
    spec = make_one_hot(TensorType.of(i, "one_hot"), TensorType.of(values, "one_hot"), 5, 2)
    got = get_kernel(spec)(i, values)
    np.testing.assert_array_equal(got, oracle.one_hot(i, values, 5, 2))
    hot = [[1, 0, 4, None], [None, None, 4, 0]]  # trunc(1.9) = 1, trunc(-0.5) = 0, trunc(-1.2) = -1 -> 4
    for r, row in enumerate(hot):
        for c, at in enumerate(row):
            np.testing.assert_array_equal(got[r, c], [8.0 if k == at else 0.25 for k in range(5)])


@pytest.mark.parametrize(
    "table,ishape,axis,itype",
    [
        ((50, 8), (2, 5), 0, I64),
        ((3, 7, 4), (6,), 1, I64),
        ((3, 7, 4), (2, 3), -1, I32),
        ((9,), (), 0, I64),
        ((4, 6), (1,), 1, I32),
    ],
)
def test_gather_of_indices_computed_at_run_time_matches_onnxruntime(table, ishape, axis, itype):
    """Token ids into an embedding table and the like: negative indices count from the end; int64 ids given
    to the compiled model are narrowed to the int32 vdla holds them in."""
    m = Model()
    m.node("Gather", [m.weight("w", table), "i"], "y", axis=axis)
    ax = axis % len(table)
    out = [*table[:ax], *ishape, *table[ax + 1 :]]
    model = m.build([("i", itype, list(ishape))], [("y", F, out)], opset=17)
    n = table[ax]
    i = RNG.integers(-n, n, ishape).astype(np.int64 if itype == I64 else np.int32)
    want = run_ort(model, {"i": i})["y"]
    graph = import_onnx(model)
    np.testing.assert_array_equal(run_float_cpu(graph, {"i": i.astype(np.int32)})["y"], want)
    np.testing.assert_array_equal(evaluate(graph, {"i": i.astype(np.int32)})["y"], want)
    np.testing.assert_array_equal(vdla.compile(model).run(i), want)


@pytest.mark.parametrize(
    "op,xshape,ishape,attrs,itype",
    [
        ("GatherElements", (3, 5, 4), (3, 7, 4), {"axis": 1}, I64),
        ("GatherElements", (3, 5, 4), (2, 5, 3), {"axis": -1}, I32),
        ("GatherElements", (6,), (4,), {}, I64),
        ("GatherND", (3, 5, 4), (2, 2), {}, I64),
        ("GatherND", (3, 5, 4), (3, 4, 1), {"batch_dims": 1}, I64),
        ("GatherND", (3, 5, 4), (2, 6, 3), {}, I64),
    ],
)
def test_element_gathers_of_indices_computed_at_run_time_match_onnxruntime(op, xshape, ishape, attrs, itype):
    """GatherElements and GatherND of indices fed at run time (negative ones count from the end): flat offsets
    computed in int32 and one gather, equal to onnxruntime on the JIT and the interpreter."""
    x = RNG.normal(0, 1, xshape).astype(np.float32)
    if op == "GatherElements":
        n = xshape[attrs.get("axis", 0)]
        i = RNG.integers(-n, n, ishape)
        out = list(ishape)
    else:
        batch = attrs.get("batch_dims", 0)
        k = ishape[-1]
        i = np.stack([RNG.integers(-d, d, ishape[:-1]) for d in xshape[batch : batch + k]], -1)
        out = [*ishape[:-1], *xshape[batch + k :]]
    i = i.astype(np.int64 if itype == I64 else np.int32)
    m = Model()
    m.node(op, ["x", "i"], "y", **attrs)
    model = m.build([("x", F, list(xshape)), ("i", itype, list(ishape))], [("y", F, out)], opset=18)
    want = run_ort(model, {"x": x, "i": i})["y"]
    graph = import_onnx(model)
    feeds = {"x": x, "i": i.astype(np.int32)}
    np.testing.assert_array_equal(run_float_cpu(graph, feeds)["y"], want)
    np.testing.assert_array_equal(evaluate(graph, feeds)["y"], want)


@pytest.mark.parametrize(
    "op,xshape,ishape,attrs",
    [
        ("ScatterElements", (3, 5, 4), (3, 2, 4), {"axis": 1, "reduction": "add"}),
        ("ScatterElements", (3, 5, 4), (2, 5, 3), {"axis": -1}),
        ("ScatterND", (3, 5, 4), (4, 2), {"reduction": "max"}),
        ("ScatterND", (3, 5, 4), (2, 3), {"reduction": "mul"}),
    ],
)
def test_scatters_of_indices_computed_at_run_time_match_onnxruntime(op, xshape, ishape, attrs):
    """ScatterElements and ScatterND of int64 indices fed at run time (negative ones count from the end; the
    updates in order, reduced where repeated): flat offsets computed in int32, one scatter."""
    x = RNG.normal(0, 1, xshape).astype(np.float32)
    if op == "ScatterElements":
        axis = attrs["axis"] % len(xshape)
        n = xshape[axis]
        # distinct indices along the axis where updates replace (ONNX leaves repeated ones undefined there)
        perm = np.argsort(RNG.random((*ishape[:axis], n, *ishape[axis + 1 :])), axis=axis)
        i = np.take(perm, range(ishape[axis]), axis=axis) - RNG.integers(0, 2, ishape) * n
        ushape = ishape
    else:
        k = ishape[-1]
        i = np.stack([RNG.integers(-d, d, ishape[:-1]) for d in xshape[:k]], -1)
        ushape = (*ishape[:-1], *xshape[k:])
    u = RNG.normal(0, 1, ushape).astype(np.float32)
    i = i.astype(np.int64)
    m = Model()
    m.node(op, ["x", "i", "u"], "y", **attrs)
    inputs = [("x", F, list(xshape)), ("i", I64, list(ishape)), ("u", F, list(ushape))]
    model = m.build(inputs, [("y", F, list(xshape))], opset=18)
    want = run_ort(model, {"x": x, "i": i, "u": u})["y"]
    graph = import_onnx(model)
    feeds = {"x": x, "i": i.astype(np.int32), "u": u}
    _close(run_float_cpu(graph, feeds)["y"], want, rtol=1e-6)
    _close(evaluate(graph, feeds)["y"], want, rtol=1e-6)


def test_int64_ids_beyond_int32_are_refused_naming_the_input_and_index():
    m = Model()
    m.node("Gather", [m.weight("w", (10, 4)), "i"], "y")
    module = vdla.compile(m.build([("i", I64, [1, 3])], [("y", F, [1, 3, 4])], opset=17))
    ids = np.array([[1, 2**40, 3]], np.int64)
    with pytest.raises(ModelInputError, match=r"input 'i' \(int64\) for int32: 1 value\(s\) outside .* at \[0, 1\]"):
        module.run(ids)
    with pytest.raises(ModelInputError, match="must be int32, got float32"):
        module.run(ids.astype(np.float32))


def test_pad_value_computed_at_run_time():
    m = Model()
    m.node("Pad", ["x", _i64(m, "p", [1, 0, 0, 2]), "v"], "y")
    model = m.build([("x", F, [3, 4]), ("v", F, [])], [("y", F, [4, 6])], opset=18)
    feeds = {"x": X4[0, 0, :3, :4], "v": np.array(-7.25, np.float32)}
    np.testing.assert_array_equal(run_float_cpu(import_onnx(model), feeds)["y"], run_ort(model, feeds)["y"])


# ---------------------------------------------------------------------------------------------------------
# Pooling against onnxruntime

POOLS = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, X4),
    ("MaxPool", {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 0, 1, 2]}, X4),
    ("MaxPool", {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2], "ceil_mode": 1}, X5),
    (
        "AveragePool",
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
        X4,
    ),  # fmt: skip
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [3, 2], "pads": [1, 0, 0, 1], "ceil_mode": 1}, X4),
    ("AveragePool", {"kernel_shape": [3, 2, 2], "pads": [1, 1, 0, 1, 0, 1], "count_include_pad": 1}, X5),
    ("AveragePool", {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_LOWER"}, X3),
    ("LpPool", {"kernel_shape": [2, 3], "strides": [2, 2], "p": 3, "pads": [0, 1, 1, 0]}, X4),
    ("LpPool", {"kernel_shape": [3], "dilations": [2], "p": 1}, X3),
    ("LpPool", {"kernel_shape": [2, 2, 2], "auto_pad": "SAME_UPPER"}, X5),
]


@pytest.mark.parametrize("op, attrs, x", POOLS, ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(POOLS)])
def test_pooling_matches_onnxruntime(op, attrs, x):
    want = run_ort(_pool_model(op, attrs, x, [f"d{i}" for i in range(x.ndim)]), {"x": x})["y"]
    _check(lambda m: (m.node(op, ["x"], "y", **attrs), want.shape)[1], x)


def _pool_model(op: str, attrs: dict, x: np.ndarray, shape):
    m = Model()
    m.node(op, ["x"], "y", **attrs)
    return m.build([("x", F, list(x.shape))], [("y", F, shape)], opset=18)


@pytest.mark.parametrize("op", ["GlobalLpPool", "GlobalMaxPool", "GlobalAveragePool"])
@pytest.mark.parametrize("x", [X3, X4, X5], ids=["1d", "2d", "3d"])
def test_global_pools_match_onnxruntime(op, x):
    _check(lambda m: (m.node(op, ["x"], "y"), (*x.shape[:2], *([1] * (x.ndim - 2))))[1], x)


def test_lp_pool_kernel_and_oracle_agree_with_math():
    x = RNG.normal(0, 1, (1, 2, 5, 6)).astype(np.float32)
    spec = make_pool2d(TensorType.of(x, "lp"), "lp", (2, 3), (1, 2), (1, 0, 0, 2), dilation=(2, 1), p=3)
    win, _ = make_window("lp", x.shape[2:], (2, 3), (1, 2), (2, 1), (1, 0, 0, 2))
    padded = np.pad(np.abs(x.astype(np.float64)), ((0, 0), (0, 0), (1, 0), (0, 2)))
    o = padded[:, :, 0:3:2, 0:3].__pow__(3).sum(axis=(2, 3)) ** (1 / 3)  # the first window by hand
    got = get_kernel(spec)(x)
    np.testing.assert_allclose(got[:, :, 0, 0], o, rtol=1e-5)
    np.testing.assert_allclose(got, oracle.pool2d(x, win, "lp", p=3), rtol=1e-5)


def test_pool_whose_window_lies_in_the_padding_is_refused():
    x = TensorType((1, 1, 4, 4), "float32")
    with pytest.raises(UnsupportedError, match="entirely in the padding"):
        make_pool2d(x, "max", (1, 1), 1, (1, 0, 0, 0))


# ---------------------------------------------------------------------------------------------------------
# Resize against onnxruntime

RESIZES = [
    {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
    {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "antialias": 1},
    {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "half_pixel_symmetric"},
    {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 3.0},
    {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
]


@pytest.mark.parametrize("attrs", RESIZES, ids=[str(i) for i in range(len(RESIZES))])
def test_resize_modes_match_onnxruntime(attrs):
    def build(m: Model):
        roi = m.init("roi", np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32))
        m.node("Resize", ["x", roi, "", _i64(m, "sizes", [2, 3, 4, 15])], "y", **attrs)
        return (2, 3, 4, 15)

    _check(build, X4)


# ---------------------------------------------------------------------------------------------------------
# Kernels against their numpy semantics


@pytest.mark.parametrize("dtype", ["float32", "int8", "int32"])
def test_take_gather_scatter_kernels_equal_their_numpy_semantics(dtype):
    x = (RNG.normal(0, 40, (3, 5, 8))).astype(dtype)
    t = TensorType.of(x, "take")
    for index in [((2, -1, 0, 0), None, None), (None, (4, -1, 0), tuple(range(7, -1, -1))), ((1,), (0,), (7,))]:
        spec = make_take(t, index=index, value=-3)
        np.testing.assert_array_equal(get_kernel(spec)(x), oracle.take(x, index, -3))
    offsets = RNG.integers(0, x.size, (4, 6)).astype(np.int32)
    spec = make_gather(t, TensorType.of(offsets, "gather"))
    np.testing.assert_array_equal(get_kernel(spec)(x, offsets), x.reshape(-1)[offsets])
    if dtype == "int8":
        return
    offsets = np.array([5, 7, 5, 119, 5, 0], np.int32)
    updates = RNG.normal(0, 9, offsets.shape).astype(dtype)
    for reduction in ("none", "add", "mul", "max", "min"):
        spec = make_scatter(t, TensorType.of(offsets, "s"), TensorType.of(updates, "s"), reduction)
        want = oracle.scatter(x, offsets, updates, reduction)
        np.testing.assert_array_equal(get_kernel(spec)(x, offsets, updates), want)
    assert want.reshape(-1)[5] == min(x.reshape(-1)[5], *updates[[0, 2, 4]])
    assert oracle.scatter(x, offsets, updates).reshape(-1)[5] == updates[4]  # the last update wins
    stray = np.array([-4, 3, 120, 2**31 - 1], np.int32)  # computed offsets outside x: clamped to its ends
    spec = make_scatter(t, TensorType.of(stray, "s"), TensorType.of(updates[:4], "s"), "none")
    want = x.copy().reshape(-1)
    want[[0, 3, 119]] = updates[[0, 1, 3]]
    np.testing.assert_array_equal(get_kernel(spec)(x, stray, updates[:4]).reshape(-1), want)
    np.testing.assert_array_equal(oracle.scatter(x, stray, updates[:4]).reshape(-1), want)


# ---------------------------------------------------------------------------------------------------------
# Refusals at import time


@pytest.mark.parametrize(
    "node, match",
    [
        (("GatherElements", ["x", "i"], {}), "indices of shape \\(2,\\) do not fit the input shape"),
        (("ScatterElements", ["x", "i", "x"], {}), "indices of shape \\(2,\\) do not fit the input shape"),
        (("Pad", ["x", "p"], {"mode": "reflect"}), "reflect padding of 9 needs an axis longer than 7"),
        (("Pad", ["x", "p"], {"mode": "edge"}), "negative pads"),
        (("Gather", ["x", "big"], {"axis": 2}), "indices \\[7\\] lie outside an axis of size 7"),
        (("MaxPool", ["x"], {"kernel_shape": [2, 2], "storage_order": 1}), "Indices output"),
    ],
)
def test_what_vdla_cannot_run_is_refused_at_import_naming_the_node(node, match):
    op, inputs, attrs = node
    m = Model()
    if inputs[1:] == ["p"]:
        pads = [0, 0, 9, 0, 0, 0, 0, 0] if attrs.get("mode") == "reflect" else [0, 0, -1, 0, 0, 0, 0, 0]
        _i64(m, "p", pads)
    if inputs[1:] == ["big"]:
        _i64(m, "big", [0, 7])
    outputs = ["y", "idx"] if op == "MaxPool" else ["y"]
    m.node(op, inputs, outputs, name="layout_node", **attrs)
    extra = [("i", I32, [2])] if "i" in inputs else []
    dims = [f"d{i}" for i in range(X4.ndim)]
    outs = [("y", F, dims)] + ([("idx", I64, dims)] if op == "MaxPool" else [])
    model = m.build([("x", F, list(X4.shape)), *extra], outs, opset=18)
    with pytest.raises(UnsupportedError, match=f"node 'layout_node'.*{match}"):
        import_onnx(model)


# ---------------------------------------------------------------------------------------------------------
# GridSample


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_matches_onnxruntime(mode, padding_mode, align_corners):
    m = Model()
    m.node("GridSample", ["x", "grid"], "y", mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    model = m.build([("x", F, [2, 3, 5, 6]), ("grid", F, [2, 4, 7, 2])], [("y", F, [2, 3, 4, 7])], opset=20)
    if (mode, padding_mode) == ("cubic", "border"):  # onnxruntime clamps each tap, ONNX's reference the point
        with pytest.raises(UnsupportedError, match="node 'y'.*attribute padding_mode='border'.*differ"):
            import_onnx(model)
        return
    grid = RNG.uniform(-1.6, 1.6, (2, 4, 7, 2)).astype(np.float32)
    feeds = {"x": X4[:, :, :5, :6].copy(), "grid": grid}
    graph = import_onnx(model)
    got = run_float_cpu(graph, feeds)["y"]
    _close(got, run_ort(model, feeds)["y"], rtol=1e-5)
    np.testing.assert_allclose(evaluate(graph, feeds)["y"], got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_of_lengths_fed_at_run_time_matches_onnxruntime(batch_axis, time_axis):
    """ReverseSequence with int64 sequence_lens fed at run time (0 and the full length included): offsets
    computed in int32 and one gather."""
    shape = [5, 3, 4] if time_axis == 0 else [3, 5, 4]
    x = RNG.normal(0, 1, shape).astype(np.float32)
    lens = np.array([5, 0, 2], np.int64) if time_axis == 0 else np.array([1, 5, 3], np.int64)
    m = Model()
    m.node("ReverseSequence", ["x", "lens"], "y", batch_axis=batch_axis, time_axis=time_axis)
    model = m.build([("x", F, shape), ("lens", I64, [3])], [("y", F, shape)], opset=18)
    want = run_ort(model, {"x": x, "lens": lens})["y"]
    graph = import_onnx(model)
    feeds = {"x": x, "lens": lens.astype(np.int32)}
    np.testing.assert_array_equal(run_float_cpu(graph, feeds)["y"], want)
    np.testing.assert_array_equal(evaluate(graph, feeds)["y"], want)


def test_max_unpool_of_indices_fed_at_run_time():
    """MaxUnpool of MaxPool-style flat indices fed at run time (int64): equal to onnxruntime; with a larger
    output_shape, the unpooled result padded at the end of each axis as ONNX's reference does."""
    from onnx.reference import ReferenceEvaluator

    x = RNG.normal(0, 1, (2, 3, 2, 3)).astype(np.float32)
    rows, cols = np.meshgrid(np.arange(2) * 2, np.arange(3) * 2, indexing="ij")
    pick = (rows + RNG.integers(0, 2, (2, 3, 2, 3))) * 6 + cols + RNG.integers(0, 2, (2, 3, 2, 3))
    i = (pick + np.arange(6).reshape(2, 3, 1, 1) * 24).astype(np.int64)  # flat over (N, C, 4, 6)
    feeds, fed = {"x": x, "i": i}, {"x": x, "i": i.astype(np.int32)}
    m = Model()
    m.node("MaxUnpool", ["x", "i"], "y", kernel_shape=[2, 2], strides=[2, 2])
    model = m.build([("x", F, [2, 3, 2, 3]), ("i", I64, [2, 3, 2, 3])], [("y", F, [2, 3, 4, 6])], opset=11)
    np.testing.assert_array_equal(run_float_cpu(import_onnx(model), fed)["y"], run_ort(model, feeds)["y"])
    m = Model()
    m.node("MaxUnpool", ["x", "i", _i64(m, "shape", [2, 3, 5, 7])], "y", kernel_shape=[2, 2], strides=[2, 2])
    model = m.build([("x", F, [2, 3, 2, 3]), ("i", I64, [2, 3, 2, 3])], [("y", F, [2, 3, 5, 7])], opset=11)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(run_float_cpu(import_onnx(model), fed)["y"], want)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("const_indices", [False, True])
def test_tensor_scatter_matches_onnx_reference(mode, const_indices):
    """TensorScatter (a KV cache update) along axis 2 from per-batch write indices, fed at run time or
    constant; circular mode wraps past the cache's end."""
    from onnx.reference import ReferenceEvaluator

    cache = RNG.normal(0, 1, (2, 3, 6, 4)).astype(np.float32)
    update = RNG.normal(0, 1, (2, 3, 3, 4)).astype(np.float32)
    idx = np.array([1, 5 if mode == "circular" else 3], np.int64)
    m = Model()
    names = ["cache", "update", _i64(m, "idx", idx) if const_indices else "idx"]
    m.node("TensorScatter", names, "y", axis=2, mode=mode)
    inputs = [("cache", F, [2, 3, 6, 4]), ("update", F, [2, 3, 3, 4])] + ([] if const_indices else [("idx", I64, [2])])
    model = m.build(inputs, [("y", F, [2, 3, 6, 4])], opset=24)
    feeds = {"cache": cache, "update": update} | ({} if const_indices else {"idx": idx})
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fed = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feeds.items()}
    np.testing.assert_array_equal(run_float_cpu(import_onnx(model), fed)["y"], want)


@pytest.mark.parametrize(
    "attrs,mask",
    [
        ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, False),
        ({"kernel_shape": [2, 3], "strides": [2, 1], "dilations": [1, 2], "group": 2, "offset_group": 2}, True),
    ],
)
def test_deform_conv_matches_onnx_reference(attrs, mask):
    """DeformConv with offsets (and mask, weights, bias) fed at run time: per offset group one bilinear
    grid_sample of the moved kernel taps, then one batched matmul, as ONNX's reference computes it."""
    from onnx.reference import ReferenceEvaluator

    kh, kw = attrs["kernel_shape"]
    group, og = attrs.get("group", 1), attrs.get("offset_group", 1)
    strides, dil, pads = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]), attrs.get("pads", [0] * 4)
    n, c, ih, iw, oc = 2, 4, 6, 7, 6
    oh, ow = ((d + pads[a] + pads[a + 2] - (k - 1) * dil[a] - 1) // strides[a] + 1
              for a, (d, k) in enumerate(((ih, kh), (iw, kw))))  # fmt: skip
    feeds = {"x": RNG.normal(0, 1, (n, c, ih, iw)), "w": RNG.normal(0, 0.5, (oc, c // group, kh, kw)),
             "off": RNG.normal(0, 1.5, (n, og * kh * kw * 2, oh, ow)), "b": RNG.normal(0, 1, (oc,))}  # fmt: skip
    if mask:
        feeds["mask"] = RNG.uniform(0, 1, (n, og * kh * kw, oh, ow))
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    m = Model()
    m.node("DeformConv", list(feeds), "y", **attrs)
    model = m.build([(k, F, list(v.shape)) for k, v in feeds.items()], [("y", F, [n, oc, oh, ow])], opset=19)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    _close(run_float_cpu(import_onnx(model), feeds)["y"], want, rtol=1e-5)


@pytest.mark.parametrize("cmode", ["half_pixel", "output_half_pixel"])
def test_roi_align_matches_onnx_reference(cmode):
    """Average RoiAlign of regions and batch indices fed at run time (a region reaching outside the image,
    one smaller than a pixel): bilinear samples at border-clamped coordinates, points beyond one pixel
    outside counting 0, as ONNX's reference computes it; max mode and sampling_ratio 0 are refused."""
    from onnx.reference import ReferenceEvaluator

    x = RNG.normal(0, 1, (2, 3, 8, 9)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 6.0, 7.5], [-3.0, 2.0, 12.0, 9.5], [2.2, 3.1, 2.6, 3.4]], np.float32)
    idx = np.array([1, 0, 1], np.int64)
    attrs = {"coordinate_transformation_mode": cmode, "output_height": 3, "output_width": 4, "sampling_ratio": 2,
             "spatial_scale": 0.9}  # fmt: skip
    m = Model()
    m.node("RoiAlign", ["x", "rois", "idx"], "y", **attrs)
    inputs = [("x", F, [2, 3, 8, 9]), ("rois", F, [3, 4]), ("idx", I64, [3])]
    model = m.build(inputs, [("y", F, [3, 3, 3, 4])], opset=16)
    want = ReferenceEvaluator(model).run(None, {"x": x, "rois": rois, "idx": idx})[0]
    got = run_float_cpu(import_onnx(model), {"x": x, "rois": rois, "idx": idx.astype(np.int32)})["y"]
    _close(got, want, rtol=1e-5)
    for name, value in (("mode", "max"), ("sampling_ratio", 0)):
        bad = onnx.ModelProto()
        bad.CopyFrom(model)
        node = bad.graph.node[0]
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend([*kept, onnx.helper.make_attribute(name, value)])
        with pytest.raises(UnsupportedError, match=f"attribute {name}="):
            import_onnx(bad)


def test_dropout_in_training_mode_is_the_identity_only_at_ratio_zero():
    m = Model()
    m.node("Dropout", ["x", m.init("r", np.array(0.0, np.float32)), m.init("t", np.array(True))], ["y", "mask"])
    model = m.build([("x", F, [2, 3])], [("y", F, [2, 3]), ("mask", 9, [2, 3])], opset=13)
    x = RNG.normal(0, 1, (2, 3)).astype(np.float32)
    got = run_float_cpu(import_onnx(model), {"x": x})
    np.testing.assert_array_equal(got["y"], x)
    np.testing.assert_array_equal(got["mask"], np.ones((2, 3), bool))
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.array(0.5, np.float32), "r"))
    with pytest.raises(UnsupportedError, match="training_mode=True with a ratio above 0"):
        import_onnx(model)


def test_an_empty_split_part_is_left_out_of_a_concat_and_refused_elsewhere():
    """Split into (4, 0) parts, as RotaryEmbedding's function body does when it rotates every feature: the
    empty part holds nothing and Concat leaves it out; an empty graph output is refused, naming it."""
    x = RNG.normal(0, 1, (2, 4)).astype(np.float32)
    m = Model()
    m.node("Split", ["x", _i64(m, "parts", [4, 0])], ["a", "e"], axis=1)
    m.node("Concat", ["a", "e"], "y", axis=1)
    model = m.build([("x", F, [2, 4])], [("y", F, [2, 4])], opset=18)
    np.testing.assert_array_equal(run_float_cpu(import_onnx(model), {"x": x})["y"], x)
    m.node("Relu", ["e"], "r")
    model = m.build([("x", F, [2, 4])], [("y", F, [2, 4]), ("r", F, [2, 0])], opset=18)
    with pytest.raises(UnsupportedError, match=r"output r.*'r' is empty \(shape \(2, 0\)\)"):
        import_onnx(model)


@pytest.mark.parametrize(
    "image,block,attrs",
    [
        ((5, 6), (2, 3), {}),
        ((7, 6), (3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ],
)
def test_col2im_matches_onnxruntime(image, block, attrs):
    """Col2Im sums the overlapping blocks back (a scatter add at constant offsets; elements in the padding
    dropped), with strides, pads and dilations, as onnxruntime does."""
    strides, dil = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    blocks = [(image[d] + pads[d] + pads[2 + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in (0, 1)]
    shape = [2, 3 * block[0] * block[1], blocks[0] * blocks[1]]
    m = Model()
    m.node("Col2Im", ["x", _i64(m, "image", image), _i64(m, "block", block)], "y", **attrs)
    model = m.build([("x", F, shape)], [("y", F, [2, 3, *image])], opset=18)
    x = RNG.normal(0, 1, shape).astype(np.float32)
    graph = import_onnx(model)
    _close(run_float_cpu(graph, {"x": x})["y"], run_ort(model, {"x": x})["y"], rtol=1e-6)
    _close(evaluate(graph, {"x": x})["y"], run_ort(model, {"x": x})["y"], rtol=1e-6)


@pytest.mark.filterwarnings("ignore:divide by zero")  # the reference's step over a size-1 axis
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 4, 7), (2, 1, 3, 1, 5)])
def test_affine_grid_matches_onnx_reference_and_feeds_grid_sample(size, align_corners):
    """AffineGrid of thetas fed at run time: one batched matmul of the constant base grid, as ONNX's reference
    computes it (2-D and 3-D, a size-1 axis included); in 2-D, a spatial transformer with GridSample agrees
    with onnxruntime."""
    from onnx.reference import ReferenceEvaluator

    d = len(size) - 2
    theta = RNG.normal(0, 0.6, (size[0], d, d + 1)).astype(np.float32)
    m = Model()
    m.node("AffineGrid", ["theta", _i64(m, "size", size)], "grid", align_corners=align_corners)
    grid_shape = [size[0], *size[2:], d]
    model = m.build([("theta", F, list(theta.shape))], [("grid", F, grid_shape)], opset=20)
    graph = import_onnx(model)
    got = run_float_cpu(graph, {"theta": theta})["grid"]
    _close(got, ReferenceEvaluator(model).run(None, {"theta": theta})[0], rtol=1e-6)
    if d == 3:
        return
    m.node("GridSample", ["x", "grid"], "y", align_corners=align_corners)
    x = RNG.normal(0, 1, size).astype(np.float32)
    model = m.build([("theta", F, list(theta.shape)), ("x", F, list(size))], [("y", F, list(size))], opset=20)
    feeds = {"theta": theta, "x": x}
    _close(run_float_cpu(import_onnx(model), feeds)["y"], run_ort(model, feeds)["y"], rtol=1e-5)


def test_grid_sample_kernel_of_a_volume_equals_its_numpy_semantics_and_survives_any_grid():
    x = RNG.normal(0, 1, (1, 2, 3, 4, 5)).astype(np.float32)
    grid = RNG.normal(0, 1.5, (1, 2, 3, 4, 3)).astype(np.float32)
    grid.flat[:3] = [np.nan, np.inf, -np.inf]  # undefined for ONNX; the kernel must still read inside x
    spec = make_grid_sample(TensorType.of(x, "g"), TensorType.of(grid, "g"), "cubic", "reflection", False)
    got = get_kernel(spec)(x, grid)
    want = oracle.grid_sample(x, np.where(np.isfinite(grid), grid, 0), "cubic", "reflection", False)
    finite = np.isfinite(grid).all(axis=-1)[:, None].repeat(2, axis=1)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)
