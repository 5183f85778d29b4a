"""A max pool fused into the convolution's tiles (issue 12, vdla.compiler.fused_pool): against numpy (the
convolution, its epilogue, then the pool) on the simulator over schedules that exercise the carry rows
(several row tiles, one to three threads, several reduction steps, split tails, batches), on the RTL (equal
data and cycles), the conditions that keep it exact, and the model compiler fusing ResNet's stem."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vdla.compiler import CompileError, compile_conv2d
from vdla.compiler.epilogue_passes import pool_commutes
from vdla.compiler.schedule import Schedule
from vdla.compiler.spec import Fusions
from vdla.graph import oracle
from vdla.graph.epilogue import Epilogue
from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate
from vdla.graph.types import TensorType
from vdla.graph.window import make_window
from vdla.isa import AluInsn, GemmInsn
from vdla.model import Module
from vdla.model.pipeline import compile_graph_model
from vdla.runtime import Device

RNG = np.random.default_rng(2026)


def _layer(shape, oc, k, per_channel=True):
    x = RNG.integers(-128, 128, shape, dtype=np.int8)
    w = RNG.integers(-128, 128, (oc, shape[1], k, k), dtype=np.int8)
    bias = RNG.integers(-20000, 20000, oc)
    if per_channel:
        ep = Epilogue(bias=bias, multiplier=RNG.integers(1 << 18, 1 << 21, oc), shift=31, clip=(0, 127))
    else:
        ep = Epilogue(bias=bias, shift=13, clip=(0, 127))
    return x, w, ep


def _want(x, w, ep, spec, pool):
    conv = oracle.conv2d_oracle(x, w, spec, ep)
    win = make_window("max_pool2d", conv.shape[2:], pool[0], pool[1], 1, pool[2])[0]
    return oracle.pool2d(conv, win, "max")


CASES = [  # input, out channels, kernel, conv stride/padding, pool, schedule (None: searched)
    ((1, 16, 16, 16), 32, 3, 1, 1, (3, 2, 1), None),
    ((1, 40, 12, 20), 24, 3, 1, 1, (3, 2, 1), Schedule(2, 4, 20, 1, 2)),  # three row tiles, two input steps
    ((1, 40, 12, 20), 24, 3, 1, 1, (3, 2, 1), Schedule(1, 2, 20, 1, 3)),  # three threads, ragged channels
    ((1, 32, 12, 12), 48, 3, 1, 1, (3, 2, 1), Schedule(3, 4, 12, 2, 1)),  # one thread: carry in its own share
    ((2, 16, 8, 8), 16, 1, 1, 0, (2, 2, 0), None),  # no carry rows, two images
    ((2, 16, 12, 8), 32, 3, 1, 1, (3, 2, 1), Schedule(2, 4, 8, 1, 2)),  # carry rows restart per image
    ((1, 48, 14, 14), 32, 3, 1, 1, (3, 2, 1), Schedule(2, 2, 14, 1, 2, "spatial")),
]


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("shape,oc,k,s,p,pool,schedule", CASES)
def test_fused_pool_matches_numpy_on_sim(shape, oc, k, s, p, pool, schedule, per_channel):
    x, w, ep = _layer(shape, oc, k, per_channel)
    c = compile_conv2d(shape, w, stride=s, padding=p, fusions=Fusions.max_pool(*pool), schedule=schedule, epilogue=ep)
    run = c.run(Device("pynq"), x)
    assert run.out.shape == (shape[0], oc, c.lowering.out_hw[0], c.lowering.out_hw[1])
    assert np.array_equal(run.out, _want(x, w, ep, c.spec, pool))


def test_resnet_stem_fused_on_sim():
    """ResNet-18's first convolution after im2col (147 -> 160 channels, 1x1 over 112x112) with its pool: the
    stored tensor is the pooled one and the carry rows cross many row tiles, threads and input steps."""
    shape = (1, 160, 112, 112)
    x, w, ep = _layer(shape, 64, 1)
    c = compile_conv2d(shape, w, fusions=Fusions.max_pool(3, 2, 1), epilogue=ep)
    run = c.run(Device("pynq"), x)
    assert np.array_equal(run.out, _want(x, w, ep, c.spec, (3, 2, 1)))
    assert c.lowering.tensor_bytes()["out"] == 64 * 56 * 56
    assert run.counters.bytes_stored == 64 * 56 * 56


def test_fused_pool_on_rtl(rtl_library):
    shape, pool = (1, 40, 12, 20), (3, 2, 1)
    x, w, ep = _layer(shape, 24, 3)
    c = compile_conv2d(
        shape, w, padding=1, fusions=Fusions.max_pool(*pool), schedule=Schedule(2, 4, 20, 1, 2), epilogue=ep
    )
    sim, rtl = (c.run(Device("pynq", backend=b), x, timeline=True) for b in ("sim", "rtl"))
    assert np.array_equal(rtl.out, _want(x, w, ep, c.spec, pool)) and np.array_equal(rtl.out, sim.out)
    # every compute instruction but the prologue's LOADs (which share the DRAM read channel with the load
    # stage, modelled to within 1%) takes equal cycles on both
    durations = [{e.index: e.end - e.start for e in r.result.timeline if e.stage == "compute"} for r in (sim, rtl)]
    alu_gemm = [i for i, insn in enumerate(c.program()) if isinstance(insn, AluInsn | GemmInsn)]
    assert len(alu_gemm) > 40 and all(durations[0][i] == durations[1][i] for i in alu_gemm)
    assert abs(rtl.counters.cycles - sim.counters.cycles) <= 0.01 * rtl.counters.cycles


def test_pool_fuses_only_where_exact():
    assert pool_commutes(np.array([0, 5, 1 << 31]), 31) is None
    assert "negative" in pool_commutes(np.array([3, -1]), 31)
    assert "wrap" in pool_commutes(np.array([3, 1 << 20]), 19)
    x, w, ep = _layer((1, 16, 8, 8), 16, 3)
    ep.multiplier[3] = -7
    with pytest.raises(CompileError, match="negative multiplier"):
        compile_conv2d(x.shape, w, padding=1, fusions=Fusions.max_pool(3, 2, 1), epilogue=ep)
    ep.multiplier[3] = 7
    with pytest.raises(CompileError, match="stride <= kernel < 2 x stride"):
        compile_conv2d(x.shape, w, padding=1, fusions=Fusions.max_pool(3, 1, 1), epilogue=ep)
    with pytest.raises(CompileError, match="padding before is kernel - stride"):
        compile_conv2d(x.shape, w, padding=1, fusions=Fusions.max_pool(3, 2, 0), epilogue=ep)
    with pytest.raises(CompileError, match="7 rows to be 2 per pooled output"):
        compile_conv2d((1, 16, 7, 8), w, padding=1, fusions=Fusions.max_pool(2, 2, 0), epilogue=ep)
    with pytest.raises(CompileError, match="residual"):
        compile_conv2d(x.shape, w, padding=1, fusions=Fusions.max_pool(3, 2, 1), epilogue=replace(ep, residual="int8"))
    with pytest.raises(CompileError, match="every column"):
        compile_conv2d(
            x.shape, w, padding=1, fusions=Fusions.max_pool(3, 2, 1), schedule=Schedule(1, 2, 4, 1, 1), epilogue=ep
        )


def _stem_graph(keep_conv_output: bool) -> tuple[Graph, dict]:
    """conv -> bias -> per-channel requantization -> ReLU -> int8 -> max pool, as the QDQ lowering writes it."""
    x, w, ep = _layer((1, 16, 16, 16), 32, 3)
    per_channel = (1, -1, 1, 1)
    params = {"w": w, "b": ep.bias.astype(np.int32).reshape(per_channel)}
    params["m"] = ep.multiplier.astype(np.int32).reshape(per_channel)
    nodes = [
        Node("conv2d", ("x", "w"), "acc", {"stride": 1, "padding": 1}),
        Node("add", ("acc", "b"), "biased"),
        Node("mul", ("biased", "m"), "scaled", {"shift": ep.shift}),
        Node("relu", ("scaled",), "relu"),
        Node("cast", ("relu",), "y", {"dtype": "int8"}),
        Node("max_pool2d", ("y",), "pooled", {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1]}),
    ]
    outputs = ["pooled", "y"] if keep_conv_output else ["pooled"]
    ptypes = {k: TensorType(v.shape, str(v.dtype)) for k, v in params.items()}
    return Graph({"x": TensorType(x.shape, "int8")}, nodes, outputs, params, ptypes), {"x": x}


@pytest.mark.parametrize("keep_conv_output", [False, True])
def test_model_compiler_fuses_the_pool_into_the_conv(keep_conv_output):
    graph, inputs = _stem_graph(keep_conv_output)
    art, _ = compile_graph_model(graph)
    ops = [s.layer["op"] for s in art.steps if s.kind == "accel"]
    # a conv output the caller also reads is stored: then the pool runs as its own layer
    assert ops == (["conv2d", "max_pool2d"] if keep_conv_output else ["conv2d+max_pool2d"])
    got, want = Module(art, "sim").run(inputs), evaluate(graph, inputs)
    got = got if isinstance(got, dict) else {"pooled": got}
    assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)
