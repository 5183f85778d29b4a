"""The attention block of an onnxruntime QDQ model on the accelerator (issue 53, vdla.compiler.attention_qdq):
its probabilities quantized to int8 before ``P V``, the scores passing a chain of quantize/dequantize steps.
The integer reference (oracle.attention_qdq) against onnxruntime's softmax; the compiled program bit-exact
against the reference on the simulator (every exp mode, masks, shapes, presets) and on the RTL; the block
recognised in QDQ models and placed as one accelerator step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rtl_presets import ZU_RTL

from vdla.compiler.attention import AttentionSpec
from vdla.compiler.attention_qdq import (
    HeadsSearch,
    HeadsThreads,
    QdqAttentionHeads,
    QdqAttentionLowering,
    compile_attention_programs,
    compile_attention_qdq,
)
from vdla.compiler.spec import CompileError
from vdla.config import load_config
from vdla.graph import oracle
from vdla.graph.attention import QdqAttention, qdq_exp_ranges, qdq_planes
from vdla.graph.interp import evaluate
from vdla.runtime.device import Device
from vdla.zoo.random_programs import pynq_full

RNG = np.random.default_rng(5353)
SCORES = np.arange(-128, 128)


def qkv(tokens: int, channels: int) -> np.ndarray:
    """A QKV projection's int8 output: normal at a quarter of the int8 range, a token of extremes, a dead channel."""
    x = np.clip(np.rint(RNG.normal(0, 32, (tokens, channels))), -128, 127).astype(np.int8)
    x[tokens // 2] = RNG.choice([-128, 127], channels)
    x[:, 3] = 0
    return x


def params(d: int, softmax_scale: float, masked: bool = False) -> QdqAttention:
    """The chain of BERT's QDQ export, in int8: the scores requantized by 0.9 (a scale and its own quantization),
    a masked key 60 steps lower; the probabilities at 1/127, the output at 2/3 of ``V``'s step."""
    kept = np.clip(np.rint(SCORES * 0.9), -128, 127)
    low = np.clip(np.rint(SCORES * 0.9 - 60), -128, 127) if masked else None
    return QdqAttention.of(d, 1 / (32 * 40), kept, low, softmax_scale, 1 / 127, (1 / 127) * 1.5)


def keep_vector(tokens: int) -> np.ndarray:
    keep = RNG.random(tokens) > 0.3
    keep[0] = True
    return keep


def check(spec: AttentionSpec, config="pynq-z2", keep=None, backend="sim") -> int:
    """Run ``spec``'s program on ``backend``: its output exactly the reference's; the cycles."""
    c, q, k, v, oc, o = spec.views
    x, d = qkv(spec.tokens, c), spec.d
    layer = compile_attention_qdq(spec, config)
    got = layer.run(Device(layer.lowering.cfg, backend=backend), x, keep)
    mask = spec.keep if keep is None else keep
    want = oracle.attention_qdq(x[:, q : q + d], x[:, k : k + d], x[:, v : v + d], spec.head, mask)
    np.testing.assert_array_equal(got.out[:, o : o + d], want)
    assert spec.tokens < 3 or len(np.unique(want)) > 8
    return got.result.counters.cycles


# ---------------------------------------------------------------------------------------------------------
# the reference


def test_the_exp_ranges_and_planes_rebuild_the_table_exactly():
    """``e(d) = near[clamp(d)] + far[clamp(d + 128)]`` over [-255, 0] and 0 below; each table its three planes."""
    p = params(64, 0.05)
    near, far = qdq_exp_ranges(p.exp)
    d = np.arange(-400, 1)
    got = near[np.clip(d, -128, 127) + 128] + far[np.clip(d + 128, -128, 127) + 128]
    want = np.where(d >= -255, np.asarray(p.exp)[np.maximum(d + 255, 0)], 0)
    np.testing.assert_array_equal(got, want)
    for table in (near, far, np.asarray(p.exp)):
        planes = qdq_planes(table).astype(np.int64)
        np.testing.assert_array_equal((planes[0] << 16) + (planes[1] << 8) + planes[2], table)
        assert planes[0].min() >= 0 and planes[0].max() <= 64


def test_the_mode_follows_the_softmax_input_scale():
    """A reference of 127 where the input spans at most 6 ln 2 nats, the row maximum above."""
    assert params(64, 0.0122).fixed and params(64, 0.0163).fixed
    assert not params(64, 0.0164).fixed and not params(64, 78.7).fixed


@pytest.mark.parametrize("softmax_scale", [0.0122, 0.05, 0.3, 78.7])
def test_the_reference_probabilities_are_onnxruntimes(softmax_scale):
    """The int8 probabilities of ``quantize(softmax(dequantize(x)))`` run by onnxruntime (optimizations off) and
    the reference's: equal but for ties of the float arithmetic, at most 2 in 10^5 (rows of 65 keys, inputs
    around 0 and below)."""
    from onnx import TensorProto, helper, numpy_helper

    from vdla.frontend.reference import reference_session

    t = 65
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("si", softmax_scale, np.float32), ("z", 0, np.int8), ("so", 1 / 127, np.float32))]  # fmt: skip
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "si", "z"], ["xf"]),
        helper.make_node("Softmax", ["xf"], ["p"], axis=-1),
        helper.make_node("QuantizeLinear", ["p", "so", "z"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.INT8, [None, t]) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph(nodes, "softmax", io[:1], io[1:], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # fmt: skip
    session = reference_session(model)
    p = QdqAttention.of(64, 1e-4, SCORES, None, softmax_scale, float(np.float32(1 / 127)), 0.01)
    x = np.concatenate([np.clip(np.rint(RNG.normal(mu, 40, (1500, t))), -128, 127) for mu in (0, -60)])
    x = x.astype(np.int8)
    want = session.run(None, {"x": x})[0]
    got = oracle.attention_qdq_probs(x + 0, p)
    assert np.count_nonzero(got != want) <= 2e-5 * want.size


# ---------------------------------------------------------------------------------------------------------
# the program


@pytest.mark.parametrize("tokens, d", [(1, 32), (17, 32), (32, 64), (65, 64)])
@pytest.mark.parametrize("softmax_scale", [0.0122, 0.05, 2.0])
@pytest.mark.parametrize("mask", ["none", "constant", "runtime"])
def test_bit_exact_on_the_simulator(tokens, d, softmax_scale, mask):
    """Each exp mode (a fixed reference: three planes; the row maximum with both ranges: up to six; one range),
    each mask."""
    keep = keep_vector(tokens)
    if mask == "none":
        check(AttentionSpec(tokens, params(d, softmax_scale)))
    elif mask == "constant":
        check(AttentionSpec(tokens, params(d, softmax_scale, True), keep=tuple(bool(b) for b in keep)))
    else:
        check(AttentionSpec(tokens, params(d, softmax_scale, True), runtime_mask=True), keep=keep)


@pytest.mark.parametrize("preset", ["pynq-full", "zcu104"])
def test_bit_exact_on_other_presets(preset):
    cfg = pynq_full() if preset == "pynq-full" else load_config(preset)
    check(AttentionSpec(65, params(64, 0.05, True), runtime_mask=True), cfg, keep=keep_vector(65))
    check(AttentionSpec(197, params(32, 0.0122)), cfg)


def test_views_of_a_wider_tensor():
    """A head's Q, K and V at their own offsets of a fused projection, its output into a channel block of the
    concatenation."""
    spec = AttentionSpec(33, params(32, 0.05), in_channels=192, q_at=64, k_at=96, v_at=160, out_channels=96, out_at=32)
    check(spec)


def test_one_plane_of_a_wide_input_scale():
    """A softmax input at BERT's QDQ scale (78.7 a step): every exp but the row maximum's is 0, one plane."""
    low = QdqAttentionLowering(AttentionSpec(65, params(64, 78.7)), load_config("pynq-z2"))
    assert [(t.kind, t.plane) for t in low.planes] == [("near", 0)]
    assert len(QdqAttentionLowering(AttentionSpec(65, params(64, 0.05)), load_config("pynq-z2")).planes) > 3


@pytest.mark.parametrize("softmax_scale, mask", [(0.05, True), (0.0122, False)])
def test_bit_exact_on_the_rtl(rtl_library, softmax_scale, mask):
    """The RTL's output exactly the reference's, its cycles within 2% of the simulator's."""
    spec = AttentionSpec(32, params(64, softmax_scale, mask), runtime_mask=mask)
    keep = keep_vector(32) if mask else None
    rtl, sim = (check(spec, keep=keep, backend=b) for b in ("rtl", "sim"))
    assert abs(rtl - sim) <= 0.02 * sim, (rtl, sim)


@pytest.mark.parametrize("heads, tokens, softmax_scale, mask", [(3, 65, 0.0122, False), (2, 32, 78.7, True)])
def test_heads_in_one_program_on_two_threads(heads, tokens, softmax_scale, mask):
    """A block's heads in one program, head ``h`` on thread ``h % 2`` in its share of the buffers (ViT-Tiny's and
    BERT-tiny's shapes): every head's channels exactly the reference's."""
    d = 64
    p, width = params(d, softmax_scale, mask), heads * d
    specs = [AttentionSpec(tokens, p, 3 * width, h * d, width + h * d, 2 * width + h * d, width, h * d,
                           runtime_mask=mask) for h in range(heads)]  # fmt: skip
    (program,) = compile_attention_programs(specs, "pynq-z2")
    assert isinstance(program.lowering, QdqAttentionHeads)
    x, keep = qkv(tokens, 3 * width), keep_vector(tokens) if mask else None
    got = program.run(Device(load_config("pynq-z2")), x, keep).out
    for s in specs:
        _, q, k, v, _, o = s.views
        want = oracle.attention_qdq(x[:, q : q + d], x[:, k : k + d], x[:, v : v + d], p, keep)
        np.testing.assert_array_equal(got[:, o : o + d], want)


def test_the_thread_count_is_the_fastest_and_kept_in_the_schedule_cache(tmp_path):
    """Three heads: two and three threads timed on the timing-only simulator, the faster taken (three on
    ``pynq-z2``, whose round trips the third hides) and kept; a second compile reads the choice back."""
    from vdla.compiler.cache import ScheduleCache

    d, width = 64, 192
    p = params(d, 0.0122)
    specs = [AttentionSpec(65, p, 3 * width, h * d, width + h * d, 2 * width + h * d, width, h * d) for h in range(3)]
    cache = ScheduleCache(tmp_path / "schedules.json")
    search = HeadsSearch(specs, load_config("pynq-z2"))
    assert search.candidates() == [HeadsThreads(2), HeadsThreads(3)]
    (first,) = compile_attention_programs(specs, "pynq-z2", cache)
    assert first.lowering.threads == 3 and len(json.loads(cache.path.read_text())) == 1
    (again,) = compile_attention_programs(specs, "pynq-z2", cache)
    assert again.lowering.threads == 3


def test_heads_that_do_not_fit_half_the_buffers_run_one_after_the_other():
    """197 tokens of three heads of 64: each head's program in turn, on all the buffers."""
    specs = [AttentionSpec(197, params(64, 0.05), 576, 64 * h, 192 + 64 * h, 384 + 64 * h, 192, 64 * h)
             for h in range(3)]  # fmt: skip
    programs = compile_attention_programs(specs, "pynq-z2")
    assert len(programs) == 3 and all(isinstance(p.lowering, QdqAttentionLowering) for p in programs)


def test_a_head_too_long_for_the_buffers_names_the_limit():
    with pytest.raises(CompileError, match="do not fit"):
        compile_attention_qdq(AttentionSpec(500, params(64, 0.05)), "pynq-z2")


# ---------------------------------------------------------------------------------------------------------
# in QDQ models


def _qdq_block(heads: int, d: int, tokens: int, mask: str | None):
    from qdq_check import lowered_graph
    from test_attention_placement import block_model, feeds

    from vdla.model.pipeline import compile_model
    from vdla.zoo.models import quantize_qdq

    calib = feeds(heads, d, tokens, mask, 8, 1)
    stacked = {k: np.concatenate([f[k] for f in calib]) for k in calib[0]}
    qmodel = quantize_qdq(block_model(heads, d, tokens, mask), stacked, input_name="x")
    art, _ = compile_model(qmodel)
    return qmodel, lowered_graph(qmodel), art


@pytest.mark.parametrize("heads, d, tokens, mask", [(2, 32, 17, None), (3, 32, 33, "additive"), (2, 64, 17, "bool")])
def test_a_qdq_models_attention_runs_on_the_accelerator(heads, d, tokens, mask):
    """onnxruntime's QDQ block (the scores requantized after the product, the scale and the mask; the
    probabilities at 1/127): one accelerator step of its heads, no softmax on the CPU, no CPU step but the
    input's and the output's; bit-exact against its lowered graph (one ``attention_int`` with the QDQ
    parameters); layer by layer against onnxruntime's int8 model (each layer fed its int8 inputs), the block's
    output differs by at most one step, in at most 1% of its elements (where a probability or the output lies at
    a rounding tie of the float arithmetic)."""
    from test_attention_placement import feeds

    from vdla.frontend.reference import compare_layers
    from vdla.model import Module

    qmodel, low, art = _qdq_block(heads, d, tokens, mask)
    kinds = [s.kind for s in art.steps]
    assert kinds == ["cpu", *["accel"] * (len(kinds) - 2), "cpu"], [(s.kind, s.name, getattr(s, "note", ""))
                                                                   for s in art.steps]  # fmt: skip
    (step,) = [s for s in art.steps if s.kind == "accel" and s.layer["op"] == "attention"]
    assert f"{heads} heads of {d}" in step.layer["schedule"]
    (node,) = [n for n in low.nodes if n.op == "attention_int"]
    assert "qdq" in node.attrs and not any(n.op == "softmax" for n in low.nodes)
    module = Module(art, "sim")
    tests = feeds(heads, d, tokens, mask, 2, 9)
    for f in tests:
        vf = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in f.items()}
        np.testing.assert_array_equal(module.run(vf), evaluate(low, vf)["y"])
    module.close()
    (block,) = [a for a in compare_layers(qmodel, low, tests) if a.value == node.output]
    assert block.worst <= 1 and block.differing <= 0.01 * block.elements, block


def test_the_qdq_keep_vector_masks_exactly_the_padded_keys():
    """The run-time mask's two levels (kept, masked) from the model's own nodes: the keep vector is the input's."""
    from test_attention_placement import feeds

    _, low, _ = _qdq_block(3, 32, 33, "additive")
    node = next(n for n in low.nodes if n.op == "attention_int")
    f = feeds(3, 32, 33, "additive", 1, 5)[0]
    f = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in f.items()}
    np.testing.assert_array_equal(evaluate(low, f, keep=True)[node.inputs[1]].ravel(), f["mask"].ravel())


def test_a_qdq_block_with_a_causal_mask_stays_on_the_cpu_with_the_reason():
    """A mask of one value per query and key: the block keeps its QDQ path (per-head dense layers, the softmax on
    the CPU), the step's note naming the mask; bit-exact against its lowered graph."""
    from test_attention_placement import feeds

    from vdla.model import Module

    _, low, art = _qdq_block(2, 32, 17, "causal")
    cpu = [s for s in art.steps if s.kind == "cpu" and any(n.op == "softmax" for n in s.graph.nodes)]
    assert cpu and all("mask of more than one value per key" in s.note for s in cpu), [s.note for s in cpu]
    assert not any(n.op == "attention_int" for n in low.nodes)
    module = Module(art, "sim")
    f = feeds(2, 32, 17, "causal", 1, 3)[0]
    np.testing.assert_array_equal(module.run(f["x"]), evaluate(low, f)["y"])
    module.close()


@pytest.mark.slow  # a Verilator build of each Zynq UltraScale+ preset's design (about 100 s on 2 cores)
@pytest.mark.parametrize("preset", ZU_RTL)
def test_heads_reading_the_planes_from_out_are_bit_exact_on_the_rtl(preset):
    """On a design whose GEMMs read OUT rows (``src_out``): three heads, a fixed reference and the row maximum with
    both ranges and a run-time mask; the RTL's outputs exactly the reference's, its cycles within 1% of the
    simulator's."""
    d, heads = 64, 3
    for tokens, scale, mask in ((65, 0.0122, False), (33, 0.05, True)):
        p, width = params(d, scale, mask), heads * d
        specs = [AttentionSpec(tokens, p, 3 * width, h * d, width + h * d, 2 * width + h * d, width, h * d,
                               runtime_mask=mask) for h in range(heads)]  # fmt: skip
        (program,) = compile_attention_programs(specs, preset)
        x, keep = qkv(tokens, 3 * width), keep_vector(tokens) if mask else None
        runs = [program.run(Device(load_config(preset), backend=b), x, keep) for b in ("sim", "rtl")]
        np.testing.assert_array_equal(runs[1].out, runs[0].out)
        for s in specs:
            _, q, k, v, _, o = s.views
            want = oracle.attention_qdq(x[:, q : q + d], x[:, k : k + d], x[:, v : v + d], p, keep)
            np.testing.assert_array_equal(runs[1].out[:, o : o + d], want)
        sim, rtl = (r.result.counters.cycles for r in runs)
        assert abs(rtl - sim) <= 0.01 * sim, (rtl, sim)
