"""Agreement with an independent int8 implementation: vdla against onnxruntime on the same QDQ models.

The models are quantized by onnxruntime's static quantizer (QDQ, per-channel symmetric int8 weights,
symmetric int8 activations) on seeded calibration images; vdla imports the QDQ model, compiles it and runs
it on the simulator; onnxruntime runs the same QDQ model on the same seeded inputs. Reported per model:
top-1 agreement and the distribution of the logits' differences in output quantization steps.
Targets (issues 10 and 11): every element within one step, top-1 agreement >= 99% on ResNet-18.

    python benchmarks/qdq_agreement.py [--json out/qdq_agreement.json] [--resnet18 64] [--small 128]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from vdla.experiments.models import calibration_images, quantize_qdq, small_resnet
from vdla.model import Module
from vdla.model.build import compile_model


def logit_scale(model) -> float:
    from onnx import numpy_helper

    init = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] == "logits":
            return float(numpy_helper.to_array(init[node.input[1]]))
    raise SystemExit("no DequantizeLinear produces the logits")


def agreement(name: str, model, images: np.ndarray) -> dict:
    import onnxruntime as ort

    art, _ = compile_model(model, config="pynq")
    module = Module(art, "sim")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    scale, steps, agree = logit_scale(model), [], 0
    t0 = time.perf_counter()
    for i, x in enumerate(images):
        want = session.run(["logits"], {"image": x[None]})[0]
        got = module.run(x[None])["logits"]
        steps.append(np.abs(np.rint(got / scale) - np.rint(want / scale)).astype(int).ravel())
        agree += int(got.argmax() == want.argmax())
        print(f"\r{name}: {i + 1}/{len(images)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    d = np.concatenate(steps)
    return {
        "model": name,
        "inputs": len(images),
        "top1_agreement": agree / len(images),
        "logits_equal": float((d == 0).mean()),
        "logits_within_1_step": float((d <= 1).mean()),
        "max_steps": int(d.max()),
        "step_histogram": np.bincount(d).tolist(),
        "accel_layers": sum(s.kind == "accel" for s in art.steps),
        "cpu_steps": sum(s.kind == "cpu" for s in art.steps),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--resnet18", type=int, default=64, help="ResNet-18 inputs (0 skips)")
    ap.add_argument("--small", type=int, default=128, help="small ResNet inputs (0 skips)")
    ap.add_argument("--out", type=Path, default=Path("out"))
    args = ap.parse_args()
    rows = []
    if args.small:
        model = quantize_qdq(small_resnet(seed=0), calibration_images((3, 32, 32), 32, seed=1))
        rows.append(agreement("small_resnet", model, calibration_images((3, 32, 32), args.small, seed=7)))
    if args.resnet18:
        import onnx
        from model_compile import qdq_resnet18  # the same cached QDQ ResNet-18 (seeded, 8 calibration images)

        model = onnx.load(qdq_resnet18(8, args.out))
        rows.append(agreement("resnet18", model, calibration_images((3, 224, 224), args.resnet18, seed=7)))
    for r in rows:
        print(json.dumps(r))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
