"""Per-channel equalization of a float graph before calibration (``QuantOptions.equalize``, ``vdla compile
--equalize``): cross-layer equalization (Nagel et al. 2019) with SmoothQuant's data-aware scales (Xiao et al.
2023).

vdla quantizes activations per tensor and weights per output channel (:mod:`vdla.graph.quantize`). A tensor whose
channels span ranges 100 times apart leaves its small channels a few int8 levels at the per-tensor scale its
largest channel sets. Where a positive scale ``s[c]`` can be moved from a tensor's channel ``c`` into the layers
around it without changing the float model, the tensor can be made flat:

* a **group** is a set of values that must share one scale vector: the values joined by positive-homogeneous,
  channel-preserving operators (:func:`_transparent`: ReLU, a clip at 0 and/or infinity, PReLU, max/average/global
  pools, an add, a product with a constant, reshape and transpose keeping the channel axis). ``f(x / s) = f(x) / s``
  holds for each of them for every ``s > 0``. ReLU6 (a clip at 6) and tabulated activations (SiLU, GELU,
  sigmoid, ...) are not homogeneous and end a group;
* its **producers** (conv2d with groups 1 or depthwise, dense, a layer norm over the last axis, with constant
  parameters) write its values: each divides its output channel ``c`` by ``s[c]`` (weights and bias; the layer
  norm's scale and offset), an add of a constant divides the constant;
* its **consumers** (conv2d with groups 1 or depthwise, dense, with constant weights) read it as their input:
  each multiplies its input channel ``c``'s weights by ``s[c]``;
* a group is equalized only where every value's writer is a producer or a member, every reader a consumer or a
  member, no value is a graph input or output, and every value has one channel axis of the same size (else it is
  skipped, the first offending node named: :attr:`Equalization.skipped`), and only where it can gain
  (:func:`worth_equalizing`): its channels' ranges spread over :data:`MIN_SPREAD` (3 bits) or more, or a dead
  channel's stale weights may set a consumer's weight scale. Measured on MobileNet-V2's residual streams (ranges
  within 2.3 to 6.5x), flattening them moved the model's cosine by -0.0045 to +0.0002, the noise of rounding;
  groups of 17x and more gained (``docs/quantization.md``).

**Scales.** Per channel, ``r_x[c]`` is the largest magnitude of the group's values over the calibration data,
``r_w[c]`` the largest of the consumers' weights reading channel ``c``, each relative to its output channel's
largest (what the per-output-channel weight scale sees; it does not change when the consumer's own output is
rescaled, so groups are independent). ``s[c] = r_x[c] ** alpha / r_w[c] ** (1 - alpha)`` (:data:`ALPHA`: both
ranges become ``sqrt(r_x r_w)``, SmoothQuant's balance); where every consumer is depthwise its weights are one
channel to an output channel and quantized per channel, so moving range into them costs nothing: ``alpha`` = 1
flattens the tensor. The scales are normalized so the tensor's largest channel keeps its range, and held within
:data:`MAX_SPREAD` of each other (a consumer's channel scaled down further could fall under the quantizer's
negligible-channel floor, :data:`vdla.graph.quantize.NEGLIGIBLE`). A channel below :data:`DEAD` of the
largest (dead on the data) takes the smallest scale: the consumers' weights reading it, stale in a trained model
(no gradient reaches them) and often the largest of their output channel, shrink as far as allowed and no longer
set that channel's weight scale; a channel no consumer reads takes the largest. A producer's per-output-channel
weight scale absorbs its ``1 / s[c]`` exactly, so the producers lose nothing.

Invariants: :meth:`Equalization.apply` changes parameters only (node names, structure and every value's shape
are kept); the equalized float graph computes the same outputs up to float32 rounding of the rescaled parameters,
and each group value equals the original divided by its group's scales along its channel axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from vdla.graph.calibrate import Runner, check_calibration, interpreter_runner
from vdla.graph.graph import DisjointSets, Graph, Node
from vdla.graph.opnames import (
    ADD,
    AVG_POOL2D,
    CLIP,
    CONV2D,
    DENSE,
    GLOBAL_AVG_POOL,
    LAYER_NORM,
    MAX_POOL2D,
    MUL,
    PRELU,
    RELU,
    RESHAPE,
    RMS_NORM,
    TRANSPOSE,
)
from vdla.graph.ops import infer_types
from vdla.graph.passes import fresh_name
from vdla.graph.qdq import is_depthwise
from vdla.graph.types import TensorType

ALPHA = 0.5  # SmoothQuant's migration strength where a consumer shares input channels across an output channel
MIN_SPREAD = 8.0  # a group whose live channels' ranges lie within this ratio (3 bits) is left as it is
MAX_SPREAD = 2.0**8  # the largest ratio of two scales of one group
DEAD = 2.0**-16  # a channel whose range is below this fraction of its group's largest is dead on the data
ELEMENTWISE = (RELU, PRELU, CLIP, ADD, MUL)
POOLS = (MAX_POOL2D, AVG_POOL2D, GLOBAL_AVG_POOL)
NORMS = (LAYER_NORM, RMS_NORM)


@dataclass(frozen=True)
class EqualizedGroup:
    """One equalized group: its ``values`` (each divided by ``scales`` along its channel axis, ``axes``), the
    ``producers`` and ``consumers`` (nodes, by output name) and the spread of its channels' ranges (the largest
    over the smallest live one) before and after."""

    values: tuple[str, ...]
    axes: tuple[int, ...]
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    scales: np.ndarray = field(compare=False, repr=False)
    spread_before: float = 1.0
    spread_after: float = 1.0

    def to_dict(self) -> dict:
        return {
            "values": list(self.values),
            "producers": list(self.producers),
            "consumers": list(self.consumers),
            "channels": int(self.scales.size),
            "scale_min": float(self.scales.min()),
            "scale_max": float(self.scales.max()),
            "spread_before": self.spread_before,
            "spread_after": self.spread_after,
        }


@dataclass(frozen=True)
class Equalization:
    """What :func:`equalize` chose: the groups equalized and, for each group skipped, the reason (by its first
    value). :meth:`apply` rewrites a graph's parameters with it."""

    groups: tuple[EqualizedGroup, ...]
    skipped: Mapping[str, str] = field(default_factory=dict, hash=False)

    def apply(self, graph: Graph) -> Graph:
        """``graph`` with every group's producers and consumers rescaled (fresh parameters: a parameter other
        nodes share is left as it is)."""
        edit = _ParamEdit(graph)
        types = infer_types(graph)
        producers = graph.producers()
        for g in self.groups:
            for name in g.producers:
                edit.divide_output(producers[name], g.scales, types)
            for name in g.consumers:
                edit.multiply_input(producers[name], g.scales, types)
            for value, axis in zip(g.values, g.axes, strict=True):
                edit.divide_constant(producers[value], g.scales, axis, set(g.values), types)
        return edit.graph()

    def to_dict(self) -> dict:
        return {"groups": [g.to_dict() for g in self.groups], "skipped": dict(self.skipped)}


# ---------------------------------------------------------------------------------------------------------
# Groups


@dataclass
class _Group:
    values: list[str]
    axes: dict[str, int]
    producers: list[str]
    consumers: list[str]
    depthwise_only: bool
    read: list[str]  # the values consumers read: the layers' inputs, int8 at one scale per tensor


def _computed(graph: Graph, names: Iterable[str]) -> list[str]:
    return [v for v in names if v not in graph.params]


def _transparent(node: Node, graph: Graph) -> bool:
    """Whether ``node`` is positive-homogeneous per channel in its computed inputs (``f(x / s) = f(x) / s``)."""
    if node.op == CLIP:
        lo, hi = node.attrs.get("lo"), node.attrs.get("hi")
        return len(node.inputs) == 1 and lo in (None, 0, 0.0, -np.inf) and hi in (None, np.inf)
    if node.op == MUL:  # by a constant (a parameter or a scalar operand)
        return len(_computed(graph, node.inputs)) == 1
    if node.op in (PRELU, RELU):
        return node.inputs[0] not in graph.params and len(_computed(graph, node.inputs)) == 1
    if node.op == ADD:  # of members or a constant tensor (x / s + b is not (x + b) / s for a scalar operand b)
        return len(node.inputs) == 2 and bool(_computed(graph, node.inputs))
    return node.op in (*POOLS, RESHAPE, TRANSPOSE) and node.inputs[0] not in graph.params


def _weights_constant(node: Node, graph: Graph) -> bool:
    return all(p in graph.params and graph.params[p].dtype == np.float32 for p in node.inputs[1:])


def _is_layer(node: Node, graph: Graph, types: Mapping[str, TensorType]) -> bool:
    """A conv2d (groups 1 or depthwise) or dense layer with constant float weights (and bias)."""
    if node.op not in (CONV2D, DENSE) or not _weights_constant(node, graph):
        return False
    return int(node.attrs.get("groups", 1)) == 1 or is_depthwise(node, types)


def _is_producer(node: Node, graph: Graph, types: Mapping[str, TensorType]) -> bool:
    if node.op in NORMS:  # over the last axis only, with a constant scale (and offset) of one entry a channel
        rank, c = len(types[node.output].shape), types[node.output].shape[-1]
        last = int(node.attrs.get("axis", -1)) in (-1, rank - 1)
        return last and _weights_constant(node, graph) and all(graph.params[p].size == c for p in node.inputs[1:])
    return _is_layer(node, graph, types)


def _producer_axis(node: Node, types: Mapping[str, TensorType]) -> int:
    return len(types[node.output].shape) - 1 if node.op in NORMS else 1


def _member_axis(node: Node, axes: Mapping[str, int], types: Mapping[str, TensorType]) -> int | None:
    """The channel axis of a transparent ``node``'s output, from its members' (None: not kept)."""
    inner = [v for v in node.inputs if v in axes]
    out = types[node.output].shape
    a = axes[inner[0]]
    shape = types[inner[0]].shape
    if any(axes[v] != a or types[v].shape != shape for v in inner):
        return None
    if node.op == TRANSPOSE:
        return list(node.attrs["perm"]).index(a)
    if node.op == RESHAPE:
        before = int(np.prod(shape[:a]))
        hits = [b for b in range(len(out)) if out[b] == shape[a] and int(np.prod(out[:b])) == before]
        return hits[0] if hits else None
    if node.op in POOLS:
        return a if a == 1 and len(shape) == 4 else None
    return a if out == shape else None


def _consumes(node: Node, value: str, axis: int, graph: Graph, types: Mapping[str, TensorType]) -> bool:
    """Whether ``node`` reads ``value`` (channel axis ``axis``) as a consumer: a layer's input, channels on axis 1."""
    if not _is_layer(node, graph, types) or node.inputs[0] != value or value in node.inputs[1:]:
        return False
    return axis == 1 and len(types[value].shape) == (4 if node.op == CONV2D else 2)


class _GroupFinder:
    """Joins values into groups and checks each (see the module docstring)."""

    def __init__(self, graph: Graph) -> None:
        self.g, self.types = graph, infer_types(graph)
        self.producers, self.readers = graph.producers(), graph.consumers()
        self.sets = DisjointSets()
        for node in graph.nodes:
            if _transparent(node, graph):
                for v in _computed(graph, node.inputs):
                    self.sets.union(v, node.output)
            elif _is_producer(node, graph, self.types):
                self.sets.find(node.output)

    def groups(self) -> tuple[list[_Group], dict[str, str]]:
        found, skipped = [], {}
        order = {n.output: i for i, n in enumerate(self.g.nodes)}
        for members in self.sets.sets().values():
            values = sorted(members, key=lambda v: order.get(v, -1))
            group = self.check(values)
            if isinstance(group, str):
                skipped[values[0]] = group
            else:
                found.append(group)
        return found, skipped

    def check(self, values: list[str]) -> _Group | str:
        """The group of ``values`` (in graph order), or why it cannot be equalized."""
        members, axes, producers = set(values), {}, []
        for v in values:
            if v in self.g.inputs or v in self.g.outputs:
                return f"graph {'input' if v in self.g.inputs else 'output'} {v!r}: its scale cannot move"
            node = self.producers[v]
            if _transparent(node, self.g) and all(i in members for i in _computed(self.g, node.inputs)):
                axes[v] = _member_axis(node, axes, self.types)
            elif _is_producer(node, self.g, self.types):
                axes[v] = _producer_axis(node, self.types)
                producers.append(v)
            else:
                return f"{node.op} {v!r}: not homogeneous (f(x/s) != f(x)/s) nor a layer the scales can move into"
            if axes[v] is None or self.types[v].shape[axes[v]] != self.types[values[0]].shape[axes[values[0]]]:
                return f"{node.op} {v!r}: does not keep the channel axis"
        consumers, read = [], []
        for v in values:
            for reader in self.readers.get(v, []):
                if reader.output in members:
                    continue
                if not _consumes(reader, v, axes[v], self.g, self.types):
                    return f"{reader.op} {reader.output!r}: reads {v!r} and is not homogeneous (f(x/s) != f(x)/s)"
                consumers.append(reader.output)
                read.append(v)
        if not producers or not consumers:
            return "no producer" if not producers else "no consumer"
        depthwise = all(is_depthwise(self.producers[c], self.types) for c in consumers)
        return _Group(values, axes, producers, consumers, depthwise, list(dict.fromkeys(read)))


# ---------------------------------------------------------------------------------------------------------
# Ranges and scales


def channel_ranges(
    graph: Graph, groups: list[_Group], data: Mapping[str, np.ndarray], runner: Runner | None = None
) -> list[np.ndarray]:
    """Each group's per-channel largest magnitude over the calibration ``data`` (float64) of the values its
    consumers read (the layers' int8 inputs; not, say, a convolution's output before its ReLU, whose negative
    part is never quantized)."""
    arrays = check_calibration(graph.inputs, data)
    observed = list(dict.fromkeys(v for g in groups for v in g.read))
    run = (runner or interpreter_runner)(graph.copy(outputs=list(dict.fromkeys([*graph.outputs, *observed]))))
    ranges: dict[str, np.ndarray] = {}
    batch = next(iter(graph.inputs.values())).shape[0]
    for start in range(0, next(iter(arrays.values())).shape[0], batch):
        values = run({k: a[start : start + batch] for k, a in arrays.items()})
        for g in groups:
            for v in g.read:
                r = _absmax(np.asarray(values[v]), g.axes[v])
                ranges[v] = r if v not in ranges else np.maximum(ranges[v], r)
    return [np.max([ranges[v] for v in g.read], axis=0) for g in groups]


def _absmax(x: np.ndarray, axis: int) -> np.ndarray:
    return np.abs(np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)).max(axis=1).astype(np.float64)


def consumer_ranges(graph: Graph, consumers: Iterable[Node], channels: int, types: Mapping) -> np.ndarray:
    """Per input channel, the largest consumer weight relative to its output channel's largest (1 for a
    depthwise consumer's: its channel is its output channel's only one; 0 where no consumer reads it)."""
    r = np.zeros(channels)
    for node in consumers:
        w = np.abs(graph.params[node.inputs[1]].astype(np.float64))
        if is_depthwise(node, types):
            r = np.maximum(r, (w.reshape(channels, -1).max(axis=1) > 0).astype(np.float64))
            continue
        rows = w.reshape(w.shape[0], w.shape[1], -1).max(axis=2)  # (out, in)
        top = rows.max(axis=1, keepdims=True)
        r = np.maximum(r, (rows / np.where(top > 0, top, 1.0)).max(axis=0))
    return r


def choose_scales(r_x: np.ndarray, r_w: np.ndarray, alpha: float) -> np.ndarray:
    """``s = r_x ** alpha / r_w ** (1 - alpha)`` normalized so the largest channel keeps its range, within
    :data:`MAX_SPREAD`; a dead channel (below :data:`DEAD` of the largest) takes the smallest scale, one no
    consumer reads the largest (see the module docstring)."""
    top = float(r_x.max()) if r_x.size else 0.0
    dead = r_x <= DEAD * top
    live = ~dead & (r_w > 0)
    s = np.ones_like(r_x)
    if not live.any():
        return s
    raw = r_x[live] ** alpha / r_w[live] ** (1.0 - alpha)
    raw = raw * (r_x[live] / raw).max() / top  # max(r_x / s) = max(r_x)
    s[live] = np.clip(raw, raw.max() / MAX_SPREAD, None)
    s[dead] = s[live].min()  # all but zero on the data: its consumers' (stale) weights as small as allowed
    s[~dead & ~live] = s[live].max()  # read by no consumer: its range as small as allowed
    return s


def worth_equalizing(r_x: np.ndarray, r_w: np.ndarray, depthwise_only: bool) -> bool:
    """Whether a group's channels' ranges ``r_x`` spread over :data:`MIN_SPREAD` or more, or a dead channel has
    weights in a consumer that shares an output channel's scale among input channels (stale weights there set
    that scale)."""
    dead_read = (r_x <= DEAD * r_x.max()) & (r_w > 0)
    return spread(r_x) >= MIN_SPREAD or (not depthwise_only and bool(dead_read.any()))


def spread(r: np.ndarray) -> float:
    """The largest over the smallest live (above :data:`DEAD` of the largest) of ``r``."""
    live = r[r > DEAD * r.max()] if r.size and r.max() > 0 else np.ones(1)
    return float(live.max() / live.min())


def equalize(
    graph: Graph, data: Mapping[str, np.ndarray], runner: Runner | None = None, alpha: float = ALPHA
) -> tuple[Graph, Equalization]:
    """The float ``graph`` equalized on the calibration ``data`` (see the module docstring), and what was done.
    ``runner`` runs the graph (the numpy interpreter by default; the model compiler passes the CPU JIT)."""
    groups, skipped = _GroupFinder(graph).groups()
    if not groups:
        return graph, Equalization((), skipped)
    producers, types, done = graph.producers(), infer_types(graph), []
    for g, r_x in zip(groups, channel_ranges(graph, groups, data, runner), strict=True):
        r_w = consumer_ranges(graph, [producers[c] for c in g.consumers], r_x.size, types)
        if not worth_equalizing(r_x, r_w, g.depthwise_only):
            skipped[g.values[0]] = f"narrow {g.values[0]!r}: its channels' ranges lie within {spread(r_x):.3g}x"
            continue
        s = choose_scales(r_x, r_w, 1.0 if g.depthwise_only else alpha)
        axes = tuple(g.axes[v] for v in g.values)
        eq = EqualizedGroup(
            tuple(g.values), axes, tuple(g.producers), tuple(g.consumers), s, spread(r_x), spread(r_x / s)
        )
        done.append(eq)
    result = Equalization(tuple(done), skipped)
    return result.apply(graph), result


# ---------------------------------------------------------------------------------------------------------
# The rewrite


class _ParamEdit:
    """Rescaled copies of parameters, one per (node, input) edited, written under fresh names."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.edits: dict[tuple[str, int], np.ndarray] = {}

    def get(self, node: Node, i: int) -> np.ndarray:
        return self.edits.get((node.output, i), self.g.params[node.inputs[i]])

    def scale(self, node: Node, i: int, factor: np.ndarray, axis: int) -> None:
        p = self.get(node, i).astype(np.float64)
        shape = [1] * p.ndim
        shape[axis] = -1
        self.edits[(node.output, i)] = (p * factor.reshape(shape)).astype(np.float32)

    def divide_output(self, node: Node, s: np.ndarray, types) -> None:
        """A producer's output channel ``c`` divided by ``s[c]``."""
        for i in range(1, len(node.inputs)):
            self.scale(node, i, 1.0 / s, 0 if node.op in (CONV2D, DENSE) else self.get(node, i).ndim - 1)

    def multiply_input(self, node: Node, s: np.ndarray, types) -> None:
        """A consumer's input channel ``c`` multiplied by ``s[c]`` (a depthwise layer's channel is its axis 0)."""
        self.scale(node, 1, s, 0 if is_depthwise(node, types) else 1)

    def divide_constant(self, node: Node, s: np.ndarray, axis: int, members: set[str], types) -> None:
        """An add of a constant to a member divides the constant, broadcast to the channels where it was not."""
        if node.op != ADD:
            return
        rank = len(types[node.output].shape)
        for i, name in enumerate(node.inputs):
            if name not in self.g.params:
                continue
            p = self.get(node, i)
            at = axis - (rank - p.ndim)  # the channel axis in the constant's own shape (numpy's broadcasting)
            if at < 0 or p.shape[at] != s.size:  # one value for every channel: one a channel
                full = p.reshape((1,) * (rank - p.ndim) + p.shape)
                target = [s.size if d == axis else n for d, n in enumerate(full.shape)]
                self.edits[(node.output, i)], at = np.broadcast_to(full, target).copy(), axis
            self.scale(node, i, 1.0 / s, at)

    def graph(self) -> Graph:
        params = dict(self.g.params)
        taken = set(self.g.inputs) | set(params) | {n.output for n in self.g.nodes}
        nodes = []
        for node in self.g.nodes:
            inputs = list(node.inputs)
            for i in range(len(inputs)):
                if (node.output, i) in self.edits:
                    inputs[i] = fresh_name(f"{node.inputs[i]}:eq", taken)
                    params[inputs[i]] = self.edits[(node.output, i)]
            nodes.append(Node(node.op, tuple(inputs), node.output, node.attrs) if inputs != list(node.inputs) else node)
        used = {i for n in nodes for i in n.inputs}
        return self.g.copy(nodes=nodes, params={k: v for k, v in params.items() if k in used or k not in self.g.params})
