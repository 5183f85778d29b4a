"""A residual add after a layer's activation table, fused into the layer (``Fusions.post``): the tabled int8
results are read back from OUT by a GEMM against the identity block (EPI ``src_out``), the add's other operand
comes from DRAM, and the add's epilogue runs on chip. Checked against numpy (the layer's reference, its table,
then the add's epilogue), bit for bit, on the simulator and the RTL; bad input is refused by name."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from full_units import FULL

from vdla.compiler import CompileError, compile_conv2d
from vdla.compiler.spec import Fusions
from vdla.graph import oracle
from vdla.graph.epilogue import Epilogue, Rescale
from vdla.runtime.device import Device

# an add after the layer's activation reads the OUT rows as input rows (src_out): the build with it
compile_conv2d = partial(compile_conv2d, config=FULL)

RNG = np.random.default_rng(29)


def _layer(c: int, oc: int, k: int) -> tuple[np.ndarray, Epilogue]:
    w = RNG.integers(-20, 21, (oc, c, k, k)).astype(np.int8)
    ep = Epilogue(
        bias=RNG.integers(-500, 500, oc),
        multiplier=RNG.integers(1 << 29, 1 << 30, oc),
        shift=38,
        table=RNG.integers(-128, 128, 256).astype(np.int8),
    )
    return w, ep


def _add(oc: int, rescaled: bool) -> Epilogue:
    """The add's epilogue as :mod:`vdla.graph.copies` makes it: the identity conv's input times 1, plus the
    residual (rescaled: both terms at their own scale, the sum rounded once)."""
    if not rescaled:
        return Epilogue(multiplier=np.full(oc, 1 << 30), shift=30, residual="int8")
    r = Rescale((-128, 127), int(RNG.integers(1 << 29, 1 << 30)), 31, int(RNG.integers(1 << 29, 1 << 30)), 31, 2)
    return Epilogue(multiplier=np.full(oc, 1 << 30), shift=30, residual="int8", rescale=r, clip=(-128, 127))


def _reference(x, w, ep, spec, post, other, post_res):
    y = oracle.table(oracle.conv2d_oracle(x, w, spec, ep), ep.table)
    acc, res = (other, y) if post_res else (y, other)
    return oracle.epilogue(acc.astype(np.int32), post, res)


CASES = [
    # (C, OC, H, W, k, stride, rescaled, post_res)
    (16, 16, 10, 10, 3, 1, False, True),
    (32, 32, 8, 12, 3, 1, True, False),
    (16, 48, 6, 6, 1, 1, True, True),
    (32, 16, 12, 12, 3, 2, False, False),
]


@pytest.mark.parametrize("case", CASES, ids=[f"c{c[0]}o{c[1]}k{c[4]}s{c[5]}{'r' * c[6]}{'x' * c[7]}" for c in CASES])
def test_the_fused_add_equals_the_layer_then_the_add(case, backend):
    c, oc, h, wd, k, stride, rescaled, post_res = case
    w, ep = _layer(c, oc, k)
    post = _add(oc, rescaled)
    compiled = compile_conv2d(
        (1, c, h, wd), w, stride=stride, padding=k // 2, epilogue=ep, fusions=Fusions(post=post, post_res=post_res)
    )
    assert compiled.epilogue.post is not None and compiled.lowering.eye is not None
    x = RNG.integers(-128, 128, (1, c, h, wd)).astype(np.int8)
    other = RNG.integers(-128, 128, compiled.spec.out_shape).astype(np.int8)
    got = compiled.run(Device(compiled.cfg, backend=backend), x, other).out
    np.testing.assert_array_equal(got, _reference(x, w, ep, compiled.spec, post, other, post_res))


def test_every_schedule_form_of_a_tile_split_in_steps_and_threads():
    """Reduction steps (the GEMMs after the first follow an EPI of the layer's own mode, as another thread's add
    leaves src_out on) and several threads, on the simulator."""
    from vdla.compiler.schedule import Schedule

    c, oc = 64, 32
    w, ep = _layer(c, oc, 3)
    post = _add(oc, True)
    x = RNG.integers(-128, 128, (1, c, 8, 8)).astype(np.int8)
    for s in (Schedule(1, 4, 8, 1, 2), Schedule(2, 2, 4, 2, 3), Schedule(2, 8, 8, 4, 1)):
        compiled = compile_conv2d((1, c, 8, 8), w, padding=1, epilogue=ep, fusions=Fusions(post=post), schedule=s)
        other = RNG.integers(-128, 128, compiled.spec.out_shape).astype(np.int8)
        got = compiled.run(Device(compiled.cfg), x, other).out
        np.testing.assert_array_equal(got, _reference(x, w, ep, compiled.spec, post, other, False), err_msg=str(s))


def test_an_add_the_layer_cannot_take_is_refused_by_name():
    w, ep = _layer(16, 16, 3)
    with pytest.raises(CompileError, match="LUT holds one"):
        compile_conv2d(
            (1, 16, 8, 8), w, padding=1, epilogue=ep, fusions=Fusions(post=Epilogue(residual="int8", table=ep.table))
        )
    with pytest.raises(CompileError, match="int8 residual"):
        compile_conv2d((1, 16, 8, 8), w, padding=1, epilogue=ep, fusions=Fusions(post=Epilogue()))
    with pytest.raises(CompileError, match="needs a post add"):
        Fusions(post_res=True)
    res = Epilogue(bias=ep.bias, multiplier=ep.multiplier, shift=38, residual="int8", table=ep.table)
    with pytest.raises(CompileError, match="has a residual"):
        compile_conv2d((1, 16, 8, 8), w, padding=1, epilogue=res, fusions=Fusions(post=_add(16, False)))
    compiled = compile_conv2d((1, 16, 8, 8), w, padding=1, epilogue=ep, fusions=Fusions(post=_add(16, False)))
    with pytest.raises(CompileError, match="int8 residual of shape"):
        compiled.run(Device(compiled.cfg), np.zeros((1, 16, 8, 8), np.int8))


@pytest.mark.parametrize("half", [8, 16, 32], ids=["half_block", "one_block", "two_blocks"])
def test_a_bottleneck_add_after_silu_runs_in_its_layer(half, backend):
    """A YOLO C2f block (vdla's calibration): the bottleneck's residual add after SiLU, an identity convolution of
    its own (``vdla.graph.copies``), runs in the epilogue of the convolution whose tabled output it adds (that
    output its residual): one step fewer, the outputs bit for bit those of the two layers apart."""
    from qdq_check import accel_between
    from test_copies import SHAPE, _c2f

    from vdla.model import Module
    from vdla.model.pipeline import CompileOptions, compile_model

    model, calib = _c2f(half), RNG.normal(0, 1, (8, *SHAPE[1:])).astype(np.float32)
    fused = compile_model(model, calib, config=FULL)[0]
    apart = compile_model(model, calib, CompileOptions(fuse_adds=False, config=FULL))[0]
    steps = [accel_between(a) for a in (fused, apart)]
    assert len(steps[0]) == len(steps[1]) - 1
    (add,) = [s for s in steps[0] if s.layer["op"] == "conv2d+add"]
    assert add.layer["schedule"].startswith("residual add fused") and add.macs > 0
    assert "add" not in [s.layer.get("copy") for s in steps[0]]
    assert fused.accel_macs == apart.accel_macs == fused.total_macs
    for seed in range(2):
        x = np.random.default_rng(seed).normal(0, 1, SHAPE).astype(np.float32)
        np.testing.assert_array_equal(Module(fused, backend).run(x), Module(apart, backend).run(x))
