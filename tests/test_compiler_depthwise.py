"""The depthwise layer compiler (vdla.compiler.depthwise): tiles of channel blocks x output rows on the GEMM
core's depthwise mode with virtual threads, fused with bias, per-channel or scalar requantization, clamps and
the activation table; bit-exact against numpy (vdla.graph.oracle) on the simulator, and on the RTL with the
same cycles; the named errors of layers it cannot take."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from full_units import FULL

from vdla.compiler import CompileError, compile_conv2d
from vdla.compiler.depthwise import DepthwiseSchedule, compile_depthwise, depthwise_oracle
from vdla.compiler.search import emit_program
from vdla.graph.epilogue import Epilogue
from vdla.graph.oracle import conv2d_oracle
from vdla.isa import AluInsn, AluOp, EpiInsn
from vdla.runtime import Device

# the depthwise mode's compiles are for the build that has it (full_units.FULL): the pynq build leaves it out
compile_conv2d = partial(compile_conv2d, config=FULL)
compile_depthwise = partial(compile_depthwise, config=FULL)


def layer(seed: int, shape, k: int):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    w = rng.integers(-128, 128, (shape[1], 1, k, k), dtype=np.int8)
    bias = rng.integers(-(1 << 14), 1 << 14, shape[1])
    return x, w, bias


CASES = [  # (shape, k, stride, padding, epilogue kind)
    ((1, 32, 20, 20), 3, 1, 1, "relu6"),
    ((1, 48, 23, 23), 3, 2, 1, "per-channel"),
    ((1, 24, 14, 14), 5, 1, 2, "shift"),
    ((1, 40, 15, 17), 5, 2, 2, "clip"),
    ((1, 16, 7, 7), 3, 1, 1, "table"),
    ((1, 96, 112, 112), 3, 2, 1, "per-channel"),  # MobileNet-V2's third depthwise layer, in 4-row tiles
    ((1, 48, 12, 12), 3, 1, 0, "shift"),  # unpadded: a tile's channel blocks in one set of LOADs
    ((1, 20, 9, 11), 3, 2, 0, "per-channel"),
]


def epilogue(kind: str, c: int, bias: np.ndarray) -> Epilogue:
    rng = np.random.default_rng(c)
    if kind == "relu6":
        return Epilogue(bias=bias, multiplier=rng.integers(1 << 14, 1 << 15, c), shift=24, clip=(0, 96))
    if kind == "per-channel":
        return Epilogue(bias=bias, multiplier=rng.integers(1 << 14, 1 << 15, c), shift=25, clip=(0, 127))
    if kind == "shift":
        return Epilogue(bias=bias, shift=9)
    if kind == "clip":
        return Epilogue(bias=bias, shift=10, clip=(-20, 50))
    table = rng.integers(-128, 128, 256).astype(np.int8)
    return Epilogue(bias=bias, shift=9, clip=(0, 127), table=table)


@pytest.mark.parametrize("shape,k,stride,padding,kind", CASES, ids=str)
def test_depthwise_layers_on_the_simulator(shape, k, stride, padding, kind):
    x, w, bias = layer(shape[1] + k, shape, k)
    ep = epilogue(kind, shape[1], bias)
    layer_c = compile_depthwise(shape, w, stride=stride, padding=padding, epilogue=ep)
    run = layer_c.run(Device(FULL), x)
    np.testing.assert_array_equal(run.out, depthwise_oracle(x, w, layer_c.spec, ep))
    blocks = -(-shape[1] // 16)
    assert run.counters.gemm_iters == blocks * layer_c.spec.out_hw[0] * layer_c.spec.out_hw[1]


@pytest.mark.parametrize("vthreads", [1, 2])
def test_depthwise_layer_on_the_rtl(rtl_library, vthreads):
    """The same program on both backends: equal outputs, equal to numpy. (Their cycles differ by about 1.5%
    when a layer has several row tiles: the load stage's timing of successive window LOADs, which pooling
    layers share; the depthwise GEMMs themselves agree to the cycle, tests/test_depthwise_mode.py.)"""
    shape, k = (1, 32, 11, 12), 3
    x, w, bias = layer(7, shape, k)
    ep = epilogue("relu6", shape[1], bias)
    compiled = compile_depthwise(shape, w, stride=2, padding=1, epilogue=ep, schedule=DepthwiseSchedule(1, 3, vthreads))
    sim, rtl = (compiled.run(Device(FULL, backend=b), x) for b in ("sim", "rtl"))
    np.testing.assert_array_equal(rtl.out, sim.out)
    np.testing.assert_array_equal(sim.out, depthwise_oracle(x, w, compiled.spec, ep))
    assert rtl.counters.gemm_iters == sim.counters.gemm_iters == 2 * 6 * 6


def test_virtual_threads_are_searched():
    x, w, bias = layer(3, (1, 64, 28, 28), 3)
    compiled = compile_depthwise((1, 64, 28, 28), w, padding=1, epilogue=Epilogue(bias=bias, shift=8))
    assert compiled.search.candidates >= 2
    assert compiled.search.cycles == min(
        compile_depthwise(
            (1, 64, 28, 28), w, padding=1, epilogue=Epilogue(bias=bias, shift=8), schedule=s
        ).search.cycles
        for s in compiled.lowering.candidates()
    )


def test_layers_it_cannot_take_are_named():
    w = np.zeros((16, 1, 3, 3), np.int8)
    with pytest.raises(CompileError, match="residual add is not supported"):
        compile_depthwise((1, 16, 8, 8), w, epilogue=Epilogue(residual="int8"))
    with pytest.raises(CompileError, match="INP elements .* the buffers hold 2048 .* output columns wide fit"):
        compile_depthwise((1, 16, 4, 1000), w)
    with pytest.raises(CompileError, match="square kernels up to 5"):
        compile_depthwise((1, 16, 8, 8), np.zeros((16, 1, 7, 7), np.int8))
    with pytest.raises(CompileError, match="stride 4x4"):
        compile_depthwise((1, 16, 8, 8), np.zeros((16, 1, 5, 5), np.int8), stride=4)
    with pytest.raises(CompileError, match="no depthwise mode"):
        compile_depthwise((2, 16, 8, 8), w, config="batch2")


def _layers_with_multiplier_rows(cfg):
    x, w, bias = layer(3, (1, 16, 12, 12), 3)
    ep = epilogue("per-channel", 16, bias)
    dw = compile_depthwise(x.shape, w, padding=1, epilogue=ep, schedule=DepthwiseSchedule(1, 4, 1), config=cfg)
    wc = np.random.default_rng(4).integers(-30, 31, (32, 16, 3, 3)).astype(np.int8)
    ep_c = Epilogue(multiplier=np.arange(1, 33) << 14, shift=22)
    conv = compile_conv2d(x.shape, wc, padding=1, epilogue=ep_c, config=cfg)
    dev = Device(cfg)
    np.testing.assert_array_equal(dw.run(dev, x).out, depthwise_oracle(x, w, dw.spec, ep))
    np.testing.assert_array_equal(conv.run(dev, x).out, conv2d_oracle(x, wc, conv.spec, ep_c))
    return dev, (dw, conv)


def test_requantizing_muls_are_pipelined():
    """Without the OUT-path multiplier, a per-channel multiplier's MUL, in a depthwise layer and in a
    convolution, holds its row over the tile's pixels as the inner loop, so the command builder pipelines it
    (vdla.isa.pipe): one cycle a row. With one channel block a tile the depthwise layer's pixels are still the
    inner loop (its channel-block loop is pinned outer, even of extent 1), and the layers stay exact."""
    cfg = replace(FULL, name="pynq_no_out_mul", out_multiplier=False)
    dev, layers = _layers_with_multiplier_rows(cfg)
    for compiled in layers:
        muls = [i for i in emit_program(compiled.lowering, compiled.stream, dev) if isinstance(i, AluInsn)]
        muls = [i for i in muls if i.alu_opcode == AluOp.MUL]
        assert muls and all(i.pipe and i.iter_in > 1 for i in muls), muls
        assert not any(isinstance(i, EpiInsn) and i.mul for i in compiled.program())


def test_out_path_multiplier_replaces_the_muls():
    """With the OUT-path multiplier (``pynq``), the same layers run no ALU instruction: their GEMMs' EPI mul
    names the first multiplier row of each tile and the layer's shift, and they stay exact."""
    _, layers = _layers_with_multiplier_rows(FULL)
    for compiled in layers:
        prog = compiled.program()
        assert not any(isinstance(i, AluInsn) for i in prog)
        epis = [i for i in prog if isinstance(i, EpiInsn) and i.mul]
        assert epis and {i.mul_shift for i in epis} == {compiled.epilogue.shift}


# ---- a global average of the output fused into the tiles (squeeze-excite's pool) --------------------------

GAPS = [  # (shape, k, stride, the average's clip, the layer's clip)
    ((1, 48, 56, 56), 3, 1, (-128, 127), (-128, 127)),  # EfficientNet's second block: bands of rows
    ((2, 40, 9, 9), 5, 2, (-128, 127), (-128, 127)),  # two images (a row of sums each), 5x5 stride 2
    ((1, 96, 14, 14), 3, 1, (0, 127), (0, 127)),  # whole images: tiles of several channel blocks
    ((1, 24, 12, 12), 3, 2, (-20, 50), (-128, 127)),  # a clamp the EPI cannot apply: a CLIP pass
]


@pytest.mark.parametrize("shape,k,stride,clip,layer_clip", GAPS, ids=str)
def test_a_fused_global_average_equals_the_layer_then_the_pool(shape, k, stride, clip, layer_clip):
    """Each tile's int8 outputs summed into their blocks' accumulators by the identity GEMM reading OUT, the last
    band's sums requantized and stored: both outputs equal numpy's, in fewer cycles than the layer and the pool
    apart (which reads the output back from DRAM)."""
    from vdla.compiler.pool import PoolSpec, compile_pool, pool_oracle

    x, w, bias = layer(sum(shape) + k, shape, k)
    rng = np.random.default_rng(k)
    ep = Epilogue(bias=bias, multiplier=rng.integers(1 << 14, 1 << 15, shape[1]), shift=23, clip=layer_clip)
    alone = compile_depthwise(shape, w, stride=stride, padding=k // 2, epilogue=ep)
    oh, ow = alone.spec.out_hw
    gap = PoolSpec.global_avg((*shape[:2], oh, ow), 1 << 14, 14 + int(np.log2(oh * ow)), clip)
    fused = compile_depthwise(shape, w, stride=stride, padding=k // 2, epilogue=ep, gap=gap)
    run = fused.run(Device(FULL), x)
    want = depthwise_oracle(x, w, fused.spec, ep)
    np.testing.assert_array_equal(run.out, want)
    np.testing.assert_array_equal(run.extra["pool"], pool_oracle(want, gap))
    assert len(np.unique(run.extra["pool"])) > 4
    assert fused.search.cycles < alone.search.cycles + compile_pool(gap, config=FULL).search.cycles


def test_a_fused_global_average_on_the_rtl(rtl_library):
    from vdla.compiler.pool import PoolSpec, pool_oracle

    x, w, bias = layer(7, (1, 40, 10, 10), 3)
    ep = Epilogue(bias=bias, shift=9)
    gap = PoolSpec.global_avg((1, 40, 10, 10), 1 << 14, 21)
    fused = compile_depthwise(x.shape, w, padding=1, epilogue=ep, gap=gap, schedule=DepthwiseSchedule(1, 4, 2))
    sim, rtl = (fused.run(Device(FULL, backend=b), x) for b in ("sim", "rtl"))
    np.testing.assert_array_equal(rtl.out, sim.out)
    np.testing.assert_array_equal(rtl.extra["pool"], sim.extra["pool"])
    np.testing.assert_array_equal(sim.extra["pool"], pool_oracle(depthwise_oracle(x, w, fused.spec, ep), gap))
    assert abs(rtl.counters.cycles - sim.counters.cycles) <= 0.05 * sim.counters.cycles


def test_averages_it_cannot_fuse_are_named():
    from vdla.compiler.pool import PoolSpec

    x, w, bias = layer(3, (1, 32, 8, 8), 3)
    with pytest.raises(CompileError, match="is not a global average"):
        compile_depthwise(x.shape, w, padding=1, gap=PoolSpec.make((1, 32, 8, 8), 2, 2, 0, "avg"))
    with pytest.raises(CompileError, match=r"it averages \(1, 16, 8, 8\), the layer writes \(1, 32, 8, 8\)"):
        compile_depthwise(x.shape, w, padding=1, gap=PoolSpec.global_avg((1, 16, 8, 8), 1, 4))
