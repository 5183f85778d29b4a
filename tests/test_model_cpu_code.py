"""Ahead-of-time CPU code in model artifacts: stored with its hash, chosen by machine, refused when corrupt.
(Loaded here with ``trust_native=True``: the signatures that make it trusted are tests/test_trust.py's.)"""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from artifact_edits import rewrite_zip, sample_input
from test_graph_qdq import S_A, residual_graph  # noqa: E402

import vdla.model.executor as executor  # noqa: E402
from vdla.compiler import CompileError  # noqa: E402
from vdla.cpu_fallback import aot  # noqa: E402
from vdla.cpu_fallback.native import NativeCodeError, machine, target_for_machine  # noqa: E402
from vdla.model import load, load_artifact  # noqa: E402
from vdla.model.pipeline import CompileOptions, compile_model  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason="the aot extra is missing")
HERE = target_for_machine(machine())
BOARD = "armv7-linux-gnueabihf"


def _compile(*targets: str):
    return compile_model(residual_graph(s_b=S_A, s_out=S_A), None, CompileOptions("pynq", cpu_targets=targets))[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    if HERE is None:
        pytest.skip(f"no known CPU target for this machine ({machine()})")
    path = tmp_path_factory.mktemp("art") / "m.vdla"
    _compile("host", BOARD).save(path)
    return path


def test_artifact_carries_code_per_target_with_triple_and_hash(saved):
    artifact = load_artifact(saved)
    assert set(artifact.cpu_code) == {HERE.name, BOARD}
    with zipfile.ZipFile(saved) as z:
        manifest = json.loads(z.read("manifest.json"))
        board = manifest["cpu_code"][BOARD]
        code = z.read(board["file"])
    assert board["triple"] == "armv7-none-linux-gnueabihf" and board["machines"][0] == "armv7l"
    assert board["sha256"] == aot.sha256(code) and code[4] == 1 and code[18] == 40  # ELF32, EM_ARM
    steps = [s for s in artifact.steps if s.kind == "cpu"]
    assert steps and len(board["kernels"]) >= len(steps)


def test_the_machines_code_runs_and_matches_the_jit_and_numpy(saved):
    module = load(saved, trust_native=True)
    assert module.cpu_kernels == "native"
    x = sample_input(1)
    y = module.run(x)
    for other in ("jit", "reference"):
        m = load(saved, cpu_kernels=other)
        assert m.cpu_kernels == other
        np.testing.assert_array_equal(m.run(x), y)


def test_corrupt_code_is_refused_unless_reference_kernels_are_allowed(saved, tmp_path, capsys):
    def flip(files):
        name = f"cpu/{HERE.name}.so"
        files[name] = files[name][:-1] + bytes([files[name][-1] ^ 0xFF])

    bad = rewrite_zip(saved, tmp_path / "bad.vdla", flip)
    with pytest.raises(NativeCodeError, match=f"{HERE.name} CPU code is corrupt.*--allow-reference-kernels"):
        load(bad, trust_native=True)
    module = load(bad, allow_reference_kernels=True, trust_native=True)
    assert module.cpu_kernels == "reference" and "corrupt" in capsys.readouterr().err
    np.testing.assert_array_equal(module.run(sample_input()), load(saved).run(sample_input()))


def test_code_with_another_recorded_hash_is_refused(saved, tmp_path):
    def rehash(files):
        manifest = json.loads(files["manifest.json"])
        manifest["cpu_code"][HERE.name]["sha256"] = "0" * 64
        files["manifest.json"] = json.dumps(manifest).encode()

    with pytest.raises(NativeCodeError, match="records 0000"):
        load(rewrite_zip(saved, tmp_path / "rehash.vdla", rehash), trust_native=True)


def test_without_code_for_the_machine_or_llvmlite_numpy_runs_and_the_warning_names_the_fix(
    saved, tmp_path, monkeypatch, capsys
):
    def board_only(files):
        manifest = json.loads(files["manifest.json"])
        del manifest["cpu_code"][HERE.name]
        files["manifest.json"] = json.dumps(manifest).encode()
        del files[f"cpu/{HERE.name}.so"]

    path = rewrite_zip(saved, tmp_path / "board.vdla", board_only)
    with pytest.raises(NativeCodeError, match=f"carries CPU code for {BOARD}.*--cpu-target {HERE.name}"):
        load(path, cpu_kernels="native")
    monkeypatch.setattr(executor, "_jit_source", lambda: None)
    module = load(path)
    err = capsys.readouterr().err
    assert module.cpu_kernels == "reference"
    assert f"carries CPU code for {BOARD}, none for this machine ({machine()})" in err
    assert f"compile with --cpu-target {HERE.name}" in err
    np.testing.assert_array_equal(module.run(sample_input()), load(saved).run(sample_input()))

    def no_code(files):
        manifest = json.loads(files["manifest.json"])
        for target in manifest["cpu_code"]:
            del files[f"cpu/{target}.so"]
        manifest["cpu_code"] = {}
        files["manifest.json"] = json.dumps(manifest).encode()

    with pytest.raises(NativeCodeError, match=f"carries no CPU code .*--cpu-target {HERE.name}"):
        load(rewrite_zip(saved, tmp_path / "none.vdla", no_code), cpu_kernels="native")


def test_unknown_target_is_refused_listing_the_known_ones():
    with pytest.raises(CompileError, match="unknown --cpu-target 'armv6'.*host, armv7-linux-gnueabihf, aarch64"):
        CompileOptions(cpu_targets=("armv6",))
    assert CompileOptions(cpu_targets=("host", "host")).cpu_targets == (HERE.name,)


def test_missing_linker_names_the_extra_before_compiling(monkeypatch):
    monkeypatch.setattr(aot.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(aot.LinkerError, match=r"ziglang package .* pip install 'vdla\[aot\]'"):
        _compile(BOARD)


def test_cli_compiles_code_for_the_board(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from vdla.cli import main
    from vdla.zoo.models import small_resnet

    model = tmp_path / "m.onnx"
    onnx.save(small_resnet(seed=0), model)
    assert main(["compile", str(model), "--cpu-target", BOARD, "-o", str(tmp_path / "m.vdla")]) == 0
    artifact = load_artifact(tmp_path / "m.vdla")
    assert set(artifact.cpu_code) == {BOARD} and artifact.cpu_code[BOARD].kernels
    assert main(["compile", str(model), "--cpu-target", "sparc"]) == 2
    out = capsys.readouterr()
    assert "unknown --cpu-target 'sparc'" in out.out + out.err
