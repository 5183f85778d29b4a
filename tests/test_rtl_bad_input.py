"""Bad programs on the RTL: the hardware stops with an error status (or the harness with its cycle limit),
the backend raises the simulator's exception classes with the same kind of message, nothing outside the
program's own stores changes in DRAM, and the backend runs the next program normally."""

from __future__ import annotations

import numpy as np
import pytest
from full_units import FULL

from vdla.isa import FinishInsn, MemInsn, MemType, assemble, encode_program
from vdla.runtime import CommandError, CycleLimitError, DeadlockError, Device, FaultError, TokenError


@pytest.fixture(scope="module")
def dev(rtl_library) -> Device:
    return Device("pynq", backend="rtl")


@pytest.fixture(scope="module")
def full_dev(rtl_library) -> Device:
    """The RTL with every optional unit (full_units.FULL): the depthwise mode's checks."""
    return Device(FULL, backend="rtl")


def run_asm(dev: Device, text: str, **kw):
    return dev.run_program(assemble(text), **kw)


@pytest.fixture(autouse=True)
def still_works_and_nothing_lost(request, monkeypatch):
    """Around every run of a bad program: DRAM outside STORE_ZONE (where the programs below store) is left
    as it was when the run started; afterwards a good program runs (on the RTL device the test uses)."""
    dev = request.getfixturevalue("full_dev" if "full_dev" in request.fixturenames else "dev")
    real_run = dev.backend.run
    checked = []

    def run(dram, *args, **kw):
        before = dram.mem.copy()
        try:
            return real_run(dram, *args, **kw)
        finally:
            changed = np.nonzero(before != dram.mem)[0]
            checked.append(changed.size == 0 or dram.base + changed.min() >= STORE_ZONE)

    monkeypatch.setattr(dev.backend, "run", run)
    yield
    monkeypatch.undo()
    assert checked and all(checked)
    assert run_asm(dev, "finish").counters.insn_counts["FINISH"] == 1


STORE_ZONE = 0x1F000000  # the only place the programs below store to


def test_unknown_opcode(dev):
    buf = dev.alloc(32)
    buf.write(np.frombuffer(encode_program([FinishInsn()]) * 2, np.uint8))
    buf.view()[0] = 7
    with pytest.raises(FaultError, match="cannot fetch the program: instruction 0: unknown opcode 7"):
        dev.backend.run(dev.dram, buf.addr, 2)
    buf.free()


def test_unknown_alu_operation(dev):
    """The 4-bit ALU operation field's values past SQR (9) are no operation: the compute stage's dispatch check
    stops the run (ERR_INSN), and the error names the instruction as the host's decoder does."""
    buf = dev.alloc(32)
    buf.write(np.frombuffer(encode_program([FinishInsn()]) * 2, np.uint8))
    buf.view()[:16] = np.frombuffer((4 | 10 << 108 | 1 << 21 | 1 << 35 | 1 << 49).to_bytes(16, "little"), np.uint8)
    with pytest.raises(
        FaultError, match="^instruction 0: ALU: unknown ALU opcode 10 \\(rejected by the hardware: INSN\\)"
    ):
        dev.backend.run(dev.dram, buf.addr, 2)
    buf.free()


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "load uop_pre sram=0 dram=0x4000000 y=1 x=15 stride=15 pad=0,0,1,0",
            "LOAD UOP_PRE cannot have padding \\(0, 0, 1, 0\\)$",
        ),
        (
            "load uop_pre sram=4094 dram=0x4000000 y=1 x=4 stride=4",
            "LOAD UOP_PRE: SRAM tile \\[4094, 4098\\) exceeds the buffer depth 4096$",
        ),
        ("load uop_pre sram=0 dram=0x4000000 y=1 x=4 stride=4 pop_prev", "pop_prev is not valid on the load stage"),
        ("store uop_pre sram=0 dram=0x7C00000 y=1 x=1 stride=1", "STORE must use memory type OUT, not UOP_PRE$"),
        ("load out sram=0 dram=0x1000000 y=1 x=1 stride=1", "LOAD cannot use memory type OUT$"),
    ],
    ids=["padded", "past-the-buffer", "compute-flag", "store", "load-out"],
)
def test_bad_micro_op_loads_ahead(dev, text, message):
    """LOAD UOP_PRE (micro-ops by the load stage) padded, beyond the micro-op buffer or with a compute-stage flag,
    a STORE of it and a LOAD of OUT (every 3-bit memory type has a meaning) are refused on both backends with the
    same message (the hardware's dispatch check on the RTL)."""
    for target in (Device("pynq"), dev):
        with pytest.raises(FaultError, match=f"instruction 0 \\(.*\\): {message}"):
            run_asm(target, text + "\nfinish")


def test_deadlock_names_each_stage(dev):
    with pytest.raises(DeadlockError) as info:
        run_asm(
            dev,
            """
            load inp sram=0 dram=0x1000000 y=1 x=1 stride=1 pop_next push_next
            gemm uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=0,0 pop_prev push_prev
            finish
        """,
        )
    text = str(info.value)
    assert "load stage: stuck at instruction 0" in text and "waiting for a token on queue compute->load" in text
    assert "compute stage: stuck at instruction 1" in text and "load->compute" in text
    assert "store stage: finished" in text


def test_full_command_queue_deadlock(dev):
    depth = dev.cfg.timing.cmd_queue_depth
    insns = [MemInsn(mem_type=MemType.INP, x_size=0, pop_next=True)]
    insns += [MemInsn(mem_type=MemType.INP, x_size=0) for _ in range(depth)]
    insns += [MemInsn(mem_type=MemType.UOP, x_size=0, push_prev=True), FinishInsn()]
    with pytest.raises(DeadlockError, match="blocked by the full load command queue"):
        dev.run_program(insns)


def test_dma_outside_the_dram_region(dev):
    with pytest.raises(FaultError, match="instruction 0 \\(load inp .*\\): LOAD INP: DRAM bytes .* outside"):
        run_asm(dev, "load inp sram=0 dram=0 y=1 x=1 stride=1\nfinish")
    last = (dev.dram.base + dev.dram.size) // 16 - 1  # a STORE that runs past the end of the region
    with pytest.raises(FaultError, match="instruction 0 \\(store out .*\\): STORE OUT: DRAM bytes .* outside"):
        run_asm(dev, f"store out sram=0 dram={last} y=1 x=2 stride=2\nfinish")
    with pytest.raises(FaultError, match="cannot fetch the program: its 32 bytes at 0x1000 lie outside"):
        dev.backend.run(dev.dram, 0x1000, 2)


def test_index_outside_a_buffer(dev):
    uop = dev.array(np.array([2047], np.uint32))  # dst=2047, the last ACC row
    with pytest.raises(FaultError, match="instruction 1 \\(gemm .*\\): a micro-op index lies outside its buffer"):
        run_asm(
            dev,
            f"load uop sram=0 dram={uop.elem(4)} y=1 x=1 stride=1\n"
            "gemm uop=0:1 iter=2,1 dst=1,0 src=0,0 wgt=0,0\nfinish",
        )
    uop.free()


def test_bias_row_outside_the_acc_buffer(dev):
    """On both backends: an init GEMM whose bias row bias_base + o lies beyond ACC stops with an index error;
    an EPI whose bias_base does is rejected."""
    for target, index in (
        (Device("pynq"), "GEMM init bias row index 2048"),
        (dev, "a micro-op index lies outside its buffer"),
    ):
        uop = target.array(np.array([0], np.uint32))
        with pytest.raises(FaultError, match=f"instruction 2 \\(gemm init .*\\): {index}"):
            run_asm(
                target,
                f"load uop sram=0 dram={uop.elem(4)} y=1 x=1 stride=1\nepi bias=2047\n"
                "gemm init uop=0:1 iter=2,1 dst=1,0 src=0,0 wgt=0,0\nfinish",
            )
        with pytest.raises(FaultError, match="instruction 0 \\(epi .*\\): EPI bias_base=2048 is outside the ACC"):
            run_asm(target, "epi bias=2048\nfinish")
        uop.free()


def test_instruction_invalid_on_its_stage(dev):
    with pytest.raises(FaultError, match="instruction 0 .*: pop_prev is not valid on the load stage"):
        run_asm(dev, "load inp sram=0 dram=0x1000000 y=1 x=1 stride=1 pop_prev\nfinish")
    with pytest.raises(FaultError, match="SRAM tile \\[2040, 2056\\) exceeds the buffer depth 2048"):
        run_asm(dev, "load inp sram=2040 dram=0x1000000 y=4 x=4 stride=4\nfinish")
    with pytest.raises(FaultError, match="empty micro-op range"):
        run_asm(dev, "gemm uop=3:3 iter=1,1 dst=0,0 src=0,0 wgt=0,0\nfinish")


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "load lut sram=0 dram=0x1000000 y=1 x=15 stride=15 pad=0,0,1,0",
            "LOAD LUT cannot have padding \\(0, 0, 1, 0\\)$",
        ),
        (
            "load lut sram=10 dram=0x1000000 y=1 x=8 stride=8",
            "LOAD LUT: SRAM tile \\[10, 18\\) exceeds the buffer depth 16$",
        ),
        (
            "load lut sram=0 dram=0x1000000 y=2 x=9 stride=9",
            "LOAD LUT: SRAM tile \\[0, 18\\) exceeds the buffer depth 16$",
        ),
        ("store lut sram=0 dram=0x1F00000 y=1 x=1 stride=1", "STORE must use memory type OUT, not LUT$"),
    ],
    ids=["padded", "past-the-table", "rows-past-the-table", "store"],
)
def test_bad_table_loads(dev, text, message):
    """LOADs of the activation table with padding or beyond its lut_depth elements, and a STORE of it, are
    refused on both backends with the same message (the hardware's dispatch check on the RTL)."""
    for target in (Device("pynq"), dev):
        with pytest.raises(FaultError, match=f"instruction 0 \\(.*\\): {message}"):
            run_asm(target, text + "\nfinish")


def test_epi_lut_needs_a_table(dev):
    """A program that sets EPI lut before any LOAD LUT is refused before it runs, on both backends; with the
    table loaded first it runs."""
    for target in (Device("pynq"), dev):
        cmd = target.commands()
        cmd.epi(lut=True)
        with pytest.raises(CommandError, match="instruction 0: EPI lut before any LOAD LUT"):
            cmd.synchronize()
        table = target.array(np.arange(256, dtype=np.uint8))
        cmd = target.commands()
        cmd.load_table(table)
        cmd.epi(lut=True)
        assert cmd.synchronize().counters.bytes_loaded["LUT"] == 256
        table.free()


def test_program_structure_errors(dev):
    with pytest.raises(FaultError, match="the program does not end with FINISH"):
        run_asm(dev, "load inp x=0")
    buf = dev.array(np.frombuffer(encode_program([FinishInsn(), FinishInsn()]), np.uint8))
    with pytest.raises(FaultError, match="instruction 0: FINISH before the end of the program"):
        dev.backend.run(dev.dram, buf.addr, 2)
    with pytest.raises(FaultError, match="is not 16-byte aligned"):
        dev.backend.run(dev.dram, buf.addr + 8, 1)
    with pytest.raises(TokenError, match="ended with tokens left in queues: \\{'load->compute': 1\\}"):
        run_asm(dev, "load inp x=0 push_next\nfinish")
    buf.free()


def test_cycle_limit_names_the_running_instruction(dev):
    with pytest.raises(
        CycleLimitError, match="cycle limit 500 reached at instruction 1 \\(alu add .*\\) on the compute stage"
    ):
        run_asm(
            dev,
            "load uop sram=0 dram=0x4000000 y=1 x=1 stride=1\n"
            "alu add uop=0:1 iter=1000,1 dst=0,0 src=0,0 imm=1\nfinish",
            max_cycles=500,
        )


@pytest.mark.parametrize("phase", range(3))
def test_an_error_shows_with_its_details(dev, phase):
    """The host never sees half an error: with STATUS polled every three cycles (at three phases, so that every
    cycle is read), STATUS.ERROR reads 1 only with its code and unit, CONTROL.BUSY down and ERROR_INSN set."""
    from vdla.runtime import registers as R

    h = dev.backend.harness
    real_run, seen = h.run, []

    def poll() -> bool:
        """Read STATUS (two cycles; the rest when it shows an error); True on an error."""
        status = h.read(R.offset("STATUS"))
        error = R.get_field(status, "STATUS", "ERROR")
        seen.append((status, *(h.read(R.offset(r)) for r in ("CONTROL", "ERROR_INSN"))) if error else (status,))
        return bool(error)

    def polling_run(cycles: int) -> bool:
        real_run(phase)
        for _ in range(cycles):
            if poll() or real_run(1):
                poll()  # and once more
                return real_run(cycles) or True
        return False

    h.run = polling_run
    uop = dev.array(np.array([2047], np.uint32))
    try:
        with pytest.raises(FaultError, match="micro-op index"):
            run_asm(
                dev,
                f"load uop sram=0 dram={uop.elem(4)} y=1 x=1 stride=1\n"
                "gemm uop=0:1 iter=2,1 dst=1,0 src=0,0 wgt=0,0\nfinish",
            )
    finally:
        del h.run
        uop.free()
    errors = [s for s in seen if len(s) == 3]
    assert len(seen) > 20 and errors, seen
    for status, busy, insn in errors:
        assert insn == 1  # the GEMM, the compute stage's second instruction
        assert R.get_field(status, "STATUS", "ERROR_CODE") == R.ERRORS["INDEX"][0]
        assert R.ERROR_UNITS[R.get_field(status, "STATUS", "ERROR_UNIT")] == "compute"
        assert busy == 0


@pytest.mark.parametrize(
    "text,message",
    [
        ("epi dw=6,1,8", "EPI dw: kernel 6 outside \\[1, 5\\]"),
        ("epi dw=0,1,8", "EPI dw: kernel 0 outside \\[1, 5\\]"),
        ("epi dw=2,3,8", "EPI dw: stride 3 outside \\[1, kernel 2\\]"),
    ],
    ids=["kernel-6", "kernel-0", "stride-3"],
)
def test_bad_depthwise_state(full_dev, text, message):
    """An EPI dw whose kernel the window cannot hold, or whose stride exceeds its kernel, is refused on both
    backends with the same message (the hardware's dispatch check on the RTL)."""
    for target in (Device(FULL), full_dev):
        with pytest.raises(FaultError, match=f"instruction 0 \\(.*\\): {message}"):
            run_asm(target, text + "\nfinish")


def test_depthwise_window_outside_inp(full_dev):
    """A depthwise-mode GEMM whose window reaches past INP (rows src + ky * pitch + kx) stops with an index
    error on both backends, though its micro-op's src lies inside."""
    for target, index in (
        (Device(FULL), "GEMM INP \\(depthwise window row\\) index 2050"),
        (full_dev, "a micro-op index lies outside its buffer"),
    ):
        uop = target.array(np.array([2040 << 11], np.uint32))  # dst 0, src 2040, wgt 0
        with pytest.raises(FaultError, match=f"instruction 2 \\(gemm .*\\): {index}"):
            run_asm(
                target,
                f"load uop sram=0 dram={uop.elem(4)} y=1 x=1 stride=1\nepi dw=3,1,4\n"
                "gemm uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=0,0\nfinish",
            )
        uop.free()


@pytest.mark.parametrize(
    "text,message",
    [
        ("alu add pipe uop=0:1 iter=1,2 dst=0,1 src=0,0", "pipe is a MUL's or an SQR's, not ADD's$"),
        ("alu mul pipe uop=0:1 iter=1,2 dst=0,1 src=0,0 imm=3", "a pipelined MUL reads its source row"),
        ("alu mul pipe uop=0:2 iter=1,2 dst=0,1 src=0,0", "a pipelined MUL holds .*one micro-op \\(has 2\\)"),
        ("alu mul pipe uop=0:1 iter=1,2 dst=0,1 src=0,1", "a pipelined MUL holds .* src_factor_in 0 \\(is 1\\)$"),
        ("alu sqr pipe uop=0:2 iter=1,2 dst=0,1 src=0,0", "a pipelined SQR has one micro-op \\(has 2\\)$"),
        ("alu sqr uop=0:1 iter=1,2 dst=0,1 src=0,0 imm=3", "SQR reads ACC\\[dst\\] alone: no immediate, no reset$"),
        ("alu sqr reset uop=0:1 iter=1,2 dst=0,1 src=0,0", "SQR reads ACC\\[dst\\] alone: no immediate, no reset$"),
    ],
    ids=["add", "imm", "two-uops", "moving-source", "sqr-two-uops", "sqr-imm", "sqr-reset"],
)
def test_bad_pipe_flag(dev, text, message):
    """ALU pipe on anything but a MUL holding one source row or an SQR of one micro-op, and an SQR with an
    immediate or a reset, are refused on both backends with the same message
    (the hardware's dispatch check on the RTL)."""
    for target in (Device("pynq"), dev):
        with pytest.raises(FaultError, match=f"instruction 0 \\(.*\\): {message}"):
            run_asm(target, text + "\nfinish")


@pytest.mark.parametrize(
    "dst,src,loop,where",
    [
        (4, 9, "dst=0,0", "iteration \\(0, 0\\) writes ACC row 4, which the next iteration reads as its destination"),
        (5, 7, "dst=0,1", "iteration \\(0, 2\\) writes ACC row 7, which the next iteration reads as its held source"),
    ],
    ids=["destination", "held-row"],
)
@pytest.mark.parametrize("op", ["mul", "sqr"])
def test_pipelined_mul_hazard(dev, dst, src, loop, where, op):
    """A pipelined MUL whose inner iteration reads the row the one before it writes (its destination, or the
    held source row) stops with a fault on both backends: the simulator names the iteration, the hardware the
    instruction (ERR_HAZARD). Without pipe the same instruction runs. A pipelined SQR reads no source row: the
    same destination faults, the rows past the micro-op's src field run."""
    name = op.upper()
    if op == "sqr" and "held" in where:
        where = None
    for target, message in (
        (Device("pynq"), f"pipelined {name}: {where}"),
        (dev, f"pipelined {name}: an iteration reads"),
    ):
        uop = target.array(np.array([dst | src << 11], np.uint32))
        load = f"load uop sram=0 dram={uop.elem(4)} y=1 x=1 stride=1\n"
        text = load + f"alu {op}{{}} uop=0:1 iter=1,4 {loop} src=0,0\nfinish"
        if where is None:  # an SQR over rows 5..8: its micro-op's source row 7 is not read
            run_asm(target, text.format(" pipe"))
            uop.free()
            continue
        with pytest.raises(FaultError, match=f"instruction 1 \\(alu {op} pipe .*\\): {message}"):
            run_asm(target, text.format(" pipe"))
        run_asm(target, text.format(""))
        uop.free()


@pytest.mark.parametrize(
    "text,message",
    [
        ("epi dw=3,1,8", "EPI dw: config 'pynq-z2' has no depthwise mode"),
        ("epi mul=4,0", "EPI mul: config 'pynq-z2' has no OUT-path multiplier"),
        ("epi src_out", "EPI src_out: config 'pynq-z2' has no copy of OUT"),
    ],
    ids=["dw", "mul", "src_out"],
)
def test_units_the_pynq_build_leaves_out(dev, text, message):
    """The pynq build (within the xc7z020's timing-closure budget) has no depthwise mode, OUT-path multiplier or
    copy of OUT for the GEMMs: an EPI that asks for one is refused on both backends (the dispatch check)."""
    for target in (Device("pynq"), dev):
        with pytest.raises(FaultError, match=f"instruction 0 \\(.*\\): {message}"):
            run_asm(target, text + "\nfinish")
