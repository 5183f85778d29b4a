"""Train the digits CNN and write ``digits.onnx`` and ``digits_data.npz`` next to this script.

The data is scikit-learn's handwritten digits (1,797 images of 8x8 pixels, values 0..16, 10 classes; it
ships inside scikit-learn, nothing is downloaded). A stratified, seeded 80/20 split; pixels scaled to
[0, 1] and standardized with the training split's mean and standard deviation (one scalar each).

The network (channel counts multiples of 16, the accelerator's GEMM block; the layout of
``vdla.zoo.models``: input ``image`` (1, 1, 8, 8), outputs ``logits`` and ``probs``):

    conv 3x3 1->16 + BN + ReLU, conv 3x3 16->32 + BN + ReLU,
    basic residual block at 32 channels (conv-BN-ReLU, conv-BN, add, ReLU),
    max pool 2x2 (8x8 -> 4x4), global average pool, dense 32->10, softmax.

Training uses torch on the CPU (Adam with cosine learning-rate decay, seeded, deterministic kernels),
not hand-written backpropagation. Run with the ``train`` extra installed (torch, scikit-learn, onnx):

    python examples/digits/train.py [--epochs 40] [--out-dir examples/digits]

The ``.npz`` holds the split actually used: ``x_test`` (N, 1, 8, 8) float32 standardized, ``y_test``
int64, ``x_calib`` (200 training images for calibration), and the normalization ``mean`` and ``std``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
import onnx
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

SEED = 0
CALIB = 200
HERE = Path(__file__).resolve().parent


class BasicBlock(nn.Module):
    """ResNet basic block without projection: conv-BN-ReLU, conv-BN, identity add, ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class DigitsNet(nn.Module):
    """The digits CNN; ``forward`` returns the logits."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
        )
        self.block = BasicBlock(32)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.block(self.stem(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class WithProbs(nn.Module):
    """Export wrapper: the logits and their softmax as two outputs."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(x)
        return logits, torch.softmax(logits, dim=1)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch; deterministic torch kernels on a fixed thread count."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def load_split(seed: int) -> dict[str, np.ndarray]:
    """The seeded, stratified 80/20 split, standardized with the training split's statistics, and a seeded
    calibration subset of the training images."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=seed)
    mean, std = float(x_train.mean()), float(x_train.std())
    x_train = ((x_train - mean) / std).astype(np.float32)
    x_test = ((x_test - mean) / std).astype(np.float32)
    calib = np.random.default_rng(seed).choice(len(x_train), CALIB, replace=False)
    return {
        "x_train": x_train,
        "y_train": y_train,
        "x_test": x_test,
        "y_test": y_test,
        "x_calib": x_train[np.sort(calib)],
        "mean": np.float32(mean),
        "std": np.float32(std),
    }


def train(net: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int, batch: int = 64, lr: float = 3e-3) -> None:
    """Adam with weight decay and cosine decay of the learning rate, seeded shuffles, cross-entropy."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    steps = epochs * ((len(x) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    gen = torch.Generator().manual_seed(SEED)
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        total = 0.0
        for i in range(0, len(x), batch):
            idx = order[i : i + batch]
            opt.zero_grad()
            loss = loss_fn(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        if (epoch + 1) % 10 == 0 or epoch == 0:
            print(f"epoch {epoch + 1:3d}  loss {total / len(x):.4f}")


def accuracy(net: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy of ``net`` (in eval mode) on ``x``."""
    net.eval()
    with torch.no_grad():
        return float((net(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def export(net: nn.Module, path: Path) -> None:
    """Write ``net`` to ONNX (opset 13, TorchScript exporter, BatchNorm folded by constant folding):
    input ``image`` (1, 1, 8, 8), outputs ``logits`` and ``probs``."""
    net.eval()
    torch.onnx.export(
        WithProbs(net),
        (torch.zeros(1, 1, 8, 8),),
        str(path),
        input_names=["image"],
        output_names=["logits", "probs"],
        opset_version=13,
        do_constant_folding=True,
        dynamo=False,
    )
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    model.producer_name, model.producer_version = "vdla examples/digits/train.py", torch.__version__
    onnx.save(model, str(path))


def main() -> None:
    """Train, report the float test accuracy, write the model and the data."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--out-dir", type=Path, default=HERE)
    args = ap.parse_args()
    seed_everything(SEED)
    data = load_split(SEED)
    print(f"train {len(data['x_train'])}, test {len(data['x_test'])}, calibration {len(data['x_calib'])} images")
    net = DigitsNet()
    train(net, data["x_train"], data["y_train"], args.epochs)
    print(f"float train accuracy {accuracy(net, data['x_train'], data['y_train']):.4f}")
    print(f"float test accuracy  {accuracy(net, data['x_test'], data['y_test']):.4f}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    export(net, args.out_dir / "digits.onnx")
    np.savez_compressed(
        args.out_dir / "digits_data.npz",
        **{k: data[k] for k in ("x_test", "y_test", "x_calib", "mean", "std")},
    )
    for name in ("digits.onnx", "digits_data.npz"):
        print(f"wrote {args.out_dir / name} ({(args.out_dir / name).stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
