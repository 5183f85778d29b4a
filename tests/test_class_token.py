"""The class token selected before the final LayerNorm and read in place (issue 53): ``select_rows_first`` moves a
row selection (``take``/``slice`` of whole rows) before the row-wise nodes computing its input, so the LayerNorm
runs on the selected rows alone; consecutive rows of a token-major accelerator output are a DRAM view
(``vdla.model.views.view_offset``), so the LayerNorm step reads the class token where the last dense layer stored
it and no CPU step stands between that layer and the output's. Scattered rows stay on the CPU, the note naming
why."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from vdla.graph import Graph, Node, TensorType
from vdla.graph.interp import evaluate
from vdla.graph.passes import select_rows_first, simplify
from vdla.graph.verify import verify

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from qdq_check import assert_lowered_and_near_float, initializer_adder  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.graph.quantize import quantize_model  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402

TOKENS, DIM, HIDDEN, CLASSES = 17, 64, 128, 32
RNG = np.random.default_rng(531)


def _rows_graph(index: tuple) -> Graph:
    """``(T, D) -> mul by a column constant -> layer_norm -> reshape (1, T, D) -> take(index) -> dense``."""
    params = {
        "c": RNG.uniform(0.5, 2.0, (DIM,)).astype(np.float32),
        "g": RNG.uniform(0.5, 1.5, (DIM,)).astype(np.float32),
        "b": RNG.normal(0, 0.1, (DIM,)).astype(np.float32),
        "w": RNG.normal(0, 0.2, (DIM, DIM)).astype(np.float32),
    }
    n = len(index[1])
    nodes = [
        Node("mul", ("x", "c"), "m"),
        Node("layer_norm", ("m", "g", "b"), "n", {"axis": 1, "epsilon": 1e-5}),
        Node("reshape", ("n",), "n3", {"shape": (1, TOKENS, DIM)}),
        Node("take", ("n3",), "t", {"index": index}),
        Node("reshape", ("t",), "t2", {"shape": (n, DIM)}),
        Node("dense", ("t2", "w"), "y"),
    ]
    return Graph({"x": TensorType((TOKENS, DIM), "float32")}, nodes, ["y"], params)


@pytest.mark.parametrize("rows", [(0,), (3, 4, 5), (2, 0, 9)])
def test_select_rows_first_normalizes_the_selected_rows_alone(rows):
    """The take moves before the reshape, the LayerNorm and the column product onto the input's rows (any rows:
    the move is exact for each); values unchanged, bit for bit."""
    g = _rows_graph((None, rows, None))
    out = select_rows_first(g)
    verify(out, after="select_rows_first")
    assert [n.op for n in out.nodes][:3] == ["take", "mul", "layer_norm"]
    assert out.nodes[0].inputs == ("x",) and out.nodes[0].attrs["index"] == (rows, None)
    x = RNG.normal(0, 1, (TOKENS, DIM)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(out, {"x": x})["y"], evaluate(g, {"x": x})["y"])


def test_select_rows_first_leaves_what_does_not_commute():
    """A selection of features before a LayerNorm over them, a take of a value another node reads too, and a take
    after a constant that varies along the token axis all stay where they are."""
    nodes = [
        Node("layer_norm", ("x",), "n", {"axis": 1, "epsilon": 1e-5}),
        Node("take", ("n",), "y", {"index": ((0,), (0, 1, 2))}),
    ]
    features = Graph({"x": TensorType((TOKENS, DIM), "float32")}, nodes, ["y"])
    assert [n.op for n in select_rows_first(features).nodes] == ["layer_norm", "take"]
    shared = _rows_graph((None, (0,), None))
    shared = shared.copy(outputs=["y", "n3"])
    assert [n.op for n in select_rows_first(shared).nodes][:3] == ["mul", "layer_norm", "reshape"]
    params = {"c": RNG.normal(0, 1, (TOKENS, 1)).astype(np.float32)}
    nodes = [Node("add", ("x", "c"), "a"), Node("take", ("a",), "y", {"index": ((0,), None)})]
    per_token = Graph({"x": TensorType((TOKENS, DIM), "float32")}, nodes, ["y"], params)
    assert [n.op for n in select_rows_first(per_token).nodes] == ["add", "take"]


def test_select_rows_first_moves_a_slice_of_rows_and_leaves_a_gather_of_offsets():
    """A ``slice`` of rows 2..9 moves before the LayerNorm as a ``take`` does; a ``gather`` by flat offsets (rows
    scattered through the flattened value) stays after it."""
    ln = Node("layer_norm", ("x",), "n", {"axis": 1, "epsilon": 1e-5})
    rows = Node("slice", ("n",), "y", {"starts": (2, 0), "stops": (9, DIM), "steps": (1, 1)})
    g = Graph({"x": TensorType((TOKENS, DIM), "float32")}, [ln, rows], ["y"])
    out = select_rows_first(g)
    assert [n.op for n in out.nodes] == ["slice", "layer_norm"]
    x = RNG.normal(0, 1, (TOKENS, DIM)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(out, {"x": x})["y"], evaluate(g, {"x": x})["y"])
    offsets = {"i": (np.arange(DIM, dtype=np.int32) + 3 * DIM).reshape(1, DIM)}
    gather = Node("gather", ("n", "i"), "y")
    g = Graph({"x": TensorType((TOKENS, DIM), "float32")}, [ln, gather], ["y"], offsets)
    assert [n.op for n in select_rows_first(g).nodes] == ["layer_norm", "gather"]


def test_a_selection_moves_before_a_quantize_only_onto_an_int8_value():
    """In a QDQ graph ``add -> Q -> DQ -> layer_norm -> Q -> DQ -> take`` the take moves onto the int8 value the
    first quantize writes (the LayerNorm on the selected rows between its quantizations) and no further: the sum
    stays quantized whole, as the previous layer's epilogue computes it."""
    q = {"scale": 0.05, "zero_point": 0}
    nodes = [
        Node("add", ("x", "z"), "s"),
        Node("quantize", ("s",), "sq", q),
        Node("dequantize", ("sq",), "sf", q),
        Node("layer_norm", ("sf",), "n", {"axis": 1, "epsilon": 1e-5}),
        Node("quantize", ("n",), "nq", q),
        Node("dequantize", ("nq",), "nf", q),
        Node("take", ("nf",), "y", {"index": ((0,), None)}),
    ]
    t = TensorType((TOKENS, DIM), "float32")
    g = Graph({"x": t, "z": t}, nodes, ["y"])
    out = select_rows_first(g)
    ops = ["add", "quantize", "take", "dequantize", "layer_norm", "quantize", "dequantize"]
    assert [n.op for n in out.nodes] == ops
    feeds = {k: RNG.normal(0, 1, (TOKENS, DIM)).astype(np.float32) for k in "xz"}
    np.testing.assert_array_equal(evaluate(out, feeds)["y"], evaluate(g, feeds)["y"])


def classifier_model(index=0, heads: int = 1) -> onnx.ModelProto:
    """A post-norm encoder layer ending as ViT's and BERT's do: a projection of (1, TOKENS, DIM) into the residual
    stream, the MLP (MatMul + Add, Gelu, MatMul + Add) added to it, the final ``LayerNormalization`` over all
    tokens, ``Gather`` of the class token (``index`` 0: one row; a list: those rows) along the token axis and the
    classifier head; with ``heads`` 2, DeiT's end: ``Gather`` of token 0 and of token 1 (the distillation token),
    a head each and their mean."""
    rng = np.random.default_rng(5)
    inits = []
    c = initializer_adder(inits)

    w0 = rng.normal(0, DIM**-0.5, (DIM, DIM))
    w0[:, 5] *= 6
    g = rng.uniform(0.5, 1.5, DIM)
    g[7] = -0.3
    nodes = [
        helper.make_node("MatMul", ["x", c("w0", w0)], ["m0"]),
        helper.make_node("Add", ["m0", c("b0", rng.normal(0, 0.1, DIM))], ["r0"]),
        helper.make_node("MatMul", ["r0", c("w1", rng.normal(0, DIM**-0.5, (DIM, HIDDEN)))], ["m1"]),
        helper.make_node("Add", ["m1", c("b1", rng.normal(0, 0.1, HIDDEN))], ["h"]),
        helper.make_node("Gelu", ["h"], ["gl"]),
        helper.make_node("MatMul", ["gl", c("w2", rng.normal(0, HIDDEN**-0.5, (HIDDEN, DIM)))], ["m2"]),
        helper.make_node("Add", ["m2", c("b2", rng.normal(0, 0.1, DIM))], ["f"]),
        helper.make_node("Add", ["r0", "f"], ["r1"]),
        helper.make_node("LayerNormalization", ["r1", c("g", g), c("be", rng.normal(0, 0.05, DIM))], ["n"], axis=-1),
    ]
    for h in range(heads):
        at, y = (index, "y") if heads == 1 else (index + h, f"y{h}")
        w3, b3 = rng.normal(0, DIM**-0.5, (DIM, CLASSES)), rng.normal(0, 0.1, CLASSES)
        nodes += [
            helper.make_node("Gather", ["n", c(f"i{h}", at, np.int64)], [f"cls{h}"], axis=1),
            helper.make_node("MatMul", [f"cls{h}", c(f"w3{h}", w3)], [f"m3{h}"]),
            helper.make_node("Add", [f"m3{h}", c(f"b3{h}", b3)], [y]),
        ]
    if heads == 2:
        nodes += [helper.make_node("Add", ["y0", "y1"], ["ys"]), helper.make_node("Mul", ["ys", c("half", 0.5)], ["y"])]
    f = TensorProto.FLOAT
    out = [1, CLASSES] if np.ndim(index) == 0 else [1, len(index), CLASSES]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", f, [1, TOKENS, DIM])],
        [helper.make_tensor_value_info("y", f, out)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _inputs(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count, 1, TOKENS, DIM)).astype(np.float32)


@functools.cache
def compiled_classifier(index=0, heads: int = 1) -> tuple:
    """The classifier quantized by vdla's calibration: the ONNX model, its quantized graph and the artifact."""
    model = classifier_model(index, heads)
    qgraph, _ = quantize_model(simplify(import_onnx(model)), {"x": _inputs(8, 1)[:, 0]}, "percentile")
    return model, qgraph, compile_graph_model(qgraph, "pynq")[0]


def _described(art) -> list:
    return [(s.kind, s.name, getattr(s, "note", "")) for s in art.steps]


@pytest.mark.parametrize("index", [0, 3])
def test_the_class_token_is_normalized_on_the_accelerator_reading_the_last_layer_in_place(index):
    """vdla's calibration: the final LayerNorm an accelerator step of one token reading the last dense layer's
    output in place (its tensor, from the token's bytes on: token 0, the class token, and token 3), the head
    after it; no CPU step but the input's and the output's; bit-exact against the lowered graph on the
    simulator, close to onnxruntime's float model."""
    model, qgraph, art = compiled_classifier(index)
    assert [s.kind for s in art.steps] == ["cpu", *["accel"] * 5, "cpu"], _described(art)
    ops = [s.layer["op"] for s in art.steps if s.kind == "accel"]
    assert ops == ["dense", "dense", "dense", "layer_norm", "dense"]
    fc2, ln, head = art.steps[3:6]
    assert ln.reads == [f"{fc2.name}@16"] and ln.layer["input"] == [1, DIM, 1, 1]
    assert head.reads == ln.writes
    low = lower_qdq(qgraph)
    assert [n.op for n in low.nodes if n.op in ("take", "layer_norm_int")] == ["take", "layer_norm_int"]
    assert_lowered_and_near_float(art, low, model, _inputs(3, 9))


def test_select_rows_first_gives_each_of_two_selections_its_own_rows():
    """Two takes of one LayerNorm's output (DeiT's class and distillation tokens): each moves before its own copy of
    the LayerNorm and the column product, which then normalize one row each; values unchanged, bit for bit."""
    g = _rows_graph((None, (0,), None))
    two = [
        Node("take", ("n3",), "t1", {"index": (None, (1,), None)}),
        Node("reshape", ("t1",), "u", {"shape": (1, DIM)}),
    ]
    g = g.copy(nodes=[*g.nodes, *two, Node("dense", ("u", "w"), "y1")], outputs=["y", "y1"])
    out = select_rows_first(g)
    verify(out, after="select_rows_first")
    assert [n.op for n in out.nodes].count("layer_norm") == 2
    assert all(out.producers()[n.inputs[0]].op == "mul" for n in out.nodes if n.op == "layer_norm")
    x = RNG.normal(0, 1, (TOKENS, DIM)).astype(np.float32)
    for k in ("y", "y1"):
        np.testing.assert_array_equal(evaluate(out, {"x": x})[k], evaluate(g, {"x": x})[k])


def test_two_tokens_each_normalized_on_the_accelerator_for_two_heads():
    """DeiT's end (the class and the distillation token, a head each): two one-token LayerNorm steps reading the
    last dense layer in place, no CPU step but the input's and the output's (the heads' mean); bit-exact against
    the lowered graph, close to onnxruntime's float model."""
    model, qgraph, art = compiled_classifier(0, heads=2)
    assert [s.kind for s in art.steps].count("cpu") == 2 and art.steps[0].kind == "cpu", _described(art)
    lns = [s for s in art.steps if s.kind == "accel" and s.layer["op"] == "layer_norm"]
    assert len(lns) == 2 and all(s.layer["input"] == [1, DIM, 1, 1] for s in lns)
    last = [s for s in art.steps if s.kind == "accel"][2]  # the MLP's second layer, the residual sum in place
    assert all(s.reads == [f"{last.name}@16"] for s in lns), _described(art)
    assert_lowered_and_near_float(art, lower_qdq(qgraph), model, _inputs(3, 9))


def test_the_token_read_in_place_is_bit_exact_on_each_backend(backend):
    """Token 3's LayerNorm reading the last dense layer's tensor from that token's bytes, on the RTL too."""
    _, qgraph, art = compiled_classifier(3)
    module, low = Module(art, backend), lower_qdq(qgraph)
    x = _inputs(1, 12)[0]
    np.testing.assert_array_equal(module.run(x), evaluate(low, {"x": x})["y"])
    module.close()


def test_scattered_tokens_stay_on_the_cpu_naming_why():
    """Tokens 0 and 2 are no contiguous bytes of the token-major output: a CPU step takes them, its note saying
    what the accelerator reads in place; still exact against the lowered graph."""
    _, qgraph, art = compiled_classifier((0, 2))
    cpu = [s for s in art.steps if s.kind == "cpu" and any(n.op == "take" for n in s.graph.nodes)]
    assert len(cpu) == 1 and "take: read in place only as consecutive whole rows" in cpu[0].note, _described(art)
    module, low = Module(art, "sim"), lower_qdq(qgraph)
    x = _inputs(1, 4)[0]
    np.testing.assert_array_equal(module.run(x), evaluate(low, {"x": x})["y"])
    module.close()


def test_onnxruntime_qdq_classifier_selects_the_class_token_in_place():
    """onnxruntime's QDQ model of the classifier: the selection moves onto the int8 side of its dequantize, the
    final LayerNorm runs on the class token on the accelerator with no CPU step after the last dense layer but the
    output's; bit-exact against the lowered graph, each LayerNorm within one step of onnxruntime's (ties aside,
    as ``compare_layers`` counts them)."""
    from qdq_check import lowered_graph

    from vdla.frontend.reference import compare_layers, reference_run
    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import qdq_output_scale, quantize_qdq

    qmodel = quantize_qdq(classifier_model(), _inputs(8, 1)[:, 0], input_name="x")
    art, _ = compile_model(qmodel)
    kinds = [s.kind for s in art.steps]
    assert kinds == ["cpu", *["accel"] * (len(kinds) - 2), "cpu"], _described(art)
    assert [s.layer["op"] for s in art.steps[-3:-1]] == ["layer_norm", "dense"]
    low = lowered_graph(qmodel)
    module, step = Module(art, "sim"), qdq_output_scale(qmodel, "y")
    feeds = [{"x": x} for x in _inputs(2, 3)]
    for f in feeds:
        got = module.run(f["x"])
        np.testing.assert_array_equal(got, evaluate(low, f)["y"])
        assert np.abs(got - reference_run(qmodel, f)["y"]).max() <= 4 * step
    module.close()
    layers = compare_layers(qmodel, low, feeds)
    assert sum(a.differing for a in layers) == sum(a.ties for a in layers)


PATCH, SIDE, CHANNELS = 8, 32, 3  # 4 x 4 patches of 8 x 8 pixels: 16 patch tokens


def embedding_model(constant_tokens: int = 1, computed_token: bool = False) -> onnx.ModelProto:
    """A ViT's embedding and first encoder layer as torch exports them, shaped like trained ones: the patch
    convolution (stride its kernel; output channel 5 an outlier of the residual stream, 8x the weights and a bias
    of 3) flattened and transposed to tokens, ``constant_tokens`` leading tokens (a class token, DeiT's
    distillation token: small spread, as trained, and so their position embedding's rows) concatenated, the wide
    position embedding added, ``LayerNormalization``, a projection added to the stream, the final
    ``LayerNormalization`` and a projection of every token (the model's output: each row, the constant ones too).
    ``computed_token``: the leading token is the patches' mean instead, a token that depends on the input."""
    rng = np.random.default_rng(532)
    inits = []
    c = initializer_adder(inits)
    w = rng.normal(0, (CHANNELS * PATCH * PATCH) ** -0.5, (DIM, CHANNELS, PATCH, PATCH))
    w[5] *= 8
    b = rng.normal(0, 0.1, DIM)
    b[5] = 3.0
    patches = (SIDE // PATCH) ** 2
    lead = 1 if computed_token else constant_tokens
    pos = rng.normal(0, 0.5, (1, lead + patches, DIM))
    pos[:, :lead] = rng.normal(0, 0.01, (1, lead, DIM))
    g = rng.uniform(0.5, 1.5, DIM)
    g[7] = -0.3
    ln = dict(axis=-1, epsilon=1e-6)
    leads = [f"lead{k}" for k in range(lead)]
    if computed_token:
        first = [helper.make_node("ReduceMean", ["tok", c("ax", [1], np.int64)], leads, keepdims=1)]
    else:  # each token a parameter of its own, as torch's cls_token and dist_token
        first = [helper.make_node("Identity", [c(f"t{k}", rng.normal(0, 0.01, (1, 1, DIM)))], [v])
                 for k, v in enumerate(leads)]  # fmt: skip
    nodes = [
        helper.make_node(
            "Conv", ["x", c("w", w), c("b", b)], ["p"], kernel_shape=[PATCH, PATCH], strides=[PATCH, PATCH]
        ),  # fmt: skip
        helper.make_node("Reshape", ["p", c("s", [1, DIM, patches], np.int64)], ["pf"]),
        helper.make_node("Transpose", ["pf"], ["tok"], perm=[0, 2, 1]),
        *first,
        helper.make_node("Concat", [*leads, "tok"], ["cat"], axis=1),
        helper.make_node("Add", ["cat", c("pos", pos)], ["e"]),
        helper.make_node(
            "LayerNormalization",
            ["e", c("g1", rng.uniform(0.5, 1.5, DIM)), c("be1", rng.normal(0, 0.05, DIM))],
            ["a"],
            **ln,
        ),  # fmt: skip
        helper.make_node("MatMul", ["a", c("w1", rng.normal(0, DIM**-0.5, (DIM, DIM)))], ["m1"]),
        helper.make_node("Add", ["m1", c("b1", rng.normal(0, 0.1, DIM))], ["f"]),
        helper.make_node("Add", ["e", "f"], ["r"]),
        helper.make_node("LayerNormalization", ["r", c("g", g), c("be", rng.normal(0, 0.05, DIM))], ["n"], **ln),
        helper.make_node("MatMul", ["n", c("w3", rng.normal(0, DIM**-0.5, (DIM, CLASSES)))], ["m3"]),
        helper.make_node("Add", ["m3", c("b3", rng.normal(0, 0.1, CLASSES))], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "embedding",
        [helper.make_tensor_value_info("x", f, [1, CHANNELS, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", f, [1, lead + patches, CLASSES])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _images(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count, 1, CHANNELS, SIDE, SIDE)).astype(np.float32)


@functools.cache
def compiled_embedding(constant_tokens: int = 1, computed_token: bool = False) -> tuple:
    """The embedding model quantized by vdla's calibration: the ONNX model, its quantized graph and the artifact."""
    model = embedding_model(constant_tokens, computed_token)
    qgraph, _ = quantize_model(simplify(import_onnx(model)), {"x": _images(8, 1)[:, 0]}, "percentile")
    return model, qgraph, compile_graph_model(qgraph, "pynq")[0]


@pytest.mark.parametrize("constant_tokens", [1, 2])
def test_constant_rows_first_computes_the_constant_tokens_at_compile_time(constant_tokens):
    """``simplify``: the patch convolution a dense layer over the patches as rows; the position embedding's add and
    the first LayerNorm computed on the patch rows alone, their constant rows (the class token's, the distillation
    token's) parameters of (rows, features) concatenations along the rows; the model's output unchanged."""
    model = embedding_model(constant_tokens)
    g0 = import_onnx(model)
    g = simplify(g0)
    verify(g, after="simplify")
    cats = [n for n in g.nodes if n.op == "concat"]
    assert len(cats) == 2 and all(n.attrs["axis"] == 0 for n in cats)
    for cat in cats:
        consts, computed = cat.inputs[:-1], cat.inputs[-1]
        assert all(g.params[v].shape == (1, DIM) for v in consts) and len(consts) == constant_tokens
        assert g.producers()[computed].op in ("add", "layer_norm")
    ln = g.producers()[cats[1].inputs[-1]]
    assert ln.op == "layer_norm" and ln.inputs[0] == cats[0].inputs[-1]  # the patch rows alone
    assert [n.op for n in g.nodes[:5]] == ["reshape", "transpose", "reshape", "dense", "add"]
    x = _images(1, 2)[0]
    np.testing.assert_allclose(evaluate(g, {"x": x})["y"], evaluate(g0, {"x": x})["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("constant_tokens", [1, 2])
def test_the_embedding_runs_on_the_accelerator_with_its_constant_tokens_in_the_image(constant_tokens):
    """vdla's calibration: the patch rows a dense layer whose epilogue adds the position embedding (a constant
    residual at the stream's scale) and stores into the stream's rows after the constant tokens, the first
    LayerNorm a step over those rows alone storing after its constant rows; only the input's CPU step (the patches
    as rows) and the output's; bit-exact against the lowered graph (run after run: the constant rows stay in the
    image), close to onnxruntime's float model."""
    model, qgraph, art = compiled_embedding(constant_tokens)
    assert [s.kind for s in art.steps] == ["cpu", *["accel"] * 5, "cpu"], _described(art)
    ops = [s.layer["op"] for s in art.steps if s.kind == "accel"]
    assert ops == ["dense", "layer_norm", "dense", "layer_norm", "dense"]
    patch, ln = art.steps[1:3]
    assert len(patch.reads) == 2 and ln.reads == patch.writes  # the constant residual; the stream's tensor
    assert ln.layer["input"] == [(SIDE // PATCH) ** 2, DIM, 1, 1]
    low = lower_qdq(qgraph)
    cats = [n for n in low.nodes if n.op == "concat"]
    assert len(cats) == 2 and all(low.params[v].dtype == np.int8 for n in cats for v in n.inputs[:-1])
    assert_lowered_and_near_float(art, low, model, _images(3, 9), least=0.995)


def test_the_embedding_is_bit_exact_on_each_backend(backend):
    """The class and distillation tokens' constant rows, the constant residual and the stores after them, on the
    RTL too."""
    _, qgraph, art = compiled_embedding(2)
    module, low = Module(art, backend), lower_qdq(qgraph)
    for x in _images(2, 13):
        np.testing.assert_array_equal(module.run(x), evaluate(low, {"x": x})["y"])
    module.close()


def test_a_token_computed_from_the_input_stays_on_the_cpu_naming_why():
    """A leading token that depends on the input (the patches' mean) is no constant row: the concatenation, the
    position embedding's add and the first LayerNorm stay one CPU step, its note naming the concatenation's one
    accelerator form; still exact against the lowered graph."""
    _, qgraph, art = compiled_embedding(computed_token=True)
    cpu = [s for s in art.steps if s.kind == "cpu" and any(n.op == "concat" for n in s.graph.nodes)]
    assert len(cpu) == 1 and "constant token rows beside one accelerator layer's" in cpu[0].note, _described(art)
    assert sum(s.kind == "cpu" for s in art.steps) == 3
    module, low = Module(art, "sim"), lower_qdq(qgraph)
    x = _images(1, 4)[0]
    np.testing.assert_array_equal(module.run(x), evaluate(low, {"x": x})["y"])
    module.close()


KEPT = ["conv2d", "reshape", "transpose"]


@pytest.mark.parametrize(
    "stride, pads, perm, ops",
    [
        ((8, 8), (0, 0, 0, 0), (0, 2, 1), ["reshape", "transpose", "reshape", "dense", "reshape"]),
        ((4, 4), (0, 0, 0, 0), (0, 2, 1), KEPT),
        ((8, 8), (1, 1, 1, 1), (0, 2, 1), KEPT),
        ((8, 8), (0, 0, 0, 0), (0, 1, 2), KEPT),
    ],
)
def test_patch_rows_takes_a_patch_embedding_alone(stride, pads, perm, ops):
    """A convolution whose stride is its kernel, flattened and transposed to tokens, becomes the patches as rows and
    a dense layer (values unchanged); one whose stride is not its kernel, one with padding, or one whose flattened
    output is not transposed to tokens stays a convolution."""
    from vdla.graph.passes import patch_rows

    params = {"w": RNG.normal(0, 0.1, (DIM, CHANNELS, PATCH, PATCH)).astype(np.float32)}
    x = {"x": TensorType((1, CHANNELS, SIDE, SIDE), "float32")}
    conv = Node("conv2d", ("x", "w"), "p", {"stride": stride, "padding": pads, "dilation": 1, "groups": 1})
    _, _, h, w = verify(Graph(x, [conv], ["p"], params))["p"].shape
    nodes = [
        conv,
        Node("reshape", ("p",), "pf", {"shape": (1, DIM, h * w)}),
        Node("transpose", ("pf",), "y", {"perm": perm}),
    ]
    g = Graph(x, nodes, ["y"], params)
    out = patch_rows(g)
    assert [n.op for n in out.nodes] == ops
    feed = {"x": RNG.normal(0, 1, (1, CHANNELS, SIDE, SIDE)).astype(np.float32)}
    np.testing.assert_allclose(evaluate(out, feed)["y"], evaluate(g, feed)["y"], rtol=1e-5, atol=1e-5)
