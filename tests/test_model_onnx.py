"""End to end: a small ResNet built with onnx.helper, QDQ-quantized by onnxruntime on seeded data, compiled
by vdla and run on sim and rtl, against the reference (:mod:`vdla.frontend.reference`: onnxruntime running
the same QDQ model as written).

vdla lowers every layer to its integer epilogue (exact int32 accumulation, the residual adds and the
global average pool included, one 31-bit multiplier rounded once), where the reference computes in float32
between DequantizeLinear and QuantizeLinear: the two round apart only where the reference's float32 value
lies within float32 rounding of a .5 boundary. None does on the 128 seeded inputs measured (nor on the 16
run here): every logit is equal.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_model  # noqa: E402
from vdla.zoo.models import calibration_images, qdq_output_scale, quantize_qdq, small_resnet  # noqa: E402

SAMPLES = 16


@pytest.fixture(scope="module")
def qdq_model():
    return quantize_qdq(small_resnet(seed=0), calibration_images((3, 32, 32), 32, seed=1))


@pytest.fixture(scope="module")
def artifact(qdq_model):
    art, report = compile_model(qdq_model, config="pynq")
    return art, report


def test_every_convolution_pool_and_the_dense_layer_run_on_the_accelerator(artifact):
    art, report = artifact
    accel = [s.layer["op"] for s in art.steps if s.kind == "accel"]
    # 6 convolutions (stem, 2 blocks with one projection; the max pool in the stem's tiles), the dense layer, the
    # global average pool
    assert sorted(accel) == ["conv2d"] * 5 + ["conv2d+max_pool2d", "dense", "global_avg_pool"]
    assert art.accel_macs / art.total_macs > 0.999
    assert art.memory["dram_arena_bytes"] < art.memory["dram_arena_no_reuse_bytes"]


def test_matches_the_reference_exactly(qdq_model, artifact, backend):
    art, _ = artifact
    module = Module(art, backend)
    session = reference_session(qdq_model)
    scale = qdq_output_scale(qdq_model)
    images = calibration_images((3, 32, 32), SAMPLES, seed=7)
    steps, agree = [], 0
    for x in images:
        want_logits, _ = session.run(None, {"image": x[None]})
        got = module.run(x[None])
        steps.append(np.abs(np.rint(got["logits"] / scale) - np.rint(want_logits / scale)).ravel())
        agree += int(got["logits"].argmax() == want_logits.argmax())
        assert got["probs"].shape == (1, 10) and got["probs"].argmax() == got["logits"].argmax()
    steps = np.concatenate(steps)
    assert steps.max() == 0 and agree == SAMPLES, np.bincount(steps.astype(int))
