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
from vdla.hw.verilator import verilator_env, verilator_root
from vdla.runtime.backend import RunError
from vdla.runtime.rtl.harness import RtlAssertionError
from vdla.runtime.rtl.verilate import ASSERT_FLAGS, MAKE_VARS, VERILATOR_FLAGS


@pytest.fixture(scope="module")
def directed_bench(tmp_path_factory) -> Path:
    """The directed queue bench, built (once per module, one job) with the harness build's flags."""
    out = tmp_path_factory.mktemp("directed_queues")
    cmd = [
        str(verilator_root() / "bin" / "verilator"),
        "--cc",
        "--exe",
        "--build",
        "-j",
        "1",
        *VERILATOR_FLAGS,
        *ASSERT_FLAGS[True],
        "--top-module",
        "tb_queues",
        *(x for flag in MAKE_VARS for x in ("-MAKEFLAGS", flag)),
        "--Mdir",
        str(out),
        "-o",
        "tb_queues",
        str(RTL_DIR / "vdla_pkg.sv"),
        str(RTL_DIR / "vdla_token_queue.sv"),
        str(RTL_DIR / "vdla_fifo.sv"),
        str(DIRECTED_DIR / "tb_queues.sv"),
        str(DIRECTED_DIR / "tb_queues.cpp"),
    ]
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
