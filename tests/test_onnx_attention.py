"""Einsum, Gemm, Attention and RotaryEmbedding lowered to vdla's primitives at import: the float CPU path against
onnxruntime (the reference helper) and ONNX's reference, and refusals at import naming what is not supported."""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from test_onnx_reduce import matches_onnxruntime, model  # noqa: E402

from vdla.cpu_fallback import compile_graph  # noqa: E402
from vdla.frontend import import_onnx  # noqa: E402
from vdla.graph.passes import simplify  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


EINSUMS = [
    ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 6, 8)]),
    ("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 8)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ijk->", [(2, 3, 4)]),
    ("i,i", [(5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,kj", [(3, 4), (5, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("bik,bkj,bjl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
    ("abc,cd->ad", [(2, 3, 4), (4, 5)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_common_forms_match_onnxruntime(equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    shapes = [shapes[0]] * 2 if equation == "i,i" else shapes
    names = names if equation != "i,i" else ["x0", "x1"]
    feeds = {n: _f32(*s) for n, s in zip(names, shapes, strict=True)}
    want = np.einsum(equation, *feeds.values())
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    m = model([node], [(n, F, s) for n, s in zip(names, shapes, strict=True)], [("y", F, want.shape)], opset=12)
    got = matches_onnxruntime(m, feeds)
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)
    graph = simplify(import_onnx(m))
    assert {n.op for n in graph.nodes} <= {"matmul", "transpose", "reshape", "reduce"}


@pytest.mark.parametrize(
    "equation, shapes, out, why",
    [
        ("ii->i", [(3, 3)], (3,), "a repeated subscript"),
        ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)], (2, 3, 5), "broadcasting is not supported"),
    ],
)
def test_einsum_diagonals_and_broadcasting_are_refused_naming_the_equation(equation, shapes, out, why):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    m = model([node], [(n, F, s) for n, s in zip(names, shapes, strict=True)], [("y", F, out)], opset=12)
    with pytest.raises(UnsupportedError, match=f"attribute equation='{re.escape(equation)}'.*{why}"):
        import_onnx(m)


GEMMS = [
    ({"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, (4, 3), (5, 4), (5,), True),
    ({"transB": 1}, (3, 4), (5, 4), (3, 1), True),
    ({"transA": 1, "beta": -1.0}, (4, 3), (4, 5), (1, 5), False),
    ({"alpha": 3.0}, (3, 4), (4, 5), (3, 5), False),
    ({"beta": 0.0}, (3, 4), (4, 5), (1,), True),
]


@pytest.mark.parametrize("attrs, sa, sb, sc, const_b", GEMMS)
def test_gemm_transposes_alpha_beta_and_broadcast_c_match_onnxruntime(attrs, sa, sb, sc, const_b):
    """Computed and constant B, computed A, C of every broadcast form (computed too)."""
    inits = [("b", _f32(*sb))] if const_b else []
    inputs = [("a", F, sa), ("c", F, sc)] + ([] if const_b else [("b", F, sb)])
    m_rows = sa[1] if attrs.get("transA") else sa[0]
    n_cols = sb[0] if attrs.get("transB") else sb[1]
    m = model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], **attrs)], inputs, [("y", F, (m_rows, n_cols))],
              inits, opset=13)  # fmt: skip
    feeds = {"a": _f32(*sa), "c": _f32(*sc)} | ({} if const_b else {"b": _f32(*sb)})
    matches_onnxruntime(m, feeds)


def _attention_model(q, k, v, attrs, mask=None, past=None, outputs=1, opset=23):
    names = ["q", "k", "v"] + (["mask"] if mask is not None else [""] if past else [])
    feeds = {"q": q, "k": k, "v": v} | ({"mask": mask} if mask is not None else {})
    if past is not None:
        names += ["past_k", "past_v"]
        feeds |= {"past_k": past[0], "past_v": past[1]}
    node = helper.make_node("Attention", names, ["y", "present_k", "present_v", "qk"][:outputs], **attrs)
    shapes = {o.name: tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in _infer(node, feeds, opset)}
    m = model([node], [(n, F, a.shape) for n, a in feeds.items()], [(o, F, shapes[o]) for o in node.output],
              opset=opset)  # fmt: skip
    return m, feeds


def _infer(node, feeds, opset):
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info(n, F, a.shape) for n, a in feeds.items()],
                          [helper.make_tensor_value_info(o, F, None) for o in node.output])  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(m, strict_mode=True).graph.output


def _matches_reference(m, feeds) -> None:
    """vdla against ONNX's reference implementation (the conformance cases' ground truth)."""
    got = compile_graph(simplify(import_onnx(m), verify=True))(**feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for o, w in zip(m.graph.output, want, strict=True):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5, err_msg=o.name)


ATTENTIONS = {
    "4d": (_f32(2, 3, 4, 8), _f32(2, 3, 6, 8), _f32(2, 3, 6, 8), {}),
    "4d_gqa_causal_scaled": (_f32(2, 6, 4, 8), _f32(2, 2, 6, 8), _f32(2, 2, 6, 5), {"is_causal": 1, "scale": 0.3}),
    "3d_heads_softcap": (_f32(2, 4, 24), _f32(2, 6, 24), _f32(2, 6, 30),
                         {"q_num_heads": 3, "kv_num_heads": 3, "softcap": 2.0}),
    "3d_gqa": (_f32(1, 5, 32), _f32(1, 5, 8), _f32(1, 5, 8), {"q_num_heads": 4, "kv_num_heads": 1, "is_causal": 1}),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ATTENTIONS))
def test_attention_matches_onnxruntime(name):
    q, k, v, attrs = ATTENTIONS[name]
    matches_onnxruntime(*_attention_model(q, k, v, attrs))


def test_attention_with_masks_past_and_every_qk_output_mode_matches_onnx_reference():
    q, k, v = _f32(2, 3, 4, 8), _f32(2, 3, 6, 8), _f32(2, 3, 6, 8)
    past = (_f32(2, 3, 5, 8), _f32(2, 3, 5, 8))
    mask = _f32(2, 1, 4, 9)  # shorter than the 11 keys: padded with -inf
    mask[0, 0, 2, :] = -np.inf  # a fully masked row: zero probabilities, not NaN
    for mode in (0, 1, 2, 3):
        for causal in (0, 1):
            attrs = {"qk_matmul_output_mode": mode, "is_causal": causal, "softcap": 1.5}
            m, feeds = _attention_model(q, k, v, attrs, mask=mask, past=past, outputs=4)
            _matches_reference(m, feeds)
    m, feeds = _attention_model(q, k, v, {"is_causal": 1}, mask=mask[..., :6], outputs=1)
    m.graph.input.pop()  # the mask as a constant: fully masked rows found at import
    m.graph.initializer.append(onnx.numpy_helper.from_array(feeds.pop("mask"), "mask"))
    _matches_reference(m, feeds)
    got = compile_graph(simplify(import_onnx(m)))(**feeds)["y"]
    assert np.all(got[0, :, 2] == 0) and np.isfinite(got).all()


def test_attention_refusals_name_the_input_or_attribute():
    q, k, v, _ = ATTENTIONS["4d"]
    m, _ = _attention_model(q, k, v, {"scale": -1.0})
    with pytest.raises(UnsupportedError, match="attribute scale=-1.0"):
        import_onnx(m)
    m, _ = _attention_model(q, k, v, {"qk_matmul_output_mode": 4}, outputs=4)
    with pytest.raises(UnsupportedError, match="attribute qk_matmul_output_mode=4"):
        import_onnx(m)
    m = _typed_attention_model(q, k, v, {}, {"mask": np.zeros((4, 6), np.int32)})
    with pytest.raises(UnsupportedError, match="input 3 'mask' has dtype int32"):
        import_onnx(m)
    m = _typed_attention_model(q, k, v, {}, {"nonpad": np.array([6, 6, 6], np.int64)})
    with pytest.raises(UnsupportedError, match=r"nonpad_kv_seqlen of shape \(3,\) for a batch of 2"):
        import_onnx(m)


def _typed_attention_model(q, k, v, attrs, extra: dict[str, np.ndarray], consts=()):
    """An Attention model whose mask (``mask``) or padding lengths (``nonpad``, input 6) are of any dtype: graph
    inputs, or initializers where named in ``consts``."""
    names = ["q", "k", "v", "mask" if "mask" in extra else "", "", "", "nonpad" if "nonpad" in extra else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("Attention", names, ["y"], **attrs)
    types = {np.dtype(np.float32): F, np.dtype(bool): TensorProto.BOOL, np.dtype(np.int64): TensorProto.INT64,
             np.dtype(np.int32): TensorProto.INT32}  # fmt: skip
    feeds = {"q": q, "k": k, "v": v} | {n: a for n, a in extra.items() if n not in consts}
    inputs = [helper.make_tensor_value_info(n, types[a.dtype], a.shape) for n, a in feeds.items()]
    inits = [onnx.numpy_helper.from_array(extra[n], n) for n in consts]
    shape = (*q.shape[:-1], v.shape[-1])
    graph = helper.make_graph([node], "m", inputs, [helper.make_tensor_value_info("y", F, shape)], inits)
    opset = 25 if "nonpad" in extra else 23  # (nonpad_kv_seqlen: opset 24; the window attributes: 25)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _matches_reference_fed(m, feeds) -> None:
    """:func:`_matches_reference` with int64 inputs fed to vdla as int32 (how it holds them)."""
    got = compile_graph(simplify(import_onnx(m), verify=True))(
        **{n: a.astype(np.int32) if a.dtype == np.int64 else a for n, a in feeds.items()}
    )
    want = ReferenceEvaluator(m).run(None, feeds)
    for o, w in zip(m.graph.output, want, strict=True):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5, err_msg=o.name)


@pytest.mark.parametrize("const", [False, True])
def test_attention_with_a_bool_mask_matches_onnx_reference(const):
    """True attends, False masks (a -inf bias); a fully masked row gives zero probabilities, not NaN."""
    q, k, v = _f32(2, 3, 4, 8), _f32(2, 3, 6, 8), _f32(2, 3, 6, 8)
    mask = RNG.random((2, 1, 4, 5)) < 0.7  # shorter than the 6 keys: padded with False
    mask[1, 0, 3, :] = False
    for attrs in ({}, {"is_causal": 1}):
        m = _typed_attention_model(q, k, v, attrs, {"mask": mask}, consts=("mask",) if const else ())
        _matches_reference_fed(m, {"q": q, "k": k, "v": v} | ({} if const else {"mask": mask}))


def test_attention_with_run_time_padding_lengths_matches_onnx_reference():
    """nonpad_kv_seqlen fed at run time (int64, int32 inside vdla): the keys past each batch's length are
    masked, and with is_causal and a window the queries sit at the end of each batch's keys."""
    q, k, v = _f32(3, 2, 3, 8), _f32(3, 2, 7, 8), _f32(3, 2, 7, 8)
    nonpad = np.array([7, 4, 3], np.int64)
    mask = _f32(3, 1, 3, 7)
    for attrs, extra in [({}, {}), ({"is_causal": 1}, {}), ({"is_causal": 1, "left_window_size": 1}, {"mask": mask}),
                         ({"right_window_size": 0, "left_window_size": 2}, {})]:  # fmt: skip
        m = _typed_attention_model(q, k, v, attrs, {"nonpad": nonpad} | extra)
        _matches_reference_fed(m, {"q": q, "k": k, "v": v, "nonpad": nonpad} | extra)


@pytest.mark.parametrize("interleaved, rot", [(0, 0), (1, 0), (0, 4), (1, 4)])
def test_rotary_embedding_matches_onnx_reference(interleaved, rot):
    x, positions = _f32(2, 3, 5, 8), np.array([[0, 1, 2, 3, 4], [7, 3, 9, 10, 11]], np.int64)
    half = (rot or 8) // 2
    angles = np.arange(16)[:, None] * (0.1 + np.arange(half)[None, :])
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=interleaved,
                            rotary_embedding_dim=rot)  # fmt: skip
    m = model([node], [("x", F, x.shape), ("cos", F, cos.shape), ("sin", F, sin.shape)], [("y", F, x.shape)],
              [("pos", positions)], opset=23)  # fmt: skip
    _matches_reference(m, {"x": x, "cos": cos, "sin": sin})
    matches_onnxruntime(m, {"x": x, "cos": cos, "sin": sin})
    # the positions fed at run time (int64, int32 inside vdla): the cache rows gathered by the JIT
    m.graph.initializer.pop()
    m.graph.input.append(helper.make_tensor_value_info("pos", TensorProto.INT64, positions.shape))
    _matches_reference_fed(m, {"x": x, "cos": cos, "sin": sin, "pos": positions})


@pytest.mark.parametrize(
    "rule,heads,decay_width,beta_width,past",
    [
        ("gated_delta", (4, 2), 2, 2, True),  # grouped query heads, a decay per head, the state carried in
        ("gated", (2, 2), 2 * 4, None, False),  # a decay per key feature
        ("delta", (2, 1), None, 1, True),  # one key/value head, one beta for all
        ("linear", (3, 3), None, None, False),
    ],
)
def test_linear_attention_matches_onnx_reference(rule, heads, decay_width, beta_width, past):
    """LinearAttention (opset 27) unrolled over 5 steps: output and present state as ONNX's reference."""
    (qh, kvh), bsz, seq, dk, dv = heads, 2, 5, 4, 3
    feeds = {"q": _f32(bsz, seq, qh * dk), "k": _f32(bsz, seq, kvh * dk) * 0.5, "v": _f32(bsz, seq, kvh * dv)}
    names = ["q", "k", "v", "", "", ""]
    if past:
        feeds["s"], names[3] = _f32(bsz, kvh, dk, dv), "s"
    if decay_width:
        feeds["g"], names[4] = -np.abs(_f32(bsz, seq, decay_width)), "g"
    if beta_width:
        feeds["beta"], names[5] = 1 / (1 + np.exp(-_f32(bsz, seq, beta_width))), "beta"
    while not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], q_num_heads=qh, kv_num_heads=kvh,
                            update_rule=rule, chunk_size=2)  # fmt: skip
    m = model([node], [(n, F, a.shape) for n, a in feeds.items()],
              [("y", F, (bsz, seq, qh * dv)), ("state", F, (bsz, kvh, dk, dv))], opset=27)  # fmt: skip
    _matches_reference(m, feeds)


def test_linear_attention_refusals_name_the_attribute_or_input():
    q = _f32(1, 2, 8)
    for attrs, names, match in [
        ({"update_rule": "linear"}, ["q", "q", "q", "", "g"], "update_rule 'linear' takes no decay input"),
        ({"update_rule": "gated_delta"}, ["q", "q", "q"], "update_rule 'gated_delta' needs decay input"),
        ({"update_rule": "fast"}, ["q", "q", "q"], "attribute update_rule='fast'"),
    ]:
        node = helper.make_node("LinearAttention", names, ["y", "s"], q_num_heads=2, kv_num_heads=2, **attrs)
        inputs = [("q", F, q.shape)] + ([("g", F, (1, 2, 2))] if "g" in names else [])
        m = model([node], inputs, [("y", F, q.shape), ("s", F, (1, 2, 4, 4))], opset=27)
        with pytest.raises(UnsupportedError, match=match):
            import_onnx(m)
