"""The first convolution packed (issue 12, part 1): ``im2col`` on the host and a 1x1 convolution whose
reduction runs over (channel, kernel row, kernel column), bit-exact against the convolution it replaces.

* the ``im2col`` operator (oracle, interpreter, CPU JIT kernel) against a reference written here with
  explicit taps;
* the rewrite (``vdla.graph.im2col``) on a quantized model with a 3-channel 7x7 stride-2 first conv: where
  it applies and where not, and the compiled model bit-exact against the interpreter of the lowered graph
  before the rewrite, on sim and rtl;
* ResNet-18's C1 in the packed form on the simulator: cycles and real-MAC efficiency;
* ``vdla compile`` / ``vdla run`` on a QDQ model (onnxruntime) with such a first conv.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
import pytest
from full_units import FULL
from qdq_check import qdq_conv

from vdla.compiler import compile_conv2d
from vdla.cpu_fallback import functions
from vdla.graph import Graph, Node, TensorType, UnsupportedError, oracle
from vdla.graph.im2col import applies, im2col_convs, reduction_blocks
from vdla.graph.interp import evaluate
from vdla.graph.ops import infer_types
from vdla.graph.qdq import lower_qdq
from vdla.graph.types import Quant
from vdla.graph.verify import verify
from vdla.graph.window import make_window
from vdla.model import Module
from vdla.model.pipeline import compile_graph_model
from vdla.runtime import Device
from vdla.zoo.resnet import layer_case, layer_specs

C1_MACS = 118_013_952  # 64 x 3 x 7 x 7 x 112 x 112


def taps_reference(x: np.ndarray, kernel, stride, pads, dilation) -> np.ndarray:
    """im2col by its definition, one kernel tap at a time: channel (c*KH + ky)*KW + kx at output (oh, ow) is
    x[c, oh*sh + ky*dh - top, ow*sw + kx*dw - left], zero outside the input."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    top, bottom, left, right = pads
    n, c, h, w = x.shape
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    xp = np.zeros((n, c, h + top + bottom, w + left + right), x.dtype)
    xp[:, :, top : top + h, left : left + w] = x
    out = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            r, q = ky * dh, kx * dw
            out[:, :, ky, kx] = xp[:, :, r : r + sh * (oh - 1) + 1 : sh, q : q + sw * (ow - 1) + 1 : sw]
    return out.reshape(n, c * kh * kw, oh, ow)


CASES = [  # (shape, kernel, stride, pads (top, bottom, left, right), dilation)
    ((1, 3, 30, 30), (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    ((2, 5, 9, 11), (3, 2), (2, 1), (1, 0, 2, 1), (1, 1)),
    ((1, 2, 12, 10), (3, 3), (1, 2), (0, 0, 0, 0), (2, 2)),
    ((1, 1, 5, 5), (5, 5), (3, 3), (4, 4, 4, 4), (1, 1)),  # rows and columns entirely in the padding
    ((1, 4, 6, 6), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
]


@pytest.mark.parametrize("dtype", ["int8", "float32"])
@pytest.mark.parametrize("shape, kernel, stride, pads, dilation", CASES)
def test_im2col_matches_the_tap_by_tap_reference(shape, kernel, stride, pads, dilation, dtype):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-128, 128, shape).astype(dtype)
    want = taps_reference(x, kernel, stride, pads, dilation)
    win, _ = make_window("im2col", shape[2:], kernel, stride, dilation, pads)
    np.testing.assert_array_equal(oracle.im2col(x, win), want)
    np.testing.assert_array_equal(functions.im2col(x, kernel, stride, pads, dilation), want)
    attrs = {"kernel": kernel, "stride": stride, "padding": pads, "dilation": dilation}
    g = Graph({"x": TensorType(shape, dtype)}, [Node("im2col", ("x",), "y", attrs)], ["y"])
    assert verify(g)["y"] == TensorType(want.shape, dtype)
    np.testing.assert_array_equal(evaluate(g, {"x": x})["y"], want)
    # the identity the rewrite rests on: the conv equals the 1x1 conv of the im2col, int32 bit for bit
    if dtype == "int8":
        w = rng.integers(-128, 128, (6, shape[1], *kernel), dtype=np.int8)
        one = make_window("conv2d", want.shape[2:], 1, 1, 1, 0)[0]
        np.testing.assert_array_equal(oracle.conv2d(want, w.reshape(6, -1, 1, 1), one), oracle.conv2d(x, w, win))


def test_im2col_keeps_a_per_tensor_quantization_and_names_bad_input():
    x = TensorType((1, 3, 8, 8), "int8", Quant.of(0.05, 0))
    g = Graph({"x": x}, [Node("im2col", ("x",), "y", {"kernel": 3, "padding": 1})], ["y"])
    assert verify(g)["y"] == TensorType((1, 27, 8, 8), "int8", x.quant)
    per_channel = TensorType((1, 3, 8, 8), "int8", Quant.of((0.1, 0.2, 0.3), 0, 1))
    assert verify(g.copy(inputs={"x": per_channel}))["y"].quant is None
    with pytest.raises(UnsupportedError, match="im2col.*NCHW"):
        functions.im2col(np.zeros((3, 8, 8), np.int8), 3)
    with pytest.raises(UnsupportedError, match="im2col.*does not fit"):
        functions.im2col(np.zeros((1, 3, 4, 4), np.int8), 7)


# ---------------------------------------------------------------------------------------------------------
# The rewrite on a quantized model

S_IN, S_MID, S_OUT = 0.05, 0.1, 0.2


def first_conv_model(seed: int = 0, image: int = 20, stem_channels: int = 3) -> Graph:
    """image -> quantize -> conv 7x7 stride 2 pad 3 (3 -> 16) + ReLU -> quantize -> conv 3x3 (16 -> 16) + ReLU
    -> quantize -> dequantize: a QDQ model whose first conv the rewrite packs and whose second it leaves."""
    rng = np.random.default_rng(seed)
    nodes, params = [], {}
    nodes += [
        Node("quantize", ("image",), "xq", {"scale": S_IN, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": S_IN, "zero_point": 0}),
    ]
    a = qdq_conv(nodes, params, rng, "stem", "xd", stem_channels, 16, 7, S_IN, stride=2, pad=3)
    nodes += [
        Node("quantize", (a,), "aq", {"scale": S_MID, "zero_point": 0}),
        Node("dequantize", ("aq",), "ad", {"scale": S_MID, "zero_point": 0}),
    ]
    b = qdq_conv(nodes, params, rng, "body", "ad", 16, 16, 3, S_MID, stride=1, pad=1)
    nodes += [
        Node("quantize", (b,), "yq", {"scale": S_OUT, "zero_point": 0}),
        Node("dequantize", ("yq",), "y", {"scale": S_OUT, "zero_point": 0}),
    ]
    inputs = {"image": TensorType((1, stem_channels, image, image), "float32")}
    return Graph(inputs, nodes, ["y"], params, name="first_conv")


def _image(seed: int, shape=(1, 3, 20, 20)) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2.0, shape).astype(np.float32)


def test_reduction_blocks():
    assert reduction_blocks(3, 7, 7, 16) == (49, 10)  # ResNet-18's C1
    assert reduction_blocks(3, 3, 3, 16) == (9, 2)
    assert reduction_blocks(16, 3, 3, 16) == (9, 9)  # nothing to gain: left alone
    assert reduction_blocks(3, 1, 1, 16) == (1, 1)


def test_the_rewrite_packs_the_first_conv_only_and_is_exact():
    low = lower_qdq(first_conv_model())
    types = infer_types(low)
    convs = [n for n in low.nodes if n.op == "conv2d"]
    assert [applies(n, low, types, 16) for n in convs] == [True, False]  # the body conv reads the stem's output
    packed = im2col_convs(low, 16)
    types2 = verify(packed, after="im2col")
    (im2col,) = [n for n in packed.nodes if n.op == "im2col"]
    stem, body = [n for n in packed.nodes if n.op == "conv2d"]
    assert im2col.inputs == ("xq",) and stem.inputs[0] == im2col.output
    assert types2[im2col.output].shape == (1, 147, 10, 10) and types2[im2col.output].quant == types["xq"].quant
    assert packed.params[stem.inputs[1]].shape == (16, 147, 1, 1) and stem.attrs == {}
    assert stem.output == convs[0].output and body == convs[1]
    assert convs[0].inputs[1] not in packed.params  # the 7x7 weights are gone
    for seed in range(3):
        x = _image(seed)
        want = evaluate(low, {"image": x}, keep=True)
        got = evaluate(packed, {"image": x}, keep=True)
        for name in (convs[0].output, "y"):
            np.testing.assert_array_equal(got[name], want[name])
    # out of the way where it does not apply: 16 channels, or a graph without such a conv
    wide = lower_qdq(first_conv_model(stem_channels=16))
    assert not any(n.op == "im2col" for n in im2col_convs(wide, 16).nodes)
    assert im2col_convs(packed, 16).nodes == packed.nodes


@pytest.fixture(scope="module")
def compiled():
    return compile_graph_model(first_conv_model(), "pynq")


def test_the_compiled_model_runs_the_packed_conv_on_the_accelerator(compiled):
    artifact, report = compiled
    accel = [s for s in artifact.steps if s.kind == "accel"]
    assert len(accel) == 2 and artifact.accel_macs == artifact.total_macs
    first = accel[0].layer
    assert first["input"] == [1, 147, 10, 10] and first["kernel"] == [1, 1] and first["stride"] == [1, 1]
    assert accel[0].macs == 16 * 147 * 10 * 10  # the real MACs: the zero channels up to 160 are not counted
    (prep,) = [s for s in artifact.steps if s.kind == "cpu" and any(n.op == "im2col" for n in s.graph.nodes)]
    assert {n.op for n in prep.graph.nodes} >= {"quantize", "im2col", "pack_blocked"}
    assert report.placement[accel[0].name] == "accel"


def test_the_compiled_model_is_bit_exact_against_the_graph_before_the_rewrite(compiled, backend):
    artifact, _ = compiled
    module = Module(artifact, backend)
    ref = lower_qdq(first_conv_model())
    for seed in (0, 1):
        x = _image(seed)
        np.testing.assert_array_equal(module.run(x), evaluate(ref, {"image": x})["y"])
    report = module.last_report
    assert report.accel_mac_share == 1.0 and report.cpu_ms > 0
    module.close()


# ---------------------------------------------------------------------------------------------------------
# ResNet-18's C1 in the packed form


def _c1_packed(multiplier=None, config="pynq"):
    """C1's input, im2col'ed by the CPU kernel, compiled as the 1x1 conv over 147 channels on the simulator;
    returns (run, reference of the 7x7 conv, im2col milliseconds)."""
    case = layer_case("C1", layer_specs()["C1"])
    sp = case.spec
    cols = functions.im2col(case.x, (sp.kh, sp.kw), (sp.sh, sp.sw), sp.pad)
    t0 = time.perf_counter()
    functions.im2col(case.x, (sp.kh, sp.kw), (sp.sh, sp.sw), sp.pad, out=cols)
    ms = (time.perf_counter() - t0) * 1e3
    w = case.w.reshape(sp.oc, -1, 1, 1)
    ep = case.epilogue
    if multiplier is not None:
        ep = replace(ep, multiplier=multiplier, shift=case.shift + 30)
    layer = compile_conv2d(cols.shape, w, epilogue=ep, config=config)
    run = layer.run(Device(config), cols)
    ref = oracle.conv2d_oracle(case.x, case.w, sp, ep)
    return run, ref, ms


def test_resnet18_c1_packed_runs_at_over_85_percent_of_its_real_macs():
    run, ref, ms = _c1_packed()
    np.testing.assert_array_equal(run.out, ref)
    cycles = run.counters.cycles
    efficiency = C1_MACS / (cycles * 256)
    print(f"C1 packed, shift-only epilogue: {cycles} cycles, {efficiency:.1%} of real MACs, im2col {ms:.2f} ms")
    assert efficiency >= 0.85  # 2.47 M cycles (19%) with 3 channels padded to 16


def test_resnet18_c1_packed_with_a_per_channel_multiplier_is_exact():
    """A per-channel requantizing MUL holds its multiplier row across the tile's pixels, pipelined: its 1 cycle
    per output element over 10 GEMM cycles caps C1 at 10 / 11 of the GEMM rate, 82.8% of real MACs (76% when
    each MUL row took two cycles; in the whole network the max pool in C1's tiles leaves the MUL a quarter of
    these elements). With the full ALU: the pynq build's half-width one takes 2 cycles a MUL row (10 / 12)."""
    m = np.random.default_rng(5).integers(1 << 29, 1 << 30, 64)
    run, ref, _ = _c1_packed(m, FULL)
    np.testing.assert_array_equal(run.out, ref)
    efficiency = C1_MACS / (run.counters.cycles * 256)
    print(f"C1 packed, per-channel multiplier: {run.counters.cycles} cycles, {efficiency:.1%} of real MACs")
    assert efficiency >= 0.8


# ---------------------------------------------------------------------------------------------------------
# The command line on a QDQ model from onnxruntime


def test_cli_compiles_and_runs_a_qdq_model_with_a_packed_first_conv(tmp_path, capsys):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from vdla.cli import main
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify
    from vdla.zoo.models import calibration_images, quantize_qdq, small_resnet

    qdq = tmp_path / "small_qdq.onnx"
    model = quantize_qdq(small_resnet(seed=0), calibration_images((3, 32, 32), 16, seed=1), path=qdq)
    art = tmp_path / "small.vdla"
    assert main(["compile", str(qdq), "-o", str(art), "--dump", str(tmp_path / "graphs")]) == 0
    assert any("im2col" in p.name for p in (tmp_path / "graphs").iterdir())  # the pass's dump
    x = calibration_images((3, 32, 32), 1, seed=9)
    np.save(tmp_path / "x.npy", x)
    args = ["run", str(art), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz")]
    assert main([*args, "--json", str(tmp_path / "r.json"), "--backend", "sim"]) == 0
    out = capsys.readouterr().out
    assert "im2col" in out and "MACs on the accelerator: 100.00%" in out
    report = json.loads((tmp_path / "r.json").read_text())
    stem = next(s for s in report["steps"] if s["where"] == "accel")
    assert stem["macs"] == 16 * 147 * 16 * 16  # the 7x7 stride-2 stem: 3 x 7 x 7 channels, 16x16 outputs
    assert any("im2col" in s["op"] and s["cpu_ms"] > 0 for s in report["steps"] if s["where"] == "cpu")
    ref = lower_qdq(simplify(import_onnx(model)))
    want = evaluate(ref, {"image": x})["logits"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["logits"], want)
