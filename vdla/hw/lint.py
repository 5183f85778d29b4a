"""The RTL lint gate: ``verilator --lint-only -Wall`` must report nothing.

Every target is linted with the waiver file ``hw/rtl/lint/verilator.vlt`` (each waiver there says why the
warning is expected); any other warning or error fails the gate. The targets are the accelerator's top
(``vdla_top``) with the default preset's package, with ``kv260``'s (a Zynq UltraScale+ board's: a 128-bit bus,
49-bit addresses) and with ``block8``'s (the cocotb bench's), the top of
every cocotb unit bench with that bench's parameters, and the directed assertion bench.

    python -m vdla.hw.lint        # `make lint` runs it; exit status 1 on any warning
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from vdla.config import DEFAULT_PRESET, load_config
from vdla.hw.cocotb_benches import BENCHES
from vdla.hw.rtlgen import REPO, RTL_DIR, package_for
from vdla.hw.toolchain import rtl_sources, verilator_env, verilator_root

LINT_WAIVERS = RTL_DIR / "lint" / "verilator.vlt"
DIRECTED_DIR = REPO / "hw" / "sim" / "directed"


@dataclass(frozen=True)
class LintTarget:
    """One top-level module linted with one configuration's package and parameter overrides."""

    name: str
    top: str
    config: str = DEFAULT_PRESET
    parameters: dict[str, int] = field(default_factory=dict)
    extra_sources: tuple[Path, ...] = ()


def targets() -> list[LintTarget]:
    """What the gate lints: the top for the default preset, kv260 and block8, each unit bench's top, the
    directed bench."""
    out = [LintTarget("top", "vdla_top"), LintTarget("top-kv260", "vdla_top", "kv260")]
    out.append(LintTarget("top-block8", "vdla_top", "block8"))
    out += [LintTarget(f"bench-{b.name}", b.toplevel, "block8", b.parameters) for b in BENCHES.values()]
    out.append(LintTarget("directed-queues", "tb_queues", extra_sources=(DIRECTED_DIR / "tb_queues.sv",)))
    return out


def lint(target: LintTarget, workdir: Path) -> list[str]:
    """Lint one target; returns Verilator's warning and error lines (empty: clean)."""
    package = package_for(load_config(target.config), workdir / target.config)
    cmd = [
        str(verilator_root() / "bin" / "verilator"),
        "--lint-only",
        "-Wall",
        str(LINT_WAIVERS),
        "--top-module",
        target.top,
        *(f"-G{k}={v}" for k, v in target.parameters.items()),
        str(package),
        *map(str, rtl_sources()),
        *map(str, target.extra_sources),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=verilator_env(), check=False)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("%")]
    if proc.returncode and not lines:
        lines = [f"%Error: verilator exited with status {proc.returncode}"]
    return lines


def lint_all() -> dict[str, list[str]]:
    """Lint every target of :func:`targets`; maps each target's name to its warnings (all empty: clean)."""
    with tempfile.TemporaryDirectory() as tmp:
        return {t.name: lint(t, Path(tmp)) for t in targets()}


def main(argv: list[str] | None = None) -> int:
    """Print each target's verdict and warnings; exit status 1 if any target has one."""
    del argv
    results = lint_all()
    for name, lines in results.items():
        print(f"{name}: {'clean' if not lines else f'{len(lines)} warning(s)'}")
        for line in lines:
            print(f"  {line}")
    total = sum(map(len, results.values()))
    print(f"verilator --lint-only -Wall: {total} warning(s) in {len(results)} targets")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
