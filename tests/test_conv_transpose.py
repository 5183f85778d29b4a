"""ConvTranspose: the operator (numpy semantics, CPU JIT kernel), its ONNX import against onnxruntime, the
quantization (QDQ and vdla's calibration) and the stride-phase rewrite that runs it on the accelerator,
bit-exact on sim and rtl."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vdla.cpu_fallback import functions
from vdla.graph import Graph, Node, TensorType, UnsupportedError, oracle
from vdla.graph.convt import axis_phase, phase_convs
from vdla.graph.interp import evaluate
from vdla.graph.ops import infer_types
from vdla.graph.qdq import lower_qdq
from vdla.model import Module
from vdla.model.pipeline import compile_model

GEOMETRIES = [  # stride, dilation, pads (top, bottom, left, right), output_padding, groups, kernel
    ((2, 2), (1, 1), (0, 0, 0, 0), (0, 0), 1, (2, 2)),
    ((2, 2), (1, 1), (1, 1, 1, 1), (1, 1), 1, (3, 3)),
    ((2, 1), (1, 2), (1, 0, 2, 1), (1, 0), 2, (3, 3)),
    ((3, 2), (2, 1), (-1, 2, 0, -2), (1, 1), 1, (2, 3)),
    ((1, 1), (1, 1), (0, 0, 0, 0), (0, 0), 1, (1, 1)),
]


def scatter_reference(x, w, bias, stride, dilation, pads, output_padding, groups):
    """Input pixel by input pixel, tap by tap, into the output pixel it lands on (int64 or float64)."""
    n, c, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    oh = (h - 1) * stride[0] + (kh - 1) * dilation[0] + 1 - pads[0] - pads[1] + output_padding[0]
    ow = (wd - 1) * stride[1] + (kw - 1) * dilation[1] + 1 - pads[2] - pads[3] + output_padding[1]
    wide = np.int64 if x.dtype == np.int8 else np.float64
    y = np.zeros((n, ocg * groups, oh, ow), wide)
    icg = c // groups
    for b, ci, iy, ix, o, ky, kx in itertools.product(
        range(n), range(c), range(h), range(wd), range(ocg), range(kh), range(kw)
    ):
        oy, ox = iy * stride[0] + ky * dilation[0] - pads[0], ix * stride[1] + kx * dilation[1] - pads[2]
        if 0 <= oy < oh and 0 <= ox < ow:
            y[b, ci // icg * ocg + o, oy, ox] += wide(x[b, ci, iy, ix]) * wide(w[ci, o, ky, kx])
    return y + bias.astype(wide).reshape(1, -1, 1, 1)


@pytest.mark.parametrize("dtype", ["int8", "float32"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_jit_kernel_and_oracle_match_the_scatter_reference(geometry, dtype):
    stride, dilation, pads, output_padding, groups, kernel = geometry
    rng = np.random.default_rng(0)
    if dtype == "int8":
        x = rng.integers(-128, 128, (2, 4, 4, 5)).astype(np.int8)
        w = rng.integers(-128, 128, (4, 3, *kernel)).astype(np.int8)
        bias = rng.integers(-1000, 1000, 3 * groups).astype(np.int32)
    else:
        x = rng.standard_normal((2, 4, 4, 5)).astype(np.float32)
        w = rng.standard_normal((4, 3, *kernel)).astype(np.float32)
        bias = rng.standard_normal(3 * groups).astype(np.float32)
    want = scatter_reference(x, w, bias, stride, dilation, pads, output_padding, groups)
    got = functions.conv_transpose(
        x, w, bias, stride=stride, padding=pads, dilation=dilation, output_padding=output_padding, groups=groups
    )
    acc = oracle.conv_transpose(x, w, stride, dilation, pads, want.shape[2:], groups)
    if dtype == "int8":
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(acc.astype(np.int64) + bias.reshape(1, -1, 1, 1), want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(acc + bias.reshape(1, -1, 1, 1), want, rtol=1e-6, atol=1e-6)


def test_bad_geometry_is_refused_naming_the_attribute():
    x, w = np.zeros((1, 2, 3, 3), np.float32), np.zeros((2, 2, 3, 3), np.float32)
    with pytest.raises(UnsupportedError, match="output_padding"):
        functions.conv_transpose(x, w, stride=2, output_padding=2)
    with pytest.raises(UnsupportedError, match="groups"):
        functions.conv_transpose(x, w, groups=3)


# ---------------------------------------------------------------------------------------------------------
# ONNX import against onnxruntime


def _convt_model(x_shape, w_shape, bias: bool, **attrs):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(
            numpy_helper.from_array(rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32), "b")
        )
        inputs.append("b")
    node = helper.make_node("ConvTranspose", inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "convt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w", "d"][: len(x_shape)])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((1, 4, 5, 6), (4, 3, 2, 2), {"strides": [2, 2]}),
        ((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
        ((1, 4, 5, 6), (4, 2, 3, 3), {"strides": [2, 3], "dilations": [2, 1], "group": 2, "pads": [0, 2, 1, 0]}),
        ((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        ((1, 4, 5, 6), (4, 3, 4, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
        ((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [3, 2], "output_shape": [16, 14]}),
        ((2, 4, 7), (4, 3, 3), {"strides": [2], "pads": [1, 0]}),
    ],
)
def test_import_matches_onnxruntime(x_shape, w_shape, attrs):
    pytest.importorskip("onnxruntime")
    from vdla.cpu_fallback import compile_graph
    from vdla.frontend.onnx import import_onnx
    from vdla.frontend.reference import reference_run

    model = _convt_model(x_shape, w_shape, True, **attrs)
    x = np.random.default_rng(2).standard_normal(x_shape).astype(np.float32)
    want = reference_run(model, {"x": x})["y"]
    graph = import_onnx(model)
    got = compile_graph(graph)(x=x)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(evaluate(graph, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_import_refuses_3d_and_bad_attributes_naming_the_node():
    pytest.importorskip("onnx")
    from vdla.frontend.onnx import import_onnx

    with pytest.raises(UnsupportedError, match=r"ConvTranspose: node .*1-D and 2-D .*\(1, 4, 3, 3, 3\)"):
        import_onnx(_convt_model((1, 4, 3, 3, 3), (4, 2, 2, 2, 2), False))
    with pytest.raises(UnsupportedError, match=r"attribute auto_pad='BOTH': auto_pad must be one of NOTSET"):
        import_onnx(_convt_model((1, 4, 3, 3), (4, 2, 2, 2), False, auto_pad="BOTH"))


# ---------------------------------------------------------------------------------------------------------
# The stride-phase rewrite


def test_axis_phases_cover_every_tap_once():
    covered = 0
    for k, s, d, pad in itertools.product((1, 2, 3, 4), (1, 2, 3), (1, 2), (0, 1, 2)):
        n_out = (6 - 1) * s + (k - 1) * d + 1 - 2 * pad
        phases = [axis_phase(p, 6, -(-n_out // s), k, s, d, pad) for p in range(s)]
        if None in phases:
            continue
        covered += 1
        assert all(ph.before >= 0 and ph.after >= 0 for ph in phases)
        assert sorted(t for ph in phases for t in ph.taps if t is not None) == list(range(k))
    assert covered > 30


def _quantized_convt_graph(stride, pads, output_padding, dilation, kernel, relu: bool) -> Graph:
    """A QDQ graph: quantize -> dequantize -> conv_transpose (per-channel int8 weights on axis 1, a bias) ->
    [relu] -> quantize -> dequantize."""
    rng = np.random.default_rng(3)
    c, o = 24, 20
    w_q = rng.integers(-127, 128, (c, o, *kernel)).astype(np.int8)
    params = {
        "w_q": w_q,
        "w_s": rng.uniform(0.002, 0.01, (1, o, 1, 1)).astype(np.float32),
        "b": rng.normal(0, 0.5, o).astype(np.float32),
    }
    attrs = {"stride": stride, "padding": pads, "output_padding": output_padding, "dilation": dilation}
    nodes = [
        Node("quantize", ("x",), "xq", {"scale": 0.05, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": 0.05, "zero_point": 0}),
        Node("dequantize", ("w_q", "w_s"), "w", {"axis": 1, "zero_point": 0}),
        Node("conv_transpose", ("xd", "w", "b"), "ct", attrs),
    ]
    last = "ct"
    if relu:
        nodes.append(Node("relu", ("ct",), "r"))
        last = "r"
    nodes += [
        Node("quantize", (last,), "yq", {"scale": 0.08, "zero_point": 0}),
        Node("dequantize", ("yq",), "y", {"scale": 0.08, "zero_point": 0}),
    ]
    return Graph({"x": TensorType((1, c, 6, 7), "float32")}, nodes, ["y"], params, name="qconvt")


CASES = [  # stride, pads, output_padding, dilation, kernel, relu
    ((2, 2), (0, 0, 0, 0), (0, 0), (1, 1), (2, 2), True),
    ((2, 2), (1, 1, 1, 1), (1, 1), (1, 1), (3, 3), False),
    ((2, 2), (1, 1, 1, 1), (0, 0), (1, 1), (3, 3), True),
    ((2, 2), (1, 1, 1, 1), (0, 0), (1, 1), (4, 4), False),
    ((3, 2), (0, 2, 0, 1), (2, 1), (1, 3), (3, 3), True),
]


@pytest.mark.parametrize("case", CASES)
def test_phase_rewrite_is_bit_exact(case):
    low = lower_qdq(_quantized_convt_graph(*case))
    assert [n.op for n in low.nodes if n.op == "conv_transpose"] == ["conv_transpose"]  # lowered to int8
    phased = phase_convs(low)
    infer_types(phased)
    assert not any(n.op == "conv_transpose" for n in phased.nodes)
    stride = case[0]
    assert sum(n.op == "conv2d" for n in phased.nodes) == stride[0] * stride[1]
    rng = np.random.default_rng(4)
    for _ in range(3):
        x = rng.normal(0, 2, (1, 24, 6, 7)).astype(np.float32)
        np.testing.assert_array_equal(evaluate(phased, {"x": x})["y"], evaluate(low, {"x": x})["y"])


def test_phase_rewrite_leaves_what_it_cannot_express():
    # a phase without any tap (kernel 1, stride 2) and a float conv_transpose stay as they are
    low = lower_qdq(_quantized_convt_graph((2, 2), (0, 0, 0, 0), (0, 0), (1, 1), (1, 1), False))
    assert phase_convs(low).nodes == low.nodes
    g = Graph(
        {"x": TensorType((1, 2, 3, 3), "float32")},
        [Node("conv_transpose", ("x", "w"), "y", {"stride": 2})],
        ["y"],
        {"w": np.ones((2, 2, 2, 2), np.float32)},
    )
    assert phase_convs(g) is g


def test_interleave_operator_jit_matches_numpy():
    rng = np.random.default_rng(6)
    phases = [rng.integers(-128, 128, (2, 3, 4, 5)).astype(np.int8) for _ in range(6)]
    g = Graph(
        {f"p{i}": TensorType(p.shape, "int8") for i, p in enumerate(phases)},
        [Node("interleave", tuple(f"p{i}" for i in range(6)), "y", {"stride": (2, 3)})],
        ["y"],
        {},
    )
    from vdla.cpu_fallback import compile_graph

    got = compile_graph(g)(**{f"p{i}": p for i, p in enumerate(phases)})["y"]
    want = np.zeros((2, 3, 8, 15), np.int8)
    for i, p in enumerate(phases):
        want[:, :, i // 3 :: 2, i % 3 :: 3] = p
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(evaluate(g, {f"p{i}": p for i, p in enumerate(phases)})["y"], want)


def test_a_layer_stores_into_an_output_view(backend):
    from vdla.compiler import compile_conv2d
    from vdla.compiler.spec import OutputView
    from vdla.graph.epilogue import Epilogue
    from vdla.runtime import Device

    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 32, 8, 8)).astype(np.int8)
    w = rng.integers(-128, 128, (20, 32, 2, 2)).astype(np.int8)
    ep = Epilogue(rng.integers(-1000, 1000, 20), np.full(20, 1 << 30), 40)
    layer = compile_conv2d(x.shape, w, padding=(1, 1, 1, 1), epilogue=ep, out_view=OutputView((18, 19), (1, 0), (2, 2)))
    assert layer.lowering.tensor_bytes()["out"] == 2 * 18 * 19 * 16  # two channel blocks of the full tensor
    np.testing.assert_array_equal(layer.run(Device("pynq", backend), x).out, oracle.conv2d_oracle(x, w, layer.spec, ep))


def test_a_layer_stores_its_pixels_at_every_copy_of_a_view(backend):
    """A view with copies (a nearest upsampling's phases, all the same layer): the one layer's output lands in
    the slots of its own offset and of every copy's; a copy outside the tensor is refused."""
    from vdla.compiler import CompileError, compile_conv2d
    from vdla.compiler.run import run_bound
    from vdla.compiler.spec import OutputView
    from vdla.graph.epilogue import Epilogue
    from vdla.graph.layout import pack_activation, unpack_activation
    from vdla.runtime import Device

    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (1, 32, 5, 7)).astype(np.int8)
    w = rng.integers(-128, 128, (24, 32, 1, 1)).astype(np.int8)
    ep = Epilogue(rng.integers(-1000, 1000, 24), np.full(24, 1 << 30), 40)
    view = OutputView((10, 14), (0, 0), (2, 2), copies=((0, 1), (1, 0), (1, 1)))
    layer = compile_conv2d(x.shape, w, epilogue=ep, out_view=view)
    arrays = dict(layer.constants, inp=pack_activation(x, 1, 16))
    packed, _ = run_bound(Device("pynq", backend), layer.lowering, layer.stream, arrays, (1, 2, 10, 14, 1, 16))
    want = oracle.conv2d_oracle(x, w, layer.spec, ep)
    np.testing.assert_array_equal(unpack_activation(packed, 1, 24), want.repeat(2, axis=2).repeat(2, axis=3))
    with pytest.raises(CompileError, match="does not hold a 5x7 output"):
        compile_conv2d(x.shape, w, epilogue=ep, out_view=OutputView((10, 13), (0, 0), (2, 2), copies=((0, 1),)))


def _second_view(backend: str, cfg) -> None:
    """``copy_view``: the layer stores its output as usual and again through a second view into the ``copy``
    tensor (here a nearest upsampling by 2x2 into channel blocks 1-2 of a 4-block tensor). The copy tensor's other
    blocks stay as they were; a copy view that does not hold the output is refused."""
    from dataclasses import replace

    from vdla.compiler import CompileError, compile_conv2d
    from vdla.compiler.spec import Fusions, OutputView
    from vdla.graph.epilogue import Epilogue
    from vdla.runtime import Device

    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (1, 32, 5, 7)).astype(np.int8)
    w = rng.integers(-128, 128, (24, 32, 3, 3)).astype(np.int8)
    ep = Epilogue(rng.integers(-1000, 1000, 24), rng.integers(1 << 29, 1 << 30, 24), 40)
    view = OutputView((10, 14), (0, 0), (2, 2), blocks=(1, 4), copies=((0, 1), (1, 0), (1, 1)))
    layer = compile_conv2d(x.shape, w, padding=1, epilogue=ep, fusions=Fusions(copy_view=view), config=cfg)
    gemm = cfg.block_in == cfg.block_out
    assert layer.lowering.pair_gemm == gemm and layer.lowering.out_mul == gemm
    assert layer.lowering.tensor_bytes()["copy"] == 4 * 10 * 14 * 16
    run = layer.run(Device(cfg, backend), x)
    want = oracle.conv2d_oracle(x, w, layer.spec, ep)
    np.testing.assert_array_equal(run.out, want)
    copy = run.extra["copy"]
    np.testing.assert_array_equal(copy[:, 16:40], want.repeat(2, axis=2).repeat(2, axis=3))
    assert not copy[:, :16].any() and not copy[:, 40:].any()
    with pytest.raises(CompileError, match="does not hold a 5x7 output"):
        compile_conv2d(
            x.shape, w, padding=1, epilogue=ep, fusions=Fusions(copy_view=replace(view, full_hw=(10, 13))), config=cfg
        )


def test_a_layer_stores_its_output_and_a_copy_through_a_second_view(backend):
    """Pixels doubled in the accumulators by an identity GEMM reading OUT, the OUT-path multiplier on
    (:func:`_second_view`): the full-unit build, which has both."""
    from full_units import FULL

    _second_view(backend, FULL)


def test_a_second_view_doubles_pixels_on_the_alu_where_gemms_cannot_read_out():
    """block_in != block_out (a simulator config): the pixels are doubled by an ALU pass, the multiplier on the
    ALU too (:func:`_second_view`)."""
    from dataclasses import replace

    from vdla.config import load_config

    _second_view("sim", replace(load_config("pynq"), name="odd", block_in=32, inp_buff_bytes=65536, part="xczu7ev"))


def test_a_1x1_layer_reads_an_upsampled_part_of_its_input_from_the_tensor_it_upsamples(backend):
    """``up``: input-channel blocks 1-3 of a 1x1 convolution are a nearest 2x upsampling (the last block partly
    padding): the layer reads them from the 10x12 tensor, each pixel for four output pixels, and never the
    upsampled channels of its input; equal to the convolution of the whole input. What cannot take it is refused
    naming why; the tensor is given at run time exactly when the layer reads one."""
    from vdla.compiler import CompileError, compile_conv2d
    from vdla.compiler.spec import Fusions, InputUpsample
    from vdla.graph.epilogue import Epilogue
    from vdla.runtime import Device

    rng = np.random.default_rng(10)
    s = rng.integers(-128, 128, (1, 40, 10, 12)).astype(np.int8)
    b = rng.integers(-128, 128, (1, 32, 20, 24)).astype(np.int8)
    up = np.pad(s.repeat(2, axis=2).repeat(2, axis=3), ((0, 0), (0, 8), (0, 0), (0, 0)))
    x = np.concatenate([b[:, :16], up, b[:, 16:]], axis=1)  # blocks: b, up (3), b
    w = rng.integers(-8, 8, (40, x.shape[1], 1, 1)).astype(np.int8)
    ep = Epilogue(rng.integers(-500, 500, 40), rng.integers(1 << 9, 1 << 10, 40), 16)
    read = InputUpsample(1, 3, (2, 2))
    layer = compile_conv2d(x.shape, w, epilogue=ep, fusions=Fusions(up=read))
    assert layer.schedule.toh % 2 == 0 and layer.schedule.tow % 2 == 0  # tiles of whole source pixels
    steps = layer.lowering.steps(layer.schedule)
    assert all(read.covers(b0) == read.covers(b0 + n - 1) for b0, n in steps)  # a step reads one tensor
    assert layer.lowering.tensor_bytes()["up"] == 3 * 10 * 12 * 16
    blind = x.copy()
    blind[:, 16:64] = 0  # the upsampled channels are not read
    got = layer.run(Device("pynq", backend), blind, up=s).out
    np.testing.assert_array_equal(got, oracle.conv2d_oracle(x, w, layer.spec, ep))
    with pytest.raises(CompileError, match="not a 1x1 convolution of stride 1"):
        compile_conv2d(x.shape, np.zeros((16, x.shape[1], 3, 3), np.int8), padding=1, fusions=Fusions(up=read))
    with pytest.raises(CompileError, match="not a multiple of the factor"):
        compile_conv2d(x.shape, w, fusions=Fusions(up=InputUpsample(1, 3, (3, 2))))
    with pytest.raises(CompileError, match="exactly when the layer was compiled to read one"):
        layer.run(Device("pynq", "sim"), x)


@pytest.fixture(scope="module", params=[1, 2], ids=["exact-multiple", "sliced"])
def compiled_case(request):
    graph = _quantized_convt_graph(*CASES[request.param])
    artifact, _ = compile_model(graph)
    return graph, artifact


def test_every_phase_runs_on_the_accelerator_bit_exact(compiled_case, backend):
    graph, artifact = compiled_case
    phases = [s for s in artifact.steps if s.kind == "accel"]
    assert len(phases) == 4 and artifact.accel_macs == artifact.total_macs
    assert len({s.writes[0] for s in phases}) == 1  # every phase stores into the one interleaved tensor
    assert not any(n.op == "interleave" for s in artifact.steps if s.kind == "cpu" for n in s.graph.nodes)
    module = Module(artifact, backend)
    low = lower_qdq(graph)
    x = np.random.default_rng(5).normal(0, 2, (1, 24, 6, 7)).astype(np.float32)
    np.testing.assert_array_equal(module.run(x), evaluate(low, {"x": x})["y"])
    module.close()


# ---------------------------------------------------------------------------------------------------------
# A U-Net, QDQ-quantized by onnxruntime and by vdla's calibration


@pytest.fixture(scope="module")
def unet_qdq():
    pytest.importorskip("onnxruntime")
    from vdla.zoo.models import calibration_images, quantize_qdq, unet

    model = unet()
    return model, quantize_qdq(model, calibration_images((1, 3, 16, 16), 8))


@pytest.fixture(scope="module")
def unet_compiled(unet_qdq):
    return compile_model(unet_qdq[1])


def test_unet_qdq_runs_its_conv_transpose_as_four_accelerator_phases(unet_compiled):
    artifact, report = unet_compiled
    accel = [s for s in artifact.steps if s.kind == "accel"]
    assert sum(":phase" in s.name for s in accel) == 4
    assert artifact.accel_macs == artifact.total_macs
    assert not any(n.op == "interleave" for s in artifact.steps if s.kind == "cpu" for n in s.graph.nodes)


def test_unet_qdq_is_bit_exact_on_the_backends_and_matches_onnxruntime(unet_qdq, unet_compiled, backend):
    from vdla.frontend.onnx import import_onnx
    from vdla.frontend.reference import reference_run
    from vdla.graph.passes import simplify
    from vdla.zoo.models import calibration_images, qdq_output_scale

    _, qdq = unet_qdq
    artifact, _ = unet_compiled
    low = lower_qdq(simplify(import_onnx(qdq)))
    module = Module(artifact, backend)
    step = qdq_output_scale(qdq)
    for x in calibration_images((1, 3, 16, 16), 2, seed=7):
        x = x[None]
        got = module.run(x)
        np.testing.assert_array_equal(got, evaluate(low, {"image": x})["logits"])
        want = reference_run(qdq, {"image": x})["logits"]
        assert np.abs(got - want).max() <= step * 1.01  # at most one step: rounding ties
    module.close()


def test_unet_quantized_by_vdla_runs_its_phases_on_the_accelerator(unet_qdq):
    from vdla.frontend.reference import reference_run
    from vdla.zoo.models import calibration_images, cosine_rows

    model, _ = unet_qdq
    artifact, report = compile_model(model, calib=calibration_images((1, 3, 16, 16), 8))
    (layer,) = [t for t in report.quantization.layers if t.op == "conv_transpose"]
    assert layer.weight_scale_min > 0
    assert sum(":phase" in s.name for s in artifact.steps if s.kind == "accel") == 4
    module = Module(artifact, "sim")
    x = calibration_images((1, 3, 16, 16), 1, seed=9)
    got, want = module.run(x), reference_run(model, {"image": x})["logits"]
    assert cosine_rows(got.reshape(1, -1), want.reshape(1, -1))[0] > 0.99
    module.close()


@pytest.mark.parametrize("rescaled", [False, True], ids=["as_is", "rescaled"])
def test_a_layer_with_a_residual_stores_into_a_channel_block_view(backend, rescaled):
    """A residual layer writes its channel blocks of a concatenation (a YOLO bottleneck's sum into its C2f
    concat): the residual is read in the layer's own shape; any other view with a residual is refused."""
    from vdla.compiler import CompileError, compile_conv2d
    from vdla.compiler.spec import OutputView
    from vdla.graph.epilogue import Epilogue, Rescale
    from vdla.runtime import Device

    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (1, 32, 6, 6)).astype(np.int8)
    w = rng.integers(-128, 128, (32, 32, 3, 3)).astype(np.int8)
    res = rng.integers(-128, 128, (1, 32, 6, 6)).astype(np.int8)
    rescale = Rescale((-128, 127), 1 << 29, 30, 3 << 27, 30, 2) if rescaled else None
    ep = Epilogue(rng.integers(-1000, 1000, 32), np.full(32, 1 << 30), 44, "int8", rescale)
    view = OutputView((6, 6), blocks=(1, 4))  # blocks 1 and 2 of a 4-block tensor
    layer = compile_conv2d(x.shape, w, padding=1, epilogue=ep, out_view=view)
    assert layer.lowering.tensor_bytes()["out"] == 4 * 36 * 16 and layer.lowering.tensor_bytes()["res"] == 2 * 36 * 16
    want = oracle.conv2d_oracle(x, w, layer.spec, ep, res)
    np.testing.assert_array_equal(layer.run(Device("pynq", backend), x, residual=res).out, want)
    with pytest.raises(CompileError, match="residual only when it selects channel blocks alone"):
        compile_conv2d(x.shape, w, padding=1, epilogue=ep, out_view=OutputView((12, 12), (0, 0), (2, 2)))
