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


def test_every_matmul_and_every_resize_case_passes(results):
    """Batched matmuls of computed operands (numpy's broadcasting and 1-D rules) and every Resize case
    (nearest, linear and cubic, antialiased, tf_crop_and_resize) run and are right."""
    res, _ = results
    by_name = {r.name: r for r in res}
    for name in ("test_matmul_2d", "test_matmul_3d", "test_matmul_4d", "test_matmul_bcast", "test_matmul_1d_1d"):
        assert by_name[name].status == "pass", by_name[name]
    resize = [r for r in res if r.name.startswith("test_resize_")]
    for r in resize:
        assert r.status == "pass", r
    assert len(resize) >= 39


def test_every_layout_indexing_and_pooling_case_passes_or_needs_what_vdla_lacks(results):
    """The layout, indexing and pooling operators' own cases pass, except those needing a tensor vdla cannot
    hold (Compress's bool condition, which vdla would need as a constant; bfloat16; MaxPool's int64
    Indices) or an opset before 11."""
    res, _ = results
    prefixes = ("test_gather", "test_scatter", "test_tile", "test_expand_dim", "test_depthtospace",
                "test_spacetodepth", "test_center_crop_pad", "test_reversesequence", "test_onehot",
                "test_edge_pad", "test_reflect_pad", "test_wrap_pad", "test_maxpool", "test_averagepool",
                "test_lppool", "test_globalmaxpool", "test_globalaveragepool", "test_compress", "test_gridsample",
                "test_constant_pad")  # fmt: skip
    needs = ("bool", "bfloat16", "Indices output", "must be a constant", "opset 10")
    mine = [r for r in res if r.name.startswith(prefixes)]
    for r in mine:
        assert r.status == "pass" or any(w in r.message for w in needs), r
    assert sum(r.status == "pass" for r in mine) >= 110
