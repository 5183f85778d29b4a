"""Cycle agreement: the simulator's cycle model against the RTL on the suite of ``vdla.zoo.workloads``.

:func:`cycle_agreement` runs every program of the suite on both backends (each program checks its result
against numpy) and gives one record per program with both cycle counts and the signed error
(model - rtl) / rtl; :func:`cycle_agreement_table` renders the records as Markdown. ``vdla cycle-agreement``
and ``benchmarks/cycle_agreement.py`` both print that table. (Not to be confused with quantization
calibration, ``vdla.graph.calibrate``.)
"""

from __future__ import annotations

from vdla.config import DEFAULT_PRESET
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


def cycle_agreement_table(records: list[dict]) -> str:
    """The records as a Markdown table."""
    lines = [
        "| program | kind | virtual threads | RTL cycles | model cycles | error | GEMM utilization |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['program']} | {r['kind']} | {r['vthreads']} | {r['rtl_cycles']:,} | {r['model_cycles']:,} | "
        f"{r['error']:+.2%} | {r['gemm_utilization']:.1%} |"
        for r in records
    ]
    return "\n".join(lines) + "\n"
