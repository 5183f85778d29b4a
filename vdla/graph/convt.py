"""Transposed convolutions as stride-phase convolutions: the exact rewrite that lets the accelerator run an
int8 ``conv_transpose``.

A transposed convolution with stride ``s`` writes output row ``oy`` from the input rows ``iy`` and kernel
rows ``ky`` with ``iy*s + ky*d - top = oy``. The output rows of one *phase* ``p`` (``oy = p + j*s``) take
only the kernel rows with ``(p + top - ky*d) mod s == 0``, each from input row ``j + e(ky)``,
``e(ky) = (p + top - ky*d) / s``: an ordinary stride-1 convolution over the input with the sub-kernel of
those rows, flipped (``e`` falls as ``ky`` grows; a dilation leaves zero taps between them), padded by
``-min(e)`` rows on top. Per axis, and so over ``s_h * s_w`` phases in 2-D:

    conv_transpose(x, w) -> epilogue       becomes, for every phase (py, px),
    conv2d(x, w_phase[O, C, L_y, L_x], padding) -> the same epilogue   (one layer each)

and the phases' int8 outputs interleave into the result (the ``interleave`` operator and, where the output
is not a multiple of the stride, a slice). On the accelerator the interleave is no step of its own: each
phase's stores write its strided slots of the result (:class:`vdla.compiler.spec.OutputView`, placed by
:mod:`vdla.model.lower`). Every phase computes ``ceil(OH / s_h)`` x ``ceil(OW / s_w)`` outputs (a short
phase's extra row or column is sliced off). The int32 accumulators
are the same products summed in another order modulo 2^32, and the epilogue (bias, requantization, clamp)
acts on each accumulator alone, so the rewrite is bit-exact.

A conv_transpose is rewritten when it is int8 with an int8 weight parameter, groups 1, its integer
epilogue (:func:`vdla.graph.epilogue.match_integer`) ends in int8 without a residual, every phase has a
tap, and every phase's padding is non-negative (no phase needs input rows cropped). Anything else is left
as it is and runs on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdla.graph.epilogue import match_integer
from vdla.graph.graph import Graph, Node
from vdla.graph.opnames import CONV_TRANSPOSE
from vdla.graph.ops import infer_types, transposed_window
from vdla.graph.passes import fresh_name


@dataclass(frozen=True)
class AxisPhase:
    """One phase along one axis: the kernel index of each sub-kernel tap (None: a zero tap) and the stride-1
    convolution's padding before and after the input."""

    taps: tuple[int | None, ...]
    before: int
    after: int


def axis_phase(p: int, n_in: int, n_out: int, k: int, s: int, d: int, pad: int) -> AxisPhase | None:
    """Phase ``p`` of an axis of ``n_in`` inputs whose phases each compute ``n_out`` outputs (kernel ``k``,
    stride ``s``, dilation ``d``, leading pad ``pad``), or None where it has no tap or would crop its input."""
    e = {ky: (p + pad - ky * d) // s for ky in range(k) if (p + pad - ky * d) % s == 0}
    if not e:
        return None
    lo, hi = min(e.values()), max(e.values())
    length = hi - lo + 1
    taps = [None] * length
    for ky, v in e.items():
        taps[v - lo] = ky
    before = -lo
    after = n_out + length - 1 - n_in - before
    return AxisPhase(tuple(taps), before, after) if before >= 0 and after >= 0 else None


def _phase_weight(w: np.ndarray, rows: AxisPhase, cols: AxisPhase) -> np.ndarray:
    """The OIHW conv2d weight of one phase from the (C, O, KH, KW) transposed weight."""
    out = np.zeros((w.shape[1], w.shape[0], len(rows.taps), len(cols.taps)), w.dtype)
    for i, ky in enumerate(rows.taps):
        for j, kx in enumerate(cols.taps):
            if ky is not None and kx is not None:
                out[:, :, i, j] = w[:, :, ky, kx].T
    return out


class _Rewriter:
    def __init__(self, graph: Graph):
        self.g = graph
        self.types = infer_types(graph)
        self.taken = set(self.types)
        self.params = dict(graph.params)
        self.producers = graph.producers()

    def fresh(self, name: str) -> str:
        return fresh_name(name, self.taken)

    def phases(self, node: Node) -> list[list[tuple[AxisPhase, ...]]] | None:
        """The phases (rows x columns) of an int8 conv_transpose, or None where it is not rewritten."""
        x, w = node.inputs[0], node.inputs[1]
        if self.types[x].dtype != "int8" or w not in self.params or self.params[w].dtype != np.int8:
            return None
        if int(node.attrs.get("groups", 1)) != 1 or len(node.inputs) > 2:
            return None
        a, (h, wd), kernel = node.attrs, self.types[x].shape[2:], self.params[w].shape[2:]
        win, (oh, ow) = transposed_window(
            (h, wd), kernel, a.get("stride", 1), a.get("dilation", 1), a.get("padding", 0), a.get("output_padding", 0)
        )
        top, _, left, _ = win.pads
        per_axis = []
        for n_in, n_out, k, s, d, pad in zip((h, wd), (oh, ow), kernel, win.stride, win.dilation, (top, left)):
            axis = [axis_phase(p, n_in, -(-n_out // s), k, s, d, pad) for p in range(s)]
            if None in axis:
                return None
            per_axis.append(axis)
        return [[(r, c) for c in per_axis[1]] for r in per_axis[0]]

    def rewrite(self, node: Node) -> tuple[str, list[Node], set[str]] | None:
        """(the value the rewrite writes, its nodes, the node outputs it replaces) for one conv_transpose."""
        phases = self.phases(node)
        found = match_integer(node, self.g, self.types) if phases is not None else None
        if phases is None or isinstance(found, str) or found.residual is not None:
            return None
        chain = [self.producers[v] for v in found.nodes[1:]]
        x, w = node.inputs[0], self.params[node.inputs[1]]
        nodes: list[Node] = []
        rows_out = []
        for py, row in enumerate(phases):
            cols_out = []
            for px, (rp, cp) in enumerate(row):
                tag = f"{found.output}:phase{py}{px}"
                wname = self.fresh(f"{tag}:w")
                self.params[wname] = _phase_weight(w, rp, cp)
                pads = (rp.before, rp.after, cp.before, cp.after)
                value = self.fresh(f"{tag}:acc")
                copy = {k: node.attrs[k] for k in ("copy",) if k in node.attrs}  # what a 0/1 conv moves
                nodes.append(Node("conv2d", (x, wname), value, {"padding": pads, **copy}))
                for c in chain:  # the epilogue, node by node, on this phase's accumulators
                    out = self.fresh(f"{tag}:{c.op}")
                    nodes.append(Node(c.op, tuple(value if i == c.inputs[0] else i for i in c.inputs), out, c.attrs))
                    value = out
                cols_out.append(value)
            rows_out.append(cols_out)
        nodes += self.interleave(rows_out, found.output)
        return found.output, nodes, set(found.nodes)

    def interleave(self, phases: list[list[str]], out: str) -> list[Node]:
        """The ``interleave`` of ``phases[py][px]`` (N, O, J, I) into ``out``: row ``j*s_h + py``, column
        ``i*s_w + px``, sliced to ``out``'s size where that is not a multiple of the stride."""
        sh, sw = len(phases), len(phases[0])
        flat = tuple(v for row in phases for v in row)
        n, o, oh, ow = self.types[out].shape
        j, i = -(-oh // sh), -(-ow // sw)
        if (j * sh, i * sw) == (oh, ow):
            return [Node("interleave", flat, out, {"stride": (sh, sw)})]
        full = self.fresh(f"{out}:interleaved")
        return [
            Node("interleave", flat, full, {"stride": (sh, sw)}),
            Node("slice", (full,), out, {"starts": (0,) * 4, "stops": (n, o, oh, ow), "steps": (1,) * 4}),
        ]


def phase_convs(graph: Graph) -> Graph:
    """Rewrite every int8 conv_transpose with an integer epilogue into stride-phase conv2d layers and an
    interleave (see the module docstring); the result keeps the epilogue's output name. Weights no other
    node reads are dropped."""
    rw = _Rewriter(graph)
    done: dict[str, list[Node]] = {}
    gone: set[str] = set()
    weights: set[str] = set()
    for node in graph.nodes:
        if node.op == CONV_TRANSPOSE:
            found = rw.rewrite(node)
            if found is not None:
                done[found[0]] = found[1]
                gone |= found[2]
                weights.add(node.inputs[1])
    if not done:
        return graph
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.output in done:
            nodes += done[node.output]
        elif node.output not in gone:
            nodes.append(node)
    read = {i for n in nodes for i in n.inputs}
    params = {k: v for k, v in rw.params.items() if k in read or k not in weights}
    types = {k: t for k, t in graph.param_types.items() if k in params}
    return graph.copy(nodes=nodes, params=params, param_types=types)
