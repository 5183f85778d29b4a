"""Elementwise kernels and stacked chains against their numpy references (property-based)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vdla.cpu_fallback import UnsupportedError, compile_chain, ew, functions, set_disk_cache
from vdla.graph.epilogue import Epilogue
from vdla.graph.oracle import epilogue
from vdla.isa.arith import requantize

set_disk_cache(None)
SETTINGS = settings(max_examples=15, deadline=None)

shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=11)
int8s = st.integers(-128, 127)


def f32_arrays(shape, lo=-50.0, hi=50.0):
    return hnp.arrays(np.float32, shape, elements=st.floats(lo, hi, width=32))


def check_chain(x, steps, *, exact=True, rtol=2e-6, atol=0.0):
    """Compile the chain, run it on the arrays given in the steps, compare with the numpy reference."""
    kernel = compile_chain(x, steps)
    got = functions.elementwise(x, steps)
    operands = [o for s in steps for o in s.operands if isinstance(o, np.ndarray) and o is not x]
    unique = list({id(o): o for o in operands}.values())
    want = kernel.spec.evaluate(x, *unique)
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


@st.composite
def broadcast_pair(draw, dtype_a=np.float32, dtype_b=np.float32):
    shape = draw(shapes)
    bshape = draw(hnp.broadcastable_shapes(shape, min_side=1, max_side=11))
    elems = {
        np.float32: st.floats(-50, 50, width=32),
        np.int8: int8s,
        np.int32: st.integers(-(2**31), 2**31 - 1),
    }
    a = draw(hnp.arrays(dtype_a, shape, elements=elems[dtype_a]))
    b = draw(hnp.arrays(dtype_b, bshape, elements=elems[dtype_b]))
    return a, b


@pytest.mark.parametrize("op", [ew.add, ew.sub, ew.mul, ew.maximum, ew.minimum])
@SETTINGS
@given(pair=broadcast_pair())
def test_float_binary_broadcast(op, pair):
    a, b = pair
    check_chain(a, [op(b)])


@SETTINGS
@given(pair=broadcast_pair())
def test_division_by_a_tensor_is_ieee_like_numpy(pair):
    """Bit for bit numpy's float32 division, including x / 0 -> +-inf and 0 / 0 -> NaN."""
    a, b = pair
    b = np.where(np.abs(b) < 1, np.float32(0), b).astype(np.float32)  # zeros in the divisor too
    got = check_chain(a, [ew.div(b)])
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(got, np.broadcast_to(a / b, got.shape))


@SETTINGS
@given(x=shapes.flatmap(lambda s: f32_arrays(s, -5.0, 1e6)))
def test_sqrt_is_correctly_rounded_and_nan_below_zero(x):
    got = check_chain(x, [ew.sqrt()])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, np.sqrt(x))  # numpy's float32 sqrt is correctly rounded too


def test_div_and_sqrt_stack_into_one_kernel_and_refuse_integers():
    x = np.linspace(-3, 3, 50, dtype=np.float32).reshape(5, 10)
    var = np.abs(x[:, :1]) + np.float32(0.5)
    kernel = compile_chain(x, [ew.sub(x[:1]), ew.div(var), ew.sqrt()])
    want = np.sqrt((x - x[:1]) / var)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(kernel(x, x[:1], var), want)
    with pytest.raises(UnsupportedError, match="div: requires a float32 value, got int32"):
        compile_chain(np.zeros(4, np.int32), [ew.div(2)])
    with pytest.raises(UnsupportedError, match="sqrt: requires a float32 input, got int8"):
        compile_chain(np.zeros(4, np.int8), [ew.sqrt()])


@pytest.mark.parametrize("op", [ew.add, ew.sub, ew.mul, ew.maximum, ew.minimum])
@SETTINGS
@given(
    pair=st.one_of(
        broadcast_pair(np.int8, np.int8),
        broadcast_pair(np.int32, np.int8),
        broadcast_pair(np.int32, np.int32),
    )
)
def test_int_binary_widen_to_int32_and_wrap(op, pair):
    a, b = pair
    got = check_chain(a, [op(b)])
    assert got.dtype == np.int32


@SETTINGS
@given(x=shapes.flatmap(f32_arrays), lo=st.floats(-10, 0, width=32), width=st.floats(0, 20, width=32))
def test_relu_and_clip_float(x, lo, width):
    check_chain(x, [ew.relu()])
    check_chain(x, [ew.clip(float(lo), float(lo + width))])


@SETTINGS
@given(x=shapes.flatmap(lambda s: hnp.arrays(np.int8, s, elements=int8s)), lo=int8s, hi=int8s)
def test_clip_int8_keeps_dtype_when_bounds_fit(x, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    assert check_chain(x, [ew.clip(lo, hi)]).dtype == np.int8
    assert check_chain(x, [ew.clip(lo - 300, hi)]).dtype == np.int32


@SETTINGS
@given(x=shapes.flatmap(lambda s: f32_arrays(s, -110.0, 100.0)))
def test_exp_sigmoid_tanh_accuracy(x):
    check_chain(x, [ew.exp()], exact=False, rtol=3e-7 * 8, atol=1e-37)
    check_chain(x, [ew.sigmoid()], exact=False, rtol=2e-6, atol=1e-37)
    check_chain(x, [ew.tanh()], exact=False, rtol=1e-6, atol=1e-30)


def test_transcendental_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.7, 89.5, -87.5, -103.0, -200.0, 1e-30, -1e-30], np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(functions.exp(x), np.exp(x), rtol=1e-6, atol=1e-44)
        np.testing.assert_allclose(functions.sigmoid(x), 1 / (1 + np.exp(-x)), rtol=1e-6, atol=1e-44)
    np.testing.assert_allclose(functions.tanh(x), np.tanh(x), rtol=1e-6)


@SETTINGS
@given(x=shapes.flatmap(lambda s: f32_arrays(s, -1e4, 1e4)), scale=st.floats(1e-3, 10.0), zp=st.integers(-20, 20))
def test_quantize_matches_quantizelinear(x, scale, zp):
    got = check_chain(x, [ew.quantize(scale, zp)])
    assert got.dtype == np.int8


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, 1e9, -1e9, -128.5], np.float32)
    np.testing.assert_array_equal(functions.quantize(x, 1.0), [0, 2, 2, 0, -2, 126, 127, 127, -128, -128])


@SETTINGS
@given(
    x=shapes.flatmap(lambda s: hnp.arrays(np.int8, s, elements=int8s)),
    scale=st.floats(1e-3, 10.0),
    zp=st.integers(-128, 127),
)
def test_dequantize(x, scale, zp):
    check_chain(x, [ew.dequantize(scale, zp)])


@SETTINGS
@given(
    x=shapes.flatmap(lambda s: hnp.arrays(np.int32, s, elements=st.integers(-(2**31), 2**31 - 1))),
    m=st.integers(-(2**31), 2**31 - 1),
    s=st.integers(0, 63),
    lo=int8s,
    hi=int8s,
)
def test_requantize_full_range(x, m, s, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    got = check_chain(x, [ew.requantize(m, s, lo, hi)])
    assert got.min() >= lo and got.max() <= hi


def test_requantize_is_the_accelerators_integer_function():
    """The JIT kernel computes vdla.isa.arith.requantize: the exact 64-bit product rounded once, then
    wrapped to int32 like the ALU's MUL."""
    rng = np.random.default_rng(7)
    x = rng.integers(-(2**31), 2**31, 4096, dtype=np.int64).astype(np.int32)
    for m, s in ((1, 0), (3, 1), (2**20 + 7, 17), (-(2**30), 31), (2**31 - 1, 24), (2**31 - 1, 55), (-(2**31), 63)):
        want = requantize(x, m, s)
        np.testing.assert_array_equal(functions.requantize(x, m, s), want)
    # 2^20 * 2^12 = 2^32: with no shift its low 32 bits are 0; shifted by 10 the exact product is 2^22
    np.testing.assert_array_equal(functions.requantize(np.array([2**20], np.int32), 2**12, 0), [0])
    np.testing.assert_array_equal(functions.requantize(np.array([2**20], np.int32), 2**12, 10), [127])
    # -2^31 * -2^31 = 2^62, the largest product: rounded by 63 it is 1 (half up), with no overflow
    np.testing.assert_array_equal(functions.requantize(np.array([-(2**31)], np.int32), -(2**31), 63), [1])


@SETTINGS
@given(data=st.data())
def test_rshift_and_the_accelerator_epilogue_as_a_chain(data):
    """mul, rshift, add, clip, cast is the accelerator's conv epilogue (vdla.graph.oracle.epilogue)."""
    c = data.draw(st.integers(1, 9))
    acc = data.draw(hnp.arrays(np.int32, (2, c, 3, 5), elements=st.integers(-(2**24), 2**24)))
    m = data.draw(hnp.arrays(np.int32, (1, c, 1, 1), elements=st.integers(0, 2**6)))
    s = data.draw(st.integers(0, 31))
    res = data.draw(hnp.arrays(np.int8, (2, c, 3, 5), elements=int8s))
    lo = data.draw(st.sampled_from([-128, 0]))
    steps = [ew.mul(m), ew.rshift(s), ew.add(res), ew.clip(lo, 127), ew.cast("int8")]
    got = check_chain(acc, steps)
    want = epilogue(acc, Epilogue(multiplier=m.ravel(), shift=s, clip=(lo, 127)), res)
    np.testing.assert_array_equal(got, want)
    tensor_shift = data.draw(hnp.arrays(np.int32, (1, c, 1, 1), elements=st.integers(-2, 35)))
    check_chain(acc, [ew.rshift(tensor_shift)])


def test_requantize_rounds_half_up_and_saturates():
    x = np.array([3, 5, -3, -5, 2**31 - 1, -(2**31), 1, -1], np.int32)
    # (x + 2) >> 2: 3 -> 1 (0.75), 5 -> 1 (1.25), -3 -> -1, -5 -> -1; halves round up: 2 -> 1, -2 -> 0
    np.testing.assert_array_equal(functions.requantize(x, 1, 2), [1, 1, -1, -1, 127, -128, 0, 0])
    np.testing.assert_array_equal(functions.requantize(np.array([2, -2, 6, -6], np.int32), 1, 2), [1, 0, 2, -1])


@SETTINGS
@given(data=st.data())
def test_per_channel_requantize_tensors(data):
    c = data.draw(st.integers(1, 9))
    x = data.draw(hnp.arrays(np.int32, (2, c, 3, 5), elements=st.integers(-(2**24), 2**24)))
    m = data.draw(hnp.arrays(np.int32, (1, c, 1, 1), elements=st.integers(0, 2**31 - 1)))
    s = data.draw(hnp.arrays(np.int32, (1, c, 1, 1), elements=st.integers(-3, 40)))  # clamped to [0, 31]
    check_chain(x, [ew.requantize(m, s)])


@SETTINGS
@given(x=shapes.flatmap(lambda s: f32_arrays(s, -300.0, 300.0)), to=st.sampled_from(["int8", "int32", "float32"]))
def test_cast_saturates(x, to):
    check_chain(x, [ew.cast(to)])
    check_chain(np.rint(x).astype(np.int32), [ew.cast(to)])


@SETTINGS
@given(data=st.data())
def test_stacked_residual_chain(data):
    """requantize + residual add (broadcast) + relu + clip + cast: one kernel, exact."""
    shape = data.draw(hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=13))
    acc = data.draw(hnp.arrays(np.int32, shape, elements=st.integers(-(2**30), 2**30)))
    rshape = data.draw(hnp.broadcastable_shapes(shape, min_side=1, max_side=13))
    res = data.draw(hnp.arrays(np.int8, rshape, elements=int8s))
    m, s = data.draw(st.integers(1, 2**31 - 1)), data.draw(st.integers(0, 31))
    steps = [ew.requantize(m, s), ew.add(res), ew.relu(), ew.clip(0, 127), ew.cast("int8")]
    got = check_chain(acc, steps)
    assert got.dtype == np.int8


@SETTINGS
@given(x=shapes.flatmap(f32_arrays))
def test_chain_reusing_its_input_swish(x):
    """x * sigmoid(x): the primary input used again as an operand is passed once."""
    kernel = compile_chain(x, [ew.sigmoid(), ew.mul(x)])
    assert len(kernel.inputs) == 1
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(kernel(x), x / (1 + np.exp(-x)), rtol=3e-6, atol=1e-30)


def test_float_dequantize_chain_on_odd_sizes():
    rng = np.random.default_rng(1)
    for n in (1, 7, 15, 17, 31, 33, 63, 65, 1023):
        q = rng.integers(-128, 128, n, dtype=np.int8)
        bias = rng.standard_normal(n).astype(np.float32)
        check_chain(q, [ew.dequantize(0.1, 3), ew.add(bias), ew.tanh(), ew.quantize(0.01)])


def at_offset(a: np.ndarray, offset: int) -> np.ndarray:
    """A C-contiguous copy of ``a`` whose data starts ``offset`` bytes past a cache-line boundary."""
    buf = np.empty(a.nbytes + 128, np.uint8)
    start = -buf.ctypes.data % 64 + offset
    view = buf[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    view[...] = a
    return view


@pytest.mark.parametrize("offsets", [(0, 0, 0), (16, 16, 16), (4, 32, 60), (48, 0, 8), (1, 2, 3)])
def test_chains_on_arrays_at_any_alignment(offsets):
    """Streaming chains first run up to the cache-line boundary of their output: any start address
    works, one not even aligned to the element size too, and each row of a broadcast gets its own peel."""
    rng = np.random.default_rng(2)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    i = lambda lo, hi, dtype, *s: rng.integers(lo, hi, s, dtype=dtype)  # noqa: E731
    cases = [  # x, its steps with their tensor operand (or None), and an exact numpy equivalent
        (f(3, 300), lambda y: [ew.add(y)], f(3, 300), np.add),
        (f(2, 5, 67), lambda y: [ew.mul(y), ew.relu()], f(1, 5, 1), lambda x, y: np.maximum(x * y, 0)),
        (f(2, 3, 70), lambda y: [ew.maximum(y)], f(2, 1, 70), np.maximum),
        (
            i(-999, 999, np.int32, 4, 129),
            lambda y: [ew.add(y), ew.clip(-128, 127), ew.cast("int8")],
            i(-128, 128, np.int8, 4, 129),
            lambda x, y: np.clip(x + y, -128, 127).astype(np.int8),
        ),
        (
            i(-128, 128, np.int8, 5, 301),
            lambda y: [ew.dequantize(0.5, 0), ew.add(y)],
            f(5, 301),
            lambda x, y: x.astype(np.float32) * np.float32(0.5) + y,
        ),
    ]
    for x, steps, y, want in cases:
        kernel = compile_chain(x, steps(y))
        xs, ys = at_offset(x, offsets[0]), at_offset(y, offsets[1])
        out = at_offset(np.zeros(kernel.out.shape, kernel.out.np_dtype), offsets[2])
        assert kernel(xs, ys, out=out) is out
        np.testing.assert_array_equal(out, want(x, y))


@pytest.mark.parametrize(
    ("x", "steps", "op"),
    [
        (np.zeros(4, np.int8), [ew.sigmoid()], "sigmoid"),
        (np.zeros(4, np.float32), [ew.add(np.zeros(4, np.int8))], "add"),
        (np.zeros(4, np.int32), [ew.clip(0.5, 2)], "clip"),
        (np.zeros(4, np.float32), [ew.requantize(1, 2)], "requantize"),
        (np.zeros(4, np.int32), [ew.requantize(1, 64)], "requantize"),
        (np.zeros(4, np.float32), [ew.mul(3, shift=2)], "mul"),
        (np.zeros(4, np.int32), [ew.mul(3, shift=64)], "mul"),
        (np.zeros(4, np.int32), [ew.rshift(32)], "rshift"),
        (np.zeros(4, np.float32), [ew.rshift(1)], "rshift"),
        (np.zeros(4, np.int32), [ew.requantize(1, 2, -200, 0)], "requantize"),
        (np.zeros(4, np.int8), [ew.quantize(0.1)], "quantize"),
        (np.zeros(4, np.float32), [ew.quantize(-1.0)], "quantize"),
        (np.zeros(4, np.float32), [ew.mul(np.zeros(3, np.float32))], "chain"),
        (np.zeros(4, np.float64), [ew.relu()], "chain"),
        (np.zeros(4, np.uint8), [ew.relu()], "chain"),
        (np.zeros(4, np.float32), [ew.add(np.zeros(4, np.float16))], "add"),
        (np.zeros(4, np.float32), [ew.cast("int16")], "cast"),
        (np.zeros(4, np.float32), [ew.add(float("nan"))], "add"),
        (np.zeros(4, np.float32), [], "chain"),
    ],
)
def test_unsupported_combinations_name_the_operator(x, steps, op):
    with pytest.raises(UnsupportedError, match=f"^{op}: "):
        functions.elementwise(x, steps)
