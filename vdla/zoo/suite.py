"""The model suite: real architectures exported from torch (``examples/models/``, seeded random weights, each
ONNX file under 5 MB), with seeded inputs to calibrate and test them.

Each :class:`SuiteModel` names its ONNX file, its inputs (shape as vdla compiles it, how to make data for
it) and what it is. The files are made by ``examples/models/export.py`` (the ``models`` extra: torch); reading
them needs the ``onnx`` extra only. MobileNet-V2 (1.0, 224) comes from :func:`vdla.zoo.models.mobilenet_v2`
(seeded weights, built in memory: too large to commit) and joins the suite's records under ``mobilenet_v2``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vdla.errors import VdlaError

REPO = Path(__file__).resolve().parents[2]
SUITE_DIR = REPO / "examples" / "models" / "onnx"


class SuiteError(VdlaError, ValueError):
    """A suite model that does not exist, or whose file is missing (named, with the command that makes it)."""


def suite_images(count: int, size: int, seed: int) -> np.ndarray:
    """Seeded images (count, 3, size, size), float32: a low-frequency field (a Gaussian at 1/8 of the size,
    upsampled bilinearly) plus Gaussian noise of 0.3, like normalized photos. The suite's batch-norm
    statistics were set on this distribution (``examples/models/export.py``): a random-weight network is far
    more sensitive to the input's amplitude than a trained one, so the suite calibrates and tests on it."""
    rng = np.random.default_rng(seed)
    low = rng.normal(0, 1, (count, 3, max(size // 8, 1), max(size // 8, 1)))
    return (_bilinear(_bilinear(low, size, 2), size, 3) + rng.normal(0, 0.3, (count, 3, size, size))).astype(np.float32)


def _bilinear(a: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``a`` resized to ``size`` along ``axis`` by linear interpolation (half-pixel centres, edges clamped)."""
    n = a.shape[axis]
    pos = np.clip((np.arange(size) + 0.5) * n / size - 0.5, 0, n - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    w = (pos - lo).reshape([-1 if d == axis else 1 for d in range(a.ndim)])
    return np.take(a, lo, axis=axis) * (1 - w) + np.take(a, hi, axis=axis) * w


def token_inputs(count: int, length: int, vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded token ids (int64, 1..vocab-1) and an attention mask (1 keep, 0 pad; each sequence at least half
    kept), both (count, length); padded positions hold token 0."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (count, length))
    lengths = rng.integers(length // 2, length + 1, count)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int64)
    return ids * mask, mask


@dataclass(frozen=True)
class SuiteModel:
    """One model of the suite: ``inputs`` maps each input name to its shape (batch 1, as vdla compiles it);
    ``make(count, seed)`` makes ``count`` seeded samples of every input, samples on the first axis."""

    name: str
    description: str
    inputs: dict[str, tuple[int, ...]]
    make: Callable[[int, int], dict[str, np.ndarray]]  # samples stacked along the batch axis
    file: str | None = None  # under SUITE_DIR; None: built in memory (:meth:`load`)
    build: Callable[[], Any] | None = None
    calibration: str = "percentile"  # vdla's calibration method for this model (CompileOptions.calibration)

    @property
    def path(self) -> Path | None:
        return None if self.file is None else SUITE_DIR / self.file

    def load(self):
        """The model as an ``onnx.ModelProto``."""
        if self.build is not None:
            return self.build()
        import onnx

        if not self.path.is_file():
            raise SuiteError(f"{self.path} is missing: python examples/models/export.py --only {self.name}")
        return onnx.load(str(self.path))

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """What ``--input-shape`` / ``input_shapes`` fixes (every input: some files have a dynamic batch)."""
        return dict(self.inputs)

    def samples(self, count: int, seed: int) -> dict[str, np.ndarray]:
        """``count`` seeded samples of each input stacked along the batch axis (``x[i:i+1]`` is one model input;
        calibration takes the stack as it is)."""
        return self.make(count, seed)

    def feeds(self, count: int, seed: int) -> list[dict[str, np.ndarray]]:
        """``count`` seeded model inputs (batch 1 each)."""
        stacked = self.samples(count, seed)
        return [{k: v[i : i + 1] for k, v in stacked.items()} for i in range(count)]


def _images(size: int, name: str = "x") -> Callable[[int, int], dict[str, np.ndarray]]:
    return lambda count, seed: {name: suite_images(count, size, seed)}


def _tokens(count: int, seed: int) -> dict[str, np.ndarray]:
    ids, mask = token_inputs(count, 32, 4096, seed)
    return {"ids": ids, "mask": mask}


def _mobilenet_v2():
    from vdla.zoo.models import mobilenet_v2

    return mobilenet_v2(width=1.0, image=224, classes=1000, seed=0)


def _yolov8n():
    from vdla.zoo.models import yolov8

    return yolov8(width=0.25, depth=0.33, image=320, classes=80, seed=0)


def _image_model(name: str, size: int, description: str) -> SuiteModel:
    return SuiteModel(name, description, {"x": (1, 3, size, size)}, _images(size), f"{name}.onnx")


def _built_model(name: str, size: int, description: str, build: Callable, **options) -> SuiteModel:
    """A model built in memory (too large to commit): input ``image`` (1, 3, size, size)."""
    return SuiteModel(name, description, {"image": (1, 3, size, size)}, _images(size, "image"), build=build, **options)


SUITE: dict[str, SuiteModel] = {
    m.name: m
    for m in (
        _image_model("resnet50", 224, "ResNet-50 layout, base width 12 (of 64), 224x224, dynamic batch"),
        _image_model("mobilenet_v3_small", 224, "MobileNet-V3-Small (hardswish, squeeze-excite), width 0.75"),
        _image_model("efficientnet_b0", 224, "EfficientNet-B0 (SiLU, squeeze-excite), width 0.5"),
        _image_model("shufflenet_v2", 224, "ShuffleNet-V2 x0.5 (channel split and shuffle)"),
        _image_model("squeezenet", 224, "SqueezeNet 1.1 (fire modules: concat)"),
        _image_model("unet", 64, "U-Net, base 16, 3 levels (ConvTranspose, concat skips), 64x64"),
        _image_model("yolo", 320, "YOLOv8-style detector, width 0.125, 320x320, decode head, dynamic batch"),
        _image_model("vit_tiny", 64, "ViT-Tiny (dim 192, 3 heads), depth 2 of 12, 64x64, 8x8 patches"),
        SuiteModel(
            "bert_tiny",
            "BERT-tiny encoder (2 layers, 128, attention mask), vocabulary 4096, 32 tokens",
            {"ids": (1, 32), "mask": (1, 32)},
            _tokens,
            "bert_tiny.onnx",
        ),
        _built_model("mobilenet_v2", 224, "MobileNet-V2 (1.0, 224), seeded weights (vdla.zoo.models)", _mobilenet_v2),
        _built_model(
            "yolov8n",
            320,
            "YOLOv8n-width 3-scale SiLU detector (0.25, 0.33, 80 classes), 320x320, seeded weights (vdla.zoo.models)",
            _yolov8n,
            calibration="minmax",  # its random class logits: the 99.99th percentile clips the ones that decide
        ),
    )
}


def suite_model(name: str) -> SuiteModel:
    """The suite model ``name`` (refused naming the ones there are)."""
    if name not in SUITE:
        raise SuiteError(f"no suite model {name!r}; the suite: {', '.join(SUITE)}")
    return SUITE[name]
