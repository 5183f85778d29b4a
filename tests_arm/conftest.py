"""``make test-arm``: whole-model artifacts run by ``vdla run`` in emulated armhf and arm64 userlands
(tests_arm/emulation.py), against the host. The runs go two at a time (the guests are single-threaded)."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from emulation import ARCHES, MODELS, RUNS, compile_for_boards, guest, rootfs  # noqa: E402

from vdla.model import load  # noqa: E402

# the checkout's caches, never ~/.cache/vdla: the schedules make test-all worked out for the same layers are
# found again (the root file systems stay in ~/.cache/vdla/arm, tests_arm/rootfs.sh)
os.environ["VDLA_CACHE_DIR"] = str(Path(__file__).resolve().parents[1] / ".vdla_cache")
TIMES: list[str] = []


@pytest.fixture(scope="session")
def roots() -> dict[str, Path]:
    return {name: rootfs(arch) for name, arch in ARCHES.items()}


@pytest.fixture(scope="session")
def compiled(tmp_path_factory) -> dict[str, tuple[Path, Path, dict[str, np.ndarray]]]:
    """Per model: the artifact, its input (.npy) and the host's outputs (JIT kernels, sim backend)."""
    out = tmp_path_factory.mktemp("models")
    models = {}
    for name in MODELS:
        path, feed = compile_for_boards(name, out)
        (key, x), *rest = feed.items()
        assert not rest, f"{name}: one input expected"
        np.save(out / f"{name}.npy", x)
        module = load(path)
        assert module.cpu_kernels == "jit"
        y = module.run(feed)
        models[name] = (
            path,
            out / f"{name}.npy",
            y if isinstance(y, dict) else {next(iter(module.artifact.outputs)): y},
        )
    return models


@pytest.fixture(scope="session")
def guest_runs(roots, compiled, tmp_path_factory) -> dict[tuple[str, str], tuple]:
    """Per (model, arch): ``vdla run --cpu-kernels native`` in the guest, (return code, stdout, stderr,
    seconds, outputs)."""
    out = tmp_path_factory.mktemp("guest")

    def run(key: tuple[str, str]) -> tuple:
        model, arch = key
        path, x, _ = compiled[model]
        y = out / f"{model}-{arch}.npz"
        args = ["-m", "vdla.cli", "run", str(path), "--input", str(x), "--output", str(y), "--cpu-kernels", "native"]
        code, stdout, stderr, seconds = guest(ARCHES[arch], roots[arch], args, out / "home")
        TIMES.append(f"{model} on emulated {arch}: vdla run {seconds:.1f} s")
        return code, stdout, stderr, seconds, (dict(np.load(y)) if code == 0 else {})

    keys = list(RUNS)
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(keys, pool.map(run, keys), strict=True))


def pytest_terminal_summary(terminalreporter):
    for line in TIMES:
        terminalreporter.write_line(line)
