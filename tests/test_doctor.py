"""``vdla doctor``: the machine's and the board's findings, an artifact's CPU code and memory, each problem
with its fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from artifact_edits import rewrite_zip
from test_graph_qdq import S_A, residual_graph  # noqa: E402

from vdla.cli import main  # noqa: E402
from vdla.cpu_fallback.native import machine, target_for_machine  # noqa: E402
from vdla.doctor import NOTE, OK, PROBLEM, diagnose, meminfo  # noqa: E402
from vdla.model.pipeline import compile_graph_model  # noqa: E402

BOARD_MEMINFO = "MemTotal:  510000 kB\nMemAvailable:  300000 kB\nCmaTotal:  131072 kB\nCmaFree:  {free} kB\n"


@pytest.fixture(scope="module")
def artifact_path(tmp_path_factory):
    artifact, _ = compile_graph_model(residual_graph(s_b=S_A, s_out=S_A), "pynq")
    return artifact.save(tmp_path_factory.mktemp("doc") / "m.vdla")


def _by_item(found):
    return {f.item: f for f in found}


def test_meminfo_reads_kib_as_bytes():
    mem = meminfo(BOARD_MEMINFO.format(free=65536))
    assert mem["CmaTotal"] == 128 << 20 and mem["CmaFree"] == 64 << 20


def test_the_machine_and_python_are_reported(artifact_path):
    found = _by_item(diagnose(meminfo_text=""))
    assert found["machine"].detail.startswith(__import__("platform").machine())
    assert found["python"].status == OK and found["numpy"].status == OK
    assert found["CMA"].status == NOTE and "not a board" in found["CMA"].detail
    assert all(f.fix for f in found.values() if f.status == PROBLEM)


def test_on_a_board_missing_pynq_and_overlay_are_problems_with_their_fixes(tmp_path, monkeypatch):
    import vdla.doctor as doctor

    monkeypatch.setattr(doctor, "_version", lambda m: None if m == "pynq" else "2.2.4")
    found = _by_item(diagnose(overlay=tmp_path / "vdla.bit", meminfo_text=BOARD_MEMINFO.format(free=100000)))
    assert found["pynq"].status == PROBLEM and "pynq_venv.sh" in found["pynq"].fix
    assert found["overlay"].status == PROBLEM and "missing vdla.bit, vdla.hwh" in found["overlay"].detail
    assert "make -C hw/fpga" in found["overlay"].fix
    assert found["CMA"].status == OK and "128 MiB" in found["CMA"].detail and "98 MiB free" in found["CMA"].detail


def test_artifact_without_code_for_this_machine_names_the_cpu_target(artifact_path, monkeypatch):
    import vdla.model.executor as executor

    monkeypatch.setattr(executor, "_jit_source", lambda: None)  # a board: no llvmlite
    found = _by_item(diagnose(artifact_path, meminfo_text=""))
    here = target_for_machine(machine())
    assert found["CPU code"].status == PROBLEM and "carries none" in found["CPU code"].detail
    assert f"--cpu-target {here.name}" in found["CPU code"].fix
    assert found["memory"].status == OK


def test_corrupt_code_and_memory_beyond_the_board_are_problems(artifact_path, tmp_path, monkeypatch):
    pytest.importorskip("ziglang")
    from vdla.model.artifact import load_artifact
    from vdla.model.pipeline import add_cpu_code
    from vdla.model.trust import generate_key, load_signing_key, trust_key

    monkeypatch.setenv("VDLA_TRUST_DIR", str(tmp_path / "trust"))
    artifact = load_artifact(artifact_path)
    here = target_for_machine(machine())
    add_cpu_code(artifact, (here.name,))
    unsigned = artifact.save(tmp_path / "unsigned.vdla")
    found = _by_item(diagnose(unsigned, meminfo_text=""))
    assert found["signature"].status == NOTE and "unsigned: its native code loads only with --trust-native" in (
        found["signature"].detail
    )
    assert (
        found["CPU code"].status == OK
        and "the JIT" in found["CPU code"].detail
        and "not trusted" in (found["CPU code"].detail)
    )
    trust_key(generate_key(tmp_path / "key"))
    good = artifact.save(tmp_path / "good.vdla", key=load_signing_key(tmp_path / "key"))
    found = _by_item(diagnose(good, meminfo_text=BOARD_MEMINFO.format(free=1024)))
    assert found["signature"].status == OK and "trusted here" in found["signature"].detail
    assert found["CPU code"].status == OK and f"its {here.name} code" in found["CPU code"].detail
    assert found["memory"].status == PROBLEM and "larger than the CMA pool's free 1 MiB" in found["memory"].detail
    found = _by_item(diagnose(good, dram_bytes=1 << 12, meminfo_text=""))
    assert found["memory"].status == PROBLEM and "dram_bytes=1 << 20" in found["memory"].fix

    name = f"cpu/{here.name}.so"

    def zero(files):
        files[name] = bytes(len(files[name]))

    found = _by_item(diagnose(rewrite_zip(unsigned, tmp_path / "bad.vdla", zero), meminfo_text=""))
    assert found["CPU code"].status == PROBLEM and "corrupt" in found["CPU code"].detail
    found = _by_item(diagnose(rewrite_zip(good, tmp_path / "tampered.vdla", zero), meminfo_text=""))
    assert found["artifact"].status == PROBLEM and found["signature"].status == PROBLEM
    assert f"code object(s) ['{name}'] changed after signing" in found["signature"].detail
    assert "CPU code" not in found


def test_cli_exit_status_and_json(artifact_path, capsys):
    code = main(["doctor", str(artifact_path), "--json"])
    found = json.loads(capsys.readouterr().out)
    assert {f["item"] for f in found} >= {"machine", "python", "numpy", "pynq", "CMA", "artifact", "CPU code", "memory"}
    assert code == (1 if any(f["status"] == PROBLEM for f in found) else 0)
    assert main(["doctor", str(artifact_path.parent / "missing.vdla"), "--json"]) == 1
    assert "compile" in json.loads(capsys.readouterr().out)[-1]["fix"]
