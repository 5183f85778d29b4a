"""The cocotb test benches (hw/sim/cocotb/), built with Verilator through cocotb_tools.runner."""

from __future__ import annotations

import pytest

from vdla.hw.cocotb_benches import BENCHES, run_bench


# each bench verilates its own module and runs its cocotb test (about 10 to 20 s each): make test-all and CI
@pytest.mark.slow
@pytest.mark.parametrize("name", list(BENCHES))
def test_bench(name):
    result = run_bench(name)
    assert result.tests > 0
    assert result.failures == 0, f"see {result.results.parent / 'test.log'}"
