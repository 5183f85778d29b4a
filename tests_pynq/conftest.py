"""The pynq backend's tests: unmodified driver code on the simulated PYNQ board (tests_pynq/pynq_sim.py, a device
plugin these tests register: imported here, and named in ``VDLA_PYNQ_DEVICES`` for the processes they start),
through the real ``pynq`` package where it is installed (``make test-pynq``) and through the in-project
stand-in of the same PYNQ calls (tests_pynq/standin) where it is not; the run says which."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["VDLA_PYNQ_SIM"] = "pynq"  # before pynq probes its devices
os.environ["VDLA_PYNQ_DEVICES"] = "pynq_sim"  # the simulated board: a device plugin of every process started here
HERE = Path(__file__).parent
os.environ["VDLA_CACHE_DIR"] = str(HERE.parent / ".vdla_cache")  # the checkout's caches, never ~/.cache/vdla
sys.path.insert(0, str(HERE))  # the simulated board, pynq_sim
sys.path.insert(0, str(HERE.parent / "tests"))  # graph builders shared with the main suite

try:
    import pynq

    PYNQ_NOTE = f"pynq {pynq.__version__}: the real package ({Path(pynq.__file__).parent})"
except ImportError as e:
    sys.path.insert(0, str(HERE / "standin"))
    import pynq

    PYNQ_NOTE = (
        f"pynq is NOT installed here ({e}): these tests run against the in-project stand-in of the PYNQ calls "
        f"({HERE / 'standin'}), not the real package"
    )

from pynq_sim import SimulatedBoard  # noqa: E402

from vdla.runtime import Device  # noqa: E402


def pytest_report_header(config) -> str:
    return PYNQ_NOTE


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.write_line(PYNQ_NOTE)


@pytest.fixture(scope="session")
def board() -> SimulatedBoard:
    """The board pynq finds: the simulated one, discovered through its ``_probe_``."""
    dev = pynq.Device.active_device
    assert isinstance(dev, SimulatedBoard), pynq.Device.devices
    return dev


@pytest.fixture(scope="module")
def dev(board) -> Device:
    """A pynq-preset device on the pynq backend (closed at the end of the module: one owner per board)."""
    d = Device("pynq", backend="pynq")
    yield d
    d.backend.close()


@pytest.fixture(scope="module")
def rtl() -> Device:
    """The reference for cycle counts: the rtl backend (reset before every run)."""
    d = Device("pynq", backend="rtl")
    yield d
    d.backend.close()


@pytest.fixture(scope="module")
def sim() -> Device:
    """The reference for results: the simulator."""
    return Device("pynq", backend="sim")
