"""Whole programs on the RTL backend: results, counters, timelines, other presets, waveforms, and the
agreement of the cycle model with the RTL (a loose bound here; benchmarks/cycle_agreement.py reports the
figures)."""

from __future__ import annotations

import numpy as np
import pytest
from rtl_presets import ZU_RTL
from test_rtl_differential import random_program

from vdla.isa import AluOp, MemType, Stage, assemble, encode_uops
from vdla.runtime import Device, Dram
from vdla.zoo.resnet import layer_case, layer_specs
from vdla.zoo.tiled_matmul import matmul_oracle, tiled_matmul
from vdla.zoo.workloads import SUITE, alu_chain, matmul, padded_conv, store_stream

FUNCTIONAL = (
    "bytes_loaded",
    "bytes_stored",
    "insn_bytes",
    "gemm_iters",
    "gemm_reset_iters",
    "alu_iters",
    "insn_counts",
)


@pytest.fixture(scope="module")
def devices(rtl_library) -> tuple[Device, Device]:
    return Device("pynq"), Device("pynq", backend="rtl")


@pytest.mark.parametrize("workload", SUITE, ids=[w.name for w in SUITE])
def test_suite_agrees_with_the_model(devices, workload):
    """Each program of the suite computes the right result on both backends (checked inside the workload),
    with identical work counters and cycle counts within 1%."""
    sim, rtl = (workload.run(d).counters for d in devices)
    for name in FUNCTIONAL:
        assert getattr(sim, name) == getattr(rtl, name), name
    for stage in ("load", "compute", "store"):
        s = rtl.stage(stage)
        assert s.busy + s.stall + s.idle == rtl.cycles and s.insns == sim.stage(stage).insns
    assert abs(sim.cycles - rtl.cycles) / rtl.cycles < 0.01


def test_same_cycle_reads_go_to_the_last_reader(devices, monkeypatch):
    """When the load stage's INP load and the compute stage's micro-op load request the read channel in the
    same cycle, the RTL's arbiter grants the stage it granted last (here the compute stage), and the simulator
    orders them so: every instruction of two-thread padded convolution lasts what it lasts on the RTL, but the
    first (the RTL's instruction fetch shares the channel with it) and within a few cycles."""
    timelines = []
    for dev in devices:
        run = dev.run_program
        monkeypatch.setattr(dev, "run_program", lambda insns, run=run, **kw: run(insns, **{**kw, "timeline": True}))
        timelines.append({e.index: e.end - e.start for e in padded_conv(dev, 2).timeline})
    sim, rtl = timelines
    assert sim.keys() == rtl.keys()
    assert max(abs(sim[i] - rtl[i]) for i in sim if i) <= 4


def test_timeline_matches_the_counters(devices):
    rtl = devices[1]
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (64, 64), dtype=np.int8)
    res = tiled_matmul(rtl, a, a, shift=9, vthreads=2, tile_rows=16, timeline=True)
    np.testing.assert_array_equal(res.out, matmul_oracle(a, a, 9))
    c, tl = res.run.counters, res.run.timeline
    assert len(tl) == sum(c.insn_counts.values()) == len({e.index for e in tl})
    for stage in ("load", "compute", "store"):
        spans = sorted((e.start, e.end) for e in tl if e.stage == stage)
        assert sum(end - start for start, end in spans) == c.stage(stage).busy
        assert all(s1 >= e0 for (_, e0), (s1, _) in zip(spans, spans[1:]))  # one instruction at a time
    assert max(e.end for e in tl) == c.cycles
    loads = [(e.start, e.end) for e in tl if e.stage == "load"]
    gemms = [(e.start, e.end) for e in tl if e.label.startswith("gemm")]
    assert any(ls < ge and gs < le for ls, le in loads for gs, ge in gemms)  # overlap in hardware


@pytest.mark.slow  # a Verilator build of each preset: make test-all and CI
@pytest.mark.parametrize("preset", ["block8", "batch2"])
def test_other_presets(preset):
    """The RTL is generic in the configuration: a different GEMM shape and batch build and agree."""
    sim, rtl = Device(preset), Device(preset, backend="rtl")
    for run in (
        lambda d: matmul(d, 32, 64, 32, 2),
        lambda d: padded_conv(d, 2, tiles=2),
        lambda d: alu_chain(d, 1, tiles=2, n=16),
        lambda d: store_stream(d, 2, tiles=3),
    ):
        assert run(sim).counters.gemm_iters == run(rtl).counters.gemm_iters


ZU_PROGRAMS = ("gemm_bound_vt2", "load_bound_vt1", "alu_bound_vt1", "store_bound_vt2", "padded_conv_vt2")
HIGH_DRAM = 0x2_0000_0000  # 8 GiB: past 32 address bits, within the 16 GiB a micro-op's element index reaches


@pytest.mark.slow  # a Verilator build of each preset (about 100 s on 2 shared cores): make test-all and CI
@pytest.mark.parametrize("preset", ZU_RTL)  # one build per simulated design (rtl_presets)
def test_zynq_ultrascale_presets(preset):
    """The Zynq UltraScale+ presets' RTL (two designs: tests/rtl_presets.py; a 128-bit bus, so four
    micro-op banks, and 49-bit addresses)
    computes what the simulator does: workload programs (checked against numpy) and compiled ResNet-18 layers in
    cycles within 1% of the model's, random programs leaving the same DRAM, and programs whose DRAM lies above
    4 GiB."""
    sim, rtl = Device(preset), Device(preset, backend="rtl")
    assert rtl.cfg.bus_width_bits == 128 and rtl.cfg.axi_addr_bits == 49
    for w in (w for w in SUITE if w.name in ZU_PROGRAMS):
        model, hw = w.run(sim).counters, w.run(rtl).counters
        for name in FUNCTIONAL:
            assert getattr(model, name) == getattr(hw, name), (w.name, name)
        assert abs(model.cycles - hw.cycles) <= 0.01 * hw.cycles, (w.name, model.cycles, hw.cycles)
    specs = layer_specs("resnet18")
    for name in ("C5", "C11"):  # compiled ResNet-18 layers
        case = layer_case(name, specs[name], 0)
        layer = case.compile(sim.cfg, vthreads=2)
        model, hw = layer.run(sim, case.x), layer.run(rtl, case.x)
        np.testing.assert_array_equal(hw.out, case.oracle(layer.epilogue.bounds))
        np.testing.assert_array_equal(model.out, hw.out)
        assert abs(model.counters.cycles - hw.counters.cycles) <= 0.01 * hw.counters.cycles, name
    for seed in (1, 2):  # on both devices, whose buffers keep what the programs before left
        for d in (sim, rtl):
            d.dram = d.backend.make_dram()
            random_program(d, seed)
        assert np.array_equal(sim.dram.mem, rtl.dram.mem), seed
    for d in (sim, rtl):
        d.dram = Dram(64 << 20, HIGH_DRAM)
        matmul(d, 64, 64, 64, 2)
        padded_conv(d, 2, tiles=2)
    assert np.array_equal(sim.dram.mem, rtl.dram.mem)
    rtl.backend.close()


@pytest.mark.slow  # the tracing build of the design: make test-all and CI
def test_waveform_dump(tmp_path):
    path = tmp_path / "run.fst"
    dev = Device("pynq", backend="rtl", wave=path)
    dev.run_program(
        assemble("load inp sram=0 dram=0x1000000 y=1 x=2 stride=2 push_next\nload uop x=0 pop_prev\nfinish")
    )
    dev.backend.close()
    data = path.read_bytes()
    assert len(data) > 1000 and data[0] == 0  # an FST header block
    assert b"vdla_top" in data or len(data) > 10000


def test_micro_ops_loaded_ahead_on_the_load_stage(devices):
    """LOAD UOP_PRE writes the micro-op buffer from the load stage: a GEMM reading those micro-ops after popping
    the load -> compute token pushed after them computes what it does after a LOAD UOP on the compute stage, on
    both backends, with equal counters (the bytes in BYTES_UOP_PRE) and cycles within 5%."""
    cfg = devices[0].cfg
    rng = np.random.default_rng(11)
    rows = 6
    a = rng.integers(-128, 128, (rows, cfg.block_in), dtype=np.int8)
    w = rng.integers(-128, 128, (cfg.block_out, cfg.block_in), dtype=np.int8)
    want = (a.astype(np.int32) @ w.astype(np.int32).T).astype(np.int8)  # OUT: the accumulators' low bytes
    runs = {}
    for dev in devices:
        uops = dev.array(encode_uops(np.array([[r, rows - 1 - r, 0] for r in range(rows)]), cfg))
        a_d, w_d, out = dev.array(a[::-1].copy()), dev.array(w), dev.alloc(rows * cfg.block_out)
        for kind in ("uop_pre", "uop"):
            text = f"""
                load {kind} sram=4000 dram={uops.addr // 4:#x} y=1 x={rows} stride={rows}
                load inp sram=0 dram={a_d.addr // a.shape[1]:#x} y=1 x={rows} stride={rows}
                load wgt sram=0 dram={w_d.addr // w.size:#x} y=1 x=1 stride=1 push_next
                gemm init uop=4000:{4000 + rows} iter=1,1 dst=0,0 src=0,0 wgt=0,0 pop_prev push_next
                store out sram=0 dram={out.addr // cfg.block_out:#x} y=1 x={rows} stride={rows} pop_prev
                finish
            """
            run = dev.run_program(assemble(text))
            np.testing.assert_array_equal(out.read(np.int8).reshape(rows, -1), want)
            runs[dev.backend.name, kind] = run.counters
    for kind in ("uop_pre", "uop"):
        sim, rtl = runs["sim", kind], runs["rtl", kind]
        for name in FUNCTIONAL:
            assert getattr(sim, name) == getattr(rtl, name), name
        assert abs(sim.cycles - rtl.cycles) / rtl.cycles < 0.05
    ahead, behind = runs["sim", "uop_pre"], runs["sim", "uop"]
    assert ahead.bytes_loaded["UOP_PRE"] == behind.bytes_loaded["UOP"] == 4 * rows
    assert ahead.bytes_loaded["UOP"] == behind.bytes_loaded["UOP_PRE"] == 0
    assert ahead.stage("load").insns == behind.stage("load").insns + 1


def test_sram_persists_across_runs(devices):
    """Like the simulator, buffers keep their contents from one program to the next."""
    for dev in devices:
        acc = dev.array(np.arange(16, dtype=np.int32).reshape(1, 1, 16))
        out = dev.alloc(16)
        cmd = dev.commands()
        cmd.load(MemType.ACC, 5, acc, 0, 1, 1, 1)
        cmd.synchronize()
        cmd = dev.commands()
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(5, out, 0, 1, 1, 1)
        cmd.synchronize()
        assert out.read(np.int8).tolist() == list(range(16))


def test_epilogue_and_init_gemm(devices):
    """EPI and GEMMs with init (from bias rows, then from zero) over accumulators holding garbage, stored
    requantized; then a new program's writes are truncated again (START clears the EPI state). Both backends
    match numpy, in equal cycles."""
    cfg = devices[0].cfg
    bi, bo = cfg.block_in, cfg.block_out
    m, kb, nb = 4, 2, 3
    rows, bias_base = m * nb, 2 * m * nb
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (m, kb * bi), dtype=np.int8)
    b = rng.integers(-128, 128, (nb * bo, kb * bi), dtype=np.int8)
    acc = rng.integers(-(1 << 31), 1 << 31, (bias_base + nb, 1, bo), dtype=np.int64).astype(np.int32)
    acc[bias_base:] = rng.integers(-5000, 5000, (nb, 1, bo))
    prod = a.astype(np.int32) @ b.astype(np.int32).T  # (m, nb * bo): row r of ACC is (r // nb, r % nb)
    biased = prod + acc[bias_base:].reshape(-1)

    def req(v, shift, relu):
        return np.clip((v + (1 << (shift - 1))) >> shift, 0 if relu else -128, 127).astype(np.int8)

    runs = []
    for dev in devices:
        a_d = dev.array(a.reshape(m, kb, 1, bi))
        b_d = dev.array(b.reshape(nb, bo, kb, bi).transpose(0, 2, 1, 3))
        acc_d = dev.array(acc)
        out = dev.alloc(3 * rows * bo)
        cmd = dev.commands()
        cmd.load(MemType.INP, 0, a_d, 0, 1, m * kb, m * kb)
        cmd.load(MemType.WGT, 0, b_d, 0, 1, nb * kb, nb * kb)
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        cmd.load(MemType.ACC, 0, acc_d, 0, 1, bias_base + nb, bias_base + nb)
        loop = dict(iter_out=nb, iter_in=m, dst_factor=(1, nb), src_factor=(0, kb), wgt_factor=(kb, 0), init=True)
        cmd.epi(req=True, relu=True, shift=6, bias_base=bias_base)
        cmd.gemm([(0, k, k) for k in range(kb)], **loop)
        cmd.epi(req=True, shift=3)
        cmd.gemm([(rows, k, k) for k in range(kb)], **loop)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(0, out, 0, 1, 2 * rows, 2 * rows)
        runs.append(cmd.synchronize().counters)
        cmd = dev.commands()
        cmd.alu(AluOp.ADD, [(0, 0)], iter_out=rows, dst_factor=(1, 0), imm=0)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(0, out, 2 * rows, 1, rows, rows)
        cmd.synchronize()
        got = out.read(np.int8).reshape(3, m, nb * bo)
        np.testing.assert_array_equal(got[0], req(biased, 6, True))
        np.testing.assert_array_equal(got[1], req(prod, 3, False))
        np.testing.assert_array_equal(got[2], biased.astype(np.int8))
    sim, rtl = runs
    assert sim.insn_counts == rtl.insn_counts and rtl.insn_counts["EPI"] == 2
    assert sim.cycles == rtl.cycles
