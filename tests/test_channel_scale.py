"""Squeeze-excite's channel product on the accelerator (issue 29): the ALU's channel scale against Python's
integer arithmetic on the simulator and the RTL; the scale fused before the 1x1 convolution reading it (a gated
input, EPI ``mul`` on the window's copy) against numpy; a QDQ and a float squeeze-excite block with no CPU step
between layers, bit-exact against the lowered graph and within one output step of onnxruntime's int8
reference; a product of two feature maps of one shape is left to the activation tables."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from full_units import FULL

from vdla.compiler import CompileError, compile_conv2d
from vdla.compiler.channel_scale import channel_scale_oracle, compile_channel_scale
from vdla.compiler.spec import ChannelScaleSpec, Conv2dSpec, Fusions
from vdla.graph import oracle
from vdla.graph.epilogue import Epilogue
from vdla.graph.qdq import channel_product
from vdla.graph.window import make_window
from vdla.isa.arith import MUL_MAX_SHIFT, choose_multipliers
from vdla.runtime import Device

# the gate of a 1x1 layer is the OUT-path multiplier's (EPI mul): the build with it (full_units.FULL); the channel
# products alone run on the pynq build (its half-width ALU's MUL)
compile_conv2d = partial(compile_conv2d, config=FULL)

RNG = np.random.default_rng(29)
CASES = [  # x shape, clip
    ((1, 40, 14, 14), (-128, 127)),
    ((2, 24, 5, 3), (0, 127)),  # a partial channel block, two images
    ((1, 16, 56, 56), (-128, 127)),  # tiled by rows
    ((1, 72, 7, 7), (-100, 90)),  # a CLIP pass
]


def _case(shape, real: float = 0.02 * 0.007 / 0.01):
    x = RNG.integers(-128, 128, shape, dtype=np.int8)
    s = RNG.integers(-128, 128, (*shape[:2], 1, 1), dtype=np.int8)
    (m,), shift = choose_multipliers(real, 128, MUL_MAX_SHIFT)  # as the QDQ lowering chooses it
    return x, s, int(m), int(shift)


def _python_reference(x, s, m: int, shift: int, clip) -> np.ndarray:
    """x * s[c] * m / 2^shift rounded half up, clamped: Python integers, element by element."""
    out = np.empty(x.shape, np.int8)
    for idx in np.ndindex(x.shape):
        p = int(x[idx]) * int(s[idx[0], idx[1], 0, 0]) * m
        out[idx] = min(max((p + (1 << (shift - 1))) >> shift, clip[0]), clip[1])
    return out


@pytest.mark.parametrize("shape,clip", CASES)
def test_the_channel_scale_equals_integer_arithmetic_on_sim(shape, clip):
    x, s, m, shift = _case(shape)
    spec = ChannelScaleSpec.make(shape, m, shift, clip)
    run = compile_channel_scale(spec).run(Device("pynq"), x, s)
    np.testing.assert_array_equal(run.out, channel_scale_oracle(x, spec, s))
    if np.prod(shape) <= 5000:
        np.testing.assert_array_equal(run.out, _python_reference(x, s, m, shift, clip))
    # one copy GEMM and one MUL a row: at most 6 cycles per 16 channels of a pixel
    rows = np.prod(shape[::2]) * shape[3] * -(-shape[1] // 16)
    assert run.counters.cycles <= 6 * rows + 2000


def test_the_channel_scale_on_rtl_equals_sim(rtl_library):
    x, s, m, shift = _case((1, 40, 6, 5))
    spec = ChannelScaleSpec.make(x.shape, m, shift, (-128, 127))
    sim = compile_channel_scale(spec).run(Device("pynq"), x, s)
    rtl = compile_channel_scale(spec).run(Device("pynq", backend="rtl"), x, s)
    np.testing.assert_array_equal(rtl.out, sim.out)
    np.testing.assert_array_equal(rtl.out, channel_scale_oracle(x, spec, s))
    assert abs(rtl.counters.cycles - sim.counters.cycles) <= 0.05 * sim.counters.cycles


def test_bad_channel_scales_name_what_is_wrong():
    with pytest.raises(CompileError, match="single pixels"):
        ChannelScaleSpec((1, 16, 8, 8), make_window("pool", (8, 8), 3, 1, 1, 1)[0])
    with pytest.raises(CompileError, match="times an int8 gate must fit int32: at most 16777215"):
        ChannelScaleSpec.make((1, 16, 8, 8), 1 << 30, 40)
    with pytest.raises(CompileError, match="clip bounds"):
        ChannelScaleSpec.make((1, 16, 8, 8), 1, 0, (-200, 0))
    x, s, m, shift = _case((1, 16, 4, 4))
    compiled = compile_channel_scale(ChannelScaleSpec.make(x.shape, m, shift))
    with pytest.raises(CompileError, match=r"int8 gate of shape \(1, 16, 1, 1\), got none"):
        compiled.run(Device("pynq"), x)
    with pytest.raises(CompileError, match=r"got int8 \(1, 8, 1, 1\)"):
        compiled.run(Device("pynq"), x, s[:, :8])


GATED = [  # x shape, output channels, the scale's clip, the layer's residual, schedule's residual in INP
    ((1, 96, 14, 14), 24, (-128, 127), None),
    ((2, 40, 9, 11), 16, (0, 127), "int8"),  # two images (a gate each), a partial block, a residual
    ((1, 144, 7, 7), 40, (-128, 127), "int8"),
    ((1, 24, 28, 28), 24, (0, 127), None),  # tiled by rows
]


def _gated(shape, oc: int, clip, residual):
    x, s, m, shift = _case(shape)
    w = RNG.integers(-128, 128, (oc, shape[1], 1, 1), dtype=np.int8)
    ep = Epilogue(
        bias=RNG.integers(-5000, 5000, oc), multiplier=RNG.integers(1 << 14, 1 << 15, oc), shift=27, residual=residual
    )
    res = RNG.integers(-128, 128, (shape[0], oc, *shape[2:]), dtype=np.int8) if residual else None
    gate = ChannelScaleSpec.make(shape, m, shift, clip)
    scaled = channel_scale_oracle(x, gate, s)
    want = oracle.conv2d_oracle(scaled, w, Conv2dSpec.make(shape, oc, (1, 1)), ep, res)
    return x, s, w, ep, res, gate, want


@pytest.mark.parametrize("shape,oc,clip,residual", GATED, ids=str)
def test_a_gated_1x1_conv_equals_the_scale_then_the_conv(shape, oc, clip, residual):
    """The channel scale fused before a 1x1 convolution: each step's window copied into ACC with the gate's product
    in the OUT mirror, the GEMMs reading it from OUT, equal to the scale's reference and then the conv's; one copy
    a window element more than the convolution alone, instead of the scale's round trip through DRAM."""
    x, s, w, ep, res, gate, want = _gated(shape, oc, clip, residual)
    layer = compile_conv2d(shape, w, epilogue=ep, fusions=Fusions(gate=gate))
    run = layer.run(Device(FULL), x, res, gate=s)
    np.testing.assert_array_equal(run.out, want)
    assert np.count_nonzero(want) > want.size // 2
    plain = compile_conv2d(shape, w, epilogue=ep)
    scale = compile_channel_scale(gate)
    assert layer.search.cycles < plain.search.cycles + scale.search.cycles


def test_a_gated_1x1_conv_on_rtl_equals_sim(rtl_library):
    x, s, w, ep, res, gate, want = _gated((1, 40, 6, 5), 24, (-128, 127), "int8")
    layer = compile_conv2d(x.shape, w, epilogue=ep, fusions=Fusions(gate=gate))
    sim, rtl = (layer.run(Device(FULL, backend=b), x, res, gate=s) for b in ("sim", "rtl"))
    np.testing.assert_array_equal(rtl.out, sim.out)
    np.testing.assert_array_equal(sim.out, want)
    assert abs(rtl.counters.cycles - sim.counters.cycles) <= 0.05 * sim.counters.cycles


def test_bad_gated_inputs_name_what_is_wrong():
    x, s, w, ep, res, gate, _ = _gated((1, 32, 8, 8), 16, (-128, 127), None)
    with pytest.raises(CompileError, match="not a 1x1 convolution of stride 1 without padding"):
        compile_conv2d(x.shape, np.zeros((16, 32, 3, 3), np.int8), padding=1, fusions=Fusions(gate=gate))
    with pytest.raises(CompileError, match=r"channel scale of the layer's input \(1, 16, 8, 8\), got a scale of"):
        compile_conv2d((1, 16, 8, 8), w[:, :16], fusions=Fusions(gate=gate))
    with pytest.raises(CompileError, match=r"clamp \(-100, 90\) be int8 or \[0, 127\]"):
        compile_conv2d(
            x.shape, w, fusions=Fusions(gate=ChannelScaleSpec.make(x.shape, gate.multiplier, gate.shift, (-100, 90)))
        )
    layer = compile_conv2d(x.shape, w, epilogue=ep, fusions=Fusions(gate=gate))
    with pytest.raises(CompileError, match="exactly when the layer was compiled with a gated input"):
        layer.run(Device(FULL), x)
    with pytest.raises(CompileError, match=r"gate must be int8 of shape \(1, 32, 1, 1\)"):
        layer.run(Device(FULL), x, gate=s[:, :16])


def test_only_a_per_channel_vector_makes_a_channel_product():
    assert channel_product([(1, 24, 8, 8), (1, 24, 1, 1)]) == (0, 1)
    assert channel_product([(1, 24, 1, 1), (1, 24, 8, 8)]) == (1, 0)
    assert channel_product([(1, 24, 8, 8), (1, 24, 8, 8)]) is None  # hardswish's x * hardsigmoid(x)
    assert channel_product([(1, 24, 1, 1), (1, 24, 1, 1)]) is None  # one pixel: an elementwise product
    assert channel_product([(1, 24, 8, 8), (1, 1, 1, 1)]) is None


# ---- a squeeze-excite block through the model compiler ---------------------------------------------------

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from qdq_check import accel_between, assert_runs_as_lowered, float_cosine, lowered_graph, onnx_model  # noqa: E402

SHAPE = (1, 16, 8, 8)


def _se_block(channels: int = 24):
    """x -> conv3x3 (channels) -> ReLU -> f; s = HardSigmoid(conv(ReLU(conv(GlobalAveragePool(f))))); y = conv1x1
    (16) of f * s: MobileNet-V3's squeeze-excite, with a partial channel block when channels % 16."""
    ws = {"w1": (channels, 16, 3, 3), "wr": (8, channels, 1, 1), "we": (channels, 8, 1, 1), "w2": (16, channels, 1, 1)}
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, sh).astype(np.float32), k) for k, sh in ws.items()]
    inits += [numpy_helper.from_array(RNG.normal(0, 0.5, (c,)).astype(np.float32), f"b{k}") for k, c in (("r", 8),)]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["f"]),
        helper.make_node("GlobalAveragePool", ["f"], ["p"]),
        helper.make_node("Conv", ["p", "wr", "br"], ["r0"]),
        helper.make_node("Relu", ["r0"], ["r"]),
        helper.make_node("Conv", ["r", "we"], ["e"]),
        helper.make_node("HardSigmoid", ["e"], ["s"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["f", "s"], ["g"]),
        helper.make_node("Conv", ["g", "w2"], ["y"]),
    ]
    return onnx_model(nodes, inits, "se", SHAPE, (1, 16, 8, 8))


def _calib(n: int = 8) -> np.ndarray:
    return RNG.normal(0, 1, (n, *SHAPE[1:])).astype(np.float32)


def _accel_between(artifact) -> list[str]:
    return [s.layer["op"] for s in accel_between(artifact)]


@pytest.fixture(scope="module", params=[24, 32], ids=["partial_block", "whole_blocks"])
def qdq_se(request):
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import quantize_qdq

    qdq = quantize_qdq(_se_block(request.param), _calib(), input_name="x")
    return qdq, compile_model(qdq, config=FULL)[0]


def test_a_qdq_squeeze_excite_block_runs_with_no_cpu_step_between_layers(qdq_se):
    """The block's pool and dense layers on the accelerator, and its channel product fused into the 1x1 convolution
    reading it: the step reads the feature map and the gate, and the scaled map never reaches DRAM."""
    _, artifact = qdq_se
    ops = _accel_between(artifact)
    assert ops.count("channel_scale+conv2d") == 1 and "global_avg_pool" in ops, ops
    (gated,) = [s for s in artifact.steps if s.kind == "accel" and s.layer["op"] == "channel_scale+conv2d"]
    assert gated.macs == gated.layer["input"][1] * 16 * 8 * 8  # the 1x1 convolution's; the scale has none
    assert len(gated.reads) == 2 and "channel scale fused" in gated.layer["schedule"]


def test_the_squeeze_excite_block_equals_the_lowered_graph_and_the_int8_reference(qdq_se, backend):
    qdq, artifact = qdq_se
    lowered = lowered_graph(qdq)
    products = [n for n in lowered.nodes if n.op == "mul" and len(n.inputs) == 2 and n.inputs[1] not in lowered.params]
    assert len(products) == 1 and not [n for n in lowered.nodes if n.op == "dequantize" and n.output != "y"]
    assert_runs_as_lowered(qdq, artifact, lowered, backend, SHAPE)


def test_vdla_calibration_quantizes_the_gate_and_runs_the_block_on_chip():
    from vdla.model.pipeline import compile_model

    model = _se_block()
    artifact = compile_model(model, _calib(16), config=FULL)[0]
    assert "channel_scale+conv2d" in _accel_between(artifact)
    assert float_cosine(model, artifact, SHAPE) > 0.99


# ---- squeeze-excite after a depthwise layer: its pool fused into the depthwise tiles, its product into the 1x1

DW_SHAPE = (1, 32, 12, 12)


def _dw_se_block():
    """x -> depthwise 3x3 -> ReLU -> f; s = Sigmoid(conv(ReLU(conv(GlobalAveragePool(f))))); y = conv1x1 (16) of
    f * s: EfficientNet's MBConv without its expand layer."""
    c = DW_SHAPE[1]
    ws = {"wd": (c, 1, 3, 3), "wr": (8, c, 1, 1), "we": (c, 8, 1, 1), "w2": (16, c, 1, 1)}
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, sh).astype(np.float32), k) for k, sh in ws.items()]
    inits.append(numpy_helper.from_array(RNG.normal(0, 0.5, (8,)).astype(np.float32), "br"))
    nodes = [
        helper.make_node("Conv", ["x", "wd"], ["c1"], pads=[1] * 4, group=c),
        helper.make_node("Relu", ["c1"], ["f"]),
        helper.make_node("GlobalAveragePool", ["f"], ["p"]),
        helper.make_node("Conv", ["p", "wr", "br"], ["r0"]),
        helper.make_node("Relu", ["r0"], ["r"]),
        helper.make_node("Conv", ["r", "we"], ["e"]),
        helper.make_node("Sigmoid", ["e"], ["s"]),
        helper.make_node("Mul", ["f", "s"], ["g"]),
        helper.make_node("Conv", ["g", "w2"], ["y"]),
    ]
    return onnx_model(nodes, inits, "dw_se", DW_SHAPE, (1, 16, *DW_SHAPE[2:]))


@pytest.fixture(scope="module")
def qdq_dw_se():
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import quantize_qdq

    calib = RNG.normal(0, 1, (8, *DW_SHAPE[1:])).astype(np.float32)
    qdq = quantize_qdq(_dw_se_block(), calib, input_name="x")
    return qdq, compile_model(qdq, config=FULL)[0]


def test_the_pool_runs_in_the_depthwise_tiles_and_the_product_in_the_1x1(qdq_dw_se):
    """Two steps where there were four: the depthwise layer writes its output and its average (a second output),
    the 1x1 convolution reads the output and the gate."""
    _, artifact = qdq_dw_se
    ops = _accel_between(artifact)
    assert ops[0] == "depthwise_conv2d+global_avg_pool" and ops[-1] == "channel_scale+conv2d", ops
    assert "global_avg_pool" not in ops and "channel_scale" not in ops
    dw = accel_between(artifact)[0]
    assert len(dw.writes) == 2 and "global average fused" in dw.layer["schedule"]
    want = "not fused with the 1x1 layer after it: its output is also read by global_sum_pool, mul"
    assert dw.layer["note"] == want  # squeeze-excite reads it: the step table says why


def test_the_depthwise_squeeze_excite_block_equals_the_lowered_graph(qdq_dw_se, backend):
    qdq, artifact = qdq_dw_se
    assert_runs_as_lowered(qdq, artifact, lowered_graph(qdq), backend, DW_SHAPE)


def test_apart_the_block_computes_the_same_bits(qdq_dw_se):
    """``fuse_squeeze_excite=False`` (``vdla compile --no-fuse-squeeze-excite``) keeps the average and the product
    as steps of their own: the same output, bit for bit."""
    from vdla.model import Module
    from vdla.model.pipeline import CompileOptions, compile_model

    qdq, fused = qdq_dw_se
    apart = compile_model(qdq, options=CompileOptions(fuse_squeeze_excite=False, config=FULL))[0]
    assert {"global_avg_pool", "channel_scale", "depthwise_conv2d"} <= set(_accel_between(apart))
    x = np.random.default_rng(5).normal(0, 1, DW_SHAPE).astype(np.float32)
    np.testing.assert_array_equal(Module(fused, "sim").run(x), Module(apart, "sim").run(x))
