"""Tiles spanning several batch groups (a dense layer's tokens, each a 1x1 image of the token-major layout):
bit-exact against numpy integer math on the simulator, the cost model against the simulator, the search's choice,
and the layers whose tiles may not span groups."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from full_units import BOTH, FULL
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vdla.compiler import compile_conv2d
from vdla.compiler.conv_lowering import ConvLowering
from vdla.compiler.costmodel import CostModel
from vdla.compiler.schedule import Schedule
from vdla.compiler.search import build_stream, search, timed
from vdla.compiler.spec import Conv2dSpec, EpilogueSpec
from vdla.compiler.tiling import candidate_tiles
from vdla.config import load_config
from vdla.graph.epilogue import Epilogue
from vdla.graph.oracle import conv2d_oracle
from vdla.runtime import Device

TOKENS = 65  # ViT-Tiny's: 64 patches and the class token


def dense_case(seed: int, tokens: int, k: int, n: int, residual: bool):
    """A dense layer over ``tokens`` tokens as the model compiler lowers it: a 1x1 convolution of ``tokens`` 1x1
    images (token-major), a per-channel multiplier, a bias and, ``residual``, an int8 residual as it is."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (tokens, k, 1, 1)).astype(np.int8)
    w = rng.integers(-128, 128, (n, k, 1, 1)).astype(np.int8)
    ep = Epilogue(
        bias=rng.integers(-30000, 30000, n),
        multiplier=rng.integers(1 << 14, 1 << 15, n),
        shift=24,
        residual="int8" if residual else None,
    )
    res = rng.integers(-128, 128, (tokens, n, 1, 1)).astype(np.int8) if residual else None
    return x, w, ep, res


@pytest.mark.parametrize("cfg", BOTH, ids=("pynq", "full"))
@pytest.mark.parametrize(
    ("k", "schedule"),
    [
        (192, Schedule(3, 1, 1, 4, 2, tn=TOKENS)),  # every token in one tile, three steps, the input shared
        (192, Schedule(2, 1, 1, 12, 3, tn=24, order="spatial")),  # ragged token tiles
        (192, Schedule(5, 1, 1, 6, 2, tn=33, res_inp=True)),  # the residual in INP, added by the identity GEMM
        (768, Schedule(2, 1, 1, 8, 2, tn=33, res_inp=True)),  # an input too large to share: each thread's windows
        (768, Schedule(3, 1, 1, 8, 1, tn=2)),  # every step's window resident in the thread's share
    ],
    ids=lambda v: v.describe() if isinstance(v, Schedule) else str(v),
)
def test_token_tiles_are_exact(cfg, k, schedule):
    """Ragged token tiles and channel tiles, several reduction steps, both residual forms, the input shared by the
    threads or not: the simulator's outputs equal the numpy oracle's integer arithmetic."""
    x, w, ep, res = dense_case(1, TOKENS, k, 150, residual=True)
    layer = compile_conv2d(x.shape, w, epilogue=ep, config=cfg, schedule=schedule)
    assert layer.schedule == schedule
    low = layer.lowering
    assert low.inputs_shared(schedule) == (k == 192)
    assert low.inputs_resident(schedule) == (schedule.tn == 2)
    out = layer.run(Device(cfg), x, res).out
    np.testing.assert_array_equal(out, conv2d_oracle(x, w, layer.spec, ep, res))


def test_token_tiles_are_exact_on_two_batch_lanes():
    """On the batch2 preset a batch group is two tokens: ragged tiles of seven groups."""
    x, w, ep, res = dense_case(2, 38, 40, 40, residual=True)
    layer = compile_conv2d(x.shape, w, epilogue=ep, config="batch2", schedule=Schedule(2, 1, 1, 2, 2, tn=7))
    np.testing.assert_array_equal(layer.run(Device("batch2"), x, res).out, conv2d_oracle(x, w, layer.spec, ep, res))


@pytest.mark.parametrize("cfg", ["pynq", "block8", "batch2"])
@pytest.mark.parametrize("residual", [False, True])
def test_searched_token_tiles_are_exact_on_each_preset(cfg, residual):
    """The search's choice for 40 tokens spans several on the 16x16, 8x8 and two-lane presets, and is exact."""
    x, w, ep, res = dense_case(5, 40, 72, 52, residual)
    layer = compile_conv2d(x.shape, w, epilogue=ep, config=cfg)
    assert layer.schedule.tn > 1
    np.testing.assert_array_equal(layer.run(Device(cfg), x, res).out, conv2d_oracle(x, w, layer.spec, ep, res))


@settings(max_examples=40, deadline=None)
@given(
    cfg=st.sampled_from(["pynq", "batch2", "block8", FULL]),
    tokens=st.integers(2, 80),
    k=st.integers(1, 100),
    n=st.integers(1, 70),
    residual=st.booleans(),
    pick=st.integers(0, 1 << 20),
)
def test_token_tilings_of_random_layers_are_exact(cfg, tokens, k, n, residual, pick):
    """Random dense shapes (ragged channel blocks, odd token counts), any token tiling the search considers, both
    residual forms where the layer has one: exact against the numpy oracle on the simulator."""
    x, w, ep, res = dense_case(pick, tokens, k, n, residual)
    low = ConvLowering(Conv2dSpec.make(x.shape, n, 1), EpilogueSpec.of(ep), load_config(cfg))
    cands = [s for v in (1, 2, 3) for s in candidate_tiles(low, v) if s.tn > 1]
    assume(cands)
    s = cands[pick % len(cands)]
    layer = compile_conv2d(x.shape, w, epilogue=ep, config=cfg, schedule=s)
    np.testing.assert_array_equal(
        layer.run(Device(cfg), x, res).out, conv2d_oracle(x, w, layer.spec, ep, res), err_msg=s.describe()
    )


def lowering(cfg, tokens: int, k: int, n: int, residual: bool) -> ConvLowering:
    epi = EpilogueSpec(bias=True, multiplier="row", shift=24, residual="int8" if residual else None)
    return ConvLowering(Conv2dSpec.make((tokens, k, 1, 1), n, 1), epi, cfg)


@pytest.mark.parametrize("shape", [(192, 576, False), (192, 192, True), (768, 192, True)])
def test_cost_model_tracks_the_simulator_on_token_tiles(shape):
    """ViT-Tiny's dense layers (q/k/v, the projection with its residual, the MLP's second layer): token tilings
    the search considers (the residual in INP and in the accumulators, whose compute-stage LOAD waits for the
    load-stage instruction in flight), estimated within 5% of the timing-only simulator, never below the bound."""
    low = lowering(FULL, TOKENS, *shape)
    model = CostModel(low)
    cands = [s for v in (1, 2, 4) for s in candidate_tiles(low, v) if s.tn > 1]
    assert cands
    for s in cands[:: max(1, len(cands) // 5)]:
        est = model.estimate(s)
        assert model.bound(s) <= est.cycles
        assert est.cycles == pytest.approx(timed(low, build_stream(low, s)).cycles, rel=0.05)


def test_search_chooses_tiles_spanning_tokens():
    """The search's choice for a dense layer over many tokens spans several of them, and is faster than the best
    schedule of one token a tile (the tiling without token tiles)."""
    low = lowering(FULL, TOKENS, 192, 576, False)
    chosen = search(low)
    assert chosen.schedule.tn > 1
    one = min(timed(low, build_stream(low, replace(s, tn=1))).cycles for s in candidate_tiles(low, 2))
    assert chosen.cycles < one


def test_token_tiles_only_where_a_group_is_one_pixel():
    """A convolution over images of more than one pixel keeps tiles of one batch group: the search never offers
    more, and a schedule asking for them is refused, naming why."""
    low = ConvLowering(Conv2dSpec.make((4, 32, 5, 5), 32, 1), EpilogueSpec(bias=True, shift=8), load_config("pynq"))
    assert not low.token_tiles
    assert all(s.tn == 1 for s in candidate_tiles(low, 2))
    (why,) = low.problems(Schedule(1, 5, 5, 1, 1, tn=2))
    assert "not a 1x1 layer of stride 1 over 1x1 images" in why


@pytest.mark.parametrize(
    "schedule", [Schedule(2, 1, 1, 2, 2, tn=9, res_inp=True), Schedule(3, 1, 1, 3, 1, tn=20)], ids=Schedule.describe
)
def test_token_tiles_on_rtl(rtl_library, schedule):
    """The RTL runs a token-tiled program (ragged groups, steps, the residual in INP and in ACC, a split tail) as
    the simulator does: bit-exact against numpy, equal to the simulator."""
    x, w, ep, res = dense_case(4, 20, 48, 40, residual=True)
    layer = compile_conv2d(x.shape, w, epilogue=ep, schedule=schedule)
    rtl = layer.run(Device("pynq", backend="rtl"), x, res)
    np.testing.assert_array_equal(rtl.out, conv2d_oracle(x, w, layer.spec, ep, res))
    np.testing.assert_array_equal(rtl.out, layer.run(Device("pynq"), x, res).out)
