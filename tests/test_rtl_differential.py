"""Differential test: random valid programs leave identical DRAM on the simulator and the RTL; so do random
depthwise layers compiled to the block-diagonal parts that run MobileNets' depthwise convolutions.

The programs are the campaign's (``vdla fuzz``), drawn by :mod:`vdla.zoo.random_programs`: every instruction,
memory type and EPI flag the configuration builds, one or two virtual threads whose tokens make the result
independent of timing. tests/test_random_programs.py checks that they cover the instruction set, tests/test_fuzz.py
runs the campaign.
"""

from __future__ import annotations

import numpy as np
import pytest
from full_units import BOTH

from vdla.runtime import Device
from vdla.zoo.random_programs import random_program


@pytest.mark.parametrize("config", BOTH, ids=("pynq", "full"))
@pytest.mark.parametrize("seed", range(16))
def test_random_programs_agree(seed, config, rtl_library):
    sim, rtl = Device(config), Device(config, backend="rtl")
    random_program(sim, seed)
    random_program(rtl, seed)
    assert np.array_equal(sim.dram.mem, rtl.dram.mem)


# ---------------------------------------------------------------------------------------------------------
# Random depthwise layers: the compiler's block-diagonal programs (vdla.compiler.blockdiag), joined parts


# (kernel, stride, padding, residual add) of each seed: every form once, the rest of the layer random
DEPTHWISE_FORMS = [
    (3, 1, 1, True),
    (5, 2, 2, False),
    (3, 2, 0, False),
    (5, 1, 2, True),
    (3, 1, 0, False),
    (5, 2, 0, False),
]


def _depthwise_model(seed: int):
    """A random depthwise layer (channels not a multiple of the block, random map size and weights, an
    activation) of the form ``DEPTHWISE_FORMS[seed]`` as a float ONNX model, with calibration data."""
    from onnx import helper, numpy_helper
    from qdq_check import onnx_model

    rng = np.random.default_rng(1000 + seed)
    c, h, w = int(rng.choice([8, 16, 24, 40])), int(rng.integers(5, 13)), int(rng.integers(5, 13))
    k, stride, pad, residual = DEPTHWISE_FORMS[seed]
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.4, (c, 1, k, k)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.2, c).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["d"], pads=[pad] * 4, strides=[stride] * 2, group=c)]
    act = str(rng.choice(["relu6", "relu", "none"]))
    nodes += {
        "relu6": [helper.make_node("Clip", ["d", "lo", "hi"], ["a"])],
        "relu": [helper.make_node("Relu", ["d"], ["a"])],
        "none": [helper.make_node("Identity", ["d"], ["a"])],
    }[act]
    nodes += [helper.make_node("Add" if residual else "Identity", ["a", "x"] if residual else ["a"], ["y"])]
    model = onnx_model(nodes, inits, f"depthwise{seed}", (1, c, h, w), (1, c, oh, ow))
    calib = rng.normal(0, 1, (4, 1, c, h, w)).astype(np.float32)
    return model, calib, rng.normal(0, 1, (1, c, h, w)).astype(np.float32)


@pytest.mark.parametrize("seed", range(len(DEPTHWISE_FORMS)))
def test_random_depthwise_programs_agree(seed, rtl_library):
    """A random depthwise layer compiled to its block-diagonal parts leaves the same outputs on the simulator
    and the RTL, bit for bit, in cycle counts within the cycle model's 5%."""
    pytest.importorskip("onnx")
    from vdla.model import Module
    from vdla.model.pipeline import compile_model

    model, calib, x = _depthwise_model(seed)
    artifact, _ = compile_model(model, calib)
    assert any(s.kind == "accel" and s.layer["op"] == "depthwise_conv2d" for s in artifact.steps)
    runs = {}
    for backend in ("sim", "rtl"):
        mod = Module(artifact, backend)
        runs[backend] = (mod.run({"x": x}), mod.last_report.accel_cycles)
    (out_sim, cyc_sim), (out_rtl, cyc_rtl) = runs["sim"], runs["rtl"]
    np.testing.assert_array_equal(out_sim, out_rtl)
    assert abs(cyc_sim - cyc_rtl) <= 0.05 * cyc_rtl, (cyc_sim, cyc_rtl)
