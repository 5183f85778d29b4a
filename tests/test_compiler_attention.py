"""One attention head on the accelerator (issue 53, vdla.compiler.attention): the compiled program bit-exact against
the integer reference (oracle.attention_int) on the simulator for several shapes, masks, views and presets, and on
the RTL; the refusals naming their limits."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.compiler.attention import AttentionSpec, compile_attention, compile_attention_heads
from vdla.compiler.blocks import Gemm, Load
from vdla.compiler.spec import CompileError
from vdla.config import load_config
from vdla.graph import oracle
from vdla.graph.attention import IntAttention
from vdla.isa import MemType
from vdla.runtime.device import Device
from vdla.zoo.random_programs import pynq_full

RNG = np.random.default_rng(53)


def qkv(tokens: int, channels: int) -> np.ndarray:
    """A QKV projection's int8 output (tokens, channels): normal at a quarter of the int8 range, a row of the
    extremes among them."""
    x = np.clip(np.rint(RNG.normal(0, 32, (tokens, channels))), -128, 127).astype(np.int8)
    if tokens > 2:
        x[tokens // 2] = RNG.choice([-128, 127], x.shape[1])
    return x


def params(d: int) -> IntAttention:
    """Scores spread over most of the int8 range (softmax neither flat nor one-hot)."""
    return IntAttention.of(d, 1 / 32, 1 / 32, 1 / 32, 0.02, 1 / 48)


def keep_vector(tokens: int) -> np.ndarray:
    keep = RNG.random(tokens) > 0.3
    keep[0] = True
    return keep


def check(spec: AttentionSpec, config="pynq-z2", keep=None, backend="sim", dev: Device | None = None) -> None:
    c, q, k, v, oc, o = spec.views
    x = qkv(spec.tokens, c)
    layer = compile_attention(spec, config)
    got = layer.run(dev or Device(layer.lowering.cfg, backend=backend), x, keep).out
    mask = spec.keep if keep is None else keep
    d = spec.d
    want = oracle.attention_int(x[:, q : q + d], x[:, k : k + d], x[:, v : v + d], spec.head, mask)
    np.testing.assert_array_equal(got[:, o : o + d], want)
    assert len(np.unique(want)) > 20


@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("tokens", [1, 17, 32, 65, 197])
@pytest.mark.parametrize("mask", ["none", "constant", "runtime"])
def test_bit_exact_on_the_simulator(tokens, d, mask):
    keep = keep_vector(tokens)
    if mask == "none":
        check(AttentionSpec(tokens, params(d)))
    elif mask == "constant":
        check(AttentionSpec(tokens, params(d), keep=tuple(bool(b) for b in keep)))
    else:
        check(AttentionSpec(tokens, params(d), runtime_mask=True), keep=keep)


@pytest.mark.parametrize("preset", ["pynq-full", "zcu104"])
def test_bit_exact_on_other_presets(preset):
    cfg = pynq_full() if preset == "pynq-full" else load_config(preset)
    check(AttentionSpec(65, params(64), runtime_mask=True), cfg, keep=keep_vector(65))
    check(AttentionSpec(197, params(32)), cfg)


def stale_device(cfg, backend="sim") -> Device:
    """A device whose buffers hold another head's values (81 tokens of extreme inputs): what a padded query's or
    key's rows hold when the program does not write them."""
    layer = compile_attention(AttentionSpec(81, params(64)), cfg)
    dev = Device(layer.lowering.cfg, backend=backend)
    layer.run(dev, RNG.choice(np.array([-128, 127], np.int8), (81, 192)))
    return dev


def last_key_masked(tokens: int) -> np.ndarray:
    keep = keep_vector(tokens)
    keep[-1] = tokens == 1
    return keep


@pytest.mark.parametrize("tokens", [17, 33, 63, 65, 81, 197])
@pytest.mark.parametrize("preset", ["pynq-z2", "pynq-full"])
def test_a_partial_last_query_block_on_stale_buffers(tokens, preset):
    """The padded queries of a partial last query block and the padded keys are not computed, their rows holding
    what the buffers held (another head's values): every real query bit-exact, with a run-time and a constant mask
    (the last real key masked). 17, 33, 65, 81: a last block of one real query (alone in its tile at 17 and 33,
    after whole blocks at 65 and 81); 63: of 15; 197: of 5, 197 x 64 with the setup outside the threads' own
    shares."""
    cfg = pynq_full() if preset == "pynq-full" else load_config(preset)
    keep = last_key_masked(tokens)
    check(AttentionSpec(tokens, params(64), runtime_mask=True), cfg, keep=keep, dev=stale_device(cfg))
    constant = AttentionSpec(tokens, params(32), keep=tuple(map(bool, keep)))
    check(constant, cfg, dev=stale_device(cfg))


@pytest.mark.parametrize("tokens", [1, 17, 32, 65, 197])
def test_the_padded_queries_and_keys_take_no_gemm_iterations(tokens):
    """The program's GEMM iterations (uop-iterations) are those of the real tokens: ``K``'s and ``V``'s copies
    ``T`` tokens each, the scores and ``O`` ``T`` queries; the transposes of ``V``'s tiles and the products, whose
    padded tokens are lanes, whole blocks. The rows stored of ``K`` and ``V`` and of the exp planes are the real
    tokens'."""
    d = 64
    layer = compile_attention(AttentionSpec(tokens, params(d)), pynq_full())
    lanes, ub, cb = 16, -(-tokens // 16), d // 16
    copies, transposes = 2 * tokens * cb, cb * ub * lanes
    scores, products, untranspose = tokens * ub * cb, 2 * (ub * d * ub + ub * ub), tokens * cb
    gemms = [op for block in layer.stream.blocks for op in block.compute if isinstance(op, Gemm)]
    assert sum(g.kernel.iterations for g in gemms) == copies + transposes + scores + products + untranspose
    stored = {
        name: sum(s.y * s.x for b in layer.stream.blocks for s in b.stores if s.tensor == name) for name in ("kw", "ex")
    }
    assert stored == {"kw": 2 * tokens * cb, "ex": 2 * tokens * ub}


def test_bit_exact_with_blocks_of_8():
    check(AttentionSpec(40, params(32), runtime_mask=True), "block8", keep=keep_vector(40))
    with pytest.raises(CompileError, match="do not fit block8's buffers.*at most 56 tokens"):
        compile_attention(AttentionSpec(65, params(64)), "block8")


def test_views_of_a_qkv_tensor_and_of_the_concatenated_heads():
    """Head 1 of 3 heads of 32 (Q, K, V of all heads one after another in a 288-channel tensor), written into
    channels 32..63 of the 96-channel concatenation; the other channels left alone."""
    spec = AttentionSpec(40, params(32), in_channels=288, q_at=32, k_at=128, v_at=224, out_channels=96, out_at=32)
    check(spec)


def test_the_two_threads_start_after_the_weights_are_in_place():
    layer = compile_attention(AttentionSpec(197, params(64)))
    low = layer.lowering
    assert low.tiles > 2 and 197 % (low.tb * low.lanes)  # a short last tile


def test_refusals_name_the_limit():
    with pytest.raises(CompileError, match="at most 240 tokens"):
        compile_attention(AttentionSpec(300, params(64)))
    with pytest.raises(CompileError, match="exact in int32 up to 511"):
        compile_attention(AttentionSpec(600, params(32)))
    with pytest.raises(CompileError, match="batch 1"):
        compile_attention(AttentionSpec(17, params(64)), "batch2")
    with pytest.raises(CompileError, match="whole blocks of 16 inside the tensors"):
        compile_attention(AttentionSpec(17, params(64), in_channels=200))
    with pytest.raises(CompileError, match="a constant mask of 3 keys for 17"):
        compile_attention(AttentionSpec(17, params(64), keep=(True,) * 3))
    layer = compile_attention(AttentionSpec(17, params(64)))
    with pytest.raises(CompileError, match=r"input must be int8 of shape \(17, 192\)"):
        layer.run(Device("pynq"), np.zeros((17, 64), np.int8))
    with pytest.raises(CompileError, match="compiled without one"):
        layer.run(Device("pynq"), qkv(17, 192), np.ones(17, bool))


def head_specs(tokens: int, heads: int, d: int, **kw) -> list[AttentionSpec]:
    """The heads of a QKV projection's output (every head's Q, then every K, then every V) written into their
    concatenation."""
    c = heads * d
    return [
        AttentionSpec(tokens, params(d), 3 * c, h * d, c + h * d, 2 * c + h * d, c, h * d, **kw) for h in range(heads)
    ]


def run_heads(specs: list[AttentionSpec], config, x: np.ndarray, keep=None, backend="sim") -> int:
    """The heads' one program on ``x`` bit-exact against the reference head by head; its cycles."""
    layer = compile_attention_heads(specs, config)
    run = layer.run(Device(layer.lowering.cfg, backend=backend), x, keep)
    mask = specs[0].keep if keep is None else keep
    for sp in specs:
        _, q, k, v, _, o = sp.views
        d = sp.d
        want = oracle.attention_int(x[:, q : q + d], x[:, k : k + d], x[:, v : v + d], sp.head, mask)
        np.testing.assert_array_equal(run.out[:, o : o + d], want)
    return run.counters.cycles


@pytest.mark.parametrize(
    ("tokens", "heads", "d", "mask", "preset"),
    [
        (65, 3, 64, "runtime", "pynq-full"),
        (32, 2, 64, "runtime", "pynq-full"),
        (17, 4, 32, "constant", "pynq-z2"),
        (65, 2, 32, "none", "zcu104"),
        (1, 3, 64, "none", "pynq-full"),
    ],
)
def test_heads_in_one_program_bit_exact_and_faster_than_in_turn(tokens, heads, d, mask, preset):
    """Each head's setup beside the previous head's tiles: every head bit-exact, fewer cycles than the heads'
    own programs one after the other (the simulator's cycles of two schedules of the same work)."""
    cfg = pynq_full() if preset == "pynq-full" else load_config(preset)
    keep = keep_vector(tokens)
    kw = {"runtime_mask": True} if mask == "runtime" else {"keep": tuple(map(bool, keep))} if mask == "constant" else {}
    specs = head_specs(tokens, heads, d, **kw)
    runtime = keep if mask == "runtime" else None
    x = qkv(tokens, specs[0].views[0])
    together = run_heads(specs, cfg, x, runtime)
    alone = sum(compile_attention(sp, cfg).run(Device(cfg), x, runtime).counters.cycles for sp in specs)
    assert together < alone


def test_heads_whose_setups_do_not_fit_beside_each_other_go_in_turn():
    assert compile_attention_heads(head_specs(197, 3, 64), pynq_full()) is None
    assert compile_attention_heads(head_specs(197, 3, 32), pynq_full()) is not None
    with pytest.raises(CompileError, match="one token count, parameters and mask"):
        compile_attention_heads([*head_specs(17, 1, 64), *head_specs(32, 1, 64)], pynq_full())


def test_heads_in_one_program_bit_exact_on_rtl(rtl_library):
    specs = head_specs(32, 2, 64, runtime_mask=True)
    run_heads(specs, "pynq", qkv(32, specs[0].views[0]), keep_vector(32), backend="rtl")


def test_two_activation_tables_bit_exact_on_rtl(rtl_library):
    """pynq-full holds both exp tables (lut_tables 2): loaded once ahead of the heads, an EPI selects each plane's;
    bit-exact on the RTL, with no LOAD LUT among the tiles."""
    cfg = pynq_full()
    specs = head_specs(33, 2, 32, runtime_mask=True)
    layer = compile_attention_heads(specs, cfg)
    loads = [[op for op in b.compute if isinstance(op, Load) and op.mem == MemType.LUT] for b in layer.stream.blocks]
    assert cfg.lut_tables == 2 and [len(x) for x in loads] == [1] + [0] * (len(loads) - 1)  # the prologue's
    run_heads(specs, cfg, qkv(33, specs[0].views[0]), keep_vector(33), backend="rtl")


def test_bit_exact_on_rtl(rtl_library):
    check(AttentionSpec(65, params(64), runtime_mask=True), "pynq", keep=keep_vector(65), backend="rtl")


def test_a_partial_last_query_block_on_stale_buffers_on_rtl(rtl_library):
    spec = AttentionSpec(49, params(64), runtime_mask=True)
    check(spec, "pynq", keep=last_key_masked(49), backend="rtl", dev=stale_device("pynq", "rtl"))
