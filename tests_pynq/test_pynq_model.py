"""Whole models on the board: an artifact bit-exact with the simulator and with the rtl's cycle counts,
``vdla run model.vdla --backend pynq``, loading and running without the compiler, one process per board."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import HERE
from test_graph_qdq import S_A, residual_graph

from vdla.graph.interp import evaluate
from vdla.graph.qdq import lower_qdq
from vdla.model import Module, load
from vdla.model.pipeline import compile_graph_model
from vdla.runtime import Device


@pytest.fixture(scope="module")
def artifact_path(tmp_path_factory) -> Path:
    artifact, _ = compile_graph_model(residual_graph(s_b=S_A, s_out=S_A), "pynq")
    return artifact.save(tmp_path_factory.mktemp("model") / "residual.vdla")


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)


def _env() -> dict[str, str]:
    """The environment of a second process: the same simulated board, the same pynq (or stand-in)."""
    path = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]
    if "standin" in str(Path(__import__("pynq").__file__)):
        path.append(str(HERE / "standin"))
    return {**os.environ, "VDLA_PYNQ_SIM": "pynq", "PYTHONPATH": os.pathsep.join(path)}


def test_artifact_bit_exact_with_sim_and_cycles_of_the_rtl(artifact_path, board):
    modules = {b: load(artifact_path, b) for b in ("sim", "rtl", "pynq")}
    try:
        ref = lower_qdq(residual_graph(s_b=S_A, s_out=S_A))
        for seed in range(4):
            x = _inputs(seed)
            y = modules["pynq"].run(x)
            np.testing.assert_array_equal(y, evaluate(ref, {"x": x})["y"])
            np.testing.assert_array_equal(y, modules["sim"].run(x))
            modules["rtl"].run(x)
            # the joined stream: the board records no timeline, so its first step carries the whole run
            got = [s.cycles for s in modules["pynq"].last_report.steps]
            assert sum(got) == sum(s.cycles for s in modules["rtl"].last_report.steps) > 0
            assert "not split without a timeline" in " ".join(s.note for s in modules["pynq"].last_report.steps)
        for b in ("pynq", "rtl"):  # one process holds the board at a time: close it before opening it again
            m = modules.pop(b)
            m.close()
            m.device.backend.close()
        alone = {b: load(artifact_path, b, overlap=False) for b in ("rtl", "pynq")}
        modules.update({f"{b} alone": m for b, m in alone.items()})
        x = _inputs(9)
        np.testing.assert_array_equal(alone["pynq"].run(x), modules["sim"].run(x))
        alone["rtl"].run(x)
        got = [s.cycles for s in alone["pynq"].last_report.steps]
        assert got == [s.cycles for s in alone["rtl"].last_report.steps] and sum(got) > 0  # layer by layer
    finally:
        for m in modules.values():
            m.close()
            if hasattr(m.device.backend, "close"):
                m.device.backend.close()


def test_vdla_run_on_the_board(artifact_path, tmp_path, board):
    x = _inputs(7)
    np.save(tmp_path / "x.npy", x)
    want = Module(load(artifact_path).artifact).run(x)
    vdla = Path(sys.executable).parent / "vdla"
    r = subprocess.run(
        [str(vdla), "run", str(artifact_path), "--backend", "pynq", "--input", str(tmp_path / "x.npy")]
        + ["--output", str(tmp_path / "y.npy")],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "accelerator:" in r.stdout and "cycles" in r.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_running_an_artifact_on_the_board_needs_neither_the_compiler_nor_onnx(artifact_path, tmp_path, board):
    x = _inputs(8)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", load(artifact_path).run(x))
    code = f"""
        import importlib.abc, sys
        compiler = ("vdla.model.pipeline", "vdla.model.lower", "vdla.model.match", "vdla.model.place")
        BLOCKED = ("onnx", "onnxruntime", "llvmlite", "cocotb", "vdla.compiler", "vdla.frontend", *compiler)
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        sys.meta_path.insert(0, Block())
        import numpy as np
        import vdla
        module = vdla.load({str(artifact_path)!r}, backend="pynq")
        y = module.run(np.load({str(tmp_path / "x.npy")!r}))
        assert (y == np.load({str(tmp_path / "want.npy")!r})).all()
        print("ok", module.last_report.accel_cycles)
    """
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, env=_env()
    )
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stderr


def test_a_second_process_cannot_open_the_board_in_use(board):
    dev = Device("pynq", backend="pynq")
    try:
        code = "from vdla.runtime import Device\nDevice('pynq', backend='pynq')\n"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
        assert r.returncode != 0
        assert f"is in use by process {os.getpid()}" in r.stderr, r.stderr
        assert dev.run_program(__import__("vdla.isa").isa.assemble("finish")).counters.insn_counts["FINISH"] == 1
    finally:
        dev.backend.close()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr
