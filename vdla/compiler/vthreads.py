"""Virtual threads lowered to dependency tokens, and taken in turn into one instruction stream.

Each virtual thread is a sequence of :class:`~vdla.compiler.blocks.Block` working on a private share of
the INP, WGT and ACC buffers. Within a thread, four kinds of dependency need a token (see
docs/compiler.md for a worked example):

* ``L2C``  RAW on INP/WGT: the compute of a block waits for that block's loads.
* ``C2L``  WAR on INP/WGT (loop-carried): the loads of a block wait for the compute of the thread's
  previous block, the last to read the data they overwrite.
* ``C2S``  RAW on ACC: the stores of a block wait for that block's compute.
* ``S2C``  WAR on ACC (loop-carried): the compute of the block after a storing block waits for those
  stores, which read the accumulators it overwrites.

Entry and exit are balanced by construction: a thread's first loads and first compute find their
buffers free and pop nothing (VTA's pre-pushed tokens), and its last compute and last store have no
later consumer and push nothing (VTA's drain pops), so every queue ends empty.

The threads then take turns (round-robin), one block at a time. Every token of a thread goes from
a block to the same block or to the thread's next one, so round-robin keeps the k-th push of each
queue matched with the k-th pop (the queues are FIFO counters, not tagged) and every token goes
forward in the stream. :func:`check_tokens` verifies both properties: together with in-order stages
they make the stream deadlock-free and the synchronisation exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vdla.compiler.blocks import Alu, Block, Gemm, Op, PreloadKernel, emit_op
from vdla.errors import VdlaError
from vdla.isa import Queue, Stage
from vdla.runtime.commands import CommandBuilder
from vdla.runtime.dram import Buffer


class LoweringError(VdlaError, RuntimeError):
    """The token lowering produced a stream whose synchronisation would be wrong (a compiler bug)."""


@dataclass(frozen=True)
class Dep:
    """A token on ``queue`` pushed after block ``src``'s producer stage, popped before ``dst``'s consumer stage
    (``part``: after/before that part of a block split in parts, see :class:`~vdla.compiler.blocks.Block`)."""

    queue: Queue
    src: int
    dst: int
    part: int = 0


@dataclass
class Stream:
    """The threads' blocks in round-robin order and the tokens between them (block positions in ``blocks``)."""

    blocks: list[Block]
    deps: list[Dep]

    def __post_init__(self) -> None:
        self._push: dict[tuple[int, Stage], list[Dep]] = {}
        self._pop: dict[tuple[int, Stage], list[Dep]] = {}
        for d in self.deps:
            self._push.setdefault((d.src, d.queue.src), []).append(d)
            self._pop.setdefault((d.dst, d.queue.dst), []).append(d)

    def pushes(self, pos: int, stage: Stage) -> list[Dep]:
        """Tokens pushed by block ``pos``'s instructions on ``stage``."""
        return self._push.get((pos, stage), [])

    def pops(self, pos: int, stage: Stage) -> list[Dep]:
        """Tokens popped by block ``pos``'s instructions on ``stage``."""
        return self._pop.get((pos, stage), [])


def thread_deps(loads: Sequence[bool], stores: Sequence[bool], parts: Sequence[int] | None = None) -> list[Dep]:
    """The tokens one thread needs, given per block whether it loads, whether it stores and in how many
    parts it hands its accumulators to the store stage (block indices local to the thread)."""
    deps = []
    for i, (ld, st) in enumerate(zip(loads, stores)):
        if ld:
            deps.append(Dep(Queue.L2C, i, i))
            if i > 0:
                deps.append(Dep(Queue.C2L, i - 1, i))
        if st:
            deps += [Dep(Queue.C2S, i, i, j) for j in range(parts[i] if parts else 1)]
            if i + 1 < len(loads):
                deps.append(Dep(Queue.S2C, i, i + 1))
    return deps


def round_robin(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Round-robin order of (thread, block index) over threads with the given block counts."""
    return [(t, i) for i in range(max(lengths, default=0)) for t, n in enumerate(lengths) if i < n]


def lower_vthreads(threads: Sequence[Sequence[Block]], prologue: Block | None = None) -> Stream:
    """Insert each thread's tokens, order the blocks round-robin and check the result.

    A ``prologue`` (compute-stage work on no thread's buffers) goes first; the loads do not wait for it.
    """
    order = round_robin([len(t) for t in threads])
    head = [prologue] if prologue is not None else []
    pos = {key: p + len(head) for p, key in enumerate(order)}
    deps = [
        Dep(d.queue, pos[(t, d.src)], pos[(t, d.dst)], d.part)
        for t, blocks in enumerate(threads)
        for d in thread_deps(
            [bool(b.loads) for b in blocks], [bool(b.stores) for b in blocks], [len(b.parts) or 1 for b in blocks]
        )
    ]
    blocks = head + [threads[t][i] for t, i in order]
    stream = Stream(blocks, sorted(deps, key=lambda d: (d.src, d.dst)))
    check_tokens(stream)
    return stream


def check_tokens(stream: Stream) -> None:
    """Raise LoweringError unless every token goes forward and each queue pairs pushes and pops in order."""
    for q in Queue:
        deps = [d for d in stream.deps if d.queue == q]
        for d in deps:
            if (d.src, q.src) >= (d.dst, q.dst):
                raise LoweringError(f"{q.label} token from block {d.src} to block {d.dst} does not go forward")
        if len({(d.src, d.part) for d in deps}) < len(deps) or len({(d.dst, d.part) for d in deps}) < len(deps):
            raise LoweringError(f"{q.label}: a block pushes or pops the queue twice")
        by_push = sorted(deps, key=lambda d: (d.src, d.part))
        if [(d.dst, d.part) for d in by_push] != sorted((d.dst, d.part) for d in deps):
            raise LoweringError(f"{q.label}: pushes and pops are not paired in FIFO order")


def emit_stream(stream: Stream, cmd: CommandBuilder, buffers: Mapping[str, Buffer]) -> None:
    """Emit the round-robin blocks with their tokens into a command builder. The compute->store token of
    part j of a block in parts is pushed after the part's last compute op and popped before its first store;
    every other token is popped before the stage's first op and pushed after its last."""
    for pos, block in enumerate(stream.blocks):
        ends = ((0, 0),) + (block.parts or ((len(block.compute), len(block.stores)),))
        for stage, ops in ((Stage.LOAD, block.loads), (Stage.COMPUTE, block.compute), (Stage.STORE, block.stores)):
            pops: dict[int, list[Queue]] = {}
            for d in stream.pops(pos, stage):
                pops.setdefault(ends[d.part][1] if d.queue == Queue.C2S else 0, []).append(d.queue)
            pushes: dict[int, list[Queue]] = {}
            for d in stream.pushes(pos, stage):
                pushes.setdefault(ends[d.part + 1][0] if d.queue == Queue.C2S else len(ops), []).append(d.queue)
            for k, op in enumerate(ops):
                for q in pops.get(k, ()):
                    cmd.dep_pop(q.src, stage)
                emit_op(op, cmd, buffers)
                for q in pushes.get(k + 1, ()):
                    cmd.dep_push(stage, q.dst)


def prologue_block(ops: list[Op], threads: Sequence[Sequence[Block]], uop_depth: int) -> Block:
    """The compute-stage block ahead of every thread: ``ops`` (row loads, EPI state), then every distinct
    micro-kernel of the threads' GEMM/ALU ops made resident in first-use (round-robin) order, as many as a
    UOP buffer of ``uop_depth`` micro-ops holds. Later, no kernel LOAD on the compute stage waits for the
    read channel behind a long input or weight transfer."""
    ops = list(ops)
    seen, room = set(), uop_depth
    for t, i in round_robin([len(b) for b in threads]):
        for op in threads[t][i].compute:
            if isinstance(op, Gemm | Alu) and op.kernel.uops.tobytes() not in seen:
                seen.add(op.kernel.uops.tobytes())
                room -= len(op.kernel.uops)
                if room < 0:
                    return Block(-1, (), tuple(ops), ())
                ops.append(PreloadKernel(op.kernel))
    return Block(-1, (), tuple(ops), ())
