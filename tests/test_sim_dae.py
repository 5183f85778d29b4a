"""Decoupled access-execute behaviour: tokens, deadlocks, limits, the cycle model and the counters."""

import json

import numpy as np
import pytest

from vdla.config import load_config
from vdla.isa import AluOp, FinishInsn, MemInsn, MemType, assemble, encode_program
from vdla.runtime import CycleLimitError, DeadlockError, Device, FaultError, TokenError, write_chrome_trace
from vdla.zoo.tiled_matmul import matmul_oracle, tiled_matmul


def run_asm(dev, text, **kw):
    return dev.run_program(assemble(text), **kw)


def test_deadlock_raises_and_names_each_stage(device):
    with pytest.raises(DeadlockError) as info:
        run_asm(
            device,
            """
            load inp sram=0 dram=0x1000000 y=1 x=1 stride=1 pop_next push_next
            gemm uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=0,0 pop_prev push_prev
            finish
        """,
        )
    if device.backend.name == "sim":
        text = str(info.value)
        assert "load stage: stuck at instruction 0" in text and "waiting for a token on queue compute->load" in text
        assert "compute stage: stuck at instruction 1" in text and "load->compute" in text
        assert "store stage: finished" in text


def test_leftover_tokens_are_an_error():
    dev = Device()
    with pytest.raises(TokenError, match="ended with tokens left in queues: \\{'load->compute': 1\\}"):
        run_asm(dev, "load inp x=0 push_next\nfinish")


def test_tokens_order_the_stages():
    """The store waits for the compute stage's token although it could start at once."""
    dev = Device()
    res = run_asm(
        dev,
        """
        load uop sram=0 dram=0x4000000 y=1 x=1 stride=1
        alu add uop=0:1 iter=1000,1 dst=0,0 src=0,0 imm=1 push_next
        store out sram=0 dram=0x1000100 y=1 x=1 stride=1 pop_prev
        finish
    """,
        timeline=True,
    )
    by_stage = {e.stage: e for e in res.timeline if e.label.startswith(("alu", "store"))}
    assert by_stage["store"].start >= by_stage["compute"].end
    assert res.counters.store.stall >= 1000


def test_full_command_queue_deadlock_is_detected():
    """The load stage waits on a token the compute stage would give only after instructions that the fetch
    unit cannot deliver because the load stage's command queue is full."""
    cfg = load_config()
    depth = cfg.timing.cmd_queue_depth
    insns = [MemInsn(mem_type=MemType.INP, x_size=0, pop_next=True)]
    insns += [MemInsn(mem_type=MemType.INP, x_size=0) for _ in range(depth)]
    insns += [MemInsn(mem_type=MemType.UOP, x_size=0, push_prev=True), FinishInsn()]
    with pytest.raises(DeadlockError, match="blocked by the full load command queue"):
        Device().run_program(insns)


def test_cycle_limit():
    dev = Device()
    with pytest.raises(CycleLimitError, match="cycle limit 500 reached at instruction 1"):
        run_asm(
            dev,
            "load uop sram=0 dram=0x4000000 y=1 x=1 stride=1\n"
            "alu add uop=0:1 iter=1000,1 dst=0,0 src=0,0 imm=1\nfinish",
            max_cycles=500,
        )


def test_runtime_faults_name_the_instruction():
    dev = Device()
    uop = dev.array(np.array([2047], np.uint32))  # dst=2047
    with pytest.raises(FaultError, match="instruction 1 \\(gemm .*\\): GEMM ACC \\(dst\\) index 2048 outside"):
        run_asm(
            dev,
            f"load uop sram=0 dram={uop.elem(4)} y=1 x=1 stride=1\n"
            "gemm uop=0:1 iter=2,1 dst=1,0 src=0,0 wgt=0,0\nfinish",
        )
    with pytest.raises(FaultError, match="instruction 0 \\(load inp .*\\): LOAD INP: DRAM bytes .* outside"):
        run_asm(dev, "load inp sram=0 dram=0 y=1 x=1 stride=1\nfinish")


def test_unknown_opcode_in_stream():
    dev = Device()
    buf = dev.alloc(32)
    buf.write(np.frombuffer(encode_program([FinishInsn()]) * 2, np.uint8))
    buf.view()[0] = 7
    with pytest.raises(FaultError, match="instruction 0: unknown opcode 7"):
        dev.backend.run(dev.dram, buf.addr, 2)


def test_gemm_cycle_model_and_counters():
    dev = Device()
    t = dev.cfg.timing
    res = run_asm(
        dev,
        """
        load uop sram=0 dram=0x4000000 y=1 x=2 stride=2
        gemm uop=0:2 iter=10,3 dst=0,0 src=0,0 wgt=0,0
        finish
    """,
    )
    c = res.counters
    assert (
        c.gemm_iters == 60
        and c.bytes_loaded["UOP"] == 8
        and c.insn_counts == {"LOAD": 1, "STORE": 0, "GEMM": 1, "ALU": 0, "FINISH": 1, "EPI": 0}
    )
    gemm_cycles = t.gemm_setup + 60 + t.gemm_pipeline
    assert c.compute.busy >= gemm_cycles
    for stage in ("load", "compute", "store"):
        s = c.stage(stage)
        assert s.busy + s.stall + s.idle == c.cycles
    assert c.utilization == pytest.approx(60 / c.cycles)


def test_dma_cycle_model_counts_beats_latency_and_padding():
    dev = Device()
    t = dev.cfg.timing
    res = run_asm(
        dev,
        """
        load inp sram=0 dram=0x1000000 y=4 x=8 stride=8 pad=1,1,2,2 push_next
        load uop x=0 pop_prev
        finish
    """,
        timeline=True,
    )
    load = res.timeline[0]
    beats = 4 * 8 * 16 // 8  # 4 rows of 8 16-byte elements on a 64-bit bus
    pads = 6 * 12 - 32
    assert load.end - load.start == (
        t.dma_setup + t.dram_read_latency + beats + 4 * t.dma_row_overhead + pads * t.dma_pad_cycles
    )
    assert res.counters.bytes_loaded["INP"] == 512


def test_latency_hiding_and_counters_of_tiled_matmul(tmp_path):
    dev = Device()
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (128, 256), dtype=np.int8)
    b = rng.integers(-128, 128, (64, 256), dtype=np.int8)
    runs = {vt: tiled_matmul(dev, a, b, shift=9, vthreads=vt, tile_rows=32, timeline=True) for vt in (1, 2)}
    for r in runs.values():
        np.testing.assert_array_equal(r.out, matmul_oracle(a, b, 9))
        c = r.run.counters
        assert c.gemm_iters == 128 * 16 * 4
        assert c.bytes_stored == 128 * 64
        assert c.bytes_loaded["INP"] == 128 * 256
        assert c.dram_bytes == sum(c.bytes_loaded.values()) + c.bytes_stored
    assert runs[2].run.counters.cycles < runs[1].run.counters.cycles  # overlap hides load latency
    assert runs[2].run.counters.utilization > runs[1].run.counters.utilization
    path = tmp_path / "trace.json"
    write_chrome_trace(runs[2].run.timeline, path, dev.cfg.clock_mhz)
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == sum(runs[2].run.counters.insn_counts.values())
    assert {e["tid"] for e in spans} == {0, 1, 2}
    load_spans = [(e["ts"], e["ts"] + e["dur"]) for e in spans if e["tid"] == 0]
    gemm_spans = [(e["ts"], e["ts"] + e["dur"]) for e in spans if e["name"] == "gemm"]
    assert any(ls < ge and gs < le for ls, le in load_spans for gs, ge in gemm_spans)  # real overlap


def test_timing_only_mode_matches_cycles_without_touching_data():
    dev = Device()
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (64, 64), dtype=np.int8)
    cmd_runs = tiled_matmul(dev, a, a, vthreads=2, tile_rows=16)
    cmd = dev.commands()
    buf = dev.array(np.zeros((4, 64), np.int32))
    cmd.load(MemType.ACC, 0, buf, 0, 1, 4, 4)
    cmd.alu(AluOp.ADD, [(0, 0)], iter_out=4, dst_factor=(1, 0), imm=5)
    insns = cmd.finish()
    code = dev.array(np.frombuffer(encode_program(insns), np.uint8))
    full = dev.backend.run(dev.dram, code.addr, len(insns))
    before = dev.backend.sram.acc.copy()
    timing = dev.backend.run(dev.dram, code.addr, len(insns), functional=False)
    assert timing.counters == full.counters
    np.testing.assert_array_equal(dev.backend.sram.acc, before)
    assert cmd_runs.run.counters.cycles > 0
