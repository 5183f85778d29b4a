"""LayerNorm on the accelerator (issue 53, vdla.compiler.layer_norm): the compiled program bit-exact against
the integer reference (oracle.layer_norm_int) on the simulator for several shapes and presets, and on the RTL."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vdla.compiler import search
from vdla.compiler.cache import ScheduleCache
from vdla.compiler.layer_norm import SQUARES, CompiledLayerNorm, LayerNormSpec, compile_layer_norm, scale_parts
from vdla.compiler.spec import CompileError
from vdla.config import load_config
from vdla.graph import oracle
from vdla.graph.layernorm import IntLayerNorm
from vdla.runtime.device import Device
from vdla.zoo.random_programs import pynq_full

RNG = np.random.default_rng(53)


def case(tokens: int, n: int) -> tuple[np.ndarray, LayerNormSpec]:
    """Random int8 rows with a constant row, a row of the extremes and a row of small spread; gamma with a
    negative and a zero entry."""
    x = RNG.integers(-128, 128, (tokens, n)).astype(np.int8)
    x[0] = 7
    if tokens > 2:
        x[1] = RNG.choice([-128, 127], n)
        x[2] = RNG.integers(-2, 3, n)
    gamma, beta = RNG.normal(1, 0.4, n), RNG.normal(0, 0.4, n)
    gamma[:2] = (-0.5, 0.0)
    return x, LayerNormSpec(tokens, IntLayerNorm.of(n, 0.03, 0.025, gamma, beta, 1e-5))


@pytest.mark.parametrize("n", [128, 192])
@pytest.mark.parametrize("tokens", [1, 17, 65, 197])
def test_bit_exact_on_the_simulator(tokens, n):
    x, spec = case(tokens, n)
    layer = compile_layer_norm(spec)
    out = layer.run(Device(layer.lowering.cfg), x).out
    want = oracle.layer_norm_int(x, spec.ln)
    np.testing.assert_array_equal(out, want)
    assert len(np.unique(want)) > 50


@pytest.mark.parametrize("preset", ["pynq-full", "zcu104", "block8"])
def test_bit_exact_on_other_presets(preset):
    cfg = pynq_full() if preset == "pynq-full" else load_config(preset)
    x, spec = case(40, 64)
    layer = compile_layer_norm(spec, cfg)
    np.testing.assert_array_equal(layer.run(Device(cfg), x).out, oracle.layer_norm_int(x, spec.ln))


def sqr_rows(run) -> int:
    """Rows the run's ALU SQRs square (each SQR pipelined)."""
    labels = [e.label for e in run.result.timeline if e.label.startswith("alu sqr")]
    assert all(" pipe " in label for label in labels), labels
    return sum(int(np.prod([int(v) for v in lb.split("iter=")[1].split()[0].split(",")])) for lb in labels)


@pytest.mark.parametrize("preset", ["pynq", "pynq-full", "zcu104", "block8"])
@pytest.mark.parametrize("tokens", [17, 197])
def test_squares_by_pipelined_sqr(preset, tokens):
    """In tiles (197 tokens) and in a resident program's squares order (17), every element's square is an ALU SQR
    pipelined over the rows (a row a cycle on a full-width ALU, two on the half-width one): the SQRs cover the
    elements' rows once."""
    cfg = pynq_full() if preset == "pynq-full" else load_config(preset)
    x, spec = case(tokens, 192)
    layer = compile_layer_norm(spec, cfg)
    if layer.lowering.resident:
        layer = CompiledLayerNorm(layer.lowering, layer.lowering.stream(SQUARES), SQUARES)
    run = layer.run(Device(cfg), x, timeline=True)
    np.testing.assert_array_equal(run.out, oracle.layer_norm_int(x, spec.ln))
    assert sqr_rows(run) == tokens * 192 // cfg.block_out


@pytest.mark.parametrize("preset", ["pynq", "pynq-full", "zcu104"])
@pytest.mark.parametrize("tokens, n", [(65, 192), (32, 128), (80, 64)])
def test_resident_squares_by_the_gram_gemm(preset, tokens, n):
    """Resident chunks take ``S2`` from the GEMM core: each chunk's copy goes to DRAM as weight tiles and comes
    back as WGT (``xw``), its rows against them the Gram matrix: no SQR, bit-exact, faster than the squares on the
    ALU (the order timed against them), the short last chunk of 65 tokens included."""
    cfg = pynq_full() if preset == "pynq-full" else load_config(preset)
    x, spec = case(tokens, n)
    layer = compile_layer_norm(spec, cfg)
    low = layer.lowering
    assert layer.order.gram and low.SCRATCH == ("xw",) and layer.order in low.resident_orders()
    run = layer.run(Device(cfg), x, timeline=True)
    np.testing.assert_array_equal(run.out, oracle.layer_norm_int(x, spec.ln))
    assert sqr_rows(run) == 0
    squares = CompiledLayerNorm(low, low.stream(SQUARES), SQUARES).run(Device(cfg), x)
    np.testing.assert_array_equal(squares.out, run.out)
    assert run.counters.cycles < squares.counters.cycles


@pytest.mark.parametrize("n", [16, 48, 256, 352])
def test_bit_exact_for_a_prescale_and_n_in_up_to_three_int8_parts(n):
    """Short rows take a prescale ``j`` (the rounding shift by ``k - j`` may shift left: ``2^(30 - k)`` against the
    shift ``30 - j``); ``n`` above 127 is two or three identity blocks in ``d``'s GEMM."""
    x, spec = case(20, n)
    layer = compile_layer_norm(spec)
    assert (spec.ln.prescale > 0) == (n < 182) and sum(scale_parts(n)) == n and max(scale_parts(n)) <= 127
    np.testing.assert_array_equal(layer.run(Device(layer.lowering.cfg), x).out, oracle.layer_norm_int(x, spec.ln))


def test_a_batch_of_two_rows_or_a_partial_block_is_refused_naming_the_config():
    _, spec = case(4, 128)
    with pytest.raises(CompileError, match="batch 1"):
        compile_layer_norm(spec, "batch2")
    with pytest.raises(CompileError, match="100 features need whole blocks of 16"):
        compile_layer_norm(case(4, 100)[1])
    with pytest.raises(CompileError, match=r"input must be int8 of shape \(4, 128\)"):
        compile_layer_norm(spec).run(Device("pynq"), np.zeros((4, 128), np.int16))


def test_every_token_resident_where_they_fit_else_tiles():
    """65 x 192 (ViT-Tiny's) fits with every token resident (chunks of 16 tokens, one per-row program); 197 x 352
    does not fit INP: tiles on two threads, the last one shorter."""
    resident = compile_layer_norm(case(65, 192)[1]).lowering
    tiled = compile_layer_norm(case(197, 352)[1]).lowering
    assert resident.resident and resident.gr == 5
    assert not tiled.resident and tiled.threads == 2 and 197 % tiled.r


def test_bit_exact_on_rtl(rtl_library):
    x, spec = case(65, 192)
    layer = compile_layer_norm(spec, "pynq")
    assert layer.lowering.resident and layer.order.gram  # five chunks, the last of one token; the tiles' round trip
    rtl = layer.run(Device("pynq", backend="rtl"), x)
    np.testing.assert_array_equal(rtl.out, oracle.layer_norm_int(x, spec.ln))
    sim = layer.run(Device("pynq"), x)
    assert abs(rtl.counters.cycles - sim.counters.cycles) <= 0.01 * sim.counters.cycles


def test_squares_resident_bit_exact_on_rtl(rtl_library):
    x, spec = case(1, 128)  # one chunk: the squares on the ALU
    layer = compile_layer_norm(spec, "pynq")
    assert layer.lowering.resident and not layer.order.gram
    np.testing.assert_array_equal(layer.run(Device("pynq", backend="rtl"), x).out, oracle.layer_norm_int(x, spec.ln))


def test_tiles_bit_exact_on_rtl(rtl_library):
    x, spec = case(197, 192)  # DeiT-Tiny's: 2,364 input rows, more than INP holds
    layer = compile_layer_norm(spec, "pynq")
    assert not layer.lowering.resident and layer.lowering.threads == 2
    rtl = layer.run(Device("pynq", backend="rtl"), x)
    np.testing.assert_array_equal(rtl.out, oracle.layer_norm_int(x, spec.ln))


def test_the_resident_order_is_kept_in_the_schedule_cache(tmp_path, monkeypatch):
    """The timed choice of a resident order is stored under the shape's key: another LayerNorm of that shape (other
    gamma and beta) takes it from the cache, timing nothing."""
    cache = ScheduleCache(tmp_path / "s.json")
    x, spec = case(65, 192)
    first = compile_layer_norm(spec, "pynq", cache)
    assert first.order.gram and json.loads((tmp_path / "s.json").read_text())
    other = LayerNormSpec(65, IntLayerNorm.of(192, 0.03, 0.02, RNG.normal(1, 0.2, 192), RNG.normal(0, 0.2, 192), 1e-5))
    assert other.key() == spec.key() and other != spec

    def untimed(*args, **kwargs):
        raise AssertionError("timed a cached choice")

    monkeypatch.setattr(search, "fastest", untimed)
    again = compile_layer_norm(other, "pynq", cache)
    assert again.order == first.order
    np.testing.assert_array_equal(again.run(Device("pynq"), x).out, oracle.layer_norm_int(x, other.ln))
