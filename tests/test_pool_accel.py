"""Pooling on the accelerator's ALU (issue 12): max pooling and the requantized global average, against numpy
on the simulator (odd sizes, partial channel blocks, ResNet-18's shapes) and the RTL, and placed by the
model compiler: a small ResNet's pools run on the accelerator, bit-exact against the CPU reference."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.compiler import CompileError
from vdla.compiler.pool import PoolLowering, PoolSchedule, PoolSpec, compile_pool, pool_oracle
from vdla.graph import oracle
from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate
from vdla.graph.types import TensorType
from vdla.isa.arith import choose_requantization, mul_shift
from vdla.model import Module
from vdla.model.pipeline import compile_graph_model
from vdla.runtime import Device

RNG = np.random.default_rng(12)

MAX_CASES = [  # shape, kernel, stride, padding
    ((1, 16, 9, 9), 3, 2, 1),
    ((1, 24, 13, 9), 3, 2, 1),  # a partial channel block, odd sizes
    ((1, 20, 7, 11), 2, 2, 0),  # unpadded, the last column unused
    ((1, 32, 8, 8), 3, 1, 1),  # kernel > 2 x stride: row results in their own region
    ((1, 64, 112, 112), 3, 2, 1),  # ResNet-18's, after the first convolution
    ((1, 64, 10, 10), 5, 1, 2),  # YOLO's SPPF: both axes by doubling (3 MAX passes each, not 4)
    ((1, 16, 13, 8), (7, 4), 1, (3, 3, 1, 2)),  # 7 taps by doubling in 3 passes, 4 in 2
    ((1, 16, 12, 12), 13, 1, 6),  # 13 taps in 4 passes
]
AVG_CASES = [(1, 48, 7, 7), (1, 40, 5, 3), (1, 512, 7, 7)]  # the last is ResNet-18's


def _x(shape, lo=-128):
    return RNG.integers(lo, 128, shape, dtype=np.int8)


@pytest.mark.parametrize("shape,k,s,p", MAX_CASES)
def test_max_pool_matches_numpy_on_sim(shape, k, s, p):
    spec = PoolSpec.make(shape, k, s, p, "max")
    x = _x(shape)
    run = compile_pool(spec).run(Device("pynq"), x)
    want = oracle.pool2d(x, spec.window, "max")  # padding never wins: the int8 minimum
    assert np.array_equal(pool_oracle(x, spec), want)
    assert np.array_equal(run.out, want)


def test_zero_padding_is_exact_only_for_non_negative_inputs():
    shape = (1, 16, 9, 9)
    spec = PoolSpec.make(shape, 3, 2, 1, "max", pad_min=False)
    x = _x(shape, lo=0)
    c = compile_pool(spec)
    assert np.array_equal(c.run(Device("pynq"), x).out, oracle.pool2d(x, spec.window, "max"))
    neg = -np.abs(_x(shape)) - 1
    assert not np.array_equal(c.run(Device("pynq"), neg).out, oracle.pool2d(neg, spec.window, "max"))
    assert len(c.program()) < len(compile_pool(PoolSpec.make(shape, 3, 2, 1, "max")).program())  # no border fill


@pytest.mark.parametrize("shape", AVG_CASES)
def test_global_average_matches_numpy_on_sim(shape):
    real = 0.8 / (shape[2] * shape[3])
    (m,), shift = choose_requantization(real)
    m = int(m)
    spec = PoolSpec.global_avg(shape, m, shift)
    x = _x(shape)
    run = compile_pool(spec).run(Device("pynq"), x)
    total = x.astype(np.int64).sum(axis=(2, 3), keepdims=True)
    want = np.clip(mul_shift(total, m, shift), -128, 127).astype(np.int8)
    assert np.array_equal(run.out, want)
    assert np.abs(run.out - np.clip(np.rint(total * real), -128, 127)).max() <= 1


@pytest.mark.parametrize(
    "shape,k,s,p,op",
    [
        ((1, 24, 9, 7), 3, 2, 1, "max"),  # both passes in place
        ((1, 32, 8, 8), 3, 1, 1, "max"),  # kernel > 2 x stride: first-pass results in their own region
        ((1, 20, 7, 11), (2, 3), (1, 2), 0, "max"),
        ((1, 40, 5, 3), (5, 3), None, 0, "avg"),
        ((1, 32, 9, 11), (5, 4), 1, 2, "max"),  # both axes by doubling, either first
        ((1, 24, 10, 9), (5, 3), (1, 2), 2, "max"),  # rows by doubling, columns in place
        ((1, 16, 9, 10), (3, 6), (2, 1), 1, "max"),  # columns by doubling, rows in place
    ],
)
def test_every_candidate_schedule_is_exact(shape, k, s, p, op):
    """Both pass orders, every thread count and tile the search may pick: the same bits as numpy."""
    spec = PoolSpec.make(shape, k, s, p, op)
    x = _x(shape)
    cands = PoolLowering(spec, Device("pynq").cfg).candidates()
    assert {c.first for c in cands} == {"rows", "cols"}
    for sched in cands:
        assert np.array_equal(compile_pool(spec, schedule=sched).run(Device("pynq"), x).out, pool_oracle(x, spec))


def test_the_chosen_schedules_are_cached(tmp_path, monkeypatch):
    """A pool's choice goes into the schedule cache (with its cycles, for the model compiler's fused-or-apart
    decisions); a second compile times nothing and runs the same program."""
    from vdla.compiler import ScheduleCache, search

    cache = ScheduleCache(tmp_path / "schedules.json")
    for spec in (PoolSpec.make((1, 32, 20, 20), 3, 2, 1, "max"), PoolSpec.global_avg((1, 48, 14, 14), 1 << 14, 21)):
        first = compile_pool(spec, cache=cache)
        with monkeypatch.context() as m:
            m.setattr(search, "timed", lambda *a: pytest.fail("a cached choice was timed again"))
            again = compile_pool(spec, cache=cache)
        assert (again.schedule, again.search.cycles) == (first.schedule, first.search.cycles)
        assert again.program() == first.program()


def test_the_window_comes_in_through_the_load_stage_and_an_identity_gemm():
    """No ACC load on the compute stage: INP LOADs (load stage) and one ``init`` GEMM per tile by the identity
    block; ResNet-18's max pool then stays well under the 302,609 cycles of the ACC_8BIT loads (with the full
    ALU: the half-width one of the pynq build takes 3 cycles a MAX instead of 2)."""
    from full_units import FULL

    spec = PoolSpec.make((1, 64, 112, 112), 3, 2, 1, "max", pad_min=False)
    c = compile_pool(spec, config=FULL)
    counters = c.run(Device(FULL), _x(spec.shape, lo=0)).counters
    assert counters.bytes_loaded["ACC_8BIT"] == 0 and counters.bytes_loaded["INP"] >= 64 * 112 * 112
    assert counters.bytes_loaded["WGT"] == FULL.wgt_elem_bytes  # the identity block, once
    assert counters.gemm_iters >= 4 * 112 * 112 and counters.load.busy > 0
    assert c.search.cycles < 230_000


def test_pools_on_rtl(rtl_library):
    dev = Device("pynq", backend="rtl")
    spec = PoolSpec.make((1, 24, 9, 7), 3, 2, 1, "max")
    x = _x(spec.shape)
    assert np.array_equal(compile_pool(spec).run(dev, x).out, pool_oracle(x, spec))
    spec = PoolSpec.make((1, 20, 7, 6), 3, 2, 1, "max")
    x = _x(spec.shape)
    for first in ("rows", "cols"):
        run = compile_pool(spec, schedule=PoolSchedule(1, 2, 2, first)).run(dev, x)
        assert np.array_equal(run.out, pool_oracle(x, spec))
    spec = PoolSpec.make((1, 32, 10, 9), 5, 1, 2, "max")  # SPPF's, by doubling
    x = _x(spec.shape)
    for first in ("rows", "cols"):
        run = compile_pool(spec, schedule=PoolSchedule(1, 5, 2, first)).run(dev, x)
        assert np.array_equal(run.out, pool_oracle(x, spec))
    spec = PoolSpec.global_avg((1, 32, 3, 5), 1431655765, 33, (-100, 90))
    x = _x(spec.shape)
    sim = compile_pool(spec).run(Device("pynq"), x)
    rtl = compile_pool(spec).run(dev, x)
    assert np.array_equal(rtl.out, pool_oracle(x, spec)) and np.array_equal(rtl.out, sim.out)


def test_bad_pools_name_the_limit():
    with pytest.raises(CompileError, match="pixels wide fit"):
        compile_pool(PoolSpec.make((1, 16, 3, 2000), 3, 2, 1, "max"))
    with pytest.raises(CompileError, match="varying counts"):
        PoolSpec.make((1, 16, 8, 8), 3, 2, 1, "avg")
    with pytest.raises(CompileError, match="int8"):
        PoolSpec.global_avg((1, 16, 7, 7), 1, 0, (-200, 0))


def _pool_graph(dtype: str) -> Graph:
    x = TensorType((1, 24, 11, 11), dtype)
    node = Node("max_pool2d", ("x",), "y", {"kernel": (3, 3), "stride": (2, 2), "padding": 1})
    return Graph({"x": x}, [node], ["y"], {}, {}, name=f"pool_{dtype}")


def test_model_places_a_max_pool_of_signed_int8_on_the_accelerator():
    art, report = compile_graph_model(_pool_graph("int8"))
    (step,) = [s for s in art.steps if s.kind == "accel"]
    assert step.layer["op"] == "max_pool2d" and step.layer["epilogue"] == "pad int8 min"
    x = _x((1, 24, 11, 11))
    assert np.array_equal(Module(art).run(x), evaluate(_pool_graph("int8"), {"x": x})["y"])


def test_a_float_max_pool_stays_on_the_cpu_with_a_note():
    art, report = compile_graph_model(_pool_graph("float32"))
    assert all(s.kind == "cpu" for s in art.steps)
    assert "int8" in report.notes["y"] and "int8" in art.steps[0].note


def test_global_sum_pool_on_the_cpu_fallback():
    pytest.importorskip("llvmlite")
    from vdla.cpu_fallback import compile_graph

    g = Graph({"x": TensorType((1, 40, 5, 3), "int8")}, [Node("global_sum_pool", ("x",), "s")], ["s"], {}, {})
    x = _x((1, 40, 5, 3))
    got = compile_graph(g).run({"x": x})["s"]
    assert got.dtype == np.int32 and np.array_equal(got, x.astype(np.int32).sum(axis=(2, 3), keepdims=True))


@pytest.fixture(scope="module")
def small_resnet_qdq():
    pytest.importorskip("onnxruntime")
    from vdla.zoo.models import calibration_images, quantize_qdq, small_resnet

    return quantize_qdq(small_resnet(seed=0), calibration_images((3, 32, 32), 32, seed=1))


def test_small_resnet_pools_run_on_the_accelerator_bit_exact(small_resnet_qdq):
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify
    from vdla.graph.qdq import lower_qdq
    from vdla.zoo.models import calibration_images

    art, _ = compile_graph_model(import_onnx(small_resnet_qdq), passes=[("simplify", simplify)])
    ops = [s.layer["op"] for s in art.steps if s.kind == "accel"]
    assert "conv2d+max_pool2d" in ops and "global_avg_pool" in ops  # the stem's pool fused into its conv
    cpu_ops = {n.op for s in art.steps if s.kind == "cpu" for n in s.graph.nodes}
    assert not cpu_ops & {"max_pool2d", "global_avg_pool", "global_sum_pool"}
    graph = lower_qdq(simplify(import_onnx(small_resnet_qdq)))
    module = Module(art, "sim")
    for x in calibration_images((3, 32, 32), 3, seed=5):
        got, want = module.run(x[None]), evaluate(graph, {"image": x[None]})
        assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_max_pool_stores_into_its_channel_blocks_of_a_concatenation(backend):
    """A max pool that is one part of a channel concatenation (YOLO's SPPF) stores its channel blocks into the
    joined tensor (OutputView.blocks): the other blocks are left as they were; any other view is refused."""
    from vdla.compiler.run import run_bound
    from vdla.compiler.spec import OutputView
    from vdla.graph.layout import pack_activation, unpack_activation

    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, (1, 32, 9, 10), dtype=np.int8)
    spec = PoolSpec.make(x.shape, 5, 1, 2, "max", pad_min=True)
    pool = compile_pool(spec, out_view=OutputView((9, 10), blocks=(1, 4)))  # blocks 1, 2 of 4
    arrays = dict(pool.constants, inp=pack_activation(x, 1, 16))
    packed, _ = run_bound(Device("pynq", backend), pool.lowering, pool.stream, arrays, (1, 4, 9, 10, 1, 16))
    joined = unpack_activation(packed, 1, 64)
    np.testing.assert_array_equal(joined[:, 16:48], pool_oracle(x, spec))
    assert not joined[:, :16].any() and not joined[:, 48:].any()  # run_bound's fresh buffer: zeros elsewhere
    with pytest.raises(CompileError, match="whole channel blocks only"):
        compile_pool(spec, out_view=OutputView((18, 20), (0, 0), (2, 2)))
