"""The campaign's random programs (vdla.zoo.random_programs), on the simulator alone: they cover everything of the
instruction set each configuration builds, and they are self-contained (what they leave in DRAM does not depend
on what the on-chip buffers held before), so that a backend may run them one after another."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vdla.config import preset_names
from vdla.isa import MemType, Opcode
from vdla.runtime import Device
from vdla.zoo.random_programs import (
    build_program,
    campaign_config,
    campaign_configs,
    isa_features,
    program_features,
    random_program,
)

COVERAGE_PROGRAMS = 24  # programs per configuration that together use every feature of isa_features


@pytest.mark.parametrize("name", sorted(set(campaign_configs()) | set(preset_names())))
def test_programs_cover_the_isa(name):
    """Every opcode, memory type, dependency flag, ALU opcode and GEMM, ALU and EPI flag the configuration builds
    appears in the first COVERAGE_PROGRAMS programs (the list is computed from the ISA's enums: a new instruction
    fails here until the generator emits it), and nothing the configuration lacks does."""
    cfg = campaign_config(name)
    want = isa_features(cfg)
    got = set()
    for seed in range(COVERAGE_PROGRAMS):
        got |= program_features(build_program(Device(cfg), seed).insns)
    assert not want - got, f"{name}: never generated: {sorted(want - got)}"
    assert not got - want, f"{name}: generated but not in the ISA of the config: {sorted(got - want)}"


def test_isa_features_follow_the_enums_and_the_units():
    """The feature list has each opcode and memory type, and leaves out the units a configuration does not build."""
    full, fitted = isa_features(campaign_config("pynq-full")), isa_features(campaign_config("pynq-z2"))
    assert {f"op:{op.name}" for op in Opcode} <= fitted
    assert {f"LOAD:{m.name}" for m in MemType if m != MemType.OUT} | {"STORE:OUT"} <= fitted
    assert "LOAD:OUT" not in full and "STORE:INP" not in full
    assert full - fitted == {"epi:dw", "epi:mul", "epi:src_out"}  # pynq-z2 leaves the three units out


@pytest.mark.parametrize("name", ["pynq-z2", "pynq-full", "batch2"])
def test_programs_are_self_contained(name):
    """A program leaves the same DRAM whatever the buffers held before it (junk, or another program's state)."""
    cfg = campaign_config(name)
    fresh = []
    for seed in range(6):
        dev = Device(cfg)
        random_program(dev, seed)
        fresh.append(dev.dram.mem)
    dev = Device(cfg)  # one backend, its buffers filled with junk, then running each program after the others
    sram, rng = dev.backend.sram, np.random.default_rng(0)
    for name in ("inp", "wgt", "acc", "out", "uop", "lut"):
        arr = getattr(sram, name)
        arr[...] = rng.integers(-100, 100, arr.shape).astype(arr.dtype)
    for seed in range(6):
        again = Device(cfg, backend=dev.backend)
        random_program(again, seed)
        assert np.array_equal(again.dram.mem, fresh[seed]), seed


@pytest.mark.parametrize("name", ["pynq-z2", "pynq-full"])
def test_results_do_not_depend_on_timing(name):
    """The tokens order every producer before its consumer: with DRAM 10x slower to answer, slower compute and
    short queues, a program runs in other cycles and leaves the same DRAM."""
    cfg = campaign_config(name)
    t = cfg.timing
    slow = replace(
        t,
        dram_read_latency=10 * t.dram_read_latency,
        dram_write_latency=10 * t.dram_write_latency,
        gemm_setup=7 * t.gemm_setup,
        alu_setup=5 * t.alu_setup,
        cmd_queue_depth=2,
        token_queue_depth=2,
        max_burst_beats=4,
    )
    other = replace(cfg, timing=slow)
    for seed in range(8):
        runs = []
        for c in (cfg, other):
            dev = Device(c)
            runs.append((random_program(dev, seed).counters.cycles, dev.dram.mem))
        (fast_cycles, fast), (slow_cycles, slow_mem) = runs
        assert slow_cycles > fast_cycles
        assert np.array_equal(fast, slow_mem), seed
