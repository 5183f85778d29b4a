"""The model suite (``vdla.zoo.suite``): real architectures exported from torch with seeded random weights,
committed as ONNX files, each compiled two ways and run on the simulator against onnxruntime.

- vdla's own calibration, through the command line (``vdla compile --input-shape ... --calib``, ``vdla run
  --input ... --output``): every output's cosine with onnxruntime's float output is at least 0.99;
- onnxruntime's QDQ model, through the API: every output equals onnxruntime running the QDQ model with graph
  optimizations off, or differs only where the layer-by-layer comparison finds rounding ties of the
  reference's float32 arithmetic; all of its MACs run on the accelerator, and a CNN has no CPU step but the
  input's and the output's;
- four small models on the RTL, bit-exact with the simulator, cycle counts within 5% of its cycle model.

``benchmarks/models.py`` measures the same suite with more inputs and writes its figures; here each model
calibrates on 8 samples and checks 2 inputs. Every model run is of the ``models`` tier (``make test-all``,
CI); the largest are also marked slow.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from rtl_presets import ZU_RTL  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.frontend.reference import compare_layers, reference_session  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import CompileOptions, compile_model  # noqa: E402
from vdla.zoo.models import cosine, quantize_qdq  # noqa: E402
from vdla.zoo.suite import SUITE, SuiteError, suite_model  # noqa: E402

SLOW = {"resnet50", "mobilenet_v2", "efficientnet_b0", "yolov8n"}  # each over a minute here: make test-all runs them
FILES = [m for m in SUITE.values() if m.file is not None]
CALIB, TESTS = 8, 2


def _models(names):
    """Each model a parameter of the ``models`` tier (make test-all), the largest also ``slow``."""
    return [pytest.param(n, marks=[pytest.mark.models, *[pytest.mark.slow] * (n in SLOW)]) for n in names]


def _reference(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = reference_session(model)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


@pytest.mark.parametrize("m", FILES, ids=lambda m: m.name)
def test_suite_files_are_committed_small_and_import_at_their_shapes(m):
    assert m.path.is_file(), f"{m.path}: python examples/models/export.py --only {m.name}"
    assert m.path.stat().st_size < 5.25e6, f"{m.path.name} is {m.path.stat().st_size:,} bytes (about 5 MB at most)"
    graph = import_onnx(m.load(), m.input_shapes())
    assert {k: t.shape for k, t in graph.inputs.items()} == m.input_shapes()
    stacked = m.samples(3, 0)
    assert all(v.shape == (3, *m.inputs[k][1:]) for k, v in stacked.items())
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(m.feeds(2, 5), m.feeds(2, 5), strict=True) for k in a)


def test_an_unknown_suite_model_is_refused_naming_the_suite():
    with pytest.raises(SuiteError, match="no suite model 'resnet18'; the suite: resnet50, "):
        suite_model("resnet18")


@pytest.mark.parametrize("name", _models(SUITE))
def test_calibrated_by_vdla_from_the_command_line_tracks_onnxruntime_float(name, tmp_path, capsys):
    from vdla.cli import main

    m = SUITE[name]
    model = m.load()
    path = m.path
    if path is None:  # built in memory: written where the CLI can read it
        import onnx

        path = tmp_path / f"{name}.onnx"
        onnx.save(model, path)
    np.savez(tmp_path / "calib.npz", **m.samples(CALIB, 1))
    shapes = [a for k, s in m.input_shapes().items() for a in ("--input-shape", f"{k}={'x'.join(map(str, s))}")]
    out = tmp_path / f"{name}.vdla"
    calib = ["--calib", str(tmp_path / "calib.npz"), "--calibration", m.calibration]
    assert main(["compile", str(path), *shapes, *calib, "-o", str(out)]) == 0
    assert "MACs on the accelerator" in capsys.readouterr().out
    for i, feed in enumerate(m.feeds(1, 7)):  # one input: the QDQ test below runs TESTS through the same models
        inputs = []
        for k, v in feed.items():
            np.save(tmp_path / f"{k}{i}.npy", v)
            inputs += ["--input", f"{k}={tmp_path / f'{k}{i}.npy'}"]
        assert main(["run", str(out), *inputs, "--output", str(tmp_path / f"y{i}.npz")]) == 0
        with np.load(tmp_path / f"y{i}.npz") as got:
            want = _reference(model, feed)
            assert sorted(got.files) == sorted(want)
            for k, w in want.items():
                assert got[k].shape == w.shape, k
                assert cosine(got[k], w) >= 0.99, f"{name} output {k!r}, input {i}: cosine {cosine(got[k], w)}"


@functools.cache
def qdq_compiled(name: str):
    """(QDQ model, artifact) of a suite model, compiled once per worker process. A cache, not a module fixture:
    the tests using it are then dealt to every worker instead of being kept on one (conftest's xdist groups)."""
    m = SUITE[name]
    qmodel = quantize_qdq(m.load(), m.samples(CALIB, 1))
    artifact, _ = compile_model(qmodel, None, CompileOptions(input_shapes=m.input_shapes()))
    return qmodel, artifact


@pytest.mark.parametrize("name", _models(SUITE))
def test_onnxruntime_qdq_equals_the_reference_up_to_its_rounding_ties(name):
    m = SUITE[name]
    qmodel, artifact = qdq_compiled(name)
    module = Module(artifact, "sim")
    feeds = m.feeds(TESTS, 7)
    differing = 0
    for feed in feeds:
        got = module.run(feed)
        got = got if isinstance(got, dict) else {next(iter(artifact.outputs)): got}
        for k, w in _reference(qmodel, feed).items():
            assert got[k].shape == w.shape and got[k].dtype == w.dtype, k
            differing += int(np.count_nonzero(got[k] != w))
    if differing:  # every element that differs must come from a tie the reference rounded differently
        layers = compare_layers(qmodel, lower_qdq(simplify(import_onnx(qmodel, m.input_shapes()))), feeds)
        unexplained = [(a.value, a.differing, a.ties) for a in layers if a.differing != a.ties]
        assert not unexplained, f"{name}: {differing} output elements differ; layers (name, differing, ties)"
    share = artifact.accel_macs / artifact.total_macs
    assert share == 1.0, f"{name}: {share:.1%} of the MACs on the accelerator"
    cpu = [s.name for s in artifact.steps if s.kind == "cpu"]
    assert len(cpu) == 2, f"{name}: CPU steps {cpu} (the input's and the output's only)"


@pytest.mark.parametrize("name", _models(["bert_tiny", "unet", "yolo", "mobilenet_v3_small"]))
def test_small_models_on_the_rtl_are_bit_exact_with_cycles_within_5_percent(name, rtl_library):
    _, artifact = qdq_compiled(name)
    sim_and_rtl_agree(SUITE[name], artifact, 0.05)


@pytest.mark.parametrize("quantization", ["vdla", "ort-qdq"])
@pytest.mark.parametrize("name", _models(["vit_tiny", "bert_tiny"]))
def test_transformers_with_their_layers_on_the_accelerator_are_bit_exact_on_the_rtl(name, quantization, rtl_library):
    """Under vdla's calibration and as onnxruntime's QDQ model (every LayerNorm, attention block, GELU and residual
    add on the accelerator, two CPU steps) the whole model on the RTL equals the simulator, its cycles within 1%."""
    m = SUITE[name]
    if quantization == "vdla":
        options = CompileOptions(input_shapes=m.input_shapes(), calibration=m.calibration)
        artifact, _ = compile_model(m.load(), m.samples(8, 0), options)
    else:
        artifact = qdq_compiled(name)[1]
    assert sum(s.kind == "cpu" for s in artifact.steps) == 2
    sim_and_rtl_agree(m, artifact, 0.01)


def sim_and_rtl_agree(m, artifact, tolerance: float) -> None:
    """``artifact`` run on one of ``m``'s inputs: the RTL's outputs equal the simulator's, its accelerator cycles
    within ``tolerance`` of the simulator's."""
    (feed,) = m.feeds(1, 11)
    sim, rtl = Module(artifact, "sim"), Module(artifact, "rtl")
    want, got = sim.run(feed), rtl.run(feed)
    for k in want if isinstance(want, dict) else [None]:
        np.testing.assert_array_equal(got if k is None else got[k], want if k is None else want[k])
    cycles = rtl.last_report.accel_cycles, sim.last_report.accel_cycles
    assert abs(cycles[0] - cycles[1]) <= tolerance * cycles[0], f"rtl {cycles[0]:,} cycles, sim {cycles[1]:,}"
    rtl.close()


@pytest.mark.slow  # a Verilator build of each Zynq UltraScale+ preset (about 100 s on 2 cores)
@pytest.mark.parametrize("preset", ZU_RTL)  # one build per simulated design (rtl_presets)
@pytest.mark.parametrize("name", _models(["unet", "bert_tiny"]))
def test_a_small_model_on_each_zynq_ultrascale_presets_rtl(name, preset):
    """Compiled for the Zynq UltraScale+ presets' designs (two for the three: tests/rtl_presets.py; a 128-bit
    bus; BERT-tiny's QDQ attention reading its planes and P from OUT), a suite model runs on that preset's RTL
    bit-exact with its simulator, in cycles within 1%."""
    m = SUITE[name]
    qmodel = quantize_qdq(m.load(), m.samples(CALIB, 1))
    artifact, _ = compile_model(qmodel, None, CompileOptions(input_shapes=m.input_shapes(), config=preset))
    sim_and_rtl_agree(m, artifact, 0.01)
