"""The Vivado flow of hw/fpga/ checked without Vivado, for every board directory and every board it names:
every Tcl file parses, the build script runs through with Vivado's commands stubbed (hw/fpga/common/dryrun.tcl,
in Debian's `tclsh`), every file it names exists, and what the block design connects matches the RTL top's
ports, the board's preset (part, clock, HP port width, address bits, register window) and the driver."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vdla.config import ConfigError, board_presets, from_dict, load_config
from vdla.hw.fpga import PS, processing_system, tcl_params, write_tcl_params
from vdla.hw.rtlgen import write_package
from vdla.runtime.pynq_backend import REGISTER_SPAN, board_base_addr

ROOT = Path(__file__).resolve().parents[1]
FPGA = ROOT / "hw" / "fpga"
DRYRUN = FPGA / "common" / "dryrun.tcl"
BOARD_DIRS = sorted(p.name for p in FPGA.iterdir() if (p / "board.tcl").is_file())
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


def dir_preset(board_dir: str) -> str:
    """The preset a board directory builds by default: its Makefile's ``CONFIG ?=``."""
    return re.search(r"^CONFIG \?= (\S+)$", (FPGA / board_dir / "Makefile").read_text(), re.M)[1]


def dir_boards(board_dir: str) -> dict[str, dict[str, str]]:
    """board.tcl's BOARDS (board -> {board_part, package?, connections?}), read by tclsh."""
    script = f"source {FPGA / board_dir / 'board.tcl'}\nputs [join [dict keys $BOARDS] \\n]"
    names = subprocess.run([TCLSH], input=script, capture_output=True, text=True, check=True).stdout.split()
    out = {}
    for name in names:
        script = f"source {FPGA / board_dir / 'board.tcl'}\nset b [dict get $BOARDS {name}]\n"
        script += 'foreach k [dict keys $b] { puts "$k\\t[dict get $b $k]" }'
        lines = subprocess.run([TCLSH], input=script, capture_output=True, text=True, check=True).stdout
        out[name] = dict(line.split("\t", 1) for line in lines.splitlines())
    return out


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def dry_run(board_dir: str, tmp_path: Path, board: str = "", ok: bool = True) -> list[list[str]]:
    """Run the board directory's build under dryrun.tcl as its Makefile does (the files vdla writes from its
    preset, then build.tcl); the log as lists of fields (or, with ``ok=False``, the failing run's output)."""
    cfg = load_config(dir_preset(board_dir))
    pkg, params = tmp_path / "vdla_pkg.sv", tmp_path / "vdla_config.tcl"
    write_package(cfg, pkg)
    write_tcl_params(cfg, params)
    log = tmp_path / f"{board_dir}.log"
    tcl_files = " ".join(str(p) for p in sorted(FPGA.rglob("*.tcl")) if "/out/" not in str(p))
    args = [TCLSH, str(DRYRUN), str(log), "../common/build.tcl", "board.tcl", str(pkg), str(params)]
    proc = subprocess.run(
        [*args, str(tmp_path / "out"), board],
        cwd=FPGA / board_dir,
        capture_output=True,
        text=True,
        env={**os.environ, "VDLA_TCL_FILES": tcl_files},
        timeout=60,
    )
    if not ok:
        return proc.stdout + proc.stderr
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ok"), proc.stdout + proc.stderr
    return [line.split("\t") for line in log.read_text().splitlines()]


def calls(log: list[list[str]], command: str) -> list[list[str]]:
    return [rec[2:] for rec in log if rec[0] == "CALL" and rec[1] == command]


def nets(log: list[list[str]]) -> list[set[str]]:
    """The pins each connect_bd_net joins (its arguments are the get_bd_pins calls just before it)."""
    out, pins = [], []
    for rec in log:
        if rec[:2] == ["CALL", "get_bd_pins"]:
            pins.append(rec[2])
        elif rec[:2] == ["CALL", "connect_bd_net"]:
            n = len(rec) - 2
            out.append(set(pins[-n:]))
            pins = []
    return out


def ps_props(log: list[list[str]]) -> dict[str, str]:
    (ps_dict,) = [c[1].split() for c in calls(log, "set_property") if c[0] == "-dict"]
    return dict(zip(ps_dict[::2], ps_dict[1::2]))


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
    assert BOARD_DIRS == ["aup-zu3", "kv260", "pynq-z1", "pynq-z2", "zcu104"]
    common = (FPGA / "common" / "board.mk").read_text()
    for board in BOARD_DIRS:
        for inc in re.findall(r"^include\s+(\S+)", (FPGA / board / "Makefile").read_text(), re.M):
            assert (FPGA / board / inc).is_file(), (board, inc)
    # the files board.mk names relative to a board directory
    for name in re.findall(r"(\.\./(?:common|\.\./rtl)/[\w.]+|board\.tcl)", common):
        for board in BOARD_DIRS:
            assert (FPGA / board / name).is_file(), (board, name)
    assert "-source ../common/build.tcl" in common and "gen-rtl --config $(CONFIG)" in common
    assert "--tcl $(CURDIR)/$(OUT)/vdla_config.tcl" in common
    # every PS has its block design
    assert {p.name for p in (FPGA / "common").glob("bd_*.tcl")} == {f"bd_{ps.name}.tcl" for ps in PS.values()}


@needs_tclsh
def test_every_board_preset_has_a_board_directory():
    """Each board directory builds a board preset by default, and every board a preset names (its ``boards``)
    is one of a directory's boards, built with that preset."""
    presets = {c.name: c for c in board_presets()}
    named = {}
    for board_dir in BOARD_DIRS:
        cfg = presets[dir_preset(board_dir)]
        for board in dir_boards(board_dir):
            assert any(_norm(board).startswith(_norm(b)) for b in cfg.boards), (board_dir, board, cfg.boards)
            named[_norm(board)] = cfg.name
    for cfg in presets.values():
        for b in cfg.boards:
            assert any(k.startswith(_norm(b)) and v == cfg.name for k, v in named.items()), (cfg.name, b)


BOARD_CASES = [(d, b) for d in BOARD_DIRS for b in (dir_boards(d) if TCLSH else [""])]


@needs_tclsh
@pytest.mark.parametrize("board_dir,board", BOARD_CASES, ids=[f"{d}:{b}" for d, b in BOARD_CASES])
def test_the_build_runs_through_with_stubbed_vivado(board_dir, board, tmp_path):
    log = dry_run(board_dir, tmp_path, board)
    cfg = load_config(dir_preset(board_dir))
    ps = processing_system(cfg)
    info = dir_boards(board_dir)[board]
    # the files: the configuration's parameters, the board script, the PS's block design, the package and every
    # RTL module, all existing
    sourced = [rec[1] for rec in log if rec[0] == "SOURCE"]
    assert sourced == [
        "../common/build.tcl",
        str(tmp_path / "vdla_config.tcl"),
        "board.tcl",
        str(FPGA / "common" / f"bd_{ps.name}.tcl"),
    ]
    (added,) = [c[-1].split() for c in calls(log, "add_files") if c[0] == "-norecurse" and c[-1].endswith(".sv")]
    assert added[0] == str(tmp_path / "vdla_pkg.sv")
    rtl = sorted(p for p in (ROOT / "hw" / "rtl").glob("*.sv") if p.name != "vdla_pkg.sv")
    assert [Path(p) for p in added[1:]] == rtl and all(Path(p).is_file() for p in added)
    # the part (the preset's, or the board's package of it) and the board
    part = info.get("package", cfg.part_spec.package)
    assert part.startswith(cfg.part)
    for c in calls(log, "create_project"):
        assert c[c.index("-part") + 1] == part
    (board_part,) = [c[1] for c in calls(log, "set_property") if c[0] == "board_part"]
    assert board_part == info["board_part"] and _norm(board)[:5] in _norm(board_part)
    connections = [c[1] for c in calls(log, "set_property") if c[0] == "board_connections"]
    assert connections == ([info["connections"]] if "connections" in info else [])
    # the PS, the clock, the HP port's width
    props = ps_props(log)
    if ps.name == "ps7":
        assert ["-type", "ip", "-vlnv", "xilinx.com:ip:processing_system7:5.5", "ps7"] in calls(log, "create_bd_cell")
        assert float(props["CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ"]) == cfg.clock_mhz
        assert int(props["CONFIG.PCW_S_AXI_HP0_DATA_WIDTH"]) == cfg.bus_width_bits
        assert props["CONFIG.PCW_USE_S_AXI_HP0"] == props["CONFIG.PCW_USE_FABRIC_INTERRUPT"] == "1"
    else:
        assert ["xilinx.com:ip:zynq_ultra_ps_e:*"] in calls(log, "get_ipdefs")
        assert float(props["CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ"]) == cfg.clock_mhz
        assert int(props["CONFIG.PSU__SAXIGP2__DATA_WIDTH"]) == cfg.bus_width_bits  # S_AXI_HP0_FPD
        for port in ("M_AXI_GP0", "S_AXI_GP2", "IRQ0"):  # M_AXI_HPM0_FPD, S_AXI_HP0_FPD, pl_ps_irq0
            assert props[f"CONFIG.PSU__USE__{port}"] == "1", port
        assert props["CONFIG.PSU__USE__M_AXI_GP1"] == props["CONFIG.PSU__USE__M_AXI_GP2"] == "0"
    # the AXI master's address bits: the package's AXI_ADDR_W is the preset's, within the HP port's
    pkg = (tmp_path / "vdla_pkg.sv").read_text()
    assert int(re.search(r"AXI_ADDR_W\s*=\s*(\d+)", pkg)[1]) == cfg.axi_addr_bits <= cfg.part_spec.addr_bits
    # the register window: the preset's base, where the driver looks for it, inside the PS port's window
    seg = f"{ps.name}/Data/SEG_vdla_0_reg0"
    assert [seg] in calls(log, "get_bd_addr_segs")
    window = {c[0]: c[1] for c in calls(log, "set_property") if c[0] in ("offset", "range")}
    assert int(window["offset"], 16) == cfg.reg_base_addr == board_base_addr(cfg)
    assert ps.gp_window[0] <= cfg.reg_base_addr < ps.gp_window[1]
    span = int(window["range"].rstrip("K")) * 1024
    reg_bits = int(re.search(r"REG_ADDR_BITS\s*=\s*(\d+)", pkg)[1])
    assert 1 << reg_bits <= span == REGISTER_SPAN
    # the outputs pynq.Overlay loads: <name>.bit with <name>.hwh beside it
    copies = [rec[2] for rec in log if rec[0] == "COPY"]
    assert copies == [str(tmp_path / "out" / "vdla.bit"), str(tmp_path / "out" / "vdla.hwh")]


@needs_tclsh
def test_a_board_the_directory_does_not_name_is_refused(tmp_path):
    out = dry_run("kv260", tmp_path, "kv999", ok=False)
    assert "unknown board 'kv999' in board.tcl: its boards are kv260 kr260" in out


@needs_tclsh
@pytest.mark.parametrize("board_dir", ["pynq-z1", "kv260"], ids=["ps7", "ps8"])
def test_the_block_design_matches_the_top_ports(board_dir, tmp_path):
    log = dry_run(board_dir, tmp_path)
    ps = processing_system(load_config(dir_preset(board_dir))).name
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
    rules = [c[c.index("-config") + 1] for c in calls(log, "apply_bd_automation") if "bd_rule:axi4" in c[1]]
    assert intf == {"s_axil"} and any("Master /vdla_0/m_axi" in m for m in rules)
    joined = nets(log)
    if ps == "ps7":  # the automation clocks both ports from FCLK_CLK0 and resets from FCLK_RESET0_N
        assert pins == {"irq_o"} and {"vdla_0/irq_o", "ps7/IRQ_F2P"} in joined
    else:  # pl_clk0 and the Processor System Reset of pl_resetn0, explicit; the automation on that clock
        assert pins == {"irq_o", "clk_i", "rst_ni"}
        assert {"ps8/pl_clk0", "rst_pl0/slowest_sync_clk", "vdla_0/clk_i"} in joined
        assert {"ps8/pl_resetn0", "rst_pl0/ext_reset_in"} in joined
        assert {"rst_pl0/peripheral_aresetn", "vdla_0/rst_ni"} in joined
        assert {"vdla_0/irq_o", "ps8/pl_ps_irq0"} in joined
        for rule in rules:
            cfg = dict(zip(rule.split()[::2], rule.split()[1::2]))
            assert cfg["Clk_master"] == cfg["Clk_slave"] == cfg["Clk_xbar"] == "/ps8/pl_clk0"
        masters = {dict(zip(r.split()[::2], r.split()[1::2]))["Master"] for r in rules}
        assert masters == {"/ps8/M_AXI_HPM0_FPD", "/vdla_0/m_axi"}
        assert any("Slave /ps8/S_AXI_HP0_FPD" in r for r in rules)
    associations = calls(log, "ipx::associate_bus_interfaces")
    clocked = {c[c.index("-busif") + 1] for c in associations if "-busif" in c and c[c.index("-clock") + 1] == "clk_i"}
    assert clocked == {"s_axil", "m_axi"}
    # the clock's reset: what lets the automation drive rst_ni from a Processor System Reset
    assert any(
        "-reset" in c and c[c.index("-reset") + 1] == "rst_ni" and c[c.index("-clock") + 1] == "clk_i"
        for c in associations
    )
    connected = {"clk_i", "rst_ni", "irq_o"} | {f"{b}_{s}" for b in buses for s in buses[b]}
    assert {p for p, d in ports.items() if d == "input"} <= connected
    assert set(ports) - connected == UNCONNECTED


def test_a_register_base_outside_the_ps_port_is_refused():
    """The flow's parameters refuse a register base the PS master port cannot reach, naming the port's range."""
    cfg = load_config("kv260")
    with pytest.raises(ConfigError, match=r"reg_base_addr 0x43c00000 .* inside zynq_ultra_ps_e's M_AXI_HPM0_FPD"):
        tcl_params(from_dict({**cfg.to_dict(), "reg_base_addr": 0x43C0_0000}))
    text = tcl_params(cfg)
    assert "set PS ps8" in text and "set REG_BASE_ADDR 0xA0000000" in text and "set BUS_WIDTH 128" in text
