"""The fusion pass: cut a graph into groups that each run as one kernel.

:func:`fuse_ops` is operator fusion by TVM's post-dominator rules (``FuseOps``): each node is fused into its
immediate post-dominator's group when every path between the two is fusable, which takes a conv2d's whole
integer epilogue (diamonds included) into the conv's group. Its groups are then cut to what a target's
kernels run: :func:`split_groups` cuts a group around the part a target claims (the model compiler's
partition: the accelerator's epilogue chain, the rest of the group to the CPU), :func:`split_by_guard` cuts
them where a run may skip a branch chosen at run time (:mod:`vdla.graph.branches`), and the CPU fallback cuts
each group into the chains its kernels stack (``vdla.cpu_fallback.stacking.fuse``).

Fusion rules of :func:`fuse_ops` (TVM's, on the finer :class:`Pattern` levels; an *edge* is the pattern
of the consumer, lowered to elementwise where a broadcasting consumer reads an input of its own shape):

* a COMPLEX group (conv2d, dense, matmul) fuses into its ipdom when the post-dominator relation is
  elementwise and every node on the paths, the ipdom included, is elementwise or broadcast; that is how
  bias, multiplier, shift, residual add, clip and cast join the conv;
* an elementwise or broadcast group fuses into an injective or reduction ipdom when every node on the
  paths is at most injective (the ipdom may already hold a COMPLEX anchor);
* an injective group (reshape, transpose, pad, concat, layout changes) fuses, in a second phase so that
  every conv has finished fusing first, into its ipdom when every path, the ipdom included, is injective;
* a reduction group fuses into nothing itself (elementwise producers fuse into it), and an OPAQUE node
  (softmax, unknown operators) never fuses.

A node whose output is a graph output, or whose paths reach the graph's outputs separately, has the
virtual sink as immediate post-dominator and is never fused into a successor.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum

from vdla.graph.graph import DisjointSets, Graph, Node
from vdla.graph.ops import COMPLEX, INJECTIVE, OPAQUE, OPS, REDUCTION, infer_types, kind
from vdla.graph.types import TensorType
from vdla.graph.verify import GraphError

# the operators whose kernel takes a chain of elementwise consumers as its epilogue (conv2d, dense)
EPILOGUE_ANCHORS = tuple(name for name, d in OPS.items() if d.epilogue)


# ---------------------------------------------------------------------------------------------------------
# Post-dominator fusion


class Pattern(IntEnum):
    """TVM's operator pattern levels, finer than :func:`vdla.graph.ops.kind`; a higher level fuses less.

    Elementwise and broadcast split the operators registered with ``broadcast`` (the elementwise operators
    and batch_norm, :class:`vdla.graph.ops.OpDef`); the other injective operators (reshape, transpose, pad,
    concat, layout changes) stay INJECTIVE.
    """

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    COMPLEX = 4
    OPAQUE = 8


_KIND_PATTERN = {
    INJECTIVE: Pattern.INJECTIVE,
    REDUCTION: Pattern.REDUCTION,
    COMPLEX: Pattern.COMPLEX,
    OPAQUE: Pattern.OPAQUE,
}


def node_pattern(node: Node, types: Mapping[str, TensorType]) -> Pattern:
    """The pattern of ``node``: an elementwise operator is ELEMWISE when every input has its output's
    shape, else BROADCAST; other operators take their kind's level."""
    opdef = OPS.get(node.op)
    if opdef is not None and opdef.broadcast:
        out = types[node.output].shape
        same = all(types[i].shape == out for i in node.inputs)
        return Pattern.ELEMWISE if same else Pattern.BROADCAST
    return _KIND_PATTERN[kind(node.op)]


def _edge_pattern(value: str, consumer: Node, pattern: Pattern, types: Mapping[str, TensorType]) -> Pattern:
    if pattern == Pattern.BROADCAST and types[value].shape == types[consumer.output].shape:
        return Pattern.ELEMWISE
    return pattern


@dataclass(frozen=True)
class _Dag:
    """The dataflow DAG of the nodes (indices in graph order); parameters and inputs are not nodes.

    ``succ[i]`` lists each consumer of node ``i`` once with the edge's pattern; ``extern[i]`` says node
    ``i``'s output is a graph output (read by the virtual sink).
    """

    nodes: tuple[Node, ...]
    pattern: tuple[Pattern, ...]
    succ: tuple[tuple[tuple[int, Pattern], ...], ...]
    extern: tuple[bool, ...]


def _dag(graph: Graph, types: Mapping[str, TensorType]) -> _Dag:
    index = {n.output: i for i, n in enumerate(graph.nodes)}
    pattern = tuple(node_pattern(n, types) for n in graph.nodes)
    succ: list[list[tuple[int, Pattern]]] = [[] for _ in graph.nodes]
    for j, node in enumerate(graph.nodes):
        for v in dict.fromkeys(node.inputs):
            if v in index:
                succ[index[v]].append((j, _edge_pattern(v, node, pattern[j], types)))
    outputs = set(graph.outputs)
    extern = tuple(n.output in outputs for n in graph.nodes)
    return _Dag(tuple(graph.nodes), pattern, tuple(tuple(s) for s in succ), extern)


@dataclass(frozen=True)
class _PostDom:
    """The post-dominator tree over the DAG, rooted at the virtual sink (``None``).

    ``pattern[i]`` is the highest edge pattern met between node ``i`` and its ipdom (TVM's
    approximation of the paths' pattern: the edges out of ``i`` and the tree nodes climbed to the LCA).
    """

    parent: tuple[int | None, ...]
    depth: tuple[int, ...]
    pattern: tuple[Pattern, ...]


def _lca(a: int | None, b: int | None, pat: Pattern, tree: _PostDomBuilder) -> tuple[int | None, Pattern]:
    while a != b:
        if a is None or b is None:
            return None, pat
        da, db = tree.depth[a], tree.depth[b]
        if da <= db:
            pat, b = max(pat, tree.pattern[b]), tree.parent[b]
        if db <= da:
            pat, a = max(pat, tree.pattern[a]), tree.parent[a]
    return a, pat


class _PostDomBuilder:
    """Mutable arrays filled in reverse topological order (each node after all its consumers)."""

    def __init__(self, n: int):
        self.parent: list[int | None] = [None] * n
        self.depth = [1] * n
        self.pattern = [Pattern.OPAQUE] * n

    def add(self, i: int, dag: _Dag) -> None:
        if dag.extern[i] or not dag.succ[i]:
            return  # the sink is the ipdom: depth 1, never fused forward
        (first, pat), *rest = dag.succ[i]
        node: int | None = first
        for j, edge in rest:
            node, pat = _lca(node, j, max(pat, edge), self)
        self.parent[i], self.pattern[i] = node, pat
        self.depth[i] = 1 if node is None else self.depth[node] + 1


def _post_dom(dag: _Dag) -> _PostDom:
    b = _PostDomBuilder(len(dag.nodes))
    for i in reversed(range(len(dag.nodes))):
        b.add(i, dag)
    return _PostDom(tuple(b.parent), tuple(b.depth), tuple(b.pattern))


def post_dominators(graph: Graph) -> dict[str, str | None]:
    """The immediate post-dominator of every node (node output -> node output; ``None``: the virtual
    sink reading the graph outputs). A node read on several paths gets the least common post-dominator
    of its consumers; a node whose output is a graph output gets the sink."""
    tree = _post_dom(_dag(graph, infer_types(graph)))
    names = [n.output for n in graph.nodes]
    return {names[i]: None if p is None else names[p] for i, p in enumerate(tree.parent)}


class _UnionFind(DisjointSets):
    """Groups as a union-find over node indices; a root carries its group's pattern (a COMPLEX anchor
    raises it to COMPLEX when merged in, as in TVM's MergeFromTo)."""

    def __init__(self, patterns: Sequence[Pattern]):
        super().__init__(range(len(patterns)))
        self.pattern = list(patterns)

    def merge(self, child: int, target: int) -> None:
        child, target = self.union(child, target)
        if child != target and self.pattern[child] == Pattern.COMPLEX:
            self.pattern[target] = Pattern.COMPLEX


Cond = Callable[[Pattern, bool], bool]


def _walk(src: int, sink: int, dag: _Dag) -> list[int]:
    """Every node on a path from ``src`` to ``sink`` (its ipdom), ``sink`` included, ``src`` excluded."""
    seen: set[int] = set()
    stack = [j for j, _ in dag.succ[src]]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v != sink:
            stack += [j for j, _ in dag.succ[v]]
    return sorted(seen)


def _check_path(src: int, sink: int, dag: _Dag, uf: _UnionFind, cond: Cond) -> bool:
    return all(cond(uf.pattern[uf.find(v)], v == sink) for v in _walk(src, sink, dag))


def _commit(src: int, sink: int, dag: _Dag, uf: _UnionFind) -> None:
    for v in [src, *_walk(src, sink, dag)]:
        uf.merge(v, sink)


def _complex_cond(p: Pattern, is_sink: bool) -> bool:
    return p <= Pattern.BROADCAST


def _broadcast_cond(p: Pattern, is_sink: bool) -> bool:
    return p <= Pattern.INJECTIVE or (is_sink and p in (Pattern.REDUCTION, Pattern.COMPLEX))


def _injective_cond(p: Pattern, is_sink: bool) -> bool:
    return p <= Pattern.INJECTIVE


def _rule(group: Pattern, dom: Pattern, phase: int) -> Cond | None:
    """The path condition under which a group of pattern ``group`` may fuse into its ipdom in ``phase``."""
    if group == Pattern.COMPLEX:
        return _complex_cond if phase == 0 and dom == Pattern.ELEMWISE else None
    if group <= Pattern.BROADCAST:
        return _broadcast_cond if dom <= Pattern.REDUCTION else None
    if group == Pattern.INJECTIVE:
        return _injective_cond if phase == 1 else None
    return None  # reductions fuse nothing forward; opaque nodes never fuse


def _fuse_node(i: int, phase: int, dag: _Dag, tree: _PostDom, uf: _UnionFind) -> None:
    sink = tree.parent[i]
    if sink is None or uf.find(i) == uf.find(sink):
        return
    cond = _rule(uf.pattern[uf.find(i)], tree.pattern[i], phase)
    if cond is not None and _check_path(i, sink, dag, uf, cond):
        _commit(i, sink, dag, uf)


@dataclass(frozen=True)
class Group:
    """One fused group: nodes run as one kernel.

    Invariants: ``nodes`` is non-empty and in graph (topological) order; ``anchor`` is its most complex
    node (the one COMPLEX node when there is one, else the highest pattern, the last on a tie);
    ``inputs`` are the non-parameter values it reads from outside (graph inputs, other groups' outputs)
    in order of first use; ``params`` the parameters it reads; ``outputs`` its node outputs read by
    another group or being graph outputs, in graph order.
    """

    index: int
    nodes: tuple[Node, ...]
    anchor: Node
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[str, ...]

    @property
    def kind(self) -> str:
        """The pattern kind of the anchor (:func:`vdla.graph.ops.kind`)."""
        return kind(self.anchor.op)

    @property
    def names(self) -> tuple[str, ...]:
        """The outputs of the group's nodes."""
        return tuple(n.output for n in self.nodes)

    @property
    def label(self) -> str:
        """``groupN``: the group's name in sub-graph names."""
        return f"group{self.index}"


@dataclass(frozen=True)
class Fusion:
    """The result of :func:`fuse_ops`.

    Invariants (checked by :func:`check_fusion`): every node is in exactly one group; ``groups`` are in a
    topological order of the group DAG (a group reads only graph inputs, parameters and outputs of
    earlier groups); every group is convex (no path leaves it and comes back); at most one COMPLEX node
    per group. ``group_of`` maps each node output to its group's index; ``ipdom`` each node output to its
    immediate post-dominator (``None``: the virtual sink). ``after`` holds ordering beyond the dataflow: node
    output -> the values it must follow (the conditions of a branch's nodes, :func:`split_by_guard`), which the
    group order and every later split keep as if the node read them.
    """

    groups: tuple[Group, ...]
    group_of: Mapping[str, int]
    ipdom: Mapping[str, str | None]
    after: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def readers_of(graph: Graph) -> dict[str, set[str]]:
    """Each value -> the outputs of the nodes reading it (the virtual sink ``""`` for graph outputs)."""
    readers: dict[str, set[str]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers.setdefault(v, set()).add(node.output)
    for o in graph.outputs:
        readers.setdefault(o, set()).add("")
    return readers


def boundary(
    graph: Graph, nodes: Sequence[Node], readers: Mapping[str, set[str]]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``(inputs, outputs, params)`` of a set of nodes: the non-parameter values they read from outside
    (order of first use), their outputs read outside or being graph outputs (their order), the
    parameters they read."""
    inside = {n.output for n in nodes}
    read = list(dict.fromkeys(v for n in nodes for v in n.inputs if v not in inside))
    inputs = tuple(v for v in read if v not in graph.params)
    params = tuple(v for v in read if v in graph.params)
    outputs = tuple(n.output for n in nodes if readers.get(n.output, set()) - inside)
    return inputs, outputs, params


def topological(keys: Sequence[int], edges: Iterable[tuple[int, int]]) -> list[int]:
    """``keys`` (distinct) in a topological order of ``edges`` (``(a, b)``: ``a`` before ``b``), the
    smallest ready key first (Kahn's); raises :class:`~vdla.graph.verify.GraphError` on a cycle."""
    succs: dict[int, set[int]] = {k: set() for k in keys}
    count = dict.fromkeys(keys, 0)
    for a, b in edges:
        if a != b and b not in succs[a]:
            succs[a].add(b)
            count[b] += 1
    ready = [k for k, c in count.items() if c == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for b in succs[k]:
            count[b] -= 1
            if count[b] == 0:
                heapq.heappush(ready, b)
    if len(order) != len(count):
        raise GraphError("the groups depend on each other in a cycle (a group is not convex)")
    return order


def _group_order(members: dict[int, list[int]], dag: _Dag, uf: _UnionFind) -> list[int]:
    """Group roots in a topological order of the group DAG, the earliest first node first."""
    first = {m[0]: root for root, m in members.items()}
    edges = ((members[uf.find(i)][0], members[uf.find(j)][0]) for i, s in enumerate(dag.succ) for j, _ in s)
    return [first[k] for k in topological(list(first), edges)]


def _anchor(nodes: Sequence[Node], dag: _Dag, index: Mapping[str, int]) -> Node:
    return max(reversed(nodes), key=lambda n: dag.pattern[index[n.output]])


def _result(graph: Graph, dag: _Dag, tree: _PostDom, uf: _UnionFind) -> Fusion:
    members: dict[int, list[int]] = {}
    for i in range(len(dag.nodes)):
        members.setdefault(uf.find(i), []).append(i)
    index = {n.output: i for i, n in enumerate(dag.nodes)}
    readers = readers_of(graph)
    groups: list[Group] = []
    for g, root in enumerate(_group_order(members, dag, uf)):
        nodes = tuple(dag.nodes[i] for i in members[root])
        groups.append(Group(g, nodes, _anchor(nodes, dag, index), *boundary(graph, nodes, readers)))
    group_of = {n.output: g.index for g in groups for n in g.nodes}
    names = [n.output for n in dag.nodes]
    ipdom = {names[i]: None if p is None else names[p] for i, p in enumerate(tree.parent)}
    return Fusion(tuple(groups), group_of, ipdom)


def fuse_ops(graph: Graph, types: Mapping[str, TensorType] | None = None) -> Fusion:
    """Fuse the nodes of ``graph`` into groups by TVM's post-dominator rules (see the module docstring).

    ``types`` (every value's type, from :func:`vdla.graph.ops.infer_types` when not given) tells
    elementwise edges from broadcasting ones. The result is checked with :func:`check_fusion`.
    """
    types = infer_types(graph) if types is None else types
    dag = _dag(graph, types)
    tree = _post_dom(dag)
    uf = _UnionFind(dag.pattern)
    for phase in (0, 1):
        for i in range(len(dag.nodes)):
            _fuse_node(i, phase, dag, tree, uf)
    fusion = _result(graph, dag, tree, uf)
    check_fusion(graph, fusion)
    return fusion


def _claim_masks(graph: Graph, claim_of: Mapping[str, int]) -> dict[str, int]:
    """Each node output -> the bitset of the claims it depends on (a path from a claimed node to it)."""
    deps: dict[str, int] = {}
    for node in graph.nodes:
        mask = 0
        for v in node.inputs:
            if v in deps:
                mask |= deps[v] | (1 << claim_of[v] if v in claim_of else 0)
        deps[node.output] = mask
    return deps


def _pieces(graph: Graph, fusion: Fusion, claims: Sequence[Collection[str]]) -> list[list[Node]]:
    """The node lists of the split groups: each claim, then the unclaimed nodes of each group cut by the
    set of claims they depend on (one piece per group and set), each in graph order."""
    claim_of = {v: k for k, claim in enumerate(claims) for v in claim}
    deps = _claim_masks(graph, claim_of)
    pieces: dict[tuple[int, int], list[Node]] = {}
    for node in graph.nodes:
        v = node.output
        key = (-1, claim_of[v]) if v in claim_of else (fusion.group_of[v], deps[v])
        pieces.setdefault(key, []).append(node)
    return list(pieces.values())


def split_groups(
    graph: Graph, fusion: Fusion, claims: Sequence[Collection[str]], types: Mapping[str, TensorType] | None = None
) -> Fusion:
    """``fusion`` with each claim (a set of node outputs, e.g. the part of a group the accelerator runs)
    made a group of its own and the rest of every group it cut split by the claims its nodes depend on:
    a conv group whose tail the accelerator's epilogue cannot run becomes the claimed head, the nodes
    before it (feeding it) and the nodes after it.

    Claims are disjoint, non-empty and convex. A claim inside one group always leaves convex groups in a DAG (the
    part of a convex group before a convex claim, the claim, the part after it); a claim spanning groups
    may not, and then :class:`~vdla.graph.verify.GraphError` is raised (the result is checked with
    :func:`check_fusion`). Groups are numbered anew, in a topological order, the earliest first node
    first; ``ipdom`` is kept.
    """
    types = infer_types(graph) if types is None else types
    position = {n.output: i for i, n in enumerate(graph.nodes)}
    pieces = _pieces(graph, fusion, claims)
    owner = {n.output: k for k, nodes in enumerate(pieces) for n in nodes}
    edges = ((owner[v], owner[n.output]) for n in graph.nodes for v in _follows(n, fusion.after) if v in owner)
    first = sorted(range(len(pieces)), key=lambda k: position[pieces[k][0].output])
    rank = {k: r for r, k in enumerate(first)}
    order = topological(list(range(len(pieces))), ((rank[a], rank[b]) for a, b in edges))
    readers = readers_of(graph)
    groups = []
    for g, r in enumerate(order):
        nodes = tuple(pieces[first[r]])
        anchor = max(reversed(nodes), key=lambda n: node_pattern(n, types))
        groups.append(Group(g, nodes, anchor, *boundary(graph, nodes, readers)))
    group_of = {n.output: g.index for g in groups for n in g.nodes}
    result = Fusion(tuple(groups), group_of, fusion.ipdom, fusion.after)
    check_fusion(graph, result)
    return result


def _follows(node: Node, after: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The values ``node`` must follow: those it reads and those ``after`` orders it after."""
    return (*node.inputs, *after.get(node.output, ()))


def split_by_guard(graph: Graph, fusion: Fusion, guard_of: Mapping[str, tuple]) -> Fusion:
    """``fusion`` with every group cut by its nodes' guards (:func:`vdla.graph.branches.guards`) and by the
    conditions they read (directly or not), so that no group mixes a branch with what runs either way, nor a
    condition's computation with what follows it: a run then skips whole groups, and the condition can be
    computed before the branches. Raises :class:`~vdla.graph.verify.GraphError` where the pieces are not convex
    (the result is checked with :func:`check_fusion`)."""
    conds = {c for g in guard_of.values() for c, _ in g}
    if not conds:
        return fusion
    seen: dict[str, frozenset[str]] = {}  # node output -> the conditions it reads, directly or not
    for node in graph.nodes:
        reads = (seen.get(v, frozenset()) | ({v} & conds) for v in node.inputs)
        seen[node.output] = frozenset().union(*reads)
    pieces: dict[tuple, list[str]] = {}
    for node in graph.nodes:
        key = (fusion.group_of[node.output], guard_of.get(node.output, ()), seen[node.output])
        pieces.setdefault(key, []).append(node.output)
    produced = set(fusion.group_of)
    after = {v: tuple(c for c, _ in g if c in produced) for v, g in guard_of.items() if g}
    return split_groups(graph, replace(fusion, after=after), list(pieces.values()))


def reach_masks(preds: Sequence[Iterable[int]]) -> tuple[list[int], list[int]]:
    """Bitsets over the positions of a DAG given in topological order by each vertex's predecessors:
    the vertices reachable from each vertex (``down``) and those reaching it (``up``), itself excluded."""
    preds = [list(p) for p in preds]
    up = [0] * len(preds)
    down = [0] * len(preds)
    for j, ps in enumerate(preds):
        for i in ps:
            up[j] |= up[i] | (1 << i)
    for j in reversed(range(len(preds))):
        for i in preds[j]:
            down[i] |= down[j] | (1 << j)
    return down, up


def convex(members: Iterable[int], down: Sequence[int], up: Sequence[int]) -> bool:
    """Whether the node positions ``members`` form a convex set: no node outside it is reachable from
    it and reaches it (``down``/``up``: the reachability bitsets of each node, see :func:`reach_masks`)."""
    mask = out_reach = in_reach = 0
    for i in members:
        mask |= 1 << i
        out_reach |= down[i]
        in_reach |= up[i]
    return out_reach & in_reach & ~mask == 0


def check_fusion(graph: Graph, fusion: Fusion) -> None:
    """Raise :class:`~vdla.graph.verify.GraphError` unless ``fusion`` keeps the invariants of
    :class:`Fusion` for ``graph``."""

    def fail(message: str) -> GraphError:
        return GraphError(f"graph {graph.name!r} after fusion: {message}")

    index = {n.output: i for i, n in enumerate(graph.nodes)}
    counted = Counter(n.output for g in fusion.groups for n in g.nodes)
    if set(counted) != set(index) or any(c != 1 for c in counted.values()):
        raise fail("the groups do not cover every node exactly once")
    for node in graph.nodes:
        own = fusion.group_of[node.output]
        late = [v for v in _follows(node, fusion.after) if v in index and fusion.group_of[v] > own]
        if late:
            raise fail(f"node {node.output!r} reads or follows {late} from a later group")
    down, up = reach_masks([[index[v] for v in n.inputs if v in index] for n in graph.nodes])
    for g in fusion.groups:
        if sum(kind(n.op) == COMPLEX for n in g.nodes) > 1:
            raise fail(f"group {g.index} holds more than one complex node")
        if not convex((index[n.output] for n in g.nodes), down, up):
            raise fail(f"group {g.index} is not convex (a path leaves it and comes back)")
