"""Cycle agreement: the simulator's cycle model against the RTL on the suite of ``vdla.zoo.workloads``.

:func:`cycle_agreement` runs every program of the suite on both backends (each program checks its result
against numpy) and gives one record per program with both cycle counts and the signed error
(model - rtl) / rtl; :func:`cycle_agreement_table` renders the records as Markdown. Each record names its
preset, so the records of several presets (every board's: ``--boards``) go in one list, and
:func:`worst_by_preset` / :func:`worst_table` give each preset's worst program. ``vdla cycle-agreement`` and
``benchmarks/cycle_agreement.py`` both print those tables. (Not to be confused with quantization calibration,
``vdla.graph.calibrate``.)
"""

from __future__ import annotations

from vdla.config import DEFAULT_PRESET, board_presets
from vdla.runtime.device import Device
from vdla.zoo.workloads import SUITE


def cycle_agreement(config: str = DEFAULT_PRESET) -> list[dict]:
    """Run the suite on the simulator and on the RTL: one record per program, error as a signed fraction
    (model - rtl) / rtl."""
    sim, rtl = Device(config), Device(config, backend="rtl")
    records = []
    for w in SUITE:
        model, hw = w.run(sim).counters, w.run(rtl).counters
        records.append(
            {
                "config": sim.cfg.name,
                "program": w.name,
                "kind": w.kind,
                "vthreads": w.vthreads,
                "rtl_cycles": hw.cycles,
                "model_cycles": model.cycles,
                "error": (model.cycles - hw.cycles) / hw.cycles,
                "gemm_utilization": round(hw.utilization, 4),
            }
        )
    rtl.backend.close()
    return records


def board_preset_names() -> list[str]:
    """The presets ``--boards`` measures: every board preset (:func:`vdla.config.board_presets`)."""
    return [c.name for c in board_presets()]


def cycle_agreement_table(records: list[dict]) -> str:
    """The records as a Markdown table (with a preset column when they come from several presets)."""
    many = len({r.get("config") for r in records}) > 1
    head = "| preset " if many else ""
    lines = [
        f"{head}| program | kind | virtual threads | RTL cycles | model cycles | error | GEMM utilization |",
        ("| --- " if many else "") + "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        (f"| {r['config']} " if many else "")
        + f"| {r['program']} | {r['kind']} | {r['vthreads']} | {r['rtl_cycles']:,} | {r['model_cycles']:,} | "
        f"{r['error']:+.2%} | {r['gemm_utilization']:.1%} |"
        for r in records
    ]
    return "\n".join(lines) + "\n"


def worst_by_preset(records: list[dict]) -> dict[str, dict]:
    """Per preset (in the records' order): its worst program by |error| (``program``, ``error``) and the worst
    |error| of its GEMM-bound programs (``gemm_error``)."""
    out: dict[str, dict] = {}
    for cfg in dict.fromkeys(r.get("config", DEFAULT_PRESET) for r in records):
        mine = [r for r in records if r.get("config", DEFAULT_PRESET) == cfg]
        worst = max(mine, key=lambda r: abs(r["error"]))
        gemm = [abs(r["error"]) for r in mine if r["kind"] == "gemm"]
        out[cfg] = {"program": worst["program"], "error": worst["error"], "gemm_error": max(gemm, default=0.0)}
    return out


def worst_table(records: list[dict]) -> str:
    """Each preset's worst program as a Markdown table."""
    lines = ["| preset | worst program | error | worst GEMM-bound error |", "| --- | --- | ---: | ---: |"]
    lines += [
        f"| {cfg} | {w['program']} | {w['error']:+.2%} | {w['gemm_error']:.2%} |"
        for cfg, w in worst_by_preset(records).items()
    ]
    return "\n".join(lines) + "\n"
