"""The onnxruntime reference (:mod:`vdla.frontend.reference`): graph optimizations off unless asked, the
layer-by-layer comparison and its rounding-tie test, the machine description, and the rule that every
comparison with onnxruntime builds its session there."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.frontend.reference import compare_layers, cpu_int8_isa, reference_run, reference_session  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _tie_conv(scale_y: float) -> onnx.ModelProto:
    """x -> Q(1/16) -> DQ -> Conv 3x3 with int8 weights of scale 1/16 -> Q(scale_y) -> DQ: with scale_y
    1/128 every value is an integer accumulator over 2, so each odd accumulator is an exact .5 tie."""
    rng = np.random.default_rng(3)
    w = rng.integers(-20, 21, (4, 2, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.array(1 / 16, np.float32), "sx"),
        numpy_helper.from_array(np.array(0, np.int8), "zx"),
        numpy_helper.from_array(w, "wq"),
        numpy_helper.from_array(np.full(4, 1 / 16, np.float32), "sw"),
        numpy_helper.from_array(np.zeros(4, np.int8), "zw"),
        numpy_helper.from_array(np.array(scale_y, np.float32), "sy"),
        numpy_helper.from_array(np.array(0, np.int8), "zy"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wf"], axis=0),
        helper.make_node("Conv", ["xf", "wf"], ["yf"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tie",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_the_reference_runs_the_graph_as_written():
    model = _tie_conv(1 / 128)
    assert reference_session(model).get_session_options().graph_optimization_level == (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    assert reference_session(model, optimized=True).get_session_options().graph_optimization_level != (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    x = np.random.default_rng(0).normal(0, 2, (1, 2, 6, 6)).astype(np.float32)
    want = reference_run(model, {"x": x})["y"]
    # DequantizeLinear, the float convolution, QuantizeLinear (round half to even, saturate): in numpy
    xq = np.clip(np.rint(x * 16), -128, 127)
    w = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "wq")).astype(np.float64)
    pad = np.pad(xq / 16, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((1, 4, 6, 6))
    for i in range(3):
        for j in range(3):
            y += np.einsum("oc,nchw->nohw", w[:, :, i, j] / 16, pad[:, :, i : i + 6, j : j + 6])
    np.testing.assert_array_equal(want, np.clip(np.rint(y * 128), -128, 127) / 128)


def test_layer_comparison_finds_rounding_ties():
    """Exact .5 ties: QuantizeLinear rounds them half to even, vdla's requantization half up, so they
    differ by one step on about half of the ties; every difference is reported as a tie. With a scale
    that makes no ties, the layers agree exactly."""
    x = [{"x": np.random.default_rng(s).normal(0, 2, (1, 2, 6, 6)).astype(np.float32)} for s in range(4)]
    tied = _tie_conv(1 / 128)
    (layer,) = [a for a in compare_layers(tied, lower_qdq(simplify(import_onnx(tied))), x) if a.value == "yq"]
    assert layer.elements == 4 * 144 and layer.worst == 1 and layer.differing > 20
    assert layer.ties == layer.differing
    plain = _tie_conv(0.0123)
    layers = compare_layers(plain, lower_qdq(simplify(import_onnx(plain))), x)
    assert {a.value for a in layers} >= {"xq", "yq"} and all(a.differing == 0 for a in layers)


def test_cpu_description_names_the_int8_extensions():
    info = cpu_int8_isa()
    assert info["cpu"] and info["machine"]
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if re.search(r"\bavx2\b", flags):
        assert "AVX2" in info["int8_isa"]
    if re.search(r"\bavx512_vnni\b", flags):
        assert info["int8_isa"][0] in ("AMX-INT8", "AVX-512 VNNI")


def test_every_onnxruntime_comparison_uses_the_reference():
    """No test, benchmark, example or library module builds an onnxruntime session of its own."""
    own = ROOT / "vdla" / "frontend" / "reference.py"
    offenders = [
        str(p.relative_to(ROOT))
        for folder in ("vdla", "tests", "benchmarks", "examples")
        for p in (ROOT / folder).rglob("*.py")
        if p != own and re.search(r"InferenceSession\(|SessionOptions\(", p.read_text())
    ]
    assert offenders == []
