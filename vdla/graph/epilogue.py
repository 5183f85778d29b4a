"""The epilogue of a conv2d/dense layer: one typed value, one grammar of named stages, one walker.

What the accelerator computes after a layer's int32 accumulator ``acc`` (the integer arithmetic of
:mod:`vdla.isa.arith`)::

    y   = mul_shift(acc + bias, multiplier, shift)                       # requantization, rounded once
    out = clamp(y + residual, clip)                                      # a residual added as it is
    out = clamp(rshift(mul_shift(clamp(y, y_clip), m_y, shift_y)         # a rescaled residual: the layer's
                       + mul_shift(residual, m_k, shift_k), frac), clip) # output and the sum rounded apart
    out = table[byte(out)]                                               # an activation table, if any
    out = where(row_mask[c, y], 0, out)                                  # whole rows' channels zeroed, if any

:class:`Epilogue` holds that computation with its constants; the compiler derives its program structure
and cache key from it (:meth:`vdla.compiler.spec.EpilogueSpec.of`), never from a second description.

Graphs spell an epilogue in two forms. Each is one tuple of named :class:`EpilogueStage` s, read by one walker
(:func:`walk`) along the single-reader chain that follows the anchor:

* the **float** form (:data:`FLOAT_STAGES`): ``bias -> residual -> clip*`` (a constant per-channel add, the
  add of a value computed before the anchor or of a constant of the output's shape, ReLU or constant clips).
  The quantization planner reads it in float graphs (:mod:`vdla.graph.quantize`); the QDQ lowering
  (:mod:`vdla.graph.qdq`) reads it in QDQ models, where quantize -> dequantize hops may stand between stages
  (its :class:`Dialect` adds them);
* the **integer** form (:data:`INTEGER_STAGES`): ``bias -> requant -> round -> residual -> clip* ->
  rescale -> rescale_add -> rescale_round -> rescale_clip* -> output -> table -> mask``, what the QDQ lowering
  writes (:func:`epilogue_nodes`) and placement reads (:func:`match_integer`); the two are inverse
  (``tests/test_epilogue.py``). The mask is a clip whose bounds are tensors of one value per channel and row,
  (0, 0) where the element is zeroed and int8's full range elsewhere: the edge rows of a value paired with a
  phase (:mod:`vdla.graph.rowpair`), whose halves outside the tensor must read as zero.

Invariants: a :class:`Match` lists its stages in grammar order, every node of the chain once; a stage
whose ``after`` stages did not match, or whose ``excludes`` did, is not tried.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdla.graph.ew import operand_value
from vdla.graph.graph import Graph, Node, only_reader
from vdla.graph.opnames import CLIP, CONV_TRANSPOSE, DENSE, MUL, RELU
from vdla.graph.types import TensorType
from vdla.isa.arith import INT8_MAX, INT8_MIN

INT8_BOUNDS = (INT8_MIN, INT8_MAX)


# ---------------------------------------------------------------------------------------------------------
# The typed value


@dataclass(frozen=True, eq=False)
class Rescale:
    """A residual added after the layer's own rounding: ``y`` clamped to ``y_clip``, then
    ``rshift(mul_shift(y, y_multiplier, y_shift) + mul_shift(residual, skip_multiplier, skip_shift), frac)``
    (each term at ``frac`` fractional bits of the output step)."""

    y_clip: tuple[int, int]
    y_multiplier: int
    y_shift: int
    skip_multiplier: int
    skip_shift: int
    frac: int = 0

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        """(lo, hi, shift_y, shift_k, frac): the structure the compiler keys on."""
        return (*self.y_clip, self.y_shift, self.skip_shift, self.frac)


@dataclass(frozen=True, eq=False)
class Epilogue:
    """The epilogue of one layer (see the module docstring): ``bias`` one integer per output channel (or
    None), ``multiplier`` an integer or one per channel with its rounding ``shift``, ``residual`` the dtype
    ("int8", "int32") of a tensor added to the result (None: none), ``rescale`` when that residual is added
    after the layer's own rounding, ``clip`` the final clamp within int8 (ReLU merged in as ``lo >= 0``),
    ``table`` the 256 int8 entries of an activation applied next (``vdla.graph.tables``; None: none), ``row_mask``
    a (channels, rows) bool array, True where every column's element of that channel and output row is then
    zeroed (None: none; the edge rows of a value paired with a phase, :mod:`vdla.graph.rowpair`)."""

    bias: np.ndarray | None = None
    multiplier: int | np.ndarray = 1
    shift: int = 0
    residual: str | None = None
    rescale: Rescale | None = None
    clip: tuple[int, int] = INT8_BOUNDS
    table: np.ndarray | None = None
    row_mask: np.ndarray | None = None

    def table_is_monotonic(self) -> bool:
        """Whether the table (if any) is non-decreasing in its int8 input: a max then commutes with it."""
        if self.table is None:
            return True
        ordered = np.asarray(self.table, np.int8)[np.arange(-128, 128).astype(np.int8).view(np.uint8)]
        return bool(np.all(np.diff(ordered.astype(np.int16)) >= 0))


# ---------------------------------------------------------------------------------------------------------
# The walker


@dataclass(frozen=True)
class EpilogueStage:
    """One named stage of a grammar: the operators that can spell it and ``take(node, walk)``, which returns
    the stage's captures (a dict), None where ``node`` is not this stage, or a string: the reason the chain
    cannot be an epilogue at all. Captures named ``_nodes`` (further nodes the stage takes in, before
    ``node``), ``_next`` (the value the chain continues from) and ``_stop`` (the chain ends here) steer the
    walk. ``repeat``: may match several nodes in a row; ``first``: only right after the anchor; ``after``:
    stages that must have matched before; ``excludes``: stages that must not have; ``label`` what messages
    call it."""

    name: str
    ops: tuple[str, ...]
    take: Callable[[Node, Walk], dict | str | None]
    repeat: bool = False
    first: bool = False
    after: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    label: str = ""  # what a message calls the stage (its name when empty)


@dataclass(frozen=True)
class StageMatch:
    """One matched stage: its node (and the further nodes it took in) and its captures."""

    stage: str
    node: Node
    got: Mapping[str, Any] = field(default_factory=dict)
    extra: tuple[Node, ...] = ()


class Dialect:
    """How one graph form links an epilogue's nodes: which node continues the chain (the single reader of
    the value, not a graph output; ``inputs[0]`` must be the value unless ``either_side`` names the op),
    and optional stages that may stand anywhere between the others without advancing the grammar
    (``between``: the quantize -> dequantize hops of a QDQ model)."""

    either_side: tuple[str, ...] = ()
    between: tuple[EpilogueStage, ...] = ()

    def __init__(self, graph: Graph, types: Mapping[str, TensorType]):
        self.graph, self.types = graph, types
        self.params = graph.params
        self.consumers = graph.consumers()
        self.producers = graph.producers()
        self.outputs = set(graph.outputs)
        self.index = {n.output: i for i, n in enumerate(graph.nodes)}

    def only_reader(self, value: str) -> Node | None:
        return only_reader(value, self.consumers, self.outputs)

    def next(self, value: str) -> Node | None:
        node = self.only_reader(value)
        if node is None or (node.inputs[0] != value and node.op not in self.either_side):
            return None
        return node

    def before(self, value: str, anchor: Node) -> bool:
        """Whether ``value`` is ready when ``anchor`` runs: a graph input, a constant or a node output computed
        earlier."""
        if value in self.graph.inputs or value in self.params:
            return True
        return self.index.get(value, len(self.index)) < self.index[anchor.output]


@dataclass
class Walk:
    """A walk along the chain after ``anchor``: the steps matched so far, ``value`` the chain's end."""

    anchor: Node
    dialect: Dialect
    steps: list[StageMatch] = field(default_factory=list)
    value: str = ""

    def has(self, stage: str) -> bool:
        return any(s.stage == stage for s in self.steps)

    def get(self, stage: str) -> list[StageMatch]:
        return [s for s in self.steps if s.stage == stage]

    def other(self, node: Node) -> str | None:
        """The input of a two-input ``node`` that is not the chain's value (None for any other node)."""
        if len(node.inputs) != 2:
            return None
        return node.inputs[1] if node.inputs[0] == self.value else node.inputs[0]


@dataclass(frozen=True)
class Match:
    """A chain matched against a grammar: its steps in order, or ``reason`` it cannot be an epilogue."""

    anchor: Node
    steps: tuple[StageMatch, ...] = ()
    reason: str | None = None

    def has(self, stage: str) -> bool:
        return any(s.stage == stage for s in self.steps)

    def get(self, stage: str) -> list[StageMatch]:
        return [s for s in self.steps if s.stage == stage]

    def nodes(self) -> list[Node]:
        """Every node of the chain after the anchor, in graph order."""
        return [n for s in self.steps for n in (*s.extra, s.node)]

    @property
    def end(self) -> str:
        """The value the chain ends at (the anchor's output when nothing matched)."""
        return self.steps[-1].node.output if self.steps else self.anchor.output


def _try(stage: EpilogueStage, node: Node, w: Walk) -> dict | str | None:
    if node.op not in stage.ops or (stage.first and w.steps):
        return None
    if any(not w.has(a) for a in stage.after) or any(w.has(x) for x in stage.excludes):
        return None
    return stage.take(node, w)


def walk(stages: tuple[EpilogueStage, ...], anchor: Node, dialect: Dialect) -> Match:
    """Match the chain after ``anchor`` against ``stages`` in order (each stage optional; a repeatable one
    may match again; the dialect's ``between`` stages anywhere), stopping at the first node no stage takes.
    The grammar's required parts are the caller's to check."""
    w = Walk(anchor, dialect, value=anchor.output)
    pos = 0
    while (node := dialect.next(w.value)) is not None:
        found = None
        for stage in dialect.between:
            got = _try(stage, node, w)
            if got is not None:
                found = (stage, got, pos)
                break
        for i in range(pos, len(stages)) if found is None else ():
            got = _try(stages[i], node, w)
            if got is not None:
                found = (stages[i], got, i if stages[i].repeat else i + 1)
                break
        if found is None:
            break
        stage, got, pos = found
        if isinstance(got, str):
            return Match(anchor, tuple(w.steps), got)
        w.steps.append(StageMatch(stage.name, node, got, tuple(got.get("_nodes", ()))))
        w.value = got.get("_next", node.output)
        if got.get("_stop"):
            break
    return Match(anchor, tuple(w.steps))


def intersect_bounds(first: tuple[float, float], *more: tuple[float, float]) -> tuple[float, float]:
    """The intersection of clip ranges ``(lo, hi)``: the greatest ``lo`` and the least ``hi`` (``lo > hi``
    where two ranges do not overlap)."""
    lo, hi = first
    for a, b in more:
        lo, hi = max(lo, a), min(hi, b)
    return lo, hi


def _narrow_bounds(lo: float, hi: float, node: Node, params: Mapping[str, np.ndarray]) -> tuple[float, float] | None:
    """The clamp ``[lo, hi]`` narrowed by a ReLU or a clip with constant bounds (None: computed bounds)."""
    if node.op == RELU:
        return intersect_bounds((lo, hi), (0, np.inf))
    a, b = operand_value(node, "lo", params), operand_value(node, "hi", params)
    if a is None or b is None or np.ndim(a) or np.ndim(b):
        return None
    return intersect_bounds((lo, hi), (a.item(), b.item()))


# ---------------------------------------------------------------------------------------------------------
# The float form: quantization planner and QDQ lowering


class FloatDialect(Dialect):
    """The float form of a graph before quantization: a bias is a float32 constant, one value per output
    channel; a residual is a float32 value computed before the anchor, of the output's shape, or a constant of
    the output's shape (a position embedding: a constant residual, a tensor of the image)."""

    either_side = ("add",)

    def bias(self, node: Node, w: Walk) -> np.ndarray | None:
        """The per-channel constant ``node`` adds to the chain's value (float64), or None."""
        other = w.other(node)
        p = self.constant(other) if other is not None else None
        if p is None:
            return None
        shape = self.types[w.value].shape
        if p.ndim > len(shape):
            return None
        aligned = (1,) * (len(shape) - p.ndim) + p.shape
        if len(shape) < 2 or aligned[1] != shape[1] or any(d != 1 for i, d in enumerate(aligned) if i != 1):
            return None
        return p.ravel()

    def constant(self, name: str) -> np.ndarray | None:
        p = self.params.get(name)
        return p.astype(np.float64) if p is not None and p.dtype == np.float32 else None

    def skip(self, other: str, w: Walk) -> dict | None:
        """The residual operand's captures ({"skip": value}), or None."""
        t = self.types[other]
        ok = t.dtype == "float32" and t.shape == self.types[w.value].shape
        return {"skip": other} if ok and self.before(other, w.anchor) else None


def _float_bias(node: Node, w: Walk) -> dict | None:
    b = w.dialect.bias(node, w)
    return None if b is None else {"bias": b}


def _float_residual(node: Node, w: Walk) -> dict | None:
    other = w.other(node)
    if other is None or other == w.value:
        return None
    return w.dialect.skip(other, w)


def _float_clip(node: Node, w: Walk) -> dict | None:
    if node.inputs[0] != w.value:
        return None
    bounds = _narrow_bounds(-np.inf, np.inf, node, w.dialect.params)
    return None if bounds is None else {"bounds": bounds}


FLOAT_STAGES = (
    EpilogueStage("bias", ("add",), _float_bias, first=True),
    EpilogueStage("residual", ("add",), _float_residual, excludes=("clip",)),
    EpilogueStage("clip", ("relu", "clip"), _float_clip, repeat=True),
)


# ---------------------------------------------------------------------------------------------------------
# The integer form: what the QDQ lowering writes and placement reads


def _int_bias(node: Node, w: Walk) -> dict | None:
    other = node.inputs[1] if len(node.inputs) > 1 else None
    if other not in w.dialect.params or "b" in node.attrs:
        return None
    return {"bias": w.dialect.params[other].ravel().astype(np.int64)}


def _int_requant(node: Node, w: Walk) -> dict | None:
    other = node.inputs[1] if len(node.inputs) > 1 else None
    if other not in w.dialect.params and "b" not in node.attrs:
        return None
    m = w.dialect.params[other].ravel() if other else np.asarray(node.attrs["b"])
    mult = int(m[0]) if m.size > 1 and np.all(m == m[0]) else (int(m) if m.ndim == 0 else m)
    return {"multiplier": mult, "shift": int(node.attrs.get("shift", 0))}


def _int_round(node: Node, w: Walk) -> dict | None:
    if "shift" not in node.attrs or any(s.got["shift"] for s in w.get("requant")):
        return None  # a requantization that rounds its product takes no second shift
    return {"shift": int(node.attrs["shift"])}


def _int_residual(node: Node, w: Walk) -> dict | str | None:
    other = node.inputs[1] if len(node.inputs) > 1 else None
    if other is None or other == w.value:
        return None
    t, mine = w.dialect.types[other], w.dialect.types[w.value]
    if other in w.dialect.params and (t.dtype != "int8" or t.shape != mine.shape):
        return None  # a constant residual is an int8 tensor of the output's shape (the image holds it)
    if t.dtype not in ("int8", "int32") or t.shape != mine.shape:
        return f"a residual of type {t} (int8 or int32 of the output's shape fits)"
    return {"residual": other, "dtype": t.dtype}


def _int_clip(node: Node, w: Walk) -> dict | None:
    if node.op == CLIP and not all(isinstance(node.attrs.get(k), int) for k in ("lo", "hi")):
        return None
    return {"bounds": _narrow_bounds(INT8_MIN, INT8_MAX, node, {})}


def _int_rescale(node: Node, w: Walk) -> dict | None:
    if "b" not in node.attrs or "shift" not in node.attrs:
        return None
    return {"multiplier": int(node.attrs["b"]), "shift": int(node.attrs["shift"])}


def _scaled_skip(value: str | None, w: Walk) -> Node | None:
    """The ``mul(k, m_k, shift)`` of an int8 residual ``k`` producing ``value`` for this add alone."""
    d = w.dialect
    node = d.producers.get(value) if value is not None else None
    if node is None or node.op != MUL or "b" not in node.attrs or "shift" not in node.attrs:
        return None
    if len(d.consumers.get(value, [])) != 1 or d.types[node.inputs[0]].dtype != "int8":
        return None
    return node


def _int_rescale_add(node: Node, w: Walk) -> dict | None:
    skip = _scaled_skip(node.inputs[1] if len(node.inputs) > 1 else None, w)
    if skip is None:
        return None
    got = {"residual": skip.inputs[0], "multiplier": int(skip.attrs["b"]), "shift": int(skip.attrs["shift"])}
    return {**got, "_nodes": (skip,)}


def _int_rescale_round(node: Node, w: Walk) -> dict | None:
    return {"frac": int(node.attrs["shift"])} if "shift" in node.attrs else None


def _int_output(node: Node, w: Walk) -> dict | None:
    return {} if node.attrs.get("dtype") == "int8" else None


def _int_table(node: Node, w: Walk) -> dict | None:
    entries = w.dialect.params.get(node.inputs[1]) if len(node.inputs) == 2 else None
    if entries is None or entries.dtype != np.int8:  # float32 entries: a CPU table, not an epilogue stage
        return None
    return {"table": entries.reshape(-1)}


def mask_bounds(row_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (lo, hi) clip bounds, int8 of shape (1, C, H, 1), that zero the elements ``row_mask`` (C, H) marks and
    keep every other int8 value."""
    lo = np.where(row_mask, 0, INT8_MIN).astype(np.int8)[None, :, :, None]
    hi = np.where(row_mask, 0, INT8_MAX).astype(np.int8)[None, :, :, None]
    return lo, hi


def mask_node(x: str, out: str, row_mask: np.ndarray, param: Callable[[str, np.ndarray], str]) -> Node:
    """The clip writing ``out``: ``x`` with the elements ``row_mask`` (C, H) marks zeroed (:func:`mask_bounds`);
    ``param(name, array)`` adds a parameter and returns its name."""
    lo, hi = mask_bounds(np.asarray(row_mask, bool))
    return Node("clip", (x, param(f"{out}:mask_lo", lo), param(f"{out}:mask_hi", hi)), out)


def _int_mask(node: Node, w: Walk) -> dict | None:
    """A clip by tensor bounds that zeroes whole rows' channels (:func:`mask_bounds`) and keeps the rest."""
    params, t = w.dialect.params, w.dialect.types[w.value]
    if len(node.inputs) != 3 or not all(i in params for i in node.inputs[1:]) or len(t.shape) != 4:
        return None
    lo, hi = (params[i] for i in node.inputs[1:])
    if lo.shape != (1, *t.shape[1:3], 1) or hi.shape != lo.shape:
        return None
    row_mask = (lo == 0)[0, :, :, 0] & (hi == 0)[0, :, :, 0]
    want = mask_bounds(row_mask)
    if not (np.array_equal(lo, want[0]) and np.array_equal(hi, want[1])):
        return None
    return {"row_mask": row_mask, "_stop": True}


INTEGER_STAGES = (
    EpilogueStage("bias", ("add",), _int_bias),
    EpilogueStage("requant", ("mul",), _int_requant, label="multiplier"),
    EpilogueStage("round", ("rshift",), _int_round, label="shift"),
    EpilogueStage("residual", ("add",), _int_residual),
    EpilogueStage("clip", ("clip", "relu"), _int_clip, repeat=True),
    EpilogueStage(
        "rescale", ("mul",), _int_rescale, after=("clip",), excludes=("residual",), label="rescaled residual"
    ),
    EpilogueStage("rescale_add", ("add",), _int_rescale_add, after=("rescale",), label="rescaled residual"),
    EpilogueStage("rescale_round", ("rshift",), _int_rescale_round, after=("rescale_add",), label="rescaled residual"),
    EpilogueStage("rescale_clip", ("clip", "relu"), _int_clip, repeat=True, after=("rescale_add",), label="clip"),
    EpilogueStage("output", ("cast",), _int_output, label="int8"),
    EpilogueStage("table", ("table",), _int_table, after=("output",), label="activation table"),
    EpilogueStage("mask", ("clip",), _int_mask, after=("output",), label="row mask"),
)


def describe(stages: tuple[EpilogueStage, ...]) -> str:
    """The grammar as messages say it: ``bias -> multiplier -> ...``."""
    labels = [s.label or s.name for s in stages]
    return " -> ".join(a for i, a in enumerate(labels) if i == 0 or a != labels[i - 1])


@dataclass(frozen=True)
class LayerEpilogue:
    """An epilogue found in a graph: the typed value, the nodes that compute it (the anchor's output first,
    in graph order), the value it writes and the residual value it reads (None: none)."""

    epilogue: Epilogue
    nodes: tuple[str, ...]
    output: str
    residual: str | None = None


def _clip_of(steps: list[StageMatch]) -> tuple[int, int]:
    lo, hi = intersect_bounds(INT8_BOUNDS, *(s.got["bounds"] for s in steps))
    return int(lo), int(hi)


def match_integer(anchor: Node, graph: Graph, types: Mapping[str, TensorType]) -> LayerEpilogue | str:
    """The integer epilogue after ``anchor`` (:data:`INTEGER_STAGES`), or the reason there is none."""
    m = walk(INTEGER_STAGES, anchor, Dialect(graph, types))
    if m.reason is not None:
        return m.reason
    if not m.has("output") or (m.has("rescale") and not (m.has("rescale_round") or m.has("rescale_clip"))):
        return f"its epilogue is not {describe(INTEGER_STAGES)}"
    get = {s.stage: s.got for s in m.steps}
    requant = get.get("requant", {})
    shift = requant.get("shift", 0) or get.get("round", {}).get("shift", 0)
    residual, rescale, clip = None, None, _clip_of(m.get("clip"))
    if "residual" in get:
        residual = get["residual"]["residual"]
    if "rescale" in get:
        add = get["rescale_add"]
        residual = add["residual"]
        frac = get.get("rescale_round", {}).get("frac", 0)
        y = get["rescale"]
        rescale = Rescale(clip, y["multiplier"], y["shift"], add["multiplier"], add["shift"], frac)
        clip = _clip_of(m.get("rescale_clip"))
    ep = Epilogue(
        bias=get.get("bias", {}).get("bias"),
        multiplier=requant.get("multiplier", 1),
        shift=shift,
        residual=None if residual is None else types[residual].dtype,
        rescale=rescale,
        clip=clip,
        table=get.get("table", {}).get("table"),
        row_mask=get.get("mask", {}).get("row_mask"),
    )
    nodes = (anchor.output, *(n.output for n in m.nodes()))
    return LayerEpilogue(ep, nodes, m.end, residual)


def epilogue_nodes(
    anchor: Node,
    x: str,
    w: str,
    ep: Epilogue,
    base: str,
    param: Callable[[str, np.ndarray], str],
    residual: str | None = None,
    quant: tuple[float, int] | None = None,
    before_add: tuple[Node, ...] = (),
) -> list[Node]:
    """The integer form of ``ep`` after ``anchor(x, w)`` (its conv2d/dense/conv_transpose attributes kept but
    groups where it is 1, and a conv2d's dilation, which is 1), ending in the
    int8 cast that writes ``base`` (with quantization ``quant``). ``residual`` is the int8 skip of a rescaled
    residual, else the value added as it is, computed by ``before_add`` where given (they stand right
    before the add); ``param(name, array)`` adds a parameter and returns its name. :func:`match_integer`
    reads the nodes back to ``ep``."""
    shape = (1, -1) if anchor.op == DENSE else (1, -1, 1, 1)
    dropped = ("groups",) if anchor.op == CONV_TRANSPOSE else ("groups", "dilation")  # dilation 1
    attrs = {k: v for k, v in anchor.attrs.items() if k not in dropped or (k == "groups" and int(v) != 1)}
    nodes = [Node(anchor.op, (x, w), f"{base}:acc", attrs)]
    if ep.bias is not None:
        b = param(f"{base}:bias", np.asarray(ep.bias).astype(np.int32).reshape(shape))
        nodes.append(Node("add", (nodes[-1].output, b), f"{base}:biased"))
    mult = param(f"{base}:mult", np.asarray(ep.multiplier).astype(np.int32).reshape(shape))
    nodes.append(Node("mul", (nodes[-1].output, mult), f"{base}:shifted", {"shift": int(ep.shift)}))
    r = ep.rescale
    if r is not None:
        nodes += [
            Node("clip", (nodes[-1].output,), f"{base}:y", {"lo": r.y_clip[0], "hi": r.y_clip[1]}),
            Node("mul", (f"{base}:y",), f"{base}:y_scaled", {"b": r.y_multiplier, "shift": r.y_shift}),
            Node("mul", (residual,), f"{base}:skip", {"b": r.skip_multiplier, "shift": r.skip_shift}),
            Node("add", (f"{base}:y_scaled", f"{base}:skip"), f"{base}:sum"),
            Node("rshift", (f"{base}:sum",), f"{base}:rounded", {"shift": r.frac}),
        ]
    elif residual is not None:
        shifted = nodes[-1].output
        nodes += [*before_add, Node("add", (shifted, residual), f"{base}:sum")]
    lo, hi = ep.clip
    nodes.append(Node("clip", (nodes[-1].output,), f"{base}:clipped", {"lo": lo, "hi": hi}))
    cast = {"dtype": "int8"} if quant is None else {"dtype": "int8", "quant": quant}
    last = base if ep.row_mask is None else f"{base}:unmasked"
    if ep.table is None:
        nodes.append(Node("cast", (nodes[-1].output,), last, cast))
    else:
        nodes.append(Node("cast", (nodes[-1].output,), f"{base}:int8", {"dtype": "int8"}))
        entries = param(f"{base}:table", np.asarray(ep.table, np.int8).reshape(-1))
        table = {"quant": None if quant is None else cast["quant"]}
        nodes.append(Node("table", (f"{base}:int8", entries), last, table))
    if ep.row_mask is not None:
        nodes.append(mask_node(last, base, ep.row_mask, param))
    return nodes
