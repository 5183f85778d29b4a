"""ResNet-18 end to end (issue 12): quantized by vdla, compiled, run on the simulator, checked bit-exact
against the CPU reference of the same lowered graph, from the command line (``vdla e2e``)."""

from __future__ import annotations

import json

import pytest

from vdla.cli import main

pytest.importorskip("llvmlite")


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    path = tmp_path_factory.mktemp("e2e") / "e2e.json"
    assert main(["e2e", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_resnet18_runs_end_to_end_on_the_accelerator_bit_exact(record):
    keys = {"backend", "cycles", "compute_bound_cycles", "ratio", "latency_ms", "accel_mac_share", "cpu_ms"}
    assert keys | {"layers", "correct"} <= set(record)
    assert record["backend"] == "sim" and record["correct"] is True
    assert record["accel_mac_share"] >= 0.999
    # 1.81 GMAC at 256 MACs per cycle, counted on the graph (the im2col's zero padding is not work)
    assert record["compute_bound_cycles"] == pytest.approx(7.086e6, rel=1e-3)
    assert record["ratio"] == pytest.approx(record["cycles"] / record["compute_bound_cycles"])
    assert record["cycles"] == sum(s["cycles"] for s in record["layers"])
    where = {s["op"]: s["where"] for s in record["layers"]}
    assert where["conv2d"] == where["dense"] == where["global_avg_pool"] == "accel"
    assert where["conv2d+max_pool2d"] == "accel"  # the max pool in C1's tiles: C1's output never stored


def test_only_input_preparation_and_the_softmax_stay_on_the_cpu(record):
    cpu = [s for s in record["layers"] if s["where"] == "cpu"]
    assert all(s["macs"] == 0 for s in cpu)
    assert record["cpu_ms"] == pytest.approx(sum(s["cpu_ms"] for s in cpu))
    ops = {op for s in cpu for op in s["op"].split("+")}
    assert not ops & {"max_pool2d", "global_avg_pool", "global_sum_pool", "conv2d", "dense"}


def test_a_layer_too_big_for_the_buffers_is_named_with_the_limit():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from vdla.model.pipeline import CompileError, compile_model

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((16, 16, 15, 15)) * 0.05).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["y"], kernel_shape=[15, 15]),
        helper.make_node("Relu", ["y"], ["out"]),
    ]
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 16, 40, 40])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 26, 26])
    model = helper.make_model(
        helper.make_graph(nodes, "big", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 13)]
    )
    calib = rng.standard_normal((4, 16, 40, 40)).astype(np.float32)
    with pytest.raises(
        CompileError, match=r"layer 'out:q' \(conv2d of a 1x16x40x40 input\): a 15x15 kernel needs 225 WGT"
    ):
        compile_model(model, calib={"image": calib}, config="osdi18")
