"""The attention block placed on the accelerator inside models (issue 53): torch's exported form (the QKV
projection reshaped to (1, T, 3, H, d), transposed, sliced per head; ``Q K^T`` scaled; an optional additive
mask computed from a run-time input; softmax; ``P V``; the heads transposed and reshaped back) recognised on
the quantized graph and lowered to one ``attention_int`` node (the integer reference), whose heads' programs run
as one accelerator step between the QKV and the output projections; a block the integer form or the accelerator
refuses stays on the CPU in float, the step's note naming why."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from vdla.graph.interp import evaluate

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from qdq_check import initializer_adder, outlier_projection  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.frontend.reference import reference_session  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.graph.quantize import quantize_model  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402
from vdla.zoo.models import cosine  # noqa: E402


def block_model(
    heads: int, d: int, tokens: int, mask: str | None, q_gain: float = 1.0, gather: bool = False, split: bool = False
) -> onnx.ModelProto:
    """A pre-norm attention block on (1, tokens, heads x d) as torch exports it, weights shaped like trained ones:
    an input projection whose channel 5 is an outlier of the residual stream, LayerNormalization, the QKV
    projection (one MatMul + Add; ``Q``'s weights times ``q_gain``, head 0's channel 3 of ``Q`` dead), the
    per-head split (Reshape, Transpose, then Slice and Reshape, or with ``gather`` torch's ``qkv[i]``: Gather),
    ``Q K^T`` (K transposed) times ``1/sqrt(d)``, the mask of an int64 input (``None``; ``"additive"``: BERT's
    ``(1 - mask) * -10000``; ``"bool"``: ``Where(mask as bool, 0, -1e9)``; ``"causal"``: a constant (tokens, tokens)
    mask of -1e9 above the diagonal), Softmax, ``P V``, the heads back to
    (1, tokens, D), the output projection, the residual Add and a last projection. With ``split``, Q, K and V are
    three projections (MatMul + Add each, reshaped to (1, tokens, heads, d) and transposed), as Hugging Face's
    BERT and ViT export them."""
    rng = np.random.default_rng(heads * 1000 + d + tokens)
    dim = heads * d
    inits = []
    c = initializer_adder(inits)

    w0, b0 = outlier_projection(rng, dim)
    wqkv = rng.normal(0, 0.8 * dim**-0.5, (dim, 3 * dim))
    wqkv[:, :dim] *= q_gain
    wqkv[:, 3] = 0  # a dead channel of head 0's Q
    shape5 = c("shape5", [1, tokens, 3, heads, d], np.int64)
    shape4 = c("shape4", [1, heads, tokens, d], np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", c("w0", w0)], ["m0"]),
        helper.make_node("Add", ["m0", c("b0", b0)], ["r0"]),
        helper.make_node(
            "LayerNormalization",
            ["r0", c("g1", rng.uniform(0.5, 1.5, dim)), c("be1", np.zeros(dim))],
            ["a"],
            axis=-1,
            epsilon=1e-6,
        ),  # fmt: skip
    ]
    bqkv = rng.normal(0, 0.1, 3 * dim)
    if split:
        nodes += _split_projections(c, wqkv, bqkv, tokens, heads, d)
    else:
        nodes += [
            helper.make_node("MatMul", ["a", c("wqkv", wqkv)], ["mq"]),
            helper.make_node("Add", ["mq", c("bqkv", bqkv)], ["qkv"]),
            helper.make_node("Reshape", ["qkv", shape5], ["view"]),
            helper.make_node("Transpose", ["view"], ["perm"], perm=[2, 0, 3, 1, 4]),
        ]
    for i, name in enumerate("qkv" * (not split)):
        if gather:
            nodes.append(helper.make_node("Gather", ["perm", c(f"i{i}", i, np.int64)], [f"{name}h"], axis=0))
            continue
        at = [c(f"s{i}", [i], np.int64), c(f"e{i}", [i + 1], np.int64), c(f"ax{i}", [0], np.int64)]
        nodes += [
            helper.make_node("Slice", ["perm", *at], [f"{name}5"]),
            helper.make_node("Reshape", [f"{name}5", shape4], [f"{name}h"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["qh", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", c("scale", d**-0.5)], ["scores"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, dim])]
    scores = "scores"
    if mask == "causal":
        causal = np.triu(np.full((tokens, tokens), -1e9), 1)[None, None]
        nodes.append(helper.make_node("Add", ["scores", c("causal", causal)], ["masked"]))
        scores = "masked"
    elif mask is not None:
        shape_m = c("shape_m", [1, 1, 1, tokens], np.int64)
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT64, [1, tokens]))
        if mask == "additive":
            nodes += [
                helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
                helper.make_node("Sub", [c("one", 1.0), "mf"], ["inv"]),
                helper.make_node("Mul", ["inv", c("big", -10000.0)], ["bias2"]),
            ]
        else:
            nodes += [
                helper.make_node("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
                helper.make_node("Where", ["mb", c("zero", 0.0), c("ninf", -1e9)], ["bias2"]),
            ]
        nodes += [
            helper.make_node("Reshape", ["bias2", shape_m], ["bias"]),
            helper.make_node("Add", ["scores", "bias"], ["masked"]),
        ]
        scores = "masked"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["pv"]),
        helper.make_node("Transpose", ["pv"], ["pvt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["pvt", c("shape3", [1, tokens, dim], np.int64)], ["heads"]),
        helper.make_node("MatMul", ["heads", c("wo", rng.normal(0, dim**-0.5, (dim, dim)))], ["mo"]),
        helper.make_node("Add", ["mo", c("bo", rng.normal(0, 0.1, dim))], ["o"]),
        helper.make_node("Add", ["r0", "o"], ["r1"]),
        helper.make_node("MatMul", ["r1", c("w3", rng.normal(0, dim**-0.5, (dim, dim)))], ["m3"]),
        helper.make_node("Add", ["m3", c("b3", rng.normal(0, 0.1, dim))], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, dim])]
    graph = helper.make_graph(nodes, "attention_block", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _split_projections(c, wqkv: np.ndarray, bqkv: np.ndarray, tokens: int, heads: int, d: int) -> list:
    """Q, K and V (``qh``, ``kh``, ``vh``: (1, heads, tokens, d)) of LayerNorm output ``a``, each its own MatMul +
    Add of its third of ``wqkv`` and ``bqkv``, reshaped to (1, tokens, heads, d) and transposed."""
    dim, nodes = heads * d, []
    shape = c("shape_h", [1, tokens, heads, d], np.int64)
    for i, name in enumerate("qkv"):
        cols = slice(i * dim, (i + 1) * dim)
        nodes += [
            helper.make_node("MatMul", ["a", c(f"w{name}", wqkv[:, cols])], [f"m{name}"]),
            helper.make_node("Add", [f"m{name}", c(f"b{name}", bqkv[cols])], [f"{name}p"]),
            helper.make_node("Reshape", [f"{name}p", shape], [f"{name}4"]),
            helper.make_node("Transpose", [f"{name}4"], [f"{name}h"], perm=[0, 2, 1, 3]),
        ]
    return nodes


def feeds(heads: int, d: int, tokens: int, mask: str | None, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``count`` inputs: ``x`` normal; the mask keeps a random prefix of at least half the tokens (padding)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        f = {"x": rng.normal(0, 1, (1, tokens, heads * d)).astype(np.float32)}
        if mask not in (None, "causal"):
            keep = np.arange(tokens)[None, :] < rng.integers(tokens // 2, tokens + 1)
            f["mask"] = keep.astype(np.int64)
        out.append(f)
    return out


def _vdla(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds as vdla's graph takes them (int64 as int32)."""
    return {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in f.items()}


@functools.cache
def compiled(
    heads: int, d: int, tokens: int, mask: str | None, q_gain: float = 1.0, gather: bool = False, split: bool = False
) -> tuple:
    """The block quantized by vdla's calibration: the ONNX model, its quantized graph and the artifact."""
    model = block_model(heads, d, tokens, mask, q_gain, gather, split)
    calib = feeds(heads, d, tokens, mask, 8, 1)
    calib = {k: np.concatenate([_vdla(f)[k] for f in calib]) for k in calib[0]}
    qgraph, _ = quantize_model(simplify(import_onnx(model)), calib, "percentile")
    return model, qgraph, compile_graph_model(qgraph, "pynq")[0]


def _attention_steps(art) -> list:
    return [s for s in art.steps if s.kind == "accel" and s.layer["op"] == "attention"]


@pytest.mark.parametrize(
    "heads, d, tokens, mask, form",
    [
        (2, 32, 17, None, "slice"),
        (3, 32, 33, "additive", "slice"),
        (2, 64, 17, "bool", "slice"),
        (3, 64, 33, None, "gather"),
        (2, 32, 17, "additive", "split"),
    ],
)
def test_attention_runs_on_the_accelerator_between_the_projections(heads, d, tokens, mask, form):
    """vdla's calibration: the attention block one accelerator step between the QKV and the output projections
    (three separate projections merged into one), no CPU step but the input's (the run-time mask's keep vector
    among it) and the output's; bit-exact against the lowered integer graph (one ``attention_int``), close to
    onnxruntime's float model."""
    model, qgraph, art = compiled(heads, d, tokens, mask, gather=form == "gather", split=form == "split")
    kinds = [s.kind for s in art.steps]
    assert kinds == ["cpu", *["accel"] * (len(kinds) - 2), "cpu"], [(s.kind, s.name, getattr(s, "note", "")) for s
                                                                   in art.steps]  # fmt: skip
    (step,) = _attention_steps(art)
    assert f"{heads} heads of {d}, each head's setup beside the previous head's tiles" in step.layer["schedule"]
    assert ("run-time key mask" in step.layer["schedule"]) == (mask is not None)
    low = lower_qdq(qgraph)
    assert [n.op for n in low.nodes].count("attention_int") == 1 and not any(n.op == "softmax" for n in low.nodes)
    from vdla.model.cli import _placement_table

    assert _placement_table(art, None).row_count == len(art.steps)  # the step table describes its steps
    module, session = Module(art, "sim"), reference_session(model)
    for f in feeds(heads, d, tokens, mask, 2, 9):
        got = module.run(_vdla(f))
        np.testing.assert_array_equal(got, evaluate(low, _vdla(f))["y"])
        assert cosine(got, session.run(None, f)[0]) >= 0.99
    module.close()


def test_attention_placed_is_bit_exact_on_the_rtl(rtl_library):
    _, qgraph, art = compiled(2, 32, 17, "additive")
    module, low = Module(art, "rtl"), lower_qdq(qgraph)
    f = _vdla(feeds(2, 32, 17, "additive", 1, 12)[0])
    np.testing.assert_array_equal(module.run(f), evaluate(low, f)["y"])
    module.close()


def test_the_keep_vector_masks_exactly_the_padded_keys():
    """The lowered graph's keep vector of the additive mask: 1 for the kept keys, 0 for the padding."""
    _, qgraph, _ = compiled(3, 32, 33, "additive")
    low = lower_qdq(qgraph)
    node = next(n for n in low.nodes if n.op == "attention_int")
    f = _vdla(feeds(3, 32, 33, "additive", 1, 5)[0])
    keep = evaluate(low, f, keep=True)[node.inputs[1]]
    np.testing.assert_array_equal(keep.ravel(), f["mask"].ravel().astype(np.int8))


@pytest.mark.parametrize(
    "heads, d, tokens, gain, why",
    [
        (2, 32, 17, 12.0, "the 15-bit exp table keeps at most ln(2^15)"),
        (1, 64, 241, 0.5, "at most 240 tokens"),
    ],
)
def test_a_block_the_integer_form_or_the_accelerator_refuses_stays_on_the_cpu_with_the_reason(
    heads, d, tokens, gain, why
):
    """A score scale above 0.04077 (scores spread wider than ln(2^15) nats), or more tokens than a head's ``K`` and
    ``V`` copies fit in a thread's share of the buffers: the block stays in float, no ``attention_int`` reaches a
    CPU step, the step's note names the limit."""
    _, _, art = compiled(heads, d, tokens, None, gain)
    cpu = [s for s in art.steps if s.kind == "cpu" and any(n.op == "softmax" for n in s.graph.nodes)]
    assert cpu and all(why in s.note for s in cpu), [s.note for s in cpu]
    assert not _attention_steps(art)
    assert not any(n.op == "attention_int" for s in art.steps if s.kind == "cpu" for n in s.graph.nodes)


def onnx_attention_model(heads: int, d: int, tokens: int) -> onnx.ModelProto:
    """ONNX's ``Attention`` (opset 23, 3-D inputs, its default scale) on the three parts of one QKV projection
    (``Split``), between an input and an output projection."""
    rng = np.random.default_rng(23)
    dim = heads * d
    inits = [
        numpy_helper.from_array(np.asarray(v, np.float32), n)
        for n, v in (
            ("wqkv", rng.normal(0, 0.8 * dim**-0.5, (dim, 3 * dim))),
            ("bqkv", rng.normal(0, 0.1, 3 * dim)),
            ("wo", rng.normal(0, dim**-0.5, (dim, dim))),
            ("w0", rng.normal(0, dim**-0.5, (dim, dim))),
        )
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["a"]),
        helper.make_node("MatMul", ["a", "wqkv"], ["mq"]),
        helper.make_node("Add", ["mq", "bqkv"], ["qkv"]),
        helper.make_node("Split", ["qkv"], ["q", "k", "v"], axis=-1, num_outputs=3),
        helper.make_node("Attention", ["q", "k", "v"], ["att"], q_num_heads=heads, kv_num_heads=heads),
        helper.make_node("MatMul", ["att", "wo"], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "onnx_attention", [helper.make_tensor_value_info("x", f, [1, tokens, dim])],
                              [helper.make_tensor_value_info("y", f, [1, tokens, dim])], inits)  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


def test_the_onnx_attention_operator_is_placed_too():
    """The ONNX ``Attention`` import's form (``Q`` scaled before ``Q K^T``) is the same attention block: one
    accelerator step, bit-exact against the lowered graph, close to onnxruntime's float model."""
    model = onnx_attention_model(2, 32, 17)
    x = np.random.default_rng(4).normal(0, 1, (9, 1, 17, 64)).astype(np.float32)
    qgraph, _ = quantize_model(simplify(import_onnx(model)), {"x": x[:8, 0]}, "percentile")
    art = compile_graph_model(qgraph, "pynq")[0]
    assert [s.kind for s in art.steps] == ["cpu", *["accel"] * (len(art.steps) - 2), "cpu"]
    assert len(_attention_steps(art)) == 1
    module, low = Module(art, "sim"), lower_qdq(qgraph)
    got = module.run(x[8])
    np.testing.assert_array_equal(got, evaluate(low, {"x": x[8]})["y"])
    assert cosine(got, reference_session(model).run(None, {"x": x[8]})[0]) >= 0.99
    module.close()


def test_a_batch_of_two_leaves_the_attention_in_float_naming_the_config():
    """The accelerator runs attention at batch 1 only: on ``batch2`` the QDQ lowering keeps the block in float (no
    ``attention_int`` reaches a CPU step) and the note says why."""
    _, qgraph, _ = compiled(2, 32, 17, None)
    art = compile_graph_model(qgraph, "batch2")[0]
    notes = [s.note for s in art.steps if s.kind == "cpu" and any(n.op == "softmax" for n in s.graph.nodes)]
    assert notes and all("batch 1" in n for n in notes), notes
    assert not _attention_steps(art)


def test_a_causal_mask_leaves_the_attention_in_float_naming_why():
    """A mask of one value per query and key (causal) is not the integer attention's per-key mask: the block stays
    in float on the CPU, its note naming that, and the model still computes onnxruntime's float result."""
    model, _, art = compiled(2, 32, 17, "causal")
    notes = [s.note for s in art.steps if s.kind == "cpu" and any(n.op == "softmax" for n in s.graph.nodes)]
    assert len(notes) == 1 and "one value per query and key" in notes[0], notes
    assert not _attention_steps(art)
    module, session = Module(art, "sim"), reference_session(model)
    for f in feeds(2, 32, 17, "causal", 2, 9):
        assert cosine(module.run(f), session.run(None, f)[0]) >= 0.99
    module.close()
