"""``vdla compile --report``'s per-layer quantization error (:mod:`vdla.graph.qerror`): on a small model with
one layer whose output has a huge outlier channel (its per-tensor scale leaves the other channels a few int8
levels, and the next layer reads only those), that layer adds by far the largest error to the model's output;
the other layers' outputs and their effect on the model's output keep a high SQNR."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vdla.graph.graph import Graph, Node
from vdla.graph.qerror import with_errors
from vdla.graph.quantize import quantize_model
from vdla.graph.types import TensorType

OUTLIER = 1000.0


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    w = {f"w{i}": rng.normal(0, 0.4, (4, 4 if i > 1 else 2, 3, 3)).astype(np.float32) for i in (1, 2, 3, 4)}
    w["w2"][0] *= OUTLIER  # channel 0 of c2's output dwarfs the other three ...
    w["w3"][:, 0] = 0.0  # ... and the next layer ignores it: it reads the three crushed channels only
    return w


def _graph() -> Graph:
    """x -> c1 -> relu -> c2 (outlier channel) -> relu -> c3 -> relu -> c4 -> y."""
    nodes = [
        Node("conv2d", ("x", "w1"), "c1", {"padding": 1}),
        Node("relu", ("c1",), "r1"),
        Node("conv2d", ("r1", "w2"), "c2", {"padding": 1}),
        Node("relu", ("c2",), "r2"),
        Node("conv2d", ("r2", "w3"), "c3", {"padding": 1}),
        Node("relu", ("c3",), "r3"),
        Node("conv2d", ("r3", "w4"), "y", {"padding": 1}),
    ]
    return Graph({"x": TensorType((1, 2, 6, 6), "float32")}, nodes, ["y"], _weights(), name="outlier")


def _data(n: int = 8) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).normal(0, 1, (n, 2, 6, 6)).astype(np.float32)}


def test_the_outlier_layer_adds_the_largest_error_to_the_output():
    graph = _graph()
    qgraph, report = quantize_model(graph, _data(), "minmax")
    assert all(t.sqnr_db is None for t in report.tensors)  # measured only when asked
    report = with_errors(report, graph, qgraph, _data())
    layers = {layer.name: layer for layer in report.layers}
    assert list(layers) == ["c1", "c2", "c3", "y"]
    worst = min(layers.values(), key=lambda layer: layer.output_sqnr_db)
    assert worst.name == "c2" and worst.output_sqnr_db < 20 and worst.output_cosine < 0.995
    for layer in layers.values():
        if layer.name != "c2":
            assert layer.output_sqnr_db > 30 and layer.output_cosine > 0.999 and layer.sqnr_db > 30, layer
    # alone, c2's own output looks fine (its outlier channel holds the energy); what it does downstream does not
    assert layers["c2"].sqnr_db > 30
    tensors = {t.name: t for t in report.tensors}
    assert tensors["x"].sqnr_db > 30 and tensors["r1"].sqnr_db > 30  # before the outlier layer: all good
    assert tensors["r3"].sqnr_db < 20 and tensors["y"].sqnr_db < 20  # after it the int8 model has lost the signal
    assert all(-1 <= t.cosine <= 1 for t in report.tensors)


def test_a_model_of_well_scaled_layers_shows_high_sqnr_everywhere():
    graph = _graph()
    graph.params["w2"] = graph.params["w2"].copy()
    graph.params["w2"][0] /= OUTLIER
    qgraph, report = quantize_model(graph, _data(), "minmax")
    report = with_errors(report, graph, qgraph, _data())
    assert all(layer.output_sqnr_db > 30 and layer.sqnr_db > 30 for layer in report.layers)
    assert all(t.sqnr_db > 25 for t in report.tensors)  # four int8 layers in a row: about 29 dB at y


def _onnx_model() -> onnx.ModelProto:
    w = _weights()
    names = ["x", "r1", "r2", "r3"]
    nodes, inits = [], []
    for i in range(4):
        out = "y" if i == 3 else f"c{i + 1}"
        nodes.append(helper.make_node("Conv", [names[i], f"w{i + 1}"], [out], pads=[1, 1, 1, 1]))
        if i < 3:
            nodes.append(helper.make_node("Relu", [out], [names[i + 1]]))
        inits.append(numpy_helper.from_array(w[f"w{i + 1}"], f"w{i + 1}"))
    graph = helper.make_graph(
        nodes,
        "outlier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_cli_report_shows_each_layers_error(tmp_path, capsys):
    from vdla.cli import main

    onnx.save(_onnx_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", x=_data()["x"])
    rep, out = tmp_path / "q.json", tmp_path / "m.vdla"
    args = ["compile", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "calib.npz"), "-o", str(out)]
    assert main([*args, "--calibration", "minmax", "--report", str(rep)]) == 0
    text = capsys.readouterr().out
    assert "SQNR" in text and "out cos" in text
    report = json.loads(rep.read_text())
    layers = {layer["name"]: layer for layer in report["layers"]}
    assert min(layers.values(), key=lambda layer: layer["output_sqnr_db"])["name"] == "c2"
    assert all(isinstance(t["sqnr_db"], float) and math.isfinite(t["sqnr_db"]) for t in report["tensors"])
    assert main([*args, "--calibration", "minmax"]) == 0  # without --report: no error analysis, no columns
    assert "out cos" not in capsys.readouterr().out
