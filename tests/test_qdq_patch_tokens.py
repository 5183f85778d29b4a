"""onnxruntime's QDQ model of ViT-Tiny (issue 53): its patch embedding with its class token and position
embedding as token rows (vdla.graph.qdq.patch_tokens), the same floats as the model computes. The whole QDQ
transformers (two CPU steps, every layer equal to onnxruntime's but for ties, the RTL) are tests of the model
suite's tier (tests/test_model_suite.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.qdq import patch_tokens  # noqa: E402
from vdla.zoo.models import quantize_qdq  # noqa: E402
from vdla.zoo.suite import suite_model  # noqa: E402


def test_the_patch_embedding_as_token_rows_computes_the_same_floats():
    """The rewrite keeps the QDQ model's float semantics: the graph before and after evaluate to the same
    outputs (the position embedding's rows exactly an int8 constant dequantized, the class token's row computed
    by the model's own nodes); the conv is gone, a dense over the 64 patches in its place."""
    m = suite_model("vit_tiny")
    q = quantize_qdq(m.load(), m.samples(8, 0))
    g = simplify(import_onnx(q, m.input_shapes()))
    rewritten = patch_tokens(g)
    assert [n.op for n in g.nodes].count("conv2d") == 1 and "conv2d" not in [n.op for n in rewritten.nodes]
    dense = [n for n in rewritten.nodes if n.op == "dense" and n.output.startswith("conv2d:")]
    assert len(dense) == 1
    for f in m.feeds(2, 4):
        a, b = evaluate(g, f), evaluate(rewritten, f)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
