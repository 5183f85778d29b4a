"""Where the model runs: the post-dominator fusion's groups partitioned between the accelerator and the CPU.

Each group is offered to the matcher of its anchor's accelerator lowering (:data:`vdla.model.lowering.LOWERINGS`:
a conv2d/dense to :func:`vdla.model.match.match_accel`, a max pool or a global sum to
:func:`~vdla.model.match.match_pool`, a channel product to :func:`~vdla.model.match.match_scale`); the
accelerator claims the anchor and the epilogue chain it expresses (the rest of the group goes to the CPU)
when the compiler takes the layer's shape. Everything else runs on the CPU, connected CPU groups stacked
into one region.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vdla.compiler import CompileError
from vdla.config import HwConfig
from vdla.graph.branches import Guard, guards
from vdla.graph.fusion import Group, fuse_ops, split_by_guard
from vdla.graph.graph import Graph, Node
from vdla.graph.opnames import MUL
from vdla.graph.ops import OPS
from vdla.graph.partition import ACCEL, Capability, Partition, partition
from vdla.graph.types import TensorType
from vdla.graph.verify import GraphError
from vdla.model.lowering import LOWERINGS
from vdla.model.match import AccelLayer, PoolLayer


@dataclass(frozen=True)
class Placement:
    """Where the model runs: the partition of its fused groups (:func:`vdla.graph.partition.partition`)
    and the accelerator layer of each accelerator region.

    Invariants: ``layers`` holds one layer per accelerator region of ``partition`` (by region index),
    whose ``nodes`` are the region's nodes; ``notes`` says, for every conv2d/dense on the CPU (by its
    output), why the accelerator does not run it; ``guards`` the guard of every node output
    (:func:`vdla.graph.branches.guards`; empty where the regions could not be cut by them, and then every
    step runs on every input).
    """

    partition: Partition
    layers: Mapping[int, AccelLayer | PoolLayer]
    notes: Mapping[str, str]
    guards: Mapping[str, Guard] = field(default_factory=dict)

    def units(self) -> list[tuple[str, AccelLayer | PoolLayer | list[Node]]]:
        """The regions in order: ``("accel", layer)`` or ``("cpu", nodes)``."""
        regions = self.partition.regions
        return [(r.target, self.layers[r.index] if r.target == ACCEL else list(r.nodes)) for r in regions]


def _no_layer(op: str) -> str:
    """Why a group anchored at ``op``, which has no accelerator lowering, runs on the CPU."""
    step = op in OPS and OPS[op].epilogue_step
    return f"{op}: not in a layer's epilogue" if step else f"{op} runs on the CPU"


def _accel_capability(
    graph: Graph, types: dict[str, TensorType], cfg: HwConfig, found: dict[frozenset[str], AccelLayer | PoolLayer]
) -> Capability:
    """The accelerator's capability hook (see the module docstring): a group is offered to the matcher of its
    anchor's accelerator lowering (:data:`~vdla.model.lowering.LOWERINGS`); a layer the matcher takes is kept
    in ``found`` by its node outputs (the region it becomes)."""

    def can(group: Group) -> str | tuple[str, ...]:
        anchor = group.anchor
        lowering = LOWERINGS.get(anchor.op)
        layer = _no_layer(anchor.op) if lowering is None else lowering.match(anchor, graph, types, cfg)
        if isinstance(layer, str):  # a channel product fused after another layer's table: a layer of its own
            products = (n for n in group.nodes if n is not anchor and n.op == MUL)
            scales = (LOWERINGS[MUL].match(n, graph, types, cfg) for n in products)
            layer = next((s for s in scales if not isinstance(s, str)), layer)
        if isinstance(layer, str):
            return layer
        if isinstance(layer, AccelLayer):
            try:
                layer.spec()
            except CompileError as e:
                return str(e)
        found[frozenset(layer.nodes)] = layer
        return tuple(layer.nodes)

    return can


def place(graph: Graph, types: dict[str, TensorType], cfg: HwConfig) -> Placement:
    """Fuse ``graph`` by the post-dominator rules (:func:`vdla.graph.fusion.fuse_ops`) and partition the
    groups between the accelerator and the CPU (:func:`vdla.graph.partition.partition`): each accelerator
    region is one layer, the CPU regions stack consecutive CPU groups. The groups are cut by their guards
    first (:func:`vdla.graph.fusion.split_by_guard`), so that a run can skip a branch; where that cut cannot
    be made (a piece that would not be convex), the model is placed as if no value were guarded."""
    found: dict[frozenset[str], AccelLayer | PoolLayer] = {}
    fusion, guard_of = fuse_ops(graph, types), guards(graph, types)
    try:
        cut = split_by_guard(graph, fusion, guard_of)
        part = partition(graph, cut, _accel_capability(graph, types, cfg, found), guard_of=guard_of)
    except GraphError:
        found.clear()
        guard_of = {}
        part = partition(graph, fusion, _accel_capability(graph, types, cfg, found))
    layers = {}
    for r in part.on(ACCEL):
        nodes = frozenset(n.output for n in r.nodes)
        if nodes not in found:
            raise CompileError(f"accelerator region {r.label} does not hold exactly its layer's nodes")
        layers[r.index] = found[nodes]
    # an elementwise step's notes are the step table's, not a layer's
    anchors = {n.output for n in graph.nodes if n.op in LOWERINGS and not OPS[n.op].epilogue_step}
    notes = {v: why for v, why in part.notes().items() if v in anchors}
    return Placement(part, layers, notes, {v: g for v, g in guard_of.items() if g})
