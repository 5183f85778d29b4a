"""The Vivado flow of hw/fpga/ checked without Vivado: every Tcl file parses, the build script runs through
with Vivado's commands stubbed (hw/fpga/common/dryrun.tcl, in Debian's `tclsh`), every file it names exists,
and what the block design connects matches the RTL top's ports, the configuration and the driver."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vdla.config import load_config
from vdla.hw.rtlgen import write_package
from vdla.runtime.pynq_backend import board_base_addr

ROOT = Path(__file__).resolve().parents[1]
FPGA = ROOT / "hw" / "fpga"
DRYRUN = FPGA / "common" / "dryrun.tcl"
BOARDS = sorted(p.name for p in FPGA.iterdir() if (p / "board.tcl").is_file())
PART = "xc7z020clg400-1"
# vdla_top's outputs the block design leaves open on purpose: the instruction trace is for simulation
UNCONNECTED = {"trace_o"}
AXI_LITE_SLAVE = {  # signal: direction seen from the slave
    **dict.fromkeys(
        ["awaddr", "awvalid", "wdata", "wstrb", "wvalid", "bready", "araddr", "arvalid", "rready"], "input"
    ),
    **dict.fromkeys(["awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp", "rvalid"], "output"),
}
AXI_MASTER = {  # the AXI4 signals vdla_top drives or reads (the optional ones take Vivado's defaults)
    **dict.fromkeys(
        ["arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "rready", "awid", "awaddr", "awlen", "awsize"]
        + ["awburst", "awvalid", "wdata", "wstrb", "wlast", "wvalid", "bready"],
        "output",
    ),
    **dict.fromkeys(
        ["arready", "rid", "rdata", "rresp", "rlast", "rvalid", "awready", "wready", "bid", "bresp"], "input"
    ),
    "bvalid": "input",
}

TCLSH = shutil.which("tclsh")
needs_tclsh = pytest.mark.skipif(
    TCLSH is None,
    reason="tclsh is not installed (Debian: apt-get install tcl): the Vivado Tcl flow cannot be checked",
)


def top_ports() -> dict[str, str]:
    """vdla_top's ports and their directions, from hw/rtl/vdla_top.sv."""
    text = (ROOT / "hw" / "rtl" / "vdla_top.sv").read_text()
    header = text[text.index("module vdla_top") : text.index(");")]
    return {m[1]: m[0] for m in re.findall(r"\b(input|output)\s+logic\s*(?:\[[^\]]*\]\s*)?(\w+)", header)}


def dry_run(board: str, tmp_path: Path) -> list[list[str]]:
    """Run the board's build under dryrun.tcl as its Makefile does; the log as lists of fields."""
    cfg = load_config("pynq")
    pkg = tmp_path / "vdla_pkg.sv"
    write_package(cfg, pkg)
    log = tmp_path / f"{board}.log"
    tcl_files = " ".join(str(p) for p in sorted(FPGA.rglob("*.tcl")))
    args = [TCLSH, str(DRYRUN), str(log), "../common/build.tcl", "board.tcl", str(pkg), str(tmp_path / "out")]
    proc = subprocess.run(
        [*args, str(cfg.clock_mhz)],
        cwd=FPGA / board,
        capture_output=True,
        text=True,
        env={**os.environ, "VDLA_TCL_FILES": tcl_files},
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ok"), proc.stdout + proc.stderr
    return [line.split("\t") for line in log.read_text().splitlines()]


def calls(log: list[list[str]], command: str) -> list[list[str]]:
    return [rec[2:] for rec in log if rec[0] == "CALL" and rec[1] == command]


@needs_tclsh
def test_a_broken_tcl_file_is_caught(tmp_path):
    bad = tmp_path / "bad.tcl"
    bad.write_text('set x 1\nif {$x} {\n  puts "unclosed"\n')
    proc = subprocess.run([TCLSH, str(DRYRUN), str(tmp_path / "log"), str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and f"{bad}:2: incomplete command" in proc.stdout
    missing = tmp_path / "missing.tcl"
    missing.write_text("source no_such_board.tcl\n")
    proc = subprocess.run([TCLSH, str(DRYRUN), str(tmp_path / "log"), str(missing)], capture_output=True, text=True)
    assert proc.returncode == 1 and "source no_such_board.tcl: no such file" in proc.stdout


def test_every_board_has_a_makefile_naming_existing_files():
    assert BOARDS == ["pynq-z1", "pynq-z2"]
    common = (FPGA / "common" / "board.mk").read_text()
    for board in BOARDS:
        for inc in re.findall(r"^include\s+(\S+)", (FPGA / board / "Makefile").read_text(), re.M):
            assert (FPGA / board / inc).is_file(), (board, inc)
    # the files board.mk names relative to a board directory
    for name in re.findall(r"(\.\./(?:common|\.\./rtl)/[\w.]+|board\.tcl)", common):
        for board in BOARDS:
            assert (FPGA / board / name).is_file(), (board, name)
    assert "-source ../common/build.tcl" in common and "gen-rtl --config $(CONFIG)" in common


@needs_tclsh
@pytest.mark.parametrize("board", BOARDS)
def test_the_build_runs_through_with_stubbed_vivado(board, tmp_path):
    log = dry_run(board, tmp_path)
    cfg = load_config("pynq")
    # the files: the board script, the package and every RTL module, all existing
    assert [rec[1] for rec in log if rec[0] == "SOURCE"] == ["../common/build.tcl", "board.tcl"]
    (added,) = [c[-1].split() for c in calls(log, "add_files") if c[0] == "-norecurse" and c[-1].endswith(".sv")]
    assert added[0] == str(tmp_path / "vdla_pkg.sv")
    rtl = sorted(p for p in (ROOT / "hw" / "rtl").glob("*.sv") if p.name != "vdla_pkg.sv")
    assert [Path(p) for p in added[1:]] == rtl and all(Path(p).is_file() for p in added)
    # the part and the board
    for c in calls(log, "create_project"):
        assert c[c.index("-part") + 1] == PART
    (board_part,) = [c[1] for c in calls(log, "set_property") if c[0] == "board_part"]
    assert board.replace("-", "") in board_part.replace("-", "")
    # the clock, the HP port's width, the register window at the driver's address
    (ps_dict,) = [c[1].split() for c in calls(log, "set_property") if c[0] == "-dict"]
    ps = dict(zip(ps_dict[::2], ps_dict[1::2]))
    assert float(ps["CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ"]) == cfg.clock_mhz
    assert int(ps["CONFIG.PCW_S_AXI_HP0_DATA_WIDTH"]) == cfg.bus_width_bits
    assert ps["CONFIG.PCW_USE_S_AXI_HP0"] == ps["CONFIG.PCW_USE_FABRIC_INTERRUPT"] == "1"
    props = {c[0]: c[1] for c in calls(log, "set_property") if c[0] in ("offset", "range")}
    assert int(props["offset"], 16) == board_base_addr(cfg)
    window = int(props["range"].rstrip("K")) * 1024
    reg_bits = int(re.search(r"REG_ADDR_BITS\s*=\s*(\d+)", (tmp_path / "vdla_pkg.sv").read_text())[1])
    assert 1 << reg_bits <= window
    # the outputs pynq.Overlay loads: <name>.bit with <name>.hwh beside it
    copies = [rec[2] for rec in log if rec[0] == "COPY"]
    assert copies == [str(tmp_path / "out" / "vdla.bit"), str(tmp_path / "out" / "vdla.hwh")]


@needs_tclsh
def test_the_block_design_matches_the_top_ports(tmp_path):
    log = dry_run(BOARDS[0], tmp_path)
    ports = top_ports()
    # the IP's interfaces: single signals inferred by name, AXI ones by their prefix (s_axil_*, m_axi_*)
    signals = {c[0]: c[1] for c in calls(log, "ipx::infer_bus_interface")}
    assert signals == {
        "clk_i": "xilinx.com:signal:clock_rtl:1.0",
        "rst_ni": "xilinx.com:signal:reset_rtl:1.0",
        "irq_o": "xilinx.com:signal:interrupt_rtl:1.0",
    }
    assert ports["clk_i"] == ports["rst_ni"] == "input" and ports["irq_o"] == "output"
    assert [c[0] for c in calls(log, "ipx::infer_bus_interfaces")] == ["xilinx.com:interface:aximm_rtl:1.0"]
    buses: dict[str, dict[str, str]] = {}
    for name, direction in ports.items():
        m = re.fullmatch(r"([sm]_axil?)_(\w+)", name)
        if m:
            buses.setdefault(m[1], {})[m[2]] = direction
    assert buses == {"s_axil": AXI_LITE_SLAVE, "m_axi": AXI_MASTER}
    # what the block design connects: the AXI interfaces (automation, with their clock and its reset), the irq
    intf = {c[0].split("/", 1)[1] for c in calls(log, "get_bd_intf_pins") if c[0].startswith("vdla_0/")}
    pins = {c[0].split("/", 1)[1] for c in calls(log, "get_bd_pins") if c[0].startswith("vdla_0/")}
    masters = [c[c.index("-config") + 1] for c in calls(log, "apply_bd_automation") if "bd_rule:axi4" in c[1]]
    assert intf == {"s_axil"} and any("Master /vdla_0/m_axi" in m for m in masters)
    assert pins == {"irq_o"}
    associations = calls(log, "ipx::associate_bus_interfaces")
    clocked = {c[c.index("-busif") + 1] for c in associations if "-busif" in c and c[c.index("-clock") + 1] == "clk_i"}
    assert clocked == {"s_axil", "m_axi"}
    # the clock's reset: what lets the automation drive rst_ni from the Processor System Reset (FCLK_RESET0_N)
    assert any(
        "-reset" in c and c[c.index("-reset") + 1] == "rst_ni" and c[c.index("-clock") + 1] == "clk_i"
        for c in associations
    )
    connected = {"clk_i", "rst_ni", "irq_o"} | {f"{b}_{s}" for b in buses for s in buses[b]}
    assert {p for p, d in ports.items() if d == "input"} <= connected
    assert set(ports) - connected == UNCONNECTED
