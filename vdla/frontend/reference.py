"""The independent reference for ONNX models: onnxruntime running the model as ONNX defines it.

Every comparison of vdla's results with onnxruntime (tests, benchmarks, examples) builds its session here.

By default graph optimizations are off (``ORT_DISABLE_ALL``): a QDQ model then runs as written,
DequantizeLinear, the float operator, QuantizeLinear, which is the ONNX semantics of the model and the same
on every machine up to float32 rounding. With optimizations on, onnxruntime fuses QDQ patterns into its own
int8 kernels (QLinearConv, MatMulIntegerToFloat, ...), whose results depend on the CPU: on x86 without VNNI
the u8s8 dot product (VPMADDUBSW) saturates its 16-bit intermediate sums. That path is what a user deploying
with onnxruntime runs, so benchmarks report it (``optimized=True``, with :func:`cpu_int8_isa` beside it);
nothing asserts on it.

Needs onnxruntime (the ``dev`` extra), imported on first use.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# x86 and Arm CPU flags (as /proc/cpuinfo spells them) that change onnxruntime's int8 kernels, fastest first
_INT8_FLAGS = {
    "amx_int8": "AMX-INT8",
    "avx512_vnni": "AVX-512 VNNI",
    "avx_vnni": "AVX-VNNI",
    "avx512bw": "AVX-512BW",
    "avx2": "AVX2",
    "i8mm": "Armv8.6 I8MM",
    "asimddp": "Armv8.2 dot product",
    "asimd": "NEON",
    "neon": "NEON",
}


def _ort():
    try:
        import onnxruntime
    except ImportError as e:  # pragma: no cover - the dev extra
        raise ImportError("the onnxruntime reference needs onnxruntime: pip install onnxruntime") from e
    return onnxruntime


def reference_session(model: Any, *, optimized: bool = False, threads: int = 1):
    """An ``onnxruntime.InferenceSession`` of ``model`` (an ``onnx.ModelProto``, serialized bytes or a path)
    on the CPU with ``threads`` intra-op threads; ``optimized`` False (the reference) runs the graph as
    written, True with onnxruntime's default optimizations (CPU-dependent int8 kernels)."""
    ort = _ort()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if isinstance(model, (str, Path)):
        source = str(model)
    elif isinstance(model, bytes):
        source = model
    else:
        source = model.SerializeToString()
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def reference_run(
    model: Any, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None, *, optimized: bool = False
) -> dict[str, np.ndarray]:
    """One run of ``model`` on ``feeds``: every output (or those named) by name. Builds a session per call;
    keep a :func:`reference_session` for many runs."""
    session = reference_session(model, optimized=optimized)
    names = list(outputs) if outputs is not None else [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def _cpu_flags() -> tuple[str, set[str]]:
    """The CPU's model name and flags from /proc/cpuinfo (empty where there is none)."""
    name, flags = "", set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not name:
            name = value.strip()
        elif key in ("flags", "features"):
            flags |= set(value.split())
    return name or platform.machine(), flags


def cpu_int8_isa() -> dict[str, Any]:
    """The machine onnxruntime's optimized int8 kernels run on: ``{"cpu", "machine", "int8_isa"}``, the ISA
    extensions that select its int8 kernels listed fastest first (e.g. ``["AVX-512 VNNI", "AVX-512BW",
    "AVX2"]``). Without VNNI (or AMX, or the Arm dot product) its x86 u8s8 kernels can saturate."""
    name, flags = _cpu_flags()
    isa = list(dict.fromkeys(label for flag, label in _INT8_FLAGS.items() if flag in flags))
    return {"cpu": name, "machine": platform.machine(), "int8_isa": isa}


def onnxruntime_version() -> str:
    return str(_ort().__version__)


TIE = 1e-4  # in quantization steps: how close to a .5 rounding boundary float32 evaluation may land either side


@dataclass
class LayerAgreement:
    """One quantized value of a QDQ model (a QuantizeLinear output) compared with vdla's compiled graph,
    each of vdla's layers fed the reference's int8 inputs.

    ``ties`` counts the differing elements whose reference value before rounding (the QuantizeLinear's
    float input over its scale) lies within :data:`TIE` steps of a .5 boundary: the reference's float32
    arithmetic and vdla's integer requantization may round those either way. For a LayerNorm in integers
    (``layer_norm_int``), a difference of one step within the integer method's error of the boundary
    (:func:`vdla.graph.layernorm.rounding_band`) is such a tie: vdla computes it in fixed point, the reference
    in float.
    """

    value: str
    elements: int = 0
    differing: int = 0
    worst: int = 0
    ties: int = 0


def compare_layers(model: Any, graph: Any, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[LayerAgreement]:
    """Every int8 value of vdla's compiled ``graph`` (the QDQ model ``model`` imported and lowered) that a
    QuantizeLinear of ``model`` also writes, against the reference on each of ``feeds``; every node of the
    graph reads the reference's int8 values where the model has them, so each layer is judged on its own. A value
    computed on selected rows (``<value>:rows``, :func:`~vdla.graph.passes.select_rows_first`) is the model's
    value at those rows."""
    import onnx
    from onnx import numpy_helper

    from vdla.graph.interp import evaluate_node
    from vdla.graph.layernorm import rounding_band
    from vdla.graph.opnames import LAYER_NORM_INT
    from vdla.graph.ops import infer_types
    from vdla.graph.passes import FLAT, ROWS, row_selections

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    quant = {n.output[0]: n for n in model.graph.node if n.op_type == "QuantizeLinear"}
    producer = {o: n for n in model.graph.node for o in n.output}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    extra = {v for q, n in quant.items() for v in (q, n.input[0])} - existing
    probe.graph.output.extend(onnx.ValueInfoProto(name=v) for v in sorted(extra))
    session = reference_session(probe)
    names = [o.name for o in session.get_outputs()]
    types = infer_types(graph)
    graph_producers = graph.producers()
    found: dict[str, LayerAgreement] = {}

    def model_value(v: str) -> str | None:
        """The QDQ model's int8 value ``v`` is, or that ``sink_reshapes`` flattened into ``v`` (``<value>:flat``),
        or whose rows ``select_rows_first`` computes as ``v`` (``<value>[:flat]:rows``)."""
        base = v.removesuffix(ROWS).removesuffix(FLAT)
        return base if base in quant and (base == v or base not in types) else None

    selections = row_selections(graph)

    def rows(v: str, a: np.ndarray) -> np.ndarray:
        """The model's value ``a`` as ``v`` holds it: at the rows ``v`` computes, if a selection's."""
        if v not in selections:
            return a
        s = selections[v]
        x = types[s.inputs[0]]
        return evaluate_node(s, [a.reshape(x.shape)], [x], types[s.output])

    for feed in feeds:
        ref = dict(zip(names, session.run(names, dict(feed)), strict=True))
        env = {**graph.params, **feed}
        for node in graph.nodes:
            args = []
            for i in node.inputs:
                m = model_value(i)
                args.append(rows(i, ref[m]).reshape(types[i].shape) if m and ref[m].dtype == np.int8 else env[i])
            env[node.output] = evaluate_node(node, args, [types[i] for i in node.inputs], types[node.output])
            m = model_value(node.output)
            want = rows(node.output, ref[m]) if m and m in ref else None
            if want is None or want.dtype != np.int8 or env[node.output].dtype != np.int8:
                continue
            diff = np.abs(env[node.output].astype(np.int32) - want.reshape(env[node.output].shape))
            a = found.setdefault(m, LayerAgreement(m))
            a.elements += diff.size
            a.differing += int(np.count_nonzero(diff))
            a.worst = max(a.worst, int(diff.max()))
            if diff.any():
                ln = _through_views(node, graph_producers) == LAYER_NORM_INT
                tie = np.zeros(diff.shape, bool)
                for value, scale, qnode in _roundings(quant[m], producer, inits):
                    real = ref[value].astype(np.float64) / _channel_scale(scale, qnode, ref[value].ndim)
                    steps = rows(node.output, real).reshape(diff.shape)
                    band = rounding_band(steps) + TIE if ln else TIE
                    tie |= np.abs(steps - np.floor(steps) - 0.5) <= band
                a.ties += int(np.count_nonzero((diff == 1 if ln else diff > 0) & tie))
    return list(found.values())


def _through_views(node: Any, producers: Mapping[str, Any]) -> str:
    """The operator of ``node``, or where it reshapes a value (a LayerNorm's rows shaped back), of that value's
    producer."""
    from vdla.graph.opnames import RESHAPE

    while node.op == RESHAPE and node.inputs[0] in producers:
        node = producers[node.inputs[0]]
    return node.op


_SAME_PLACE = ("Relu", "Clip", "Identity", "Add")  # elementwise ops between roundings that keep each element's place


def _roundings(q: Any, producer: Mapping[str, Any], inits: Mapping[str, np.ndarray]) -> list[tuple[str, Any, Any]]:
    """The roundings that made a QuantizeLinear's output: (its float input, its scale, the node) for ``q``
    and for every QuantizeLinear reached back through DequantizeLinear and the elementwise ReLU, Clip and
    Add (a residual add's operands) that keep each element's place: QDQ models round a layer's output, then
    its activation's or its residual sum's, and vdla fuses those roundings into one epilogue."""
    out, todo, seen = [], [q], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type == "QuantizeLinear":
            if len(node.input) < 2 or node.input[1] not in inits:
                continue
            out.append((node.input[0], inits[node.input[1]], node))
            todo.append(producer.get(node.input[0]))
        elif node.op_type == "DequantizeLinear":
            todo.append(producer.get(node.input[0]))
        elif node.op_type in _SAME_PLACE:
            todo += [producer.get(i) for i in node.input[: 2 if node.op_type == "Add" else 1]]
    return out


def _channel_scale(scale: np.ndarray, node: Any, ndim: int) -> np.ndarray:
    """A QuantizeLinear's scale shaped to broadcast over its input (per-tensor, or per channel on its axis)."""
    s = np.asarray(scale, np.float64)
    if s.size == 1:
        return s.reshape(())
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % ndim
    return s.reshape([-1 if d == axis else 1 for d in range(ndim)])
