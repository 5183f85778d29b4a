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
from emulation import ARCHES, MODELS, RUNS, compile_for_boards, guest, rootfs, trust_in_guest  # noqa: E402

from vdla.model import load  # noqa: E402

# the checkout's caches, never ~/.cache/vdla: the schedules make test-all worked out for the same layers are
# found again (the root file systems stay in ~/.cache/vdla/arm, tests_arm/rootfs.sh)
os.environ["VDLA_CACHE_DIR"] = str(Path(__file__).resolve().parents[1] / ".vdla_cache")
TIMES: list[str] = []


@pytest.fixture(scope="session")
def roots() -> dict[str, Path]:
    return {name: rootfs(arch) for name, arch in ARCHES.items()}


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory):
    """The key the artifacts are signed with (the guest trusts it: docs/security.md)."""
    from vdla.model.trust import generate_key, load_signing_key

    path = tmp_path_factory.mktemp("key") / "signer"
    generate_key(path, "make test-arm")
    return load_signing_key(path)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory, signing_key) -> dict[str, tuple[Path, Path, dict[str, np.ndarray]]]:
    """Per model: the artifact (signed), its input (.npy) and the host's outputs (JIT kernels, sim backend)."""
    out = tmp_path_factory.mktemp("models")
    models = {}
    for name in MODELS:
        path, feed = compile_for_boards(name, out, signing_key)
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
def guest_runs(roots, compiled, signing_key, tmp_path_factory) -> dict[tuple[str, str], tuple]:
    """Per (model, arch): ``vdla run --cpu-kernels native`` in the guest, which trusts the artifacts' key and
    checks their signature with its cryptography (without that, native code would not load: an error), (return
    code, stdout, stderr, seconds, outputs)."""
    out = tmp_path_factory.mktemp("guest")
    trust_in_guest(out / "home", signing_key)

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
