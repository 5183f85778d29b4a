"""Layers overlapped: consecutive accelerator steps joined into one stream (vdla.compiler.chain), checked
against the same model run one layer at a time and against the CPU reference, on sim and rtl."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_graph_qdq import S_A, residual_graph  # noqa: E402

import vdla.compiler.chain as chain_mod  # noqa: E402
from vdla.compiler.chain import join_programs, weight_offset, wgt_rows  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.isa import FinishInsn, GemmInsn, MemInsn, MemType, Stage, decode_program, nop, validate_program  # noqa: E402
from vdla.model import Module  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402


def _graph():
    return residual_graph(s_b=S_A, s_out=S_A)


@pytest.fixture(scope="module")
def artifact():
    return compile_graph_model(_graph(), "pynq")[0]


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)


def _programs(artifact, first: int, count: int):
    base = artifact.config.dram_base_addr

    def insns(addr: int, n: int):
        return decode_program(artifact.image[addr - base : addr - base + 16 * n].tobytes())

    steps = artifact.steps[first : first + count]
    return [insns(s.insn_addr, s.insn_count) for s in steps]


def test_the_accelerator_steps_are_one_chain(artifact):
    (chain,) = artifact.chains
    accel = [i for i, s in enumerate(artifact.steps) if s.kind == "accel"]
    assert (chain.first, chain.count) == (accel[0], len(accel)) and len(accel) == 3
    joined = _programs(artifact, chain.first, chain.count)
    assert chain.insn_count < sum(len(p) for p in joined) + 8  # a few token no-ops, FINISHes dropped
    base = artifact.config.dram_base_addr
    lo = chain.insn_addr - base
    insns = decode_program(artifact.image[lo : lo + 16 * chain.insn_count].tobytes())
    assert [i for i, x in enumerate(insns) if isinstance(x, FinishInsn)] == [len(insns) - 1]


def test_joined_run_is_bit_exact_and_its_cycles_split_per_layer(artifact, backend):
    ref = lower_qdq(_graph())
    joined, alone = Module(artifact, backend), Module(artifact, backend, overlap=False)
    x = _x(5)
    want = evaluate(ref, {"x": x})["y"]
    np.testing.assert_array_equal(joined.run(x), want)
    np.testing.assert_array_equal(alone.run(x), want)
    one, many = joined.last_report, alone.last_report
    chained = [s for s in one.steps if s.where == "accel"]
    (run,) = {id(s.result) for s in chained}  # one stream
    assert sum(s.cycles for s in chained) == chained[0].result.counters.cycles
    assert all(s.cycles > 0 for s in chained) and all(0 < s.utilization <= 1 for s in chained)
    assert len({id(s.result) for s in many.steps if s.where == "accel"}) == 3
    assert one.accel_cycles < many.accel_cycles  # the fills and drains overlap
    joined.close()
    alone.close()


def test_without_the_ready_token_the_next_layer_reads_stale_activations(monkeypatch):
    """The test can fail: popping the ready token only after the last load lets the next layer read its
    input before the previous layer stored it."""
    monkeypatch.setattr(chain_mod, "_ready_at", lambda loads: len(loads))
    broken = compile_graph_model(_graph(), "pynq")[0]
    x = _x(6)
    want = evaluate(lower_qdq(_graph()), {"x": x})["y"]
    assert not np.array_equal(Module(broken).run(x), want)
    np.testing.assert_array_equal(Module(broken, overlap=False).run(x), want)


def test_weights_move_clear_of_the_previous_layer():
    assert weight_offset([(0, 100)], [(200, 300)], 1024) == 0  # already disjoint
    assert weight_offset([(0, 100)], [(0, 50)], 1024) == 100  # just above
    assert weight_offset([(0, 100), (1023, 1024)], [(0, 50)], 1024) == 100
    assert weight_offset([(0, 1000)], [(0, 50)], 1024) is None  # no room: the free token orders them
    assert weight_offset([(0, 600)], [(0, 500)], 1024) is None


def test_relocated_weights_and_tokens(artifact):
    chain = artifact.chains[0]
    base = artifact.config.dram_base_addr
    lo = chain.insn_addr - base
    insns = decode_program(artifact.image[lo : lo + 16 * chain.insn_count].tobytes())
    spans = [chain.span(k) for k in range(chain.count)]
    rows = [wgt_rows(insns[a:b]) for a, b in spans]
    moved = 0
    for k in range(1, chain.count):
        a, b = spans[k - 1]
        last_gemm = max(i for i in range(a, b) if isinstance(insns[i], GemmInsn))
        free = [i for i in range(last_gemm, b) if insns[i].stage == Stage.COMPUTE and insns[i].push_prev]
        if any(p < s and r < q for p, q in rows[k - 1] for r, s in rows[k]):
            assert free, f"layer {k} overwrites weights of layer {k - 1} without the free token"
        else:
            moved += rows[k] != wgt_rows(_programs(artifact, chain.first + k, 1)[0])
    assert moved >= 1  # the pool's identity weights moved clear of the first convolution's
    validate_program(insns, artifact.config, (base, base + artifact.config.dram_bytes))


def test_the_prologue_waits_for_stores_of_the_rows_it_would_overwrite():
    stored = MemInsn(store=True, mem_type=MemType.OUT, sram_base=100, y_size=1, x_size=4)
    acc_load = MemInsn(mem_type=MemType.ACC, sram_base=102, y_size=1, x_size=2)
    uop_load = MemInsn(mem_type=MemType.UOP, sram_base=0, y_size=1, x_size=3)
    first = [stored, FinishInsn(pop_next=True)]
    first[0].push_prev = True
    clear = [uop_load, MemInsn(mem_type=MemType.ACC, sram_base=200, y_size=1, x_size=2), FinishInsn()]
    clash = [uop_load, acc_load, FinishInsn()]
    for second, ahead in ((clear, 2), (clash, 1)):
        insns = join_programs([first, second]).insns
        ready = next(i for i, x in enumerate(insns) if x.stage == Stage.COMPUTE and x.push_prev and x.pop_next)
        moved = [x for x in insns[:ready] if isinstance(x, MemInsn) and x.stage == Stage.COMPUTE and not x.is_nop]
        assert len(moved) == ahead
    assert nop(Stage.LOAD).stage == Stage.LOAD and nop(Stage.STORE).stage == Stage.STORE


def test_programs_must_end_with_finish():
    with pytest.raises(Exception, match="does not end with FINISH"):
        join_programs([[MemInsn(mem_type=MemType.UOP, x_size=0)]])
