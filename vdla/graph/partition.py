"""Partitioning: each fused group runs on the accelerator or the CPU, and CPU groups merge into regions.

A group goes to the accelerator when the capability hook accepts it (returns ``None``) and the cost
hook, if any, does not move it back; otherwise it runs on the CPU and the reason is kept for placement
tables and notes. Default (no cost hook): everything the accelerator can run, it runs.

Every accelerator group is a region of its own. CPU groups connected through each other merge into one
CPU region, compiled by the CPU fallback as one graph, as long as the region stays convex: two CPU groups
with an accelerator group on a path between them stay in separate regions. Regions come in a
topological order; :func:`region_graph` turns a region (or a single group) into a stand-alone
:class:`~vdla.graph.graph.Graph`.

Example::

    fusion = fuse_ops(graph)
    part = partition(graph, fusion, lambda g: None if g.anchor.op == "conv2d" else "not a conv")
    for region in part.regions:
        sub = region_graph(graph, region)  # inputs: what the region reads; outputs: what others read
    dump.dot(graph, types, part.placement, fusion.group_of)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vdla.graph.fusion import Fusion, Group, boundary, convex, reach_masks, readers_of, topological
from vdla.graph.graph import Graph, Node
from vdla.graph.ops import infer_types
from vdla.graph.types import TensorType

ACCEL, CPU = "accel", "cpu"

Capability = Callable[[Group], str | None]
"""Whether the accelerator can run a group: ``None`` if it can, else the reason it cannot."""
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

    Invariants: ``targets[i]`` is the target of group ``i``; ``reasons`` holds a reason for every CPU
    group and only for them; ``regions`` are in a topological order (a region reads only graph inputs,
    parameters and outputs of earlier regions) and cover every group once; ``placement`` and
    ``region_of`` map every node output to its target and its region's index.
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


def _place(fusion: Fusion, can_accelerate: Capability, cost: CostHook | None) -> tuple[list[str], dict[int, str]]:
    targets: list[str] = []
    reasons: dict[int, str] = {}
    for g in fusion.groups:
        reason = can_accelerate(g)
        if reason is None and cost is not None:
            reason = cost(g)
        targets.append(ACCEL if reason is None else CPU)
        if reason is not None:
            reasons[g.index] = reason
    return targets, reasons


def _group_preds(graph: Graph, fusion: Fusion) -> list[list[int]]:
    """The groups each group reads from, as indices (groups are in topological order)."""
    preds: list[set[int]] = [set() for _ in fusion.groups]
    for g in fusion.groups:
        preds[g.index].update(fusion.group_of[v] for v in g.inputs if v in fusion.group_of)
    return [sorted(p) for p in preds]


def _merge_cpu(targets: Sequence[str], preds: Sequence[Sequence[int]]) -> list[list[int]]:
    """Regions as lists of group indices: each CPU group joins the regions of its CPU producers that
    the merged region can take while staying convex (in producer order)."""
    down, up = reach_masks(preds)
    regions: dict[int, list[int]] = {}
    region_of: dict[int, int] = {}
    for g, target in enumerate(targets):
        members = [g]
        if target == CPU:
            for r in dict.fromkeys(region_of[p] for p in preds[g] if targets[p] == CPU):
                if convex(members + regions[r], down, up):
                    members += regions.pop(r)
        regions[g] = sorted(members)
        region_of.update(dict.fromkeys(members, g))
    return list(regions.values())


def _order(regions: list[list[int]], preds: Sequence[Sequence[int]]) -> list[list[int]]:
    """Regions in a topological order of the region DAG."""
    first = {r[0]: r for r in regions}
    owner = {g: r[0] for r in regions for g in r}
    edges = ((owner[p], owner[g]) for g, ps in enumerate(preds) for p in ps)
    return [first[k] for k in topological(list(first), edges)]


def partition(graph: Graph, fusion: Fusion, can_accelerate: Capability, cost: CostHook | None = None) -> Partition:
    """Place every group of ``fusion`` (from :func:`~vdla.graph.fusion.fuse_ops` on ``graph``) and merge
    the CPU groups into regions (see the module docstring for the rules)."""
    targets, reasons = _place(fusion, can_accelerate, cost)
    preds = _group_preds(graph, fusion)
    position = {n.output: i for i, n in enumerate(graph.nodes)}
    readers = readers_of(graph)
    regions: list[Region] = []
    for k, members in enumerate(_order(_merge_cpu(targets, preds), preds)):
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
