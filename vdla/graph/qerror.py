"""Where a quantized model's error comes from: each int8 value against its float value, and each quantized
layer's own error and the error it adds to the model's output, measured on calibration data.

Two measures, both over the first :data:`ERROR_BATCHES` model batches of the calibration set, on the numpy
interpreter (:func:`vdla.graph.interp.evaluate`), comparing the QDQ graph of :func:`quantize_model` evaluated
in float (the fake-quantized model, which the lowered integer graph, the simulator and the accelerator match up
to rounding ties: ``docs/quantization.md``) with the float graph:

* per int8 value (``TensorQuant.sqnr_db``, ``cosine``): the value in the int8 model against the float model,
  every layer quantized, so it holds the error accumulated by every layer before it;
* per layer (``LayerQuant.sqnr_db``, ``output_sqnr_db``, ``output_cosine``): the model with *only that layer*
  quantized (its input, weights, bias, residual operand and output, as the int8 model quantizes them) and
  everything else float: the layer's output against its float output (its own error), and the model's outputs
  against the float model's (the error it adds to the model's output). The float values are computed once per
  batch and only the nodes downstream of the layer are evaluated again, so the cost is about that of the
  layers below each layer, summed.

Invariants: ``sqnr_db`` is ``10 log10(sum f^2 / sum (q - f)^2)`` over every element of the batches measured
(``inf`` where the values are equal); ``cosine`` is that of the values of all batches as one vector (1.0 for two
zero vectors). Neither changes the compiled model: the analysis runs only when asked (``--report``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate, evaluate_node
from vdla.graph.opnames import DEQUANTIZE, QUANTIZE
from vdla.graph.ops import infer_types
from vdla.graph.quantize import LayerQuant, QuantPlan, QuantReport, quantize_graph

ERROR_BATCHES = 8  # model batches of the calibration set the error analysis runs on


class ErrorSums:
    """Running sums of a float reference ``f`` and its quantized value ``q`` over batches: their SQNR and cosine
    (the one measure of :mod:`vdla.graph.qerror`, also the auto-float search's and its check on ``sim``)."""

    def __init__(self) -> None:
        self.ff = self.ee = self.fq = self.qq = 0.0

    def add(self, f: np.ndarray, q: np.ndarray) -> None:
        f, q = np.asarray(f, np.float64).ravel(), np.asarray(q, np.float64).ravel()
        self.ff += float(f @ f)
        self.qq += float(q @ q)
        self.fq += float(f @ q)
        self.ee += float((q - f) @ (q - f))

    @property
    def sqnr_db(self) -> float:
        if self.ee == 0.0:
            return math.inf
        return 10.0 * math.log10(self.ff / self.ee) if self.ff > 0 else -math.inf

    @property
    def cosine(self) -> float:
        if self.ee == 0.0:  # equal values: exactly 1 (the formula may round to 1 - 2^-52)
            return 1.0
        if self.ff == 0.0 or self.qq == 0.0:
            return 1.0 if self.ff == self.qq else 0.0
        return self.fq / math.sqrt(self.ff * self.qq)


def with_errors(
    report: QuantReport, graph: Graph, qgraph: Graph, data: Mapping[str, np.ndarray], batches: int = ERROR_BATCHES
) -> QuantReport:
    """``report`` (of :func:`vdla.graph.quantize.quantize_model` on the float ``graph``, giving ``qgraph``) with
    every tensor's and layer's error filled in, measured on the first ``batches`` model batches of ``data``
    (calibration arrays as :func:`vdla.graph.calibrate.check_calibration` returns them). A report whose float
    graph was equalized first (``report.equalization``) is measured against ``graph`` equalized alike."""
    if report.equalization is not None:
        graph = report.equalization.apply(graph)
    tensor_err = {t.name: ErrorSums() for t in report.tensors}
    layers = {layer.name: _LayerRun(graph, layer, report) for layer in report.layers}
    read = {t.name: _dequantized(qgraph, t.name) for t in report.tensors}
    for feeds in _batches(graph, data, batches):
        ref = evaluate(graph, feeds, keep=True)
        got = evaluate(qgraph, feeds, keep=True)
        for name, err in tensor_err.items():
            err.add(ref[name], got[read[name]])
        for run in layers.values():
            run.add(ref)
    tensors = tuple(
        replace(t, sqnr_db=tensor_err[t.name].sqnr_db, cosine=tensor_err[t.name].cosine) for t in report.tensors
    )
    return replace(report, tensors=tensors, layers=tuple(layers[layer.name].result() for layer in report.layers))


def _batches(graph: Graph, data: Mapping[str, np.ndarray], batches: int):
    batch = next(iter(graph.inputs.values())).shape[0]
    total = min(next(iter(data.values())).shape[0], batches * batch)
    for start in range(0, total, batch):
        yield {k: a[start : start + batch] for k, a in data.items()}


def _dequantized(qgraph: Graph, value: str) -> str:
    """The name of ``value``'s int8 form (dequantized) in ``qgraph``: the value itself, except for a graph
    input, which keeps its float name and is read through a quantize/dequantize pair."""
    if value not in qgraph.inputs:
        return value
    readers = qgraph.consumers()
    q = next(n for n in readers.get(value, []) if n.op == QUANTIZE)
    return next(n for n in readers[q.output] if n.op == DEQUANTIZE).output


class _LayerRun:
    """The float model with one layer quantized, evaluated downstream of that layer only."""

    def __init__(self, graph: Graph, layer: LayerQuant, report: QuantReport) -> None:
        self.layer, self.outputs = layer, list(graph.outputs)
        src = {t.name: t.scale_of for t in report.tensors}
        scales = {t.scale_of: t.scale for t in report.tensors}
        points = {v: src[v] for v in _layer_values(graph, layer) if v in src}
        plan = QuantPlan(anchors=(layer.name,), chains={layer.name: layer.output}, points=points)
        qgraph, _ = quantize_graph(graph, plan, scales, report.power_of_two)
        others = {other.output for other in report.layers} - {layer.output}
        self.graph = _float_reads(qgraph, [v for v in points if points[v] in others])
        self.types = infer_types(self.graph)
        self.own, self.model = ErrorSums(), ErrorSums()

    def add(self, ref: Mapping[str, np.ndarray]) -> None:
        got = _rerun(self.graph, self.types, ref)
        self.own.add(ref[self.layer.output], got[self.layer.output])
        for o in self.outputs:
            self.model.add(ref[o], got[o])

    def result(self) -> LayerQuant:
        own, model = self.own, self.model
        return replace(self.layer, sqnr_db=own.sqnr_db, output_sqnr_db=model.sqnr_db, output_cosine=model.cosine)


def _layer_values(graph: Graph, layer: LayerQuant) -> set[str]:
    """The values a layer quantizes: its input, its output (the end of its epilogue chain) and what the chain's
    nodes (those on a path from the anchor to the end) read, such as a residual skip."""
    order = {n.output: i for i, n in enumerate(graph.nodes)}
    producers = graph.producers()
    chain, todo = set(), [layer.output]
    while todo:
        v = todo.pop()
        node = producers.get(v)
        if node is None or v in chain or not order[layer.name] < order[v]:
            continue
        chain.add(v)
        todo += node.inputs
    read = {i for v in chain for i in producers[v].inputs}
    return {layer.input, layer.output} | read


def _float_reads(qgraph: Graph, values: list[str]) -> Graph:
    """``qgraph`` with the quantize/dequantize pair of each of ``values`` removed: the layer reads them in float.
    (A value another layer's output scale quantizes is that layer's error, not the reader's; its scale is in
    the plan only for the bias's accumulator scale.)"""
    producers, drop, rename = qgraph.producers(), set(), {}
    for v in values:
        deq = producers[v]
        q = producers[deq.inputs[0]]
        assert deq.op == DEQUANTIZE and q.op == QUANTIZE, (v, deq, q)
        drop |= {deq.output, q.output}
        rename[q.inputs[0]] = v  # the float value takes its name back
    nodes = [
        Node(n.op, n.inputs, rename.get(n.output, n.output), n.attrs) for n in qgraph.nodes if n.output not in drop
    ]
    return qgraph.copy(nodes=nodes)


def _rerun(graph: Graph, types: Mapping, ref: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The values of ``graph`` given the float model's values ``ref``: a node is evaluated only where its output
    is new (a quantize/dequantize node, a renamed float value) or one of its inputs was evaluated."""
    env = {**graph.params, **ref}
    changed: set[str] = set()
    for node in graph.nodes:
        if node.output in ref and changed.isdisjoint(node.inputs):
            continue
        env[node.output] = _eval(node, env, types)
        changed.add(node.output)
    return env


def _eval(node: Node, env: Mapping[str, np.ndarray], types: Mapping) -> np.ndarray:
    return evaluate_node(node, [env[i] for i in node.inputs], [types[i] for i in node.inputs], types[node.output])
