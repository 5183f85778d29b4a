"""Fit on the PYNQ-Z1 part: the resource accounting, and (slow) a full Yosys synthesis of the default preset."""

from __future__ import annotations

import pytest

from vdla.hw.fit import (
    CAPACITY,
    check_elaboration,
    elaboration_faults,
    fit_table,
    parse_cells,
    resources,
    run_fit,
)
from vdla.hw.lut_depth import LogicPath, PathStep

STAT = """
=== design hierarchy ===
    18066 cells
       33   $scopeinfo
        1   BUFG
      205   DSP48E1
      352   INV
     2534   LUT2
       10   LUT6
      120   RAMB36E1
        3   RAMB18E1
     1656   CARRY4
     5610   FDRE
        2   FDSE
      112   RAM32M

   Estimated number of LCs:      14272
"""


def test_resources_from_a_yosys_report():
    cells = parse_cells(STAT)
    assert cells["DSP48E1"] == 205 and cells["CARRY4"] == 1656
    assert resources(cells) == {"LUT": 352 + 2534 + 10 + 4 * 112, "FF": 5612, "DSP48": 205, "BRAM36": 121.5}
    with pytest.raises(RuntimeError, match="no cell statistics"):
        parse_cells("nothing here")


def test_the_table_names_the_deepest_path():
    used = {"LUT": 100, "FF": 10, "DSP48": 1, "BRAM36": 1}
    path = LogicPath(9, "FDRE a -> x_q", "FDRE b (-> y_q).D", (PathStep("l1", "LUT6", "n1"),))
    report = {
        "config": "pynq",
        "part": "xc7z020",
        "tool": "yosys",
        "used": used,
        "capacity": CAPACITY,
        "utilization": {k: used[k] / CAPACITY[k] for k in CAPACITY},
        "fits": True,
        "seconds": 1.0,
        "logic_levels": path.to_dict(),
    }
    table = fit_table(report)
    assert "9 LUT levels (target <= 8 for 100 MHz: NOT met)" in table
    assert "from `FDRE a -> x_q` to `FDRE b (-> y_q).D`" in table
    report["logic_levels"]["by_unit"] = {"u_alu": 9, "u_fifo": 8, "u_regs": 12}
    assert "each unit over the target: u_alu 9, u_regs 12." in fit_table(report)


@pytest.mark.slow
def test_default_preset_fits_the_xc7z020():
    report = run_fit("pynq")
    assert report["fits"], report["used"]
    assert report["used"]["DSP48"] > 100 and report["used"]["BRAM36"] >= 112  # the GEMM core and the buffers
    assert set(report["used"]) == set(CAPACITY)
    levels = report["logic_levels"]
    assert levels["start"] and levels["meets_target"], levels  # the whole design within 8 levels (docs/rtl.md)


# The units whose products are formed into registers at their DSP48E1s' outputs (the load engine's tile
# products, the perf counters' uop-iterations, fetch's tile end) are held there with the rest.
CONTROL_UNITS = ["vdla_fetch", "vdla_fifo", "vdla_token_queue", "vdla_burst_gen", "vdla_store"]
CONTROL_UNITS += ["vdla_load_engine", "vdla_compute_load", "vdla_load", "vdla_insn_check", "vdla_perf"]
CONTROL_UNITS += ["vdla_alu"]  # and the ALU, its MUL registered in its DSP48E1s (two cycles)
CONTROL_UNITS += ["vdla_gemm_core"]  # and the GEMM core, its adder tree split between its two stages


@pytest.mark.slow
@pytest.mark.parametrize("module", CONTROL_UNITS)
def test_control_units_meet_the_timing_proxy(module):
    """Each control unit alone (`vdla fit --module`) is within the 8 LUT levels of 100 MHz: its counts are
    tested through registered flags and down-counters kept a step ahead (docs/rtl.md, Timing proxy)."""
    levels = run_fit("pynq", top=module)["logic_levels"]
    assert levels["levels"] <= 8, levels


def test_yosys_faults_are_found_in_its_log():
    log = (
        "/x/hw/rtl/vdla_acc_rmw.sv:141: Warning: Range select out of bounds on signal `\\ctl_q': Setting result bit"
        " to undef.\n"
        "/x/hw/rtl/vdla_alu.sv:79: Warning: Identifier `\\ctl_i[0].rs' is implicitly declared.\n"
        "/x/hw/rtl/vdla_alu.sv:79: Warning: Identifier `\\ctl_i[0].rs' is implicitly declared.\n"
        "Warning: Replacing memory \\t with list of registers.\n"
    )
    faults = elaboration_faults(log)
    assert len(faults) == 2 and "ctl_q" in faults[0] and "implicitly declared" in faults[1]
    assert elaboration_faults("Warning: Replacing memory \\t with list of registers.\n") == []


@pytest.mark.slow  # a Yosys elaboration of the whole design: make test-all and CI
def test_yosys_reads_the_rtl_as_written():
    """Yosys elaborates the whole design without resolving a name as an implicit wire or a select as undefined
    (the fit would otherwise measure another design: the ALU's shift controls once were)."""
    assert check_elaboration("pynq") == []
