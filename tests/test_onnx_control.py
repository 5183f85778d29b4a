"""Control flow chosen at run time (issue 51, item 5): ``If`` on a computed condition, ``Loop`` with a trip
count known once the input shapes are fixed, ``Scan`` over a known sequence length, and the refusal of a
Loop that cannot be bounded.

The If model is a small CNN whose ``Sigmoid(GlobalAveragePool(conv(x))) >= 0.5`` selects one of two conv
heads that read the trunk's output (an outer-scope value). Both heads compile (to the accelerator with
calibration) and appear in the step table as ``If.then/...`` and ``If.else/...``.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.cli import main  # noqa: E402
from vdla.frontend.control import MAX_ITERATIONS  # noqa: E402
from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_model  # noqa: E402
from vdla.zoo.models import cosine  # noqa: E402

COS_MIN = 0.99
SHAPE = (1, 3, 8, 8)
OPSET = 17


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _head(name: str, rng: np.random.Generator) -> onnx.GraphProto:
    """A branch: a 3x3 conv of the outer trunk value ``t`` and a ReLU, 8 -> 4 channels."""
    w = _init(f"{name}_w", rng.normal(0, 0.3, (4, 8, 3, 3)))
    b = _init(f"{name}_b", rng.normal(0, 0.1, 4))
    nodes = [
        helper.make_node("Conv", ["t", w.name, b.name], [f"{name}_c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [f"{name}_c"], [f"{name}_y"]),
    ]
    out = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, 4, 8, 8])
    return helper.make_graph(nodes, name, [], [out], initializer=[w, b])


def if_model(seed: int = 0) -> onnx.ModelProto:
    """trunk conv+relu -> gate = Sigmoid(GlobalAvgPool(conv1x1(t))) >= 0.5 -> If(gate, head_a, head_b)."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w0", rng.normal(0, 0.4, (8, 3, 3, 3))),
        _init("b0", rng.normal(0, 0.1, 8)),
        _init("wg", rng.normal(0, 0.3, (1, 8, 1, 1))),
        _init("half", np.array(0.5)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["t0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["t0"], ["t"]),
        helper.make_node("Conv", ["t", "wg"], ["g0"]),
        helper.make_node("GlobalAveragePool", ["g0"], ["g1"]),
        helper.make_node("Sigmoid", ["g1"], ["g2"]),
        helper.make_node("ReduceMax", ["g2"], ["g3"], keepdims=0),
        helper.make_node("GreaterOrEqual", ["g3", "half"], ["gate"]),
        helper.make_node("If", ["gate"], ["y"], then_branch=_head("a", rng), else_branch=_head("b", rng)),
    ]
    graph = helper.make_graph(
        nodes, "gated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _gate(model: onnx.ModelProto, x: np.ndarray) -> bool:
    """Which branch onnxruntime takes for ``x``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.append(helper.make_tensor_value_info("gate", TensorProto.BOOL, []))
    return bool(reference_session(m).run(["gate"], {"x": x})[0])


def _inputs(model: onnx.ModelProto, n: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``n`` inputs taking the then branch and ``n`` taking the else branch (bright and dark images)."""
    rng = np.random.default_rng(seed)
    taken: dict[bool, list[np.ndarray]] = {True: [], False: []}
    for k in range(200):
        x = (rng.normal(0, 1, SHAPE) + (1.5 if k % 2 else -1.5)).astype(np.float32)
        taken[_gate(model, x)].append(x)
        if min(len(v) for v in taken.values()) >= n:
            break
    assert min(len(v) for v in taken.values()) >= n, {k: len(v) for k, v in taken.items()}
    return taken[True][:n], taken[False][:n]


@pytest.fixture(scope="module")
def gated():
    model = if_model()
    then_x, else_x = _inputs(model, 3, 1)
    calib = np.concatenate([*_inputs(model, 8, 2)[0], *_inputs(model, 8, 2)[1]])
    return model, then_x, else_x, calib


def test_if_float_matches_onnxruntime(gated):
    model, then_x, else_x, _ = gated
    art, _ = compile_model(model, input_shapes={"x": SHAPE})
    module, session = Module(art, "sim"), reference_session(model)
    for x in [*then_x, *else_x]:
        np.testing.assert_allclose(module.run(x), session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_if_calibrated_runs_both_heads_on_the_accelerator(gated):
    model, then_x, else_x, calib = gated
    art, _ = compile_model(model, calib={"x": calib}, input_shapes={"x": SHAPE})
    accel = [s.name for s in art.steps if s.kind == "accel"]
    assert any(n.startswith("If_7.then/") for n in accel) and any(n.startswith("If_7.else/") for n in accel), accel
    module, session = Module(art, "sim"), reference_session(model)
    for x in [*then_x, *else_x]:
        assert cosine(module.run(x), session.run(None, {"x": x})[0]) >= COS_MIN


def test_if_branches_of_different_shapes_are_refused():
    model = if_model()
    else_branch = next(a.g for a in model.graph.node[-1].attribute if a.name == "else_branch")
    else_branch.node[0].attribute.append(helper.make_attribute("strides", [2, 2]))
    with pytest.raises(UnsupportedError, match=r"If_7.*then branch gives float32\[1, 4, 8, 8\].*else branch"):
        compile_model(model, input_shapes={"x": SHAPE})


def test_cli_compiles_and_runs_the_if_model(gated, tmp_path, capsys):
    """``vdla compile MODEL --calib calib.npz``, then ``vdla run`` on inputs taking each branch."""
    model, then_x, else_x, calib = gated
    onnx.save(model, tmp_path / "gated.onnx")
    np.savez(tmp_path / "calib.npz", x=calib)
    out = tmp_path / "gated.vdla"
    args = ["compile", str(tmp_path / "gated.onnx"), "--calib", str(tmp_path / "calib.npz"), "-o", str(out)]
    assert main(args) == 0, capsys.readouterr().out
    text = capsys.readouterr().out
    assert "If_7.then/" in text and "If_7.else/" in text, text
    assert "only when gate is true" in text and "only when gate is false" in text, text  # each branch's steps
    session = reference_session(model)
    for x in [then_x[0], else_x[0]]:
        np.save(tmp_path / "x.npy", x)
        assert main(["run", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
        assert cosine(np.load(tmp_path / "y.npy"), session.run(None, {"x": x})[0]) >= COS_MIN


def _model(nodes: list, inputs: list, outputs: list, inits: list = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "control", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _f(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def loop_model(trips: int | None = 5, cond_runtime: bool = False) -> onnx.ModelProto:
    """Loop: carried s <- s * 0.5 + x (x from the outer scope), scan output s + iteration number."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Mul", ["s_in", "half"], ["s_half"]),
            helper.make_node("Add", ["s_half", "x"], ["s_out"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["s_out", "i_f"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            _f("s_in", [2, 3]),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _f("s_out", [2, 3]), _f("scan", [2, 3])],
    )
    inits = [_init("half", np.array(0.5)), _init("s0", np.zeros((2, 3)))]
    nodes = []
    if trips is None:
        nodes.append(helper.make_node("Identity", ["n"], ["M"]))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    if cond_runtime:
        inits.append(numpy_helper.from_array(np.array(0, np.int64), "zero"))
        nodes.append(helper.make_node("Greater", ["n", "zero"], ["c"]))
    else:
        inits.append(numpy_helper.from_array(np.array(True), "c"))
    nodes.append(helper.make_node("Loop", ["M", "c", "s0"], ["s", "scans"], body=body))
    inputs = [_f("x", [2, 3])] + (
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])] if trips is None or cond_runtime else []
    )
    return _model(nodes, inputs, [_f("s", [2, 3]), _f("scans", [trips or 1, 2, 3])], inits)


def _float_run_matches_onnxruntime(model: onnx.ModelProto, x: np.ndarray, outputs: list[str]) -> None:
    """``model`` compiled without calibration and run on sim gives onnxruntime's ``outputs`` for input x."""
    got = Module(compile_model(model)[0], "sim").run(x)
    want = reference_session(model).run(None, {"x": x})
    for name, w in zip(outputs, want, strict=True):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)


def test_loop_with_a_constant_trip_count_is_unrolled():
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    _float_run_matches_onnxruntime(loop_model(), x, ["s", "scans"])


def test_unbounded_loop_is_refused_naming_the_node():
    model = loop_model(trips=None, cond_runtime=True)
    model.graph.node[-1].name = "the_loop"
    with pytest.raises(UnsupportedError, match=r"the_loop.*computed at run time: vdla cannot bound the loop"):
        compile_model(model)


def scan_model(reverse: int = 0) -> onnx.ModelProto:
    """Scan: the cumulative sum of x[2, 5, 3] along axis 1, and each step's partial sum doubled."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "xt"], ["acc_out"]),
            helper.make_node("Add", ["acc_out", "acc_out"], ["twice"]),
        ],
        "body",
        [_f("acc_in", [2, 3]), _f("xt", [2, 3])],
        [_f("acc_out", [2, 3]), _f("twice", [2, 3])],
    )
    scan = helper.make_node(
        "Scan", ["acc0", "x"], ["acc", "ys"], body=body, num_scan_inputs=1, scan_input_axes=[1],
        scan_input_directions=[reverse], scan_output_axes=[-1],
    )  # fmt: skip
    return _model(
        [scan], [_f("x", [2, 5, 3])], [_f("acc", [2, 3]), _f("ys", [2, 3, 5])], [_init("acc0", np.zeros((2, 3)))]
    )


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_is_unrolled_over_its_sequence(reverse):
    x = np.random.default_rng(1).normal(size=(2, 5, 3)).astype(np.float32)
    _float_run_matches_onnxruntime(scan_model(reverse), x, ["acc", "ys"])


def test_loop_past_the_unroll_limit_is_refused_naming_the_node():
    model = loop_model(trips=MAX_ITERATIONS + 1)
    model.graph.node[-1].name = "long_loop"
    with pytest.raises(UnsupportedError, match=rf"long_loop.*trip count {MAX_ITERATIONS + 1} is above the"):
        compile_model(model)


def nested_model() -> onnx.ModelProto:
    """A Loop of 4 whose body holds an If on the iteration number (constant per copy) and an If on a computed
    sign (both branches compiled), each reading outer-scope values; the scan output is the first If's."""
    then = helper.make_graph([helper.make_node("Add", ["s_in", "x"], ["ta"])], "t", [], [_f("ta", [3])])
    other = helper.make_graph([helper.make_node("Sub", ["s_in", "x"], ["ea"])], "e", [], [_f("ea", [3])])
    relu = helper.make_graph([helper.make_node("Relu", ["a"], ["r"])], "t2", [], [_f("r", [3])])
    neg = helper.make_graph([helper.make_node("Neg", ["a"], ["ng"])], "e2", [], [_f("ng", [3])])
    body = helper.make_graph(
        [
            helper.make_node("Less", ["i", "two"], ["small"]),
            helper.make_node("If", ["small"], ["a"], then_branch=then, else_branch=other),
            helper.make_node("ReduceSum", ["a"], ["sa"], keepdims=0),
            helper.make_node("Greater", ["sa", "zero"], ["pos"]),
            helper.make_node("If", ["pos"], ["s_out"], then_branch=relu, else_branch=neg),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            _f("s_in", [3]),
        ],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), _f("s_out", [3]), _f("a", [3])],
    )
    inits = [
        numpy_helper.from_array(np.array(4, np.int64), "M"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        _init("s0", np.zeros(3)),
        _init("zero", np.array(0.0)),
    ]
    loop = helper.make_node("Loop", ["M", "", "s0"], ["s", "scan"], body=body)
    return _model([loop], [_f("x", [3])], [_f("s", [3]), _f("scan", [4, 3])], inits)


def test_ifs_nested_in_a_loop_body():
    model = nested_model()
    art, _ = compile_model(model)
    module, session = Module(art, "sim"), reference_session(model)
    for seed in range(4):
        x = np.random.default_rng(seed).normal(size=3).astype(np.float32)
        got, want = module.run(x), session.run(None, {"x": x})
        np.testing.assert_allclose(got["s"], want[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got["scan"], want[1], rtol=1e-6, atol=1e-6)
