"""The RTL's assertions are compiled into the tests' build and they fire.

A directed bench (hw/sim/directed/) drives a token queue and a FIFO into each overflow and underflow, built
with the same Verilator flags as the harness library (so an assertion compiled out there, by a flag or a
guard, is compiled out here too and these tests fail). The harness turns a failed assertion into
RtlAssertionError naming it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vdla.hw.lint import DIRECTED_DIR
from vdla.hw.rtlgen import RTL_DIR
from vdla.hw.toolchain import verilator_env
from vdla.runtime.backend import RunError
from vdla.runtime.rtl.harness import RtlAssertionError
from vdla.runtime.rtl.verilate import verilator_build_command


@pytest.fixture(scope="module")
def directed_bench(tmp_path_factory) -> Path:
    """The directed queue bench, built (once per module, one job) with the harness build's flags."""
    out = tmp_path_factory.mktemp("directed_queues")
    rtl = [RTL_DIR / f for f in ("vdla_pkg.sv", "vdla_token_queue.sv", "vdla_fifo.sv")]
    sources = [*rtl, DIRECTED_DIR / "tb_queues.sv", DIRECTED_DIR / "tb_queues.cpp"]
    cmd = verilator_build_command("tb_queues", sources, out, "tb_queues")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=verilator_env(), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "tb_queues"


def run(binary: Path, scenario: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), scenario], capture_output=True, text=True, check=False)


def test_legal_traffic_passes(directed_bench):
    proc = run(directed_bench, "ok")
    assert proc.returncode == 0 and "scenario ok: clean" in proc.stdout, proc.stdout + proc.stderr
    assert "Assertion failed" not in proc.stdout


@pytest.mark.parametrize(
    ("scenario", "source", "message"),
    [
        ("token_overflow", "vdla_token_queue.sv", "token queue overflow"),
        ("token_underflow", "vdla_token_queue.sv", "token queue underflow"),
        ("fifo_overflow", "vdla_fifo.sv", "FIFO overflow"),
        ("fifo_underflow", "vdla_fifo.sv", "FIFO underflow"),
    ],
)
def test_queue_assertions_fire(directed_bench, scenario, source, message):
    proc = run(directed_bench, scenario)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "Assertion failed" in out and source in out and message in out, out


def test_assertion_error_names_the_assertion():
    fifo = RTL_DIR / "vdla_fifo.sv"
    line = next(i for i, text in enumerate(fifo.read_text().splitlines(), 1) if "a_no_overflow" in text)
    err = RtlAssertionError(f"{fifo}:{line}")
    assert err.where.endswith(f"vdla_fifo.sv:{line}") and "a_no_overflow" in str(err)
    assert isinstance(err, RunError) and not isinstance(err, AssertionError)  # reported like any failed run
