"""The runtime API: DRAM allocator, command builder (uop cache, dependencies, errors), tiled matmul."""

import subprocess
import sys

import numpy as np
import pytest

import vdla.runtime.backend as backend_module
from vdla.config import ConfigError, load_config
from vdla.errors import VdlaError
from vdla.isa import AluOp, MemInsn, MemType, Queue, Stage
from vdla.runtime import (
    BackendError,
    CommandError,
    CycleLimitError,
    DeadlockError,
    Device,
    Dram,
    DramError,
    FaultError,
    RunError,
    Simulator,
    TokenError,
    make_backend,
)
from vdla.runtime import registers as R
from vdla.runtime.backend import register_backend
from vdla.zoo.tiled_matmul import matmul_oracle, tiled_matmul


def test_dram_allocator_alignment_reuse_and_errors():
    dram = Dram(1 << 16, base=0x4000_0000)
    a = dram.alloc(100)
    b = dram.alloc(5000, align=256)
    assert a.addr == 0x4000_0000 and b.addr % 256 == 0 and b.addr >= a.addr + 100
    a.write(np.arange(100, dtype=np.uint8))
    assert a.read()[99] == 99
    with pytest.raises(DramError, match="overflows a 100-byte buffer"):
        a.write(np.zeros(101, np.uint8))
    a.free()
    x = dram.alloc(64)
    assert x.addr == 0x4000_0000  # freed space is reused
    with pytest.raises(DramError, match="out of DRAM: no free block of 65536 bytes"):
        dram.alloc(1 << 16)
    with pytest.raises(DramError, match="outside the region"):
        dram.view(0x4000_0000 - 1, 2)
    with pytest.raises(DramError, match="not allocated"):
        a.free()
    c = dram.alloc(64, align=8)
    with pytest.raises(DramError, match="not aligned to the 64-byte element size"):
        c.elem(64, offset=8)
    for buf in (x, b, c):
        buf.free()
    assert dram.alloc(1 << 16).addr == 0x4000_0000  # all free blocks merged again


def test_allocator_merges_free_blocks():
    dram = Dram(3 * 4096)
    bufs = [dram.alloc(4096) for _ in range(3)]
    for b in bufs:
        b.free()
    assert dram.alloc(3 * 4096).addr == 0


def test_builder_attaches_flags_and_inserts_nops():
    dev = Device()
    cmd = dev.commands()
    buf = dev.array(np.zeros((4, 16), np.int8))
    cmd.dep_pop(Stage.COMPUTE, Stage.LOAD)  # no earlier instruction: carried by the next load
    cmd.load(MemType.INP, 0, buf, 0, 1, 4, 4)
    cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
    cmd.dep_push(Stage.LOAD, Stage.COMPUTE)  # second push on the same instruction: a no-op carries it
    cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
    cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
    cmd.dep_push(Stage.COMPUTE, Stage.LOAD)
    insns = cmd.finish()
    first = insns[0]
    assert isinstance(first, MemInsn) and first.pop_next and first.push_next and first.x_size == 4
    assert insns[1].is_nop and insns[1].push_next
    pops = [i for i in insns if i.pop_prev]
    assert len(pops) == 2 and all(i.stage == Stage.COMPUTE for i in pops)
    assert sum(i.push_prev for i in insns if i.stage == Stage.COMPUTE) == 1
    with pytest.raises(CommandError, match="no dependency queue from the load stage to the store stage"):
        cmd.dep_push(Stage.LOAD, Stage.STORE)


def test_uop_kernel_cache_reuses_resident_kernels():
    dev = Device()
    cmd = dev.commands()
    for _ in range(3):
        cmd.gemm([(0, 0, 0), (1, 1, 1)], reset=True)
    cmd.alu(AluOp.ADD, [(0, 1)])
    uop_loads = [i for i in cmd.finish() if isinstance(i, MemInsn) and i.mem_type == MemType.UOP and not i.is_nop]
    assert len(uop_loads) == 2  # the GEMM kernel once, the ALU kernel once


def test_uop_buffer_eviction_reloads_kernels():
    dev = Device("block8")  # 4096-entry UOP buffer
    cmd = dev.commands()
    big = [(0, 0, 0)] * 3000
    for k in range(3):
        cmd.gemm([(k, 0, 0)] + big[1:], reset=True)
    loads = [i for i in cmd.finish() if isinstance(i, MemInsn) and i.mem_type == MemType.UOP and not i.is_nop]
    assert [ld.sram_base for ld in loads] == [0, 0, 0]
    cmd.synchronize()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda cmd, buf: cmd.load(MemType.INP, 2000, buf, 0, 1, 64, 64), "SRAM tile \\[2000, 2064\\) exceeds"),
        (lambda cmd, buf: cmd.load(MemType.INP, 0, buf, 1, 2, 64, 64), "overruns its 2048-byte buffer"),
        (lambda cmd, buf: cmd.load(MemType.OUT, 0, buf, 0, 1, 1, 1), "cannot load into memory type OUT"),
        (lambda cmd, buf: cmd.load(MemType.INP, 0, buf, 0, 1, 1, 1, pad=(16, 0, 0, 0)), "y_pad_0=16 out of range"),
        (lambda cmd, buf: cmd.gemm([(2047, 0, 0)], iter_out=2, dst_factor=(1, 0)), "dst index reaches 2048"),
        (lambda cmd, buf: cmd.gemm([(0, 0, 1024)]), "wgt index reaches 1024"),
        (lambda cmd, buf: cmd.alu(AluOp.ADD, [(0, 0)], imm=40000), "immediate 40000 does not fit"),
        (
            lambda cmd, buf: cmd.alu(AluOp.ADD, [(0, 2047)], iter_out=2, src_factor=(1, 0), reset=True),
            "src index reaches 2048",
        ),
        (lambda cmd, buf: cmd.gemm(np.zeros((0, 3))), "at least one micro-op"),
    ],
)
def test_bad_requests_raise_before_running(call, message):
    dev = Device()
    buf = dev.array(np.zeros((128, 16), np.int8))
    cmd = dev.commands()
    with pytest.raises((CommandError, ValueError), match=message):
        call(cmd, buf)
    assert cmd.insns == [] or all(i.x_size for i in cmd.insns if isinstance(i, MemInsn))


def test_misaligned_buffer_is_rejected():
    dev = Device()
    buf = dev.alloc(4096, align=8)
    dev.alloc(8, align=8)
    odd = dev.alloc(256, align=8)
    cmd = dev.commands()
    if odd.addr % 256:
        with pytest.raises(DramError, match="not aligned to the 256-byte element size"):
            cmd.load(MemType.WGT, 0, odd, 0, 1, 1, 1)
    assert buf.addr % 8 == 0


def test_unbalanced_program_is_rejected_at_finish():
    cmd = Device().commands()
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    with pytest.raises(CommandError, match="token queue compute->store: pushes exceed pops by 1"):
        cmd.finish()


@pytest.mark.parametrize("config", ["pynq", "block8", "batch2", "osdi18"])
@pytest.mark.parametrize("vthreads", [1, 2, 3])
def test_tiled_matmul_is_exact(config, vthreads):
    dev = Device(config)
    rng = np.random.default_rng(vthreads)
    a = rng.integers(-128, 128, (96, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (48, 64), dtype=np.int8)
    res = tiled_matmul(dev, a, b, shift=7, vthreads=vthreads, tile_rows=16)
    np.testing.assert_array_equal(res.out, matmul_oracle(a, b, 7))
    assert res.tiles > 1


def test_matmul_shape_errors():
    dev = Device()
    with pytest.raises(CommandError, match="must agree in K"):
        tiled_matmul(dev, np.zeros((16, 32), np.int8), np.zeros((16, 48), np.int8))
    with pytest.raises(CommandError, match="weight blocks per output block"):
        tiled_matmul(dev, np.zeros((16, 16 * 1024), np.int8), np.zeros((16, 16 * 1024), np.int8))


def test_load_kernel_preloads_once():
    dev = Device()
    cmd = dev.commands()
    bgn, end = cmd.load_kernel([(0, 0, 0), (1, 1, 1)])
    n = len(cmd.insns)
    cmd.gemm([(0, 0, 0), (1, 1, 1)], reset=True)
    assert (bgn, end) == (cmd.insns[-1].uop_bgn, cmd.insns[-1].uop_end) and len(cmd.insns) == n + 1


def test_kernels_loaded_back_to_back_share_one_load():
    dev = Device()
    cmd = dev.commands()
    spans = [cmd.load_kernel([(k, k, k)] * (k + 1)) for k in range(4)]
    cmd.gemm([(1, 2, 3)])  # its kernel joins the load; the GEMM ends the run of loads
    cmd.load_kernel([(9, 9, 9)])
    uop_loads = [i for i in cmd.finish() if isinstance(i, MemInsn) and i.mem_type == MemType.UOP]
    assert [(i.sram_base, i.x_size) for i in uop_loads] == [(0, 11), (11, 1)]
    assert spans == [(0, 1), (1, 3), (3, 6), (6, 10)]


def test_run_errors_are_one_backend_neutral_hierarchy():
    """Every backend raises these; the CLI and callers catch them as RunError or VdlaError."""
    assert issubclass(RunError, VdlaError) and issubclass(RunError, RuntimeError)
    for cls in (FaultError, DeadlockError, CycleLimitError, TokenError, BackendError):
        assert issubclass(cls, RunError)


def test_backends_come_from_the_registry(monkeypatch):
    """make_backend finds a backend by name in the registry and imports its module only then; an unknown name,
    a second registration of a name and a target that is not 'module:attribute' are errors naming them."""
    monkeypatch.setattr(backend_module, "BACKENDS", dict(backend_module.BACKENDS))
    with pytest.raises(ConfigError, match="unknown backend 'nope'; the known backends are sim, rtl, pynq"):
        make_backend("nope", load_config())
    register_backend("sim-again", "vdla.runtime.sim.engine:Simulator")
    assert isinstance(make_backend("sim-again", load_config()), Simulator)
    with pytest.raises(ConfigError, match="'sim' is already registered"):
        register_backend("sim", "vdla.runtime.sim.engine:Simulator")
    with pytest.raises(ConfigError, match="is not 'module:attribute'"):
        register_backend("bad", "vdla.runtime.sim.engine.Simulator")
    register_backend("missing", "vdla.runtime.sim.engine:NoSuchBackend")
    with pytest.raises(ConfigError, match="has no attribute 'NoSuchBackend'"):
        make_backend("missing", load_config())
    code = "import sys; from vdla.runtime import Device; Device('pynq', backend='sim'); print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'vdla.runtime.sim.engine'" in out, out
    assert "'vdla.runtime.rtl" not in out and "'vdla.runtime.pynq_backend'" not in out, out


def test_queue_token_bytes_follow_the_tokens_register():
    """The RTL's TOKENS register counts each queue in the byte given by Queue.token_byte."""
    doc = next(r.doc for r in R.REGS if r.name == "TOKENS")
    for q in Queue:
        b = q.token_byte
        assert f"{q.name} {8 * b + 7}:{8 * b}" in doc
