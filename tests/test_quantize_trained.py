"""Trained models as their exporters write them (issue 51): layers with near-zero output channels (a
trained-like convolution with channels scaled by 1e-30 and a denormal 1e-40, with biases; a Paddle-style graph
whose batch norms have decayed gammas), ``torch.clamp(min=)``'s one-bound ``Clip``, NaN or infinite weights,
and ``vdla compile`` of a float model without calibration data, with ``--calib random``, and failing.

Each model is compiled through the API and the command line and run on ``sim`` against onnxruntime's float
output on smooth random images (:func:`vdla.zoo.models.calibration_images`): cosine >= 0.99. Measured (the
lowest of 4 inputs): the trained-like network 0.9984, the Paddle-style one 0.9997, the clamp network 0.9989;
before the negligible-channel floor the first two did not compile, nor the third before one-bound clips.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.cli import main  # noqa: E402
from vdla.frontend import FrontendError, import_onnx  # noqa: E402
from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402
from vdla.model import Module, load_artifact  # noqa: E402
from vdla.model.pipeline import compile_model  # noqa: E402
from vdla.zoo.models import calibration_images, cosine  # noqa: E402

SHAPE = (3, 32, 32)
COS_MIN = 0.99


class _Net:
    """An onnx.helper model with seeded, trained-like weights: per-output-channel gains spread over a decade."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def init(self, name: str, value, dtype: type = np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op: str, inputs, output: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    def weights(self, cout: int, cin: int, k: int) -> np.ndarray:
        gain = np.exp(self.rng.uniform(0, np.log(10), (cout, 1, 1, 1)))  # 1..10 times He's scale
        return (self.rng.normal(0, np.sqrt(2 / (cin * k * k)), (cout, cin, k, k)) * gain / 3).astype(np.float32)

    def model(self, out: str, classes: int, opset: int = 17) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", *SHAPE])
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", classes])
        graph = helper.make_graph(self.nodes, "trained", [x], [y], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        onnx.checker.check_model(m)
        return m


def _dead_channels(w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``w`` with ~8% of its output channels scaled by 1e-30 and one more by 1e-40 (a float32 denormal)."""
    w = w.copy()
    dead = rng.choice(w.shape[0], max(2, round(0.08 * w.shape[0])) + 1, replace=False)
    w[dead[:-1]] *= np.float32(1e-30)
    w[dead[-1]] *= np.float32(1e-40)
    return w


def trained_like() -> onnx.ModelProto:
    """conv-relu x3 (the second and third with dead channels and their biases), global average, dense."""
    n = _Net(1)
    x = "image"
    for i, (cin, cout) in enumerate(((3, 16), (16, 32), (32, 48))):
        w = n.weights(cout, cin, 3)
        w = _dead_channels(w, n.rng) if i else w
        b = n.rng.normal(0, 0.2, cout).astype(np.float32)
        b[np.abs(w).reshape(cout, -1).max(axis=1) < 1e-20] = 0.3691  # the dead channels output their bias
        conv = n.node(
            "Conv", (x, n.init(f"w{i}", w), n.init(f"b{i}", b)), f"conv{i}", pads=[1] * 4, strides=[2 - i % 2] * 2
        )
        x = n.node("Relu", (conv,), f"relu{i}")
    pool = n.node("GlobalAveragePool", (x,), "pool")
    flat = n.node("Flatten", (pool,), "flat")
    fc = n.init("fc_w", n.rng.normal(0, 0.2, (10, 48)))
    n.node("Gemm", (flat, fc, n.init("fc_b", n.rng.normal(0, 0.1, 10))), "logits", transB=1)
    return n.model("logits", 10)


def paddle_style() -> onnx.ModelProto:
    """What Paddle2ONNX writes for a MobileNetV3-style block: convolutions without bias, each followed by a
    BatchNormalization (some gammas decayed to 1e-30: near-zero channels once folded), HardSwish as
    HardSigmoid * x, a depthwise layer, ReLU6 as Clip with constant min/max inputs, the classifier as Reshape,
    MatMul and Add."""
    n = _Net(2)

    def conv_bn(x: str, cin: int, cout: int, k: int, name: str, group: int = 1, stride: int = 1) -> str:
        w = n.init(f"{name}_weights", n.weights(cout, cin // group, k))
        gamma = n.rng.uniform(0.5, 1.5, cout).astype(np.float32)
        gamma[n.rng.choice(cout, max(1, cout // 12), replace=False)] = 1e-30
        bn = [
            n.init(f"{name}_bn_scale", gamma),
            n.init(f"{name}_bn_offset", n.rng.normal(0, 0.2, cout)),
            n.init(f"{name}_bn_mean", n.rng.normal(0, 0.1, cout)),
            n.init(f"{name}_bn_variance", n.rng.uniform(0.5, 2, cout)),
        ]
        pad = [k // 2] * 4
        conv = n.node("Conv", (x, w), f"{name}.conv", pads=pad, group=group, strides=[stride] * 2, kernel_shape=[k, k])
        return n.node("BatchNormalization", (conv, *bn), f"{name}.bn", epsilon=1e-5)

    def hardswish(x: str) -> str:
        gate = n.node("HardSigmoid", (x,), f"{x}.hsig", alpha=1 / 6, beta=0.5)
        return n.node("Mul", (x, gate), f"{x}.hswish")

    lo, hi = n.init("relu6_min", np.array(0.0)), n.init("relu6_max", np.array(6.0))
    x = hardswish(conv_bn("image", 3, 16, 3, "conv1", stride=2))
    x = n.node("Clip", (conv_bn(x, 16, 64, 1, "expand"), lo, hi), "expand.relu6")
    x = n.node("Clip", (conv_bn(x, 64, 64, 3, "dw", group=64), lo, hi), "dw.relu6")
    x = hardswish(conv_bn(x, 64, 24, 1, "project"))
    pool = n.node("GlobalAveragePool", (x,), "pool")
    flat = n.node("Reshape", (pool, n.init("shape", [0, -1], np.int64)), "flat")
    mm = n.node("MatMul", (flat, n.init("fc_weights", n.rng.normal(0, 0.2, (24, 10)))), "fc.mm")
    n.node("Add", (mm, n.init("fc_bias", n.rng.normal(0, 0.1, 10))), "save_infer_model/scale_0.tmp_1")
    return n.model("save_infer_model/scale_0.tmp_1", 10, opset=13)


def clamped(absent: bool) -> onnx.ModelProto:
    """``torch.clamp(min=)`` as exported: ``Clip(x, 1e-10, +inf)`` (or the max input left empty) after a
    convolution (folded into its epilogue), ``Clip(x, -inf, 6)`` after another, and ``sqrt(clamp(x * x,
    min=1e-10))`` of the logits on the CPU."""
    n = _Net(3)
    inf = "" if absent else n.init("inf", np.array(np.inf))
    eps, six, ninf = n.init("eps", np.array(1e-10)), n.init("six", np.array(6.0)), n.init("ninf", np.array(-np.inf))
    c0 = n.node(
        "Conv", ("image", n.init("w0", n.weights(16, 3, 3)), n.init("b0", np.full(16, 0.1))), "c0", pads=[1] * 4
    )
    x = n.node("Clip", (c0, eps, inf) if inf else (c0, eps), "clamp0")
    c1 = n.node("Conv", (x, n.init("w1", n.weights(16, 16, 3)), n.init("b1", np.full(16, 0.1))), "c1", pads=[1] * 4)
    x = n.node("Clip", (c1, ninf, six), "clamp1")
    pool = n.node("GlobalAveragePool", (x,), "pool")
    flat = n.node("Flatten", (pool,), "flat")
    fc = n.node("Gemm", (flat, n.init("fc_w", n.rng.normal(0, 0.3, (10, 16)))), "fc", transB=1)
    sq = n.node("Mul", (fc, fc), "sq")
    n.node("Sqrt", (n.node("Clip", (sq, eps, inf) if inf else (sq, eps), "clamp2"),), "norm")
    return n.model("norm", 10)


MODELS = {"trained_like": trained_like, "paddle_style": paddle_style, "clamp": lambda: clamped(False)}


def _check_on_sim(artifact, model: onnx.ModelProto, seed: int = 7) -> float:
    """The lowest cosine over 4 images of the artifact on sim against onnxruntime's float output."""
    session = reference_session(model)
    module = Module(artifact, "sim")
    out = session.get_outputs()[0].name
    worst = 1.0
    for x in calibration_images(SHAPE, 4, seed=seed):
        want = session.run(None, {"image": x[None]})[0]
        got = module.run(x[None])
        worst = min(worst, cosine(got if isinstance(got, np.ndarray) else got[out], want))
    return worst


@pytest.mark.parametrize("name", sorted(MODELS))
def test_trained_models_compile_and_track_onnxruntime(name):
    model = MODELS[name]()
    art, report = compile_model(
        model, calib={"image": calibration_images(SHAPE, 16, seed=1)}, input_shapes={"image": (1, *SHAPE)}
    )
    assert report.quantization is not None and art.accel_macs > 0.9 * art.total_macs
    assert _check_on_sim(art, model) >= COS_MIN


@pytest.mark.parametrize("name", ["trained_like", "paddle_style"])
def test_cli_compiles_trained_models(name, tmp_path, capsys):
    """``vdla compile MODEL --calib calib.npz --input-shape NAME=SHAPE`` and nothing else, as a new user runs it."""
    model = MODELS[name]()
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", image=calibration_images(SHAPE, 16, seed=1))
    out = tmp_path / "m.vdla"
    args = ["compile", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "calib.npz"), "--input-shape"]
    assert main([*args, "image=1x3x32x32"]) == 0, capsys.readouterr().out
    text = " ".join(capsys.readouterr().out.split())
    assert "is a float model" not in text and "MACs on the accelerator: 100.00%" in text
    assert _check_on_sim(load_artifact(out), model) >= COS_MIN


def test_one_bound_clip_is_no_bound_on_the_cpu_and_in_the_epilogue():
    """``Clip(x, 1e-10, +inf)``, ``Clip(x, 1e-10)`` (max absent) and ``Clip(x, -inf, 6)`` run as float on the CPU
    (no calibration: exact against onnxruntime) and quantized, folded into the convolutions' epilogues."""
    x = calibration_images(SHAPE, 2, seed=3)
    for absent in (False, True):
        model = clamped(absent)
        art, _ = compile_model(model, input_shapes={"image": (1, *SHAPE)})  # float: all on the CPU
        want = reference_session(model).run(None, {"image": x[:1]})[0]
        np.testing.assert_allclose(Module(art, "sim").run(x[:1]), want, rtol=1e-4, atol=1e-5)
        clips = [n.attrs for n in import_onnx(model, {"image": (1, *SHAPE)}).nodes if n.op == "clip"]
        eps = float(np.float32(1e-10))
        assert [(c["lo"], c["hi"]) for c in clips] == [(eps, np.inf), (-np.inf, 6.0), (eps, np.inf)]
        art, _ = compile_model(
            model, calib={"image": calibration_images(SHAPE, 8, seed=1)}, input_shapes={"image": (1, *SHAPE)}
        )
        cpu_ops = {n.op for s in art.steps if s.kind != "accel" for n in s.graph.nodes}
        assert "clip" not in cpu_ops and sum(s.kind == "accel" for s in art.steps) == 4  # 2 convs, pool, dense


def _clip_model(lo: float, hi: float | None, constant: bool = False) -> onnx.ModelProto:
    """``Clip(image, lo, hi)`` of a (1, 4) input, the bounds initializers or ``Constant`` nodes."""
    n = _Net(4)
    bounds = [n.init("lo", np.array(lo)), *([n.init("hi", np.array(hi))] if hi is not None else [])]
    if constant:
        n.nodes += [helper.make_node("Constant", [], [t.name], value=t) for t in n.inits]
        n.inits = []
    n.node("Clip", ("image", *bounds), "clipped")
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("clipped", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(n.nodes, "clip", [x], [y], initializer=n.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_clip_bounds_that_are_not_a_bound_are_refused_naming_the_node():
    assert "clip" not in [n.op for n in import_onnx(_clip_model(-np.inf, np.inf)).nodes]  # no bound: the input
    with pytest.raises(UnsupportedError, match=r"'clipped'.*min is NaN \(input 'lo'\)"):
        import_onnx(_clip_model(np.nan, 1.0, constant=True))
    with pytest.raises(FrontendError, match=r"initializer 'lo', input 1 of Clip node 'clipped' holds 1 NaN value"):
        import_onnx(_clip_model(np.nan, 1.0))
    with pytest.raises(UnsupportedError, match=r"'clipped'.*max is -inf \(input 'hi'\): every value would be -inf"):
        import_onnx(_clip_model(0.0, -np.inf))


@pytest.mark.parametrize("bad, where", [(np.nan, "w1"), (np.inf, "w1"), (-np.inf, "b1")])
def test_weights_holding_nan_or_inf_are_refused_at_import_naming_the_initializer(bad, where):
    model = clamped(False)
    init = next(t for t in model.graph.initializer if t.name == where)
    value = numpy_helper.to_array(init).copy()
    value.flat[5] = bad
    init.CopyFrom(numpy_helper.from_array(value, where))
    kind = "NaN" if np.isnan(bad) else "infinite"
    match = rf"initializer '{where}', input {1 if where == 'w1' else 2} of Conv node 'c1' holds 1 {kind} value"
    with pytest.raises(FrontendError, match=match):
        import_onnx(model, {"image": (1, *SHAPE)})


def test_float_model_compile_says_how_to_quantize_and_random_calibration(tmp_path, capsys):
    """Without --calib the first line says the model is float and what to pass; ``--calib random`` quantizes on
    seeded random inputs and warns that the accuracy is meaningless."""
    onnx.save(clamped(True), tmp_path / "m.onnx")
    args = ["compile", str(tmp_path / "m.onnx"), "--input-shape", "image=1x3x32x32", "-o", str(tmp_path / "m.vdla")]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    first = " ".join(" ".join(lines[:4]).split())
    assert "m.onnx is a float model and no --calib was given" in first and "--calib random" in first
    assert "MACs on the accelerator: 0.00%" in " ".join(lines)
    with pytest.warns(UserWarning, match="random inputs.*meaningless"):
        assert main([*args, "--calib", "random"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "is a float model" not in text and "warning: calibrated on seeded random inputs" in text
    assert "8 calibration samples" in text and "MACs on the accelerator: 100.00%" in text


def test_a_failed_compile_leaves_no_artifact_behind(tmp_path, capsys, monkeypatch):
    model = clamped(False)
    init = next(t for t in model.graph.initializer if t.name == "w0")
    init.CopyFrom(numpy_helper.from_array(np.full((16, 3, 3, 3), np.nan, np.float32), "w0"))
    onnx.save(model, tmp_path / "bad.onnx")
    assert main(["compile", str(tmp_path / "bad.onnx"), "--input-shape", "image=1x3x32x32"]) == 2
    assert "initializer 'w0', input 1 of Conv node 'c0' holds 432 NaN" in " ".join(capsys.readouterr().out.split())
    onnx.save(clamped(False), tmp_path / "good.onnx")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("vdla.model.artifact.np.savez", full_disk)  # the artifact fails half written
    assert main(["compile", str(tmp_path / "good.onnx"), "--input-shape", "image=1x3x32x32"]) == 2
    assert "No space left on device" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx", "good.onnx"]  # no .vdla, no temporary file
