"""Checks shared by the tests of QDQ models compiled for the accelerator: the artifact's outputs equal the
lowered integer graph's bit for bit and lie within one output step of onnxruntime's int8 reference; vdla's own
calibration stays within a cosine of the float model."""

from __future__ import annotations

import numpy as np


def lowered_graph(qdq):
    """The integer graph a QDQ model lowers to (import, simplification, QDQ lowering, activation tables)."""
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify
    from vdla.graph.qdq import lower_qdq
    from vdla.graph.tables import fold_tables, quantize_early

    return fold_tables(quantize_early(lower_qdq(simplify(import_onnx(qdq)))))


def assert_runs_as_lowered(qdq, artifact, lowered, backend: str, shape, seeds=(0, 1)) -> None:
    """On ``backend``, for inputs ``x`` of ``shape`` drawn with each seed: the artifact's output ``y`` equals the
    ``lowered`` graph's, and differs from onnxruntime's int8 reference by at most one output step."""
    from vdla.frontend.reference import reference_run
    from vdla.graph.interp import evaluate
    from vdla.model import Module
    from vdla.zoo.models import qdq_output_scale

    step, module = qdq_output_scale(qdq, "y"), Module(artifact, backend)
    try:
        for seed in seeds:
            x = np.random.default_rng(seed).normal(0, 1, shape).astype(np.float32)
            got = module.run(x)
            np.testing.assert_array_equal(got, evaluate(lowered, {"x": x})["y"])
            assert np.abs(got - reference_run(qdq, {"x": x})["y"]).max() <= step * 1.01
    finally:
        module.close()


def float_cosine(model, artifact, shape, seed: int = 3) -> float:
    """The cosine between the artifact's output ``y`` (simulator) and the float model's (onnxruntime)."""
    from vdla.frontend.reference import reference_run
    from vdla.model import Module

    x = np.random.default_rng(seed).normal(0, 1, shape).astype(np.float32)
    got, want = Module(artifact, "sim").run(x), reference_run(model, {"x": x})["y"]
    return float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want))


def onnx_model(nodes: list, inits: list, name: str, x_shape, y_shape):
    """The float ONNX model of ``nodes`` from input ``x`` to output ``y`` (opset 20)."""
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    x, y = helper.make_tensor_value_info("x", f, x_shape), helper.make_tensor_value_info("y", f, y_shape)
    graph = helper.make_graph(nodes, name, [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def accel_between(artifact) -> list:
    """The accelerator steps of an artifact whose only CPU steps are its first and last; asserts that."""
    kinds = [s.kind for s in artifact.steps]
    assert kinds[0] == kinds[-1] == "cpu" and "cpu" not in kinds[1:-1], kinds
    return [s for s in artifact.steps if s.kind == "accel"]
