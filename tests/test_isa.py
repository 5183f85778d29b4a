import numpy as np
import pytest
from full_units import FULL
from hypothesis import given
from hypothesis import strategies as st

from vdla.config import load_config
from vdla.isa import (
    AluInsn,
    AluOp,
    EpiInsn,
    FinishInsn,
    GemmInsn,
    IsaError,
    MemInsn,
    MemType,
    Queue,
    Stage,
    assemble,
    decode,
    decode_program,
    decode_uops,
    disassemble,
    encode,
    encode_program,
    encode_uops,
    pops_of,
    pushes_of,
    validate_program,
)

CFG = load_config()


def bits(width):
    return st.integers(0, (1 << width) - 1)


mem_insns = st.builds(
    MemInsn,
    store=st.booleans(),
    mem_type=st.sampled_from(list(MemType)),
    sram_base=bits(16),
    dram_base=bits(32),
    y_size=bits(16),
    x_size=bits(16),
    x_stride=bits(16),
    y_pad_0=bits(4),
    y_pad_1=bits(4),
    x_pad_0=bits(4),
    x_pad_1=bits(4),
)
loop = dict(
    reset=st.booleans(),
    uop_bgn=bits(13),
    uop_end=bits(14),
    iter_out=bits(14),
    iter_in=bits(14),
    dst_factor_out=bits(11),
    dst_factor_in=bits(11),
    src_factor_out=bits(11),
    src_factor_in=bits(11),
)
gemm_insns = st.builds(GemmInsn, wgt_factor_out=bits(10), wgt_factor_in=bits(10), init=st.booleans(), **loop)
alu_insns = st.builds(
    AluInsn,
    alu_opcode=st.sampled_from(list(AluOp)),
    use_imm=st.booleans(),
    imm=st.integers(-(1 << 15), (1 << 15) - 1),
    **(loop | {"iter_in": bits(13)}),  # the ALU's iter_in is 13 bits (bit 62 is use_imm)
)
epi_insns = st.builds(
    EpiInsn,
    req=st.booleans(),
    relu=st.booleans(),
    shift=bits(5),
    bias=st.booleans(),
    bias_base=bits(16),
    mul=st.booleans(),
    mul_shift=bits(6),
    mul_base=bits(16),
)
any_insn = st.one_of(mem_insns, gemm_insns, alu_insns, epi_insns, st.builds(FinishInsn))


@st.composite
def with_flags(draw, insn_strategy):
    insn = draw(insn_strategy)
    for f in ("pop_prev", "pop_next", "push_prev", "push_next"):
        setattr(insn, f, draw(st.booleans()))
    return insn


@given(with_flags(any_insn))
def test_encode_decode_round_trip(insn):
    word = encode(insn)
    assert 0 <= word < 1 << 128
    assert decode(word) == insn


@given(st.lists(with_flags(any_insn), max_size=8))
def test_program_round_trip_and_asm_round_trip(insns):
    data = encode_program(insns)
    assert len(data) == 16 * len(insns)
    assert decode_program(data) == insns
    for insn in insns:  # assembly shows the immediate only where it is used
        if isinstance(insn, AluInsn) and not insn.use_imm:
            insn.imm = 0
    assert assemble(disassemble(insns, numbered=True)) == insns


def pack(fields):
    """Independent packer from the documented bit ranges: {(msb, lsb): value}."""
    word = 0
    for (msb, lsb), v in fields.items():
        assert 0 <= v < 1 << (msb - lsb + 1)
        word |= v << lsb
    return word


def test_documented_bit_layout():
    load = MemInsn(
        mem_type=MemType.WGT,
        sram_base=0x1234,
        dram_base=0xDEADBEEF,
        y_size=0x0102,
        x_size=0x0304,
        x_stride=0x0506,
        y_pad_0=1,
        y_pad_1=2,
        x_pad_0=3,
        x_pad_1=4,
        pop_next=True,
        push_next=True,
    )
    assert encode(load) == pack(
        {
            (2, 0): 0,
            (4, 4): 1,
            (6, 6): 1,
            (9, 7): 1,
            (25, 10): 0x1234,
            (57, 26): 0xDEADBEEF,
            (79, 64): 0x0102,
            (95, 80): 0x0304,
            (111, 96): 0x0506,
            (115, 112): 1,
            (119, 116): 2,
            (123, 120): 3,
            (127, 124): 4,
        }
    )
    gemm = GemmInsn(
        reset=True,
        uop_bgn=5,
        uop_end=9,
        iter_out=7,
        iter_in=11,
        dst_factor_out=13,
        dst_factor_in=17,
        src_factor_out=19,
        src_factor_in=23,
        wgt_factor_out=29,
        wgt_factor_in=31,
        pop_prev=True,
    )
    assert encode(gemm) == pack(
        {
            (2, 0): 2,
            (3, 3): 1,
            (7, 7): 1,
            (20, 8): 5,
            (34, 21): 9,
            (48, 35): 7,
            (62, 49): 11,
            (74, 64): 13,
            (85, 75): 17,
            (96, 86): 19,
            (107, 97): 23,
            (117, 108): 29,
            (127, 118): 31,
        }
    )
    alu = AluInsn(
        alu_opcode=AluOp.SHR, use_imm=True, imm=-2, uop_bgn=1, uop_end=2, iter_out=1, iter_in=1, push_prev=True
    )
    assert encode(alu) == pack(
        {
            (2, 0): 4,
            (5, 5): 1,
            (20, 8): 1,
            (34, 21): 2,
            (48, 35): 1,
            (61, 49): 1,
            (62, 62): 1,
            (111, 108): 3,
            (127, 112): 0xFFFE,
        }
    )
    lsum = AluInsn(alu_opcode=AluOp.LSUM, reset=True, iter_in=(1 << 13) - 1, pipe=True)
    assert encode(lsum) == pack(
        {(2, 0): 4, (7, 7): 1, (34, 21): 1, (48, 35): 1, (61, 49): 0x1FFF, (63, 63): 1, (111, 108): 8}
    )
    sqr = AluInsn(alu_opcode=AluOp.SQR, imm=63, iter_in=5, pipe=True)  # imm: the product's shift
    assert encode(sqr) == pack(
        {(2, 0): 4, (34, 21): 1, (48, 35): 1, (61, 49): 5, (63, 63): 1, (111, 108): 9, (127, 112): 63}
    )
    assert encode(FinishInsn()) == 3
    epi = EpiInsn(req=True, relu=True, shift=21, bias=True, bias_base=0xBEEF, pop_next=True)
    assert encode(epi) == pack({(2, 0): 5, (4, 4): 1, (7, 7): 1, (8, 8): 1, (13, 9): 21, (14, 14): 1, (31, 16): 0xBEEF})
    assert encode(GemmInsn(init=True)) == pack({(2, 0): 2, (34, 21): 1, (48, 35): 1, (62, 49): 1, (63, 63): 1})
    mul = EpiInsn(mul=True, mul_shift=63, mul_base=0xBEEF)
    assert encode(mul) == pack({(2, 0): 5, (55, 55): 1, (61, 56): 63, (77, 62): 0xBEEF})
    assert decode(encode(mul)) == mul
    store = MemInsn(store=True, mem_type=MemType.OUT, push_prev=True)
    assert encode(store) & 0x7F == 1 | 1 << 5 and (encode(store) >> 7) & 7 == 4
    assert store.stage == Stage.STORE and load.stage == Stage.LOAD
    assert MemInsn(mem_type=MemType.UOP).stage == Stage.COMPUTE == MemInsn(mem_type=MemType.ACC).stage
    assert gemm.stage == alu.stage == FinishInsn().stage == epi.stage == Stage.COMPUTE


@pytest.mark.parametrize(
    "insn, message",
    [
        (GemmInsn(iter_out=1 << 14), "GEMM: field iter_out=16384 out of range \\[0, 16383\\] \\(14 bits\\)"),
        (MemInsn(sram_base=-1), "LOAD: field sram_base=-1 out of range"),
        (AluInsn(imm=1 << 15), "ALU: field imm=32768 out of range \\[-32768, 32767\\]"),
        (AluInsn(iter_in=1 << 13), "ALU: field iter_in=8192 out of range \\[0, 8191\\] \\(13 bits\\)"),
        (MemInsn(y_pad_0=16), "field y_pad_0=16"),
    ],
)
def test_out_of_range_fields_are_named(insn, message):
    with pytest.raises(IsaError, match=message):
        encode(insn)


def test_decode_errors():
    with pytest.raises(IsaError, match="unknown opcode 7"):
        decode(7)
    assert decode(7 << 7).mem_type == MemType.UOP_PRE  # every 3-bit memory type is defined
    assert decode(4 | 8 << 108).alu_opcode == AluOp.LSUM
    assert decode(4 | 9 << 108).alu_opcode == AluOp.SQR
    with pytest.raises(IsaError, match="unknown ALU opcode 10"):
        decode(4 | 10 << 108)
    with pytest.raises(IsaError, match="instruction 1: unknown opcode 6"):
        decode_program(encode_program([FinishInsn()]) + (6).to_bytes(16, "little"))
    with pytest.raises(IsaError, match="not a multiple of 16"):
        decode_program(b"\0" * 17)


@given(st.lists(st.tuples(bits(11), bits(11), bits(10)), min_size=1, max_size=50))
def test_uop_round_trip(uops):
    words = encode_uops(np.array(uops), FULL)  # 1024 WGT rows (the pynq build has 512: 9 bits)
    assert words.dtype == np.uint32
    dst, src, wgt = decode_uops(words, FULL)
    assert list(zip(dst, src, wgt)) == uops
    d, s, w = uops[0]
    assert int(words[0]) == d | s << 11 | w << 22  # dst [10:0], src [21:11], wgt [31:22]


def test_uop_errors_and_config_widths():
    with pytest.raises(IsaError, match="micro-op 1: wgt=1024 does not fit in 10 bits"):
        encode_uops(np.array([[0, 0, 0], [0, 0, 1024]]), FULL)
    osdi = load_config("osdi18")  # 128-deep weight buffer: 7-bit wgt index
    assert decode_uops(encode_uops(np.array([[5, 6, 127]]), osdi), osdi)[2][0] == 127
    with pytest.raises(IsaError, match="does not fit in 7 bits"):
        encode_uops(np.array([[0, 0, 128]]), osdi)


def test_assembler_errors_name_the_line():
    with pytest.raises(IsaError, match="prog.s:2: unknown mnemonic 'jump'"):
        assemble("finish\njump 3\n", "prog.s")
    with pytest.raises(IsaError, match="prog.s:1: unknown field 'wgt' for alu"):
        assemble("alu add uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=1,1", "prog.s")
    with pytest.raises(IsaError, match=":1: unknown memory type 'foo'"):
        assemble("load foo sram=0")
    with pytest.raises(IsaError, match=":1: 'x1' is not an integer"):
        assemble("load inp x=x1")
    with pytest.raises(IsaError, match="pad takes four values"):
        assemble("load inp pad=1,2")


def test_validate_program():
    good = assemble("""
        load inp sram=0 dram=0 y=1 x=1 stride=1 push_next
        gemm uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=0,0 pop_prev push_next
        store out sram=0 dram=0 y=1 x=1 stride=1 pop_prev push_prev
        finish pop_next
    """)
    validate_program(good, CFG)
    bad = assemble("""
        load inp sram=2047 dram=0 y=1 x=2 stride=2 push_next
        load inp sram=0 dram=0 y=1 x=1 stride=1 push_prev
        gemm uop=3:3 iter=1,1 dst=0,0 src=0,0 wgt=0,0
        store acc sram=0 dram=0 y=1 x=1 stride=1 pad=1,0,0,0
        finish
        gemm uop=0:1 iter=0,1 dst=0,0 src=0,0 wgt=0,0 pop_prev
        gemm reset init uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=0,0
        epi req shift=3 bias=2048
        epi mul=2048,37
    """)
    with pytest.raises(IsaError) as info:
        validate_program(bad, CFG)
    text = str(info.value)
    for expected in (
        "instruction 0: LOAD INP: SRAM tile [2047, 2049) exceeds the buffer depth 2048",
        "instruction 1: push_prev is not valid on the load stage",
        "instruction 2: empty micro-op range uop_bgn=3 uop_end=3",
        "instruction 3: STORE must use memory type OUT, not ACC",
        "instruction 3: STORE ACC cannot have padding (1, 0, 0, 0)",
        "instruction 4: FINISH before the end of the program",
        "instruction 5: zero loop extent iter_out=0 iter_in=1",
        "instruction 6: GEMM cannot have both reset and init",
        "instruction 7: EPI bias_base=2048 is outside the ACC buffer (depth 2048)",
        "instruction 8: EPI mul_base=2048 is outside the ACC buffer (depth 2048)",
        "the program does not end with FINISH",
    ):
        assert expected in text, expected
    with pytest.raises(IsaError, match="token queue compute->store: pushes exceed pops by 1"):
        validate_program(assemble("gemm uop=0:1 iter=1,1 dst=0,0 src=0,0 wgt=0,0 push_next\nfinish"), CFG)
    with pytest.raises(IsaError, match="DRAM bytes \\[0x0, 0x10\\) outside the DRAM region"):
        validate_program(good, CFG, dram=(0x1000, 0x2000))


def test_an_activation_table_must_be_loaded_whole_before_epi_lut():
    """The table an EPI lut selects must be loaded whole first: pynq's one (elements 0..15), or either of the full
    build's two (0..15 and 16..31); a table beyond the config's is refused."""
    table = "load lut sram={at} dram=0 y=1 x={x} stride=16\n"
    use = "epi req lut shift=2\nfinish\n"
    validate_program(assemble(table.format(at=0, x=16) + use), CFG)
    validate_program(assemble(table.format(at=0, x=10) + "load lut sram=10 dram=10 y=1 x=6 stride=6\n" + use), CFG)
    validate_program(assemble(table.format(at=16, x=16) + "epi req lut shift=2 table=1\nfinish\n"), FULL)
    with pytest.raises(IsaError, match=r"instruction 0: EPI lut before any LOAD LUT of table 0 \(elements 0..15\)"):
        validate_program(assemble(use), CFG)
    with pytest.raises(IsaError, match=r"instruction 1: EPI lut before any LOAD LUT of table 1 \(elements 16..31\)"):
        validate_program(assemble(table.format(at=0, x=16) + "epi lut table=1\nfinish\n"), FULL)
    with pytest.raises(IsaError, match=r"instruction 1: EPI lut_table=1: config 'pynq-z2' holds 1 table"):
        validate_program(assemble(table.format(at=0, x=16) + "epi lut table=1\nfinish\n"), CFG)
    with pytest.raises(IsaError, match=r"instruction 1: EPI lut with table elements \[12, 13, 14, 15\] never loaded"):
        validate_program(assemble(table.format(at=0, x=12) + use), CFG)
    bad = "load lut sram=8 dram=0 y=1 x=9 stride=9\nload lut sram=0 dram=0 y=1 x=16 stride=16 pad=1,0,0,0\nfinish"
    with pytest.raises(IsaError) as info:
        validate_program(assemble(bad), CFG)
    assert "LOAD LUT: SRAM tile [8, 17) exceeds the buffer depth 16" in str(info.value)
    assert "LOAD LUT cannot have padding (1, 0, 0, 0)" in str(info.value)
    with pytest.raises(IsaError, match=r"LOAD LUT: SRAM tile \[24, 33\) exceeds the buffer depth 32"):
        validate_program(assemble("load lut sram=24 dram=0 y=1 x=9 stride=9\nfinish"), FULL)


def test_queue_topology():
    """Each queue's ends, flags and name come from one definition on Queue; every flag of every stage maps to
    at most one queue, and flags without a queue are invalid on that stage."""
    expected = {
        Queue.L2C: (Stage.LOAD, Stage.COMPUTE, "push_next", "pop_prev", "load->compute"),
        Queue.C2L: (Stage.COMPUTE, Stage.LOAD, "push_prev", "pop_next", "compute->load"),
        Queue.C2S: (Stage.COMPUTE, Stage.STORE, "push_next", "pop_prev", "compute->store"),
        Queue.S2C: (Stage.STORE, Stage.COMPUTE, "push_prev", "pop_next", "store->compute"),
    }
    for q, (src, dst, push, pop, label) in expected.items():
        assert (q.src, q.dst, q.push_flag, q.pop_flag, q.label) == (src, dst, push, pop, label)
        assert Queue.between(src, dst) is q and Queue(int(q)) is q
    assert Queue.popped_by(Stage.COMPUTE) == (Queue.L2C, Queue.S2C)
    assert Queue.pushed_by(Stage.COMPUTE) == (Queue.C2L, Queue.C2S)
    with pytest.raises(IsaError, match="no dependency queue from the load stage to the store stage"):
        Queue.between(Stage.LOAD, Stage.STORE)
    gemm = GemmInsn(pop_prev=True, pop_next=True, push_prev=True, push_next=True)
    assert pops_of(gemm) == [Queue.L2C, Queue.S2C] and pushes_of(gemm) == [Queue.C2L, Queue.C2S]
    load = MemInsn(pop_next=True, push_next=True, pop_prev=True)
    assert pops_of(load) == [Queue.C2L] and pushes_of(load) == [Queue.L2C]
