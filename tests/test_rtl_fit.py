"""Fit on the PYNQ-Z1 part: the resource accounting, and (slow) a full Yosys synthesis of the default preset."""

from __future__ import annotations

import pytest

from vdla.runtime.rtl.fit import CAPACITY, parse_cells, resources, run_fit

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


@pytest.mark.slow
def test_default_preset_fits_the_xc7z020():
    report = run_fit("pynq")
    assert report["fits"], report["used"]
    assert report["used"]["DSP48"] > 100 and report["used"]["BRAM36"] >= 112  # the GEMM core and the buffers
    assert set(report["used"]) == set(CAPACITY)
