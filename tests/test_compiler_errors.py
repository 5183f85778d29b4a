"""Bad input is refused with an error naming the limit that was hit and what would fit."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.compiler import CompileError, Schedule, compile_conv2d, compile_dense
from vdla.graph.epilogue import Epilogue
from vdla.runtime import Device

EPILOGUE_FIELDS = ("bias", "multiplier", "shift", "residual", "rescale", "clip")


def w8(*shape):
    return np.ones(shape, np.int8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dilation": 2}, "dilation"),
        ({"groups": 2}, "groups=2"),
        ({"padding": 16, "kernel": 17}, "4-bit LOAD pad fields: at most 15"),
        ({"padding": 3}, r"smaller than the kernel 3x3 .* at most 2 rows"),
        ({"padding": "same", "kernel": 4}, "odd kernel"),
        ({"stride": 0}, "sh must be a positive integer"),
        ({"shift": 40}, r"shift 40 outside the range \[0, 31\] of a none multiplier"),
        ({"shift": 70, "multiplier": 3}, r"shift 70 outside the range \[0, 63\] of a row multiplier"),
        ({"clip": (0, 300)}, "STORE writes int8"),
        ({"residual": "int16"}, "residual dtype"),
        ({"multiplier": 2.5}, "multiplier must be integer"),
        ({"multiplier": 1 << 40}, "multiplier must fit in int32"),
        ({"bias": np.zeros(5)}, "bias must be integer"),
        ({"bias": np.zeros(5, np.int64)}, r"bias has shape \(5,\), expected \(8,\)"),
        ({"multiplier": np.ones(3, np.int32)}, r"multiplier has shape \(3,\), expected \(8,\)"),
        ({"vthreads": 0}, "vthreads must be a positive integer"),
    ],
)
def test_bad_layer_arguments(kwargs, match):
    k = kwargs.pop("kernel", 3)
    epi = {name: kwargs.pop(name) for name in EPILOGUE_FIELDS if name in kwargs}
    with pytest.raises(CompileError, match=match):
        compile_conv2d((1, 4, 20, 20), w8(8, 4, k, k), epilogue=Epilogue(**epi), **kwargs)


def test_weights_must_be_int8_oihw():
    with pytest.raises(CompileError, match="weights must be int8"):
        compile_conv2d((1, 4, 8, 8), np.ones((8, 4, 3, 3), np.int16))
    with pytest.raises(CompileError, match="do not match 5 input channels"):
        compile_conv2d((1, 5, 8, 8), w8(8, 4, 3, 3))


def test_kernel_larger_than_the_weight_buffer():
    with pytest.raises(CompileError, match=r"a 23x23 kernel needs 529 WGT elements .* holds 512: at most 512 fit"):
        compile_conv2d((1, 8, 30, 30), w8(8, 8, 23, 23), config="block8")


def test_too_many_virtual_threads_names_what_fits():
    with pytest.raises(CompileError, match=r"vthreads=64 .* at most vthreads=\d+ fits"):
        compile_conv2d((1, 16, 8, 8), w8(16, 16, 7, 7), padding=3, vthreads=64)


def test_output_channels_overflowing_the_accumulator_rows():
    with pytest.raises(CompileError, match="output channels fit"):
        ep = Epilogue(bias=np.zeros(8200, np.int32))
        compile_conv2d((1, 8, 2, 2), w8(8200, 8, 1, 1), epilogue=ep, config="block8")


def test_input_row_wider_than_the_stride_field():
    with pytest.raises(CompileError, match="x_stride field: widths up to 65535 fit"):
        compile_conv2d((1, 1, 1, 70000), w8(1, 1, 1, 1))


def test_tensors_larger_than_dram():
    with pytest.raises(CompileError, match="bytes of DRAM"):
        compile_conv2d((64, 64, 256, 256), w8(16, 64, 1, 1))


def test_explicit_schedule_that_does_not_fit():
    with pytest.raises(CompileError, match="does not fit: INP needs"):
        compile_conv2d((1, 64, 56, 56), w8(64, 64, 3, 3), padding=1, schedule=Schedule(4, 56, 56, 4, 2))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "res-inp brings an int8 residual through INP, the layer has no residual"),
        ({"residual": "int32"}, "the layer has a int32 residual"),
    ],
)
def test_residual_in_inp_only_for_an_int8_residual(kwargs, match):
    schedule = Schedule(1, 8, 8, 1, 1, res_inp=True)
    with pytest.raises(CompileError, match=match):
        compile_conv2d((1, 4, 8, 8), w8(8, 4, 3, 3), padding=1, epilogue=Epilogue(**kwargs), schedule=schedule)


def test_run_checks_its_inputs():
    layer = compile_conv2d((1, 4, 8, 8), w8(8, 4, 3, 3), padding=1, epilogue=Epilogue(residual="int8"))
    dev = Device("pynq")
    x = np.zeros((1, 4, 8, 8), np.int8)
    with pytest.raises(CompileError, match="input must be int8 of shape"):
        layer.run(dev, x[:, :3])
    with pytest.raises(CompileError, match="adds a int8 residual"):
        layer.run(dev, x)
    with pytest.raises(CompileError, match="compiled for config 'pynq-z2'"):
        layer.run(Device("block8"), x, residual=np.zeros((1, 8, 8, 8), np.int8))
    plain = compile_conv2d((1, 4, 8, 8), w8(8, 4, 3, 3), padding=1)
    with pytest.raises(CompileError, match="without a residual"):
        plain.run(dev, x, residual=np.zeros((1, 8, 8, 8), np.int8))


def test_dense_checks_its_inputs():
    with pytest.raises(CompileError, match="at least one row"):
        compile_dense(0, w8(4, 4))
    with pytest.raises(CompileError, match=r"dense weights must be \(N, K\)"):
        compile_dense(4, w8(4, 4, 1))
    layer = compile_dense(4, w8(4, 8))
    with pytest.raises(CompileError, match=r"dense input must be \(4, K\)"):
        layer.run(Device("pynq"), np.zeros((3, 8), np.int8))
