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
        "DequantizeLinear",
    ):  # fmt: skip
        assert op in table, op
        if op != "MatMul":  # MatMul's node tests multiply two computed tensors: no CPU kernel for that yet
            assert table[op]["pass"] > 0, (op, table[op])
    assert sum(r.status == "pass" for r in res) >= 200


def test_unsupported_cases_are_refused_with_a_reason_naming_the_node_or_model(results):
    res, _ = results
    for r in res:
        if r.status == "unsupported":
            assert r.stage in ("import", "simplify", "compile"), r
            assert "node '" in r.message or "ONNX model" in r.message or "no CPU kernel" in r.message, r
