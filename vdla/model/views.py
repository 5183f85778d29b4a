"""Where accelerator layers store and read in place: channel concats and interleaves stored through output
views, the phases of a nearest upsampling computed once, block parts, selections (channel blocks, token rows)
and upsampled inputs read in place
(:class:`StoredViews`, a part of :class:`vdla.model.lower.ModelBuilder`), and the DRAM tensor a value lives in.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vdla.compiler import CompileError
from vdla.compiler.spec import InputUpsample, OutputView
from vdla.config import HwConfig
from vdla.graph.copies import COPY, block_view, channel_span
from vdla.graph.graph import Node
from vdla.graph.layout import blocked_shape, pack_activation
from vdla.graph.opnames import CONCAT, CONV2D, INTERLEAVE, MAX_POOL2D, SLICE, TAKE
from vdla.graph.ops import interleave_type
from vdla.graph.passes import selected_axes
from vdla.graph.types import TensorType
from vdla.model.match import AccelLayer, PoolLayer


def packed(t: TensorType, cfg: HwConfig, block: int) -> tuple[tuple[int, ...], tuple[int, int, int, int]]:
    """(packed shape, NCHW shape) of an activation tensor of graph type ``t`` in the blocked layout."""
    nchw = t.shape if len(t.shape) == 4 else (*t.shape, 1, 1)
    return blocked_shape(nchw, cfg.batch, block), nchw


class StoredViews:
    """The model builder's output views (a mixin of :class:`~vdla.model.lower.ModelBuilder`, whose state it
    uses and fills: ``views``, ``upsamples``, ``up_candidates``, ``up_reads``)."""

    def stored_interleaves(self, units: list) -> list:
        """The units without the ``interleave`` nodes whose phases the accelerator stores in place: each phase
        layer writes its strided slots of the interleaved tensor (``self.views``: phase output ->
        (interleaved value, :class:`~vdla.compiler.spec.OutputView`)), so no CPU step unpacks, interleaves and
        packs again. An interleave is stored so when every phase is a conv2d layer's output (no residual, no
        fused pool) that nothing else reads."""
        layers = {u.out: u for kind, u in units if kind == "accel"}
        consumers = self.g.consumers()
        self.views: dict[str, tuple[str, OutputView]] = {}
        self.dropped: set[str] = set()  # layers another stores for (store_phases) or made needless (store_parts)
        self.aliases: set[str] = set()  # values stored as channel blocks of a concatenation others read there
        self.readers = {n: u for kind, u in units if kind == "accel" for n in u.nodes}  # node output -> its unit
        cpu_nodes = [n for kind, unit in units if kind == "cpu" for n in unit]
        self.sliced: dict[str, tuple[str, int]] = {}  # selection -> (value, byte offset), filled next
        self.sliced = {n.output: v for n in cpu_nodes if (v := self.view(n, layers, consumers))}
        out = []
        for kind, unit in units:
            if kind == "cpu":
                unit = [
                    n
                    for n in unit
                    if n.output not in self.sliced
                    and not (n.op == INTERLEAVE and self.store_phases(n, layers, consumers))
                    and not (n.op == CONCAT and self.store_parts(n, layers, consumers))
                    and not (n.op == CONCAT and self.store_rows(n, layers, consumers))
                ]
                if not unit:
                    continue
            out.append((kind, unit))
        return [(kind, unit) for kind, unit in out if kind != "accel" or unit.out not in self.dropped]

    def view(self, node: Node, layers: dict[str, AccelLayer], consumers) -> tuple[str, int] | None:
        """``(value, byte offset)`` where the selection ``node`` is read in place (:func:`view_offset`: whole channel
        blocks of one image, or whole contiguous rows of a token-major (tokens, features) value) of an accelerator
        layer's output (or of such a view) at its quantization, read by accelerator layers alone as their input or
        residual, no graph output. None otherwise (a CPU step selects)."""
        if node.op not in (SLICE, TAKE) or node.output in self.g.outputs or self.cfg.block_in != self.cfg.block_out:
            return None
        x = node.inputs[0]
        offset = view_offset(node, self.types[x], self.types[node.output], self.cfg)
        if offset is None or x not in layers:
            return None
        return (x, offset) if self.operand_only(node.output, consumers) else None

    def operand_only(self, value: str, consumers) -> bool:
        """Whether every reader of ``value`` is an accelerator layer reading it as its input or residual (or a slice
        of it read in place, :meth:`view`): they may then read it wherever it is stored (:meth:`stored_at`)."""
        for reader in consumers.get(value, []):
            if reader.output in self.sliced:
                continue
            unit = self.readers.get(reader.output)
            if unit is None or value not in (unit.x, getattr(unit, "residual", None)):
                return False
        return True

    def store_rows(self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]]) -> bool:
        """Whether the concatenation ``node`` of constant token rows (a class token's, a distillation token's) and
        one accelerator layer's output along the tokens can be stored in place (:meth:`rows_part`); if so the
        layer stores its rows into the concatenation's tensor (``self.rows``: its value -> (the concatenation, the
        byte offset of its first token)), whose constant rows the image holds (``self.image_tensors``)."""
        v = self.rows_part(node, layers, consumers)
        if v is None:
            return False
        t, cfg = self.types[node.output], self.cfg
        token = token_bytes(t, cfg)
        rows = []
        for u in node.inputs:
            if u == v:
                self.rows[v] = (node.output, sum(len(r) for r in rows) * token)
            rows.append(np.zeros(self.types[u].shape, np.int8) if u == v else self.g.params[u].astype(np.int8))
        content = pack_activation(np.concatenate(rows).reshape(*t.shape, 1, 1), cfg.batch, cfg.block_out)
        self.image_tensors[self.dram_tensor(node.output, cfg.block_out)] = content
        return True

    def rows_part(self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]]) -> str | None:
        """The one computed part of the concatenation ``node`` where it may store its rows in place: ``node`` joins
        int8 (tokens, features) constants and that part along the tokens, at one quantization, on a batch-1
        config, no graph output; the part is an accelerator layer's output (no view, no parts, no graph output)
        read elsewhere only by accelerator layers as their input or residual. None otherwise."""
        t = self.types[node.output]
        computed = [v for v in node.inputs if v not in self.g.params]
        if len(t.shape) != 2 or t.dtype != "int8" or int(node.attrs.get("axis", 0)) % 2 or self.cfg.batch != 1:
            return None
        if len(computed) != 1 or len(node.inputs) < 2 or node.output in self.g.outputs:
            return None
        (v,) = computed
        layer = layers.get(v)
        if layer is None or getattr(layer, "parts", ()) or v in self.views or v in self.rows or v in self.g.outputs:
            return None
        if any(self.types[u].quant != t.quant for u in node.inputs):
            return None
        for reader in consumers.get(v, []):
            unit = self.readers.get(reader.output)
            if reader is not node and (unit is None or v not in (unit.x, getattr(unit, "residual", None))):
                return None
        return v

    def store_phases(self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]]) -> bool:
        """Whether the phases of the interleave ``node`` can store in place; if so their views are recorded."""
        if not self.stored_alone(node, layers, consumers):
            return False
        (sh, sw), out = interleave_type([self.types[v] for v in node.inputs], node.attrs["stride"])
        full = out.shape[2:]
        phases = [layers[v] for v in node.inputs]
        if all(same_layer(phases[0], p) for p in phases[1:]):  # a nearest upsampling: computed once, stored in all
            offsets = tuple(divmod(p, sw) for p in range(len(phases)))
            self.views[phases[0].out] = (node.output, OutputView(full, offsets[0], (sh, sw), copies=offsets[1:]))
            self.dropped.update(p.out for p in phases[1:])
            reader = self.up_reader(node, phases[0], layers, consumers)
            if reader is not None:  # maybe read in place: store_parts decides
                self.up_candidates[node.output] = (phases[0], reader)
                return True
            source = self.copy_source(phases[0], layers)
            anchors = {p.nodes[0] for p in phases}
            only = source is not None and all(c.output in anchors for c in consumers.get(source, []))
            if source is None or not self.copy_pays(layers[source], phases[0], only):
                return True
            self.dropped.add(phases[0].out)
            self.upsamples[source] = (phases[0].out, not only)
            if only:  # read by the copy alone: it stores the phases as its output (else besides it, copy_view)
                self.views[source] = self.views.pop(phases[0].out)
            return True
        for p, v in enumerate(node.inputs):
            self.views[v] = (node.output, OutputView(full, divmod(p, sw), (sh, sw)))
        return True

    def copy_source(self, phase: AccelLayer, layers: dict[str, AccelLayer]) -> str | None:
        """The value whose layer can store the upsampling phase ``phase`` itself, besides its own output: the
        input of ``phase`` where ``phase`` is an exact copy (:meth:`exact_upsample`) and that input is a plain conv2d
        layer's output (no fused pool,
        residual, gate or fused layer before it), no graph output, storing no other copy. None otherwise: the
        phase stays a layer of its own."""
        source = layers.get(phase.x)
        if (
            not self.exact_upsample(phase)
            or source is None
            or not _stores_through_view(source, joins=False)
            or source.fused_before is not None
            or source.gate is not None
            or source.gap is not None
            or source.parts
            or phase.x in self.g.outputs
            or phase.x in self.upsamples
        ):
            return None
        return phase.x

    def exact_upsample(self, phase: AccelLayer) -> bool:
        """Whether the upsampling phase layer ``phase`` copies its input exactly: a 1x1 identity convolution of
        :mod:`vdla.graph.copies` between values of one quantization."""
        copy = self.g.producers()[phase.nodes[0]].attrs.get(COPY) == "upsample"
        return copy and phase.weights.shape[2:] == (1, 1) and self.types[phase.out].quant == self.types[phase.x].quant

    def copy_pays(self, source: AccelLayer, phase: AccelLayer, only: bool) -> bool:
        """Whether ``source`` storing the upsampling ``phase`` copies (as its output where ``only``, else besides it)
        compiles and runs in fewer cycles than the two layers apart (timing-only simulator): it then stores four
        times the pixels, and its compute stage doubles them, but the copy's loads, GEMMs and step are gone."""
        view = self.views[phase.out][1]
        try:
            both = self.compiled_with(source, view if only else None, None if only else view)
        except CompileError:
            return False
        apart = self.compiled_with(source, None).search.cycles + self.compiled_with(phase, view).search.cycles
        return both.search.cycles < apart

    def copy_phase(self, value: str) -> str | None:
        """The upsampling phase the layer computing ``value`` stores besides its own output (:meth:`copy_source`),
        if any; its view (``self.views``) is where :meth:`store_parts` put the phases, a concatenation's slice."""
        phase, also = self.upsamples.get(value, (None, False))
        return phase if also else None

    def copy_of(self, value: str) -> tuple[str, OutputView] | None:
        """(the tensor's value, the view) of the upsampling the layer computing ``value`` also stores, if any."""
        phase = self.copy_phase(value)
        return self.views[phase] if phase is not None else None

    def upsampling(self, value: str) -> OutputView | None:
        """The view through which the layer computing ``value`` stores a nearest upsampling of it in place of the
        copy layer (:meth:`copy_source`): besides its output, or as its output where the copy was its only reader."""
        if value not in self.upsamples:
            return None
        phase, also = self.upsamples[value]
        return self.views[phase if also else value][1]

    def stored_alone(
        self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]], joins: bool = False
    ) -> bool:
        """Whether each input of ``node`` (distinct) is the output of a layer that may store through a view
        (:func:`_stores_through_view`) that only ``node`` reads and no other view holds: a layer that may store
        into ``node``'s tensor. An interleave whose phases store in place counts too for a concatenation
        (``joins``: its phases then store into the concatenation)."""
        parts = [layers.get(v) for v in node.inputs]
        interleaved = {t for t, _ in self.views.values()} if joins else set()
        return len(set(node.inputs)) == len(node.inputs) and all(
            (v in interleaved or _stores_through_view(p, joins))
            and consumers.get(v, []) == [node]
            and v not in self.g.outputs
            and v not in self.views
            for v, p in zip(node.inputs, parts, strict=True)
        )

    def store_parts(self, node: Node, layers: dict[str, AccelLayer], consumers: dict[str, list[Node]]) -> bool:
        """Whether the parts of the channel concatenation ``node`` can store in place; if so their views are
        recorded (part ``k`` writes channel blocks from the sum of the earlier parts' blocks). A concatenation
        is stored so when it joins int8 values of its own quantization along the channels, each a conv2d
        layer's output (a residual allowed, no fused pool) or a stored interleave that nothing else reads, each
        starting a channel block (all but the last of whole blocks: the last one's padding lanes are the
        concatenation's)."""
        t, bo = self.types[node.output], self.cfg.block_out
        if len(t.shape) != 4 or t.dtype != "int8" or int(node.attrs.get("axis", 0)) % 4 != 1:
            return False
        types = [self.types[v] for v in node.inputs]
        alone = self.stored_alone(node, layers, consumers, joins=True)
        if not alone or any(u.quant != t.quant for u in types) or any(u.shape[1] % bo for u in types[:-1]):
            return False
        first = 0
        for v, u in zip(node.inputs, types, strict=True):
            blocks = (first, -(-t.shape[1] // bo))  # the last part may end inside a block
            phases = [p for p, (target, _) in self.views.items() if target == v]
            for p in phases:  # an interleave's phases (or a concatenation's parts) store into their slice
                old = self.views[p][1]
                self.views[p] = (node.output, replace(old, blocks=(first + old.blocks[0], blocks[1])))
            source = self.copied(v, node, layers, consumers)
            if source is not None:  # the copy's source stores into the slice; its other readers read it there
                self.views[source] = (node.output, OutputView(t.shape[2:], blocks=blocks))
                self.aliases.add(source)
                self.dropped.add(v)
            elif not phases:
                self.views[v] = (node.output, OutputView(t.shape[2:], blocks=blocks))
            first += u.shape[1] // bo
        for v in node.inputs:
            if v in self.up_candidates:
                self.read_in_place(v)
        return True

    def copied(self, part: str, node: Node, layers: dict[str, AccelLayer], consumers) -> str | None:
        """The value the concatenation part ``part`` copies (:mod:`vdla.graph.copies` gives a part a copy where
        another node also reads it), where it can instead store into the concatenation itself: a layer's output
        that may store through a view, at the concatenation's quantization, batch 1 (a channel-block slice is
        then contiguous), no graph output, whose every other reader is an accelerator layer reading it as its
        input or residual (it reads the slice). None otherwise."""
        copy = layers.get(part)
        if (
            copy is None
            or self.g.producers()[copy.nodes[0]].attrs.get(COPY) != "concat"
            or self.types[part].shape[0] != 1
        ):
            return None
        v = copy.x
        if (
            not _stores_through_view(layers.get(v), joins=True)
            or v in self.g.outputs
            or v in self.views
            or self.types[v].quant != self.types[node.output].quant
            or self.types[v].shape != self.types[part].shape
        ):
            return None
        return v if self.operand_only(v, consumers) else None  # the copy reads v as its input too

    def up_reader(self, node: Node, phase: AccelLayer, layers: dict[str, AccelLayer], consumers) -> str | None:
        """The 1x1 layer that can read the nearest upsampling ``node`` (an interleave of ``phase`` copies) from the
        tensor it upsamples (:class:`~vdla.compiler.spec.InputUpsample`): ``node`` is read by a channel
        concatenation alone, at a channel block's start, which a plain 1x1 convolution of stride 1 without padding
        reads alone; ``phase`` an exact copy of an accelerator layer's output. None otherwise."""
        cat = consumers.get(node.output, [])
        if len(cat) != 1 or cat[0].op != CONCAT or node.output in self.g.outputs or cat[0].output in self.g.outputs:
            return None
        readers = consumers.get(cat[0].output, [])
        layer = self.readers.get(readers[0].output) if len(readers) == 1 else None
        if not isinstance(layer, AccelLayer) or layer.x != cat[0].output or not layer.plain or layer.gate:
            return None
        try:
            sp = layer.spec()
        except CompileError:
            return None
        if (sp.kh, sp.kw, sp.sh, sp.sw) != (1, 1, 1, 1) or any(sp.pad):
            return None
        at = sum(self.types[v].shape[1] for v in cat[0].inputs[: cat[0].inputs.index(node.output)])
        if at % self.cfg.block_in or not self.exact_upsample(phase) or phase.x not in layers:
            return None
        return layer.out

    def read_in_place(self, value: str) -> None:
        """The upsampling ``value`` (:meth:`up_reader`), now stored into a concatenation's slice, read in place by
        the 1x1 layer reading that concatenation instead: its copy layer dropped, nothing stored into the slice."""
        phase, reader = self.up_candidates.pop(value)
        _, view = self.views.pop(phase.out)
        self.dropped.add(phase.out)
        blocks = -(-self.types[value].shape[1] // self.cfg.block_in)
        self.up_reads[reader] = (phase.x, InputUpsample(view.blocks[0], blocks, view.step))

    def stored_at(self, value: str) -> tuple[str, int]:
        """The value whose DRAM tensor holds ``value`` (itself, or the concatenation it is stored into: the
        outermost, as :meth:`store_parts` keeps the views, or the one it stores its rows into after constant rows,
        :meth:`store_rows`; for a selection read in place, where its value is) and the byte offset where ``value``
        starts in it."""
        if value in self.rows:
            return self.rows[value]
        if value in self.sliced:
            source, first = self.sliced[value]
            target, offset = self.stored_at(source)
            return target, offset + first
        if value not in self.aliases:
            return value, 0
        target, view = self.views[value]
        return target, view.blocks[0] * block_bytes(self.types[value], self.cfg)

    def view_of(self, value: str) -> OutputView | None:
        """The view through which the layer computing ``value`` stores it (:meth:`stored_interleaves`), if any."""
        return self.views[value][1] if value in self.views else None

    def read_tensor(self, value: str, block: int) -> str:
        """The DRAM tensor a layer reads ``value`` from (:meth:`stored_at`)."""
        return self.dram_tensor(self.stored_at(value)[0], block)


def block_bytes(t: TensorType, cfg: HwConfig) -> int:
    """The bytes of one channel block of an image of ``t`` in the packed layout (``block_out`` lanes)."""
    shape = packed(t, cfg, cfg.block_out)[0]
    return int(np.prod(shape)) // shape[1]


def token_bytes(t: TensorType, cfg: HwConfig) -> int:
    """The bytes of one token (row) of a token-major (tokens, features) value ``t`` packed: its channel blocks."""
    return int(np.prod(packed(t, cfg, cfg.block_out)[0][1:]))


def view_offset(node: Node, x: TensorType, out: TensorType, cfg: HwConfig) -> int | None:
    """The byte offset in ``x``'s packed tensor at which the selection ``node`` of ``x`` (output type ``out``) lies
    contiguous, so that a reader may read it in place: a ``slice`` of whole channel blocks of one NCHW image
    (:func:`vdla.graph.copies.block_view`), or a ``take``/``slice`` of consecutive rows of an int8 (tokens,
    features) value, every feature, on a batch-1 config (token-major: token ``t`` starts ``t`` times a token's
    channel blocks in). None for any other selection (scattered or reordered rows, a non-leading
    axis, a quantization the selection changes)."""
    if node.op == SLICE and (span := channel_span(node, x.shape)) is not None:
        return span[0] // cfg.block_out * block_bytes(out, cfg) if block_view(span, x.shape, cfg.block_out) else None
    rows = row_span(node, x.shape)
    if rows is None or len(x.shape) != 2 or x.dtype != "int8" or cfg.batch != 1 or out.quant != x.quant:
        return None
    return rows[0] * token_bytes(x, cfg)


def row_span(node: Node, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """``(first, count)`` where the ``take`` or ``slice`` ``node`` of a value of ``shape`` selects consecutive
    indices ``first .. first + count - 1`` of its first axis, in order, and every index of the others; else None."""
    if selected_axes(node, shape) != {0}:
        return None
    if node.op == TAKE:
        rows = tuple(node.attrs["index"][0])
        return (rows[0], len(rows)) if rows == tuple(range(rows[0], rows[0] + len(rows))) else None
    lo, hi, step = (int(node.attrs[k][0]) for k in ("starts", "stops", "steps"))
    return (lo, len(range(lo, min(hi, shape[0]), step))) if step == 1 else None


def same_layer(a: AccelLayer, b: AccelLayer) -> bool:
    """Whether two layers compute the same values: the same input, weights, window and epilogue, and neither
    reads a residual or a run-time weight (the phases of a nearest upsampling)."""
    if (a.x, a.geometry, a.op, a.groups, a.pool, a.fused_before) != (
        b.x,
        b.geometry,
        b.op,
        b.groups,
        b.pool,
        b.fused_before,
    ):
        return False
    if a.residual or b.residual or a.w or b.w or not np.array_equal(a.weights, b.weights):  # parts: of the weights
        return False
    ea, eb = a.epilogue, b.epilogue
    return all(np.array_equal(getattr(ea, f), getattr(eb, f)) for f in ("bias", "multiplier", "table")) and (
        ea.shift,
        ea.residual,
        ea.rescale,
        ea.clip,
    ) == (eb.shift, eb.residual, eb.rescale, eb.clip)


def _stores_through_view(layer: AccelLayer | PoolLayer | None, joins: bool) -> bool:
    """Whether ``layer`` may store its output through an :class:`~vdla.compiler.spec.OutputView`: a conv2d's
    (not on the depthwise mode, whose stores take no view) with no fused pool, adding a residual only into a
    concatenation (``joins``); or a max pool's, into a concatenation (its channel blocks only)."""
    if isinstance(layer, PoolLayer):
        return joins and layer.op == MAX_POOL2D
    return (
        layer is not None
        and layer.op == CONV2D
        and not layer.dw_mode
        and layer.pool is None
        and (joins or not layer.residual)
    )
