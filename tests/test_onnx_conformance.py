"""ONNX backend node tests through import -> simplify -> CPU JIT in float32 (benchmarks/onnx_conformance.py):
every node case of the installed onnx package either passes or is refused before anything runs with
UnsupportedError / FrontendError; a wrong answer, a crash or a refusal while running fails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.conformance  # the ONNX node cases: make test-all and CI

pytest.importorskip("onnx")
pytest.importorskip("llvmlite")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import onnx_conformance as conformance  # noqa: E402


@pytest.fixture(scope="session")  # kept while other modules' tests run between this one's on its worker
def results():
    res, total = conformance.run_all()
    return res, total


def test_every_node_case_passes_or_is_refused_before_running(results):
    res, total = results
    failed = [f"{r.name} [{r.stage}]: {r.message}" for r in res if r.status == "fail"]
    assert not failed, "\n".join(failed)
    assert total > 1600 and len(res) == total  # every case of the onnx package ran
    assert sum(r.status == "pass" for r in res) >= 1393  # (onnx 1.23.2: 1,393 of 1,669)


def test_conformance_covers_the_operators_models_need(results):
    res, _ = results
    table = conformance.per_operator(res)
    for op in (
        "Conv", "Gemm", "MatMul", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Mul",
        "Softmax", "Flatten", "Reshape", "Transpose", "Concat", "Sigmoid", "Tanh", "Exp", "QuantizeLinear",
        "DequantizeLinear", "Div", "Sqrt", "Slice", "Split", "Resize", "BatchNormalization",
        "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
    ):  # fmt: skip
        assert op in table, op
        assert table[op]["pass"] > 0, (op, table[op])
    assert sum(r.status == "pass" for r in res) >= 300


def test_conformance_covers_the_elementwise_math_logic_and_cast_families(results):
    """Each operator of these families passes some case (or is refused only for its dtypes or opset)."""
    res, _ = results
    table = conformance.per_operator(res)
    for op in (
        "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd", "BitwiseNot",
        "BitwiseOr", "BitwiseXor", "Cast", "CastLike", "Ceil", "Celu", "Cos", "Cosh", "Elu", "Equal", "Exp",
        "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "IsInf", "IsNaN", "LeakyRelu",
        "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Neg", "Or", "PRelu", "Pow",
        "Reciprocal", "Round", "Selu", "Sign", "Sin", "Sinh", "Softsign", "Sqrt", "Sum", "Swish", "Tan",
        "ThresholdedRelu", "Where",
    ):  # fmt: skip
        assert table[op]["pass"] > 0, (op, table[op])


def test_int64_bool_and_uint8_values_computed_at_run_time(results):
    """int64 data inputs are fed as int32 (not bound as constants) and computed by kernels; bool results and
    uint8 bit manipulation come out exact; an int64 left shift or power, which could exceed int32, is refused."""
    by_name = {r.name: r for r in results[0]}
    for name in ("test_mod_mixed_sign_int64", "test_where_long_example", "test_max_int64", "test_bitshift_right_int64",
                 "test_equal_bcast", "test_less_equal_uint8_expanded", "test_bitwise_and_ui8_bcast_4v3d",
                 "test_bitshift_left_uint8", "test_mod_uint8", "test_isinf_negative"):  # fmt: skip
        r = by_name[name]
        assert r.status == "pass" and not r.folded, r
    for name in ("test_bitshift_left_int64", "test_pow_types_int64_int64"):
        assert by_name[name].status == "unsupported" and "int64" in by_name[name].message, by_name[name]


def test_refused_cases_are_listed_by_reason(results):
    """Strings and float8 cases are refused for their data types, training operators as such."""
    by_name = {r.name: r for r in results[0]}
    assert by_name["test_equal_string"].reason == conformance.DTYPE_REASON
    training = [r for r in results[0] if any(op.startswith(conformance.TRAINING_DOMAIN) for op in r.ops)]
    assert training and all(r.status == "unsupported" and r.reason == conformance.TRAINING_REASON for r in training)


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
    Indices; int64 arithmetic on a shape fed at run time, which an expanded function body computes) or an
    opset before 11."""
    res, _ = results
    prefixes = ("test_gather", "test_scatter", "test_tile", "test_expand_dim", "test_depthtospace",
                "test_spacetodepth", "test_center_crop_pad", "test_reversesequence", "test_onehot",
                "test_edge_pad", "test_reflect_pad", "test_wrap_pad", "test_maxpool", "test_averagepool",
                "test_lppool", "test_globalmaxpool", "test_globalaveragepool", "test_compress", "test_gridsample",
                "test_constant_pad")  # fmt: skip
    needs = ("bool", "bfloat16", "Indices output", "must be a constant", "opset 10", "has dtype int64")
    mine = [r for r in res if r.name.startswith(prefixes)]
    for r in mine:
        assert r.status == "pass" or any(w in r.message for w in needs), r
    assert sum(r.status == "pass" for r in mine) >= 97


def test_every_if_loop_and_scan_case_passes(results):
    """Control flow (issue 51, item 5): a run-time If compiles both branches, Loop and Scan are unrolled."""
    res, _ = results
    cases = {r.name: r.status for r in res if r.name.startswith(("test_if", "test_loop", "test_scan"))}
    assert len(cases) >= 6 and all(s == "pass" for s in cases.values()), cases


def test_every_loss_attention_and_rotary_case_passes_or_needs_what_vdla_lacks(results):
    """NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss with targets fed at run time, Attention with bool
    masks and run-time padding lengths, RotaryEmbedding with run-time positions, bfloat16 ones in float32:
    every case passes, except function bodies (``_expanded``) doing int64 arithmetic on a run-time input."""
    res, _ = results
    mine = [r for r in res if r.name.startswith(("test_nllloss", "test_sce", "test_attention", "test_rotary"))]
    for r in mine:
        ok = r.status == "pass" or (r.status == "unsupported" and "has dtype int64" in r.message)
        assert ok and (r.status == "pass" or r.name.endswith("_expanded")), r
    assert sum(r.status == "pass" for r in mine) >= 288
