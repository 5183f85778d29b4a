"""int8 accuracy and agreement: vdla's own quantization and onnxruntime's, against the reference.

For each model (the trained digits CNN of examples/digits with its held-out labels; the small ResNet and
ResNet-18 of vdla.zoo.models with seeded weights, unlabelled) and each quantization (onnxruntime's
static QDQ, per-channel, run by vdla; and vdla's own calibration with each threshold method), vdla compiles
the model and runs it on the simulator. One record per (model, method):

    {"model", "method", "float_top1", "int8_top1", "top1_agreement_vs_ort", "max_step_diff", "logits_equal",
     "logits_within_1_step", "step_histogram", "cosine_vs_float", "ort_optimized", "backend", ...}

The reference is onnxruntime with graph optimizations off (vdla.frontend.reference): the QDQ model as ONNX
defines it, DequantizeLinear -> float op -> QuantizeLinear. ``float_top1``/``int8_top1`` are accuracies
against labels (null for unlabelled models); ``top1_agreement_vs_ort`` compares vdla's top-1 with the
reference running the QDQ model (method "ort-qdq") or the float model (vdla's methods); ``max_step_diff``,
``logits_equal``, ``logits_within_1_step`` and ``step_histogram`` count logit differences from the reference
in output quantization steps (ort-qdq only). ``ort_optimized`` holds the same figures against onnxruntime
with its default optimizations, whose fused int8 kernels are what a deployment with onnxruntime runs and
differ from machine to machine (on x86 without VNNI they saturate): the CPU and its int8 extensions are
printed and recorded beside them (``machine``). Never a test's reference.

    python benchmarks/quantization.py [--json out/quantization.json] [--resnet18 16] [--small 64]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnx
from rich.console import Console
from rich.progress import track

from vdla.frontend.reference import cpu_int8_isa, onnxruntime_version, reference_session
from vdla.model import Module
from vdla.model.pipeline import compile_model
from vdla.zoo.models import calibration_images, cosine_rows, qdq_output_scale, quantize_qdq, small_resnet

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("minmax", "percentile", "entropy")


def ort_logits(model, images: np.ndarray, optimized: bool = False) -> np.ndarray:
    session = reference_session(model, optimized=optimized)
    return np.concatenate([session.run(["logits"], {"image": x[None]})[0] for x in images])


def agreement(got: np.ndarray, want: np.ndarray, scale: float) -> dict:
    """vdla's logits against another's: top-1 agreement and the differences in output quantization steps."""
    steps = np.abs(np.rint(got / scale) - np.rint(want / scale)).astype(int).ravel()
    return {
        "top1_agreement": float(np.mean(got.argmax(axis=1) == want.argmax(axis=1))),
        "max_step_diff": int(steps.max()),
        "logits_equal": float(np.mean(steps == 0)),
        "logits_within_1_step": float(np.mean(steps <= 1)),
        "step_histogram": np.bincount(steps).tolist(),
    }


def vdla_logits(artifact, images: np.ndarray, label: str) -> np.ndarray:
    module, rows = Module(artifact, "sim"), []
    for x in track(images, description=label, console=Console(stderr=True), transient=True):
        rows.append(module.run(x[None])["logits"])
    return np.concatenate(rows)


def top1(logits: np.ndarray, labels: np.ndarray | None) -> float | None:
    return None if labels is None else float(np.mean(logits.argmax(axis=1) == labels))


def model_records(name: str, model, calib: np.ndarray, images: np.ndarray, labels: np.ndarray | None) -> list[dict]:
    """ort-qdq and vdla's methods on one model."""
    float_logits = ort_logits(model, images)
    base = {"model": name, "inputs": len(images), "backend": "sim", "float_top1": top1(float_logits, labels)}
    qdq = quantize_qdq(model, calib)
    scale = qdq_output_scale(qdq)
    want = ort_logits(qdq, images)
    t0 = time.perf_counter()
    got = vdla_logits(compile_model(qdq)[0], images, f"{name} ort-qdq")
    vs_ref = agreement(got, want, scale)
    records = [
        base
        | {
            "method": "ort-qdq",
            "int8_top1": top1(got, labels),
            "top1_agreement_vs_ort": vs_ref.pop("top1_agreement"),
            **vs_ref,
            "cosine_vs_float": float(cosine_rows(got, float_logits).mean()),
            "ort_optimized": agreement(got, ort_logits(qdq, images, optimized=True), scale),
            "seconds": round(time.perf_counter() - t0, 1),
        }
    ]
    for method in METHODS:
        t0 = time.perf_counter()
        art, _ = compile_model(model, calib=calib, calibration=method)
        got = vdla_logits(art, images, f"{name} {method}")
        cos = cosine_rows(got, float_logits)
        records.append(
            base
            | {
                "method": method,
                "int8_top1": top1(got, labels),
                "top1_agreement_vs_ort": float(np.mean(got.argmax(axis=1) == float_logits.argmax(axis=1))),
                "max_step_diff": None,
                "cosine_vs_float": float(cos.mean()),
                "cosine_vs_float_min": float(cos.min()),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--small", type=int, default=64, help="small ResNet inputs (0 skips)")
    ap.add_argument("--resnet18", type=int, default=16, help="ResNet-18 inputs (0 skips)")
    args = ap.parse_args()
    data = np.load(ROOT / "examples" / "digits" / "digits_data.npz")
    digits = onnx.load(ROOT / "examples" / "digits" / "digits.onnx")
    records = model_records("digits", digits, data["x_calib"], data["x_test"], data["y_test"])
    if args.small:
        small = small_resnet(seed=0)
        calib, images = calibration_images((3, 32, 32), 32, seed=1), calibration_images((3, 32, 32), args.small, seed=7)
        records += model_records("small_resnet", small, calib, images, None)
    if args.resnet18:
        from vdla.zoo.models import resnet18

        calib = calibration_images((3, 224, 224), 8, seed=1)
        images = calibration_images((3, 224, 224), args.resnet18, seed=7)
        records += model_records("resnet18", resnet18(seed=0), calib, images, None)
    machine = {**cpu_int8_isa(), "onnxruntime": onnxruntime_version()}
    print(f"machine: {machine['cpu']} ({machine['machine']}), int8: {', '.join(machine['int8_isa']) or 'none'}")
    print(f"reference: onnxruntime {machine['onnxruntime']}, graph optimizations off")
    for r in records:
        print(json.dumps(r))
    for r in records:
        if r["method"] == "ort-qdq":
            o = r["ort_optimized"]
            print(
                f"{r['model']}: vs reference {r['logits_equal']:.2%} equal, max {r['max_step_diff']} steps, top-1 "
                f"{r['top1_agreement_vs_ort']:.1%}; vs optimized onnxruntime on this CPU {o['logits_equal']:.2%} "
                f"equal, max {o['max_step_diff']}, top-1 {o['top1_agreement']:.1%}"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine, "records": records}, indent=2) + "\n")


if __name__ == "__main__":
    main()
