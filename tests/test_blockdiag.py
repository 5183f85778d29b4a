"""Depthwise convolutions on today's GEMM core (issue 30's block-diagonal mapping): the parts' weights and
regions; an inverted residual block (expand 1x1 -> depthwise -> project 1x1 + residual) and 5x5 / stride 2
depthwise layers with partial channel blocks compiled with no CPU step between layers, bit-exact against the
lowered graph on the simulator and the RTL and within one output step of onnxruntime's int8 reference; vdla's
own calibration places them too; a config whose blocks differ keeps them on the CPU with the reason."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from full_units import FULL

from vdla.compiler import CompileError
from vdla.compiler.blockdiag import block_parts, is_block_diagonal, parts_refusal, region
from vdla.config import load_config
from vdla.graph.epilogue import Epilogue

RNG = np.random.default_rng(30)


def test_parts_are_block_diagonal_and_cover_every_channel_once():
    cfg = load_config("pynq")
    w = RNG.integers(-127, 128, (40, 1, 3, 3), dtype=np.int8)
    ep = Epilogue(bias=np.arange(40), multiplier=np.arange(40) + 1000, shift=20)
    parts = block_parts((1, 40, 9, 9), w, ep, cfg)
    assert [(p.block, p.in_shape[1]) for p in parts] == [(0, 16), (1, 16), (2, 8)]
    for p in parts:
        lo = p.block * 16
        for o in range(p.in_shape[1]):
            np.testing.assert_array_equal(p.weights[o, o], w[lo + o, 0])
            assert not np.delete(p.weights[o], o, axis=0).any()
        np.testing.assert_array_equal(p.epilogue.bias, np.arange(lo, lo + p.in_shape[1]))
        assert p.epilogue.shift == 20
    assert [region(p, 3, (9, 9), cfg) for p in parts] == [(k * 81 * 16, 81 * 16) for k in range(3)]
    assert region(parts[2], 5, (9, 9), cfg, whole=True) == (0, 5 * 81 * 16)
    with pytest.raises(CompileError, match="neither depthwise nor block-diagonal"):
        block_parts((1, 40, 9, 9), w[:20], ep, cfg)


def test_dense_block_diagonal_weights_run_as_their_diagonal_blocks():
    cfg = load_config("pynq")
    eye = np.eye(40, dtype=np.int8)[:, :, None, None]
    assert is_block_diagonal(eye, 16) and not is_block_diagonal(eye[:16, :16], 16)  # one block: dense is as cheap
    shuffled = eye[np.r_[16:32, 0:16, 32:40]]  # output block 0 reads input block 1
    assert not is_block_diagonal(shuffled, 16) and not is_block_diagonal(eye[:32], 16)
    parts = block_parts((2, 40, 4, 4), eye, Epilogue(), cfg)
    assert [(p.group, p.block) for p in parts] == [(g, b) for g in range(2) for b in range(3)]
    assert all(np.array_equal(p.weights, np.eye(p.in_shape[1], dtype=np.int8)[:, :, None, None]) for p in parts)
    odd = replace(cfg, name="odd", block_in=32, inp_buff_bytes=65536, part="xczu7ev")
    assert "block_in == block_out" in parts_refusal(odd) and parts_refusal(cfg) is None


onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from qdq_check import accel_between, assert_runs_as_lowered, float_cosine, lowered_graph, onnx_model  # noqa: E402

SHAPE = (1, 16, 12, 12)


def _model(expand: int = 40) -> object:
    """x -> [expand 1x1 (expand) -> ReLU6 -> depthwise 3x3 -> ReLU6 -> project 1x1 (16)] + x -> depthwise 5x5
    stride 2 (16) -> ReLU -> y: MobileNet-V2's inverted residual, and a depthwise layer of EfficientNet's."""
    ws = {"we": (expand, 16, 1, 1), "wd": (expand, 1, 3, 3), "wp": (16, expand, 1, 1), "w5": (16, 1, 5, 5)}
    inits = [numpy_helper.from_array(RNG.normal(0, 0.4, sh).astype(np.float32), k) for k, sh in ws.items()]
    inits += [numpy_helper.from_array(RNG.normal(0, 0.2, (expand,)).astype(np.float32), "bd")]
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (("lo", 0.0), ("hi", 6.0))]
    nodes = [
        helper.make_node("Conv", ["x", "we"], ["e"]),
        helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
        helper.make_node("Conv", ["e6", "wd", "bd"], ["d"], pads=[1] * 4, group=expand),
        helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
        helper.make_node("Conv", ["d6", "wp"], ["p"]),
        helper.make_node("Add", ["p", "x"], ["r"]),
        helper.make_node("Conv", ["r", "w5"], ["d5"], pads=[2] * 4, strides=[2, 2], group=16),
        helper.make_node("Relu", ["d5"], ["y"]),
    ]
    return onnx_model(nodes, inits, "inverted_residual", SHAPE, (1, 16, 6, 6))


def _calib(n: int = 8) -> np.ndarray:
    return RNG.normal(0, 1, (n, *SHAPE[1:])).astype(np.float32)


def _depthwise_steps(artifact) -> list:
    """The depthwise steps, those fused with the 1x1 layers around them (vdla.compiler.dw_pointwise) among them."""
    assert artifact.accel_macs == artifact.total_macs > 0
    return [s for s in accel_between(artifact) if "depthwise_conv2d" in s.layer["op"]]


@pytest.fixture(scope="module", params=[True, False], ids=["dw_mode", "no_dw_mode"])
def qdq_block(request):
    """The block quantized by onnxruntime and compiled for ``pynq`` with its depthwise mode and without it
    (``depthwise_mode`` false: the RTL built without the mode's logic), where the depthwise layers run as
    block-diagonal parts."""
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import quantize_qdq

    cfg = replace(FULL, name="pynq_no_dw") if not request.param else FULL
    cfg = replace(cfg, depthwise_mode=request.param)
    qdq = quantize_qdq(_model(), _calib(), input_name="x")
    return qdq, compile_model(qdq, config=cfg)[0]


def test_depthwise_layers_run_on_the_accelerator_with_their_own_macs(qdq_block):
    _, artifact = qdq_block
    dw = _depthwise_steps(artifact)
    # the expand and project layers fused with the depthwise 3x3 (faster)
    around = 2 * 16 * 40 * 12 * 12 if artifact.config.depthwise_mode else 0
    assert [s.macs for s in dw] == [40 * 12 * 12 * 9 + around, 16 * 6 * 6 * 25]
    schedules = [s.layer["schedule"] for s in dw]
    if artifact.config.depthwise_mode:
        assert schedules[0].startswith("1x1 -> depthwise -> 1x1 fused") and schedules[1].startswith("depthwise mode")
        assert not any("note" in s.layer for s in dw)
    else:  # 40 channels: blocks of 16, 16, 8; the step table says why not the mode
        assert [s.split(" ")[0] for s in schedules] == ["3", "1"]
        notes = [s.layer["note"] for s in dw]
        assert all("not the depthwise mode" in n and "depthwise_mode is false" in n for n in notes), notes
        from rich.console import Console

        from vdla.model.cli import _placement_table

        console = Console(width=400, record=True)
        console.print(_placement_table(artifact, None))
        assert "not the depthwise mode" in console.export_text()


def test_depthwise_layers_equal_the_lowered_graph_and_the_int8_reference(qdq_block, backend):
    qdq, artifact = qdq_block
    lowered = lowered_graph(qdq)
    grouped = [n for n in lowered.nodes if n.op == "conv2d" and n.attrs.get("groups", 1) != 1]
    assert len(grouped) == 2 and all(lowered.params[n.inputs[1]].dtype == np.int8 for n in grouped)
    assert_runs_as_lowered(qdq, artifact, lowered, backend, SHAPE)


def test_vdla_calibration_places_depthwise_layers_on_the_accelerator():
    from vdla.model.pipeline import compile_model

    model = _model()
    artifact = compile_model(model, _calib(16))[0]
    assert len(_depthwise_steps(artifact)) == 2
    assert float_cosine(model, artifact, SHAPE) > 0.99


def test_a_grouped_convolution_that_is_not_depthwise_stays_on_the_cpu_with_the_reason():
    from vdla.graph.graph import Graph, Node
    from vdla.graph.ops import infer_types
    from vdla.graph.types import TensorType
    from vdla.model.match import match_accel

    w = RNG.integers(-127, 128, (32, 8, 3, 3), dtype=np.int8)
    node = Node("conv2d", ("x", "w"), "y", {"groups": 4, "padding": 1})
    g = Graph({"x": TensorType((1, 32, 8, 8), "int8")}, [node], ["y"], {"w": w})
    why = match_accel(node, g, infer_types(g), load_config("pynq"))
    assert isinstance(why, str) and "groups=4 of 32 channels" in why


def test_a_depthwise_layer_whose_part_does_not_fit_stays_on_the_cpu_with_the_reason():
    from vdla.graph.graph import Graph, Node
    from vdla.graph.ops import infer_types
    from vdla.graph.types import TensorType
    from vdla.model.match import match_accel

    w = RNG.integers(-127, 128, (32, 1, 3, 3), dtype=np.int8)
    node = Node("conv2d", ("x", "w"), "acc", {"groups": 32, "padding": 1})
    clip = Node("clip", ("acc",), "c", {"lo": -128, "hi": 127})
    cast = Node("cast", ("c",), "y", {"dtype": "int8"})
    x = TensorType((1, 32, 4, 70000), "int8")  # rows wider than the LOAD's x_stride
    g = Graph({"x": x}, [node, clip, cast], ["y"], {"w": w})
    why = match_accel(node, g, infer_types(g), load_config("pynq"))
    assert isinstance(why, str) and why.startswith("depthwise mode:") and "depthwise parts:" in why
    assert why.count("x_stride") == 2  # each mapping names the limit
