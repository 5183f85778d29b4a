"""Data movement as 0/1 convolutions (``vdla.graph.copies``): a YOLO-style C2f block (split, residual add
after SiLU, concatenation) and a nearest upsampling run without a CPU step between layers; the rewrite is
exact in float; the accelerator equals the lowered graph bit for bit and onnxruntime's int8 reference within
one output step; a move whose data would go back to the CPU anyway is not made."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402
from qdq_check import accel_between, assert_runs_as_lowered, float_cosine, lowered_graph, onnx_model  # noqa: E402

from vdla.graph.copies import COPY, accelerator_copies  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.graph.tables import quantize_early, tabulate_chains  # noqa: E402
from vdla.zoo.models import quantize_qdq  # noqa: E402

RNG = np.random.default_rng(11)
SHAPE = (1, 16, 8, 8)


def _silu(x: str, out: str) -> list:
    return [helper.make_node("Sigmoid", [x], [f"{out}_s"]), helper.make_node("Mul", [x, f"{out}_s"], [out])]


def _c2f(half: int = 16) -> object:
    """x -> conv1x1 (2*half) -> SiLU -> split (half, half) -> a, b; m = SiLU(conv(SiLU(conv(b)))); r = b + m;
    concat(a, b, r) -> conv1x1 (16) -> SiLU -> nearest 2x -> conv3x3 stride 2 -> y."""
    c = 2 * half
    ws = {
        "w1": (c, 16, 1, 1),
        "wm1": (half, half, 3, 3),
        "wm2": (half, half, 3, 3),
        "w2": (16, 3 * half, 1, 1),
        "w3": (16, 16, 3, 3),
    }
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), k) for k, s in ws.items()]
    inits.append(numpy_helper.from_array(np.array([half, half], np.int64), "sizes"))
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), *_silu("c1", "s1")]
    nodes.append(helper.make_node("Split", ["s1", "sizes"], ["a", "b"], axis=1))
    nodes += [helper.make_node("Conv", ["b", "wm1"], ["m1"], pads=[1] * 4), *_silu("m1", "t1")]
    nodes += [helper.make_node("Conv", ["t1", "wm2"], ["m2"], pads=[1] * 4), *_silu("m2", "t2")]
    nodes.append(helper.make_node("Add", ["b", "t2"], ["r"]))
    nodes.append(helper.make_node("Concat", ["a", "b", "r"], ["cat"], axis=1))
    nodes += [helper.make_node("Conv", ["cat", "w2"], ["c2"]), *_silu("c2", "s2")]
    nodes.append(helper.make_node("Resize", ["s2", "", "scales"], ["up"], mode="nearest"))
    nodes.append(helper.make_node("Conv", ["up", "w3"], ["y"], pads=[1] * 4, strides=[2, 2]))
    return _onnx(nodes, inits, "c2f", (1, 16, 8, 8))


def _onnx(nodes: list, inits: list, name: str, y_shape: tuple[int, ...]):
    """The float ONNX model of ``nodes`` from input ``x`` (SHAPE) to output ``y``."""
    return onnx_model(nodes, inits, name, SHAPE, y_shape)


def _qdq(model):
    return quantize_qdq(model, RNG.normal(0, 1, (8, *SHAPE[1:])).astype(np.float32), input_name="x")


def _tabled(qdq):
    return lowered_graph(qdq)


def _lowered(qdq):
    """The integer graph the accelerator runs: tables, copies, and the copies lowered."""
    return tabulate_chains(quantize_early(lower_qdq(accelerator_copies(_tabled(qdq), 16))))


@pytest.fixture(scope="module", params=[16, 8, 32], ids=["whole_blocks", "half_blocks", "two_blocks"])
def c2f(request):
    from vdla.model.pipeline import compile_model

    qdq = _qdq(_c2f(request.param))
    return qdq, compile_model(qdq)[0], request.param


def test_the_rewrite_is_exact_in_float():
    tabled = _tabled(_qdq(_c2f()))
    moved = accelerator_copies(tabled, 16)
    copies = sorted(n.attrs[COPY] for n in moved.nodes if COPY in n.attrs)
    assert {"add", "concat", "upsample"} <= set(copies), copies
    # the split: the first layer computed again for each half (no slice left, no copy for it): each half is
    # requantized into the concatenation, which the split layers' epilogues do
    assert not [n for n in moved.nodes if n.op == "slice"] and "slice" not in copies
    convs = [n for n in moved.nodes if n.op == "conv2d" and COPY not in n.attrs]
    assert len(convs) == len([n for n in tabled.nodes if n.op == "conv2d"]) + 1
    for seed in range(3):
        x = np.random.default_rng(seed).normal(0, 1, SHAPE).astype(np.float32)
        np.testing.assert_array_equal(evaluate(moved, {"x": x})["y"], evaluate(tabled, {"x": x})["y"])


def test_no_cpu_step_between_layers_and_copies_count_no_macs(c2f):
    _, artifact, half = c2f
    accel_between(artifact)
    # a copy runs as a layer of its own, or the layer computing its input stores it too (an upsampling)
    moved = {s.layer.get(k) for s in artifact.steps if s.kind == "accel" for k in ("copy", "also")} - {None}
    # the add runs as a layer of its own, or in the epilogue of the layer whose output it adds
    moved |= {"add" for s in artifact.steps if s.kind == "accel" and s.layer["op"].endswith("+add")}
    assert {"add", "concat", "upsample"} <= moved
    # identity copies of more than one channel block run as their diagonal blocks (vdla.compiler.blockdiag)
    diagonal = [s for s in artifact.steps if s.kind == "accel" and "block-diagonal" in s.layer["schedule"]]
    assert bool(diagonal) == (half > 16) and all(s.layer.get("copy") for s in diagonal)
    assert all(s.macs == 0 for s in artifact.steps if s.kind == "accel" and s.layer.get("copy"))
    # the upsampling's four phases are the same layer: one step computes it and stores it into every phase
    ups = [s for s in artifact.steps if s.kind == "accel" and "upsample" in (s.layer.get("copy"), s.layer.get("also"))]
    assert len(ups) == 1
    assert artifact.accel_macs == artifact.total_macs > 0


def test_the_accelerator_equals_the_lowered_graph_and_the_int8_reference(c2f, backend):
    qdq, artifact, _ = c2f
    assert_runs_as_lowered(qdq, artifact, _lowered(qdq), backend, SHAPE)


def _shuffle(perm=(0, 2, 1, 3, 4)) -> object:
    """x -> conv (32) -> ReLU -> channel shuffle (reshape, transpose by ``perm``, reshape) -> split -> conv of
    each half, concatenated: ShuffleNet's unit (``perm`` (0, 1, 2, 4, 3) transposes the pixels instead)."""
    inits = [
        numpy_helper.from_array(RNG.normal(0, 0.3, (32, 16, 1, 1)).astype(np.float32), "w1"),
        numpy_helper.from_array(RNG.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32), "wa"),
        numpy_helper.from_array(RNG.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32), "wb"),
        numpy_helper.from_array(np.array([1, 2, 16, 8, 8], np.int64), "s5"),
        numpy_helper.from_array(np.array([1, 32, 8, 8], np.int64), "s4"),
        numpy_helper.from_array(np.array([16, 16], np.int64), "sizes"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "s5"], ["r5"]),
        helper.make_node("Transpose", ["r5"], ["t5"], perm=list(perm)),
        helper.make_node("Reshape", ["t5", "s4"], ["sh"]),
        helper.make_node("Split", ["sh", "sizes"], ["a", "b"], axis=1),
        helper.make_node("Conv", ["a", "wa"], ["ya"]),
        helper.make_node("Conv", ["b", "wb"], ["yb"]),
        helper.make_node("Concat", ["ya", "yb"], ["y"], axis=1),
    ]
    return _onnx(nodes, inits, "shuffle", (1, 32, 8, 8))


def test_a_channel_shuffle_is_a_permutation_and_the_split_after_it_selects_from_its_input(backend):
    from vdla.model.pipeline import compile_model

    qdq = _qdq(_shuffle())
    tabled = _tabled(qdq)
    moved = accelerator_copies(tabled, 16)
    assert not [n for n in moved.nodes if n.op in ("reshape", "transpose")]
    slices = [n for n in moved.nodes if n.attrs.get(COPY) == "slice"]
    assert len(slices) == 2  # both halves select straight from the value before the shuffle
    perm = np.arange(32) % 2 * 16 + np.arange(32) // 2  # the shuffle's output channel j is input channel perm[j]
    for k, sel in enumerate(slices):  # half k: output channels 16k .. 16k + 15 of the shuffle
        w = moved.params[next(n.inputs[0] for n in moved.nodes if n.output == sel.inputs[1])]
        np.testing.assert_array_equal(np.argmax(w[:, :, 0, 0], axis=1), perm[16 * k : 16 * (k + 1)])
    x = np.random.default_rng(5).normal(0, 1, SHAPE).astype(np.float32)
    np.testing.assert_array_equal(evaluate(moved, {"x": x})["y"], evaluate(tabled, {"x": x})["y"])
    artifact = compile_model(qdq)[0]
    accel_between(artifact)
    assert_runs_as_lowered(qdq, artifact, _lowered(qdq), backend, SHAPE, seeds=(5,))


def test_a_reshape_and_transpose_that_move_pixels_stay_on_the_cpu():
    moved = accelerator_copies(_tabled(_qdq(_shuffle(perm=(0, 1, 2, 4, 3)))), 16)
    assert [n for n in moved.nodes if n.op == "transpose"]
    assert not [n for n in moved.nodes if n.attrs.get(COPY) in ("shuffle", "slice")]


def test_vdla_calibration_quantizes_the_activation_before_the_add_and_runs_the_block_on_chip():
    from vdla.model.pipeline import compile_model

    model = _c2f()
    calib = RNG.normal(0, 1, (8, *SHAPE[1:])).astype(np.float32)
    artifact = compile_model(model, calib)[0]
    accel_between(artifact)
    assert float_cosine(model, artifact, SHAPE) > 0.99


def test_a_concatenation_part_other_layers_read_is_stored_in_place(monkeypatch):
    """With vdla's calibration the concatenation's parts share its scale, so the bottleneck's input ``b`` (read
    by the bottleneck and its residual add too) needs no copy: its layer stores into the concatenation and the
    other layers read its channel blocks there. The outputs equal those with the copy, bit for bit."""
    from vdla.model import Module
    from vdla.model.lower import ModelBuilder
    from vdla.model.pipeline import compile_model

    model, calib = _c2f(), RNG.normal(0, 1, (8, *SHAPE[1:])).astype(np.float32)
    in_place = compile_model(model, calib)[0]
    monkeypatch.setattr(ModelBuilder, "copied", lambda *args: None)
    copied = compile_model(model, calib)[0]
    kinds = [[s.layer.get("copy") for s in a.steps if s.kind == "accel"].count("concat") for a in (in_place, copied)]
    assert kinds == [0, 1]
    for seed in range(2):
        x = np.random.default_rng(seed).normal(0, 1, SHAPE).astype(np.float32)
        np.testing.assert_array_equal(Module(in_place, "sim").run(x), Module(copied, "sim").run(x))


@pytest.mark.parametrize("half", [8, 16, 32], ids=["half_block", "one_block", "two_blocks"])
def test_a_split_the_concatenation_puts_back_together_is_not_computed_twice(half, backend, monkeypatch):
    """With vdla's calibration the split halves share the concatenation's scale, so the concatenation of the
    halves is the first layer's output: that layer runs once and stores into the concatenation (no split
    layers, no selections); the bottleneck and its residual read the second half there, a view where
    it is whole blocks, else through a selection; the residual sum, the last part, stores in place even where it
    ends inside a block. Bit for bit what the split layers give, in fewer steps and cycles."""
    from vdla.graph import copies
    from vdla.model import Module
    from vdla.model.pipeline import compile_model

    model, calib = _c2f(half), RNG.normal(0, 1, (8, *SHAPE[1:])).astype(np.float32)
    joined = compile_model(model, calib)[0]
    monkeypatch.setattr(copies._Rewriter, "view", lambda *args: False)
    monkeypatch.setattr(copies, "join_slices", lambda graph: graph)
    split = compile_model(model, calib)[0]
    layers = [accel_between(a) for a in (joined, split)]
    assert len(layers[0]) < len(layers[1])
    moves = [s.layer.get("copy") for s in layers[0]]
    assert "concat" not in moves and moves.count("slice") == (half % 16 != 0), moves
    first = layers[0][0]  # the first layer writes the concatenation, which the bottleneck reads
    assert len(first.writes) == 1 and any(first.writes[0] in s.reads for s in layers[0][1:3])
    runs = []
    for a in (joined, split):
        module = Module(a, backend)
        xs = [np.random.default_rng(seed).normal(0, 1, SHAPE).astype(np.float32) for seed in (0, 1)]
        runs.append([module.run(x) for x in xs])
        runs[-1].append(sum(r.cycles for r in module.last_report.steps if r.where == "accel"))
    for y_joined, y_split in zip(runs[0][:2], runs[1][:2], strict=True):
        np.testing.assert_array_equal(y_joined, y_split)
    assert runs[0][2] < runs[1][2]


UP_SHAPE = (1, 16, 16, 16)


def _upsampled(shared: bool) -> object:
    """x (UP_SHAPE) -> conv1x1 (32) -> SiLU -> s -> nearest 2x -> conv3x3 (16) stride 2 -> y; with ``shared``,
    y += conv1x1(s): the upsampling's input has a reader of its own."""
    ws = {"w1": (32, 16, 1, 1), "w3": (16, 32, 3, 3), "w4": (16, 32, 1, 1)}
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), k) for k, s in ws.items()]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), *_silu("c1", "s")]
    nodes.append(helper.make_node("Resize", ["s", "", "scales"], ["up"], mode="nearest"))
    last = "y1" if shared else "y"
    nodes.append(helper.make_node("Conv", ["up", "w3"], [last], pads=[1] * 4, strides=[2, 2]))
    if shared:
        nodes.append(helper.make_node("Conv", ["s", "w4"], ["y2"]))
        nodes.append(helper.make_node("Add", ["y1", "y2"], ["y"]))
    return onnx_model(nodes, inits, "upsampled", UP_SHAPE, UP_SHAPE)


@pytest.mark.parametrize("shared", [False, True], ids=["only_reader", "shared_input"])
def test_the_layer_computing_an_upsamplings_input_stores_it(shared, backend, monkeypatch):
    """The nearest upsampling's copy layer is gone: the layer computing its input stores the four phases itself
    (pixels doubled by an identity GEMM reading OUT, whole rows stored twice), as its only output where nothing
    else reads it, else besides its own output. Equal to the lowered graph and within one step of onnxruntime's
    int8 reference; bit for bit what the copy layer gives, in fewer steps and cycles."""
    from vdla.model.lower import ModelBuilder
    from vdla.model.pipeline import compile_model

    calib = RNG.normal(0, 1, (8, *UP_SHAPE[1:])).astype(np.float32)
    qdq = quantize_qdq(_upsampled(shared), calib, input_name="x")
    stored = compile_model(qdq)[0]
    monkeypatch.setattr(ModelBuilder, "copy_source", lambda *args: None)
    copied = compile_model(qdq)[0]
    layers = [accel_between(a) for a in (stored, copied)]
    assert [[s.layer.get("copy") for s in a].count("upsample") for a in layers] == [0, 1]
    (source,) = [s for s in layers[0] if s.layer.get("also") == "upsample"]
    assert "stores its nearest upsampling by 2x2" in source.layer["note"]
    assert len(source.writes) == 1 + shared
    assert_runs_as_lowered(qdq, stored, _lowered(qdq), backend, UP_SHAPE, seeds=(2,))
    _same_and_faster(stored, copied, backend, seed=4)


def _same_and_faster(new, old, backend: str, seed: int) -> None:
    """``new`` gives ``old``'s outputs bit for bit on ``backend``, in fewer accelerator cycles."""
    from vdla.model import Module

    runs = []
    for a in (new, old):
        module = Module(a, backend)
        x = np.random.default_rng(seed).normal(0, 1, UP_SHAPE).astype(np.float32)
        runs.append((module.run(x), module.last_report.accel_cycles))
        module.close()
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] < runs[1][1], runs


def _upsampled_part() -> object:
    """x (UP_SHAPE) -> conv3x3 stride 2 (32) -> SiLU -> s -> nearest 2x -> u; concat(u, SiLU(conv1x1(x)) (16)) ->
    conv1x1 (16) -> y: a YOLO neck's upsampling into a concatenation read by a 1x1 layer."""
    ws = {"w1": (32, 16, 3, 3), "w2": (16, 16, 1, 1), "w3": (16, 48, 1, 1)}
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), k) for k, s in ws.items()]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4, strides=[2, 2]), *_silu("c1", "s")]
    nodes.append(helper.make_node("Resize", ["s", "", "scales"], ["u"], mode="nearest"))
    nodes += [helper.make_node("Conv", ["x", "w2"], ["c2"]), *_silu("c2", "b")]
    nodes.append(helper.make_node("Concat", ["u", "b"], ["cat"], axis=1))
    nodes.append(helper.make_node("Conv", ["cat", "w3"], ["y"]))
    return onnx_model(nodes, inits, "upsampled_part", UP_SHAPE, UP_SHAPE)


def test_a_1x1_layer_reads_the_upsampled_part_of_its_concatenation_in_place(backend, monkeypatch):
    """The upsampling is neither a layer nor stored: the 1x1 layer reading the concatenation reads its channel
    blocks from s, each pixel for four output pixels (vdla.compiler.spec.InputUpsample); the other part still
    stores into the concatenation. Equal to the lowered graph and within one step of onnxruntime's int8
    reference; bit for bit what storing the upsampling gives, in fewer cycles."""
    from vdla.model.lower import ModelBuilder
    from vdla.model.pipeline import compile_model

    calib = RNG.normal(0, 1, (8, *UP_SHAPE[1:])).astype(np.float32)
    qdq = quantize_qdq(_upsampled_part(), calib, input_name="x")
    read = compile_model(qdq)[0]
    monkeypatch.setattr(ModelBuilder, "up_reader", lambda *args: None)
    stored = compile_model(qdq)[0]
    layers = [accel_between(a) for a in (read, stored)]
    assert all("upsample" not in (s.layer.get("copy"), s.layer.get("also")) for s in layers[0])
    assert any(s.layer.get("also") == "upsample" or s.layer.get("copy") == "upsample" for s in layers[1])
    (reader,) = [s for s in layers[0] if "reads the nearest upsampling by 2x2" in s.layer.get("note", "")]
    assert [r.split("_")[0] for r in reader.reads] == ["cat", "s"]  # the concatenation, the tensor it upsamples
    assert_runs_as_lowered(qdq, read, _lowered(qdq), backend, UP_SHAPE, seeds=(3,))
    _same_and_faster(read, stored, backend, seed=5)


@pytest.mark.models  # a whole YOLOv8 compiled and run (40 s): make test-all and CI
def test_a_small_yolov8_runs_with_one_cpu_step_before_and_one_after_the_accelerator():
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import yolov8

    model = yolov8(width=0.25, depth=0.33, image=64, classes=8)
    qdq = quantize_qdq(model, RNG.normal(0, 1, (4, 3, 64, 64)).astype(np.float32), input_name="image")
    artifact = compile_model(qdq)[0]
    kinds = [s.kind for s in artifact.steps]
    assert kinds.count("cpu") == 2 and kinds[0] == kinds[-1] == "cpu", kinds  # input, and the decode
    assert artifact.accel_macs == artifact.total_macs
    (decode,) = [s for s in artifact.steps[1:] if s.kind == "cpu"]
    assert "softmax" in decode.note  # the DFL decode: why it stays on the CPU
    assert artifact.outputs and set(artifact.outputs) == {"boxes", "scores"}


def _shared_slice(start: int = 0, stop: int = 16):
    """x -> conv (32) -> ReLU -> c; ya = conv(c[:, start:stop]), yb = conv(c); y = concat(ya, yb): the slice's
    source is read whole by another layer too."""
    inits = [
        numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), k)
        for k, s in (("w1", (32, 16, 1, 1)), ("wa", (16, stop - start, 3, 3)), ("wb", (16, 32, 1, 1)))
    ]
    ends = (("s", [start]), ("e", [stop]), ("ax", [1]))
    inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ends]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c0"]),
        helper.make_node("Relu", ["c0"], ["c"]),
        helper.make_node("Slice", ["c", "s", "e", "ax"], ["a"]),
        helper.make_node("Conv", ["a", "wa"], ["ya"], pads=[1] * 4),
        helper.make_node("Conv", ["c", "wb"], ["yb"]),
        helper.make_node("Concat", ["ya", "yb"], ["y"], axis=1),
    ]
    return _onnx(nodes, inits, "shared_slice", (1, 32, 8, 8))


@pytest.mark.parametrize("span", [(0, 16), (16, 32), (0, 8)], ids=["first_block", "second_block", "half_block"])
def test_a_slice_of_a_value_another_layer_reads_whole(span, backend):
    """Whole channel blocks: a view, the layer reading it reads them where the value is (no copy, no step);
    part of a block: a selection convolution."""
    from vdla.model import Module
    from vdla.model.pipeline import compile_model

    qdq = _qdq(_shared_slice(*span))
    artifact = compile_model(qdq)[0]
    copies = [s.layer.get("copy") for s in artifact.steps if s.kind == "accel"]
    assert copies.count("slice") == (span == (0, 8)) and len(copies) == 3 + (span == (0, 8)), copies
    kinds = [s.kind for s in artifact.steps]
    assert "cpu" not in kinds[1:-1], kinds
    x = np.random.default_rng(1).normal(0, 1, SHAPE).astype(np.float32)
    np.testing.assert_array_equal(Module(artifact, backend).run(x), evaluate(_lowered(qdq), {"x": x})["y"])


def test_a_table_of_a_table_composes_into_one():
    from vdla.graph.graph import Graph, Node
    from vdla.graph.types import Quant, TensorType

    t1, t2 = (RNG.integers(-128, 128, 256).astype(np.int8) for _ in range(2))
    q = {"quant": (0.1, 0)}
    nodes = [Node("table", ("x", "t1"), "a", q), Node("table", ("a", "t2"), "b", q)]
    x_type = TensorType((1, 16, 4, 4), "int8", Quant((0.1,)))
    graph = Graph({"x": x_type}, nodes, ["b"], {"t1": t1, "t2": t2})
    composed = tabulate_chains(graph)
    assert [n.op for n in composed.nodes] == ["table"] and composed.nodes[0].inputs[0] == "x"
    x = RNG.integers(-128, 128, x_type.shape).astype(np.int8)
    np.testing.assert_array_equal(evaluate(composed, {"x": x})["b"], evaluate(graph, {"x": x})["b"])
