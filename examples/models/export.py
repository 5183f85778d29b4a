"""Export the model suite (examples/models/architectures.py) to ONNX with torch's default exporter, seeded.

    python examples/models/export.py [--out examples/models] [--only NAME ...]

For each model ``onnx/NAME.onnx`` (float32, the weights in the file, under 5 MB). The inputs vdla calibrates
and tests with are seeded numpy data (``vdla.zoo.suite``), not files. ResNet-50 and the detector are exported
with a dynamic batch dimension (a ``batch`` symbol, as deployments often are); vdla fixes it with
``--input-shape``. Needs the ``models`` extra (torch, onnxscript): ``pip install 'vdla[models]'``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import onnx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from architectures import SUITE, settle  # noqa: E402

HERE = Path(__file__).resolve().parent
DYNAMIC_BATCH = ("resnet50", "yolo")
INPUT_NAMES = {"bert_tiny": ["ids", "mask"]}
OUTPUT_NAMES = {"yolo": ["boxes", "scores"]}
MAX_BYTES = 5 << 20


def export(name: str, out: Path) -> dict:
    build, make_inputs, description = SUITE[name]
    torch.manual_seed(0)
    model = settle(build(), make_inputs(100))
    example = make_inputs(1)
    names = INPUT_NAMES.get(name, ["x"])
    outputs = OUTPUT_NAMES.get(name, ["y"])
    dynamic = None
    if name in DYNAMIC_BATCH:
        batch = torch.export.Dim("batch", min=1, max=64)
        dynamic = {"x": {0: batch}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model, example, input_names=names, output_names=outputs, dynamo=True, dynamic_shapes=dynamic
        )
    proto = program.model_proto
    proto.doc_string = f"vdla model suite: {description}; seeded random weights (examples/models/export.py)"
    path = out / "onnx" / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(path))
    onnx.checker.check_model(str(path), full_check=True)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{name}: {size:,} bytes, over the {MAX_BYTES:,} the suite keeps to: reduce its width")
    params = sum(p.numel() for p in model.parameters())
    return {"model": name, "bytes": size, "params": params, "opset": proto.opset_import[0].version}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--only", nargs="*", choices=sorted(SUITE))
    args = ap.parse_args()
    for name in args.only or SUITE:
        r = export(name, args.out)
        print(f"{r['model']:20s} {r['params']:>10,} parameters  {r['bytes']:>10,} bytes  opset {r['opset']}")


if __name__ == "__main__":
    main()
