"""Layers overlapped: consecutive accelerator steps joined into one stream (vdla.compiler.stream), checked
against the same model run one layer at a time and against the CPU reference, on sim and rtl."""

from __future__ import annotations

import json
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from qdq_check import qdq_conv  # noqa: E402
from test_graph_qdq import S_A, residual_graph  # noqa: E402

import vdla.compiler.stream as stream_mod  # noqa: E402
from vdla.compiler.stream import join_programs, weight_offset, wgt_rows  # noqa: E402
from vdla.config import load_config  # noqa: E402
from vdla.graph import Graph, Node, TensorType  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.qdq import lower_qdq  # noqa: E402
from vdla.isa import (  # noqa: E402
    AluInsn,
    EpiInsn,
    FinishInsn,
    GemmInsn,
    MemInsn,
    MemType,
    Stage,
    decode_program,
    encode_uops,
    nop,
    pops_of,
    validate_program,
)
from vdla.model import Module, load_artifact  # noqa: E402
from vdla.model.lower import ModelBuilder  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402
from vdla.runtime.backend import FaultError  # noqa: E402


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


def test_the_accelerator_steps_are_one_stream(artifact):
    (stream,) = artifact.streams
    accel = [i for i, s in enumerate(artifact.steps) if s.kind == "accel"]
    assert (stream.first, stream.count) == (accel[0], len(accel)) and len(accel) == 3
    joined = _programs(artifact, stream.first, stream.count)
    assert stream.insn_count < sum(len(p) for p in joined) + 8  # a few token no-ops, FINISHes dropped
    base = artifact.config.dram_base_addr
    lo = stream.insn_addr - base
    insns = decode_program(artifact.image[lo : lo + 16 * stream.insn_count].tobytes())
    assert [i for i, x in enumerate(insns) if isinstance(x, FinishInsn)] == [len(insns) - 1]


def test_joined_run_is_bit_exact_and_its_cycles_split_per_layer(artifact, backend):
    ref = lower_qdq(_graph())
    joined, alone = Module(artifact, backend), Module(artifact, backend, overlap=False)
    x = _x(5)
    want = evaluate(ref, {"x": x})["y"]
    np.testing.assert_array_equal(joined.run(x), want)
    np.testing.assert_array_equal(alone.run(x), want)
    one, many = joined.last_report, alone.last_report
    streamed = [s for s in one.steps if s.where == "accel"]
    (run,) = {id(s.result) for s in streamed}  # one stream
    assert sum(s.cycles for s in streamed) == streamed[0].result.counters.cycles
    assert all(s.cycles > 0 for s in streamed) and all(0 < s.utilization <= 1 for s in streamed)
    assert len({id(s.result) for s in many.steps if s.where == "accel"}) == 3
    assert one.accel_cycles < many.accel_cycles  # the fills and drains overlap
    joined.close()
    alone.close()


def test_an_artifact_naming_its_streams_chains_loads_them(artifact, tmp_path):
    """A manifest that names the joined streams "chains" (the key's older name) loads them as "streams" does,
    and its accelerator steps run as one stream."""
    old = tmp_path / "old.vdla"
    with zipfile.ZipFile(artifact.save(tmp_path / "new.vdla")) as z, zipfile.ZipFile(old, "w") as out:
        for item in z.infolist():
            data = z.read(item)
            if item.filename == "manifest.json":
                manifest = json.loads(data)
                manifest["chains"] = manifest.pop("streams")
                data = json.dumps(manifest).encode()
            out.writestr(item, data)
    loaded = load_artifact(old)
    assert loaded.streams == artifact.streams and len(loaded.streams) == 1
    x = _x(7)
    module = Module(loaded)
    np.testing.assert_array_equal(module.run(x), evaluate(lower_qdq(_graph()), {"x": x})["y"])
    assert len({id(s.result) for s in module.last_report.steps if s.where == "accel"}) == 1
    module.close()


def _ready_after_the_last_load(monkeypatch):
    """Joined without early links, the ready token popped only after the layer's last load."""
    monkeypatch.setattr(stream_mod, "_ready_at", lambda loads: len(loads))
    monkeypatch.setattr(ModelBuilder, "join", _join_without_links)


def _links_popped_late(monkeypatch):
    """Early links whose tokens are popped only at the first load of the layer's own (or its end)."""
    monkeypatch.setattr(stream_mod, "_link_pops", _pops_at_first_own)


@pytest.mark.parametrize("breakage", [_ready_after_the_last_load, _links_popped_late])
def test_without_the_ready_token_the_next_layer_reads_stale_activations(monkeypatch, breakage):
    """The test can fail: without the ready token before its first INP load, the next layer reads its input
    before the previous layer stored it."""
    breakage(monkeypatch)
    broken = compile_graph_model(_graph(), "pynq")[0]
    x = _x(6)
    want = evaluate(lower_qdq(_graph()), {"x": x})["y"]
    assert not np.array_equal(Module(broken).run(x), want)
    np.testing.assert_array_equal(Module(broken, overlap=False).run(x), want)


def _join_without_links(self, programs, dev, hoist_uops=False):
    return join_programs(programs, self.cfg.wgt_depth, self.relocator(dev))


def _convs(shape: tuple[int, ...], layers, name: str):
    """x ``shape`` -> QDQ convolutions ``layers`` ((in, out, kernel, activation) each) -> y."""
    rng, nodes, params = np.random.default_rng(4), [], {}
    nodes += [
        Node("quantize", ("x",), "xq", {"scale": 0.05, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": 0.05, "zero_point": 0}),
    ]
    v, s = "xd", 0.05
    for i, (ci, co, k, act) in enumerate(layers):
        v = qdq_conv(nodes, params, rng, f"c{i}", v, ci, co, k, s, act=act)
        nodes += [
            Node("quantize", (v,), f"q{i}", {"scale": 0.1, "zero_point": 0}),
            Node("dequantize", (f"q{i}",), f"d{i}", {"scale": 0.1, "zero_point": 0}),
        ]
        v, s = f"d{i}", 0.1
    last = nodes.pop()
    nodes.append(Node("dequantize", last.inputs, "y", last.attrs))
    return Graph({"x": TensorType(shape, "float32")}, nodes, ["y"], params, name=name)


def _three_convs():
    """x (1, 16, 24, 24) -> 3x3 conv 16 -> 32, ReLU -> 3x3 conv 32 -> 32 -> 1x1 conv 32 -> 32 -> y: layers of
    several tiles each."""
    layers = [(16, 32, 3, "relu"), (32, 32, 3, None), (32, 32, 1, None)]
    return _convs((1, 16, 24, 24), layers, "three_convs")


@pytest.fixture(scope="module")
def three_convs():
    return compile_graph_model(_three_convs(), "pynq")[0]


def _early_inp_loads(artifact, result) -> int:
    """Boundaries where an INP load of layer k + 1 starts before layer k's last GEMM ends."""
    stream = artifact.streams[0]
    lo = stream.insn_addr - artifact.config.dram_base_addr
    insns = decode_program(artifact.image[lo : lo + 16 * stream.insn_count].tobytes())
    times = {e.index: e for e in result.timeline}
    early = 0
    for k in range(1, stream.count):
        (a, b), (c, d) = stream.span(k - 1), stream.span(k)
        last_gemm = max(times[i].end for i in range(a, b) if isinstance(insns[i], GemmInsn))
        loads = [
            times[i].start for i in range(c, d) if isinstance(insns[i], MemInsn) and insns[i].mem_type == MemType.INP
        ]
        early += any(t < last_gemm for t in loads)
    return early


def test_early_links_load_the_next_layer_while_the_last_tiles_compute(three_convs, backend, monkeypatch):
    graph = _three_convs()
    x = np.random.default_rng(1).normal(0, 1, (1, 16, 24, 24)).astype(np.float32)
    want = evaluate(lower_qdq(graph), {"x": x})["y"]
    module = Module(three_convs, backend)
    np.testing.assert_array_equal(module.run(x), want)
    (stream,) = three_convs.streams
    assert stream.count == 3
    if backend == "sim":
        run = module.last_report.steps[1].result
        assert _early_inp_loads(three_convs, run) >= 1
        monkeypatch.setattr(ModelBuilder, "join", _join_without_links)
        plain = compile_graph_model(graph, "pynq")[0]
        before = Module(plain)
        np.testing.assert_array_equal(before.run(x), want)
        assert _early_inp_loads(plain, before.last_report.steps[1].result) == 0
        assert module.last_report.accel_cycles < before.last_report.accel_cycles
    module.close()


def _is_load(insn, mem: MemType) -> bool:
    return isinstance(insn, MemInsn) and insn.mem_type == mem and not insn.store and not insn.is_nop


def test_a_short_layer_loads_the_next_layers_first_weights_ahead_of_its_input(backend):
    """A 1x1 convolution on a 4 x 4 map computes for less time than the 3x3 convolution after it takes to load its
    first weights: its load stage loads them, the first of them ahead of its own first input, into WGT rows clear
    of its own and the layer's before it; bit for bit the lowered graph and the layers run one at a time."""
    layers = [(32, 64, 3, "relu"), (64, 16, 1, None), (16, 128, 3, None), (128, 32, 1, None)]
    graph = _convs((1, 32, 4, 4), layers, "short_middle")
    artifact = compile_graph_model(graph, "pynq")[0]
    (stream,) = artifact.streams
    lo = stream.insn_addr - artifact.config.dram_base_addr
    insns = decode_program(artifact.image[lo : lo + 16 * stream.insn_count].tobytes())
    base = artifact.config.dram_base_addr
    validate_program(insns, artifact.config, (base, base + artifact.config.dram_bytes))
    alone = _programs(artifact, stream.first, stream.count)
    (a0, b0), (a, b), (c, d) = (stream.span(k) for k in range(3))
    first_inp = next(i for i in range(a, b) if _is_load(insns[i], MemType.INP))
    third = stream_mod.Pending.of([x for x in alone[2] if _is_load(x, MemType.WGT)], artifact.config)
    moved = [x for x in insns[a:b] if _is_load(x, MemType.WGT) and third.overlaps(x)]
    assert any(_is_load(x, MemType.WGT) and third.overlaps(x) for x in insns[a:first_inp])  # ahead of the input
    assert moved and all(not x.deps() for x in moved)
    own = wgt_rows(insns[a0:b0]) + wgt_rows([x for x in insns[a:b] if all(x is not y for y in moved)])
    assert not stream_mod._overlap(own, wgt_rows(moved))
    later = [x for x in insns[c:d] if _is_load(x, MemType.WGT)]
    tiles = [sum(x.sram_elems for x in loads if _is_load(x, MemType.WGT)) for loads in (moved + later, alone[2])]
    assert tiles[0] == tiles[1]  # moved, not copied
    x = np.random.default_rng(2).normal(0, 1, (1, 32, 4, 4)).astype(np.float32)
    want = evaluate(lower_qdq(graph), {"x": x})["y"]
    np.testing.assert_array_equal(Module(artifact, backend).run(x), want)
    np.testing.assert_array_equal(Module(artifact, backend, overlap=False).run(x), want)


def _weights_ahead_programs(stored: int, alu_iterations: int):
    """Three layer programs: weights and a GEMM; a short layer (an INP load, an ALU pass of ``alu_iterations``, a
    store to DRAM element ``stored``); 64 rows of weights from DRAM element 0 loaded with the first input."""
    wgt = MemInsn(mem_type=MemType.WGT, sram_base=0, y_size=1, x_size=8, x_stride=8, push_next=True)
    first = [wgt, GemmInsn(uop_bgn=0, uop_end=1, pop_prev=True), FinishInsn()]
    inp = MemInsn(mem_type=MemType.INP, y_size=1, x_size=1, x_stride=1, dram_base=1 << 16, push_next=True)
    alu = AluInsn(uop_bgn=0, uop_end=1, iter_out=alu_iterations, pop_prev=True, push_next=True)
    out = MemInsn(store=True, mem_type=MemType.OUT, dram_base=stored, y_size=1, x_size=1, x_stride=1, pop_prev=True)
    short = [inp, alu, out, FinishInsn()]
    inp3 = MemInsn(mem_type=MemType.INP, y_size=1, x_size=1, x_stride=1, dram_base=1 << 17)
    wgt3 = MemInsn(mem_type=MemType.WGT, sram_base=0, y_size=1, x_size=64, x_stride=64, push_next=True)
    third = [inp3, wgt3, GemmInsn(uop_bgn=0, uop_end=1, pop_prev=True), FinishInsn()]
    return [first, short, third]


def _relocate_weights(prog, offset):
    return [replace(x, sram_base=x.sram_base + offset) if _is_load(x, MemType.WGT) else x for x in prog]


def test_weights_load_ahead_of_a_short_layer_only_when_nothing_writes_them_and_they_take_longer():
    """The third layer's weights move to the short layer's load stream (their flags to the third layer's INP load,
    their rows clear of both layers' before it), ahead of its first INP load as far as they take longer to load
    than the short layer computes, where no store of the two writes their DRAM bytes; else they stay with the
    third layer."""
    cfg = load_config("pynq")

    def joined(stored: int, alu_iterations: int):
        progs = _weights_ahead_programs(stored, alu_iterations)
        return join_programs(progs, cfg.wgt_depth, _relocate_weights, cfg), progs

    stream, progs = joined(stored=1 << 18, alu_iterations=1)
    insns, (_, second, third) = stream.insns, stream.starts
    first_inp = next(i for i in range(second, third) if _is_load(insns[i], MemType.INP))
    (moved,) = [x for x in insns[second:first_inp] if _is_load(x, MemType.WGT)]
    assert moved.x_size == 64 and not moved.deps() and moved.sram_base >= 8  # clear of the first layer's rows
    inp3 = next(x for x in insns[third:] if _is_load(x, MemType.INP))
    assert inp3.push_next and not any(_is_load(x, MemType.WGT) for x in insns[third:])
    assert progs[2][1].push_next and not progs[2][0].push_next  # the inputs are not modified
    # the short layer's ALU pass takes about half as long as the weights load: the first part of them loads ahead
    # of its input, the rest just after its last load
    stream = joined(stored=1 << 18, alu_iterations=400)[0]
    insns, (_, second, third) = stream.insns, stream.starts
    first_inp = next(i for i in range(second, third) if _is_load(insns[i], MemType.INP))
    last_load = max(i for i in range(second, third) if insns[i].stage == Stage.LOAD)
    part, rest = [x for x in insns[second:third] if _is_load(x, MemType.WGT)]
    at = next(i for i, x in enumerate(insns) if x is part)
    assert at < first_inp < last_load and insns[last_load] is rest
    assert 0 < part.x_size < 64 and part.x_size + rest.x_size == 64 and not part.deps() and not rest.deps()
    assert (rest.sram_base, rest.dram_base) == (part.sram_base + part.x_size, part.dram_base + part.x_size)
    (inp3,) = [x for x in insns[third:] if _is_load(x, MemType.INP) or _is_load(x, MemType.WGT)]
    assert inp3.push_next
    for stored, alu_iterations in ((40, 1), (1 << 18, 4096)):  # a store writes the weights' bytes; a long layer
        stream = joined(stored, alu_iterations)[0]
        insns, (_, second, third) = stream.insns, stream.starts
        assert not any(_is_load(x, MemType.WGT) for x in insns[second:third])
        (wgt3,) = [x for x in insns[third:] if _is_load(x, MemType.WGT)]
        assert wgt3.x_size == 64


def _uop_users(insns, a: int, b: int) -> list[tuple[int, int]]:
    """The micro-op rows instructions a..b load or read."""
    return [sp for x in insns[a:b] if (sp := stream_mod._uop_span(x)) is not None]


def test_later_layers_load_their_micro_ops_ahead_on_the_load_stage(three_convs, monkeypatch):
    """In the joined stream every layer after the first loads its micro-ops on the load stage (LOAD UOP_PRE)
    into rows clear of the previous layer's, none on the compute stage; bit for bit the stream without, in fewer
    cycles, the compute stage busy for fewer."""
    (stream,) = three_convs.streams
    lo = stream.insn_addr - three_convs.config.dram_base_addr
    insns = decode_program(three_convs.image[lo : lo + 16 * stream.insn_count].tobytes())
    rows = []
    for k in range(stream.count):
        a, b = stream.span(k)
        pre = [x for x in insns[a:b] if isinstance(x, MemInsn) and x.mem_type == MemType.UOP_PRE]
        on_compute = [x for x in insns[a:b] if isinstance(x, MemInsn) and x.mem_type == MemType.UOP and not x.is_nop]
        assert (len(pre) >= 1, len(on_compute)) == ((k > 0), 0 if k else len(on_compute))
        assert all(x.stage == Stage.LOAD for x in pre)
        spans = _uop_users(insns, a, b)
        rows.append((min(s for s, _ in spans), max(e for _, e in spans)))
    assert all(p[1] <= q[0] or q[1] <= p[0] for p, q in zip(rows, rows[1:]))  # neighbours' rows apart
    graph = _three_convs()
    x = np.random.default_rng(3).normal(0, 1, (1, 16, 24, 24)).astype(np.float32)
    want = evaluate(lower_qdq(graph), {"x": x})["y"]
    ahead = Module(three_convs)
    np.testing.assert_array_equal(ahead.run(x), want)
    monkeypatch.setattr(stream_mod, "hoist_uop_loads", lambda stream, cfg: stream)
    plain = Module(compile_graph_model(graph, "pynq")[0])
    np.testing.assert_array_equal(plain.run(x), want)
    fast, slow = (next(s.result.counters for s in m.last_report.steps if s.result) for m in (ahead, plain))
    assert fast.bytes_loaded["UOP_PRE"] > 0 == slow.bytes_loaded["UOP_PRE"]
    assert fast.bytes_loaded["UOP"] + fast.bytes_loaded["UOP_PRE"] == slow.bytes_loaded["UOP"]
    assert fast.cycles < slow.cycles and fast.compute.busy < slow.compute.busy


def test_micro_ops_loaded_ahead_into_the_rows_in_use_break_the_run(monkeypatch):
    """The test can fail: loaded ahead into the rows the previous layer's tail still reads (no shift, no token
    check), the layers read one another's micro-ops."""
    monkeypatch.setattr(stream_mod, "_uop_offset", lambda rows, prev, depth: 0)
    monkeypatch.setattr(stream_mod, "_hoist_is_safe", lambda *a: True)
    graph = _three_convs()
    broken = compile_graph_model(graph, "pynq")[0]
    x = np.random.default_rng(3).normal(0, 1, (1, 16, 24, 24)).astype(np.float32)
    want = evaluate(lower_qdq(graph), {"x": x})["y"]
    try:
        got = Module(broken).run(x)
    except FaultError:  # the read micro-ops make an instruction the simulator refuses: broken as well
        return
    assert not np.array_equal(got, want)


def test_micro_ops_stay_on_the_compute_stage_where_tokens_would_not_order_them():
    """A layer whose first GEMM pops no load -> compute token pushed after its loads, or whose micro-op loads carry
    tokens, or that has no load stage instruction keeps its LOAD UOP; the micro-op rows shift clear of the
    previous layer's only when hoisted."""
    cfg = load_config("pynq")

    def layer(first_pops: bool, flagged: bool = False, loads: bool = True):
        uop = MemInsn(mem_type=MemType.UOP, sram_base=0, y_size=1, x_size=4, x_stride=4, push_prev=flagged)
        inp = [MemInsn(mem_type=MemType.INP, y_size=1, x_size=1, x_stride=1, push_next=True)] if loads else []
        gemm = GemmInsn(uop_bgn=0, uop_end=4, pop_prev=first_pops and loads, push_prev=flagged)
        return [uop, *inp, gemm, FinishInsn()]

    def joined(second):
        insns = join_programs([layer(True), second], cfg=cfg, hoist_uops=True).insns
        kinds = (MemType.UOP, MemType.UOP_PRE)
        return [x for x in insns if isinstance(x, MemInsn) and x.mem_type in kinds and not x.is_nop]

    moved = joined(layer(True))
    assert [(x.mem_type, x.stage) for x in moved] == [(MemType.UOP, Stage.COMPUTE), (MemType.UOP_PRE, Stage.LOAD)]
    assert moved[1].sram_base == cfg.uop_depth - 4  # against the top, clear of rows 0-3
    for second in (layer(False), layer(True, flagged=True), layer(True, loads=False)):
        kept = joined(second)
        assert [x.mem_type for x in kept] == [MemType.UOP, MemType.UOP] and kept[1].sram_base == 0


def _pops_at_first_own(loads, link):
    """Every cross-layer token popped only at the first load popping one of its own layer (or the end)."""
    slots = [[s] for s in loads] + [[]]
    at = next((i for i, s in enumerate(loads) if stream_mod.FREE in pops_of(s)), len(loads))
    slots[at][:0] = [nop(Stage.LOAD, "pop_next") for _ in range(len(link.gemms) + 1)]
    return slots


def test_a_load_pops_up_to_the_free_token_of_the_last_gemm_reading_its_rows():
    cfg = load_config("pynq")
    inp, wgt = np.full(cfg.inp_depth, -1), np.full(cfg.wgt_depth, -1)
    inp[100:200], inp[150:160], wgt[0:4] = 0, 2, 1  # three tail GEMMs: 0 reads INP 100-149 and 160-199, ...
    stores = [MemInsn(store=True, mem_type=MemType.OUT, dram_base=1000, y_size=2, x_size=4, x_stride=10)]
    gemms = (GemmInsn(), GemmInsn(), GemmInsn())
    link = stream_mod.Link(gemms, inp, wgt, stream_mod.Pending.of(stores, cfg))

    def load(mem, sram, n, dram=0, **flags):
        return MemInsn(mem_type=mem, sram_base=sram, dram_base=dram, y_size=1, x_size=n, x_stride=n, **flags)

    assert link.needs(load(MemType.INP, 0, 100)) == 0  # rows no tail GEMM reads
    assert link.needs(load(MemType.INP, 140, 20)) == 3  # the last reader of 150-159 is GEMM 2
    assert link.needs(load(MemType.WGT, 3, 1)) == 2
    assert link.needs(load(MemType.INP, 0, 4, dram=1012)) == 4  # reads a pending store's row: every token
    assert link.needs(load(MemType.INP, 0, 4, dram=1004)) == 0  # between its rows
    loads = [
        load(MemType.WGT, 8, 1),
        load(MemType.INP, 100, 10),  # needs 1
        load(MemType.INP, 0, 10, push_next=True),  # needs 0; ends the first group
        load(MemType.INP, 0, 10),  # after the first group: every token
        load(MemType.INP, 0, 10, pop_next=True),  # its own layer's token
    ]
    slots = stream_mod._link_pops(loads, link)
    pops = [sum(bool(i.pop_next) for i in slot) for slot in slots]
    assert pops == [0, 1, 0, 3, 1, 0]
    assert sum(pops[:-1]) - 1 == len(gemms) + 1  # every cross-layer token, and the load's own


def test_weights_move_clear_of_the_previous_layer():
    assert weight_offset([(0, 100)], [(200, 300)], 1024) == 0  # already disjoint
    assert weight_offset([(0, 100)], [(0, 50)], 1024) == 100  # just above
    assert weight_offset([(0, 100), (1023, 1024)], [(0, 50)], 1024) == 100
    assert weight_offset([(0, 1000)], [(0, 50)], 1024) is None  # no room: the free token orders them
    assert weight_offset([(0, 600)], [(0, 500)], 1024) is None


def test_relocated_weights_and_tokens(artifact):
    stream = artifact.streams[0]
    base = artifact.config.dram_base_addr
    lo = stream.insn_addr - base
    insns = decode_program(artifact.image[lo : lo + 16 * stream.insn_count].tobytes())
    spans = [stream.span(k) for k in range(stream.count)]
    rows = [wgt_rows(insns[a:b]) for a, b in spans]
    moved = 0
    for k in range(1, stream.count):
        a, b = spans[k - 1]
        last_gemm = max(i for i in range(a, b) if isinstance(insns[i], GemmInsn))
        free = [i for i in range(last_gemm, b) if insns[i].stage == Stage.COMPUTE and insns[i].push_prev]
        if any(p < s and r < q for p, q in rows[k - 1] for r, s in rows[k]):
            assert free, f"layer {k} overwrites weights of layer {k - 1} without the free token"
        else:
            moved += rows[k] != wgt_rows(_programs(artifact, stream.first + k, 1)[0])
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


def _tail_program(src_out: bool):
    """A layer program: LOAD UOP of kernels at DRAM element 0 (two micro-ops, then one), its weights, a GEMM that
    frees a buffer for the load stage, then two tail GEMMs (the last after an EPI ``src_out`` if asked)."""
    uop = MemInsn(mem_type=MemType.UOP, sram_base=0, dram_base=0, y_size=1, x_size=3, x_stride=3)
    wgt = MemInsn(mem_type=MemType.WGT, sram_base=5, y_size=1, x_size=2, x_stride=2, push_next=True)
    freeing = GemmInsn(uop_bgn=0, uop_end=2, iter_in=2, src_factor_in=100, push_prev=True)  # INP 0, 1, 100, 101
    tail = [GemmInsn(uop_bgn=0, uop_end=2, iter_in=2, src_factor_in=100), GemmInsn(uop_bgn=2, uop_end=3)]
    epi = EpiInsn(src_out=src_out)
    return [uop, wgt, EpiInsn(pop_prev=True), freeing, tail[0], epi, tail[1]], tail


def test_an_early_link_guards_the_rows_its_tail_gemms_read():
    cfg = load_config("pynq")
    words = encode_uops(np.array([[0, 0, 5], [1, 1, 6], [2, 300, 5]]), cfg)
    read = lambda index, n: words[index : index + n]  # noqa: E731

    def load(mem, sram, n):
        return MemInsn(mem_type=mem, sram_base=sram, dram_base=1 << 20, y_size=1, x_size=n, x_stride=n)

    prog, tail = _tail_program(src_out=False)
    link = stream_mod.Link.of(prog, cfg, read)
    assert link.gemms == tuple(tail)  # the GEMMs after the last compute -> load push, in order
    assert link.needs(load(MemType.INP, 100, 2)) == 1  # rows 100, 101: read by the first tail GEMM only
    assert link.needs(load(MemType.INP, 300, 1)) == 2  # row 300: by the second
    assert link.needs(load(MemType.INP, 2, 90)) == 0  # rows no tail GEMM reads
    assert link.needs(load(MemType.WGT, 5, 1)) == 2 and link.needs(load(MemType.WGT, 7, 4)) == 0

    prog, tail = _tail_program(src_out=True)  # reads from OUT cannot be told: one token after the last GEMM
    link = stream_mod.Link.of(prog, cfg, read)
    assert link.gemms == (tail[1],)
    assert link.needs(load(MemType.INP, 2, 90)) == 1  # every INP row
    assert link.needs(load(MemType.WGT, 5, 2)) == 1 and link.needs(load(MemType.WGT, 7, 4)) == 0  # its WGT rows


def _random_convs(seed: int):
    """A random sequence of 3 or 4 QDQ convolutions (random channels, 1x1 or 3x3 kernels, strides 1 or 2, ReLU or
    none) on a random map: layers of one tile or several, joined by early links."""
    rng, nodes, params = np.random.default_rng(100 + seed), [], {}
    c, h, w = int(rng.choice([8, 16, 24])), int(rng.integers(10, 29)), int(rng.integers(10, 29))
    nodes += [
        Node("quantize", ("x",), "xq", {"scale": 0.05, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": 0.05, "zero_point": 0}),
    ]
    v, s, shape = "xd", 0.05, (1, c, h, w)
    for i in range(int(rng.integers(3, 5))):
        co, k = int(rng.choice([8, 16, 24, 40])), int(rng.choice([1, 3]))
        stride = int(rng.choice([1, 2])) if min(h, w) >= 8 else 1
        act = "relu" if rng.random() < 0.5 else None
        v = qdq_conv(nodes, params, rng, f"c{i}", v, c, co, k, s, stride=stride, act=act)
        nodes += [
            Node("quantize", (v,), f"q{i}", {"scale": 0.1, "zero_point": 0}),
            Node("dequantize", (f"q{i}",), f"d{i}", {"scale": 0.1, "zero_point": 0}),
        ]
        v, s, c = f"d{i}", 0.1, co
        h, w = (h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1
    last = nodes.pop()
    nodes.append(Node("dequantize", last.inputs, "y", last.attrs))
    return Graph({"x": TensorType(shape, "float32")}, nodes, ["y"], params, name=f"convs{seed}")


@pytest.mark.parametrize("seed", range(16))
def test_random_convolutions_joined_by_early_links_run_as_the_layers_alone(seed, rtl_library):
    """Every joined run of random convolutions equals the lowered graph and the layers run one at a time, bit for
    bit; on the RTL too for every other seed."""
    graph = _random_convs(seed)
    artifact = compile_graph_model(graph, "pynq")[0]
    assert artifact.streams and artifact.streams[0].count >= 3
    x = np.random.default_rng(seed).normal(0, 1, graph.inputs["x"].shape).astype(np.float32)
    want = evaluate(lower_qdq(graph), {"x": x})["y"]
    for backend in ("sim", "rtl") if seed % 2 == 0 else ("sim",):
        np.testing.assert_array_equal(Module(artifact, backend).run(x), want)
    np.testing.assert_array_equal(Module(artifact, overlap=False).run(x), want)
