"""A depthwise layer fused with the 1x1 convolution reading it (vdla.compiler.dw_pointwise): the depthwise output
stays on chip and the pointwise GEMM reads it from OUT (EPI src_out); with the 1x1 expand layer before it fused too
(an inverted residual block), the depthwise windows are computed on chip as well and read from OUT. Bit-exact with
numpy on the simulator and the RTL, in a model equal to the layers run apart, and the pairs and blocks it cannot
take refused with the reason.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from full_units import FULL

from vdla.compiler import CompileError
from vdla.compiler.dw_pointwise import (
    FusedSchedule,
    compile_dw_pointwise,
    dw_pointwise_oracle,
    dw_pointwise_refusal,
)
from vdla.graph.epilogue import Epilogue
from vdla.isa import AluInsn, AluOp, EpiInsn, GemmInsn
from vdla.runtime import Device

# the depthwise mode's compiles are for the build that has it (full_units.FULL): the pynq build leaves it out
compile_dw_pointwise = partial(compile_dw_pointwise, config=FULL)


def pair(seed: int, shape, k: int, oc: int):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    dw_w = rng.integers(-128, 128, (c, 1, k, k), dtype=np.int8)
    pw_w = rng.integers(-128, 128, (oc, c, 1, 1), dtype=np.int8)
    return rng, x, dw_w, pw_w


def epilogues(rng, c: int, oc: int, kind: str) -> tuple[Epilogue, Epilogue]:
    """(depthwise, pointwise) epilogues: per-channel requantization with ReLU6-like clamps, or one layer's table,
    a scalar multiplier, a shift alone, an int8 residual."""
    bias = rng.integers(-(1 << 14), 1 << 14, c)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    dw = Epilogue(bias=bias, multiplier=rng.integers(1 << 14, 1 << 15, c), shift=24, clip=(0, 96))
    if kind == "dw-table":
        dw = Epilogue(bias=bias, shift=9, clip=(0, 127), table=table)
    if kind == "dw-shift":
        dw = Epilogue(bias=bias, shift=10)
    pb = rng.integers(-(1 << 15), 1 << 15, oc)
    pw = Epilogue(bias=pb, multiplier=rng.integers(1 << 14, 1 << 15, oc), shift=26)
    if kind == "pw-table":  # the depthwise clamp then must not need the table
        dw = Epilogue(bias=bias, multiplier=rng.integers(1 << 14, 1 << 15, c), shift=24, clip=(0, 127))
        pw = Epilogue(bias=pb, shift=12, table=table)
    if kind == "scalar":
        pw = Epilogue(bias=pb, multiplier=23456, shift=27, clip=(-100, 100))
    if kind == "residual":
        pw = Epilogue(bias=pb, multiplier=rng.integers(1 << 14, 1 << 15, oc), shift=26, residual="int8")
    return dw, pw


CASES = [  # (input shape, k, stride, padding, output channels, epilogue kind)
    ((1, 32, 12, 12), 3, 1, 1, 24, "per-channel"),
    ((1, 48, 13, 13), 3, 2, 1, 32, "residual"),
    ((1, 40, 9, 10), 5, 1, 2, 20, "dw-table"),
    ((1, 24, 11, 11), 5, 2, 2, 40, "pw-table"),
    ((1, 64, 7, 7), 3, 1, 1, 48, "scalar"),
    ((1, 16, 8, 8), 3, 1, 0, 16, "dw-shift"),
    ((1, 512, 4, 4), 3, 1, 1, 512, "per-channel"),  # the 1x1 weights do not all fit WGT: loaded per step
]


@pytest.mark.parametrize("shape,k,stride,padding,oc,kind", CASES, ids=str)
def test_fused_pairs_on_the_simulator(shape, k, stride, padding, oc, kind):
    rng, x, dw_w, pw_w = pair(shape[1] + oc + k, shape, k, oc)
    dw_ep, pw_ep = epilogues(rng, shape[1], oc, kind)
    fused = compile_dw_pointwise(
        shape, dw_w, pw_w, stride=stride, padding=padding, dw_epilogue=dw_ep, pw_epilogue=pw_ep
    )
    n, _, oh, ow = fused.spec.out_shape
    res = rng.integers(-128, 128, (n, oc, oh, ow), dtype=np.int8) if kind == "residual" else None
    run = fused.run(Device(FULL), x, res)
    np.testing.assert_array_equal(run.out, dw_pointwise_oracle(x, dw_w, fused.spec, dw_ep, pw_w, pw_ep, res))
    assert fused.lowering.wgt_shared == (shape[1] < 512)


@pytest.mark.parametrize("res_inp", [False, True], ids=["residual_in_acc", "residual_in_inp"])
def test_both_residual_forms(res_inp):
    """The residual added on the ALU from ACC, or by the identity GEMM from INP (after an EPI that reads INP
    again): the same output."""
    shape, k, oc = (1, 48, 10, 10), 3, 32
    rng, x, dw_w, pw_w = pair(9, shape, k, oc)
    dw_ep, pw_ep = epilogues(rng, shape[1], oc, "residual")
    fused = compile_dw_pointwise(
        shape, dw_w, pw_w, padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep, schedule=FusedSchedule(4, 2, 2, res_inp)
    )
    res = rng.integers(-128, 128, (1, oc, 10, 10), dtype=np.int8)
    run = fused.run(Device(FULL), x, res)
    np.testing.assert_array_equal(run.out, dw_pointwise_oracle(x, dw_w, fused.spec, dw_ep, pw_w, pw_ep, res))
    adds = [i for i in fused.program() if isinstance(i, AluInsn) and i.alu_opcode == AluOp.ADD]
    assert (not adds) == res_inp  # the ALU adds no residual in the INP form


def test_a_rescaled_residual_stays_in_acc():
    """A rescaled residual (a QDQ model's add) is LOADed into the accumulators: the fused tile keeps no region of
    its own for a residual copied from INP, so no schedule brings it through INP, and the search's is exact."""
    from vdla.graph.epilogue import Rescale

    shape, k, oc = (1, 48, 10, 10), 3, 32
    rng, x, dw_w, pw_w = pair(9, shape, k, oc)
    dw_ep, pw_ep = epilogues(rng, shape[1], oc, "residual")
    pw_ep = Epilogue(
        bias=pw_ep.bias,
        multiplier=rng.integers(1 << 29, (1 << 31) - 1, oc),
        shift=42,
        residual="int8",
        rescale=Rescale((-120, 110), rng.integers(1 << 29, (1 << 31) - 1, oc), 13, 1 << 30, 13, 18),
    )
    options = dict(padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep)
    with pytest.raises(CompileError, match="res-inp adds an int8 residual as it is, the pointwise layer's is rescaled"):
        compile_dw_pointwise(shape, dw_w, pw_w, schedule=FusedSchedule(4, 2, 2, True), **options)
    fused = compile_dw_pointwise(shape, dw_w, pw_w, **options)
    assert not fused.schedule.res_inp
    res = rng.integers(-128, 128, (1, oc, 10, 10), dtype=np.int8)
    run = fused.run(Device(FULL), x, res)
    np.testing.assert_array_equal(run.out, dw_pointwise_oracle(x, dw_w, fused.spec, dw_ep, pw_w, pw_ep, res))


def test_the_pointwise_gemm_reads_out():
    """Every pointwise GEMM runs after an EPI with src_out, every depthwise GEMM after one without it."""
    shape, k, oc = (1, 48, 10, 10), 3, 32
    rng, x, dw_w, pw_w = pair(3, shape, k, oc)
    dw_ep, pw_ep = epilogues(rng, shape[1], oc, "per-channel")
    fused = compile_dw_pointwise(shape, dw_w, pw_w, padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep)
    epi, kinds = EpiInsn(), set()
    for insn in fused.program():
        if isinstance(insn, EpiInsn):
            epi = insn
        elif isinstance(insn, GemmInsn) and not insn.reset:
            kinds.add((epi.dw, epi.src_out))
    assert kinds == {(True, False), (False, True)}


@pytest.mark.parametrize("vthreads", [1, 2])
def test_fused_pair_on_the_rtl(rtl_library, vthreads):
    """The same program on both backends: equal outputs, equal to numpy, the GEMM iterations counted alike. (The
    cycles differ by 77 of about 2,000 here: the RTL's fetch unit shares the read channel with the LOADs while
    the program streams in, which the cycle model leaves out, docs/rtl.md; the depthwise layer's own note in
    tests/test_compiler_depthwise.py.)"""
    shape, k, oc = (1, 32, 9, 10), 3, 24
    rng, x, dw_w, pw_w = pair(11, shape, k, oc)
    dw_ep, pw_ep = epilogues(rng, shape[1], oc, "residual")
    fused = compile_dw_pointwise(
        shape, dw_w, pw_w, stride=2, padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep,
        schedule=FusedSchedule(2, 1, vthreads, res_inp=vthreads == 2),  # the residual in ACC, then in INP
    )  # fmt: skip
    res = rng.integers(-128, 128, (1, oc, 5, 5), dtype=np.int8)
    sim, rtl = (fused.run(Device(FULL, backend=b), x, res) for b in ("sim", "rtl"))
    np.testing.assert_array_equal(rtl.out, sim.out)
    np.testing.assert_array_equal(sim.out, dw_pointwise_oracle(x, dw_w, fused.spec, dw_ep, pw_w, pw_ep, res))
    assert rtl.counters.gemm_iters == sim.counters.gemm_iters
    assert abs(rtl.counters.cycles - sim.counters.cycles) <= 0.05 * sim.counters.cycles


def test_pairs_it_cannot_take_are_named():
    shape, k = (1, 32, 8, 8), 3
    rng, x, dw_w, pw_w = pair(5, shape, k, 16)
    dw_ep, pw_ep = epilogues(rng, 32, 16, "per-channel")
    table = np.arange(256).astype(np.uint8).view(np.int8)
    both = (Epilogue(shift=9, table=table), Epilogue(shift=9, table=table[::-1].copy()))
    assert "LUT holds one" in dw_pointwise_refusal(shape, dw_w, 1, 1, *both[:1], pw_w, both[1], FULL)
    wide = np.zeros((16, 32, 3, 3), np.int8)
    assert "(OC, 32, 1, 1)" in dw_pointwise_refusal(shape, dw_w, 1, 1, dw_ep, wide, pw_ep, FULL)
    with pytest.raises(CompileError, match="one output row needs"):
        compile_dw_pointwise((1, 16, 8, 2000), dw_w[:16], pw_w[:, :16], padding=1)


@pytest.mark.models  # a whole MobileNet compiled and run (40 s): make test-all and CI
def test_a_mobilenet_fuses_its_blocks_and_matches_onnxruntime():
    """MobileNet-V2 (width 0.35, 64x64, QDQ by onnxruntime): the builder fuses the pairs, and the expand layers
    before them, where that is faster than apart (here all 17 blocks, expand layers included), the outputs equal
    those of the layers apart and of onnxruntime running the QDQ model (graph optimizations off), and the
    accelerator takes fewer cycles."""
    pytest.importorskip("onnxruntime")
    from vdla.frontend.reference import reference_session
    from vdla.model import Module
    from vdla.model.pipeline import CompileOptions, compile_model
    from vdla.zoo.models import calibration_images, mobilenet_v2, qdq_output_scale, quantize_qdq

    model = quantize_qdq(mobilenet_v2(width=0.35, image=64, classes=10), calibration_images((3, 64, 64), 8, seed=1))
    x = calibration_images((3, 64, 64), 1, seed=7)
    runs = {}
    for fuse in (True, False):
        artifact, _ = compile_model(model, None, CompileOptions(fuse_depthwise=fuse, config=FULL))
        module = Module(artifact, "sim")
        ops = [s.layer["op"] for s in artifact.steps if s.kind == "accel"]
        fused = ops.count("depthwise_conv2d+conv2d") + ops.count("conv2d+depthwise_conv2d+conv2d")
        runs[fuse] = (module.run(x)["logits"], module.last_report.accel_cycles, fused)
        notes = [s.layer.get("note") for s in artifact.steps if s.kind == "accel" and "depthwise" in s.layer["op"]]
        assert not any(notes), notes  # nothing left apart, nothing to explain
    (fused, fused_cycles, blocks), (apart, apart_cycles, none) = runs[True], runs[False]
    assert blocks == 17 and none == 0
    np.testing.assert_array_equal(fused, apart)
    want = reference_session(model).run(["logits"], {"image": x})[0]
    scale = qdq_output_scale(model)
    assert np.abs(np.rint(fused / scale) - np.rint(want / scale)).max() <= 1  # a float32 rounding tie at most
    assert fused_cycles < apart_cycles


def test_the_chosen_schedules_are_cached(tmp_path, monkeypatch):
    """The fused pair's and the depthwise layer's choices go into the schedule cache (their cycles with them, for
    the model compiler's fused-or-apart decision); a second compile times nothing."""
    import json

    from vdla.compiler import ScheduleCache, search
    from vdla.compiler.depthwise import compile_depthwise

    shape, k, oc = (1, 32, 12, 12), 3, 24
    rng, x, dw_w, pw_w = pair(4, shape, k, oc)
    dw_ep, pw_ep = epilogues(rng, shape[1], oc, "per-channel")
    cache = ScheduleCache(tmp_path / "schedules.json")
    options = dict(padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep, cache=cache)
    first = compile_dw_pointwise(shape, dw_w, pw_w, **options)
    alone = compile_depthwise(shape, dw_w, padding=1, epilogue=dw_ep, cache=cache, config=FULL)
    keys = sorted(k.split(":")[3] for k in json.loads((tmp_path / "schedules.json").read_text()))
    assert keys == ["dw", "dwpw"]
    monkeypatch.setattr(search, "timed", lambda *a: pytest.fail("a cached choice was timed again"))
    again = compile_dw_pointwise(shape, dw_w, pw_w, **options)
    assert (again.schedule, again.search.cycles) == (first.schedule, first.search.cycles)
    assert (
        compile_depthwise(shape, dw_w, padding=1, epilogue=dw_ep, cache=cache, config=FULL).schedule == alone.schedule
    )


# ---- the expand layer fused too: the inverted residual block -------------------------------------------------


def block(seed: int, shape, e: int, k: int, oc: int, kind: str):
    """Input, weights and epilogues of an expand -> depthwise -> 1x1 block (``kind``: as :func:`epilogues`, and
    "ex-table": the expand layer's activation table, the others' clamps in the mirror)."""
    rng, x, dw_w, pw_w = pair(seed, (*shape[:1], e, *shape[2:]), k, oc)
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    ex_w = rng.integers(-128, 128, (e, shape[1], 1, 1), dtype=np.int8)
    dw_ep, pw_ep = epilogues(rng, e, oc, "pw-table" if kind == "ex-table" else kind)
    mult = rng.integers(1 << 14, 1 << 15, e)
    ex_ep = Epilogue(bias=rng.integers(-(1 << 15), 1 << 15, e), multiplier=mult, shift=27, clip=(0, 127))
    if kind == "ex-table":
        table = rng.integers(-128, 128, 256).astype(np.int8)
        ex_ep = Epilogue(bias=ex_ep.bias, multiplier=mult, shift=27, table=table)
        pw_ep = Epilogue(bias=pw_ep.bias, multiplier=rng.integers(1 << 14, 1 << 15, oc), shift=26)
    return rng, x, (ex_w, ex_ep), dw_w, dw_ep, pw_w, pw_ep


BLOCKS = [  # (input shape, expanded channels, k, stride, padding, output channels, epilogue kind)
    ((1, 16, 16, 16), 96, 3, 2, 1, 24, "per-channel"),  # MobileNet-V2's second block, smaller
    ((1, 24, 12, 12), 48, 3, 1, 1, 24, "residual"),  # two input channel blocks, the residual
    ((1, 8, 9, 9), 32, 5, 1, 2, 16, "dw-table"),
    ((1, 40, 7, 7), 240, 5, 2, 2, 80, "ex-table"),  # EfficientNet-like: three input blocks, the expand's table
    ((1, 16, 8, 8), 32, 3, 1, 0, 16, "dw-shift"),  # no border
    ((1, 64, 4, 4), 512, 3, 1, 1, 512, "per-channel"),  # the 1x1 weights do not all fit WGT: loaded per step
]


@pytest.mark.parametrize("shape,e,k,stride,padding,oc,kind", BLOCKS, ids=str)
def test_fused_blocks_on_the_simulator(shape, e, k, stride, padding, oc, kind):
    rng, x, expand, dw_w, dw_ep, pw_w, pw_ep = block(shape[1] + e + k, shape, e, k, oc, kind)
    fused = compile_dw_pointwise(
        shape, dw_w, pw_w, stride=stride, padding=padding, dw_epilogue=dw_ep, pw_epilogue=pw_ep, expand=expand
    )
    n, _, oh, ow = fused.spec.out_shape
    res = rng.integers(-128, 128, (n, oc, oh, ow), dtype=np.int8) if kind == "residual" else None
    run = fused.run(Device(FULL), x, res)
    want = dw_pointwise_oracle(x, dw_w, fused.spec, dw_ep, pw_w, pw_ep, res, expand=expand)
    np.testing.assert_array_equal(run.out, want)
    assert np.count_nonzero(want) > want.size // 4  # not a degenerate case
    assert fused.macs == fused.spec.macs + fused.pw_spec.macs + n * e * shape[1] * shape[2] * shape[3]


def test_the_block_reads_its_windows_from_out():
    """Per step: the border zeroed by ALU writes under a plain EPI, the expand GEMM with init (no window from
    INP), then the depthwise and the pointwise GEMMs both reading OUT."""
    shape, e, k, oc = (1, 16, 10, 10), 64, 3, 24
    rng, x, expand, dw_w, dw_ep, pw_w, pw_ep = block(2, shape, e, k, oc, "per-channel")
    fused = compile_dw_pointwise(shape, dw_w, pw_w, padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep, expand=expand)
    epi, kinds, zeroes = EpiInsn(), [], 0
    for insn in fused.program():
        if isinstance(insn, EpiInsn):
            epi = insn
        elif isinstance(insn, GemmInsn) and not insn.reset:
            kinds.append((epi.dw, epi.src_out, insn.init))
        elif isinstance(insn, AluInsn) and insn.reset:
            zeroes += 1
            assert not (epi.req or epi.lut or epi.mul) and insn.use_imm and insn.imm == 0
    firsts = {(False, False, True), (True, True, True), (False, True, True)}  # expand, depthwise, first pointwise
    assert firsts <= set(kinds) <= firsts | {(False, True, False)}  # a later step's pointwise GEMM adds
    assert zeroes > 0


@pytest.mark.parametrize("vthreads,split", [(1, False), (2, False), (2, True)], ids=["vt1", "vt2", "vt2-split"])
def test_fused_block_on_the_rtl(rtl_library, vthreads, split):
    """The block's program on both backends: equal outputs, equal to numpy, the GEMM iterations counted alike;
    bands dealt to the threads, or one band whose steps they take in turn (``split``)."""
    shape, e, k, oc = (1, 24, 9, 10), 48, 3, 24
    rng, x, expand, dw_w, dw_ep, pw_w, pw_ep = block(12, shape, e, k, oc, "residual")
    fused = compile_dw_pointwise(
        shape, dw_w, pw_w, stride=2, padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep, expand=expand,
        schedule=FusedSchedule(5 if split else 2, 1, vthreads, res_inp=vthreads == 2, split=split),
    )  # fmt: skip
    res = rng.integers(-128, 128, (1, oc, 5, 5), dtype=np.int8)
    sim, rtl = (fused.run(Device(FULL, backend=b), x, res) for b in ("sim", "rtl"))
    np.testing.assert_array_equal(rtl.out, sim.out)
    want = dw_pointwise_oracle(x, dw_w, fused.spec, dw_ep, pw_w, pw_ep, res, expand=expand)
    np.testing.assert_array_equal(sim.out, want)
    assert rtl.counters.gemm_iters == sim.counters.gemm_iters
    assert abs(rtl.counters.cycles - sim.counters.cycles) <= 0.05 * sim.counters.cycles


SPLITS = [  # (input shape, expanded channels (0: a pair), output channels, residual in INP)
    ((1, 96, 7, 7), 0, 48, False),
    ((1, 512, 4, 4), 0, 512, True),  # the 1x1 weights loaded per step, in each thread's share
    ((1, 32, 7, 7), 192, 32, True),
    ((1, 64, 4, 4), 512, 64, False),  # the expand weights resident, the 1x1 weights per step
]


@pytest.mark.parametrize("shape,e,oc,res_inp", SPLITS, ids=str)
def test_split_schedules_take_a_bands_steps_in_turn(shape, e, oc, res_inp):
    """One band whose steps the two threads take in turn (``split``), sharing its tile, residual and input rows:
    the same output as numpy, and fewer cycles than the band on one thread, whose loads wait for its compute."""
    if e:
        rng, x, expand, dw_w, dw_ep, pw_w, pw_ep = block(e + oc, shape, e, 3, oc, "residual")
    else:
        rng, x, dw_w, pw_w = pair(oc, shape, 3, oc)
        (dw_ep, pw_ep), expand = epilogues(rng, shape[1], oc, "residual"), None
    h, tic = shape[2], 2
    options = dict(padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep, expand=expand)
    split = compile_dw_pointwise(shape, dw_w, pw_w, schedule=FusedSchedule(h, tic, 2, res_inp, split=True), **options)
    one = compile_dw_pointwise(shape, dw_w, pw_w, schedule=FusedSchedule(h, tic, 1, res_inp), **options)
    assert [b.thread for b in split.stream.blocks[1:4]] == [0, 1, 0]  # after the prologue
    res = rng.integers(-128, 128, (1, oc, h, h), dtype=np.int8)
    run = split.run(Device(FULL), x, res)
    want = dw_pointwise_oracle(x, dw_w, split.spec, dw_ep, pw_w, pw_ep, res, expand=expand)
    np.testing.assert_array_equal(run.out, want)
    assert split.search.cycles < one.search.cycles


def test_split_needs_one_band():
    shape, e, k, oc = (1, 16, 12, 12), 64, 3, 24
    rng, x, expand, dw_w, dw_ep, pw_w, pw_ep = block(8, shape, e, k, oc, "per-channel")
    with pytest.raises(CompileError, match="split: one band of every output row"):
        compile_dw_pointwise(
            shape, dw_w, pw_w, padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep, expand=expand,
            schedule=FusedSchedule(6, 1, 2, split=True),
        )  # fmt: skip


def test_resident_weights_load_with_their_first_step():
    """Each step's depthwise, expand and 1x1 weights are loaded once, by the first band's block of that step, so the
    first compute waits for one step's weights: every weight element loaded exactly once, none by later bands."""
    from vdla.compiler.blocks import Load
    from vdla.isa import MemType

    shape, e, k, oc = (1, 16, 12, 12), 64, 3, 24
    rng, x, expand, dw_w, dw_ep, pw_w, pw_ep = block(8, shape, e, k, oc, "per-channel")
    fused = compile_dw_pointwise(
        shape, dw_w, pw_w, padding=1, dw_epilogue=dw_ep, pw_epilogue=pw_ep, expand=expand,
        schedule=FusedSchedule(4, 1, 2),
    )  # fmt: skip
    low, steps = fused.lowering, 4  # four channel blocks, one a step; three bands of four rows
    loaded: dict[str, list[int]] = {}
    for i, blk in enumerate(fused.stream.blocks):
        for ld in (ld for ld in blk.loads if isinstance(ld, Load) and ld.mem == MemType.WGT):
            assert i < steps * 2, f"block {i} (a later band's) loads weights"  # the first band's, both threads' in turn
            loaded.setdefault(ld.tensor, []).append(ld.y * ld.x)
    assert loaded == {"dwwgt": [low.dw.elements] * steps, "exwgt": [1] * steps, "wgt": [2] * steps}
    assert low.wgt_shared


def test_blocks_it_cannot_take_are_named():
    shape, e, k, oc = (1, 16, 8, 8), 32, 3, 16
    rng, x, (ex_w, ex_ep), dw_w, dw_ep, pw_w, pw_ep = block(6, shape, e, k, oc, "per-channel")
    cfg, table = FULL, np.arange(256).astype(np.uint8).view(np.int8)

    def why(expand, dw=dw_ep, pw=pw_ep):
        return dw_pointwise_refusal(shape, dw_w, 1, 1, dw, pw_w, pw, cfg, expand)

    assert why((ex_w, ex_ep)) is None
    tabled = Epilogue(bias=ex_ep.bias, shift=20, table=table)
    assert "LUT holds one" in why((ex_w, tabled), dw=Epilogue(shift=9, table=table[::-1].copy()))
    assert "ALU passes" in why((ex_w, Epilogue(residual="int8")))
    assert "(32, 16, 1, 1)" in why((np.zeros((32, 16, 3, 3), np.int8), ex_ep))
    with pytest.raises(CompileError, match="1x1 conv -> depthwise .* one output row needs"):
        compile_dw_pointwise((1, 16, 8, 900), dw_w, pw_w, padding=1, expand=(ex_w, ex_ep))


def test_the_step_table_says_why_a_layer_runs_apart():
    """An expand layer whose output another layer reads too stays apart from the pair after it, and the pair's note
    says so; with the pair fused, its depthwise layer has no note."""
    pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from qdq_check import onnx_model

    from vdla.model.pipeline import compile_model

    rng = np.random.default_rng(30)
    ws = {"we": (48, 16, 1, 1), "wd": (48, 1, 3, 3), "wp": (16, 48, 1, 1), "wo": (16, 48, 1, 1)}
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, sh).astype(np.float32), k) for k, sh in ws.items()]
    nodes = [
        helper.make_node("Conv", ["x", "we"], ["e0"]),
        helper.make_node("Relu", ["e0"], ["e"]),
        helper.make_node("Conv", ["e", "wd"], ["d0"], pads=[1] * 4, group=48),
        helper.make_node("Relu", ["d0"], ["d"]),
        helper.make_node("Conv", ["d", "wp"], ["p"]),
        helper.make_node("Conv", ["e", "wo"], ["o"]),  # a second reader of the expanded tensor
        helper.make_node("Add", ["p", "o"], ["y"]),
    ]
    model = onnx_model(nodes, inits, "apart", (1, 16, 12, 12), (1, 16, 12, 12))
    artifact = compile_model(model, rng.normal(0, 1, (8, 16, 12, 12)).astype(np.float32), config=FULL)[0]
    (pair,) = [s for s in artifact.steps if s.kind == "accel" and s.layer["op"] == "depthwise_conv2d+conv2d"]
    assert pair.layer["note"] == "the 1x1 layer before it not fused: the 1x1 layer's output is also read by conv2d"
