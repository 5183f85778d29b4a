"""Pooling, softmax, layout, concat, pad, dense and conv2d kernels against their numpy references."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vdla.cpu_fallback import TensorType, UnsupportedError, ew, functions, get_kernel, set_disk_cache
from vdla.cpu_fallback.specs import (
    make_concat,
    make_conv2d,
    make_dense,
    make_global_avg_pool,
    make_matmul,
    make_pack,
    make_pad,
    make_pool2d,
    make_resize,
    make_slice,
    make_softmax,
    make_transpose,
)
from vdla.cpu_fallback.stacking import resolve_steps
from vdla.graph.oracle import ResizeFilter, resize_taps

set_disk_cache(None)
SETTINGS = settings(max_examples=12, deadline=None)


def tensors(dtype, shape):
    if dtype == "int8":
        return hnp.arrays(np.int8, shape, elements=st.integers(-128, 127))
    return hnp.arrays(np.float32, shape, elements=st.floats(-100, 100, width=32))


def run_spec(spec, *arrays):
    """Kernel output and numpy semantics (Spec.evaluate) of a spec (the kernel is compiled for exactly these arrays)."""
    return get_kernel(spec)(*arrays), spec.evaluate(*arrays)


@st.composite
def pool_case(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pads = tuple(draw(st.integers(0, k[i // 2] - 1)) for i in range(4))  # (top, bottom, left, right)
    h = draw(st.integers(max(1, k[0] - pads[0] - pads[1]), 13))
    w = draw(st.integers(max(1, k[1] - pads[2] - pads[3]), 13))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 5)), h, w)
    dtype = draw(st.sampled_from(["int8", "float32"]))
    return draw(tensors(dtype, shape)), k, s, pads


@pytest.mark.parametrize("kind", ["max", "avg"])
@SETTINGS
@given(case=pool_case(), include_pad=st.booleans())
def test_pool2d(kind, case, include_pad):
    x, k, s, pads = case
    spec = make_pool2d(TensorType.of(x, "pool"), kind, k, s, pads, include_pad)
    got, want = run_spec(spec, x)
    if kind == "avg" and x.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def test_int8_avg_pool_rounds_half_up():
    x = np.array([[[[1, 2], [-1, -2]]]], np.int8)  # row means 1.5 and -1.5
    np.testing.assert_array_equal(functions.avg_pool2d(x, (1, 2))[..., 0], [[[2, -1]]])


@SETTINGS
@given(
    x=st.sampled_from(["int8", "float32"]).flatmap(
        lambda d: hnp.array_shapes(min_dims=4, max_dims=4, max_side=9).flatmap(lambda s: tensors(d, s))
    )
)
def test_global_avg_pool(x):
    got, want = run_spec(make_global_avg_pool(TensorType.of(x, "gap")), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 if x.dtype == np.float32 else 0)


@SETTINGS
@given(data=st.data())
def test_softmax_any_axis(data):
    x = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=40).flatmap(lambda s: tensors("float32", s)))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    got, want = run_spec(make_softmax(TensorType.of(x, "softmax"), axis), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.sum(axis=axis), 1.0, rtol=1e-5)


@SETTINGS
@given(
    dtype=st.sampled_from(["int8", "int32", "float32"]),
    shape=hnp.array_shapes(min_dims=4, max_dims=4, max_side=13),
    batch=st.sampled_from([1, 2, 4]),
    block=st.sampled_from([1, 3, 4, 8, 16, 32]),
)
def test_pack_unpack_blocked_layout(dtype, shape, batch, block):
    x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    packed = functions.pack_blocked(x, batch, block)
    n, c, h, w = shape
    nb, cb = -(-n // batch), -(-c // block)
    assert packed.shape == (nb, cb, h, w, batch, block)
    for ni in range(nb * batch):  # blocked[n/bn, c/B, h, w, n%bn, c%B] = x[n, c, h, w], zero padding
        for ci in range(cb * block):
            want = x[ni, ci] if ni < n and ci < c else 0
            np.testing.assert_array_equal(packed[ni // batch, ci // block, :, :, ni % batch, ci % block], want)
    np.testing.assert_array_equal(packed, make_pack(TensorType.of(x, "p"), batch, block).evaluate(x))
    np.testing.assert_array_equal(functions.unpack_blocked(packed, c, n), x)


@SETTINGS
@given(data=st.data())
def test_transpose(data):
    x = data.draw(hnp.array_shapes(min_dims=1, max_dims=5, max_side=7).flatmap(lambda s: tensors("int8", s)))
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    got, want = run_spec(make_transpose(TensorType.of(x, "t"), perm), x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        ((2, 20, 33), (0, 2, 1)),
        ((1, 35, 9, 17), (0, 2, 3, 1)),
        ((1, 17, 6, 48), (0, 3, 1, 2)),
        ((32, 16), (1, 0)),
    ],
)
@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_transpose_register_tiles_and_remainders(shape, perm, dtype):
    x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    np.testing.assert_array_equal(functions.transpose(x, perm), x.transpose(perm))


@SETTINGS
@given(data=st.data())
def test_concat(data):
    base = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=6))
    axis = data.draw(st.integers(0, len(base) - 1))
    arrays = []
    for _ in range(data.draw(st.integers(1, 4))):
        shape = list(base)
        shape[axis] = data.draw(st.integers(1, 5))
        arrays.append(data.draw(tensors("float32", tuple(shape))))
    got, want = run_spec(make_concat(tuple(TensorType.of(a, "c") for a in arrays), axis), *arrays)
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(data=st.data())
def test_pad(data):
    dtype = data.draw(st.sampled_from(["int8", "float32"]))
    x = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=6).flatmap(lambda s: tensors(dtype, s)))
    pads = [(data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in x.shape]
    value = data.draw(st.integers(-128, 127))
    got, want = run_spec(make_pad(TensorType.of(x, "pad"), pads, value), x)
    np.testing.assert_array_equal(got, want)


@st.composite
def slice_case(draw):
    dtype = draw(st.sampled_from(["int8", "int32", "float32"]))
    x = draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=7).flatmap(lambda s: tensors(dtype, s)))
    starts, stops, steps = [], [], []
    for d in x.shape:
        step = draw(st.sampled_from([1, 2, 3, -1, -2]))
        start = draw(st.integers(0, d - 1))
        stop = draw(st.integers(start + 1, d) if step > 0 else st.integers(-1, start - 1))
        starts, stops, steps = starts + [start], stops + [stop], steps + [step]
    return x, starts, stops, steps


@SETTINGS
@given(case=slice_case())
def test_slice_against_python_slicing(case):
    x, starts, stops, steps = case
    got, want = run_spec(make_slice(TensorType.of(x, "slice"), starts, stops, steps), x)
    index = tuple(slice(a, None if b < 0 else b, s) for a, b, s in zip(starts, stops, steps, strict=True))
    np.testing.assert_array_equal(got, x[index])
    np.testing.assert_array_equal(want, x[index])


def test_slice_refuses_empty_and_out_of_range():
    x = np.zeros((4, 5), np.float32)
    with pytest.raises(UnsupportedError, match="slice: range.*along axis 1 of size 5"):
        functions.strided_slice(x, (0, 3), (4, 3), (1, 1))
    with pytest.raises(UnsupportedError, match="slice: step 0 along axis 0"):
        functions.strided_slice(x, (0, 0), (4, 5), (0, 1))


@SETTINGS
@given(
    data=st.data(),
    a_batch=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
    mkn=st.tuples(st.integers(1, 9), st.integers(1, 40), st.integers(1, 33)),
)
def test_matmul_broadcasts_batches_like_numpy(data, a_batch, mkn):
    m, k, n = mkn
    b_batch = data.draw(hnp.broadcastable_shapes(a_batch, max_side=3))
    a = data.draw(tensors("float32", (*a_batch, m, k)))
    b = data.draw(tensors("float32", (*b_batch, k, n)))
    got, want = run_spec(make_matmul(TensorType.of(a, "matmul"), TensorType.of(b, "matmul")), a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == want.shape == exact.shape
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(exact).max())) * k)


def _resize_by_hand(x: np.ndarray, sizes, mode: str, coord: str, nearest: str) -> np.ndarray:
    """Element by element from the per-axis taps, in float64: the separable oracle's independent twin."""
    f = ResizeFilter(mode, coord, nearest)
    taps = [resize_taps(n, m, m / n, f) for n, m in zip(x.shape, sizes, strict=True)]
    out = np.zeros(sizes)
    for o in np.ndindex(*sizes):
        total = 0.0
        for pick in np.ndindex(*(t[0].shape[1] for t in taps)):
            w, idx = 1.0, []
            for ax, p in enumerate(pick):
                w *= taps[ax][1][o[ax], p]
                idx.append(taps[ax][0][o[ax], p])
            total += w * float(x[tuple(idx)])
        out[o] = total
    return out


@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("sizes", [(1, 2, 9, 4), (2, 2, 3, 11), (1, 1, 1, 1)])
def test_resize_kernel_against_its_taps(mode, coord, sizes):
    x = np.random.default_rng(3).normal(0, 1, (sizes[0], 2, 5, 7)).astype(np.float32)
    scales = [m / n for m, n in zip(sizes, x.shape, strict=True)]
    spec = make_resize(TensorType.of(x, "resize"), mode, coord, "round_prefer_floor", scales, sizes)
    got, want = run_spec(spec, x)
    by_hand = _resize_by_hand(x, sizes, mode, coord, "round_prefer_floor")
    np.testing.assert_allclose(want, by_hand, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_nearest_resize_of_int8_is_a_gather_and_linear_refuses_it():
    x = np.arange(-60, 60, dtype=np.int8).reshape(1, 2, 6, 10)
    got = functions.resize(x, (1, 2, 3, 20), mode="nearest", coordinate_mode="asymmetric", nearest_mode="floor")
    np.testing.assert_array_equal(got, x[:, :, ::2][:, :, :, np.arange(20) // 2])
    with pytest.raises(UnsupportedError, match="resize: linear resize needs float32, got int8"):
        functions.resize(x, (1, 2, 3, 20), mode="linear")


@SETTINGS
@given(
    dtype=st.sampled_from(["int8", "float32"]),
    m=st.integers(1, 5),
    k=st.integers(1, 70),
    n=st.integers(1, 20),
)
def test_dense(dtype, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    if dtype == "int8":
        x, w = (rng.integers(-128, 128, s, dtype=np.int8) for s in ((m, k), (n, k)))
    else:
        x, w = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (n, k)))
    got, want = run_spec(make_dense(TensorType.of(x, "d"), TensorType.of(w, "d")), x, w)
    if dtype == "int8":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dense_int8_saturated_inputs_and_fused_epilogue():
    x = np.full((2, 300), -128, np.int8)
    w = np.full((5, 300), -128, np.int8)
    bias = np.array([0, 32767, 32768, -(2**23), 2**23], np.int32)
    got = functions.dense(x, w, bias, epilogue=[ew.requantize(1, 16), ew.relu()])
    # acc = 4915200 + bias; (acc + 2^15) >> 16 = 75, 75, 76, -53 -> relu 0, 203 -> 127
    np.testing.assert_array_equal(got, np.broadcast_to(np.array([75, 75, 76, 0, 127], np.int8), (2, 5)))


@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cin = groups * draw(st.integers(1, 3))
    cout = groups * draw(st.integers(1, 5))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (k[0] - 1) + 1 - pads[0] - pads[1]), 12))  # (top, bottom, left, right)
    w = draw(st.integers(max(1, dil[1] * (k[1] - 1) + 1 - pads[2] - pads[3]), 12))
    dtype = draw(st.sampled_from(["int8", "float32"]))
    x = draw(tensors(dtype, (draw(st.integers(1, 2)), cin, h, w)))
    wt = draw(tensors(dtype, (cout, cin // groups, *k)))
    return x, wt, stride, pads, dil, groups


@settings(max_examples=25, deadline=None)
@given(case=conv_case())
def test_conv2d_grouped_strided_dilated(case):
    x, w, stride, pads, dil, groups = case
    spec = make_conv2d(TensorType.of(x, "c"), TensorType.of(w, "c"), stride, pads, dil, groups)
    got, want = run_spec(spec, x, w)
    if x.dtype == np.int8:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("fill", [-128, 127])
def test_conv2d_int8_long_reduction_stays_exact(fill):
    """300 channels x 3x3 = 2700 terms of up to 2^14: float32 partial sums would round without chunking."""
    x = np.full((1, 300, 5, 17), fill, np.int8)
    x[0, ::7, 2, 3] = 1  # break the symmetry a little
    w = np.full((9, 300, 3, 3), -128, np.int8)
    w[:, ::5] = 127
    got, want = run_spec(make_conv2d(TensorType.of(x, "c"), TensorType.of(w, "c"), 1, 1), x, w)
    np.testing.assert_array_equal(got, want)
    assert np.abs(want).max() > 2**24


def test_depthwise_conv_int8_with_per_channel_requantize_epilogue():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 8, 9, 10), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 1, 3, 3), dtype=np.int8)
    bias = rng.integers(-5000, 5000, 8, dtype=np.int32)
    m = rng.integers(2**29, 2**30, (1, 8, 1, 1), dtype=np.int32)
    s = np.full((1, 8, 1, 1), 40, np.int32)
    steps = [ew.requantize(m, s), ew.relu()]
    got = functions.conv2d(x, w, bias, padding=1, groups=8, epilogue=steps)
    r = resolve_steps(None, [ew.add(bias.reshape(1, -1, 1, 1)), *steps])
    spec = make_conv2d(TensorType.of(x, "c"), TensorType.of(w, "c"), 1, 1, 1, 8, r.operand_types, r.steps)
    np.testing.assert_array_equal(got, spec.evaluate(x, w, *r.operands))
    assert got.dtype == np.int8 and got.min() >= 0


@pytest.mark.parametrize(
    ("call", "op"),
    [
        (lambda: functions.conv2d(np.zeros((1, 4, 5, 5), np.int8), np.zeros((4, 4, 3, 3), np.float32)), "conv2d"),
        (lambda: functions.conv2d(np.zeros((1, 4, 5, 5), np.int8), np.zeros((4, 3, 3, 3), np.int8)), "conv2d"),
        (
            lambda: functions.conv2d(np.zeros((1, 4, 5, 5), np.int8), np.zeros((4, 2, 3, 3), np.int8), groups=3),
            "conv2d",
        ),
        (
            lambda: functions.conv2d(np.zeros((1, 4, 2, 2), np.float32), np.zeros((4, 4, 3, 3), np.float32)),
            "conv2d",
        ),
        (lambda: functions.conv2d(np.zeros((1, 4, 5, 5), np.int32), np.zeros((4, 4, 3, 3), np.int32)), "conv2d"),
        (
            lambda: functions.conv2d(
                np.zeros((1, 4, 5, 5), np.int8),
                np.zeros((4, 4, 3, 3), np.int8),
                epilogue=[ew.add(np.zeros((2, 4, 3, 3), np.int32))],
            ),
            "conv2d",
        ),
        (lambda: functions.dense(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)), "dense"),
        (lambda: functions.max_pool2d(np.zeros((1, 2, 5, 5), np.int32), 2), "max_pool2d"),
        (lambda: functions.avg_pool2d(np.zeros((1, 2, 5, 5), np.float32), 2, 1, 2), "avg_pool2d"),
        (lambda: functions.max_pool2d(np.zeros((2, 5, 5), np.float32), 2), "max_pool2d"),
        (lambda: functions.softmax(np.zeros((2, 5), np.int8)), "softmax"),
        (lambda: functions.softmax(np.zeros((2, 5), np.float32), axis=2), "softmax"),
        (lambda: functions.unpack_blocked(np.zeros((1, 2, 3, 3, 1, 16), np.int8), 40), "unpack_blocked"),
        (lambda: functions.concat([np.zeros((2, 3), np.int8), np.zeros((2, 3), np.float32)]), "concat"),
        (lambda: functions.concat([np.zeros((2, 3), np.int8), np.zeros((3, 3), np.int8)], axis=1), "concat"),
        (lambda: functions.pad(np.zeros((2, 3), np.int8), [(1, 1), (0, 0)], 300), "pad"),
        (lambda: functions.transpose(np.zeros((2, 3), np.int8), (0, 0)), "transpose"),
        (lambda: functions.global_avg_pool(np.zeros((2, 3, 4, 4), np.float64)), "global_avg_pool"),
        (lambda: functions.relu([1.0, 2.0]), "chain"),
    ],
)
def test_bad_input_names_the_operator(call, op):
    with pytest.raises(UnsupportedError, match=f"^{op}: "):
        call()


# ---------------------------------------------------------------------------------------------------------
# The input and output steps of a model: im2col packed, softmax of int8, float32 tables


@pytest.mark.parametrize(
    "shape,kernel,stride,padding,dilation,packed",
    [
        ((1, 3, 40, 38), 7, 2, 3, 1, (1, 16)),  # ResNet's first layer
        ((1, 3, 33, 33), 3, 2, 1, 1, (1, 16)),  # MobileNet's and the detectors'
        ((3, 5, 9, 11), 3, 1, 1, 2, (2, 16)),  # padded images in the last image block, dilation
        ((2, 4, 6, 7), (2, 3), (2, 1), (0, 1, 1, 0), 1, (4, 8)),  # no interior column: every pixel checked
    ],
)
def test_im2col_packed_equals_im2col_then_pack(shape, kernel, stride, padding, dilation, packed):
    from vdla.cpu_fallback.specs import make_im2col, make_pack

    x = np.random.default_rng(len(shape)).integers(-128, 128, shape).astype(np.int8)
    spec = make_im2col(TensorType(shape, "int8"), kernel, stride, padding, dilation, packed=packed)
    plain = make_im2col(TensorType(shape, "int8"), kernel, stride, padding, dilation)
    want = make_pack(plain.out, *packed).evaluate(plain.evaluate(x))
    np.testing.assert_array_equal(get_kernel(spec)(x), want)
    np.testing.assert_array_equal(spec.evaluate(x), want)


def _step_graph(nodes, inputs, outputs):
    from vdla.graph.graph import Graph

    return Graph({k: TensorType(s, d) for k, (s, d) in inputs.items()}, nodes, outputs)


def test_a_model_input_step_packs_in_the_im2col_kernel():
    """quantize -> im2col -> pack_blocked (a model's first CPU step) runs as two kernels, the quantize and
    the im2col writing the blocked layout, equal to the graph interpreter."""
    from vdla.cpu_fallback.stacking import compile_graph
    from vdla.graph.graph import Node
    from vdla.graph.interp import evaluate

    win = {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
    nodes = [
        Node("quantize", ("x",), "q", {"scale": 0.02, "zero_point": 0}),
        Node("im2col", ("q",), "cols", win),
        Node("pack_blocked", ("cols",), "packed", {"batch": 1, "block": 16}),
    ]
    g = _step_graph(nodes, {"x": ((1, 3, 20, 22), "float32")}, ["packed"])
    compiled = compile_graph(g)
    assert [type(s.kernel.spec).__name__ for s in compiled.groups] == ["ChainSpec", "Im2colSpec"]
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 20, 22)).astype(np.float32)}
    np.testing.assert_array_equal(compiled.run(x)["packed"], evaluate(g, x)["packed"])


def test_an_im2col_read_elsewhere_is_not_packed_in_its_kernel():
    from vdla.cpu_fallback.stacking import compile_graph
    from vdla.graph.graph import Node

    win = {"kernel": [3, 3], "stride": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
    nodes = [Node("im2col", ("q",), "cols", win), Node("pack_blocked", ("cols",), "packed", {"batch": 1, "block": 16})]
    g = _step_graph(nodes, {"q": ((1, 2, 5, 5), "int8")}, ["packed", "cols"])
    im2col, pack = (s.kernel.spec for s in compile_graph(g).groups)
    assert im2col.packed is None and type(pack).__name__ == "PackSpec"


def test_softmax_of_a_dequantized_int8_tensor_reads_the_int8_values():
    """dequantize -> softmax along a strided axis (a detector's box distributions) runs as one kernel of the
    int8 values, exps from a 256-entry table: within float32 rounding of the float64 softmax, rows summing
    to one; a zero point cancels."""
    from vdla.cpu_fallback.stacking import compile_graph
    from vdla.graph.graph import Node
    from vdla.graph.interp import evaluate

    nodes = [
        Node("dequantize", ("q",), "d", {"scale": 0.07, "zero_point": 3}),
        Node("softmax", ("d",), "p", {"axis": 2}),
    ]
    g = _step_graph(nodes, {"q": ((1, 4, 16, 30), "int8")}, ["p"])
    compiled = compile_graph(g)
    (group,) = compiled.groups
    assert group.kernel.spec.scale == 0.07 and group.kernel.spec.x.dtype == "int8"
    q = np.random.default_rng(1).integers(-128, 128, (1, 4, 16, 30)).astype(np.int8)
    q[0, 0, :, 0] = [-128] * 15 + [127]  # the widest difference, 255
    got = compiled.run({"q": q})["p"]
    np.testing.assert_allclose(got, evaluate(g, {"q": q})["p"], rtol=2e-6, atol=1e-30)
    np.testing.assert_allclose(got.sum(axis=2), 1.0, rtol=1e-5)
    np.testing.assert_allclose(group.kernel.spec.evaluate(q), got, rtol=2e-6, atol=1e-30)


def test_softmax_of_int8_refuses_a_bad_scale_or_kind():
    from vdla.cpu_fallback.specs import make_softmax

    for scale, kind in [(0.0, "softmax"), (float("inf"), "softmax"), (0.1, "log_softmax")]:
        with pytest.raises(UnsupportedError, match="softmax of int8"):
            make_softmax(TensorType((2, 8), "int8"), -1, kind, scale=scale)
