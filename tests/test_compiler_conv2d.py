"""Compiled conv2d and dense are bit-exact against the numpy reference, on several hardware configs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vdla.compiler import ScheduleCache, compile_conv2d, compile_dense
from vdla.experiments.resnet import layer_case, layer_specs
from vdla.graph.oracle import conv2d_reference, dense_reference
from vdla.runtime import Device

CONFIGS = ("pynq", "block8", "batch2")


@pytest.fixture(scope="module")
def devices() -> dict[str, Device]:
    return {name: Device(name) for name in CONFIGS}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> ScheduleCache:
    return ScheduleCache(tmp_path_factory.mktemp("cache") / "schedules.json")


def rand(rng, shape, lo=-128, hi=128, dtype=np.int8):
    return rng.integers(lo, hi, shape).astype(dtype)


@settings(max_examples=30, deadline=None)
@given(
    cfg=st.sampled_from(CONFIGS),
    n=st.integers(1, 2),
    c=st.integers(1, 40),
    oc=st.integers(1, 40),
    h=st.integers(1, 12),
    w=st.integers(1, 12),
    k=st.sampled_from([1, 3, 5, 7]),
    s=st.integers(1, 2),
    pads=st.tuples(*[st.integers(0, 6)] * 4),
    vthreads=st.sampled_from([1, 2, 3, 4, "auto"]),
    relu=st.booleans(),
    bias=st.booleans(),
    shift=st.integers(0, 12),
    seed=st.integers(0, 2**16),
)
def test_conv2d_bit_exact(devices, cache, cfg, n, c, oc, h, w, k, s, pads, vthreads, relu, bias, shift, seed):
    pad = tuple(min(p, k - 1) for p in pads)
    assume(h + pad[0] + pad[1] >= k and w + pad[2] + pad[3] >= k)
    rng = np.random.default_rng(seed)
    x, wt = rand(rng, (n, c, h, w)), rand(rng, (oc, c, k, k))
    b = rng.integers(-50000, 50000, oc) if bias else None
    layer = compile_conv2d(
        x.shape, wt, stride=s, padding=pad, bias=b, shift=shift, relu=relu, config=cfg, vthreads=vthreads, cache=cache
    )
    out = layer.run(devices[cfg], x).out
    ref = conv2d_reference(x, wt, layer.spec, bias=b, shift=shift, bounds=layer.epilogue.bounds)
    np.testing.assert_array_equal(out, ref)


EPILOGUES = {
    "bias": {"bias": True, "shift": 10},
    "shift": {"shift": 9},
    "multiplier-imm": {"multiplier": 3, "shift": 10},
    "multiplier-large": {"multiplier": 70000, "shift": 24},
    "multiplier-per-channel": {"multiplier": "per-channel", "shift": 12},
    "relu": {"relu": True, "shift": 8},
    "clip": {"clip": (-20, 45), "shift": 8},
    "residual-int8": {"residual": "int8", "shift": 9},
    "residual-int32": {"residual": "int32", "shift": 9},
    "everything": {"bias": True, "multiplier": "per-channel", "shift": 14, "relu": True, "residual": "int8"},
    # 31-bit multipliers: the 64-bit product (acc ~2^17 x m ~2^30), rounded once by a shift beyond 31
    # one power-of-two multiplier per channel: a plain rounding shift (no ALU pass)
    "multiplier-power-of-two": {"bias": True, "multiplier": "pow2", "shift": 40},
    "multiplier-wide": {"bias": True, "multiplier": "wide", "shift": 40, "residual": "int32"},
    # a quantized model's residual add: the layer rounds to int8 at its scale, the sum at another
    "rescaled-residual": {
        "multiplier": "wide",
        "shift": 43,
        "residual": "int8",
        "relu": True,
        "rescale": (-128, 127, 11, 10, 20),
        "rescale_multipliers": "wide",
    },
    "rescaled-residual-clip": {
        "bias": True,
        "multiplier": "wide",
        "shift": 42,
        "residual": "int8",
        "clip": (-100, 90),
        "rescale": (-120, 110, 13, 13, 18),
        "rescale_multipliers": "wide",
    },
}


@pytest.mark.parametrize("cfg", ["pynq", "block8"])
@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_epilogue_options(devices, cache, cfg, name):
    rng = np.random.default_rng(7)
    opts = dict(EPILOGUES[name])
    x, wt = rand(rng, (1, 24, 9, 10)), rand(rng, (20, 24, 3, 3))
    if opts.pop("bias", False):
        opts["bias"] = rng.integers(-100000, 100000, 20)
    if opts.get("multiplier") == "pow2":
        opts["multiplier"] = 1 << 30
    elif opts.get("multiplier") == "wide":
        opts["multiplier"] = rng.integers(1 << 29, (1 << 31) - 1, 20)
    elif isinstance(opts.get("multiplier"), str):
        opts["multiplier"] = rng.integers(-300, 300, 20)
    if opts.get("rescale_multipliers") == "wide":  # m_y per channel, m_k one scalar
        opts["rescale_multipliers"] = (rng.integers(1 << 29, (1 << 31) - 1, 20), int(rng.integers(1 << 29, 1 << 31)))
    res = None
    if opts.get("residual") == "int8":
        res = rand(rng, (1, 20, 9, 10))
    elif opts.get("residual") == "int32":
        res = rand(rng, (1, 20, 9, 10), -400, 400, np.int32)  # beyond int8: only an int32 residual holds it
    layer = compile_conv2d(x.shape, wt, padding=1, config=cfg, vthreads=2, cache=cache, **opts)
    out = layer.run(devices[cfg], x, residual=res).out
    ref_opts = {k: v for k, v in opts.items() if k in ("bias", "multiplier", "shift", "rescale", "rescale_multipliers")}
    ref = conv2d_reference(x, wt, layer.spec, bounds=layer.epilogue.bounds, residual=res, **ref_opts)
    np.testing.assert_array_equal(out, ref)
    assert len(np.unique(out)) > 10  # the epilogue keeps a spread of values, not one saturated constant
    if name == "multiplier-power-of-two":
        assert layer.epilogue.multiplier == "none" and layer.epilogue.shift == 10


@pytest.mark.parametrize("cfg", CONFIGS)
def test_dense_bit_exact(devices, cache, cfg):
    rng = np.random.default_rng(3)
    x, wt = rand(rng, (37, 70)), rand(rng, (45, 70))
    b, res = rng.integers(-20000, 20000, 45), rand(rng, (37, 45))
    layer = compile_dense(37, wt, bias=b, shift=9, residual="int8", config=cfg, cache=cache)
    out = layer.run(devices[cfg], x, residual=res).out
    np.testing.assert_array_equal(out, dense_reference(x, wt, bias=b, shift=9, residual=res))


def test_resnet_c1_with_padded_channels_is_exact(devices, cache):
    """C1 (224x224, 3 input channels padded to 16, 7x7 stride 2): the layer the VDLA paper left on the CPU."""
    case = layer_case("C1", layer_specs()["C1"])
    assert case.spec.pad == (3, 3, 3, 3) and (case.spec.sh, case.spec.sw) == (2, 2)
    layer = case.compile("pynq", cache=cache)
    run = layer.run(devices["pynq"], case.x)
    np.testing.assert_array_equal(run.out, case.reference((0, 127)))
    assert run.counters.utilization > 0.85


@pytest.mark.parametrize(
    "kernel, stride, pad",
    [
        ((1, 3), (2, 1), (0, 0, 1, 1)),
        ((3, 1), (1, 2), (1, 1, 0, 0)),
        ((2, 5), (2, 3), (1, 0, 2, 1)),
        ((1, 1), (3, 2), (0, 0, 0, 0)),
    ],
)
@pytest.mark.parametrize("cfg", ["pynq", "batch2"])
def test_non_square_kernels_strides_and_pads(devices, cache, cfg, kernel, stride, pad):
    rng = np.random.default_rng(11)
    x, wt = rand(rng, (3, 19, 13, 11)), rand(rng, (21, 19, *kernel))
    layer = compile_conv2d(x.shape, wt, stride=stride, padding=pad, shift=7, config=cfg, vthreads=2, cache=cache)
    out = layer.run(devices[cfg], x).out
    np.testing.assert_array_equal(out, conv2d_reference(x, wt, layer.spec, shift=7))


@pytest.mark.parametrize("relu", [False, True])
def test_bias_shift_clip_epilogue_costs_no_alu_pass(devices, cache, relu):
    """Bias + rounding shift + int8/ReLU clip: the first GEMM of each tile starts the accumulators from their
    bias rows (``init``, EPI bias_base) and the OUT mirror requantizes (EPI req): no ALU instruction at all."""
    from vdla.compiler.epilogue import cycles_per_element
    from vdla.config import load_config
    from vdla.isa import AluInsn, EpiInsn, GemmInsn

    rng = np.random.default_rng(5)
    x, wt, b = rand(rng, (1, 40, 7, 9)), rand(rng, (36, 40, 3, 3)), rng.integers(-300000, 300000, 36)
    layer = compile_conv2d(x.shape, wt, padding=1, bias=b, shift=11, relu=relu, vthreads=2, cache=cache)
    out = layer.run(devices["pynq"], x).out
    bounds = (0, 127) if relu else (-128, 127)
    np.testing.assert_array_equal(out, conv2d_reference(x, wt, layer.spec, bias=b, shift=11, bounds=bounds))
    prog = layer.program()
    assert not any(isinstance(i, AluInsn) for i in prog)
    epis = [i for i in prog if isinstance(i, EpiInsn)]
    assert epis and all(i.req and i.bias and i.shift == 11 and i.relu == relu for i in epis)
    gemms = [i for i in prog if isinstance(i, GemmInsn)]
    assert not any(i.reset for i in gemms) and sum(i.init for i in gemms) == len(epis)
    assert cycles_per_element(layer.epilogue, load_config("pynq").timing) == 0


def test_multiplier_rows_stay_a_pass_with_and_without_bias(devices, cache):
    from vdla.isa import AluInsn, AluOp, EpiInsn, GemmInsn

    rng = np.random.default_rng(6)
    x, wt, m = rand(rng, (1, 20, 6, 6)), rand(rng, (18, 20, 1, 1)), rng.integers(-300, 300, 18)
    for bias in (None, rng.integers(-5000, 5000, 18)):
        layer = compile_conv2d(x.shape, wt, bias=bias, multiplier=m, shift=13, relu=True, cache=cache)
        out = layer.run(devices["pynq"], x).out
        ref = conv2d_reference(x, wt, layer.spec, bias=bias, multiplier=m, shift=13, bounds=(0, 127))
        np.testing.assert_array_equal(out, ref)
        prog = layer.program()
        assert {i.alu_opcode for i in prog if isinstance(i, AluInsn)} == {AluOp.MUL}
        assert all(i.bias == (bias is not None) for i in prog if isinstance(i, EpiInsn))
        assert not any(isinstance(i, GemmInsn) and i.reset for i in prog)
