"""Measure the committed digits model on its held-out split: float accuracy (onnxruntime), the model
quantized by onnxruntime (static QDQ, per-channel) run by onnxruntime and by vdla, and the float model
quantized by vdla itself (``compile_model(model, calib=..., calibration=METHOD)``) where that is available;
top-1 agreement with onnxruntime's QDQ and with the float model, the differences from onnxruntime's QDQ in
output quantization steps, the cosine similarity of the logits with the float model's. The figures of
docs/digits.md come from this script.

    python examples/digits/evaluate.py [--backend sim rtl] [--methods minmax percentile entropy] [--json out.json]

Needs the onnx extra and onnxruntime (dev), not torch or scikit-learn.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnx

from vdla.compiler import CompileError
from vdla.frontend.reference import reference_session
from vdla.model import Module
from vdla.model.artifact import Artifact
from vdla.model.pipeline import compile_model
from vdla.zoo.models import cosine_rows, qdq_output_scale, quantize_qdq

HERE = Path(__file__).resolve().parent


def ort_logits(model: onnx.ModelProto, images: np.ndarray) -> np.ndarray:
    """The reference's logits for every image (batch 1): onnxruntime running the model as written."""
    session = reference_session(model)
    return np.concatenate([session.run(["logits"], {"image": x[None]})[0] for x in images])


def vdla_logits(artifact: Artifact, backend: str, images: np.ndarray) -> tuple[np.ndarray, int]:
    """vdla's logits for every image on ``backend`` and the accelerator cycles of one inference."""
    module = Module(artifact, backend)
    logits = np.concatenate([module.run(x[None])["logits"] for x in images])
    return logits, int(module.last_report.accel_cycles)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The mean over images of the cosine similarity of two rows of logits."""
    return float(np.mean(cosine_rows(a, b)))


def main() -> None:
    """Print one record per (quantizer, backend) and optionally write them as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", nargs="+", default=["sim", "rtl"], choices=["sim", "rtl"])
    ap.add_argument("--methods", nargs="*", default=["minmax", "percentile", "entropy"], help="vdla calibration")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with np.load(HERE / "digits_data.npz") as npz:
        x, y, calib = npz["x_test"], npz["y_test"], npz["x_calib"]
    model = onnx.load(str(HERE / "digits.onnx"))
    float_logits = ort_logits(model, x)
    float_top1 = float((float_logits.argmax(1) == y).mean())
    print(f"float model (onnxruntime): top-1 {float_top1:.4f} on {len(x)} test images")
    qdq = quantize_qdq(model, calib, input_name="image")
    ref = ort_logits(qdq, x)
    scale = qdq_output_scale(qdq)
    print(f"QDQ model (onnxruntime):   top-1 {(ref.argmax(1) == y).mean():.4f}")
    records = []
    artifacts = {"onnxruntime QDQ": compile_model(qdq)[0]}
    for method in args.methods:
        try:
            artifacts[f"vdla {method}"] = compile_model(model, calib={"image": calib}, calibration=method)[0]
        except (CompileError, TypeError) as e:  # TypeError: a vdla without the calibration argument
            print(f"vdla's own quantization ({method}): not run ({e})")
    for quantizer, artifact in artifacts.items():
        first = None
        for backend in args.backend:
            t0 = time.perf_counter()
            got, cycles = vdla_logits(artifact, backend, x)
            seconds = time.perf_counter() - t0
            rec = {
                "model": "digits",
                "quantizer": quantizer,
                "backend": backend,
                "float_top1": float_top1,
                "int8_top1": float((got.argmax(1) == y).mean()),
                "top1_agreement_vs_ort_qdq": float((got.argmax(1) == ref.argmax(1)).mean()),
                "top1_agreement_vs_float": float((got.argmax(1) == float_logits.argmax(1)).mean()),
                "cosine_vs_float": cosine(got, float_logits),
                "accel_cycles_per_image": cycles,
                "wall_seconds": round(seconds, 2),
            }
            if first is None:
                first = (backend, got)
            else:
                rec[f"logits_identical_to_{first[0]}"] = bool(np.array_equal(got, first[1]))
            if quantizer == "onnxruntime QDQ":
                steps = np.abs(np.rint(got / scale) - np.rint(ref / scale)).astype(np.int64).ravel()
                rec["step_histogram"] = np.bincount(steps).tolist()
                rec["within_one_step"] = float((steps <= 1).mean())
            records.append(rec)
            print(json.dumps(rec))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
