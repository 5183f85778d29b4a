"""Compiled conv2d and dense are bit-exact against the numpy oracle, on several hardware configs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from full_units import FULL
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vdla.compiler import ScheduleCache, compile_conv2d, compile_dense
from vdla.config import load_config
from vdla.graph.epilogue import Epilogue, Rescale
from vdla.graph.oracle import conv2d_oracle, dense_oracle
from vdla.runtime import Device
from vdla.zoo.resnet import layer_case, layer_specs

CONFIGS = ("pynq", "block8", "batch2")


@pytest.fixture(scope="module")
def devices() -> dict[str, Device]:
    return {name: Device(name) for name in CONFIGS}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> ScheduleCache:
    return ScheduleCache(tmp_path_factory.mktemp("cache") / "schedules.json")


def rand(rng, shape, lo=-128, hi=128, dtype=np.int8):
    return rng.integers(lo, hi, shape).astype(dtype)


def epilogue(opts: dict) -> Epilogue:
    """The :class:`Epilogue` of a table entry: ``relu`` folded into ``clip``, ``rescale`` = (lo, hi, shift_y,
    shift_k, frac) with ``rescale_multipliers`` = (m_y, m_k)."""
    lo, hi = opts.get("clip", (-128, 127))
    clip = (max(lo, 0), max(hi, 0)) if opts.get("relu") else (lo, hi)
    rescale = None
    if "rescale" in opts:
        y_lo, y_hi, shift_y, shift_k, frac = opts["rescale"]
        m_y, m_k = opts["rescale_multipliers"]
        rescale = Rescale((y_lo, y_hi), m_y, shift_y, m_k, shift_k, frac)
    keep = {k: opts[k] for k in ("bias", "multiplier", "shift", "residual") if k in opts}
    return Epilogue(**keep, rescale=rescale, clip=clip)


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
    ep = epilogue({"bias": b, "shift": shift, "relu": relu})
    layer = compile_conv2d(x.shape, wt, stride=s, padding=pad, epilogue=ep, config=cfg, vthreads=vthreads, cache=cache)
    out = layer.run(devices[cfg], x).out
    ref = conv2d_oracle(x, wt, layer.spec, ep)
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


def epilogue_case(name: str, n: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, Epilogue]:
    """(x, weights, residual or None, epilogue) of one entry of EPILOGUES over ``n`` images."""
    rng = np.random.default_rng(7)
    opts = dict(EPILOGUES[name])
    x, wt = rand(rng, (n, 24, 9, 10)), rand(rng, (20, 24, 3, 3))
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
        res = rand(rng, (n, 20, 9, 10))
    elif opts.get("residual") == "int32":
        res = rand(rng, (n, 20, 9, 10), -400, 400, np.int32)  # beyond int8: only an int32 residual holds it
    return x, wt, res, epilogue(opts)


@pytest.mark.parametrize("cfg", ["pynq", "block8"])
@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_epilogue_options(devices, cache, cfg, name):
    x, wt, res, ep = epilogue_case(name)
    layer = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, config=cfg, vthreads=2, cache=cache)
    out = layer.run(devices[cfg], x, residual=res).out
    ref = conv2d_oracle(x, wt, layer.spec, ep, res)
    np.testing.assert_array_equal(out, ref)
    assert len(np.unique(out)) > 10  # the epilogue keeps a spread of values, not one saturated constant
    if name == "multiplier-power-of-two":
        assert layer.epilogue.multiplier == "none" and layer.epilogue.shift == 10


RESIDUAL_EPILOGUES = {  # each adds an int8 residual after the requantizing pass, before the mirror's clamp
    "shift": {"shift": 9},  # RSHR, then the add
    "bias-relu": {"bias": True, "shift": 10, "relu": True},
    "per-channel-relu": {"bias": True, "multiplier": "per-channel", "shift": 14, "relu": True},  # MUL row
    "power-of-two": {"bias": True, "multiplier": 1 << 30, "shift": 40},  # shift-only after power_of_two_shift
    "multiplier-imm": {"multiplier": 3, "small": True},  # MUL imm, no shift (small data: no saturation)
    "clip": {"shift": 8, "clip": (-20, 45)},  # the mirror cannot clamp: a CLIP pass after the add
}
# several tiles, reduction steps, threads and both tile orders on a (2, 24, 9, 10) input, 20 output channels
RESIDUAL_SCHEDULES = [(2, 9, 10, 2, 1, "oc"), (1, 3, 5, 1, 2, "oc"), (1, 4, 10, 2, 3, "spatial"), (2, 2, 5, 1, 4, "oc")]


def residual_case(name: str, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray, Epilogue]:
    """(x, weights, residual, epilogue) of one entry of RESIDUAL_EPILOGUES (an int8 residual added)."""
    rng = np.random.default_rng(seed)
    opts = dict(RESIDUAL_EPILOGUES[name])
    lim = 3 if opts.pop("small", False) else 128
    x, wt, res = rand(rng, (2, 24, 9, 10), -lim, lim), rand(rng, (20, 24, 3, 3), -lim, lim), rand(rng, (2, 20, 9, 10))
    if opts.pop("bias", False):
        opts["bias"] = rng.integers(-100000, 100000, 20)
    if opts.get("multiplier") == "per-channel":
        opts["multiplier"] = rng.integers(-300, 300, 20)
    return x, wt, res, epilogue({**opts, "residual": "int8"})


def residual_ops(layer) -> dict[str, int]:
    """How the program adds the residual: LOADs of it into INP and ACC, ALU ADDs, identity GEMMs, LOADs of
    the identity block."""
    from vdla.isa import AluInsn, AluOp, GemmInsn, MemInsn, MemType

    prog = layer.program()
    loads = [i for i in prog if isinstance(i, MemInsn) and not i.store]
    eye = layer.lowering.eye
    return {
        "inp": sum(i.mem_type == MemType.INP for i in loads),
        "acc8": sum(i.mem_type == MemType.ACC_8BIT for i in loads),
        "add": sum(isinstance(i, AluInsn) and i.alu_opcode == AluOp.ADD for i in prog),
        "gemm": sum(isinstance(i, GemmInsn) and not i.init for i in prog),
        "eye": sum(i.mem_type == MemType.WGT and i.sram_base == eye and i.x_size == 1 for i in loads),
    }


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("res_inp", [True, False], ids=["gemm", "alu"])
@pytest.mark.parametrize("name", sorted(RESIDUAL_EPILOGUES))
def test_residual_in_both_forms(devices, cfg, res_inp, name):
    """An int8 residual added by the identity GEMM from INP (res_inp) or by an ALU ADD from the accumulators,
    bit-exact on 1-4 threads with several tiles and reduction steps."""
    runs = list(_each_residual_schedule(devices, cfg, res_inp, residual_case(name)))
    for layer, _ in runs:
        ops = residual_ops(layer)
        assert (ops["acc8"] == 0 and ops["add"] == 0 and ops["eye"] == 1) if res_inp else ops["acc8"] > 0
        tic = layer.schedule.tic
        assert (ops["gemm"] > 0) == (res_inp or tic < layer.lowering.ib)  # the identity's, or later steps
    assert len(np.unique(runs[-1][1])) > 10


def _each_residual_schedule(devices, cfg: str, res_inp: bool, case: tuple):
    """Each of RESIDUAL_SCHEDULES with ``res_inp``: the layer of ``case`` (x, weights, residual, epilogue)
    compiled with it and its output, checked bit for bit against the oracle."""
    from vdla.compiler import Schedule

    x, wt, res, ep = case
    for toc, toh, tow, tic, vt, order in RESIDUAL_SCHEDULES:
        s = Schedule(toc, toh, tow, tic, vt, order, res_inp)
        layer = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, config=cfg, schedule=s)
        out = layer.run(devices[cfg], x, residual=res).out
        np.testing.assert_array_equal(out, conv2d_oracle(x, wt, layer.spec, ep, res), err_msg=s.describe())
        yield layer, out


@pytest.mark.parametrize("cfg", ["pynq", "block8"])
@pytest.mark.parametrize("res_inp", [True, False], ids=["inp", "acc"])
@pytest.mark.parametrize("name", ["rescaled-residual", "rescaled-residual-clip"])
def test_rescaled_residual_in_both_forms(devices, cfg, res_inp, name):
    """A rescaled int8 residual brought through INP on the load stage (res_inp: an init GEMM against the identity
    block copies it into the accumulators) or LOADed into them on the compute stage, then multiplied and added on
    the ALU: bit-exact on 1-4 threads with several tiles and reduction steps."""
    runs = list(_each_residual_schedule(devices, cfg, res_inp, epilogue_case(name, n=2)))
    for layer, _ in runs:
        ops = residual_ops(layer)
        assert (ops["acc8"] == 0 and ops["inp"] > 0) if res_inp else ops["acc8"] > 0
        assert ops["add"] > 0  # the rescaled residual is added on the ALU either way
    assert len(np.unique(runs[-1][1])) > 10


def test_rescaled_residual_through_inp_on_rtl(rtl_library):
    """The rescaled residual's INP form on the RTL: bit-exact, and equal to the simulator."""
    from vdla.compiler import Schedule

    x, wt, res, ep = epilogue_case("rescaled-residual-clip", n=2)
    for s in (Schedule(1, 3, 5, 1, 2, res_inp=True), Schedule(2, 9, 10, 2, 1, res_inp=True)):
        layer = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, schedule=s)
        rtl = layer.run(Device("pynq", backend="rtl"), x, residual=res)
        np.testing.assert_array_equal(rtl.out, conv2d_oracle(x, wt, layer.spec, ep, res))
        np.testing.assert_array_equal(rtl.out, layer.run(Device("pynq"), x, residual=res).out)


@pytest.mark.parametrize("name", ["per-channel-relu", "power-of-two", "clip"])
def test_residual_gemm_on_rtl(rtl_library, name):
    """The identity GEMM after an ALU pass (MUL, RSHR) and before a CLIP, on the RTL: bit-exact, and equal to
    the simulator."""
    from vdla.compiler import Schedule

    x, wt, res, ep = residual_case(name, seed=8)
    for s in (Schedule(1, 3, 5, 1, 2, res_inp=True), Schedule(2, 9, 10, 2, 1, res_inp=True)):
        layer = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, schedule=s)
        rtl = layer.run(Device("pynq", backend="rtl"), x, residual=res)
        sim = layer.run(Device("pynq"), x, residual=res)
        np.testing.assert_array_equal(rtl.out, conv2d_oracle(x, wt, layer.spec, ep, res))
        np.testing.assert_array_equal(rtl.out, sim.out)


def test_search_adds_the_residual_by_the_identity_gemm_where_it_is_faster(devices, cache):
    """A per-channel layer with a ReLU and a residual (ResNet's second convolution of a block): the search picks
    the INP residual; the same tiling with the residual on the ALU takes over 2 more cycles per element."""
    from dataclasses import replace

    from vdla.compiler.epilogue_passes import cycles_per_element
    from vdla.config import load_config

    rng = np.random.default_rng(1)
    x, wt, res = rand(rng, (1, 64, 14, 14)), rand(rng, (64, 64, 3, 3)), rand(rng, (1, 64, 14, 14))
    ep = Epilogue(multiplier=rng.integers(1 << 20, 1 << 21, 64), shift=30, residual="int8", clip=(0, 127))
    gemm = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, cache=cache)
    assert gemm.schedule.res_inp
    alu = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, schedule=replace(gemm.schedule, res_inp=False))
    runs = [layer.run(devices["pynq"], x, residual=res) for layer in (gemm, alu)]
    ref = conv2d_oracle(x, wt, gemm.spec, ep, res)
    for run in runs:
        np.testing.assert_array_equal(run.out, ref)
    assert runs[1].counters.cycles - runs[0].counters.cycles > 2 * 4 * 14 * 14
    timing = load_config("pynq").timing
    # the MUL of a held row is pipelined (1 a row), then the GEMM (1) or the ADD of a second operand (alu_ii)
    assert cycles_per_element(gemm.epilogue, timing, residual_gemm=True) == 1 + 1
    assert cycles_per_element(gemm.epilogue, timing) == 1 + timing.alu_ii


def test_a_tile_whose_inp_share_cannot_hold_the_residual_falls_back():
    """With the residual in INP a tile needs its input windows and its residual in the INP share: a tiling whose
    windows fill the share keeps the residual in the accumulators (an explicit res_inp schedule names the limit),
    and the search offers both forms with the most rows each fits."""
    from vdla.compiler import CompileError, Schedule
    from vdla.compiler.tiling import candidate_tiles

    rng = np.random.default_rng(2)
    x, wt, res = rand(rng, (1, 64, 14, 14)), rand(rng, (64, 64, 3, 3)), rand(rng, (1, 64, 14, 14))
    ep = Epilogue(shift=12, residual="int8")
    with pytest.raises(CompileError, match="does not fit: INP needs 1416 elements per thread, the share holds 1024"):
        compile_conv2d(x.shape, wt, padding=1, epilogue=ep, schedule=Schedule(2, 14, 14, 4, 2, res_inp=True))
    layer = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, schedule=Schedule(2, 14, 14, 4, 2))
    assert layer.lowering.inputs_resident(layer.schedule) is False and residual_ops(layer)["acc8"] > 0
    out = layer.run(Device("pynq"), x, residual=res).out
    np.testing.assert_array_equal(out, conv2d_oracle(x, wt, layer.spec, ep, res))
    rows = {s.res_inp: s.toh for s in candidate_tiles(layer.lowering, 2) if (s.toc, s.tow, s.tic) == (2, 14, 4)}
    assert rows[False] == 14 and rows[True] < 14


@pytest.mark.parametrize("cfg", CONFIGS)
def test_dense_bit_exact(devices, cache, cfg):
    rng = np.random.default_rng(3)
    x, wt = rand(rng, (37, 70)), rand(rng, (45, 70))
    b, res = rng.integers(-20000, 20000, 45), rand(rng, (37, 45))
    ep = Epilogue(bias=b, shift=9, residual="int8")
    layer = compile_dense(37, wt, epilogue=ep, config=cfg, cache=cache)
    out = layer.run(devices[cfg], x, residual=res).out
    np.testing.assert_array_equal(out, dense_oracle(x, wt, ep, res))


def test_resnet_c1_with_padded_channels_is_exact(devices, cache):
    """C1 (224x224, 3 input channels padded to 16, 7x7 stride 2): the layer the VDLA paper left on the CPU."""
    case = layer_case("C1", layer_specs()["C1"])
    assert case.spec.pad == (3, 3, 3, 3) and (case.spec.sh, case.spec.sw) == (2, 2)
    layer = case.compile("pynq", cache=cache)
    run = layer.run(devices["pynq"], case.x)
    np.testing.assert_array_equal(run.out, case.oracle((0, 127)))
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
    ep = Epilogue(shift=7)
    layer = compile_conv2d(x.shape, wt, stride=stride, padding=pad, epilogue=ep, config=cfg, vthreads=2, cache=cache)
    out = layer.run(devices[cfg], x).out
    np.testing.assert_array_equal(out, conv2d_oracle(x, wt, layer.spec, ep))


# one-column kernels with a column stride (ResNet's downsample convolutions and a padded 3x1): (input, output
# channels, kernel, stride, padding, schedules (toc, toh, tow, tic, vthreads, order) with ragged edge tiles and
# steps, loaded by rows and by columns)
SUBSAMPLED = {
    "1x1-odd": (
        (2, 40, 15, 13),
        36,
        (1, 1),
        (2, 2),
        (0, 0, 0, 0),
        [(2, 3, 4, 1, 1, "oc"), (1, 5, 2, 2, 2, "oc"), (3, 8, 3, 3, 3, "spatial"), (3, 8, 7, 3, 1, "oc")],
    ),
    "1x1-full-height": (
        (1, 48, 14, 11),
        20,
        (1, 1),
        (2, 3),
        (0, 0, 0, 0),
        [(2, 7, 2, 3, 2, "oc"), (1, 7, 1, 2, 1, "oc"), (2, 2, 4, 2, 2, "oc")],
    ),
    "3x1-padded": ((1, 33, 13, 9), 24, (3, 1), (1, 2), (1, 1, 0, 0), [(2, 4, 3, 2, 2, "oc"), (1, 13, 5, 3, 1, "oc")]),
}


def subsampled_layer(name: str, sched: tuple, cfg: str = "pynq", seed: int = 12):
    """(layer, input, reference output) of a SUBSAMPLED case under one explicit schedule."""
    from vdla.compiler import Schedule

    shape, oc, kernel, stride, pad, _ = SUBSAMPLED[name]
    rng = np.random.default_rng(seed)
    x, wt = rand(rng, shape), rand(rng, (oc, shape[1], *kernel))
    ep = Epilogue(shift=8)
    layer = compile_conv2d(x.shape, wt, stride=stride, padding=pad, epilogue=ep, config=cfg, schedule=Schedule(*sched))
    return layer, x, conv2d_oracle(x, wt, layer.spec, ep)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("name", sorted(SUBSAMPLED))
def test_column_subsampled_windows_load_only_the_columns_they_read(devices, cfg, name):
    """A one-column kernel with a column stride reads every ``sw``-th input column only: single-element LOADs
    (``x`` = 1) along a row (``sw`` apart) or down a column (``sh*W`` apart, crossing channel blocks in a
    full-height window), a dense INP window; bit-exact with ragged tiles and steps, padded rows, odd widths.
    One output-channel tile loads every used input element once: exactly those bytes."""
    from vdla.isa import MemInsn, MemType

    layouts = set()
    for sched in SUBSAMPLED[name][-1]:
        layer, x, ref = subsampled_layer(name, sched, cfg)
        low, s, sp = layer.lowering, layer.schedule, layer.spec
        run = layer.run(devices[cfg], x)
        np.testing.assert_array_equal(run.out, ref, err_msg=s.describe())
        assert low.col_step == sp.sw and low.in_cols(s.tow) == s.tow
        layouts.add(low.by_columns(s))
        loads = [i for i in layer.program() if isinstance(i, MemInsn) and i.mem_type == MemType.INP]
        assert loads and all(i.x_size == 1 and i.x_stride in (sp.sw, low.row_step * sp.w) for i in loads)
        if s.toc >= low.ob and sp.kh == 1:
            used = low.ng * low.ib * sp.oh * sp.ow * low.cfg.inp_elem_bytes
            assert run.counters.bytes_loaded["INP"] == used
        if low.by_columns(s) and s.toh == sp.oh and sp.oh * sp.sh == sp.h and not any(sp.pad):
            assert len(loads) == low.ng * s.tow * -(-sp.ow // s.tow) * len(low.steps(s))  # a LOAD per column
    assert layouts == ({True} if SUBSAMPLED[name][4][0] else {False, True})  # padded rows: by columns


def test_column_subsampled_windows_on_rtl(rtl_library):
    """Single-element LOADs by rows, by columns across channel blocks and with padded rows on the RTL: bit-exact
    and equal to the simulator; a LOAD of ``y`` single elements takes the same cycles on both (each element its
    own burst: setup, read latency, then 2 beats and a burst gap per element)."""
    from vdla.isa import MemType, Stage

    rtl, sim = Device("pynq", backend="rtl"), Device("pynq")
    for name, sched in (
        ("1x1-odd", (2, 3, 4, 1, 1, "oc")),
        ("1x1-full-height", (2, 7, 2, 3, 2, "oc")),
        ("3x1-padded", (2, 4, 3, 2, 2, "oc")),
    ):
        layer, x, ref = subsampled_layer(name, sched)
        on_rtl, on_sim = layer.run(rtl, x), layer.run(sim, x)
        np.testing.assert_array_equal(on_rtl.out, ref)
        np.testing.assert_array_equal(on_rtl.out, on_sim.out)
    cycles = []
    for dev in (rtl, sim):
        a = dev.array(np.zeros((256, 16), np.int8))
        cmd = dev.commands()
        for y, stride in ((64, 2), (7, 22), (1, 2)):
            cmd.load(MemType.INP, 0, a, 1, y, 1, stride)
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        cycles.append(cmd.synchronize().counters.cycles)
    assert cycles[0] == cycles[1] > 3 * (64 + 7 + 1)


@pytest.mark.parametrize("relu", [False, True])
def test_bias_shift_clip_epilogue_costs_no_alu_pass(devices, cache, relu):
    """Bias + rounding shift + int8/ReLU clip: the first GEMM of each tile starts the accumulators from their
    bias rows (``init``, EPI bias_base) and the OUT mirror requantizes (EPI req): no ALU instruction at all."""
    from vdla.compiler.epilogue_passes import cycles_per_element
    from vdla.config import load_config
    from vdla.isa import AluInsn, EpiInsn, GemmInsn

    rng = np.random.default_rng(5)
    x, wt, b = rand(rng, (1, 40, 7, 9)), rand(rng, (36, 40, 3, 3)), rng.integers(-300000, 300000, 36)
    ep = Epilogue(bias=b, shift=11, clip=(0, 127) if relu else (-128, 127))
    layer = compile_conv2d(x.shape, wt, padding=1, epilogue=ep, vthreads=2, cache=cache)
    out = layer.run(devices["pynq"], x).out
    np.testing.assert_array_equal(out, conv2d_oracle(x, wt, layer.spec, ep))
    prog = layer.program()
    assert not any(isinstance(i, AluInsn) for i in prog)
    epis = [i for i in prog if isinstance(i, EpiInsn)]
    assert epis and all(i.req and i.bias and i.shift == 11 and i.relu == relu for i in epis)
    gemms = [i for i in prog if isinstance(i, GemmInsn)]
    assert not any(i.reset for i in gemms) and sum(i.init for i in gemms) == len(epis)
    assert cycles_per_element(layer.epilogue, load_config("pynq").timing) == 0


@pytest.mark.parametrize("out_mul", [True, False], ids=["out_mul", "alu_mul"])
def test_multiplier_rows_with_and_without_bias(out_mul, cache):
    """Multiplier rows are applied by the OUT mirror (EPI mul: no ALU instruction), or without the OUT-path
    multiplier by one MUL pass; with a bias or without, the layer is exact."""
    from vdla.isa import AluInsn, AluOp, EpiInsn, GemmInsn

    cfg = FULL if out_mul else replace(FULL, name="no_out_mul", out_multiplier=False)
    rng = np.random.default_rng(6)
    x, wt, m = rand(rng, (1, 20, 6, 6)), rand(rng, (18, 20, 1, 1)), rng.integers(-300, 300, 18)
    for bias in (None, rng.integers(-5000, 5000, 18)):
        ep = Epilogue(bias=bias, multiplier=m, shift=13, clip=(0, 127))
        layer = compile_conv2d(x.shape, wt, epilogue=ep, cache=cache, config=cfg)
        out = layer.run(Device(cfg), x).out
        ref = conv2d_oracle(x, wt, layer.spec, ep)
        np.testing.assert_array_equal(out, ref)
        prog = layer.program()
        assert {i.alu_opcode for i in prog if isinstance(i, AluInsn)} == (set() if out_mul else {AluOp.MUL})
        assert all(i.bias == (bias is not None) and i.mul == out_mul for i in prog if isinstance(i, EpiInsn))
        assert not any(isinstance(i, GemmInsn) and i.reset for i in prog)


def _zero_block_case(cfg: str, seed: int):
    """A 3x3 layer (40 -> 36 channels) whose weights are zero in random (output block, input block, tap) blocks
    and in every block of one output-channel block, and the same layer with no zero weight."""
    rng = np.random.default_rng(seed)
    c = load_config(cfg)
    x = rand(rng, (1, 40, 9, 11))
    w = rand(rng, (36, 40, 3, 3), -20, 20)
    w[w == 0] = 1
    dense = w.copy()
    ob, ib = -(-36 // c.block_out), -(-40 // c.block_in)
    zero = rng.random((ob, ib, 9)) < 0.4
    zero[ob - 1] = True  # an output block with no weight at all: the init GEMM still writes its bias
    for o, i, t in zip(*np.nonzero(zero), strict=True):
        w[o * c.block_out : (o + 1) * c.block_out, i * c.block_in : (i + 1) * c.block_in, t // 3, t % 3] = 0
    ep = Epilogue(rand(rng, 36, -3000, 3000, np.int32), rand(rng, 36, 1 << 8, 1 << 10, np.int32), 14)
    return x, w, dense, ep


@pytest.mark.parametrize("cfg", ["pynq", "block8"])
def test_the_gemms_skip_weight_blocks_that_are_all_zero(devices, cache, cfg):
    """The micro-ops of all-zero weight blocks are left out (a row-paired layer's halves that never meet): bit-exact,
    in fewer GEMM iterations than the same schedule with every block nonzero."""
    x, w, dense, ep = _zero_block_case(cfg, seed=3)
    layer = compile_conv2d(x.shape, w, padding=1, epilogue=ep, config=cfg, cache=cache)
    full = compile_conv2d(x.shape, dense, padding=1, epilogue=ep, config=cfg, schedule=layer.schedule)
    assert layer.lowering.zero is not None and full.lowering.zero is None
    run, ref = layer.run(devices[cfg], x), full.run(devices[cfg], x)
    np.testing.assert_array_equal(run.out, conv2d_oracle(x, w, layer.spec, ep))
    assert run.counters.gemm_iters < ref.counters.gemm_iters


def test_zero_weight_blocks_skipped_on_rtl(rtl_library):
    """The shortened micro-kernels on the RTL: bit-exact, and equal to the simulator."""
    x, w, _, ep = _zero_block_case("pynq", seed=5)
    layer = compile_conv2d(x.shape, w, padding=1, epilogue=ep)
    rtl = layer.run(Device("pynq", backend="rtl"), x)
    np.testing.assert_array_equal(rtl.out, conv2d_oracle(x, w, layer.spec, ep))
    np.testing.assert_array_equal(rtl.out, layer.run(Device("pynq"), x).out)
