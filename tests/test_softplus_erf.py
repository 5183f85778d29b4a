"""Softplus and Erf, each one elementwise definition (vdla/graph/ew.py): imported from ONNX, run by the CPU
JIT and by the numpy interpreter, against onnxruntime and against the exact functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper  # noqa: E402

from vdla.cpu_fallback import compile_graph, functions  # noqa: E402
from vdla.frontend import import_onnx  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph import oracle  # noqa: E402
from vdla.graph.ew import EwStep, Step  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.types import TensorType, UnsupportedError  # noqa: E402

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1e-8, -1e-8, 0.5, -0.5, 3.9, -3.9, 4.0, 10.0, -10.0]


def _model(op_type: str, shape: tuple[int, ...]):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], name=op_type.lower())], op_type, [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _inputs(shape: tuple[int, ...], scale: float) -> np.ndarray:
    x = (np.random.default_rng(0).standard_normal(shape) * scale).astype(np.float32)
    x.flat[: len(SPECIAL)] = SPECIAL
    return x


def _exact(fn, x: np.ndarray) -> np.ndarray:
    """``fn`` in float64 on every element, rounded to float32 (NaN for NaN)."""
    return np.array([fn(float(v)) if not math.isnan(v) else math.nan for v in x.ravel()]).reshape(x.shape)


def _within_ulp(got: np.ndarray, exact: np.ndarray, ulp: float) -> None:
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    inf = np.isinf(exact)
    np.testing.assert_array_equal(got[inf], exact[inf])
    ok = np.isfinite(exact)
    spacing = np.spacing(np.abs(exact[ok]).astype(np.float32)).astype(np.float64)
    err = np.abs(got[ok].astype(np.float64) - exact[ok]) / spacing
    assert err.max() <= ulp, (err.max(), got[ok].ravel()[err.argmax()], exact[ok].ravel()[err.argmax()])


def _softplus(v: float) -> float:
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


@pytest.mark.parametrize(("op_type", "scale"), [("Softplus", 8.0), ("Erf", 2.0)])
def test_onnx_import_runs_on_the_jit_and_the_interpreter_like_onnxruntime(op_type, scale):
    shape = (2, 3, 7, 9)
    model = _model(op_type, shape)
    x = _inputs(shape, scale)
    want = reference_run(model, {"x": x})["y"]
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == [op_type.lower()]
    for got in (compile_graph(graph)(x=x)["y"], evaluate(graph, {"x": x})["y"]):
        assert got.dtype == np.float32 and got.shape == shape
        np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-7, equal_nan=True)


def test_erf_is_accurate_to_float32_rounding():
    """The JIT kernel and the numpy semantics (one expression) within 2 ulp of math.erf everywhere,
    +-1 at the ends, NaN for NaN."""
    x = np.concatenate([np.linspace(-6, 6, 200_001, dtype=np.float32), np.array(SPECIAL, np.float32)])
    exact = _exact(math.erf, x)
    _within_ulp(functions.elementwise(x, [Step("erf")]), exact, 2.0)
    step = EwStep("erf")
    _within_ulp(oracle.chain((step,), (TensorType(x.shape, "float32"),), [x], x.shape, "float32"), exact, 2.0)
    assert functions.elementwise(np.array([np.inf, -np.inf], np.float32), [Step("erf")]).tolist() == [1.0, -1.0]


def test_softplus_is_stable_for_large_magnitudes():
    """max(x, 0) + log1p(exp(-|x|)): x itself for large x (no overflow to inf), exp(x) for very negative x
    (down to the subnormals), within a few ulp of the exact value everywhere."""
    x = np.concatenate([np.linspace(-100, 100, 200_001, dtype=np.float32), np.array(SPECIAL, np.float32)])
    x = np.concatenate([x, np.array([1e30, 3e38, -1e30, -3e38, 88.0, 89.0, -87.0, -103.0], np.float32)])
    got = functions.elementwise(x, [Step("softplus")])
    _within_ulp(got, _exact(_softplus, x), 4.0)
    assert got[-8:-6].tolist() == [np.float32(1e30), np.float32(3e38)] and got[-6] == 0.0


@pytest.mark.parametrize("op", ["softplus", "erf"])
def test_integer_inputs_are_refused_naming_the_operator(op):
    with pytest.raises(UnsupportedError, match=f"^{op}: requires a float32 input, got int8"):
        functions.elementwise(np.zeros(4, np.int8), [Step(op)])
