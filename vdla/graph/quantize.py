"""Profile-guided int8 quantization of a float graph: calibrate (:mod:`vdla.graph.calibrate`), choose
scales, and rewrite the graph into the QDQ form an ``onnxruntime.quantization`` QDQ model imports as, so
that the one QDQ lowering (:func:`vdla.graph.qdq.lower_qdq`) turns it into the accelerator's integer
epilogue.

Which values become int8 (the plan, :func:`plan_quantization`; structure only, no data):

* every conv2d/dense/conv_transpose the lowering handles (groups 1 or depthwise, no dilation of a conv2d, constant float
  weights and bias, not kept in float) is an *anchor*: its input is quantized per tensor, its weights per
  output channel (axis 0, a conv_transpose's axis 1; symmetric int8 in [-127, 127], scale
  ``max|w[c]| / 127``), its bias to int32 at ``s_x * s_w[c]``;
* an anchor's *epilogue chain* (the nodes that read only the previous one: a constant bias add, at most
  one residual add of a value computed before the anchor or of a constant of the output's shape, then ReLU or a
  constant clip) ends in a value quantized at its own calibrated scale: ReLU/clip fold into the epilogue's
  clamp; a constant residual (a position embedding added to a patch embedding's rows) is quantized at the sum's
  scale (:attr:`QuantPlan.constant_skips`). With
  ``align_residuals`` (the default) the residual add's other operand shares the sum's scale (the values
  tied through residual adds form groups that take the largest threshold of their members), so the
  epilogue adds the int8 skip as it is: one exact integer add, no rescaling of the skip. Without it the
  skip keeps its own scale and is rescaled to the output scale (an int32 multiply on the CPU);
* a max pool, reshape, transpose or ReLU (:data:`vdla.graph.qdq.COMMUTING`), slice or resize
  (:data:`SELECTING`) of an int8 value keeps its scale (exact on int8: it runs on int8 directly);
* an add outside an epilogue, concatenation, slice or resize (:data:`MOVING`) whose result is quantized has
  its float inputs quantized at their own scales (followed back through chains of them), so the accelerator
  moves int8 values there (:mod:`vdla.graph.copies`) and an activation before them is tabulated (not an add of
  a constant, such as a position embedding, which the accelerator does not move: its input stays float); so
  has squeeze-excite's product of a feature map by a per-channel vector (the accelerator's channel scale,
  :func:`vdla.graph.qdq.channel_product`), whose gate activation then is tabulated;
* a global average pool of an int8 value is quantized at its own calibrated scale (the lowering turns it
  into the integer sum, multiplier and shift the accelerator runs); where its result is quantized, so is its
  float input (an activation before the pool then joins its layer's table);
* the scaled scores an attention block's softmax reads (before its additive mask) are quantized at their own
  calibrated scale: the score scale of the integer attention (:mod:`vdla.graph.attention`);
* everything else (and every node named in ``keep_float``) stays float32 on the CPU, reading dequantized
  values; a float value an anchor reads is quantized at its boundary. A ``layer_norm`` reads a value computed in
  float on the CPU (:attr:`QuantPlan.cpu_values`) as it is, not its quantization.

Each quantized value ``v`` becomes ``quantize(v:float) -> v:q -> dequantize -> v`` (graph inputs:
``v -> v:q -> v:dq``), so every reader and the graph's outputs keep their names; weights and biases
become ``dequantize(int8/int32 parameter, per-channel scale)`` feeding the anchor.

Invariants: the rewritten graph, evaluated in float, is the fake-quantized model (every quantized value
rounded to its scale); activation scales are float32 values ``threshold / 127`` with zero point 0; only
QDQ patterns :func:`~vdla.graph.qdq.lower_qdq` lowers are produced, so the lowered graph differs from
the fake-quantized one by the requantization multiplier's rounding (at most one step per layer).
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, TypeVar

import numpy as np

from vdla.graph.attention import softmax_scores
from vdla.graph.calibrate import (
    DEFAULT_PERCENTILE,
    METHODS,
    Progress,
    QuantizationError,
    Runner,
    TensorStats,
    calibrate,
    check_calibration,
    choose_threshold,
)
from vdla.graph.epilogue import FLOAT_STAGES, FloatDialect, walk
from vdla.graph.equalize import Equalization, equalize
from vdla.graph.graph import Graph, Node
from vdla.graph.opnames import (
    ADD,
    CONCAT,
    CONV2D,
    DEQUANTIZE,
    GLOBAL_AVG_POOL,
    LAYER_NORM,
    MUL,
    QUANTIZE,
    RESHAPE,
    RESIZE,
    SLICE,
    SOFTMAX,
    TRANSPOSE,
)
from vdla.graph.ops import infer_types
from vdla.graph.passes import fresh_name
from vdla.graph.qdq import ANCHOR_AXIS as ANCHORS
from vdla.graph.qdq import COMMUTING, channel_product, is_depthwise
from vdla.isa.arith import INT8_MAX

SELECTING = (SLICE, RESIZE)  # of an int8 value: keep its scale (int8 selections, vdla.graph.copies)
MOVING = (ADD, CONCAT, SLICE, RESIZE)  # int8 in and out, the accelerator moves them (vdla.graph.copies)
REQUANTIZING = (GLOBAL_AVG_POOL,)  # of an int8 value: quantized at its own scale (an integer average)
WEIGHT_MAX = INT8_MAX  # weights use the symmetric range [-127, 127]
# a weight channel below this fraction of its layer's largest is negligible: quantized as a zero channel
# (:func:`weight_scales`)
NEGLIGIBLE = 2.0**-16


class QuantizationWarning(UserWarning):
    """A tensor that calibration cannot scale meaningfully (zero on every sample), named."""


@dataclass(frozen=True, kw_only=True)
class QuantOptions:
    """How vdla's calibration quantizes a float model, the one set of options :func:`quantize_model`,
    :func:`vdla.graph.autofloat.auto_float`, :class:`vdla.model.pipeline.CompileOptions` (a subclass) and ``vdla
    compile`` share: the ``calibration`` method (``minmax``, ``percentile`` at ``percentile``, ``entropy``), the
    nodes left in float (``keep_float``, by output name), residual skips sharing their sum's scale
    (``align_residuals``), power-of-two scales (``power_of_two``, VTA's scheme) and per-channel equalization of
    the float graph before calibration (``equalize``, :mod:`vdla.graph.equalize`).

    Invariants: ``calibration`` is one of :data:`vdla.graph.calibrate.METHODS`, ``percentile`` lies in (0, 100],
    ``keep_float`` is a tuple of names. Keyword-only, so that a subclass keeps its own positional fields."""

    calibration: str = "percentile"
    percentile: float = DEFAULT_PERCENTILE
    keep_float: tuple[str, ...] = ()
    align_residuals: bool = True
    power_of_two: bool = False
    equalize: bool = False

    kind = "quantization"  # what :meth:`updated` calls an option (a class attribute, not a field)

    def __post_init__(self) -> None:
        if self.calibration not in METHODS:
            raise QuantizationError(f"unknown calibration method {self.calibration!r} (one of {', '.join(METHODS)})")
        if not 0 < self.percentile <= 100:
            raise QuantizationError(f"percentile must lie in (0, 100], got {self.percentile}")
        keep = (self.keep_float,) if isinstance(self.keep_float, str) else tuple(self.keep_float)
        object.__setattr__(self, "keep_float", keep)

    @property
    def quant(self) -> QuantOptions:
        """The quantization options alone (of a subclass: its :class:`QuantOptions` fields)."""
        return QuantOptions(**{f.name: getattr(self, f.name) for f in fields(QuantOptions)})

    def updated(self: _Options, **changes: Any) -> _Options:
        """These options with ``changes`` (field names of this class; anything else is refused, naming the
        fields there are, positional ones first)."""
        known = [f.name for f in fields(self) if not f.kw_only] + [f.name for f in fields(self) if f.kw_only]
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise self.option_error(f"unknown {self.kind} option(s) {unknown}; the options are {', '.join(known)}")
        return replace(self, **changes) if changes else self

    @staticmethod
    def option_error(message: str) -> Exception:
        return QuantizationError(message)


_Options = TypeVar("_Options", bound=QuantOptions)


def quant_options(options: QuantOptions | str | None, changes: Mapping[str, Any]) -> QuantOptions:
    """``options`` (None: the defaults; a string: the calibration method, as :func:`quantize_model`'s third
    argument once was) with the fields ``changes`` names replaced."""
    base = QuantOptions(calibration=options) if isinstance(options, str) else options or QuantOptions()
    return base.updated(**changes)


@dataclass(frozen=True)
class QuantPlan:
    """Which values of a float graph become int8 and how.

    ``points`` maps each quantized value to the value whose calibrated scale it uses (itself, or for a
    max pool/reshape/transpose/ReLU of an int8 value, that value's source); ``chains`` maps each anchor
    to the value its epilogue ends at; ``ties`` maps each calibrated value to the representative of its
    group of values that must share one scale (residual skips and their sums; itself when alone);
    ``cpu_values`` are the quantized values computed in float on the CPU wherever the model is placed (not an
    anchor's epilogue, nor an operator the accelerator moves on int8): a ``layer_norm`` reading one reads the
    float value itself (as the CPU has it), not its quantization, whose rounding a row of small spread cannot
    bear (a class token beside the residual stream's outliers). ``constant_skips`` maps each residual add of a
    constant in an epilogue (a position embedding added to a patch embedding's rows) to the constant and the
    value at whose scale it is quantized, the sum's (the epilogue adds it as it adds an int8 skip).
    """

    anchors: tuple[str, ...]
    chains: Mapping[str, str] = field(hash=False)
    points: Mapping[str, str] = field(hash=False)
    kept: tuple[str, ...] = ()
    ties: Mapping[str, str] = field(default_factory=dict, hash=False)
    cpu_values: tuple[str, ...] = ()
    constant_skips: Mapping[str, tuple[str, str]] = field(default_factory=dict, hash=False)

    @property
    def calibrated(self) -> tuple[str, ...]:
        """The values whose scale calibration chooses."""
        return tuple(v for v, src in self.points.items() if v == src)

    def shared_thresholds(self, thresholds: Mapping[str, float]) -> dict[str, float]:
        """Each calibrated value's threshold raised to the largest of its tie group (so no member saturates
        earlier than its own calibration says)."""
        top: dict[str, float] = {}
        for v, t in thresholds.items():
            rep = self.ties.get(v, v)
            top[rep] = max(top.get(rep, 0.0), t)
        return {v: top[self.ties.get(v, v)] for v in thresholds}


@dataclass(frozen=True)
class TensorQuant:
    """One int8 value: its calibration range, the clipping threshold and scale, the fraction of calibration
    elements beyond the threshold, the value whose calibration chose the scale, and where measured its error in
    the int8 model (SQNR in dB, cosine)."""

    name: str
    min: float
    max: float
    threshold: float
    scale: float
    clipped: float
    scale_of: str
    # in the int8 model against the float model (:mod:`vdla.graph.qerror`; None unless measured)
    sqnr_db: float | None = None
    cosine: float | None = None


@dataclass(frozen=True)
class LayerQuant:
    """One anchor: its input and output values, the range of its per-channel weight scales, and where measured
    the error of the model with only this layer quantized: its output's SQNR (dB), the model outputs' SQNR and
    cosine."""

    name: str
    op: str
    input: str
    output: str
    weight_scale_min: float
    weight_scale_max: float
    # with only this layer quantized: its output's and the model output's error (:mod:`vdla.graph.qerror`; None
    # unless measured)
    sqnr_db: float | None = None
    output_sqnr_db: float | None = None
    output_cosine: float | None = None


@dataclass(frozen=True)
class QuantReport:
    """What profile-guided quantization did (``to_dict`` is the JSON report)."""

    method: str
    percentile: float
    samples: int
    tensors: tuple[TensorQuant, ...]
    layers: tuple[LayerQuant, ...]
    kept_float: tuple[str, ...]
    warnings: tuple[str, ...]
    power_of_two: bool = False
    # the per-channel equalization of the float graph before calibration (``QuantOptions.equalize``; None: off)
    equalization: Equalization | None = None

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "percentile": self.percentile if self.method == "percentile" else None,
            "samples": self.samples,
            "tensors": [_json_numbers(asdict(t)) for t in self.tensors],
            "layers": [_json_numbers(asdict(layer)) for layer in self.layers],
            "kept_float": list(self.kept_float),
            "warnings": list(self.warnings),
            "power_of_two": self.power_of_two,
            "equalization": None if self.equalization is None else self.equalization.to_dict(),
        }


def _json_numbers(row: dict) -> dict:
    """``row`` with infinite floats as the strings ``"inf"``/``"-inf"`` (strict JSON has no infinity): an SQNR of
    a value the quantization leaves exact."""
    return {k: (str(v) if isinstance(v, float) and math.isinf(v) else v) for k, v in row.items()}


# ---------------------------------------------------------------------------------------------------------
# The plan


def check_keep_float(graph: Graph, names: Iterable[str]) -> tuple[str, ...]:
    """``names`` checked to be node outputs of ``graph`` (a node is named by its output value)."""
    names = tuple(dict.fromkeys(names))
    known = [n.output for n in graph.nodes]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
            hint = f"; close names: {', '.join(close)}" if close else f"; nodes: {', '.join(known[:12])}"
            raise QuantizationError(
                f"keep_float: graph {graph.name!r} has no node {name!r} (a node is named by its output; a "
                f"batch norm folded into a convolution gives it the batch norm's output name){hint}"
            )
    return names


class PlannerDialect(FloatDialect):
    """The float form of the epilogue (:data:`vdla.graph.epilogue.FLOAT_STAGES`) in a float graph, where
    a node kept in float ends the chain."""

    def __init__(self, graph: Graph, types, kept: set[str]):
        super().__init__(graph, types)
        self.kept = kept

    def next(self, value: str) -> Node | None:
        node = super().next(value)
        return None if node is None or node.output in self.kept else node


class _Planner:
    """Builds a :class:`QuantPlan` over one float graph."""

    def __init__(self, graph: Graph, kept: tuple[str, ...], align_residuals: bool = True):
        self.g, self.kept, self.align = graph, set(kept), align_residuals
        self.types = infer_types(graph)
        self.dialect = PlannerDialect(graph, self.types, self.kept)

    def is_anchor(self, node: Node) -> bool:
        """A conv2d/dense/conv_transpose the QDQ lowering turns into an accelerator epilogue, not kept in float."""
        x = node.inputs[0]
        if node.op not in ANCHORS or node.output in self.kept or x in self.g.params or self.types[x].dtype != "float32":
            return False
        a = node.attrs
        if int(a.get("groups", 1)) != 1 and not is_depthwise(node, self.types):
            return False
        if node.op == CONV2D and a.get("dilation", 1) not in (1, (1, 1), [1, 1]):
            return False
        return all(self.is_float_param(p) for p in node.inputs[1:])

    def is_float_param(self, name: str) -> bool:
        return name in self.g.params and self.g.params[name].dtype == np.float32

    def chain(self, anchor: Node) -> tuple[str, list[str], dict[str, str]]:
        """The value an anchor's epilogue ends at (the float form of :mod:`vdla.graph.epilogue`), the residual
        operand it adds (if any) computed, and a constant one (the residual add -> the constant)."""
        m = walk(FLOAT_STAGES, anchor, self.dialect)
        skips = [(s.got["skip"], s.node.output) for s in m.get("residual")]
        constants = {add: k for k, add in skips if k in self.g.params}
        return m.end, [k for k, _ in skips if k not in self.g.params], constants

    def plan(self) -> QuantPlan:
        anchors = [n for n in self.g.nodes if self.is_anchor(n)]
        chains: dict[str, str] = {}
        needed: set[str] = set()
        pairs: list[tuple[str, str]] = []  # (skip, sum) of each residual add
        constant_skips: dict[str, tuple[str, str]] = {}
        for a in anchors:
            end, skips, constants = self.chain(a)
            chains[a.output] = end
            constant_skips.update({add: (k, end) for add, k in constants.items()})
            needed.update([a.inputs[0], end, *skips])
            pairs += [(k, end) for k in skips]
        needed.update(self.attention_scores())
        pairs += self.moving_inputs(needed, set(chains.values()))
        points: dict[str, str] = {v: v for v in self.g.inputs if v in needed}
        for node in self.g.nodes:
            src = node.inputs[0] if node.inputs else None
            commutes = node.op in (*COMMUTING, *SELECTING) and len(node.inputs) == 1 and node.output not in self.kept
            if commutes and src in points and node.output not in chains.values():
                points[node.output] = points[src]
            elif node.op in REQUANTIZING and src in points and node.output not in self.kept:
                points[node.output] = node.output
            elif node.output in needed:
                points[node.output] = node.output
        ties = _tie_groups([(points[k], points[e]) for k, e in pairs]) if self.align else {}
        ends, prod = set(chains.values()), self.g.producers()
        cpu = tuple(
            v for v, src in points.items()
            if v == src and v in prod and v not in ends and v not in chains and not self.moves_int8(prod[v])
        )  # fmt: skip
        kept = tuple(sorted(self.kept))
        return QuantPlan(tuple(a.output for a in anchors), chains, points, kept, ties, cpu, constant_skips)

    def attention_scores(self) -> list[str]:
        """The scaled scores each attention block's softmax reads (:func:`vdla.graph.attention.softmax_scores`):
        quantized at their own calibrated scale, the score scale of the integer attention
        (:mod:`vdla.graph.attention`); the range is the scores' before the additive mask, which the integer form
        applies as a per-key bias instead."""
        prod = self.g.producers()
        found = [
            softmax_scores(n, prod, self.types, self.g.params)
            for n in self.g.nodes
            if n.op == SOFTMAX and n.output not in self.kept
        ]
        return [s.scaled for s in found if s is not None and s.scaled not in self.kept]

    def scales_channels(self, node: Node) -> bool:
        """Whether ``node`` multiplies a feature map by a per-channel vector, both computed (squeeze-excite)."""
        computed = all(v not in self.g.params for v in node.inputs)
        return computed and channel_product([self.types[v].shape for v in node.inputs]) is not None

    def moves(self, node: Node | None) -> bool:
        """Whether ``node`` takes int8 in and out on the accelerator where its result is int8 (see
        :meth:`moving_inputs`)."""
        if node is None:
            return False
        return node.op in (*MOVING, *REQUANTIZING) or (node.op == MUL and self.scales_channels(node))

    def moves_int8(self, node: Node) -> bool:
        """Whether the accelerator may run ``node`` on int8 (:meth:`moves`): not an add of a constant (a position
        embedding), which the accelerator does not move."""
        return self.moves(node) and not (node.op == ADD and any(v in self.g.params for v in node.inputs))

    def moving_inputs(self, needed: set[str], ends: set[str]) -> list[tuple[str, str]]:
        """Add to ``needed`` the float inputs of each add (outside an epilogue), concatenation, slice, resize,
        global average or channel product whose result is needed (directly, or through a reshape or transpose:
        a pooled vector flattened for a dense layer): int8 on both sides, the accelerator moves, pools or scales
        them (:mod:`vdla.graph.copies`, the channel scale) and an activation before them is tabulated. In
        reverse order, so a chain of them is followed back.
        Returns the (input, result) pairs of the adds and concatenations, whose scales the residual alignment
        ties (one rounding fewer: each part and addend at the result's scale)."""
        pairs = []
        prod = self.g.producers()
        for node in reversed(self.g.nodes):
            moves = self.moves(node) or (node.op in (RESHAPE, TRANSPOSE) and self.moves(prod.get(node.inputs[0])))
            if not moves or node.output not in needed or node.output in ends or node.output in self.kept:
                continue
            if not self.moves_int8(node) and node.op == ADD:
                continue  # an add of a constant runs on the CPU: its input stays float (one rounding, not two)
            inputs = [v for v in node.inputs if v not in self.g.params and self.types[v].dtype == "float32"]
            needed.update(inputs)
            pairs += [(v, node.output) for v in inputs if node.op in (ADD, CONCAT)]
        return pairs


def _tie_groups(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Union of the pairs: each value that is in a pair -> its group's representative (the group's first
    value in pair order)."""
    parent: dict[str, str] = {}

    def find(v: str) -> str:
        parent.setdefault(v, v)
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra
    return {v: find(v) for v in parent}


def plan_quantization(graph: Graph, keep_float: Iterable[str] = (), align_residuals: bool = True) -> QuantPlan:
    """The values of the float ``graph`` to quantize (see the module docstring); ``keep_float`` names nodes
    (by their output) to leave in float32; ``align_residuals`` gives each residual skip its sum's scale."""
    return _Planner(graph, check_keep_float(graph, keep_float), align_residuals).plan()


# ---------------------------------------------------------------------------------------------------------
# The rewrite


def check_params(graph: Graph) -> None:
    """Refuse a float parameter with NaN or infinite values, naming it and the node reading it."""
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            p = graph.params.get(name)
            if p is not None and p.dtype == np.float32 and not np.all(np.isfinite(p)):
                role = {1: "weights", 2: "bias"}.get(i, "parameter") if node.op in ANCHORS else "parameter"
                raise QuantizationError(f"{node.op} {node.output!r} ({role} {name!r}): NaN or infinite values")


def weight_scales(w: np.ndarray, where: str, power_of_two: bool = False) -> np.ndarray:
    """Per-output-channel symmetric scales ``max|w[c]| / 127`` (float32). A *negligible* channel, whose
    largest magnitude is below :data:`NEGLIGIBLE` (2^-16) of the layer's largest (an all-zero channel too),
    takes the layer's largest scale: at that scale its weights round to 0 (each lies below 127 * 2^-16 of a
    step), so it is quantized as the zero channel it all but is. The weights it drops are under 1/500 of one
    int8 step of the layer quantized per tensor, where they would round to 0 as well. With ``power_of_two``
    one scale for the whole tensor, the power of two at or above ``max|w| / 127`` (:func:`pow2_scale`).

    Invariants: every scale is positive, finite and within a factor 2^16 of the layer's largest, so each
    channel's requantization multiplier is at least 2^-16 of the largest (which lies in [2^30, 2^31)): a
    relative error of at most 2^-15; a negligible channel's bias is quantized at the layer's coarsest
    accumulator scale ``s_x * max|w| / 127``, not at a near-zero one."""
    if not np.all(np.isfinite(w)):
        raise QuantizationError(f"{where}: the weights have NaN or infinite values")
    absmax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float64)
    largest = absmax.max() if absmax.max() > 0 else 1.0
    if power_of_two:
        return np.full(w.shape[0], pow2_scale(largest / WEIGHT_MAX), np.float32)
    return (np.where(absmax >= largest * NEGLIGIBLE, absmax, largest) / WEIGHT_MAX).astype(np.float32)


def pow2_scale(scale: float) -> float:
    """The smallest power of two >= ``scale`` (> 0): a scale no value saturates at earlier than at ``scale``."""
    return float(2.0 ** np.ceil(np.log2(scale)))


class _QdqWriter:
    """Rebuilds the node list once with quantize/dequantize nodes (see the module docstring)."""

    def __init__(self, graph: Graph, plan: QuantPlan, scales: Mapping[str, float], power_of_two: bool = False):
        self.g, self.plan, self.power_of_two = graph, plan, power_of_two
        self.scale = {v: float(np.float32(scales[src])) for v, src in plan.points.items()}
        self.params = dict(graph.params)
        self.taken = set(graph.inputs) | set(graph.params) | {n.output for n in graph.nodes}
        self.layers: list[LayerQuant] = []

    def fresh(self, name: str) -> str:
        return fresh_name(name, self.taken)

    def qdq(self, src: str, value: str, dst: str) -> list[Node]:
        attrs = {"scale": self.scale[value], "zero_point": 0}
        q = self.fresh(f"{value}:q")
        return [Node("quantize", (src,), q, dict(attrs)), Node("dequantize", (q,), dst, dict(attrs))]

    def param(self, name: str, value: np.ndarray) -> str:
        key = self.fresh(name)
        self.params[key] = value
        return key

    def anchor_inputs(self, node: Node, x: str) -> tuple[list[Node], tuple[str, ...]]:
        """Dequantize nodes of the int8 weights and int32 bias, and the anchor's new inputs."""
        w = self.g.params[node.inputs[1]]
        axis = ANCHORS[node.op]  # the output channels' axis
        where = f"{node.op} {node.output!r} (weights {node.inputs[1]!r})"
        s_w = weight_scales(np.moveaxis(w, axis, 0), where, self.power_of_two)
        shaped = s_w.reshape(tuple(-1 if i == axis else 1 for i in range(w.ndim)))
        w_q = np.clip(np.rint(w / shaped), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
        base = node.output
        wq, ws = self.param(f"{base}:w_q", w_q), self.param(f"{base}:w_scale", shaped)
        w_dq = self.fresh(f"{base}:w")
        nodes = [Node("dequantize", (wq, ws), w_dq, {"axis": axis, "zero_point": 0})]
        inputs = [x, w_dq]
        if len(node.inputs) > 2:
            nodes.append(self.bias(node, s_w, self.scale[x]))
            inputs.append(nodes[-1].output)
        self.layers.append(
            LayerQuant(base, node.op, node.inputs[0], self.plan.chains[base], float(s_w.min()), float(s_w.max()))
        )
        return nodes, tuple(inputs)

    def bias(self, node: Node, s_w: np.ndarray, s_x: float) -> Node:
        """``dequantize(b_q int32, s_x * s_w)``: the bias at the accumulator's scale."""
        b = self.g.params[node.inputs[2]].astype(np.float64).ravel()
        if not np.all(np.isfinite(b)):
            raise QuantizationError(f"{node.op} {node.output!r}: bias {node.inputs[2]!r} has NaN or infinite values")
        s_acc = s_x * s_w.astype(np.float64)
        b_q = np.rint(b / s_acc)
        over = np.flatnonzero(np.abs(b_q) >= 2**31)
        if over.size:
            c = int(over[0])
            more = f" (and {over.size - 1} more channels)" if over.size > 1 else ""
            raise QuantizationError(
                f"{node.op} {node.output!r}: bias {node.inputs[2]!r} channel {c}{more} does not fit int32 at its "
                f"accumulator scale: b = {b[c]:.4g}, s_x * s_w[{c}] = {s_x:.4g} * {s_w[c]:.4g} = {s_acc[c]:.4g} "
                f"(weights {node.inputs[1]!r}, input {node.inputs[0]!r})"
            )
        base = node.output
        bq = self.param(f"{base}:b_q", b_q.astype(np.int32))
        bs = self.param(f"{base}:b_scale", s_acc.astype(np.float32))
        return Node("dequantize", (bq, bs), self.fresh(f"{base}:b"), {"axis": 0, "zero_point": 0})

    def constant_skip(self, const: str, value: str) -> list[Node]:
        """``dequantize`` of the constant residual ``const`` quantized at ``value``'s scale (int8, rounded half to
        even and saturated as QuantizeLinear does): what the epilogue adds."""
        scale = self.scale[value]
        q = np.clip(np.rint(self.g.params[const].astype(np.float64) / scale), -128, 127).astype(np.int8)
        attrs = {"scale": scale, "zero_point": 0}
        return [Node("dequantize", (self.param(f"{const}:q", q),), self.fresh(f"{const}:dq"), attrs)]

    def run(self) -> Graph:
        points, anchors = self.plan.points, set(self.plan.anchors)
        read = {v: self.fresh(f"{v}:dq") for v in self.g.inputs if v in points}
        exact: dict[str, str] = {}  # a value computed in float on the CPU -> that float value (plan.cpu_values)
        nodes: list[Node] = []
        for v, dst in read.items():
            nodes += self.qdq(v, v, dst)
        for node in self.g.nodes:
            inputs = tuple(read.get(i, i) for i in node.inputs)
            if node.output in self.plan.constant_skips:
                const, end = self.plan.constant_skips[node.output]
                nodes += self.constant_skip(const, end)
                inputs = tuple(nodes[-1].output if i == const else i for i in inputs)
            if node.op == LAYER_NORM:  # a row's spread, not the tensor's range, sets the precision it needs
                inputs = (exact.get(inputs[0], inputs[0]), *inputs[1:])
            if node.output in anchors:
                extra, inputs = self.anchor_inputs(node, node.inputs[0])
                inputs = (read.get(inputs[0], inputs[0]), *inputs[1:])
                nodes += extra
            if node.output in points:
                renamed = self.fresh(f"{node.output}:float")
                nodes.append(Node(node.op, inputs, renamed, node.attrs))
                nodes += self.qdq(renamed, node.output, node.output)
                if node.output in self.plan.cpu_values:
                    exact[node.output] = renamed
            else:
                nodes.append(Node(node.op, inputs, node.output, node.attrs))
        return self.g.copy(nodes=nodes, params=self.params)


def quantize_graph(
    graph: Graph, plan: QuantPlan, scales: Mapping[str, float], power_of_two: bool = False
) -> tuple[Graph, list[LayerQuant]]:
    """The QDQ form of the float ``graph`` under ``plan`` with ``scales`` (one positive scale per value in
    ``plan.calibrated``), and a summary of each anchor's weights; ``power_of_two`` quantizes each weight tensor
    at one power-of-two scale (the activation scales are the caller's)."""
    bad = {v: scales.get(v) for v in plan.calibrated if not (scales.get(v) or 0) > 0}
    if bad:
        raise QuantizationError(f"scales must be positive for every calibrated value, got {bad}")
    rw = _QdqWriter(graph, plan, scales, power_of_two)
    return rw.run(), rw.layers


# ---------------------------------------------------------------------------------------------------------
# Calibration, scales and the rewrite in one call


def quantize_model(
    graph: Graph,
    data: Mapping[str, np.ndarray],
    options: QuantOptions | str | None = None,
    *,
    runner: Runner | None = None,
    progress: Progress | None = None,
    stats_cache: dict[str, TensorStats] | None = None,
    **option_fields: Any,
) -> tuple[Graph, QuantReport]:
    """Profile-guided quantization of a float ``graph`` (simplified: batch norms folded) as ``options`` say
    (:class:`QuantOptions`, or the calibration method's name; its fields may also be given as keywords, which
    replace them): calibrate on ``data`` (one float array per graph input, samples on the first axis), choose
    each value's scale by the ``calibration`` method (``minmax``, ``percentile`` or ``entropy``), the values tied
    through residual adds sharing their group's largest threshold when ``align_residuals``, and rewrite into QDQ
    form. ``power_of_two`` is the scheme of TVM's VTA: every scale a power of two (activations rounded up from
    their threshold, weights one scale per tensor), so each requantization is a plain rounding shift, free in the
    accelerator's epilogue, at some cost in accuracy against per-channel weight scales. With ``equalize`` the float
    graph is first equalized on ``data`` (:func:`vdla.graph.equalize.equalize`): the QDQ graph is that of the
    equalized graph, and the report's ``equalization`` says how (:func:`vdla.graph.qerror.with_errors` measures
    against the float graph equalized alike). ``runner`` runs the float graph for calibration (the numpy
    interpreter by default), ``progress(done, total)`` is called per batch.

    ``stats_cache`` (a dict, filled in place) keeps the calibration statistics of every value observed, so that
    quantizing the same graph on the same ``data`` again (other ``keep_float``: :mod:`vdla.graph.autofloat`)
    calibrates only the values not seen before; the result is the same as without it.

    Returns the QDQ graph (for :func:`vdla.graph.qdq.lower_qdq`) and the report. A value that is zero on
    every calibration sample gets scale ``1/127`` and a :class:`QuantizationWarning` naming it.
    """
    opts = quant_options(options, option_fields)
    if any(n.op in (QUANTIZE, DEQUANTIZE) for n in graph.nodes):
        raise QuantizationError(f"graph {graph.name!r} is already quantized (QDQ): it keeps its own scales")
    check_params(graph)
    data = check_calibration(graph.inputs, data)
    equalized = None
    if opts.equalize:
        graph, equalized = equalize(graph, data, runner)
    plan = plan_quantization(graph, opts.keep_float, opts.align_residuals)
    cache = {} if stats_cache is None else stats_cache
    missing = [v for v in plan.points if v not in cache]
    if missing or stats_cache is None:
        cache.update(calibrate(graph, data, missing, runner, progress))
    stats = {v: cache[v] for v in plan.points}
    thresholds, scales, notes = _scales(plan, stats, opts)
    qgraph, layers = quantize_graph(graph, plan, scales, opts.power_of_two)
    tensors = tuple(_tensor_quant(v, src, stats[v], thresholds[src], scales[src]) for v, src in plan.points.items())
    samples = next(iter(data.values())).shape[0]
    report = QuantReport(
        opts.calibration, opts.percentile, samples, tensors, tuple(layers), plan.kept, notes, opts.power_of_two,
        equalized,
    )  # fmt: skip
    return qgraph, report


def _scales(
    plan: QuantPlan, stats: Mapping[str, TensorStats], opts: QuantOptions
) -> tuple[dict[str, float], dict[str, float], tuple[str, ...]]:
    """Each calibrated value's threshold (the one its scale clips at) and scale, and the warnings (a value zero
    on every calibration sample, warned of as a :class:`QuantizationWarning`)."""
    thresholds = {v: choose_threshold(stats[v], opts.calibration, opts.percentile) for v in plan.calibrated}
    notes = tuple(
        f"{v!r} is zero on every calibration sample: scale 1/127 (values at inference beyond +-1 saturate)"
        for v, t in thresholds.items()
        if t == 0.0
    )
    for note in notes:
        warnings.warn(note, QuantizationWarning, stacklevel=3)
    thresholds = plan.shared_thresholds(thresholds)
    scales = {v: (t if t > 0 else 1.0) / INT8_MAX for v, t in thresholds.items()}
    if opts.power_of_two:  # the threshold the power-of-two scale actually clips at
        scales = {v: pow2_scale(sc) for v, sc in scales.items()}
        thresholds = {v: scales[v] * INT8_MAX for v in thresholds}
    return thresholds, scales, notes


def _tensor_quant(value: str, src: str, st: TensorStats, threshold: float, scale: float) -> TensorQuant:
    t = threshold if threshold > 0 else 1.0
    return TensorQuant(value, st.min, st.max, t, float(np.float32(scale)), st.clipped_fraction(t), src)
