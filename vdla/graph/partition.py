"""Partitioning: each fused group runs on the accelerator or the CPU, and CPU groups merge into regions.

A group goes to the accelerator when the capability hook accepts it and the cost hook, if any, does not
move it back; otherwise it runs on the CPU and the reason is kept for placement tables and notes.
Default (no cost hook): everything the accelerator can run, it runs.

The capability hook may accept only part of a group: it returns the node outputs the accelerator runs
(e.g. a conv and the epilogue chain it expresses, where fusion also took ops the epilogue cannot do).
The group is then split (:func:`~vdla.graph.fusion.split_groups`): the claimed part becomes an
accelerator group, the nodes before it and after it CPU groups. A claim may reach into another group (a
residual add fusion gave to the other branch's conv) as long as the groups stay convex and acyclic;
otherwise, or where it overlaps an earlier claim, the whole group stays on the CPU with the reason.

Every accelerator group is a region of its own. CPU groups connected through each other merge into one
CPU region, compiled by the CPU fallback as one graph, as long as the region stays convex: two CPU groups
with an accelerator group on a path between them stay in separate regions. CPU regions no accelerator group
orders (no path between them passes one) join too. Only CPU groups of one guard (the conditions under which a
run needs them, :mod:`vdla.graph.branches`) join, and a branch's groups follow the groups computing its
condition (:attr:`~vdla.graph.fusion.Fusion.after`), so a run can skip the branch it does not take. Regions
come in a topological order; :func:`region_graph` turns a region (or a single group) into a stand-alone
:class:`~vdla.graph.graph.Graph`.

Example::

    fusion = fuse_ops(graph)
    part = partition(graph, fusion, lambda g: None if g.anchor.op == "conv2d" else "not a conv")
    for region in part.regions:
        sub = region_graph(graph, region)  # inputs: what the region reads; outputs: what others read
    dump.dot(graph, types, part.placement, fusion.group_of)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from vdla.graph.branches import Guard, common
from vdla.graph.fusion import Fusion, Group, boundary, convex, reach_masks, readers_of, split_groups, topological
from vdla.graph.graph import Graph, Node
from vdla.graph.ops import infer_types
from vdla.graph.types import TensorType
from vdla.graph.verify import GraphError

ACCEL, CPU = "accel", "cpu"

Capability = Callable[[Group], str | Collection[str] | None]
"""Whether the accelerator can run a group: ``None`` if it runs all of it; a collection (not a ``str``) of
the node outputs it runs if only those (the group is split around them; they must form a convex set, no
path leaving it and coming back); a ``str``: the reason it runs none of it."""
CostHook = Callable[[Group], str | None]
"""For a group the accelerator can run: a reason to run it on the CPU instead (e.g. a cost model finds
the CPU faster), or ``None`` to keep it on the accelerator."""


@dataclass(frozen=True)
class Region:
    """Groups on one target compiled as one unit.

    Invariants: ``groups`` (indices into :attr:`Fusion.groups`, increasing) are all on ``target``; an
    accelerator region holds exactly one group; the region is convex; ``nodes`` are the groups' nodes in
    graph order; ``inputs``/``outputs``/``params`` are as for :class:`~vdla.graph.fusion.Group`.
    """

    index: int
    target: str
    groups: tuple[int, ...]
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[str, ...]

    @property
    def label(self) -> str:
        """``accelN``/``cpuN``: the region's name in sub-graph names."""
        return f"{self.target}{self.index}"


@dataclass(frozen=True)
class Partition:
    """Where each group runs and the regions compiled as units.

    Invariants: ``fusion`` is the fusion partitioned, its groups split where the capability hook claimed
    part of a group (the fusion given otherwise); ``targets[i]`` is the target of its group ``i``;
    ``reasons`` holds a reason for every CPU group and only for them; ``regions`` are in a topological
    order (a region reads only graph inputs, parameters and outputs of earlier regions) and cover every
    group once; ``placement`` and ``region_of`` map every node output to its target and its region's
    index.
    """

    fusion: Fusion
    targets: tuple[str, ...]
    reasons: Mapping[int, str]
    regions: tuple[Region, ...]
    placement: Mapping[str, str]
    region_of: Mapping[str, int]

    def on(self, target: str) -> tuple[Region, ...]:
        """The regions on ``target`` (``"accel"`` or ``"cpu"``), in order."""
        return tuple(r for r in self.regions if r.target == target)

    def notes(self) -> dict[str, str]:
        """Why each CPU group runs on the CPU, keyed by its anchor's output (for placement tables)."""
        return {self.fusion.groups[g].anchor.output: why for g, why in self.reasons.items()}


def _claims(graph: Graph, fusion: Fusion, can_accelerate: Capability) -> tuple[list[frozenset[str]], dict[int, str]]:
    """Ask the capability hook about every group: the accepted claims (node outputs the accelerator runs)
    and the reasons of the groups it runs none of (by index in ``fusion``)."""
    claims: list[frozenset[str]] = []
    reasons: dict[int, str] = {}
    types: dict[str, TensorType] = {}
    for g in fusion.groups:
        answer = can_accelerate(g)
        if isinstance(answer, str):
            reasons[g.index] = answer
            continue
        claim = frozenset(g.names if answer is None else answer)
        unknown = sorted(claim - set(fusion.group_of))
        if not claim or unknown:
            raise ValueError(f"group {g.index}: the capability hook claimed no node or unknown nodes {unknown}")
        why = _refusal(graph, fusion, g, claim, claims, types)
        if why is None:
            claims.append(claim)
        else:
            reasons[g.index] = why
    return claims, reasons


def _refusal(
    graph: Graph,
    fusion: Fusion,
    group: Group,
    claim: frozenset[str],
    claims: Sequence[frozenset[str]],
    types: dict[str, TensorType],
) -> str | None:
    """Why ``claim`` (made for ``group``) cannot be taken after ``claims``, or ``None``. A claim inside its
    group always can (see :func:`~vdla.graph.fusion.split_groups`); once a claim reaches into other
    groups, the split with it is tried (``types`` is filled on first use)."""
    taken = next((v for v in sorted(claim) if any(v in c for c in claims)), None)
    if taken is not None:
        return f"{taken} is already part of another accelerator group"
    within = [c <= set(fusion.groups[fusion.group_of[min(c)]].names) for c in [*claims, claim]]
    if all(within):
        return None
    if not types:
        types.update(infer_types(graph))
    try:
        split_groups(graph, fusion, [*claims, claim], types)
    except GraphError:
        outside = sorted(claim - set(group.names))
        return f"its accelerator part reaches {outside} in other fused groups and cannot be cut out"
    return None


def _place(
    graph: Graph, fusion: Fusion, can_accelerate: Capability, cost: CostHook | None
) -> tuple[Fusion, list[str], dict[int, str]]:
    """The split fusion, each of its groups' target and the reasons of its CPU groups."""
    claims, refused = _claims(graph, fusion, can_accelerate)
    whole = all(c == frozenset(fusion.groups[fusion.group_of[min(c)]].names) for c in claims)
    split = fusion if whole else split_groups(graph, fusion, claims)
    claimed = set(claims)
    targets: list[str] = []
    reasons: dict[int, str] = {}
    for g in split.groups:
        if frozenset(g.names) in claimed:
            reason = cost(g) if cost is not None else None
        else:
            reason = _split_reason(fusion, g, refused)
        targets.append(ACCEL if reason is None else CPU)
        if reason is not None:
            reasons[g.index] = reason
    return split, targets, reasons


def _split_reason(fusion: Fusion, piece: Group, refused: Mapping[int, str]) -> str:
    """Why an unclaimed piece runs on the CPU: its group's reason, or that it lies outside the part of its
    group the accelerator runs."""
    origin = fusion.groups[fusion.group_of[piece.nodes[0].output]]
    if origin.index in refused:
        return refused[origin.index]
    return f"fused with {origin.anchor.output} outside the part the accelerator runs"


def _group_preds(graph: Graph, fusion: Fusion) -> list[list[int]]:
    """The groups each group reads from or follows (:attr:`Fusion.after`), as indices (groups are in
    topological order)."""
    preds: list[set[int]] = [set() for _ in fusion.groups]
    for g in fusion.groups:
        follows = [*g.inputs, *(v for n in g.nodes for v in fusion.after.get(n.output, ()))]
        preds[g.index].update(fusion.group_of[v] for v in follows if v in fusion.group_of)
        preds[g.index].discard(g.index)
    return [sorted(p) for p in preds]


def _merge_cpu(targets: Sequence[str], preds: Sequence[Sequence[int]], guards: Sequence[Guard]) -> list[list[int]]:
    """Regions as lists of group indices: each CPU group joins the regions of its CPU producers of its guard
    that the merged region can take (in producer order) while it stays convex and the regions stay acyclic."""
    down, up = reach_masks(preds)
    regions: dict[int, list[int]] = {}
    region_of: dict[int, int] = {}
    for g, target in enumerate(targets):
        members = [g]
        if target == CPU:
            for r in dict.fromkeys(region_of[p] for p in preds[g] if targets[p] == CPU and guards[p] == guards[g]):
                others = [m for k, m in regions.items() if k != r]
                if convex(members + regions[r], down, up) and _acyclic([*others, members + regions[r]], preds):
                    members += regions.pop(r)
        regions[g] = sorted(members)
        region_of.update(dict.fromkeys(members, g))
    return _join_independent(list(regions.values()), targets, preds, down, up, guards)


def _join_independent(regions: list[list[int]], targets: Sequence[str], preds, down, up, guards) -> list[list[int]]:
    """CPU regions of one guard that no accelerator region orders (their union stays convex, the regions
    acyclic) joined into one, each into the last earlier one it can join: e.g. a detector's decode of its box
    and score heads, one CPU step."""
    out: list[list[int]] = []
    for i, r in enumerate(regions):
        if targets[r[0]] == CPU:
            later = regions[i + 1 :]
            same = (m for m in reversed(out) if guards[m[0]] == guards[r[0]])
            into = next((m for m in same if _joins(m, r, out, later, targets, preds, down, up)), None)
            if into is not None:
                into[:] = sorted(into + r)
                continue
        out.append(r)
    return out


def _joins(m: list[int], r: list[int], done, later, targets, preds, down, up) -> bool:
    """Whether CPU region ``r`` may join CPU region ``m`` (one of ``done``; ``later`` the regions after ``r``)."""
    if targets[m[0]] != CPU or not convex(m + r, down, up):
        return False
    return _acyclic([x for x in done if x is not m] + [m + r] + list(later), preds)


def _acyclic(regions: Sequence[Sequence[int]], preds: Sequence[Sequence[int]]) -> bool:
    """Whether the regions (disjoint lists of group indices) depend on each other without a cycle. Convex
    regions can still form one (a -> c and b -> d with regions {a, d} and {b, c}), which no order runs."""
    owner = {g: min(r) for r in regions for g in r}
    edges = [(owner[p], owner[g]) for g in owner for p in preds[g] if p in owner and owner[p] != owner[g]]
    try:
        topological(sorted(set(owner.values())), edges)
    except GraphError:
        return False
    return True


def _order(regions: list[list[int]], preds: Sequence[Sequence[int]]) -> list[list[int]]:
    """Regions in a topological order of the region DAG."""
    first = {r[0]: r for r in regions}
    owner = {g: r[0] for r in regions for g in r}
    edges = ((owner[p], owner[g]) for g, ps in enumerate(preds) for p in ps)
    return [first[k] for k in topological(list(first), edges)]


def partition(
    graph: Graph,
    fusion: Fusion,
    can_accelerate: Capability,
    cost: CostHook | None = None,
    guard_of: Mapping[str, Guard] | None = None,
) -> Partition:
    """Place every group of ``fusion`` (from :func:`~vdla.graph.fusion.fuse_ops` on ``graph``), splitting
    the groups the accelerator runs only part of, and merge the CPU groups into regions (see the module
    docstring for the rules); ``guard_of`` (:func:`vdla.graph.branches.guards`, the fusion cut by
    :func:`~vdla.graph.fusion.split_by_guard`) keeps the CPU groups of different guards in different regions."""
    fusion, targets, reasons = _place(graph, fusion, can_accelerate, cost)
    preds = _group_preds(graph, fusion)
    guard_of = guard_of or {}
    guards = [common([guard_of.get(n.output, ()) for n in g.nodes]) for g in fusion.groups]
    position = {n.output: i for i, n in enumerate(graph.nodes)}
    readers = readers_of(graph)
    regions: list[Region] = []
    for k, members in enumerate(_order(_merge_cpu(targets, preds, guards), preds)):
        nodes = sorted((n for g in members for n in fusion.groups[g].nodes), key=lambda n: position[n.output])
        io = boundary(graph, nodes, readers)
        regions.append(Region(k, targets[members[0]], tuple(members), tuple(nodes), *io))
    placement = {n.output: targets[g.index] for g in fusion.groups for n in g.nodes}
    region_of = {n.output: r.index for r in regions for n in r.nodes}
    return Partition(fusion, tuple(targets), reasons, tuple(regions), placement, region_of)


def region_graph(graph: Graph, part: Region | Group, types: Mapping[str, TensorType] | None = None) -> Graph:
    """``part`` (a region or a group of ``graph``) as a stand-alone graph: its external inputs become
    graph inputs (typed by ``types``, from :func:`~vdla.graph.ops.infer_types` when not given), the
    values others read become its outputs, and the parameters it reads come along."""
    types = infer_types(graph) if types is None else types
    return Graph(
        {v: types[v] for v in part.inputs},
        list(part.nodes),
        list(part.outputs),
        {p: graph.params[p] for p in part.params},
        {p: graph.param_types[p] for p in part.params if p in graph.param_types},
        name=f"{graph.name}.{part.label}",
    )
