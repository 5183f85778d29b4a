"""Shared fixtures (the backends every semantics test runs on), the tiers and the hermetic cache.

The tiers are markers set here from what a test uses: ``rtl`` (it runs the Verilated RTL: the ``rtl_library`` or
``backend`` fixture on "rtl", or a ``test_rtl_*`` module), ``models`` (whole suite models) and ``conformance``
(the ONNX backend node cases), set by their modules; ``slow`` is the heaviest tier, left to ``make test-all``
(pyproject's ``addopts``). Every test runs with its caches in ``.vdla_cache`` of the checkout (git-ignored),
never in the user's ``~/.cache/vdla``, nor with the user's trusted keys.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from vdla.config import load_config
from vdla.runtime import Device

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".vdla_cache"


def pytest_configure(config: pytest.Config) -> None:
    """Point every cache of vdla at the checkout's ``.vdla_cache`` (workers inherit it), and the trust store at
    a folder of its own there, never the user's: the suite trusts no key unless a test points
    ``VDLA_TRUST_DIR`` at a store of its own (``tmp_path``)."""
    os.environ["VDLA_CACHE_DIR"] = str(CACHE)
    os.environ["VDLA_TRUST_DIR"] = str(CACHE / "trusted-keys")


def _runs_rtl(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    on_rtl = callspec is not None and callspec.params.get("backend") == "rtl"
    return on_rtl or "rtl_library" in getattr(item, "fixturenames", ()) or item.path.name.startswith("test_rtl_")


def _shares_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a module-, package- or session-scoped fixture defined in its own module (computed
    once per process that runs any of its users: under xdist they are kept on one worker)."""
    defs = getattr(item, "_fixtureinfo", None)
    defs = defs.name2fixturedefs if defs is not None else {}
    module = item.nodeid.split("::")[0]
    return any(d[-1].scope != "function" and d[-1].baseid == module for d in defs.values() if d)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Mark the tests that run the RTL ``rtl`` (before ``-m`` selects) and put the users of a module's shared
    fixture in one xdist group; after every other hook, name each test's group in its id for ``--dist
    loadgroup``."""
    for item in items:
        if _runs_rtl(item):
            item.add_marker(pytest.mark.rtl)
        if _shares_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    result = yield
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        _name_groups_in_ids(items)
    return result


def _name_groups_in_ids(items: list[pytest.Item]) -> None:
    """``test_x.py::test_y@GROUP``: the id by which xdist's loadgroup scheduler deals a group to one worker.
    pytest-xdist 3.8 writes it to ``item._nodeid``, which pytest 9 no longer reads (a node's id is ``_id``), so
    every group was dealt test by test and its shared fixture computed on each worker; this writes it where
    pytest reads it (a no-op where xdist's own renaming took)."""
    from _pytest.nodeid import coerce_node_id

    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if groups and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")


@pytest.fixture(autouse=True)
def _module_rng_seeded_per_test(request: pytest.FixtureRequest) -> None:
    """A test module's generator (``RNG`` or ``rng`` at module level) is seeded again for each test from the test's
    id, so the values a test draws do not depend on which tests ran before it in its process (pytest-xdist deals
    tests to its workers in any order)."""
    module = getattr(request, "module", None)
    for name in ("RNG", "rng"):
        if isinstance(getattr(module, name, None), np.random.Generator):
            setattr(module, name, np.random.default_rng(zlib.crc32(request.node.nodeid.encode())))


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


@pytest.fixture
def full_device(backend: str) -> Device:
    """A device of the pynq preset with every optional unit (full_units.FULL) on the backend under test."""
    from full_units import FULL

    return Device(FULL, backend=backend)
