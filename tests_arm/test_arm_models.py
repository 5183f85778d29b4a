"""Whole models on the boards' CPUs, emulated: ``vdla run`` with the sim backend and the board-side install
(numpy, rich and cryptography, no llvmlite) checks the artifact's signature against the key it trusts and runs
the artifact's ARM code for every CPU step, bit-exact with the host."""

from __future__ import annotations

import numpy as np
import pytest
from emulation import ARCHES, RUNS, guest


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_the_guest_is_the_board_side_install(arch, roots, tmp_path):
    probe = (
        "import platform, importlib.util as u; import numpy, rich, cryptography, vdla.model; "
        "print(platform.machine(), [m for m in ('llvmlite', 'ziglang') if u.find_spec(m)])"
    )
    code, out, err, _ = guest(ARCHES[arch], roots[arch], ["-c", probe], tmp_path)
    assert code == 0, err
    assert out.split() == [ARCHES[arch].machine, "[]"]  # the emulated machine, and no LLVM nor linker


@pytest.mark.parametrize(("model", "arch"), RUNS)
def test_model_runs_native_code_bit_exact_with_the_host(model, arch, compiled, guest_runs):
    code, stdout, stderr, _, outputs = guest_runs[model, arch]
    assert code == 0, stderr[-3000:]
    assert "(native kernels)" in stdout and "warning" not in stderr and "not loaded" not in stderr
    want = compiled[model][2]
    assert set(outputs) == set(want)
    for name, y in want.items():
        assert outputs[name].dtype == y.dtype
        np.testing.assert_array_equal(outputs[name], y, err_msg=f"{model} output {name} on {arch}")
