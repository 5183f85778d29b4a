"""onnxruntime's QDQ models of the suite's transformers on the accelerator (issue 53): ViT-Tiny's patch embedding
with its class token and position embedding as token rows (vdla.graph.qdq.patch_tokens), its LayerNorms over
(1, tokens, features) as rows, every attention block (vdla.compiler.attention_qdq): no CPU step but the input's
and the output's; the compiled model bit-exact against its lowered graph, every layer against onnxruntime's int8
model equal but for rounding ties."""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from qdq_check import lowered_graph  # noqa: E402

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.frontend.reference import compare_layers  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import patch_tokens  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import CompileOptions, compile_model  # noqa: E402
from vdla.zoo.models import quantize_qdq  # noqa: E402
from vdla.zoo.suite import suite_model  # noqa: E402


@functools.cache
def qdq_model(name: str):
    m = suite_model(name)
    return m, quantize_qdq(m.load(), m.samples(8, 0))


@pytest.mark.parametrize("name", ["vit_tiny", "bert_tiny"])
def test_a_qdq_transformer_runs_with_two_cpu_steps(name):
    m, q = qdq_model(name)
    art, _ = compile_model(q, None, CompileOptions(input_shapes=m.input_shapes()))
    kinds = [s.kind for s in art.steps]
    assert kinds == ["cpu", *["accel"] * (len(kinds) - 2), "cpu"], [(s.kind, s.name, getattr(s, "note", ""))
                                                                   for s in art.steps]  # fmt: skip
    ops = {s.layer["op"] for s in art.steps if s.kind == "accel"}
    assert {"attention", "layer_norm", "dense"} <= ops
    low, feeds = lowered_graph(q), m.feeds(2, 3)
    module = Module(art, "sim")
    for f in feeds:
        f32 = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in f.items()}  # vdla's int64
        got, want = module.run(f32), evaluate(low, f32)
        for k, v in (got if isinstance(got, dict) else {next(iter(art.outputs)): got}).items():
            np.testing.assert_array_equal(v, want[k])
    module.close()
    for a in compare_layers(q, low, feeds):
        assert a.differing == a.ties and a.worst <= 1, a


def test_the_patch_embedding_as_token_rows_computes_the_same_floats():
    """The rewrite keeps the QDQ model's float semantics: the graph before and after evaluate to the same
    outputs (the position embedding's rows exactly an int8 constant dequantized, the class token's row computed
    by the model's own nodes); the conv is gone, a dense over the 64 patches in its place."""
    m, q = qdq_model("vit_tiny")
    g = simplify(import_onnx(q, m.input_shapes()))
    rewritten = patch_tokens(g)
    assert [n.op for n in g.nodes].count("conv2d") == 1 and "conv2d" not in [n.op for n in rewritten.nodes]
    dense = [n for n in rewritten.nodes if n.op == "dense" and n.output.startswith("conv2d:")]
    assert len(dense) == 1
    for f in m.feeds(2, 4):
        a, b = evaluate(g, f), evaluate(rewritten, f)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
