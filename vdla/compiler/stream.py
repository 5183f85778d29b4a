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

**Early links.** Given the configuration and the micro-op kernels (:class:`Link`), ``k + 1``'s first inputs
load while ``k``'s last tiles compute. ``k`` then pushes a free token after each GEMM that follows its last
own compute -> load push (its *tail*: up to :data:`MAX_FREES`), and ``k + 1``'s first load group pops them
lazily: a load pops up to the free token of the last tail GEMM reading a row it writes (the GEMMs' INP and
WGT rows, their micro-ops decoded), and all of them and the ready token if it reads DRAM bytes a store of
``k`` may still be writing (one whose store -> compute token ``k``'s compute stage has not popped when its
tail begins). Later loads pop every cross-layer token first, so they do not take the bus from ``k + 1``'s
prologue. Where a tail GEMM's reads cannot be told (the depthwise mode, reads from OUT), one free token after
the last GEMM guards every INP row and ``k``'s WGT rows.

**Weights ahead.** Given the configuration and a relocation, layer ``k + 1`` loads the first weights of ``k + 2``
(the weight loads of its first load group; the group's flags move to its last load of another type) where its
GEMMs and ALU instructions take less time than they take to load (the cycle model): a short layer, such as a
one-token LayerNorm before a classifier head. The part beyond that time loads ahead of ``k + 1``'s first INP load
and the cross-layer pops before it, where its load stage waits for ``k``'s ready token, so it loads while ``k``'s
last tiles compute; the rest just after ``k + 1``'s last load, while ``k + 1`` computes (the load at the border
split by rows, or by elements of a one-row load). Both are in ``k + 1``'s part of the stream, which the fetch
unit reaches before ``k + 1``'s compute instructions fill the command queue. The weights move where they fit
clear of the WGT rows of ``k`` and ``k + 1`` (``k + 2`` is relocated there) and read no DRAM byte a store of ``k``
or ``k + 1`` writes. Every earlier layer is done with the rows: ``k``'s loads, ahead of them, pop every
cross-layer token of ``k - 1``.

**Micro-ops ahead.** On request (a model's joined steps), each layer after the first loads its micro-ops on
the load stage (LOAD UOP_PRE, ahead of its first load) instead of in its compute-stage prologue, where that is
safe (:func:`hoist_uop_loads`): its micro-ops then load while the previous layer computes. Its kernels move in
the micro-op buffer clear of the previous layer's.

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
from vdla.cycles import CycleModel
from vdla.isa import (
    EpiInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Queue,
    Stage,
    decode_uops,
    elem_bytes,
    encode_uops,
    nop,
    pops_of,
    pushes_of,
)
from vdla.isa.instructions import LoopInsn

FREE = READY = Queue.C2L  # the two cross-layer tokens travel on the compute -> load queue


@dataclass(frozen=True)
class LayerStream:
    """A joined stream: ``insns`` and, per layer, the index of its first instruction (``starts``)."""

    insns: list[Insn]
    starts: tuple[int, ...]


def _pushes_free(insn: Insn) -> bool:
    """Whether a compute instruction pushes on the compute -> load queue (a token of its own layer)."""
    return insn.stage == Stage.COMPUTE and FREE in pushes_of(insn)


def _after_last(prog: list[Insn], hit: Callable[[Insn], bool]) -> int:
    """The position just after the last instruction for which ``hit`` holds, else that of the first compute
    instruction."""
    last = max((i for i, s in enumerate(prog) if hit(s)), default=-1)
    return last + 1 if last >= 0 else next((i for i, s in enumerate(prog) if s.stage == Stage.COMPUTE), 0)


def _free_at(prog: list[Insn]) -> int:
    """Where the free token goes: after the last GEMM and after the last compute -> load push."""
    return _after_last(prog, lambda s: isinstance(s, GemmInsn) or _pushes_free(s))


def _stored_rows(prog: list[Insn]) -> list[tuple[int, int]]:
    """The [lo, hi) OUT rows the program's STOREs read."""
    return [
        (s.sram_base, s.sram_base + s.y_size * s.x_size)
        for s in prog
        if isinstance(s, MemInsn) and s.store and not s.is_nop
    ]


@dataclass(frozen=True)
class Pending:
    """DRAM bytes that stores may still be writing: sorted, disjoint [lo, hi) ranges (``starts``, ``ends``)
    of their rows."""

    cfg: HwConfig
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, stores: Sequence[MemInsn], cfg: HwConfig) -> Pending:
        merged: list[list[int]] = []
        for lo, hi in sorted(r for s in stores for r in dram_rows(s, cfg)):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        a = np.array(merged, dtype=np.int64).reshape(-1, 2)
        return cls(cfg, a[:, 0], a[:, 1])

    def overlaps(self, load: MemInsn) -> bool:
        """Whether ``load`` reads any of the bytes."""
        for lo, hi in dram_rows(load, self.cfg):
            k = int(np.searchsorted(self.ends, lo, side="right"))  # the first range ending after lo
            if k < len(self.starts) and self.starts[k] < hi:
                return True
        return False


def dram_rows(insn: MemInsn, cfg: HwConfig) -> list[tuple[int, int]]:
    """The [lo, hi) DRAM byte ranges of a LOAD's or STORE's rows."""
    eb = elem_bytes(cfg, insn.mem_type)
    return [
        ((insn.dram_base + r * insn.x_stride) * eb, (insn.dram_base + r * insn.x_stride + insn.x_size) * eb)
        for r in range(insn.y_size)
    ]


def pending_stores(prog: list[Insn], at: int) -> list[MemInsn]:
    """The stores of a layer program (FINISH dropped) that may still be running when its compute stage reaches
    ``at``: all after the last whose store -> compute token the compute stage has popped by then (stores
    finish in order, and each pushes its token when done)."""
    popped = _count(prog[:at], Queue.S2C, push=False)
    stores = [s for s in prog if s.stage == Stage.STORE]
    pushing = [i for i, s in enumerate(stores) if Queue.S2C in pushes_of(s)]
    done = pushing[min(popped, len(pushing)) - 1] + 1 if popped and pushing else 0
    return [s for s in stores[done:] if isinstance(s, MemInsn) and not s.is_nop]


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


def _lead_group(prog: list[Insn]) -> list[Insn]:
    """A layer program's first load group, up to and including its first load with a token flag, where that load
    pops no token and the group holds a load other than WGT; else none."""
    loads = [s for s in prog if s.stage == Stage.LOAD]
    g = next((i for i, s in enumerate(loads) if s.deps()), None)
    if g is None or pops_of(loads[g]) or all(s.mem_type == MemType.WGT for s in loads[: g + 1]):
        return []
    return loads[: g + 1]


def _lead_weights(prog: list[Insn]) -> list[Insn]:
    """The weight loads of a layer program's first load group (:func:`_lead_group`; FINISH dropped)."""
    return [s for s in _lead_group(prog) if s.mem_type == MemType.WGT and not s.is_nop]


def _weights_ahead(body: list[Insn], ahead: list[Insn], after: list[Insn]) -> list[Insn]:
    """A joined layer ``body`` with the next layer's lead weight loads issued in its load stream: ``ahead`` ahead of
    its first INP load and the cross-layer pops just before it (where its load stage waits for the ready token),
    ``after`` just after its last load."""
    end = _after_last(body, lambda s: s.stage == Stage.LOAD)
    body = body[:end] + after + body[end:]
    at = next(i for i, s in enumerate(body) if _is_inp_load(s))
    while at and body[at - 1].stage == Stage.LOAD and body[at - 1].is_nop:
        at -= 1
    return body[:at] + ahead + body[at:]


def _is_inp_load(insn: Insn) -> bool:
    return isinstance(insn, MemInsn) and insn.mem_type == MemType.INP and insn.stage == Stage.LOAD and not insn.is_nop


def _cycles_ahead(before: list[Insn], prog: list[Insn], nxt: list[Insn], cfg: HwConfig) -> int:
    """How many cycles of the lead weight loads of ``nxt`` (the layer after ``prog``, which follows ``before``)
    ``prog`` issues ahead of its first INP load: what they take to load beyond the time ``prog``'s GEMMs and ALU
    instructions take (the rest loads meanwhile), where it has an INP load and they read no DRAM byte that a store
    of ``before`` or ``prog`` writes; else 0 (then none of them moves)."""
    lead = _lead_weights(nxt[:-1])
    if not lead or not any(_is_inp_load(s) for s in prog):
        return 0
    written = Pending.of([s for s in before + prog if isinstance(s, MemInsn) and s.store and not s.is_nop], cfg)
    if any(written.overlaps(s) for s in lead):
        return 0
    work = [s for s in prog if s.stage == Stage.COMPUTE and not isinstance(s, MemInsn)]
    return max(0, _busy(lead, cfg) - _busy(work, cfg))


def _take_ahead(prog: list[Insn], cycles: int, cfg: HwConfig) -> tuple[list[Insn], list[Insn], list[Insn]]:
    """The lead weight loads of ``prog`` (:func:`_lead_weights`) in two parts, in order: those that take ``cycles``
    to load, where only part of a load is needed split by rows (by elements in a one-row load), and the rest;
    and ``prog`` with a split load replaced by its two parts and the load group's flags on its last load of
    another type (the weights move to the layer before: :func:`_weights_ahead`)."""
    group, copies = _lead_group(prog), {}
    holder = group[-1]
    if holder.mem_type == MemType.WGT:  # its flags go to the group's last load of another type, on copies
        kept = next(s for s in reversed(group) if s.mem_type != MemType.WGT)
        flags = {f: getattr(holder, f) for f in ("push_prev", "push_next")}
        copies = {id(holder): replace(holder, push_prev=False, push_next=False), id(kept): replace(kept, **flags)}
    lead = [copies.get(id(s), s) for s in _lead_weights(prog)]
    out = [copies.get(id(s), s) for s in prog]
    ahead: list[Insn] = []
    after: list[Insn] = []
    for load in lead:
        took = _busy([load], cfg)
        one_row = load.y_size == 1
        units = load.x_size if one_row else load.y_size
        n = -(-cycles * units // took)  # rounded up
        if 0 < n < units and load.sram_elems == load.x_size * load.y_size:
            size, rows, stride = ("x_size", 1, 1) if one_row else ("y_size", load.x_size, load.x_stride)
            flagless = {"push_prev": False, "push_next": False}
            part = replace(load, **{size: n}, **flagless)
            base = {"sram_base": load.sram_base + n * rows, "dram_base": load.dram_base + n * stride}
            rest = replace(load, **{size: units - n}, **base, **flagless)
            k = next(i for i, s in enumerate(out) if s is load)
            out[k : k + 1] = [part, rest]
            ahead.append(part)
            after.append(rest)
        else:
            (ahead if cycles > 0 else after).append(load)
        cycles -= took
    return ahead, after, out


def _busy(insns: Sequence[Insn], cfg: HwConfig) -> int:
    """The cycles ``insns`` take run one after the other on their own (:class:`CycleModel`)."""
    model, t = CycleModel(cfg), 0
    for insn in insns:
        t += model.duration(insn, t)
    return t


def _ready_at(loads: list[Insn]) -> int:
    """The load that pops the ready token: the first INP load, or the first load popping a compute -> load
    token of its own layer if that comes earlier (the pops must meet the pushes in order)."""
    for i, s in enumerate(loads):
        if (s.mem_type == MemType.INP and not s.is_nop) or FREE in pops_of(s):
            return i
    return len(loads)


def _load_pops(loads: list[Insn], free_at: int | None, ready_at: int) -> list[list[Insn]]:
    """Per load slot (and one past the end), the load-stage instructions to issue there: a pop of the free
    token (unless ``free_at`` is None) and then one of the ready token, the second at ``ready_at`` (the two
    share a queue, so the second pop is the one that waits for the ready token)."""
    slots: list[list[Insn]] = [[s] for s in loads] + [[]]
    for at in ((min(free_at, ready_at),) if free_at is not None else ()) + (ready_at,):
        _pop(slots[at])
    return slots


def _pop(slot: list[Insn]) -> None:
    """One more cross-layer pop at a load slot: by its load, unless that already pops (or there is none),
    else by a no-op ahead of it."""
    if slot and not getattr(slot[-1], FREE.pop_flag):
        setattr(slot[-1], FREE.pop_flag, True)
    else:
        slot.insert(0, nop(Stage.LOAD, FREE.pop_flag))


def _after(prev: list[Insn], body: list[Insn], finish: Insn, link: Link | None) -> list[Insn]:
    """A layer's instructions (``body``, its FINISH dropped) as they run after ``prev`` in one stream, with
    the ready token that replaces the previous layer's ``finish``: popped by the first INP load, after the
    free token (if the weights overlap) at the first load; or as ``link`` (what ``prev`` left) says."""
    k = _prologue(body, _stored_rows(prev))
    ready = nop(Stage.COMPUTE, READY.push_flag, *(f for f in ("pop_prev", "pop_next") if getattr(finish, f)))
    rest = body[k:]
    loads = _reorder_first_group([s for s in rest if s.stage == Stage.LOAD])
    if link is None:
        early = _overlap(wgt_rows(prev), wgt_rows(body))
        slots = iter(_load_pops(loads, 0 if early else None, _ready_at(loads)))
    else:
        slots = iter(_link_pops(loads, link))
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


ReadUops = Callable[[int, int], np.ndarray]  # (DRAM element index, count) -> micro-op words


def _link_free_at(prog: list[Insn]) -> int:
    """Where a layer's tail begins: after its last compute -> load push (else at its first compute instruction)."""
    return _after_last(prog, _pushes_free)


MAX_FREES = 32  # free tokens an early link pushes at most (one after each of the last GEMMs)


@dataclass(frozen=True)
class Link:
    """What layer ``k`` leaves the next one of an early link. ``k`` pushes a free token after each of its
    ``gemms`` (the GEMMs after its last own compute -> load push, in order; identified by object, as ``k``'s
    joined body holds them); ``inp_last`` and ``wgt_last`` give, per INP and WGT row, the index among them of
    the last that reads it (-1: none). ``pending``: the DRAM bytes ``k``'s stores may still be writing when the
    first of them starts."""

    gemms: tuple[Insn, ...]
    inp_last: np.ndarray
    wgt_last: np.ndarray
    pending: Pending

    def needs(self, load: MemInsn) -> int:
        """How many of the cross-layer tokens (the free ones, then the ready one) ``load`` must have popped:
        all when it reads pending bytes, else up to the free token of the last GEMM reading a row it writes."""
        if self.pending.overlaps(load):
            return len(self.gemms) + 1
        last = {MemType.INP: self.inp_last, MemType.WGT: self.wgt_last}.get(load.mem_type)
        rows = last[load.sram_base : load.sram_base + load.sram_elems] if last is not None else ()
        return int(rows.max()) + 1 if len(rows) else 0

    @classmethod
    def of(cls, prog: list[Insn], cfg: HwConfig, read_uops: ReadUops) -> Link:
        """The link ``prog`` (a layer program, FINISH dropped) leaves: its GEMMs after its last own compute ->
        load push with the rows they read (their micro-ops as the program's LOAD UOPs left the buffer). Where
        those cannot be told (a GEMM in the depthwise mode or reading OUT, micro-ops no LOAD UOP wrote) or
        are too many, one free token after the last GEMM guards every INP row and the program's WGT rows."""
        at = _link_free_at(prog)  # no load of the next layer runs before the compute stage passes it
        found = _tail_reads(prog, at, cfg, read_uops)
        if found is None or len(found[0]) > MAX_FREES:
            last = prog[max(i for i, s in enumerate(prog) if isinstance(s, GemmInsn))]  # one of them
            inp, wgt = np.zeros(cfg.inp_depth, np.int64), np.full(cfg.wgt_depth, -1, np.int64)
            for lo, hi in wgt_rows(prog):
                wgt[lo:hi] = 0
            found = ([last], inp, wgt)
        gemms, inp, wgt = found
        return cls(tuple(gemms), inp, wgt, Pending.of(pending_stores(prog, at), cfg))


def _tail_reads(
    prog: list[Insn], at: int, cfg: HwConfig, read_uops: ReadUops
) -> tuple[list[Insn], np.ndarray, np.ndarray] | None:
    """The GEMMs of ``prog`` from ``at`` on and, per INP and WGT row, the index among them of the last reading
    it (-1: none); None where a GEMM's reads cannot be told."""
    table = np.full((cfg.uop_depth, 3), -1, np.int64)
    inp, wgt = np.full(cfg.inp_depth, -1, np.int64), np.full(cfg.wgt_depth, -1, np.int64)
    epi, gemms = EpiInsn(), []
    for i, insn in enumerate(prog):
        if isinstance(insn, MemInsn) and insn.mem_type == MemType.UOP and not insn.store and not insn.is_nop:
            if insn.y_size != 1:
                return None
            words = read_uops(insn.dram_base, insn.x_size)
            table[insn.sram_base : insn.sram_base + insn.x_size] = np.stack(decode_uops(words, cfg), axis=1)
        elif isinstance(insn, EpiInsn):
            epi = insn
        elif isinstance(insn, GemmInsn) and i >= at:
            uops = table[insn.uop_bgn : insn.uop_end]
            if not insn.reset and (epi.dw or epi.src_out or (uops < 0).any()):
                return None
            if not insn.reset:
                o = np.arange(insn.iter_out)[:, None, None]
                n = np.arange(insn.iter_in)[None, :, None]
                inp[(uops[:, 1] + o * insn.src_factor_out + n * insn.src_factor_in).reshape(-1)] = len(gemms)
                wgt[(uops[:, 2] + o * insn.wgt_factor_out + n * insn.wgt_factor_in).reshape(-1)] = len(gemms)
            gemms.append(insn)
    return gemms, inp, wgt


def _link_pops(loads: list[Insn], link: Link) -> list[list[Insn]]:
    """Per load slot (and one past the end), the load-stage instructions to issue there: each load pops the
    cross-layer tokens it :meth:`Link.needs` that earlier ones have not, and all left are popped before the
    first load popping a token of its own layer (or at the end)."""
    slots: list[list[Insn]] = [[s] for s in loads] + [[]]
    total, popped, first_group = len(link.gemms) + 1, 0, True
    for at, s in enumerate([*loads, None]):
        own = s is None or FREE in pops_of(s)
        want = total if own or not first_group else (0 if s.is_nop else link.needs(s))
        first_group = first_group and not (s is not None and s.push_next)
        for _ in range(max(0, want - popped)):
            _pop(slots[at])
        popped = max(popped, want)
        if own:
            break
    return slots


def _with_frees(body: list[Insn], link: Link) -> list[Insn]:
    """``body`` with a free token pushed after each of the link's GEMMs."""
    after = {id(g) for g in link.gemms}
    out: list[Insn] = []
    for insn in body:
        out.append(insn)
        if id(insn) in after:
            out.append(nop(Stage.COMPUTE, FREE.push_flag))
    return out


def join_programs(
    programs: Sequence[Sequence[Insn]],
    wgt_depth: int | None = None,
    relocate: Relocate | None = None,
    cfg: HwConfig | None = None,
    read_uops: ReadUops | None = None,
    hoist_uops: bool = False,
) -> LayerStream:
    """One stream running ``programs`` (finished layer programs, in order) with their fills and drains
    overlapped; the inputs are not modified.

    With ``relocate`` (``relocate(program, offset)``: the program with its WGT rows moved by ``offset``, its
    LOAD WGT and GEMM micro-op kernels rewritten) and the buffer's ``wgt_depth``, a layer whose weights would
    overwrite rows the previous layer still reads is moved clear of them where both fit, and then needs no
    free token: its weights load while the previous layer computes; with ``cfg`` too, a short layer loads the
    next one's first weights, part of them ahead of its own input (module docstring). With ``cfg`` and
    ``read_uops`` (micro-op words from DRAM), consecutive layers join by early links (module docstring); with
    ``hoist_uops`` too, later layers load their micro-ops ahead on the load stage (:func:`hoist_uop_loads`: only
    in the outermost join, whose token counts its safety check reads; a joined program joined again keeps its
    LOAD UOPs).
    """
    if not programs:
        raise CompileError("no layer programs to join")
    out: list[Insn] = []
    starts: list[int] = []
    prev: list[Insn] = []
    finish: Insn | None = None
    link: Link | None = None
    progs = [[copy.copy(insn) for insn in p] for p in programs]  # an instruction's fields are scalars
    taken: list[Insn] = []  # this layer's lead weight loads, issued in the previous layer's load stream
    for i, prog in enumerate(progs):
        if not prog or not isinstance(prog[-1], FinishInsn):
            raise CompileError(f"layer program {i} does not end with FINISH")
        ahead: list[Insn] = []
        after: list[Insn] = []
        if i + 1 < len(progs) and relocate is not None and wgt_depth is not None:
            nxt = progs[i + 1]
            cycles = _cycles_ahead(progs[i - 1], prog, nxt, cfg) if i and cfg is not None else 0
            off = weight_offset(wgt_rows(progs[i - 1]) + wgt_rows(prog), wgt_rows(nxt), wgt_depth) if cycles else None
            if off is not None:
                nxt = relocate(nxt, off) if off else nxt
                ahead, after, progs[i + 1] = _take_ahead(nxt, cycles, cfg)
            if not ahead:
                off = weight_offset(wgt_rows(prog), wgt_rows(nxt), wgt_depth)
                if off:
                    progs[i + 1] = relocate(nxt, off)
        moved = {id(s) for s in taken}
        own = [s for s in prog[:-1] if id(s) not in moved]
        body = own if finish is None else _after(prev, own, finish, link)
        link = None
        if i + 1 < len(progs) and cfg is not None and read_uops is not None:
            link = Link.of(prog[:-1], cfg, read_uops)
            body = _with_frees(body, link)
        elif i + 1 < len(progs) and _overlap(wgt_rows(prog), wgt_rows(progs[i + 1])):
            at = _free_at(body)
            body = body[:at] + [nop(Stage.COMPUTE, FREE.push_flag)] + body[at:]
        if ahead:
            body = _weights_ahead(body, ahead, after)
        starts.append(len(out))
        out += body
        prev, finish, taken = prog[:-1], prog[-1], ahead + after
    out.append(finish)
    if cfg is not None and hoist_uops:
        return hoist_uop_loads(LayerStream(out, tuple(starts)), cfg)
    return LayerStream(out, tuple(starts))


def _is_uop_load(insn: Insn) -> bool:
    return isinstance(insn, MemInsn) and insn.mem_type == MemType.UOP and not insn.store and not insn.is_nop


def _uop_span(insn: Insn) -> tuple[int, int] | None:
    """The [lo, hi) micro-op buffer rows an instruction writes (a LOAD UOP or UOP_PRE) or reads (GEMM, ALU)."""
    if isinstance(insn, LoopInsn):
        return insn.uop_bgn, insn.uop_end
    if isinstance(insn, MemInsn) and insn.mem_type in (MemType.UOP, MemType.UOP_PRE) and not insn.is_nop:
        return insn.sram_base, insn.sram_base + insn.sram_elems
    return None


def _prologue_uop_loads(seg: list[Insn]) -> list[int]:
    """The positions of a layer's LOAD UOPs where every one is a flagless compute-stage prologue load (before the
    layer's first GEMM or ALU), else none."""
    first = next((i for i, s in enumerate(seg) if isinstance(s, LoopInsn)), len(seg))
    loads = [i for i, s in enumerate(seg) if _is_uop_load(s)]
    return [] if not loads or loads[-1] > first or any(seg[i].deps() for i in loads) else loads


def _rows_used(seg: list[Insn], prev: tuple[int, int] | None) -> tuple[int, int] | None:
    """The [lo, hi) micro-op rows a layer loads or reads, ``prev`` (the rows of the layer before) if none."""
    spans = [sp for s in seg if (sp := _uop_span(s)) is not None]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else prev


def _uop_offset(rows: tuple[int, int], prev: tuple[int, int] | None, depth: int) -> int | None:
    """A shift of micro-op rows ``rows`` that keeps them inside the buffer and clear of ``prev``: 0, against
    the top, or just above ``prev``; None if none does."""
    lo, hi = rows
    if prev is None:
        return 0
    for off in (0, depth - hi, prev[1] - lo):
        if lo + off >= 0 and hi + off <= depth and (hi + off <= prev[0] or prev[1] <= lo + off):
            return off
    return None


def _count(insns: Sequence[Insn], queue: Queue, push: bool) -> int:
    """How many of ``insns`` push (``push``) or pop a token on ``queue``."""
    return sum(1 for s in insns if queue in (pushes_of(s) if push else pops_of(s)))


class _Tally:
    """Running counts of a stream as it is built, for :func:`_hoist_is_safe`: compute -> load pops (load stage)
    and the positions of their pushes (compute stage), load -> compute pushes and pops, and per micro-op row the
    last compute instruction using it (-1: none)."""

    def __init__(self, uop_depth: int):
        self.n = self.c2l_pops = self.l2c_pushes = self.l2c_pops = 0
        self.c2l_pushes: list[int] = []
        self.last_use = np.full(uop_depth, -1, np.int64)

    def add(self, insns: Sequence[Insn]) -> None:
        for s in insns:
            pops, pushes = pops_of(s), pushes_of(s)
            self.c2l_pops += Queue.C2L in pops
            self.l2c_pops += Queue.L2C in pops
            self.l2c_pushes += Queue.L2C in pushes
            if Queue.C2L in pushes:
                self.c2l_pushes.append(self.n)
            if s.stage == Stage.COMPUTE and (span := _uop_span(s)) is not None:
                self.last_use[span[0] : span[1]] = self.n
            self.n += 1


def _hoist_is_safe(done: _Tally, seg: list[Insn], at: int, rows: tuple[int, int]) -> bool:
    """Whether a LOAD UOP_PRE of micro-op rows ``rows`` placed at ``seg[at]`` (``done``: the stream before
    ``seg``) is ordered by the token queues after every earlier compute instruction using those rows (the
    compute -> load tokens the load stage has popped by then were pushed after them) and before the layer's
    first GEMM or ALU (it has popped a load -> compute token pushed after the load)."""
    popped = done.c2l_pops + _count(seg[:at], Queue.C2L, push=False)
    user = int(done.last_use[rows[0] : rows[1]].max())
    # the push a pop matches may come later in the stream: then after every compute instruction of ``done``
    if user >= 0 and (popped == 0 or (popped <= len(done.c2l_pushes) and done.c2l_pushes[popped - 1] < user)):
        return False
    pushed = done.l2c_pushes + _count(seg[:at], Queue.L2C, push=True)
    reader = next(i for i, s in enumerate(seg) if isinstance(s, LoopInsn))
    return done.l2c_pops + _count(seg[: reader + 1], Queue.L2C, push=False) > pushed


def hoist_uop_loads(stream: LayerStream, cfg: HwConfig) -> LayerStream:
    """``stream`` with each later layer's prologue LOAD UOPs turned into LOAD UOP_PRE on the load stage, placed
    before the layer's first load, its micro-op rows shifted clear of the previous layer's; a layer stays as it
    was where its loads are not all flagless prologue loads, no shift fits, or the tokens would not order the
    load after the last earlier user of its rows and before its own first GEMM or ALU (:func:`_hoist_is_safe`)."""
    bounds = [*stream.starts, len(stream.insns)]
    out: list[Insn] = []
    starts: list[int] = []
    tally = _Tally(cfg.uop_depth)
    prev: tuple[int, int] | None = None
    for j in range(len(stream.starts)):
        seg = stream.insns[bounds[j] : bounds[j + 1]]
        loads = _prologue_uop_loads(seg)
        first_load = next((i for i, s in enumerate(seg) if s.stage == Stage.LOAD), None)
        rows = _rows_used(seg, prev)
        off = _uop_offset(rows, prev, cfg.uop_depth) if j and loads and first_load is not None else None
        if off is not None:
            moved, at = _moved(seg, loads, first_load, off)
            if _hoist_is_safe(tally, moved, at, (rows[0] + off, rows[1] + off)):
                seg, rows = moved, (rows[0] + off, rows[1] + off)
        starts.append(len(out))
        out += seg
        tally.add(seg)
        prev = rows
    return LayerStream(out, tuple(starts))


def _moved(seg: list[Insn], loads: list[int], first_load: int, off: int) -> tuple[list[Insn], int]:
    """``seg`` with its micro-op rows shifted by ``off`` and its LOAD UOPs (at ``loads``) moved to the load
    stage as LOAD UOP_PRE ahead of ``seg[first_load]``, and where the first of them now sits."""
    pre = [replace(seg[i], mem_type=MemType.UOP_PRE, sram_base=seg[i].sram_base + off) for i in loads]
    out: list[Insn] = []
    at = 0
    for i, s in enumerate(seg):
        if i == first_load:
            out, at = out + pre, len(out)
        if i in loads:
            continue
        if isinstance(s, LoopInsn) and off:
            s = replace(s, uop_bgn=s.uop_bgn + off, uop_end=s.uop_end + off)
        out.append(s)
    return out, at
