"""The vdla command line, as a user runs it."""

import json

import pytest

from vdla.cli import main
from vdla.isa import decode_program


def test_info(capsys):
    assert main(["info", "--config", "osdi18", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["derived"]["peak_gops"] == 102.4 and info["config"]["clock_mhz"] == 200
    assert main(["info"]) == 0
    assert "51.2" in capsys.readouterr().out


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
    assert "bad.s:2: unknown mnemonic 'frobnicate'" in capsys.readouterr().out.replace("\n", "")
    assert not (tmp_path / "bad.bin").exists()
    src.write_text("load inp x=0 push_next\nfinish\n")
    assert main(["asm", str(src)]) == 2
    assert "pushes exceed pops" in capsys.readouterr().out


@pytest.mark.parametrize("config", ["pynq", "block8"])
def test_matmul_demo_job(tmp_path, capsys, config):
    out = tmp_path / "c.json"
    trace = tmp_path / "t.json"
    assert main(["matmul", "--config", config, "--size", "64", "64", "64", "--json", str(out),
                 "--trace", str(trace)]) == 0
    counters = json.loads(out.read_text())
    assert counters["correct"] is True and counters["gemm_iters"] > 0
    assert json.loads(trace.read_text())["traceEvents"]
    assert "result matches numpy: True" in capsys.readouterr().out
