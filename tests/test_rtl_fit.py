"""`vdla fit`: the resource accounting of both families, the report, a Yosys elaboration of the whole design
(slow), and (``synth``: make fit-check) a full synthesis that reproduces the committed fit of the default preset
and the control units' syntheses against the timing proxy."""

from __future__ import annotations

import pytest

from vdla.config import load_config
from vdla.hw.fit import (
    check_elaboration,
    committed_fit,
    elaboration_faults,
    fit_table,
    parse_cells,
    resources,
    run_fit,
    synth_settings,
)
from vdla.hw.lut_depth import LogicPath, PathStep
from vdla.parts import get_part

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


XCUP_STAT = """
    9000 cells
      200   DSP48E2
      100   LUT6
       60   RAMB36E2
        5   RAMB18E2
       16   URAM288
       10   RAM64M8
        4   RAM32M16
        2   RAM512X1S
       50   CARRY8
      700   FDRE
"""


def test_resources_from_a_yosys_report():
    cells = parse_cells(STAT)
    assert cells["DSP48E1"] == 205 and cells["CARRY4"] == 1656
    assert resources(cells) == {"LUT": 352 + 2534 + 10 + 4 * 112, "FF": 5612, "DSP": 205, "BRAM36": 121.5, "URAM": 0}
    with pytest.raises(RuntimeError, match="no cell statistics"):
        parse_cells("nothing here")


def test_resources_of_ultrascale_plus_cells():
    """DSP48E2, RAMB36E2/RAMB18E2, URAM288 and the UltraScale+ LUT RAMs (8 LUTs each: a whole SLICEM)."""
    used = resources(parse_cells(XCUP_STAT))
    assert used == {"LUT": 100 + 8 * (10 + 4 + 2), "FF": 700, "DSP": 200, "BRAM36": 62.5, "URAM": 16}


def test_synthesis_settings_per_family():
    assert synth_settings(load_config("pynq-z2")).startswith("synth_xilinx -family xc7 -flatten")
    assert synth_settings(load_config("aup-zu3")).startswith("synth_xilinx -family xcup -flatten")  # no URAM
    assert synth_settings(load_config("kv260")).startswith("synth_xilinx -family xcup -uram -flatten")


def test_the_table_shows_budget_margins_levels_and_units():
    part = get_part("xc7z020")
    used = {"LUT": 40_000, "FF": 10, "DSP": 100, "BRAM36": 100, "URAM": 0}
    path = LogicPath(9, "FDRE a -> x_q", "FDRE b (-> y_q).D", (PathStep("l1", "LUT6", "n1"),))
    report = {
        "config": "pynq-z2",
        "part": "xc7z020",
        "package": part.package,
        "boards": ["PYNQ-Z2"],
        "clock_mhz": 100.0,
        "tool": "yosys",
        "budget": part.budget(used),
        "seconds": 1.0,
        "logic_levels": path.to_dict(8),
        "units": {
            "u_compute.u_acc_rmw.u_alu": {"LUT": 15_000.5, "FF": 1000, "DSP": 64, "BRAM36": 0, "URAM": 0},
            "u_wgt": {"LUT": 0, "FF": 0, "DSP": 0, "BRAM36": 64, "URAM": 0},
            "(top)": {"LUT": 10, "FF": 5, "DSP": 0, "BRAM36": 0, "URAM": 0},
        },
    }
    table = fit_table(report, units=2)
    assert "| LUT | 40,000 | 53,200 | 75.2% | 70% (37,240) | -5.2% (-2,760) |" in table
    assert "| BRAM36 | 100 | 140 | 71.4% | 80% (112) | +8.6% (+12) |" in table
    assert "URAM" not in table.split("Within")[0]  # the part has none and none is used
    assert "| average of DSP/BRAM | | | 58.4% | 70% | +11.6% |" in table
    assert "Within the budget: **NO**" in table
    assert "9 LUT levels (budget <= 8 at 100 MHz: NOT met)" in table
    assert "from `FDRE a -> x_q` to `FDRE b (-> y_q).D`" in table
    assert "| `u_compute.u_acc_rmw.u_alu` | 15,000 | 1,000 | 64 | 0 | 0 |" in table
    assert "| `(top)` | 10 | 5 | 0 | 0 | 0 |\n| 1 other unit | 0 | 0 | 0 | 64 | 0 |" in table
    report["logic_levels"]["by_unit"] = {"u_alu": 9, "u_fifo": 8, "u_regs": 12}
    assert "each unit over the budget: u_alu 9, u_regs 12." in fit_table(report)


@pytest.mark.synth
def test_a_synthesis_reproduces_the_committed_fit(tmp_path):
    """Yosys is deterministic: the default preset's synthesis gives its committed record's figures (make fit
    wrote them; tests/test_fit_records.py checks they are current and within the budget)."""
    report = run_fit("pynq-z2", workdir=tmp_path)
    committed = committed_fit("pynq-z2")
    assert committed is not None and report["rtl_hash"] == committed["rtl_hash"]
    assert report["used"] == committed["used"]
    assert report["logic_levels"]["levels"] == committed["logic_levels"]["levels"]
    assert report["units"] == committed["units"]


# The units whose products are formed into registers at their DSP48E1s' outputs (the load engine's tile
# products, the perf counters' uop-iterations, fetch's tile end) are held there with the rest.
CONTROL_UNITS = ["vdla_fetch", "vdla_fifo", "vdla_token_queue", "vdla_burst_gen", "vdla_store"]
CONTROL_UNITS += ["vdla_load_engine", "vdla_compute_load", "vdla_load", "vdla_insn_check", "vdla_perf"]
CONTROL_UNITS += ["vdla_alu"]  # and the ALU, its MUL registered in its DSP48E1s (two cycles)
CONTROL_UNITS += ["vdla_gemm_core"]  # and the GEMM core, its adder tree split between its two stages


@pytest.mark.synth
@pytest.mark.parametrize("module", CONTROL_UNITS)
def test_control_units_meet_the_timing_proxy(module):
    """Each control unit alone (`vdla fit --module`) is within the 8 LUT levels of 100 MHz: its counts are
    tested through registered flags and down-counters kept a step ahead (docs/rtl.md, Timing proxy)."""
    levels = run_fit("pynq-z2", top=module)["logic_levels"]
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
    assert check_elaboration("pynq-z2") == []
