"""Layers overlapped: several finished layer programs joined into one instruction stream.

Run one after the other, every layer drains the pipeline (its FINISH waits for its last store) and the next
one refills it (its first weights and inputs load while the compute stage waits). Joined, the load stage
prefetches the next layer's first weights while the current layer's last tiles compute and store, and no
FINISH separates the layers. Between layer ``k`` and layer ``k + 1`` the join adds two cross-layer tokens on
the compute -> load queue:

* **free**: pushed by a compute no-op after layer ``k``'s last GEMM (the last reader of INP and WGT) and
  after its last own compute -> load push; popped by ``k + 1``'s first load. The next layer's first load
  group is reordered so that its weight loads come first (they read constants no layer writes);
* **ready**: layer ``k``'s FINISH becomes a compute no-op that pops the store -> compute token of ``k``'s
  last store (its whole output is in DRAM) and pushes this token; popped by ``k + 1``'s first INP load (an
  activation, written by an earlier layer). Every compute instruction of ``k + 1`` comes after it, so
  ``k + 1`` writes no ACC or OUT row that a pending store of ``k`` still reads. The one exception is the
  prologue of ``k + 1`` (its leading flagless micro-op and accumulator loads): it moves ahead of the token
  when the accumulator rows it loads (mirrored into OUT) are none that a store of ``k`` reads.

Invariants: each layer's instructions keep their order within every stage; every new pop comes after its
push in stream order (the fetch unit dispatches in stream order, so joining cannot deadlock what ran
alone); the joined stream is token-balanced and ends with the last layer's FINISH.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from vdla.compiler.spec import CompileError
from vdla.config import HwConfig
from vdla.isa import (
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Queue,
    Stage,
    decode_uops,
    encode_uops,
    nop,
    pops_of,
    pushes_of,
)

FREE = READY = Queue.C2L  # the two cross-layer tokens travel on the compute -> load queue


@dataclass(frozen=True)
class Chain:
    """A joined stream: ``insns`` and, per layer, the index of its first instruction (``starts``)."""

    insns: list[Insn]
    starts: tuple[int, ...]


def _free_at(prog: list[Insn]) -> int:
    """Where the free token goes: after the last GEMM and after the last compute -> load push."""
    last = -1
    for i, insn in enumerate(prog):
        if isinstance(insn, GemmInsn) or (insn.stage == Stage.COMPUTE and FREE in pushes_of(insn)):
            last = i
    return last + 1 if last >= 0 else next((i for i, s in enumerate(prog) if s.stage == Stage.COMPUTE), 0)


def _stored_rows(prog: list[Insn]) -> list[tuple[int, int]]:
    """The [lo, hi) OUT rows the program's STOREs read."""
    return [
        (s.sram_base, s.sram_base + s.y_size * s.x_size)
        for s in prog
        if isinstance(s, MemInsn) and s.store and not s.is_nop
    ]


def _prologue(prog: list[Insn], stored: list[tuple[int, int]]) -> int:
    """How many leading instructions of ``prog`` may run before the ready token: flagless compute-stage
    loads of micro-ops, or of accumulator rows none of ``stored`` overlaps."""
    n = 0
    for insn in prog:
        if not (isinstance(insn, MemInsn) and not insn.store and insn.stage == Stage.COMPUTE) or insn.deps():
            break
        if insn.mem_type in (MemType.ACC, MemType.ACC_8BIT):
            lo, hi = insn.sram_base, insn.sram_base + insn.sram_elems
            if any(lo < b and a < hi for a, b in stored):
                break
        n += 1
    return n


def _reorder_first_group(loads: list[Insn]) -> list[Insn]:
    """The load stage's first group (up to its first flagged instruction) with the weights first. Unchanged
    when the group pops a token."""
    g = next((i for i, s in enumerate(loads) if s.deps()), None)
    if g is None or pops_of(loads[g]):
        return loads
    flags = {f: getattr(loads[g], f) for f in ("push_prev", "push_next")}
    for f in flags:
        setattr(loads[g], f, False)
    group = loads[: g + 1]
    ordered = [s for s in group if s.mem_type == MemType.WGT] + [s for s in group if s.mem_type != MemType.WGT]
    for f, v in flags.items():
        setattr(ordered[-1], f, v)
    return ordered + loads[g + 1 :]


def _ready_at(loads: list[Insn]) -> int:
    """The load that pops the ready token: the first INP load, or the first load popping a compute -> load
    token of its own layer if that comes earlier (the pops must meet the pushes in order)."""
    for i, s in enumerate(loads):
        if (s.mem_type == MemType.INP and not s.is_nop) or FREE in pops_of(s):
            return i
    return len(loads)


def _load_pops(loads: list[Insn], free: bool) -> list[list[Insn]]:
    """Per load slot (and one past the end), the load-stage instructions to issue there, popping the free
    token (if ``free``) before the first load and the ready token at :func:`_ready_at`."""
    slots: list[list[Insn]] = [[s] for s in loads] + [[]]
    for at in ((0,) if free else ()) + (_ready_at(loads),):
        head = slots[at][0] if slots[at] else None
        if head is not None and not getattr(head, FREE.pop_flag):
            setattr(head, FREE.pop_flag, True)
        else:
            slots[at].insert(0, nop(Stage.LOAD, FREE.pop_flag))
    return slots


def _after(prev: list[Insn], body: list[Insn], finish: Insn) -> list[Insn]:
    """A layer's instructions (``body``, its FINISH dropped) as they run after ``prev`` in one stream, with
    the ready token that replaces the previous layer's ``finish``."""
    k = _prologue(body, _stored_rows(prev))
    ready = nop(Stage.COMPUTE, READY.push_flag, *(f for f in ("pop_prev", "pop_next") if getattr(finish, f)))
    rest = body[k:]
    loads = _reorder_first_group([s for s in rest if s.stage == Stage.LOAD])
    slots = iter(_load_pops(loads, _overlap(wgt_rows(prev), wgt_rows(body))))
    out = body[:k] + [ready]
    for insn in rest:
        out += next(slots) if insn.stage == Stage.LOAD else [insn]
    return out + next(slots)


def wgt_rows(prog: Sequence[Insn]) -> list[tuple[int, int]]:
    """The [lo, hi) WGT rows the program's LOADs write (its GEMMs read no others)."""
    return [
        (s.sram_base, s.sram_base + s.sram_elems)
        for s in prog
        if isinstance(s, MemInsn) and s.mem_type == MemType.WGT and not s.is_nop
    ]


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(lo < hi2 and lo2 < hi for lo, hi in a for lo2, hi2 in b)


def weight_offset(prev: list[tuple[int, int]], rows: list[tuple[int, int]], depth: int) -> int | None:
    """A shift of ``rows`` that keeps them inside the ``depth``-row buffer and clear of ``prev`` (0 first,
    then just above one of ``prev``'s spans, then against the top), or None."""
    if not rows or not _overlap(prev, rows):
        return 0
    lo, hi = min(r[0] for r in rows), max(r[1] for r in rows)
    for off in [*sorted({b - lo for _, b in prev}), depth - hi]:
        if lo + off >= 0 and hi + off <= depth and not _overlap(prev, [(a + off, b + off) for a, b in rows]):
            return off
    return None


Relocate = Callable[[list[Insn], int], list[Insn]]


def weight_relocator(
    cfg: HwConfig, read_words: Callable[[int, int], np.ndarray], store_words: Callable[[np.ndarray], int]
) -> Relocate:
    """A :data:`Relocate` for programs whose micro-op kernels live in a DRAM: ``read_words(index, n)`` reads
    ``n`` micro-op words from DRAM element ``index``, ``store_words(words)`` stores a copy and returns its
    element index. Each LOAD UOP gets a copy of its kernel with every micro-op's WGT index moved (an ALU
    ignores it), each LOAD WGT its SRAM base moved; copies are shared between loads of one kernel."""
    copies: dict[tuple[int, int, int], int] = {}

    def relocate(prog: list[Insn], offset: int) -> list[Insn]:
        out = []
        for insn in prog:
            if isinstance(insn, MemInsn) and not insn.store and not insn.is_nop:
                if insn.mem_type == MemType.WGT:
                    insn = replace(insn, sram_base=insn.sram_base + offset)
                elif insn.mem_type == MemType.UOP:
                    if insn.y_size != 1:
                        raise CompileError(f"cannot relocate a {insn.y_size}-row micro-op load")
                    key = (insn.dram_base, insn.x_size, offset)
                    if key not in copies:
                        dst, src, wgt = decode_uops(read_words(insn.dram_base, insn.x_size), cfg)
                        copies[key] = store_words(encode_uops(np.stack([dst, src, wgt + offset], axis=1), cfg))
                    insn = replace(insn, dram_base=copies[key])
            out.append(insn)
        return out

    return relocate


def join_programs(
    programs: Sequence[Sequence[Insn]], wgt_depth: int | None = None, relocate: Relocate | None = None
) -> Chain:
    """One stream running ``programs`` (finished layer programs, in order) with their fills and drains
    overlapped; the inputs are not modified.

    With ``relocate`` (``relocate(program, offset)``: the program with its WGT rows moved by ``offset``, its
    LOAD WGT and GEMM micro-op kernels rewritten) and the buffer's ``wgt_depth``, a layer whose weights would
    overwrite rows the previous layer still reads is moved clear of them where both fit, and then needs no
    free token: its weights load while the previous layer computes.
    """
    if not programs:
        raise CompileError("no layer programs to join")
    out: list[Insn] = []
    starts: list[int] = []
    prev: list[Insn] = []
    finish: Insn | None = None
    progs = [copy.deepcopy(list(p)) for p in programs]
    for i, prog in enumerate(progs):
        if not prog or not isinstance(prog[-1], FinishInsn):
            raise CompileError(f"layer program {i} does not end with FINISH")
        if i + 1 < len(progs) and relocate is not None and wgt_depth is not None:
            off = weight_offset(wgt_rows(prog), wgt_rows(progs[i + 1]), wgt_depth)
            if off:
                progs[i + 1] = relocate(progs[i + 1], off)
        body = prog[:-1] if finish is None else _after(prev, prog[:-1], finish)
        if i + 1 < len(progs) and _overlap(wgt_rows(prog), wgt_rows(progs[i + 1])):
            at = _free_at(body)
            body = body[:at] + [nop(Stage.COMPUTE, FREE.push_flag)] + body[at:]
        starts.append(len(out))
        out += body
        prev, finish = body, prog[-1]
    out.append(finish)
    return Chain(out, tuple(starts))
