"""ONNX backend node tests through import -> simplify -> CPU JIT in float32 (benchmarks/onnx_conformance.py):
every case whose operators vdla's importer maps either passes or is refused before anything runs with
UnsupportedError / FrontendError; a wrong answer, a crash or a refusal while running fails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("llvmlite")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import onnx_conformance as conformance  # noqa: E402


@pytest.fixture(scope="module")
def results():
    res, total = conformance.run_all()
    return res, total


def test_every_considered_node_case_passes_or_is_refused_before_running(results):
    res, total = results
    failed = [f"{r.name} [{r.stage}]: {r.message}" for r in res if r.status == "fail"]
    assert not failed, "\n".join(failed)
    assert total > 1000 and len(res) > 300  # the onnx package's cases were found and most are considered


def test_conformance_covers_the_operators_models_need(results):
    res, _ = results
    table = conformance.per_operator(res)
    for op in (
        "Conv", "Gemm", "MatMul", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Mul",
        "Softmax", "Flatten", "Reshape", "Transpose", "Concat", "Sigmoid", "Tanh", "Exp", "QuantizeLinear",
        "DequantizeLinear", "Div", "Sqrt", "Slice", "Split", "Resize", "BatchNormalization",
    ):  # fmt: skip
        assert op in table, op
        assert table[op]["pass"] > 0, (op, table[op])
    assert sum(r.status == "pass" for r in res) >= 300


def test_every_matmul_and_every_nearest_or_linear_resize_case_passes(results):
    """Batched matmuls of computed operands (numpy's broadcasting and 1-D rules) and every Resize case but
    cubic interpolation, tf_crop_and_resize and antialiased downsampling (refused) run and are right."""
    res, _ = results
    by_name = {r.name: r for r in res}
    for name in ("test_matmul_2d", "test_matmul_3d", "test_matmul_4d", "test_matmul_bcast", "test_matmul_1d_1d"):
        assert by_name[name].status == "pass", by_name[name]
    resize = [r for r in res if r.name.startswith("test_resize_")]
    refused = ("cubic", "tf_crop_and_resize", "antialias")
    for r in resize:
        assert r.status == ("unsupported" if any(w in r.name for w in refused) else "pass"), r
    assert sum(r.status == "pass" for r in resize) >= 20


def test_unsupported_cases_are_refused_with_a_reason_naming_the_node_or_model(results):
    res, _ = results
    for r in res:
        if r.status == "unsupported":
            assert r.stage in ("import", "simplify", "compile"), r
            assert "node '" in r.message or "ONNX model" in r.message or "no CPU kernel" in r.message, r
