"""The elementwise math, logic and conversion operators of vdla/graph/ew.py on the CPU JIT, against independent
references: float64 numpy and Python's math for the functions, numpy's C-semantics operations for remainders,
shifts and conversions, the ONNX specification's rules written out here for the edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from vdla.cpu_fallback import compile_chain, functions  # noqa: E402
from vdla.graph.ew import Step  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402

RNG = np.random.default_rng(7)


def _all_floats(n: int) -> np.ndarray:
    """``n`` float32s with uniformly random bit patterns (every exponent, subnormals, infinities, NaNs)."""
    return RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _ulp_error(got: np.ndarray, exact: np.ndarray) -> float:
    """The largest error of float32 ``got`` in units of the last place of float64 ``exact`` rounded to float32,
    after checking NaN and infinities agree."""
    with np.errstate(over="ignore"):
        rounded = exact.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    inf = np.isinf(rounded)
    np.testing.assert_array_equal(got[inf], rounded[inf])
    ok = np.isfinite(rounded)
    spacing = np.spacing(np.abs(rounded[ok])).astype(np.float64)
    return float((np.abs(got[ok].astype(np.float64) - exact[ok]) / spacing).max())


def _run(x: np.ndarray, op: str, *operands, **attrs) -> np.ndarray:
    return functions.elementwise(x, [Step(op, operands, attrs)])


FUNCTIONS = {
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_trigonometric_and_hyperbolic_functions_are_correctly_rounded_everywhere(op):
    """Evaluated in float64 (exact argument reduction for sin/cos/tan at any magnitude) and rounded once:
    within half an ulp plus a hair of the float64 result, over every float32 and over [-4, 4]."""
    x = np.concatenate([_all_floats(60_000), np.linspace(-4, 4, 20_001, dtype=np.float32)])
    x = np.concatenate([x, np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, 3.4e38], np.float32)])
    with np.errstate(all="ignore"):
        exact = FUNCTIONS[op](x.astype(np.float64))
    assert _ulp_error(_run(x, op), exact) <= 0.501


def test_sine_of_the_float32_nearest_a_multiple_of_pi_half():
    """The worst cases of argument reduction: float32s within 2^-30 relative of a multiple of pi/2."""
    x = np.array([16367173 * 2.0**72, 8.0e37, 3.0 * 2.0**100, 1.5707964, 1.5707963, 3.1415927, 105414350.0], np.float32)
    for op in ("sin", "cos", "tan"):
        assert _ulp_error(_run(x, op), FUNCTIONS[op](x.astype(np.float64))) <= 0.501


def _c_pow(x: float, y: float) -> float:
    """C99's pow (what ONNX's float32 reference, numpy's float32 power and onnxruntime compute), from Python's
    math.pow with the cases it raises for."""
    odd = y == int(y) and int(y) % 2 == 1 if math.isfinite(y) else False
    if y == 0 or x == 1:
        return 1.0
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == 0:
        return math.copysign(math.inf if y < 0 else 0.0, x if odd else 1.0)
    try:
        return math.pow(x, y)
    except OverflowError:
        return math.copysign(math.inf, x if odd else 1.0)
    except ValueError:
        return math.nan


SPECIAL = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1e-45, 3e38]


def test_pow_is_correctly_rounded_and_follows_c_for_the_special_values():
    """exp(y log|x|) in float64 and rounded once; the signs, NaNs, zeros, infinities and ones of C's pow."""
    x = np.concatenate([_all_floats(40_000), (RNG.standard_normal(40_000) * 4).astype(np.float32)])
    x[np.isinf(x)] = 1.0  # numpy's float64 power differs from C at -inf: the special cases below cover it
    y = np.concatenate([RNG.standard_normal(40_000) * 8, np.round(RNG.standard_normal(40_000) * 9)]).astype(np.float32)
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.float64), y.astype(np.float64))
    assert _ulp_error(compile_chain(x, [Step("pow", (y,))])(x, y), exact) <= 0.501
    sx, sy = (a.ravel() for a in np.meshgrid(np.float32(SPECIAL), np.float32(SPECIAL)))
    exact = np.array([_c_pow(float(a), float(b)) for a, b in zip(sx, sy, strict=True)])
    got = compile_chain(sx, [Step("pow", (sy,))])(sx, sy)
    assert _ulp_error(got, exact) <= 0.501
    np.testing.assert_array_equal(np.signbit(got[exact == 0]), np.signbit(exact[exact == 0]))
    n = RNG.integers(-40, 40, 10_000).astype(np.int32)  # an integer exponent tensor: exactly, in float64
    base = (RNG.standard_normal(10_000) * 3).astype(np.float32)
    with np.errstate(all="ignore"):
        exact = np.power(base.astype(np.float64), n.astype(np.float64))
    assert _ulp_error(compile_chain(base, [Step("pow", (n,))])(base, n), exact) <= 0.501


@pytest.mark.parametrize(("exponent", "ulp"), [(0, 0.0), (1, 0.0), (2, 0.5), (3, 1.5), (4, 2.0), (0.5, 0.5), (-1, 0.5)])
def test_pow_by_a_small_constant_is_multiplications_a_square_root_or_a_division(exponent, ulp):
    """At most two roundings more than C's pow (x^3, x^4), C's special values kept (+inf at -inf ^ 0.5)."""
    x = np.concatenate([(RNG.standard_normal(10_000) * 30).astype(np.float32), np.float32(SPECIAL)])
    exact = np.array([_c_pow(float(v), exponent) for v in x])
    assert _ulp_error(_run(x, "pow", exponent), exact) <= ulp + 0.001


def test_fmod_and_mod_equal_numpy_bit_for_bit():
    """C's fmodf (exact, from the mantissas in integers) and the floored remainder, on every float32 pair:
    numpy's np.fmod and np.mod, zero signs included."""
    a, b = _all_floats(200_000), _all_floats(200_000)
    b[:500], a[500:1000], b[1000:1500], a[1500:2000] = 0.0, np.inf, np.inf, 0.0
    with np.errstate(all="ignore"):
        for fmod, numpy_fn in ((1, np.fmod), (0, np.mod)):
            got = compile_chain(a, [Step("mod", (b,), {"fmod": fmod})])(a, b)
            want = numpy_fn(a, b)
            same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
            assert same.all(), (fmod, a[~same][:3], b[~same][:3], got[~same][:3], want[~same][:3])


@pytest.mark.parametrize("dtype", ["int8", "int32"])
def test_integer_remainders_follow_the_sign_rules_and_never_trap(dtype):
    """fmod takes the dividend's sign, mod the divisor's (numpy's np.fmod and np.mod); a zero divisor gives 0
    and INT_MIN % -1 is 0 (no SIGFPE)."""
    info = np.iinfo(dtype)
    a = np.concatenate([RNG.integers(info.min, info.max + 1, 5000), [info.min, info.min, 7, -7]]).astype(dtype)
    b = np.concatenate([RNG.integers(-9, 10, 5000), [-1, 0, 0, 3]]).astype(dtype)
    with np.errstate(all="ignore"):
        for fmod, numpy_fn in ((1, np.fmod), (0, np.mod)):
            got = compile_chain(a, [Step("mod", (b,), {"fmod": fmod})])(a, b)
            assert got.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(got, numpy_fn(a, b))


def _onnx_shift(v: int, s: int, left: bool, bits: int) -> int:
    """ONNX BitShift of a signed ``bits``-wide integer, written from its specification."""
    if s < 0 or s >= bits:
        return -1 if not left and v < 0 else 0
    r = v << s if left else v >> s
    r &= (1 << bits) - 1
    return r - (1 << bits) if r >= 1 << (bits - 1) else r


@pytest.mark.parametrize(("dtype", "bits"), [("int8", 8), ("int32", 32)])
@pytest.mark.parametrize("left", [True, False])
def test_bit_shifts_follow_onnx_for_every_shift_amount(dtype, bits, left):
    info = np.iinfo(dtype)
    v = np.repeat(np.array([info.min, -77, -1, 0, 1, 93, info.max], dtype), 80)
    s = np.tile(np.arange(-40, 40), 7).astype(dtype if dtype == "int32" else np.int8)
    got = compile_chain(v, [Step("shift_left" if left else "shift_right", (s,))])(v, s)
    want = [_onnx_shift(int(a), int(c), left, bits) for a, c in zip(v, s, strict=True)]
    np.testing.assert_array_equal(got, np.array(want, dtype))


def test_bitwise_and_logical_operators_on_integers_and_bools():
    a = RNG.integers(-(2**31), 2**31, 1000).astype(np.int32)
    b = RNG.integers(-(2**31), 2**31, 1000).astype(np.int32)
    for op, fn in (("bit_and", np.bitwise_and), ("bit_or", np.bitwise_or), ("bit_xor", np.bitwise_xor)):
        np.testing.assert_array_equal(compile_chain(a, [Step(op, (b,))])(a, b), fn(a, b))
        p, q = np.array([0, 0, 1, 1], bool), np.array([0, 1, 0, 1], bool)
        got = compile_chain(p, [Step(op, (q,))])(p, q)
        assert got.dtype == np.bool_ and got.tolist() == fn(p, q).tolist()
    np.testing.assert_array_equal(_run(a, "bit_not"), ~a)
    np.testing.assert_array_equal(_run(a[:8].astype(np.int8), "bit_not"), ~a[:8].astype(np.int8))
    assert _run(np.array([True, False]), "bit_not").tolist() == [False, True]


def test_comparisons_give_bools_false_on_nan_and_compare_int8_with_int32():
    x = np.array([1.0, 2.0, np.nan, -np.inf, 0.0, -0.0], np.float32)
    y = np.array([2.0, 2.0, np.nan, -np.inf, -0.0, 1.0], np.float32)
    for op, fn in (("equal", np.equal), ("less", np.less), ("less_equal", np.less_equal), ("greater", np.greater),
                   ("greater_equal", np.greater_equal)):  # fmt: skip
        got = compile_chain(x, [Step(op, (y,))])(x, y)
        assert got.dtype == np.bool_ and got.tolist() == fn(x, y).tolist(), op
    a, b = np.array([-128, 0, 127], np.int8), np.array([-129, 0, 300], np.int32)
    assert compile_chain(a, [Step("less", (b,))])(a, b).tolist() == [False, False, True]


def test_where_selects_with_broadcasting_and_keeps_the_dtype():
    cond = RNG.integers(0, 2, (3, 1, 5)).astype(bool)
    a = RNG.standard_normal((4, 5)).astype(np.float32)
    b = RNG.standard_normal((3, 4, 1)).astype(np.float32)
    np.testing.assert_array_equal(compile_chain(cond, [Step("where", (a, b))])(cond, a, b), np.where(cond, a, b))
    i = np.arange(5, dtype=np.int8)
    got = compile_chain(cond, [Step("where", (i, -3))])(cond, i)
    assert got.dtype == np.int8 and got.tolist() == np.where(cond, i, np.int8(-3)).tolist()


@pytest.mark.parametrize("dtype", ["int8", "int32", "bool"])
def test_convert_is_c_conversion_truncating_wrapping_and_testing_nonzero(dtype):
    """ONNX Cast's float -> int truncates toward zero (out of range saturates, NaN is 0), int32 -> int8 keeps
    the low bits, anything -> bool is != 0 (NaN is true); bool -> number is 0 or 1."""
    x = np.array([2.7, -2.7, 0.5, -0.0, 1e10, -1e10, np.nan, np.inf, 127.9, -128.9], np.float32)
    got = _run(x, "convert", dtype=dtype)
    if dtype == "bool":
        assert got.tolist() == (x != 0).tolist()
    else:
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
        assert got.tolist() == [0 if math.isnan(v) else int(np.clip(np.trunc(v), lo, hi)) for v in x.astype(float)]
    ints = np.array([300, -129, 255, 7, 0], np.int32)
    assert _run(ints, "convert", dtype="int8").tolist() == ints.astype(np.int8).tolist()
    assert _run(np.array([True, False]), "convert", dtype="float32").tolist() == [1.0, 0.0]
    assert _run(np.array([True, False]), "cast", dtype="int8").tolist() == [1, 0]


def test_isnan_isinf_sign_round_floor_ceil():
    x = np.array([np.nan, np.inf, -np.inf, -2.5, -0.5, 0.5, 1.5, 2.5, -0.0, 3.7], np.float32)
    assert _run(x, "isnan").tolist() == np.isnan(x).tolist()
    assert _run(x, "isinf").tolist() == np.isinf(x).tolist()
    assert _run(x, "isinf", detect_negative=0).tolist() == (x == np.inf).tolist()
    assert _run(x, "isinf", detect_positive=0).tolist() == (x == -np.inf).tolist()
    assert not _run(x, "isinf", detect_positive=0, detect_negative=0).any()
    for op, fn in (("sign", np.sign), ("round", np.rint), ("floor", np.floor), ("ceil", np.ceil)):
        np.testing.assert_array_equal(_run(x, op), fn(x))
    assert _run(np.array([-128, -3, 0, 9], np.int8), "sign").tolist() == [-1, -1, 0, 1]


def _gelu(v: float) -> float:
    return 0.5 * v * math.erfc(-v / math.sqrt(2))


def _gelu_tanh(v: float) -> float:
    z = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
    return 0.0 if z <= -350 else v / (1 + math.exp(-2 * z))


def _celu(v: float) -> float:
    return v if math.isnan(v) else max(0.0, v) + min(0.0, 0.7 * math.expm1(v / float(np.float32(0.7))))


# (op, operands, attributes, exact (NaN in, NaN out unless the operator's comparison gives 0), ulp, range: the
# results stay normal floats); the tanh form of gelu loses about |z| ulp as z is rounded (z < -3.4 below -3)
ACTIVATIONS = [
    ("gelu", (), {}, _gelu, 8, 14),
    ("gelu", (), {"approximate": "tanh"}, _gelu_tanh, 24, 3),
    ("elu", (1.3,), {}, lambda v: v if v >= 0 else 1.3 * math.expm1(v), 4, 20),
    ("selu", (1.6733, 1.0507), {}, lambda v: 1.0507 * (v if v > 0 else 1.6733 * math.expm1(v)), 4, 20),
    ("celu", (0.7,), {}, _celu, 4, 20),
    ("mish", (), {}, lambda v: v * math.tanh(math.log1p(math.exp(v)) if v < 30 else v), 8, 20),
    ("swish", (1.0,), {}, lambda v: v / (1 + math.exp(-v)), 4, 80),
    ("softsign", (), {}, lambda v: v / (1 + abs(v)), 1.5, 20),
    ("prelu", (0.25,), {}, lambda v: v if v >= 0 else 0.25 * v, 0.5, 20),
    ("thresholded_relu", (1.0,), {}, lambda v: v if v > 1.0 else 0.0, 0, 20),
    ("shrink", (0.5, 0.25), {}, lambda v: v + 0.25 if v < -0.5 else v - 0.25 if v > 0.5 else 0.0, 0.5, 20),
]


@pytest.mark.parametrize(("op", "operands", "attrs", "exact", "ulp", "span"), ACTIVATIONS)
def test_activations_are_within_a_few_ulp_of_the_exact_function(op, operands, attrs, exact, ulp, span):
    """Including the far negative tails, where a naive 1 + erf, 1 + tanh or exp - 1 would cancel."""
    x = np.concatenate([np.linspace(-span, span, 100_001, dtype=np.float32), [np.nan, 0.0, -0.0, 1e-30, -1e-30]])
    want = np.array([exact(float(v)) for v in x])
    got = _run(x.astype(np.float32), op, *operands, **attrs)
    assert _ulp_error(got, want) <= ulp


@pytest.mark.parametrize(
    ("op", "dtype", "operands", "message"),
    [
        ("sin", "int32", (), "requires a float32 input, got int32"),
        ("bit_and", "float32", (1,), "takes int or bool values, got float32"),
        ("shift_left", "bool", (1,), "takes int values, got bool"),
        ("less", "bool", (1,), "takes float or int values, got bool"),
        ("where", "float32", (1.0, 2.0), "the condition must be bool, got float32"),
        ("pow", "int32", (0.5,), "an integer base needs a constant non-negative integer exponent"),
        ("add", "bool", (1,), "takes float or int values, got bool"),
    ],
)
def test_unsupported_dtypes_are_refused_naming_the_operator(op, dtype, operands, message):
    with pytest.raises(UnsupportedError, match=f"^{op}: {message}"):
        functions.elementwise(np.zeros(4, dtype), [Step(op, operands)])
