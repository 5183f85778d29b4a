"""Shared fixtures: the backends every semantics test runs on."""

from __future__ import annotations

import importlib.util

import pytest

from vdla.runtime import Device

RTL_AVAILABLE = importlib.util.find_spec("vdla.runtime.rtl") is not None


@pytest.fixture(params=["sim", pytest.param("rtl", marks=pytest.mark.skipif(
    not RTL_AVAILABLE, reason="the rtl backend is not built in this checkout"))])
def backend(request) -> str:
    """The name of a backend; semantics tests run on each."""
    return request.param


@pytest.fixture
def device(backend: str) -> Device:
    """A pynq-preset device on the backend under test."""
    return Device("pynq", backend=backend)
