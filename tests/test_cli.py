"""The vdla command line, as a user runs it."""

import importlib
import json
import subprocess
import sys

import pytest

from vdla import cli
from vdla.cli import main
from vdla.isa import decode_program
from vdla.runtime import FaultError


def test_info(capsys):
    assert main(["info", "--config", "osdi18", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["derived"]["peak_gops"] == 102.4 and info["config"]["clock_mhz"] == 200
    assert main(["info"]) == 0
    assert "51.2" in capsys.readouterr().out


def test_python_dash_m_vdla_runs_the_command():
    """``python -m vdla`` is the ``vdla`` command (where its script is not on the PATH); importing the package's
    ``__main__`` runs nothing."""
    out = subprocess.run([sys.executable, "-m", "vdla", "info"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "block_in" in out.stdout, out.stderr
    bad = subprocess.run([sys.executable, "-m", "vdla", "nope"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr
    importlib.import_module("vdla.__main__")


def test_asm_disasm_round_trip(tmp_path, capsys):
    src = tmp_path / "prog.s"
    src.write_text("""# a tiny program
        load inp sram=0 dram=0x1000000 y=2 x=4 stride=4 pad=1,1,0,0 push_next
        load uop x=0 pop_prev
        finish
    """)
    assert main(["asm", str(src), "-o", str(tmp_path / "prog.bin")]) == 0
    assert len(decode_program((tmp_path / "prog.bin").read_bytes())) == 3
    capsys.readouterr()
    assert main(["disasm", str(tmp_path / "prog.bin")]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == "load inp sram=0 dram=0x1000000 y=2 x=4 stride=4 pad=1,1,0,0 push_next"
    src2 = tmp_path / "again.s"
    src2.write_text(text)
    assert main(["asm", str(src2)]) == 0
    assert (tmp_path / "again.bin").read_bytes() == (tmp_path / "prog.bin").read_bytes()


def test_asm_errors_are_reported_and_leave_no_output(tmp_path, capsys):
    src = tmp_path / "bad.s"
    src.write_text("finish\nfrobnicate\n")
    assert main(["asm", str(src)]) == 2
    assert "bad.s:2: unknown mnemonic 'frobnicate'" in " ".join(capsys.readouterr().out.split())  # as wrapped
    assert not (tmp_path / "bad.bin").exists()
    src.write_text("load inp x=0 push_next\nfinish\n")
    assert main(["asm", str(src)]) == 2
    assert "pushes exceed pops" in capsys.readouterr().out


@pytest.mark.parametrize("config", ["pynq", "block8"])
def test_matmul_demo_job(tmp_path, capsys, config):
    out = tmp_path / "c.json"
    trace = tmp_path / "t.json"
    assert (
        main(["matmul", "--config", config, "--size", "64", "64", "64", "--json", str(out), "--trace", str(trace)]) == 0
    )
    counters = json.loads(out.read_text())
    assert counters["correct"] is True and counters["gemm_iters"] > 0
    assert json.loads(trace.read_text())["traceEvents"]
    assert "result matches numpy: True" in capsys.readouterr().out


def test_run_program_with_data(tmp_path, capsys):
    import numpy as np

    acc = np.arange(2 * 16, dtype=np.int32).reshape(2, 16) * 1000
    np.save(tmp_path / "acc.npy", acc)
    src = tmp_path / "p.s"
    # ACC elements are 64 bytes: physical 0x10100000 is element 0x404000; OUT elements are 16 bytes
    src.write_text("""
        load acc sram=0 dram=0x404000 y=1 x=2 stride=2
        load uop sram=0 dram=0x4080000 y=1 x=1 stride=1
        alu shr uop=0:1 iter=2,1 dst=1,0 src=0,0 imm=4 push_next
        store out sram=0 dram=0x1020000 y=1 x=2 stride=2 pop_prev
        finish
    """)
    # the ALU's micro-op (dst 0, src 0) is the zero word at 0x10200000 (UOP element 0x4080000)
    out = tmp_path / "out.bin"
    counters = tmp_path / "c.json"
    assert (
        main(
            [
                "run",
                str(src),
                "--load",
                f"0x10100000={tmp_path / 'acc.npy'}",
                "--dump",
                f"0x10200000:32={out}",
                "--json",
                str(counters),
                "--trace",
                str(tmp_path / "t.json"),
            ]
        )
        == 0
    )
    np.testing.assert_array_equal(
        np.frombuffer(out.read_bytes(), np.int8).reshape(2, 16), ((acc >> 4) & 0xFF).astype(np.uint8).view(np.int8)
    )
    assert json.loads(counters.read_text())["alu_iters"] == 2
    capsys.readouterr()
    bad = tmp_path / "dead.s"
    bad.write_text("load inp x=0 pop_next\nfinish\n")
    assert main(["run", str(bad)]) == 2
    assert "deadlock" in capsys.readouterr().out
    assert main(["run", str(bad), "--dump", "0x10000000=x"]) == 2
    assert "expected ADDR:NBYTES=FILE" in capsys.readouterr().out
    assert main(["run", str(bad), "--load", "start=x"]) == 2
    assert "expected ADDR=FILE with integer ADDR" in capsys.readouterr().out


def test_vdla_errors_are_reported_and_bugs_are_not_swallowed(monkeypatch, capsys):
    """main prints any VdlaError as one line and exits 2; any other exception is a bug and propagates."""

    def raising(exc):
        def cmd(args):
            raise exc

        return cmd

    monkeypatch.setattr(cli, "cmd_info", raising(FaultError("instruction 3 (gemm): boom")))
    assert main(["info"]) == 2
    assert "error: instruction 3 (gemm): boom" in capsys.readouterr().out
    monkeypatch.setattr(cli, "cmd_info", raising(TypeError("a bug")))
    with pytest.raises(TypeError, match="a bug"):
        main(["info"])


def test_every_error_class_reaches_the_cli():
    """Every exception class defined in vdla derives from VdlaError (so main reports it) and none from
    AssertionError (which ``python -O`` and test runners treat specially)."""
    import ast
    from pathlib import Path

    import vdla

    bases: dict[str, set[str]] = {}
    for path in Path(vdla.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                bases.setdefault(node.name, set()).update(names)

    def reaches_root(name: str, seen: frozenset = frozenset()) -> bool:
        own = bases.get(name, set())
        return name == "VdlaError" or any(b not in seen and reaches_root(b, seen | {name}) for b in own)

    errors = {n for n, b in bases.items() if n.endswith("Error") or b & {"Exception", "RuntimeError", "ValueError"}}
    assert errors - {"VdlaError"}, "no error classes found"
    assert not [n for n in errors if not reaches_root(n)]
    assert not [n for n in errors if "AssertionError" in bases[n]]
