"""Virtual threads lowered to dependency tokens: never deadlock, tokens paired in FIFO order, bit-exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vdla.compiler import Schedule, compile_conv2d
from vdla.compiler.blocks import Block, Gemm, Load, Store
from vdla.compiler.microcode import MicroKernel
from vdla.compiler.vthreads import Dep, LoweringError, Stream, check_tokens, emit_stream, lower_vthreads, round_robin
from vdla.graph.epilogue import Epilogue
from vdla.graph.oracle import conv2d_oracle
from vdla.isa import MemType, Queue, encode_program, validate_program
from vdla.runtime import Device, Simulator


def tiny_block(thread: int, loads: bool, stores: bool, vthreads: int) -> Block:
    """A block of real instructions on the thread's share of the block8 buffers."""
    inp0, acc0 = thread * (1024 // vthreads), thread * (1024 // vthreads)
    kernel = MicroKernel(np.array([[acc0, inp0, 0]]), 4, 1, (1, 1, 0), (0, 0, 0))
    return Block(
        thread,
        (Load(MemType.INP, inp0, "a", 4 * thread, 1, 4, 4),) if loads else (),
        (Gemm(kernel),),
        (Store(acc0, "out", 4 * thread, 1, 4, 4),) if stores else (),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=6), min_size=1, max_size=4),
    st.booleans(),
)
def test_any_block_structure_runs_to_completion(shape, prologue):
    """Whatever loads and stores the threads' blocks have, with or without a prologue, the lowered stream
    balances every queue and the simulator runs it without deadlock."""
    v = len(shape)
    threads = [[tiny_block(t, ld, st, v) for ld, st in blocks] for t, blocks in enumerate(shape)]
    head = Block(-1, (), (Gemm(MicroKernel(np.array([[0, 0, 0]]), 1, 1, (0, 0, 0), (0, 0, 0)), init=True),), ())
    stream = lower_vthreads(threads, head if prologue else None)
    dev = Device("block8")
    cmd = dev.commands()
    emit_stream(stream, cmd, {"a": dev.alloc(4096), "out": dev.alloc(4096)})
    insns = cmd.finish()
    validate_program(insns, dev.cfg, dev.dram.range)
    dev.run_program(insns)
    for q in Queue:
        pushes = [d for d in stream.deps if d.queue == q]
        assert len({d.src for d in pushes}) == len(pushes)


def test_round_robin_order():
    assert round_robin([3, 1, 2]) == [(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (0, 2)]


def test_lowering_emits_the_four_dependencies():
    threads = [[tiny_block(t, True, k == 1, 2) for k in range(3)] for t in range(2)]
    stream = lower_vthreads(threads)
    kinds = {(d.queue, d.src, d.dst) for d in stream.deps}
    # thread 0's blocks sit at positions 0, 2, 4 and thread 1's at 1, 3, 5
    assert (Queue.L2C, 2, 2) in kinds and (Queue.C2L, 0, 2) in kinds and (Queue.C2L, 2, 4) in kinds
    assert (Queue.C2S, 3, 3) in kinds and (Queue.S2C, 3, 5) in kinds
    assert not any(d.queue == Queue.C2L and d.dst in (0, 1) for d in stream.deps)  # first loads pop nothing
    assert not any(d.queue == Queue.S2C and d.src in (4, 5) for d in stream.deps)  # last blocks push nothing


def test_prologue_goes_first_and_gates_nothing():
    threads = [[tiny_block(t, True, True, 2)] for t in range(2)]
    prologue = Block(-1, (), (Gemm(MicroKernel(np.array([[0, 0, 0]]), 1, 1, (0, 0, 0), (0, 0, 0)), init=True),), ())
    stream = lower_vthreads(threads, prologue)
    assert stream.blocks[0] is prologue
    assert not any(d.src == 0 for d in stream.deps)  # the first loads overlap the prologue


@pytest.mark.parametrize(
    "deps, message",
    [
        ([Dep(Queue.C2L, 2, 1)], "does not go forward"),
        ([Dep(Queue.L2C, 1, 1), Dep(Queue.L2C, 1, 2)], "twice"),
        ([Dep(Queue.S2C, 0, 3), Dep(Queue.S2C, 1, 2)], "FIFO"),
    ],
)
def test_check_tokens_rejects_bad_streams(deps, message):
    blocks = [tiny_block(0, True, True, 1) for _ in range(4)]
    with pytest.raises(LoweringError, match=message):
        check_tokens(Stream(blocks, deps))


def _conv_case(seed: int = 5):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (2, 40, 11, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (36, 40, 3, 3), dtype=np.int8)
    return x, w, rng.integers(-20000, 20000, 36)


@pytest.mark.parametrize("cfg, backend", [("pynq", "sim"), ("block8", "sim"), ("pynq", "rtl")])
@pytest.mark.parametrize("vthreads", [1, 2, 3, 4])
@pytest.mark.parametrize("order", ["oc", "spatial"])
def test_vthreads_bit_exact(request, cfg, backend, vthreads, order):
    """Small tiles (several tiles and reduction steps per thread) on 1-4 threads, both tile orders, on the
    simulator and on the RTL (the session's Verilated pynq build)."""
    if backend == "rtl":
        request.getfixturevalue("rtl_library")
    x, w, b = _conv_case()
    s = Schedule(toc=1, toh=3, tow=5, tic=1 if order == "oc" else 3, vthreads=vthreads, order=order)
    ep = Epilogue(bias=b, shift=9, clip=(0, 127))
    layer = compile_conv2d(x.shape, w, padding=1, epilogue=ep, config=cfg, schedule=s)
    run = layer.run(Device(cfg, backend=backend), x)
    np.testing.assert_array_equal(run.out, conv2d_oracle(x, w, layer.spec, ep))


def test_virtual_threads_hide_latency():
    """A memory-heavy 1x1 layer: the same tiling on two threads overlaps loads and stores with compute."""
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (1, 64, 16, 16), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64, 1, 1), dtype=np.int8)
    cycles = {
        v: compile_conv2d(x.shape, w, epilogue=Epilogue(shift=9), schedule=Schedule(4, 2, 16, 4, v))
        .run(Device("pynq"), x)
        .counters.cycles
        for v in (1, 2)
    }
    assert cycles[2] < 0.9 * cycles[1]


def test_timing_only_run_matches_functional_cycles():
    x, w, b = _conv_case()
    layer = compile_conv2d(x.shape, w, padding=1, epilogue=Epilogue(bias=b, shift=9), schedule=Schedule(3, 4, 9, 1, 2))
    dev = Device("pynq")
    functional = layer.run(dev, x).counters.cycles
    insns = layer.program(dev)
    buf = dev.alloc(len(insns) * 16)
    buf.write(np.frombuffer(encode_program(insns), np.uint8))
    timing = Simulator(dev.cfg).run(dev.dram, buf.addr, len(insns), functional=False).counters.cycles
    assert timing == functional


def test_shared_weights_and_resident_inputs_are_loaded_once():
    """All weights fit the WGT buffer: every thread reads one copy, each step's chunk loaded by its first user;
    all input windows of a spatial tile fit a thread's INP share: loaded once, not once per output-channel tile."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 48, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 48, 3, 3), dtype=np.int8)
    for vthreads in (1, 2, 3):
        s = Schedule(toc=1, toh=8, tow=8, tic=1, vthreads=vthreads)
        layer = compile_conv2d(x.shape, w, padding=1, epilogue=Epilogue(shift=10), schedule=s)
        assert layer.lowering.weights_shared and layer.lowering.inputs_resident(s)
        run = layer.run(Device("pynq"), x)
        np.testing.assert_array_equal(run.out, conv2d_oracle(x, w, layer.spec, Epilogue(shift=10)))
        loaded = run.counters.bytes_loaded
        assert loaded["WGT"] == w.size
        assert loaded["INP"] == x.size * min(vthreads, 4)  # each thread holding the one spatial tile loads it once


@pytest.mark.parametrize("vthreads", [1, 2])
def test_weights_in_thread_shares_when_they_do_not_all_fit(vthreads):
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (1, 40, 9, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (40, 40, 5, 5), dtype=np.int8)
    s = Schedule(toc=2, toh=3, tow=9, tic=2, vthreads=vthreads)
    ep = Epilogue(shift=12, clip=(0, 127))
    layer = compile_conv2d(x.shape, w, padding=2, epilogue=ep, config="block8", schedule=s)
    assert not layer.lowering.weights_shared
    run = layer.run(Device("block8"), x)
    np.testing.assert_array_equal(run.out, conv2d_oracle(x, w, layer.spec, ep))


def test_last_block_hands_its_parts_to_the_store_stage():
    """One tile on one thread: without parts every STORE would wait for the last GEMM; the last block is
    split per output-channel group, so the first STOREs run while later GEMMs still compute."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 32, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 32, 1, 1), dtype=np.int8)
    ep = Epilogue(shift=8)
    layer = compile_conv2d(x.shape, w, epilogue=ep, schedule=Schedule(toc=4, toh=8, tow=8, tic=2, vthreads=1))
    run = layer.run(Device("pynq"), x, timeline=True)
    np.testing.assert_array_equal(run.out, conv2d_oracle(x, w, layer.spec, ep))
    tl = run.result.timeline
    gemms = [e for e in tl if e.label.startswith("gemm")]
    stores = [e for e in tl if e.label.startswith("store")]
    assert len(stores) == 4 and stores[0].start < gemms[-1].end
    assert all(s.start >= g.end for s, g in zip(stores, gemms[-4:]))  # each part only after its GEMM
