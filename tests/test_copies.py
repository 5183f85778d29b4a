"""Data movement as 0/1 convolutions (``vdla.graph.copies``): a YOLO-style C2f block (split, residual add
after SiLU, concatenation) and a nearest upsampling run without a CPU step between layers; the rewrite is
exact in float; the accelerator equals the lowered graph bit for bit and onnxruntime's int8 reference within
one output step; a move whose data would go back to the CPU anyway is not made."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph.copies import COPY, accelerator_copies  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.graph.tables import fold_tables, quantize_early  # noqa: E402
from vdla.zoo.models import qdq_output_scale, quantize_qdq  # noqa: E402

RNG = np.random.default_rng(11)
SHAPE = (1, 16, 8, 8)


def _silu(x: str, out: str) -> list:
    return [helper.make_node("Sigmoid", [x], [f"{out}_s"]), helper.make_node("Mul", [x, f"{out}_s"], [out])]


def _c2f(half: int = 16) -> object:
    """x -> conv1x1 (2*half) -> SiLU -> split (half, half) -> a, b; m = SiLU(conv(SiLU(conv(b)))); r = b + m;
    concat(a, b, r) -> conv1x1 (16) -> SiLU -> nearest 2x -> conv3x3 stride 2 -> y."""
    c = 2 * half
    ws = {
        "w1": (c, 16, 1, 1),
        "wm1": (half, half, 3, 3),
        "wm2": (half, half, 3, 3),
        "w2": (16, 3 * half, 1, 1),
        "w3": (16, 16, 3, 3),
    }
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), k) for k, s in ws.items()]
    inits.append(numpy_helper.from_array(np.array([half, half], np.int64), "sizes"))
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), *_silu("c1", "s1")]
    nodes.append(helper.make_node("Split", ["s1", "sizes"], ["a", "b"], axis=1))
    nodes += [helper.make_node("Conv", ["b", "wm1"], ["m1"], pads=[1] * 4), *_silu("m1", "t1")]
    nodes += [helper.make_node("Conv", ["t1", "wm2"], ["m2"], pads=[1] * 4), *_silu("m2", "t2")]
    nodes.append(helper.make_node("Add", ["b", "t2"], ["r"]))
    nodes.append(helper.make_node("Concat", ["a", "b", "r"], ["cat"], axis=1))
    nodes += [helper.make_node("Conv", ["cat", "w2"], ["c2"]), *_silu("c2", "s2")]
    nodes.append(helper.make_node("Resize", ["s2", "", "scales"], ["up"], mode="nearest"))
    nodes.append(helper.make_node("Conv", ["up", "w3"], ["y"], pads=[1] * 4, strides=[2, 2]))
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "c2f",
        [helper.make_tensor_value_info("x", f, SHAPE)],
        [helper.make_tensor_value_info("y", f, (1, 16, 8, 8))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _qdq(model):
    return quantize_qdq(model, RNG.normal(0, 1, (8, *SHAPE[1:])).astype(np.float32), input_name="x")


def _tabled(qdq):
    return fold_tables(quantize_early(lower_qdq(simplify(import_onnx(qdq)))))


def _lowered(qdq):
    """The integer graph the accelerator runs: tables, copies, and the copies lowered."""
    return fold_tables(quantize_early(lower_qdq(accelerator_copies(_tabled(qdq), 16))))


@pytest.fixture(scope="module", params=[16, 8], ids=["whole_blocks", "half_blocks"])
def c2f(request):
    from vdla.model.pipeline import compile_model

    qdq = _qdq(_c2f(request.param))
    return qdq, compile_model(qdq)[0]


def test_the_rewrite_is_exact_in_float():
    tabled = _tabled(_qdq(_c2f()))
    moved = accelerator_copies(tabled, 16)
    copies = sorted(n.attrs[COPY] for n in moved.nodes if COPY in n.attrs)
    assert {"add", "slice", "concat", "upsample"} <= set(copies), copies
    for seed in range(3):
        x = np.random.default_rng(seed).normal(0, 1, SHAPE).astype(np.float32)
        np.testing.assert_array_equal(evaluate(moved, {"x": x})["y"], evaluate(tabled, {"x": x})["y"])


def test_no_cpu_step_between_layers_and_copies_count_no_macs(c2f):
    _, artifact = c2f
    kinds = [s.kind for s in artifact.steps]
    assert kinds[0] == kinds[-1] == "cpu" and "cpu" not in kinds[1:-1], kinds
    moved = {s.layer.get("copy") for s in artifact.steps if s.kind == "accel"} - {None}
    assert {"add", "slice", "concat", "upsample"} <= moved
    assert all(s.macs == 0 for s in artifact.steps if s.kind == "accel" and s.layer.get("copy"))
    assert artifact.accel_macs == artifact.total_macs > 0


def test_the_accelerator_equals_the_lowered_graph_and_the_int8_reference(c2f, backend):
    from vdla.model import Module

    qdq, artifact = c2f
    lowered, step = _lowered(qdq), qdq_output_scale(qdq, "y")
    module = Module(artifact, backend)
    for seed in range(2):
        x = np.random.default_rng(seed).normal(0, 1, SHAPE).astype(np.float32)
        got = module.run(x)
        np.testing.assert_array_equal(got, evaluate(lowered, {"x": x})["y"])
        assert np.abs(got - reference_run(qdq, {"x": x})["y"]).max() <= step * 1.01
    module.close()


def _shuffle() -> object:
    """x -> conv (32) -> ReLU -> channel shuffle (reshape, transpose, reshape) -> split -> conv of each half,
    concatenated: the shuffle runs on the CPU, so the split after it stays there too."""
    inits = [
        numpy_helper.from_array(RNG.normal(0, 0.3, (32, 16, 1, 1)).astype(np.float32), "w1"),
        numpy_helper.from_array(RNG.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32), "wa"),
        numpy_helper.from_array(RNG.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32), "wb"),
        numpy_helper.from_array(np.array([1, 2, 16, 8, 8], np.int64), "s5"),
        numpy_helper.from_array(np.array([1, 32, 8, 8], np.int64), "s4"),
        numpy_helper.from_array(np.array([16, 16], np.int64), "sizes"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "s5"], ["r5"]),
        helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t5", "s4"], ["sh"]),
        helper.make_node("Split", ["sh", "sizes"], ["a", "b"], axis=1),
        helper.make_node("Conv", ["a", "wa"], ["ya"]),
        helper.make_node("Conv", ["b", "wb"], ["yb"]),
        helper.make_node("Concat", ["ya", "yb"], ["y"], axis=1),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "shuffle",
        [helper.make_tensor_value_info("x", f, SHAPE)],
        [helper.make_tensor_value_info("y", f, (1, 32, 8, 8))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def test_a_split_of_a_tensor_the_cpu_reorders_is_not_moved():
    moved = accelerator_copies(_tabled(_qdq(_shuffle())), 16)
    assert not [n.attrs[COPY] for n in moved.nodes if n.attrs.get(COPY) == "slice"]
