"""Row pairing: two consecutive rows of a tensor of few channels stored side by side as channels.

The accelerator reads and writes activations in blocks of ``block`` channels and reduces over whole blocks,
so a layer over ``c <= block / 2`` channels wastes at least half of every element it moves: a 3x3
convolution from 8 channels to 8 uses a quarter of the 16x16 core, and its input and output cross DRAM
padded to 16 channels. :func:`pair_rows` rewrites such tensors *paired*,

    pair(x)[n, h * C + c, Y, X] = x[n, c, 2 * Y + h, X]        (h < 2: the row's half)

with ``2C`` channels over half the rows, and every node around them to match, so the graph computes the same
values bit for bit. A paired tensor fills whole blocks; a convolution between paired tensors does half the
GEMM iterations and moves half the bytes.

**Convolutions** (:func:`row_pairing`). Over an input paired ``fi`` times (1 or 2) into an output paired ``fo``
times, output row ``fo * Y + ho`` reads input row ``r = s * (fo * Y + ho) - top + ky``, which is paired row
``(s * fo / fi) * Y + (s * ho - top + ky) // fi``, half ``(s * ho - top + ky) % fi``. So the rewrite is a
plain conv2d of stride ``s * fo / fi`` (an integer: an unpairing convolution needs stride 2) whose kernel rows
span those offsets, with weight ``[(ho, o), (hi, c), j, kx] = w[o, c, ky, kx]`` where ``(ho, ky)`` lands on
row offset ``j`` and half ``hi``, zero elsewhere. Padding stays padding: a padded row is zero in both forms
(only symmetric int8, zero point 0, is lowered). The rewritten node keeps the network's multiply-accumulates
in its :data:`MACS` attribute, so the zero taps it adds never count as work done, and says what it pairs in
:data:`PAIRED` (the step table's note).

**Epilogues and activations** between them (elementwise nodes and tables) apply to a paired tensor as they
are, their per-channel operands repeated for both halves. **A channel concat** of paired values keeps each
part's channels in its own order (its two halves, then the next part's): the convolutions reading it take that
order into their weights, and its parts still store into it in place.

**What is paired** (:func:`pair_rows`). Values joined by elementwise nodes form a *class* (one channel
order), and classes joined by a channel concat a *group*, paired whole or not at all. A group can be paired when its
values are 4-D integer tensors of the same rows and columns, an even number of rows, per-tensor quantized, and
every node touching them is an elementwise node with per-channel or scalar operands, a table, a channel concat
or a conv2d (groups 1, no dilation along the rows); a graph input or output is never paired. Pairing a group forces
the output of a convolution over it that cannot unpair (stride 1), and the input of a concatenation part copied
into it (:mod:`vdla.graph.copies`, which the model compiler elides when the part has the concat's shape).
:func:`choose_pairings` makes moves greedily, each a group with a class of at most ``block / 2`` channels and what it
forces, the one that most lowers :func:`conv_cost` of the convolutions it touches first, while one does. A
convolution whose input the host computes is costed in the form :mod:`vdla.graph.im2col` then gives it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vdla.graph.copies import COPY
from vdla.graph.epilogue import mask_node
from vdla.graph.ew import is_elementwise
from vdla.graph.graph import DisjointSets, Graph, Node
from vdla.graph.im2col import computed_on_host, im2col_window
from vdla.graph.interp import evaluate
from vdla.graph.opnames import CONCAT, CONV2D, TABLE
from vdla.graph.ops import infer_types
from vdla.graph.passes import fresh_name
from vdla.graph.types import Quant, TensorType
from vdla.graph.window import make_window

PAIR = 2  # rows per paired row
MACS = "macs"  # conv2d attribute: the network's multiply-accumulates of a layer rewritten with zero taps
PAIRED = "paired"  # conv2d attribute: which of its input and output are paired ("input", "output", "input and output")
PHASED = "phased"  # conv2d attribute: which of its paired input and output pair their rows from -1 (phase 1)


@dataclass(frozen=True)
class RowPairing:
    """A convolution's rows rewritten over a paired input and output (:func:`row_pairing`): the new kernel rows,
    stride and row padding, and the new row offset ``j`` and input half ``hi`` of each (output half ``ho``,
    kernel row ``ky``)."""

    kernel: int
    stride: int
    top: int
    bottom: int
    taps: tuple[tuple[int, int, int, int], ...]  # (ho, ky, j, hi)


def row_pairing(
    kh: int, stride: int, top: int, h: int, oh: int, fi: int, fo: int, pi: int = 0, po: int = 0
) -> RowPairing | None:
    """The rows of a convolution (``kh`` kernel rows, ``stride``, ``top`` padding rows; ``h`` input and ``oh``
    output rows) over an input paired ``fi`` times with phase ``pi`` into an output paired ``fo`` times with
    phase ``po``, or None where that is not a convolution: an odd ``h`` or ``oh`` to pair, or a stride that does
    not divide."""
    if (stride * fo) % fi or h % fi or oh % fo or (pi and fi == 1) or (po and fo == 1):
        return None
    s2, h2, oh2 = stride * fo // fi, h // fi + pi, oh // fo + po
    rows = [(ho, ky, stride * (ho - po) - top + ky + pi) for ho in range(fo) for ky in range(kh)]
    offs = [(ho, ky, r // fi, r % fi) for ho, ky, r in rows]
    lo, hi = min(t[2] for t in offs), max(t[2] for t in offs)
    kernel, top2 = hi - lo + 1, -lo
    bottom = max(0, (oh2 - 1) * s2 + kernel - h2 - top2)
    if (h2 + top2 + bottom - kernel) // s2 + 1 != oh2:
        return None
    return RowPairing(kernel, s2, top2, bottom, tuple((ho, ky, j - lo, r) for ho, ky, j, r in offs))


def pair_weights(w: np.ndarray, rf: RowPairing, fi: int, fo: int) -> np.ndarray:
    """OIHW weights ``w`` of a convolution rewritten by ``rf`` (output channel ``ho * O + o``, input channel
    ``hi * C + c``), zero where no kernel row lands."""
    o, c, _, kw = w.shape
    out = np.zeros((fo * o, fi * c, rf.kernel, kw), w.dtype)
    for ho, ky, j, hi in rf.taps:
        out[ho * o : (ho + 1) * o, hi * c : (hi + 1) * c, j] = w[:, :, ky]
    return out


@dataclass(frozen=True)
class _Conv:
    """A conv2d node's shape as :func:`conv_cost` and the rewrite need it."""

    node: Node
    n: int
    c: int
    h: int
    w: int
    oc: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride: int
    top: int
    host: bool  # its input is computed on the host (an im2col may pack it)

    def pairing(self, fi: int, fo: int, pi: int = 0, po: int = 0) -> RowPairing | None:
        return row_pairing(self.kh, self.stride, self.top, self.h, self.oh, fi, fo, pi, po)


def conv_cost(cv: _Conv, fi: int, fo: int, block: int, bus_bytes: int, pi: int = 0, po: int = 0) -> float:
    """The cycles a convolution takes at best with its input paired ``fi`` times with phase ``pi`` and its output
    ``fo`` times with phase ``po`` (inf where that is not a convolution): the larger of its GEMM iterations and
    its input and output bytes over the bus, channels rounded up to blocks."""
    rf = cv.pairing(fi, fo, pi, po)
    if rf is None:
        return math.inf
    c, oc, h, oh, kh = cv.c * fi, cv.oc * fo, cv.h // fi + pi, cv.oh // fo + po, rf.kernel
    blocks, in_bytes = math.ceil(c / block) * kh * cv.kw, cv.n * math.ceil(c / block) * block * h * cv.w
    win = im2col_window(c, kh, cv.kw, block) if cv.host else None
    if win is not None:  # the host packs the window's channels (vdla.graph.im2col)
        packed = math.ceil(c * win[0] * win[1] / block)
        blocks = packed * (cv.kw // win[1])
        in_bytes = cv.n * packed * block * oh * (cv.ow if win[1] == cv.kw else cv.w)
    iters = cv.n * oh * cv.ow * blocks * math.ceil(oc / block)
    out_bytes = cv.n * math.ceil(oc / block) * block * oh * cv.ow
    return max(iters, (in_bytes + out_bytes) / bus_bytes)


def _conv(node: Node, types: Mapping[str, TensorType], graph: Graph) -> _Conv | None:
    """The shape of a conv2d node the rewrite takes (see the module docstring), else None."""
    a = node.attrs
    if node.op != CONV2D or int(a.get("groups", 1)) != 1 or any(i not in graph.params for i in node.inputs[1:]):
        return None
    x, y, w = types[node.inputs[0]], types[node.output], graph.params[node.inputs[1]]
    win = _window(a, x.shape[2:], w.shape[2:])
    if win.dilation[0] != 1:
        return None
    n, c, h, wd = x.shape
    _, oc, oh, ow = y.shape
    kh, kw = w.shape[2:]
    host = computed_on_host(node.inputs[0], graph)
    return _Conv(node, n, c, h, wd, oc, oh, ow, kh, kw, win.stride[0], win.pads[0], host)


def _window(attrs: Mapping, hw: tuple[int, int], kernel: tuple[int, int]):
    stride, dilation, padding = attrs.get("stride", 1), attrs.get("dilation", 1), attrs.get("padding", 0)
    return make_window("conv2d", hw, kernel, stride, dilation, padding)[0]


def _channel_concat(node: Node, types: Mapping[str, TensorType]) -> bool:
    return node.op == CONCAT and len(types[node.output].shape) == 4 and int(node.attrs.get("axis", 0)) % 4 == 1


def _operand(node: Node, p: np.ndarray, t: TensorType) -> bool:
    """Whether parameter ``p`` of an elementwise node or table ``node`` applies to a paired value of type ``t``: a
    table of one row, or an operand broadcast as a scalar or per channel."""
    if node.op == TABLE:
        return p.ndim == 1
    return p.size == 1 or (
        len(t.shape) == 4 and p.ndim >= 3 and p.shape[-3:] == (t.shape[1], 1, 1) and p.size == t.shape[1]
    )


class _Plan:
    """What can pair: *classes* of values joined by elementwise nodes (one channel order each), *groups* of
    classes joined by channel concats (paired together), and the convolutions around them."""

    def __init__(self, graph: Graph, types: Mapping[str, TensorType], block: int) -> None:
        self.graph, self.types, self.block = graph, types, block
        self.consumers = graph.consumers()
        self.classes, self.groups = DisjointSets(), DisjointSets()
        self.convs: dict[str, _Conv] = {}
        blocked: set[str] = set(graph.inputs) | set(graph.outputs)
        roots: dict[str, list[Node]] = {}  # nodes computing a class's values from outside it
        concats: list[Node] = []
        for node in graph.nodes:
            values = [i for i in node.inputs if i not in graph.params]
            for v in [*values, node.output]:
                self.classes.find(v)
            cv = _conv(node, types, graph)
            if cv is not None:
                self.convs[node.output] = cv
            elif node.op == TABLE or is_elementwise(node):
                for v in values:
                    self.classes.union(v, node.output)
                if not all(
                    _operand(node, graph.params[i], types[node.output]) for i in node.inputs[1:] if i in graph.params
                ):
                    blocked.update(values + [node.output])
                continue
            elif _channel_concat(node, types) and not any(i in graph.params for i in node.inputs):
                concats.append(node)
            else:
                blocked.update(values + [node.output])
            roots.setdefault(node.output, []).append(node)
        members = self.classes.sets()
        self.members, self.roots = members, roots
        for node in concats:
            for v in node.inputs:
                self.groups.union(self.classes.find(v), self.classes.find(node.output))
        bad = {self.classes.find(v) for v in blocked if v in self.classes.parent}
        for k, vs in members.items():  # a concat's channel order must be its class's only one
            ns = [n for v in vs for n in roots.get(v, [])]
            if len(ns) > 1 and any(n.op == CONCAT for n in ns):
                bad.add(k)
        by_group: dict[str, list[str]] = {}
        for k in members:
            by_group.setdefault(self.groups.find(k), []).append(k)
        self.group_classes = {
            g: ks
            for g, ks in by_group.items()
            if not bad & set(ks) and self._pairable([v for k in ks for v in members[k]])
        }

    def _pairable(self, values: list[str]) -> bool:
        """Values of one shape but channels, 4-D, integer, per-tensor quantized, with an even number of rows."""
        types = [self.types[v] for v in values]
        if any(len(t.shape) != 4 for t in types):
            return False
        integer = all(t.dtype.startswith(("int", "uint")) for t in types)
        per_tensor = all(t.quant is None or len(t.quant.scale) == 1 for t in types)
        nhw = {(t.shape[0], *t.shape[2:]) for t in types}
        return integer and per_tensor and len(nhw) == 1 and types[0].shape[2] % PAIR == 0

    def narrow(self, group: str) -> bool:
        """Whether a class of the group has at most half a block of channels (a seed of :func:`choose_pairings`)."""
        return any(2 * self.types[k].shape[1] <= self.block for k in self.group_classes[group])

    def group(self, value: str) -> str:
        return self.groups.find(self.classes.find(value))

    def factor(self, value: str, paired: set[str]) -> int:
        return PAIR if self.group(value) in paired else 1

    def closure(self, seed: str, paired: set[str]) -> set[str] | None:
        """``seed`` and the groups pairing it forces, None where one of those cannot pair: the output of a
        convolution over it that cannot unpair (stride 1), and the input of a concatenation part copied into it
        (:mod:`vdla.graph.copies`), so that the part still stores into the concatenation itself."""
        move, todo = {seed}, [seed]
        while todo:
            g = todo.pop()
            for cv in self.convs.values():
                src, out = self.group(cv.node.inputs[0]), self.group(cv.node.output)
                if src == g and out not in move | paired and cv.pairing(PAIR, 1) is None:
                    if out not in self.group_classes:
                        return None
                    move.add(out)
                    todo.append(out)
                elif out == g and cv.node.attrs.get(COPY) == "concat" and src not in move | paired:
                    if src in self.group_classes:
                        move.add(src)
                        todo.append(src)
        return move

    def touching(self, groups: set[str]) -> list[_Conv]:
        return [
            cv for cv in self.convs.values() if {self.group(cv.node.inputs[0]), self.group(cv.node.output)} & groups
        ]

    def cost(self, convs: list[_Conv], paired: set[str], bus_bytes: int, phased: frozenset[str] = frozenset()) -> float:
        return sum(
            conv_cost(
                cv,
                self.factor(cv.node.inputs[0], paired),
                self.factor(cv.node.output, paired),
                self.block,
                bus_bytes,
                self.phase(cv.node.inputs[0], phased),
                self.phase(cv.node.output, phased),
            )
            for cv in convs
        )

    def phase(self, value: str, phased: frozenset[str] | set[str]) -> int:
        """1 where ``value``'s class is paired with a phase (its rows paired from -1), else 0."""
        return int(self.classes.find(value) in phased)

    def halves(self, k: str, paired: set[str]) -> bool:
        """Whether paired class ``k`` may take the channel order of whole halves (``h * C + c``: each block one
        row's channels) rather than :func:`paired_order`: whole blocks per half (``C`` a multiple of the block), a
        group of its own computed by one plain convolution and read by plain convolutions alone. Its readers then
        skip the blocks of a half their kernel rows never meet (zero weight blocks), where a paired block always
        holds both halves; no slice or concatenation needs its blocks to hold whole channel groups."""
        whole = self.types[self.members[k][0]].shape[1] % self.block == 0
        return whole and self.between_convs(k, paired) is not None

    def between_convs(self, k: str, paired: set[str]) -> tuple[str, _Conv, list[_Conv]] | None:
        """(the value convolutions read, the convolution computing the class, those reading it) where paired class
        ``k`` lies between plain convolutions alone: a group of its own, computed by one plain convolution (not a
        copy, its input not the host's), its int8 value read by plain convolutions alone, every one reading that
        value; else None. Such a class may take a phase or the order of whole halves."""
        g = self.groups.find(k)
        if g not in paired or self.group_classes.get(g) != [k]:
            return None
        values = set(self.members[k])
        roots = [n for v in values for n in self.roots.get(v, [])]
        root = self.convs.get(roots[0].output) if len(roots) == 1 else None
        if root is None or root.host or COPY in root.node.attrs:
            return None
        readers = [n for v in values for n in self.consumers.get(v, []) if n.output not in values]
        exits = {n.inputs[0] for n in readers}
        if not readers or len(exits) != 1 or self.types[next(iter(exits))].dtype != "int8":
            return None
        convs = [self.convs.get(n.output) for n in readers]
        if any(cv is None or cv.host or COPY in cv.node.attrs for cv in convs):
            return None
        return next(iter(exits)), root, convs


def choose_phases(plan: _Plan, paired: set[str], bus_bytes: int) -> dict[str, tuple[str, _Conv]]:
    """The paired classes :func:`pair_rows` pairs their rows from -1 (class -> the value convolutions read, the
    convolution computing it): in graph order, each class between convolutions alone (:meth:`_Plan.between_convs`)
    whose phase lowers :func:`conv_cost` of the convolution computing it and those reading it, given the phases
    taken before it. A 3x3 convolution of stride 1 between values paired with opposite phases reads two paired
    rows, not three."""
    phased: dict[str, tuple[str, _Conv]] = {}
    order = {n.output: i for i, n in enumerate(plan.graph.nodes)}
    found = [(k, plan.between_convs(k, paired)) for k in plan.members]
    found = sorted(((k, c) for k, c in found if c), key=lambda kc: order[kc[1][1].node.output])
    for k, (value, root, readers) in found:
        convs, now = [root, *readers], frozenset(phased)
        if plan.cost(convs, paired, bus_bytes, now | {k}) < plan.cost(convs, paired, bus_bytes, now):
            phased[k] = (value, root)
    return phased


def choose_pairings(graph: Graph, block: int, bus_bytes: int) -> tuple[_Plan, set[str]]:
    """The groups :func:`pair_rows` pairs: repeatedly the move (a narrow group and the groups it forces) that
    lowers :func:`conv_cost` of the convolutions it touches most, while one does."""
    plan = _Plan(graph, infer_types(graph), block)
    paired: set[str] = set()
    while True:
        best, gain = None, 0.0
        for seed in sorted(g for g in plan.group_classes.keys() - paired if plan.narrow(g)):
            move = plan.closure(seed, paired)
            if move is None:
                continue
            convs = plan.touching(move)
            g = plan.cost(convs, paired, bus_bytes) - plan.cost(convs, paired | move, bus_bytes)
            if g > gain:
                best, gain = move, g
        if best is None:
            return plan, paired
        paired |= best


def paired_order(c: int, group: int) -> np.ndarray:
    """The channel order of a paired convolution's output of ``c`` channels: each ``group`` of channels (half a
    block) in its two halves, ``(h, c)`` as the index ``h * c + ch``. A block of the paired value then holds one
    group in both halves, so a slice of whole groups of the value before is a slice of whole blocks after it."""
    return np.concatenate([h * c + np.arange(k, min(k + group, c)) for k in range(0, c, group) for h in range(PAIR)])


def pair_rows(graph: Graph, block: int, bus_bytes: int, phases: bool = True) -> Graph:
    """Pair every group of narrow values where that pays (see the module docstring); ``block``: the
    accelerator's ``block_in``, ``bus_bytes``: its DRAM bytes per cycle; ``phases``: pair some classes' rows
    from -1 where that pays (:func:`choose_phases`; the accelerator then masks their edge rows, which needs
    GEMMs reading OUT). The graph's inputs, outputs and the values it computes outside the paired groups are
    unchanged. A channel selection (:mod:`vdla.graph.copies`) that the pairing makes a slice of whole blocks becomes
    that slice, which the layers reading it read in place."""
    plan, paired = choose_pairings(graph, block, bus_bytes)
    if not paired:
        return graph
    phased = choose_phases(plan, paired, bus_bytes) if phases else {}
    exits = {value: k for k, (value, _) in phased.items()}  # the value a phased class's readers read -> the class
    params, param_types = dict(graph.params), dict(graph.param_types)
    taken = set(plan.types) | set(params)
    orders: dict[str, np.ndarray] = {}  # paired class -> the (half, channel) index h * C + c of each channel
    consumers = graph.consumers()
    nodes: list[Node] = []
    skip: set[str] = set()
    for node in graph.nodes:
        cv = plan.convs.get(node.output)
        if node.output in skip:
            continue
        if cv is not None:
            fi, fo = plan.factor(node.inputs[0], paired), plan.factor(node.output, paired)
            pi, po = plan.phase(node.inputs[0], phased), plan.phase(node.output, phased)
            if fi == fo == 1:
                nodes.append(node)
                continue
            order_in = orders[plan.classes.find(node.inputs[0])] if fi == PAIR else np.arange(cv.c)
            if fo == PAIR and plan.halves(plan.classes.find(node.output), paired):
                order_out = np.arange(PAIR * cv.oc)  # whole blocks of one half: the readers skip the other's
            else:
                order_out = paired_order(cv.oc, block // PAIR) if fo == PAIR else np.arange(cv.oc)
            if fo == PAIR:
                orders[plan.classes.find(node.output)] = order_out
            conv = _pair_conv(cv, (fi, fo), (pi, po), order_in, order_out, params, param_types, taken)
            view = _block_slice(conv, cv, plan, consumers, params, block)
            if view is not None:
                skip.update(n.output for n in view[1])
                orders[plan.classes.find(view[0].output)] = order_out
            nodes.append(conv if view is None else view[0])
        elif plan.factor(node.output, paired) == PAIR:
            if node.op == CONCAT:
                orders[plan.classes.find(node.output)] = _concat_order(node, plan, orders)
            order = orders[plan.classes.find(node.output)]
            nodes.append(_pair_elementwise(node, order, params, param_types, taken))
        else:
            nodes.append(node)
        if nodes and nodes[-1].output in exits:  # a phased class's value: its rows outside the tensor zeroed
            k = exits[nodes[-1].output]
            nodes[-1:] = _masked(nodes[-1], orders[k], phased[k][1].oh, params, taken)
    return graph.copy(nodes=nodes, params=params, param_types=param_types)


def edge_mask(order: np.ndarray, rows: int) -> np.ndarray:
    """The (channels, paired rows) bool mask of a value of ``rows`` real rows paired with phase 1, its channels
    in ``order`` ((half, channel) indices): True where the half's real row ``2 * Y + h - 1`` is outside it."""
    c = len(order) // PAIR
    real = PAIR * np.arange(rows // PAIR + 1)[None, :] + (order // c)[:, None] - 1
    return (real < 0) | (real >= rows)


def _masked(node: Node, order: np.ndarray, rows: int, params: dict, taken: set[str]) -> list[Node]:
    """``node`` writing the value a phased class's readers read, then the clip that zeroes its halves outside the
    tensor (:func:`vdla.graph.epilogue.mask_node`), which writes the value under its old name."""

    def param(name: str, value: np.ndarray) -> str:
        params[fresh := fresh_name(name, taken)] = value
        return fresh

    inner = fresh_name(f"{node.output}:unmasked", taken)
    mask = mask_node(inner, node.output, edge_mask(order, rows), param)
    return [Node(node.op, node.inputs, inner, dict(node.attrs)), mask]


def _block_slice(
    conv: Node,
    cv: _Conv,
    plan: _Plan,
    consumers: Mapping[str, list[Node]],
    params: Mapping[str, np.ndarray],
    block: int,
) -> tuple[Node, list[Node]] | None:
    """A channel selection ``conv`` (rewritten) that selects whole blocks of its paired input in order, whose
    epilogue gives the int8 input back unchanged at the input's quantization, as ``(slice node, the epilogue's
    nodes it replaces)``; else None."""
    if cv.node.attrs.get(COPY) != "slice" or cv.n != 1 or len(conv.inputs) > 2:
        return None
    w = params[conv.inputs[1]]
    if w.shape[2:] != (1, 1) or conv.attrs["stride"] != [1, 1] or conv.attrs["padding"] != [0, 0, 0, 0]:
        return None
    sel = w[:, :, 0, 0]
    lo = int(np.argmax(sel[0])) if sel.any() else -1
    n, c = sel.shape
    if lo % block or lo + n > c or not np.array_equal(sel, np.eye(c, dtype=sel.dtype)[lo : lo + n]):
        return None
    chain = _identity_chain(plan, cv.node.output, consumers)
    if chain is None:
        return None
    h, wd = plan.types[cv.node.output].shape[2] // PAIR, cv.ow
    attrs = {"starts": [0, lo, 0, 0], "stops": [1, lo + n, h, wd], "steps": [1, 1, 1, 1]}
    return Node("slice", (conv.inputs[0],), chain[-1].output, attrs), chain


def _identity_chain(plan: _Plan, acc: str, consumers: Mapping[str, list[Node]]) -> list[Node] | None:
    """The elementwise nodes after a selection convolution's accumulator ``acc`` up to its int8 value, where they
    give every int8 input back unchanged at the quantization of the convolution's input; else None."""
    graph, types = plan.graph, plan.types
    chain, v = [], acc
    while types[v].dtype != "int8":
        readers = consumers.get(v, [])
        if len(readers) != 1 or v in graph.outputs or not is_elementwise(readers[0]):
            return None
        chain.append(readers[0])
        v = readers[0].output
    source = plan.convs[acc].node.inputs[0]
    if not chain or types[v].quant != types[source].quant:
        return None
    c = types[acc].shape[1]
    x = np.broadcast_to(np.arange(-128, 128, dtype=np.int32)[None, None, :, None], (1, c, 256, 1))
    used = {i for n in chain for i in n.inputs if i in graph.params}
    sub = Graph(
        {acc: TensorType(x.shape, types[acc].dtype)}, chain, [v], {i: graph.params[i] for i in used},
        {i: t for i, t in graph.param_types.items() if i in used},
    )  # fmt: skip
    return chain if np.array_equal(evaluate(sub, {acc: np.ascontiguousarray(x)})[v], x) else None


def _concat_order(node: Node, plan: _Plan, orders: Mapping[str, np.ndarray]) -> np.ndarray:
    """The channel order of a channel concat of paired values: each input's channels in its own order, as
    (half, channel) indices of the concat's channels."""
    total, parts, offset = plan.types[node.output].shape[1], [], 0
    for v in node.inputs:
        c = plan.types[v].shape[1]
        h, ch = np.divmod(orders[plan.classes.find(v)], c)
        parts.append(h * total + offset + ch)
        offset += c
    return np.concatenate(parts)


def _new_param(name: str, value: np.ndarray, params: dict, param_types: dict, taken: set[str]) -> str:
    fresh = fresh_name(f"{name}:pair", taken)
    params[fresh] = np.ascontiguousarray(value)
    if name in param_types:
        t, q = param_types[name], param_types[name].quant
        if q is not None and len(q.scale) > 1:  # per channel: the scales repeat as the channels do
            q = Quant(q.scale * (params[fresh].shape[q.axis] // len(q.scale)), q.zero_point, q.axis)
        param_types[fresh] = TensorType(params[fresh].shape, t.dtype, q)
    return fresh


def _pair_conv(
    cv: _Conv,
    factors: tuple[int, int],
    phases: tuple[int, int],
    order_in: np.ndarray,
    order_out: np.ndarray,
    params: dict,
    param_types: dict,
    taken: set[str],
) -> Node:
    """The conv2d of ``cv`` over an input paired ``fi`` times with phase ``pi`` into an output paired ``fo`` times
    with phase ``po`` (``factors``, ``phases``), their channels in ``order_in`` and ``order_out`` ((half, channel)
    indices)."""
    node = cv.node
    (fi, fo), (pi, po) = factors, phases
    rf = cv.pairing(fi, fo, pi, po)
    assert rf is not None, f"{node.output}: chosen with a pairing that is not a convolution"
    x, w, *bias = node.inputs
    w2 = _new_param(w, pair_weights(params[w], rf, fi, fo)[order_out][:, order_in], params, param_types, taken)
    if bias and fo == PAIR:
        b = params[bias[0]]
        both = np.concatenate([b.reshape(-1)] * PAIR)[order_out].reshape((-1,) + b.shape[1:])
        bias = [_new_param(bias[0], both, params, param_types, taken)]
    win = _window(node.attrs, (cv.h, cv.w), (cv.kh, cv.kw))
    _, _, left, right = win.pads
    attrs = dict(node.attrs)
    attrs.update(
        stride=[rf.stride, win.stride[1]], padding=[rf.top, rf.bottom, left, right], dilation=[1, win.dilation[1]]
    )
    attrs.setdefault(MACS, cv.n * cv.oc * cv.oh * cv.ow * cv.c * cv.kh * cv.kw)
    attrs[PAIRED] = " and ".join(name for name, f in (("input", fi), ("output", fo)) if f == PAIR)
    if pi or po:
        attrs[PHASED] = " and ".join(name for name, p in (("input", pi), ("output", po)) if p)
    return Node("conv2d", (x, w2, *bias), node.output, attrs)


def _pair_elementwise(node: Node, order: np.ndarray, params: dict, param_types: dict, taken: set[str]) -> Node:
    """An elementwise node (or a table, or a concat) over paired values: per-channel operands in ``order``."""
    inputs = list(node.inputs)
    if node.op not in (TABLE, CONCAT):
        for k, i in enumerate(inputs[1:], 1):
            p = params.get(i)
            if p is not None and p.size > 1:
                c = p.shape[-3]
                inputs[k] = _new_param(i, np.take(p, order % c, axis=-3), params, param_types, taken)
    return Node(node.op, tuple(inputs), node.output, dict(node.attrs))
