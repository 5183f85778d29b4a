"""Per-channel equalization (``vdla compile --equalize``, vdla/graph/equalize.py): the int8 model's cosine against
onnxruntime's float model with and without it, and how many layers ``--auto-float`` then keeps in float.

Models (the suite's, ``vdla.zoo.suite``, and trained-like variants of them built here, each an ONNX model that
onnxruntime runs as the reference):

* ``mobilenet_v2``, ``efficientnet_b0``: the suite's seeded models as they are;
* ``mobilenet_v2/trained``: the suite's MobileNet-V2 with its batch norms settled on the suite's images (each
  convolution's output channels at unit standard deviation, a residual branch's at 0.25, as training leaves them:
  :func:`settle`), then each depthwise layer's output channels given gains spread over two decades (batch-norm
  scale and offset times ``10^U(-1, 1)``, the ranges a folded batch norm leaves) that the 1x1 convolution reading
  them undoes in its input weights (:func:`spread_depthwise`: Nagel et al. 2019, fig. 2);
* ``mobilenet_v2/trained-relu``: the same with ReLU for ReLU6 (the setting of Nagel et al.'s MobileNet-V2 results:
  ReLU6's clip is not homogeneous and ends an equalization group);
* ``vit_tiny/outliers``: the suite's ViT-Tiny with outlier channels in its layer norms (4 of 192 channels' scale
  and offset times 30: the activation outliers of trained transformers, SmoothQuant's case).

Calibration: the suite's ``samples(28, 1)``, the first 12 calibrate and the other 16 are held out; the cosine is
that of all outputs of the held-out samples as one vector, the compiled artifact on ``sim`` against onnxruntime's
float model (graph optimizations off). ``--auto-float`` takes the first 16 samples and splits them itself (12
calibrate, 4 held out).

    python benchmarks/equalization.py [--models mobilenet_v2,...] [--auto-float mobilenet_v2=0.997,...]
        [--json out/equalization.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from vdla.frontend.onnx import import_onnx
from vdla.frontend.reference import onnxruntime_version, reference_session
from vdla.graph.interp import evaluate_node
from vdla.graph.ops import infer_types
from vdla.graph.passes import simplify
from vdla.graph.qerror import ErrorSums
from vdla.model import Module
from vdla.model.pipeline import compile_model
from vdla.zoo.suite import suite_model

CALIB, HELD = 12, 16
AUTO_HELD = 4  # --auto-float holds out the last quarter of 16 samples
MODELS = ("mobilenet_v2", "mobilenet_v2/trained", "mobilenet_v2/trained-relu", "efficientnet_b0", "vit_tiny/outliers")


def _inits(model: onnx.ModelProto) -> dict:
    return {t.name: t for t in model.graph.initializer}


def _scale_init(model: onnx.ModelProto, name: str, factor: np.ndarray, axis: int = 0) -> None:
    t = _inits(model)[name]
    a = numpy_helper.to_array(t).astype(np.float64)
    shape = [1] * a.ndim
    shape[axis] = -1
    t.CopyFrom(numpy_helper.from_array((a * factor.reshape(shape)).astype(np.float32), name))


def relu_for_relu6(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every Clip(0, 6) a ReLU."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type == "Clip":
            n.op_type = "Relu"
            del n.input[1:]
    return m


def settle(model: onnx.ModelProto, images: np.ndarray, residual: float = 0.25) -> onnx.ModelProto:
    """``model`` with each batch norm's scale and offset rescaled so that its output channels have standard
    deviation 1 on ``images`` (``residual`` for a batch norm whose output a residual add reads; a channel's factor
    at most 10 times the layer's median), layer by layer: the statistics training leaves. Measured on vdla's graph,
    where each batch norm is folded into its convolution under the batch norm's name."""
    graph = simplify(import_onnx(model))
    types, readers = infer_types(graph), graph.consumers()
    bns = {n.output[0]: n for n in model.graph.node if n.op_type == "BatchNormalization"}
    envs = [{**graph.params, "image": x[None]} for x in images]
    factors = {}
    for node in graph.nodes:
        outs = [evaluate_node(node, [env[i] for i in node.inputs], [types[i] for i in node.inputs], types[node.output])
                for env in envs]  # fmt: skip
        if node.output in bns:
            std = np.concatenate([o.transpose(1, 0, 2, 3).reshape(o.shape[1], -1) for o in outs], axis=1).std(axis=1)
            added = any(r.op == "add" for r in readers.get(node.output, []))
            # a channel nearly constant on these images is not rescaled past a tenth of the layer's median
            factors[node.output] = (residual if added else 1.0) / np.maximum(std, 0.1 * np.median(std))
            outs = [o * factors[node.output].reshape(1, -1, 1, 1).astype(np.float32) for o in outs]
        for env, o in zip(envs, outs, strict=True):
            env[node.output] = o
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for out, f in factors.items():
        for k in (1, 2):  # scale, offset
            _scale_init(m, bns[out].input[k], f)
    return m


def spread_depthwise(model: onnx.ModelProto, seed: int, decades: float = 2.0) -> onnx.ModelProto:
    """``model`` with each depthwise convolution's batch-norm scale and offset times gains ``10^U(-d/2, d/2)`` per
    channel, divided out of the input weights of the convolution that reads its activation."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rng = np.random.default_rng(seed)
    producer = {o: n for n in m.graph.node for o in n.output}
    readers: dict[str, list] = {}
    for n in m.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    for bn in [n for n in m.graph.node if n.op_type == "BatchNormalization"]:
        conv = producer[bn.input[0]]
        if next((a.i for a in conv.attribute if a.name == "group"), 1) == 1:
            continue
        gains = 10 ** rng.uniform(-decades / 2, decades / 2, numpy_helper.to_array(_inits(m)[bn.input[1]]).shape)
        for k in (1, 2):
            _scale_init(m, bn.input[k], gains)
        (act,) = readers[bn.output[0]]
        for reader in readers[act.output[0]]:
            _scale_init(m, reader.input[1], 1.0 / gains, axis=1)
    return m


def layer_norm_outliers(model: onnx.ModelProto, seed: int, channels: int = 4, factor: float = 30.0):
    """``model`` with ``channels`` channels of each layer norm's scale and offset times ``factor``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rng = np.random.default_rng(seed)
    done = set()
    for n in m.graph.node:
        if n.op_type == "LayerNormalization":
            for name in n.input[1:3]:
                if name and name not in done:
                    size = numpy_helper.to_array(_inits(m)[name]).size
                    f = np.ones(size)
                    f[rng.choice(size, channels, replace=False)] = factor
                    _scale_init(m, name, f)
                    done.add(name)
    return m


def build(name: str) -> tuple[onnx.ModelProto, object]:
    """The ONNX model of a benchmark model name and its suite model (inputs, calibration method)."""
    base, _, variant = name.partition("/")
    m = suite_model(base)
    model = m.load()
    if variant.startswith("trained"):
        if variant == "trained-relu":
            model = relu_for_relu6(model)
        images = next(iter(m.samples(8, 5).values()))
        model = spread_depthwise(settle(model, images), seed=2)
    elif variant == "outliers":
        model = layer_norm_outliers(model, seed=2)
    return model, m


def reference(model: onnx.ModelProto, feeds: list[dict]) -> list[list[np.ndarray]]:
    session = reference_session(model)
    return [session.run(None, f) for f in feeds]


def sim_cosine(artifact, feeds: list[dict], refs: list[list[np.ndarray]]) -> float:
    module, sums = Module(artifact, "sim"), ErrorSums()
    for f, ref in zip(feeds, refs, strict=True):
        got = module.run(f)
        got = got if isinstance(got, dict) else {next(iter(artifact.outputs)): got}
        for name, want in zip(artifact.outputs, ref, strict=True):
            sums.add(want, got[name])
    return sums.cosine


def records(name: str, target: float | None) -> list[dict]:
    model, m = build(name)
    samples = m.samples(CALIB + HELD, 1)
    calib = {k: v[:CALIB] for k, v in samples.items()}
    feeds = [{k: v[i : i + 1] for k, v in samples.items()} for i in range(CALIB, CALIB + HELD)]
    refs = reference(model, feeds)
    out = []
    for equalize in (False, True):
        opts = {"input_shapes": m.input_shapes(), "calibration": m.calibration, "equalize": equalize}
        t0 = time.perf_counter()
        artifact, report = compile_model(model, calib, **opts)
        rec = {"model": name, "equalize": equalize, "cosine": sim_cosine(artifact, feeds, refs)}
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        eq = report.quantization.equalization
        if eq is not None:
            rec["groups"], rec["skipped"] = len(eq.groups), len(eq.skipped)
            rec["channels"] = sum(g.scales.size for g in eq.groups)
            rec["narrow"] = sum(r.startswith("narrow") for r in eq.skipped.values())
            if eq.groups:
                worst = max(eq.groups, key=lambda g: g.spread_before)
                rec["widest_spread"] = [worst.spread_before, worst.spread_after]
        if target is not None:
            t0 = time.perf_counter()
            first = {k: v[: CALIB + AUTO_HELD] for k, v in samples.items()}
            _, rep = compile_model(model, first, auto_float=target, **opts)
            a = rep.auto_float
            rec["auto_float"] = {
                "target": target, "kept": len(a.kept), "layers": len(a.ranking), "float_mac_share": a.float_share,
                "cosine_before": a.cosine_before, "cosine_after": a.cosine_after, "artifact_cosine": a.artifact_cosine,
                "evaluations": len(a.evaluations), "seconds": round(time.perf_counter() - t0, 1),
            }  # fmt: skip
        print(json.dumps(rec), flush=True)
        out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--auto-float", default="", help="NAME=TARGET,...: also run --auto-float at TARGET on NAME")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    targets = {k: float(v) for k, v in (item.split("=") for item in args.auto_float.split(",") if item)}
    recs = [r for name in args.models.split(",") for r in records(name, targets.get(name))]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"onnxruntime": onnxruntime_version(), "backend": "sim", "records": recs}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
