"""Shared fixtures: the backends every semantics test runs on."""

from __future__ import annotations

import pytest

from vdla.config import load_config
from vdla.runtime import Device


@pytest.fixture(scope="session")
def rtl_library():
    """The Verilated accelerator for the pynq preset, built once per session (cached across sessions)."""
    from vdla.runtime.rtl import build

    return build(load_config("pynq")).library


@pytest.fixture(params=["sim", "rtl"])
def backend(request) -> str:
    """The name of a backend; semantics tests run on each."""
    if request.param == "rtl":
        request.getfixturevalue("rtl_library")
    return request.param


@pytest.fixture
def device(backend: str) -> Device:
    """A pynq-preset device on the backend under test."""
    return Device("pynq", backend=backend)
