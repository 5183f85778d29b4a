"""The emulated ARM userland of ``make test-arm`` (and ``benchmarks/arm_cpu.py``): Debian root file systems
(``tests_arm/rootfs.sh``), their Python run under qemu-user, and the models compiled for the boards.

The guest sees the vdla checkout on ``PYTHONPATH`` and Debian's python3, numpy, rich and cryptography: the
board-side install (``vdla[cli]`` without extras). It has no llvmlite, compiler or linker, so a CPU step runs on
the artifact's ahead-of-time code or on numpy. The artifacts are signed and the guest trusts their key
(:func:`trust_in_guest`), as a board that loads native code does (docs/security.md).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ROOTFS_SCRIPT = REPO / "tests_arm" / "rootfs.sh"


@dataclass(frozen=True)
class Arch:
    """An emulated board CPU: Debian architecture, qemu-user binary and the CPU it emulates (the boards':
    code using an instruction the board lacks fails), vdla CPU target, ``platform.machine()``."""

    debian: str
    qemu: str
    cpu: str
    target: str
    machine: str

    def command(self, root: Path) -> list[str]:
        """The guest's python3 under qemu-user."""
        return [self.qemu, "-cpu", self.cpu, "-L", str(root), str(root / "usr/bin/python3")]


ARCHES = {
    a.debian: a
    for a in (
        Arch("armhf", "qemu-arm-static", "cortex-a9", "armv7-linux-gnueabihf", "armv7l"),
        Arch("arm64", "qemu-aarch64-static", "cortex-a53", "aarch64-linux-gnu", "aarch64"),
    )
}
MODELS = ("resnet18", "mobilenet_v2", "yolo")  # the two and the suite's detector (its decode head)
# What make test-arm runs: each model on the board CPU it ships on most (ResNet-18 on the PYNQ-Z2's Cortex-A9,
# MobileNet-V2 on the ZU+ boards' Cortex-A53) and the detector, whose decode head has the most CPU work, on both.
# The guest's time is mostly the simulator under emulation (20-70 s a run), not the ARM code under test, which is
# the same per architecture for all three models' steps (input preparation, output); benchmarks/arm_cpu.py runs
# every pair.
RUNS = (("resnet18", "armhf"), ("yolo", "armhf"), ("mobilenet_v2", "arm64"), ("yolo", "arm64"))
CALIB_SAMPLES = 4


def rootfs(arch: Arch) -> Path:
    """The cached root file system of ``arch`` (built on first use, ~25 s and ~200 MB)."""
    r = subprocess.run([str(ROOTFS_SCRIPT), arch.debian], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{ROOTFS_SCRIPT} {arch.debian} failed:\n{r.stderr[-3000:]}")
    return Path(r.stdout.strip().splitlines()[-1])


def guest(arch: Arch, root: Path, args: list[str], home: Path, timeout: float = 1200) -> tuple[int, str, str, float]:
    """Run the guest's ``python3 args`` under qemu-user: (return code, stdout, stderr, seconds)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(home), "VDLA_CACHE_DIR": str(home)}
    env.update({k: os.environ[k] for k in ("COLUMNS",) if k in os.environ})
    t0 = time.perf_counter()
    cmd = [*arch.command(root), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return r.returncode, r.stdout, r.stderr, time.perf_counter() - t0


def build_model(name: str) -> tuple[object, dict[str, np.ndarray], dict[str, tuple[int, ...]], dict[str, np.ndarray]]:
    """(ONNX model, calibration samples, input shapes, one test input) of a model of :data:`MODELS`."""
    if name == "resnet18":
        from vdla.zoo.models import calibration_images, resnet18

        images = calibration_images((3, 224, 224), CALIB_SAMPLES + 1, seed=1)
        return resnet18(seed=0), {"image": images[:-1]}, {}, {"image": images[-1:]}
    from vdla.zoo.suite import SUITE

    m = SUITE[name]
    return m.load(), m.samples(CALIB_SAMPLES, 1), m.input_shapes(), m.feeds(1, 9)[0]


def compile_for_boards(name: str, out_dir: Path, key: object = None) -> tuple[Path, dict[str, np.ndarray]]:
    """``name`` quantized and compiled for the pynq preset with code for every emulated board, signed by
    ``key`` (a :class:`vdla.model.trust.SigningKey`) if given: the artifact's path and its test input."""
    from vdla.compiler import ScheduleCache
    from vdla.model.pipeline import CompileOptions, compile_model

    model, calib, shapes, feed = build_model(name)
    targets = tuple(a.target for a in ARCHES.values())
    options = CompileOptions("pynq", input_shapes=shapes, cpu_targets=targets)
    artifact, _ = compile_model(model, calib, options, cache=ScheduleCache())
    return artifact.save(out_dir / f"{name}.vdla", key=key), feed


def guest_trust_dir(home: Path) -> Path:
    """The guest's trust store: the default one (``~/.config/vdla/trusted-keys``) of the HOME :func:`guest` gives."""
    return home / ".config" / "vdla" / "trusted-keys"


def trust_in_guest(home: Path, key: object) -> None:
    """Make the guest of ``home`` trust the public key of ``key`` (a SigningKey), as ``vdla trust add`` does."""
    from vdla.model.trust import trust_key

    trust_key(key.public, guest_trust_dir(home))
