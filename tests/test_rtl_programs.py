"""Whole programs on the RTL backend: results, counters, timelines, other presets, waveforms, and the
agreement of the cycle model with the RTL (a loose bound here; benchmarks/calibration.py reports the
figures)."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.isa import MemType, Stage, assemble
from vdla.runtime import Device
from vdla.runtime.rtl.workloads import SUITE, alu_chain, matmul, padded_conv, store_stream
from vdla.runtime.tiled_matmul import reference_matmul, tiled_matmul

FUNCTIONAL = ("bytes_loaded", "bytes_stored", "insn_bytes", "gemm_iters", "gemm_reset_iters", "alu_iters",
              "insn_counts")


@pytest.fixture(scope="module")
def devices(rtl_library) -> tuple[Device, Device]:
    return Device("pynq"), Device("pynq", backend="rtl")


@pytest.mark.parametrize("workload", SUITE, ids=[w.name for w in SUITE])
def test_suite_agrees_with_the_model(devices, workload):
    """Each calibration program computes the right result on both backends (checked inside the workload),
    with identical work counters and cycle counts within 5%."""
    sim, rtl = (workload.run(d).counters for d in devices)
    for name in FUNCTIONAL:
        assert getattr(sim, name) == getattr(rtl, name), name
    for stage in ("load", "compute", "store"):
        s = rtl.stage(stage)
        assert s.busy + s.stall + s.idle == rtl.cycles and s.insns == sim.stage(stage).insns
    assert abs(sim.cycles - rtl.cycles) / rtl.cycles < 0.05


def test_timeline_matches_the_counters(devices):
    rtl = devices[1]
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (64, 64), dtype=np.int8)
    res = tiled_matmul(rtl, a, a, shift=9, vthreads=2, tile_rows=16, timeline=True)
    np.testing.assert_array_equal(res.out, reference_matmul(a, a, 9))
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


@pytest.mark.parametrize("preset", ["block8", "batch2"])
def test_other_presets(preset):
    """The RTL is generic in the configuration: a different GEMM shape and batch build and agree."""
    sim, rtl = Device(preset), Device(preset, backend="rtl")
    for run in (lambda d: matmul(d, 32, 64, 32, 2), lambda d: padded_conv(d, 2, tiles=2),
                lambda d: alu_chain(d, 1, tiles=2, n=16), lambda d: store_stream(d, 2, tiles=3)):
        assert run(sim).counters.gemm_iters == run(rtl).counters.gemm_iters


def test_waveform_dump(tmp_path):
    path = tmp_path / "run.fst"
    dev = Device("pynq", backend="rtl", wave=path)
    dev.run_program(assemble("load inp sram=0 dram=0x1000000 y=1 x=2 stride=2 push_next\n"
                             "load uop x=0 pop_prev\nfinish"))
    dev.backend.close()
    data = path.read_bytes()
    assert len(data) > 1000 and data[0] == 0  # an FST header block
    assert b"vdla_top" in data or len(data) > 10000


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
