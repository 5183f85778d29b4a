"""Which fusions pay: the cycles of a fused layer against the layers it replaces, and the step table's note on
a depthwise layer left apart from its 1x1 neighbour (:class:`FusionChoices`, a part of
:class:`vdla.model.lower.ModelBuilder`).
"""

from __future__ import annotations

from dataclasses import replace

from vdla.compiler import CompileError
from vdla.graph.opnames import CONV2D
from vdla.model.match import AccelLayer, PoolLayer, expand_refusal, pointwise_refusal


class FusionChoices:
    """The model builder's fusion decisions (a mixin of :class:`~vdla.model.lower.ModelBuilder`, whose state
    it uses: ``g``, ``cfg``, ``fusion_log`` and the compiles of :meth:`~vdla.model.lower.ModelBuilder.compiled`)."""

    def fusion_pays(self, layer: AccelLayer, apart: list[AccelLayer] | None = None) -> bool:
        """Whether the fused ``layer`` (a depthwise -> 1x1 pair, :mod:`vdla.compiler.dw_pointwise`, with its expand
        layer too, or a layer and the residual add after its table, :attr:`~vdla.compiler.spec.EpilogueSpec.post`)
        compiles and runs in fewer cycles than the layers it replaces, each as compiled on its own (timing-only
        simulator): ``apart``, or its two layers. Fused, the compute stage runs the layers' GEMMs and passes in
        turn while their outputs stay on chip: that pays where the layers apart wait for DRAM, not where GEMMs
        dominate. Each compile is kept (:meth:`~vdla.model.lower.ModelBuilder.compiled`): the steps take whichever
        form was chosen."""
        key = (layer.out, fusion_depth(layer))
        try:
            fused = self.compiled(layer)
        except CompileError as e:
            self.fusion_log[key] = str(e)
            return False
        apart = apart or [layer.fused_before, replace(layer, depthwise=None, source=None)]
        self.fusion_log[key] = (fused.search.cycles, sum(self.compiled(u).search.cycles for u in apart))
        return self.fusion_log[key][0] < self.fusion_log[key][1]

    def fusion_notes(self, units: list) -> list:
        """The units with a note on each depthwise layer left apart from the 1x1 layer reading it, and on each fused
        depthwise -> 1x1 layer left apart from the 1x1 layer computing its input: why (the step table's note)."""
        layers = [u for k, u in units if k == "accel" and isinstance(u, AccelLayer)]
        by_x, by_out = {u.x: u for u in layers}, {u.out: u for u in layers}
        out = []
        for kind, unit in units:
            why = self.why_apart(unit, by_x, by_out) if kind == "accel" and isinstance(unit, AccelLayer) else None
            out.append((kind, replace(unit, note="; ".join(filter(None, (unit.note, why)))) if why else unit))
        return out

    def why_apart(self, layer: AccelLayer, by_x: dict, by_out: dict) -> str | None:
        """Why ``layer`` (a depthwise layer alone, or a fused pair without its expand layer) runs apart from its
        neighbour, a 1x1 convolution reading its output (or computing its input): the tensor's other readers, the
        fusion's refusal, or its cycles fused and apart (None where there is no such neighbour)."""
        if layer.dw_mode and layer.expand is None:
            pw, depth, what = by_x.get(layer.out), 1, "not fused with the 1x1 layer after it"
            if pw is None or pw.op != CONV2D or pw.spec().kh != 1:  # no 1x1 layer reads it: nothing to explain
                return None
            why = pointwise_refusal(layer, pw, self.g, self.cfg)
        elif layer.depthwise is not None and layer.depthwise.expand is None:
            ex, pw, depth, what = by_out.get(layer.depthwise.x), layer, 2, "the 1x1 layer before it not fused"
            if ex is None or ex.op != CONV2D or ex.spec().kh != 1:
                return None
            why = expand_refusal(ex, layer, self.g, self.cfg)
        else:
            return None
        logged = self.fusion_log.get((pw.out, depth))
        if why is None and isinstance(logged, tuple):
            why = f"{logged[0]:,} cycles fused, {logged[1]:,} apart"
        return f"{what}: {why or logged}" if (why or logged) else None

    def gate_pays(self, layer: AccelLayer) -> bool:
        """Whether the 1x1 convolution ``layer`` with its channel scale fused before it (``layer.gate``) is faster
        than the two apart: fused, the scaled tensor never goes to DRAM and back, but each step copies its window
        once more on the compute stage (:meth:`pool_fusion_pays`)."""
        return self.pool_fusion_pays(layer, layer.gate, replace(layer, gate=None))

    def gap_pays(self, layer: AccelLayer) -> bool:
        """Whether the depthwise ``layer`` with the global average of its output fused into its tiles
        (``layer.gap``) is faster than the two apart: fused, the output is not read back from DRAM, but each tile
        sums it on the compute stage (:meth:`pool_fusion_pays`)."""
        return self.pool_fusion_pays(layer, layer.gap, replace(layer, gap=None))

    def pool_fusion_pays(self, fused: AccelLayer, pool: PoolLayer, alone: AccelLayer) -> bool:
        """Whether ``fused`` (``alone`` with the ALU layer ``pool`` fused into it) compiles and runs in fewer
        cycles than ``alone`` and ``pool`` apart, on the timing-only simulator. Each compile is kept."""
        try:
            cycles = self.compiled(fused).search.cycles
        except CompileError:
            return False
        apart = self.compiled_alu(pool).search.cycles + self.compiled(alone).search.cycles
        return cycles < apart


def fusion_depth(layer: AccelLayer) -> int:
    """How many layers are fused before ``layer`` (following its :attr:`~vdla.model.match.AccelLayer.fused_before`
    links)."""
    depth, before = 0, layer.fused_before
    while before is not None:
        depth, before = depth + 1, before.fused_before
    return depth
