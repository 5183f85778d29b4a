"""Checks shared by the tests of QDQ models compiled for the accelerator: the artifact's outputs equal the
lowered integer graph's bit for bit and lie within one output step of onnxruntime's int8 reference; vdla's own
calibration stays within a cosine of the float model."""

from __future__ import annotations

import numpy as np

from vdla.graph import Node


def lowered_graph(qdq):
    """The integer graph a QDQ model lowers to (import, simplification, QDQ lowering, activation tables)."""
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify
    from vdla.graph.qdq import lower_qdq
    from vdla.graph.tables import quantize_early, tabulate_chains

    return tabulate_chains(quantize_early(lower_qdq(simplify(import_onnx(qdq)))))


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


def assert_lowered_and_near_float(artifact, lowered, model, inputs, least: float = 0.99) -> None:
    """For each input ``x`` of ``inputs`` on the simulator: the artifact's output ``y`` equals the ``lowered``
    graph's bit for bit and has a cosine of at least ``least`` with the float ``model``'s (onnxruntime)."""
    from vdla.frontend.reference import reference_session
    from vdla.graph.interp import evaluate
    from vdla.model import Module

    module, session = Module(artifact, "sim"), reference_session(model)
    try:
        for x in inputs:
            got, want = module.run(x), session.run(None, {"x": x})[0]
            np.testing.assert_array_equal(got, evaluate(lowered, {"x": x})["y"])
            assert float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want)) >= least
    finally:
        module.close()


def initializer_adder(inits: list):
    """``c(name, value, dtype=float32) -> name``: appends ``value`` to ``inits`` as the ONNX initializer ``name``."""
    from onnx import numpy_helper

    def c(name: str, v, dtype=np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(v, dtype), name))
        return name

    return c


def outlier_projection(rng: np.random.Generator, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights (dim, dim) and bias of a projection into a residual stream as trained transformers have it: output
    channel 5 an outlier (8x the weights, a bias of 3) beside channels of ``dim ** -0.5`` weights."""
    w = rng.normal(0, dim**-0.5, (dim, dim))
    w[:, 5] *= 8
    b = rng.normal(0, 0.1, dim)
    b[5] = 3.0
    return w, b


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


def qdq_conv(nodes: list, params: dict, rng, name: str, x: str, c_in: int, c_out: int, k: int, s_in: float, *,
             stride: int = 1, pad: int | None = None, act: str | None = "relu",
             w_scales: tuple[float, float] = (0.0005, 0.002)) -> str:  # fmt: skip
    """Append a QDQ convolution of the dequantized ``x`` (scale ``s_in``) to ``nodes``: int8 weights with per-channel
    scales drawn from ``w_scales`` and an int32 bias, dequantized around a float conv (``pad``: ``k // 2`` by
    default), then ``act``: ``relu`` right after the conv (its epilogue takes it), another activation after a
    requantization at ``s_in`` (an activation table), or None. Returns the name of the last value."""
    params[f"{name}_w"] = rng.integers(-127, 128, (c_out, c_in, k, k), dtype=np.int8)
    sw = rng.uniform(*w_scales, c_out)
    params[f"{name}_ws"] = sw.astype(np.float32).reshape(-1, 1, 1, 1)
    params[f"{name}_b"] = rng.integers(-2000, 2000, c_out).astype(np.int32)
    params[f"{name}_bs"] = (s_in * sw).astype(np.float32)
    attrs = {"stride": stride, "padding": k // 2 if pad is None else pad}
    nodes += [
        Node("dequantize", (f"{name}_w", f"{name}_ws"), f"{name}_wf", {"zero_point": 0, "axis": 0}),
        Node("dequantize", (f"{name}_b", f"{name}_bs"), f"{name}_bf", {"zero_point": 0, "axis": 0}),
        Node("conv2d", (x, f"{name}_wf", f"{name}_bf"), f"{name}_y", attrs),
    ]
    if act not in (None, "relu"):
        nodes += [
            Node("quantize", (f"{name}_y",), f"{name}_yq", {"scale": s_in, "zero_point": 0}),
            Node("dequantize", (f"{name}_yq",), f"{name}_yd", {"scale": s_in, "zero_point": 0}),
        ]
    if act is not None:
        nodes.append(Node(act, (nodes[-1].output,), f"{name}_r"))
    return nodes[-1].output
