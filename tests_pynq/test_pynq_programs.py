"""Unmodified driver code on the simulated board: the runtime's programs, compiled ResNet-18 layers, bad
programs and timeouts, and a few hundred mixed runs without reloading. Results are checked against numpy
(bit-exact with the simulator), cycle counts and error messages against the ``rtl`` backend."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_pynq_board import add_program, expected

from vdla.config import load_config
from vdla.isa import FinishInsn, MemInsn, MemType, assemble, encode_program
from vdla.runtime import CycleLimitError, DeadlockError, Device, FaultError, RunError, TokenError
from vdla.runtime.pynq_backend import BoardTimeoutError
from vdla.zoo.resnet import layer_case, layer_specs
from vdla.zoo.workloads import SUITE, alu_chain, matmul, padded_conv, store_stream


@pytest.mark.parametrize("workload", SUITE, ids=lambda w: w.name)
def test_runtime_programs_are_right_with_the_cycles_of_the_rtl(dev, rtl, workload):
    """Each workload checks its own result against numpy (raising otherwise)."""
    assert workload.run(dev).counters.cycles == workload.run(rtl).counters.cycles


@pytest.fixture(scope="module")
def layers():
    cfg = load_config("pynq")
    specs = layer_specs("resnet18")
    out = {}
    for name in ("C5", "C11", "C12"):
        case = layer_case(name, specs[name], 0)
        layer = case.compile(cfg, vthreads=2)
        ref = case.oracle(layer.epilogue.bounds)
        out[name] = (layer, case.x, ref)
    return out


@pytest.mark.parametrize("name", ["C5", "C11", "C12"])
def test_compiled_resnet18_layers(dev, rtl, sim, layers, name):
    layer, x, ref = layers[name]
    run = layer.run(dev, x)
    np.testing.assert_array_equal(run.out, ref)
    np.testing.assert_array_equal(run.out, layer.run(sim, x).out)
    assert run.counters.cycles == layer.run(rtl, x).counters.cycles


# ---- bad programs: the same error, and the same message, as on the rtl backend ------------------------------
def _raw(dev: Device, words: bytes, count: int, offset: int = 0):
    buf = dev.array(np.frombuffer(words, np.uint8))
    try:
        return dev.backend.run(dev.dram, buf.addr + offset, count)
    finally:
        buf.free()


def _index_outside(dev: Device):
    uop = dev.array(np.array([2047], np.uint32))
    try:
        return dev.run_program(
            assemble(
                f"load uop sram=0 dram={uop.elem(4)} y=1 x=1 stride=1\ngemm uop=0:1 iter=2,1 dst=1,0 src=0,0 wgt=0,0\n"
                "finish"
            )
        )
    finally:
        uop.free()


def _full_command_queue(dev: Device):
    depth = dev.cfg.timing.cmd_queue_depth
    insns = [MemInsn(mem_type=MemType.INP, x_size=0, pop_next=True)]
    insns += [MemInsn(mem_type=MemType.INP, x_size=0) for _ in range(depth)]
    insns += [MemInsn(mem_type=MemType.UOP, x_size=0, push_prev=True), FinishInsn()]
    return dev.run_program(insns)


def _asm(text: str):
    return lambda dev: dev.run_program(assemble(text))


BAD = {
    "unknown opcode": (FaultError, lambda dev: _raw(dev, bytes([7]) + (encode_program([FinishInsn()]) * 2)[1:], 2)),
    "load of OUT": (FaultError, _asm("load out sram=0 dram=0x1000000 y=1 x=1 stride=1\nfinish")),
    "padded micro-ops ahead": (
        FaultError,
        _asm("load uop_pre sram=0 dram=0x4000000 y=1 x=4 stride=4 pad=0,0,1,0\nfinish"),
    ),
    "deadlock": (
        DeadlockError,
        _asm(
            "load inp sram=0 dram=0x1000000 y=1 x=1 stride=1 pop_next push_next\n"
            "gemm uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=0,0 pop_prev push_prev\nfinish"
        ),
    ),
    "full command queue": (DeadlockError, _full_command_queue),
    "load outside the region": (FaultError, _asm("load inp sram=0 dram=0 y=1 x=1 stride=1\nfinish")),
    "store past the region's end": (
        FaultError,
        lambda dev: dev.run_program(
            assemble(f"store out sram=0 dram={(dev.dram.base + dev.dram.size) // 16 - 1} y=1 x=2 stride=2\nfinish")
        ),
    ),
    "fetch outside the region": (FaultError, lambda dev: dev.backend.run(dev.dram, 0x1000, 2)),
    "index outside a buffer": (FaultError, _index_outside),
    "invalid flag": (FaultError, _asm("load inp sram=0 dram=0x1000000 y=1 x=1 stride=1 pop_prev\nfinish")),
    "empty micro-op range": (FaultError, _asm("gemm uop=3:3 iter=1,1 dst=0,0 src=0,0 wgt=0,0\nfinish")),
    "no finish": (FaultError, _asm("load inp x=0")),
    "finish early": (FaultError, lambda dev: _raw(dev, encode_program([FinishInsn(), FinishInsn()]), 2)),
    "misaligned": (FaultError, lambda dev: _raw(dev, encode_program([FinishInsn()]) * 2, 1, offset=8)),
    "tokens left": (TokenError, _asm("load inp x=0 push_next\nfinish")),
}


def _message(dev: Device, program) -> tuple[type, str]:
    try:
        program(dev)
    except RunError as e:
        # the DRAM regions differ in size (the board's is part of its CMA pool): addresses in them too
        return type(e), re.sub(r"0x[0-9a-f]{6,}", "ADDR", str(e))
    raise AssertionError("the program ran")


@pytest.mark.parametrize("case", BAD)
def test_bad_programs_fail_as_on_the_rtl_and_the_next_run_works(dev, rtl, case):
    kind, program = BAD[case]
    got = _message(dev, program)
    assert got == _message(rtl, program)
    assert got[0] is kind
    data = np.arange(64, dtype=np.int32)
    out, _ = add_program(dev, data, 2)
    assert np.array_equal(out.read(np.int8, (4, 16)), expected(data, 2))


LONG = "load uop sram=0 dram=0x4000000 y=1 x=1 stride=1\nalu add uop=0:1 iter=16000,1 dst=0,0 src=0,0 imm=1\nfinish"


def test_cycle_limit_names_the_running_instruction_and_resets_the_logic(dev, rtl, board):
    resets = board.resets
    with pytest.raises(CycleLimitError) as e:
        dev.run_program(assemble(LONG), max_cycles=500)
    assert re.match(r"cycle limit 500 reached at instruction 1 \(alu add .*\) on the compute stage", str(e.value))
    assert "compute stage: executing instruction 1 (alu add" in str(e.value)
    assert board.resets == resets + 1
    assert dev.run_program(assemble(LONG)).counters.cycles == rtl.run_program(assemble(LONG)).counters.cycles


def test_a_board_that_never_ends_times_out_naming_the_stage(dev, rtl, board, monkeypatch):
    resets = board.resets
    monkeypatch.setattr(dev.backend, "timeout_s", 0.0)
    with pytest.raises(BoardTimeoutError) as e:
        dev.run_program(assemble(LONG))
    text = str(e.value)
    assert "did not end the run within 0 s" in text and "on the compute stage" in text
    assert "compute stage: executing instruction 1 (alu add" in text and "reset" in text
    assert board.resets == resets + 1
    monkeypatch.undo()
    data = np.arange(64, dtype=np.int32)
    out, _ = add_program(dev, data, 4)
    assert np.array_equal(out.read(np.int8, (4, 16)), expected(data, 4))


# ---- many runs without reloading ----------------------------------------------------------------------------
def _add(imm: int):
    def run(dev: Device):
        data = np.arange(-32, 32, dtype=np.int32) * imm
        out, result = add_program(dev, data, imm)
        if not np.array_equal(out.read(np.int8, (4, 16)), expected(data, imm)):
            raise AssertionError(f"add {imm} is wrong on {dev.backend.name}")
        return result

    return run


def _layer(layers, name: str):
    def run(dev: Device):
        layer, x, ref = layers[name]
        r = layer.run(dev, x)
        if not np.array_equal(r.out, ref):
            raise AssertionError(f"layer {name} is wrong on {dev.backend.name}")
        return r.counters

    return run


def test_hundreds_of_mixed_runs_leak_no_state(dev, rtl, layers):
    """300 runs in a random order of programs that leave different state behind (epilogue, micro-op
    kernels, ACC contents, errors, tokens): every run gives the result and the cycle count (or the error)
    of the same program run alone on a freshly reset RTL."""
    programs = {
        "matmul": lambda d: matmul(d, 64, 64, 48, 2, seed=3),
        "alu": lambda d: alu_chain(d, 2, tiles=2, n=32),
        "store": lambda d: store_stream(d, 1, tiles=4),
        "pad": lambda d: padded_conv(d, 2, tiles=2),
        "add1": _add(1),
        "add7": _add(7),
        "layer C5": _layer(layers, "C5"),
        "deadlock": BAD["deadlock"][1],
        "index": _index_outside,
        "tokens": BAD["tokens left"][1],
    }

    def outcome(d: Device, program) -> object:
        try:
            r = program(d)
        except RunError as e:
            return type(e).__name__, str(e)
        return getattr(r, "counters", r).cycles

    want = {name: outcome(rtl, p) for name, p in programs.items()}
    order = np.random.default_rng(13).choice(list(programs), 300)
    got = [(name, outcome(dev, programs[name])) for name in order]
    wrong = [(i, name, o, want[name]) for i, (name, o) in enumerate(got) if o != want[name]]
    assert not wrong, wrong[:5]
    assert len({name for name, _ in got}) == len(programs)
