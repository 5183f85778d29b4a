"""Reductions on any axes, the softmax family, layer/RMS normalization, cumulative sums, top-k and triangles: each
operator's JIT kernel against its numpy semantics (one registry definition), the semantics against numpy and
math written independently, and the ONNX converters against onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from vdla.cpu_fallback import compile_graph, get_kernel  # noqa: E402
from vdla.cpu_fallback.specs import make_reduce  # noqa: E402
from vdla.graph import oracle  # noqa: E402
from vdla.graph.graph import Graph, Node  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.ops import REDUCE_KINDS, infer_types  # noqa: E402
from vdla.graph.types import TensorType, UnsupportedError  # noqa: E402

RNG = np.random.default_rng(7)


def _values(shape: tuple[int, ...], dtype: str, specials: bool = False) -> np.ndarray:
    if dtype == "float32":
        x = (RNG.standard_normal(shape) * 3).astype(np.float32)
        if specials and x.size > 8:
            x.flat[[1, 4, 6]] = [np.nan, np.inf, -np.inf]
        return x
    lo, hi = (-128, 128) if dtype == "int8" else (-(2**31), 2**31)
    return RNG.integers(lo, hi, shape, dtype=np.int64).astype(dtype)


def _one_node(op: str, x: np.ndarray, attrs: dict, *more: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The JIT result and the interpreter's (numpy semantics) of one node on ``x`` (and ``more`` inputs)."""
    names = ["x", *(f"in{i}" for i in range(len(more)))]
    arrays = dict(zip(names, (x, *more), strict=True))
    graph = Graph({n: TensorType.of(a, n) for n, a in arrays.items()}, [Node(op, tuple(names), "y", attrs)], ["y"])
    return compile_graph(graph)(**arrays)["y"], evaluate(graph, arrays)["y"]


def _same(got: np.ndarray, want: np.ndarray, exact: bool, ulp: int = 4) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact or got.dtype != np.float32:
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_max_ulp(got[ok], want[ok], maxulp=ulp)


# float32 sums of up to 40 terms added in another order than numpy's (and exp before them): 8 ulp held on one
# draw of values and 9 to 12 on others; a reordered float32 sum of n terms can be off by up to n - 1 ulp
FLOAT_SUM_ULP = 16

SHAPES_AXES = [
    ((3, 5, 7), (1,)),
    ((4, 33), (1,)),
    ((6, 2, 3), (0,)),
    ((2, 3, 4, 5), (0, 2)),
    ((2, 3, 4, 5), (1, 3)),
    ((2, 1, 40), (0, 1)),
    ((7,), ()),
    ((3, 4), (0, 1)),
]


@pytest.mark.parametrize("kind", REDUCE_KINDS)
def test_reduce_kernel_equals_its_numpy_semantics_on_every_axis_layout(kind):
    """Row-wise (last axis reduced) and column-wise (last axis kept) kernels, every dtype the kind takes;
    NaN and infinities propagate as in numpy; float sums within a few ulp (float64 sums in another order)."""
    for dtype in ("float32", "int32", "int8"):
        for shape, axes in SHAPES_AXES:
            if kind in ("argmax", "argmin") and len(axes) != 1:
                continue
            x = _values(shape, dtype, specials=kind in ("max", "min", "argmax", "argmin", "log_sum_exp", "sum"))
            if kind in ("log_sum", "prod") and dtype == "float32":
                x = np.abs(x) + np.float32(0.5)
            for keep in (True, False):
                attrs = {"kind": kind, "axes": axes, "keepdims": keep, "select_last_index": kind == "argmin"}
                try:
                    got, want = _one_node("reduce", x, attrs)
                except UnsupportedError:
                    assert dtype != "float32", (kind, dtype)
                    continue
                _same(got, want, exact=kind in ("max", "min", "argmax", "argmin"), ulp=FLOAT_SUM_ULP)


@pytest.mark.parametrize("kind", REDUCE_KINDS)
def test_reduce_spec_evaluates_what_its_kernel_returns(kind):
    """ReduceSpec.evaluate (what tests and cpu-bench compare a reduce kernel with) equals the kernel (float
    results within float32 rounding: log_sum_exp near 0 is a log of a sum near 1) and the interpreter's semantics
    of the reduce node, with and without the reduced axes kept."""
    x = (np.random.default_rng(49).standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)
    x.flat[[1, 17]] = np.nan, np.inf
    if kind in ("log_sum", "prod"):
        x = np.abs(x) + np.float32(0.5)
    exact = kind in ("max", "min", "argmax", "argmin")
    for axes in [(1,), (3,)] if kind in ("argmax", "argmin") else [(1,), (3,), (0, 2)]:
        for keep in (True, False):
            spec = make_reduce(TensorType.of(x, "x"), kind, axes, keep, select_last_index=kind == "argmin")
            want = spec.evaluate(x)
            assert want.shape == spec.out.shape and want.dtype == spec.out.dtype
            got = get_kernel(spec)(x)
            if exact:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
            attrs = {"kind": kind, "axes": axes, "keepdims": keep, "select_last_index": kind == "argmin"}
            np.testing.assert_array_equal(want, _one_node("reduce", x, attrs)[1])


def test_reduce_semantics_against_numpy_and_math():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x64 = x.astype(np.float64)
    expect = {
        "sum": x64.sum(axis=(0, 2)),
        "mean": x64.mean(axis=(0, 2)),
        "l1": np.abs(x64).sum(axis=(0, 2)),
        "l2": np.sqrt((x64**2).sum(axis=(0, 2))),
        "sum_square": (x64**2).sum(axis=(0, 2)),
        "log_sum_exp": [math.log(math.fsum(math.exp(v) for v in x64[:, j].ravel())) for j in range(4)],
        "max": x.max(axis=(0, 2)),
        "prod": x64.prod(axis=(0, 2)),
    }
    for kind, want in expect.items():
        got = oracle.reduce(x, kind, (0, 2)).reshape(4)
        np.testing.assert_allclose(got, np.asarray(want, np.float32), rtol=1e-6, err_msg=kind)
    big = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)  # no overflow; log(0) = -inf
    np.testing.assert_array_equal(
        oracle.reduce(big, "log_sum_exp", (1,)).ravel(), np.float32([1000 + math.log(2), -np.inf])
    )
    ties = np.array([[1, 5, 5, 2], [np.nan, 0, np.nan, 3]], np.float32)
    assert oracle.reduce(ties, "argmax", (1,)).ravel().tolist() == [1, 0]
    assert oracle.reduce(ties, "argmax", (1,), select_last_index=True).ravel().tolist() == [2, 2]
    wraps = np.array([2**31 - 1, 1], np.int32)
    assert oracle.reduce(wraps, "sum", (0,)).tolist() == [-(2**31)]


def test_reduce_refuses_what_it_does_not_define():
    x = TensorType((2, 3), "int32")
    for kind, axes, why in (
        ("mean", (1,), "mean of int32"),
        ("argmax", (0, 1), "exactly one axis"),
        ("sum", (2,), "out of range"),
        ("sum", (1, -1), "repeated"),
        ("median", (0,), "kind 'median'"),
    ):
        with pytest.raises(UnsupportedError, match=why):
            infer_types(Graph({"x": x}, [Node("reduce", ("x",), "y", {"kind": kind, "axes": axes})], ["y"]))


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "hardmax"])
def test_softmax_family_kernels_on_any_axis(kind):
    for shape in ((3, 5, 7), (4, 33), (2, 1, 3, 6)):
        for axis in range(-len(shape), len(shape)):
            x = _values(shape, "float32")
            x.flat[::5] = x.flat[1]  # ties: hardmax takes the first
            if kind == "hardmax":
                x.flat[7] = np.nan
            got, want = _one_node(kind, x, {"axis": axis})
            if kind == "log_softmax":  # x - max - log(sum): absolute errors of the log's order (cancellation)
                np.testing.assert_allclose(got, want, rtol=0, atol=4e-6 * float(np.abs(want).max()))
                continue
            _same(got, want, exact=kind == "hardmax", ulp=FLOAT_SUM_ULP)
    x = RNG.standard_normal((4, 6)).astype(np.float64)
    e = np.exp(x - x.max(axis=0))
    np.testing.assert_allclose(oracle.softmax(x.astype(np.float32), 0, "log_softmax"), np.log(e / e.sum(0)), atol=1e-6)


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_normalization_kernels_with_broadcast_scale_and_bias(kind):
    for shape, axis in (((3, 5, 7), 1), ((4, 33), -1), ((2, 3, 4, 5), 2), ((6, 2), 0)):
        x = _values(shape, "float32") + np.float32(2)
        tail = shape[axis:]
        for affine in ((), (tail,), (tail, (tail[-1],)), ((shape[1], *([1] * (len(shape) - 2))),)):
            arrays = [RNG.standard_normal(s).astype(np.float32) for s in affine]
            got, want = _one_node(kind, x, {"axis": axis, "epsilon": 1e-3}, *arrays)
            _same(got, want, exact=False, ulp=4)
    x = RNG.standard_normal((3, 8)).astype(np.float64)
    d = x - x.mean(1, keepdims=True)
    want = d / np.sqrt((d**2).mean(1, keepdims=True) + np.float32(1e-5))
    np.testing.assert_allclose(oracle.normalize(x.astype(np.float32), 1, 1e-5), want, rtol=2e-6, atol=1e-6)
    want = x / np.sqrt((x**2).mean(1, keepdims=True) + np.float32(1e-5))
    np.testing.assert_allclose(oracle.normalize(x.astype(np.float32), 1, 1e-5, False), want, rtol=2e-6, atol=1e-6)


def test_cumsum_topk_trilu_kernels_are_exact():
    for shape, axis in (((3, 5, 7), 1), ((40,), 0), ((6, 2, 3), 0), ((2, 3, 9), -1)):
        for dtype in ("float32", "int32"):
            x = _values(shape, dtype)
            for exclusive in (False, True):
                for reverse in (False, True):
                    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
                    _same(*_one_node("cumsum", x, attrs), exact=True)
            if axis in (0, 1):  # CumProd (3 shapes, for the cold JIT time): int32 products wrap, float32 overflow
                for flag in (False, True):
                    attrs = {"axis": axis, "exclusive": flag, "reverse": flag, "product": True}
                    _same(*_one_node("cumsum", x, attrs), exact=True)
        for dtype in ("float32", "int32", "int8"):
            x = _values(shape, dtype)
            x.flat[::3] = x.flat[0]  # ties
            if dtype == "float32":
                x.flat[[2, 5]] = np.nan
            n = shape[axis]
            for k in sorted({1, 2, n}):
                for largest in (True, False):
                    for indices in (False, True):
                        attrs = {"k": k, "axis": axis, "largest": largest, "indices": indices}
                        _same(*_one_node("topk", x, attrs), exact=True)
    x = _values((2, 4, 5), "float32")
    for upper in (True, False):
        for k in (-5, -1, 0, 2, 9):
            got, want = _one_node("trilu", x, {"upper": upper, "k": k})
            _same(got, want, exact=True)
            np.testing.assert_array_equal(got, np.triu(x, k) if upper else np.tril(x, k))
    np.testing.assert_array_equal(oracle.cumsum(np.arange(1, 5, dtype=np.int32), 0, True, True), [9, 7, 4, 0])
    np.testing.assert_array_equal(oracle.cumsum(np.arange(1, 5, dtype=np.int32), 0, True, True, True), [24, 12, 4, 1])
    big = np.full(40, 7, np.int32)  # 7^k wraps modulo 2^32 as int32 multiplication does
    want = np.array([pow(7, k + 1, 2**32) for k in range(40)], np.int64)
    np.testing.assert_array_equal(oracle.cumsum(big, 0, product=True).view(np.uint32), want)
    values, index = oracle.topk(np.array([3, 1, 3, np.nan, 2], np.float32), 3, 0)
    assert np.isnan(values[0]) and values[1:].tolist() == [3, 3] and index.tolist() == [3, 0, 2]


def test_nll_loss_kernel_and_semantics():
    x = _values((3, 5, 2, 4), "float32", specials=True)
    target = RNG.integers(-1, 6, (3, 2, 4)).astype(np.int32)  # -1 and 5 lie outside the classes
    w = RNG.uniform(0.5, 2, 5).astype(np.float32)
    for weight in ((), (w,)):
        for ignore in (None, -1, 2):
            got, want = _one_node("nll_loss", x, {"ignore_index": ignore}, target, *weight)
            _same(got, want, exact=True)
    want = np.array(
        [
            [-x[n, t, i, j] * w[t] if 0 <= t < 5 else np.nan for (i, j), t in np.ndenumerate(target[n])]
            for n in range(3)
        ],
        np.float32,
    ).reshape(target.shape)
    np.testing.assert_array_equal(oracle.nll_loss(x, target, w), want)
    np.testing.assert_array_equal(oracle.nll_loss(x, target, w, ignore_index=-1)[target == -1], 0)


def test_cpu_fallback_functions_run_the_same_kernels():
    from vdla.cpu_fallback import functions

    x = _values((3, 4, 5), "float32")
    s = RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal(functions.reduce(x, "argmax", (1,), keepdims=False), x.argmax(1))
    l2 = np.sqrt((x.astype(np.float64) ** 2).sum((0, 2), keepdims=True))
    np.testing.assert_allclose(functions.reduce(x, "l2", (0, 2)), l2, rtol=1e-6)
    np.testing.assert_allclose(
        functions.normalize(x, s, s, axis=2), oracle.normalize(x, 2, 1e-5, True, s, s), rtol=1e-6
    )
    np.testing.assert_array_equal(functions.cumsum(x, 1, reverse=True), oracle.cumsum(x, 1, reverse=True))
    values, index = functions.topk(x, 2, axis=1, largest=False)
    np.testing.assert_array_equal(index, np.argsort(x, axis=1, kind="stable")[:, :2])
    np.testing.assert_array_equal(values, np.sort(x, axis=1)[:, :2])
    np.testing.assert_array_equal(functions.trilu(x, upper=False, k=1), np.tril(x, 1))
    np.testing.assert_array_equal(functions.softmax(x, 0, "hardmax"), oracle.softmax(x, 0, "hardmax"))
