"""Ahead-of-time CPU code: objects for the boards' CPUs, and a host shared object bit-exact with the JIT."""

import importlib.util

import numpy as np
import pytest

from vdla.cpu_fallback import aot, jit
from vdla.cpu_fallback.native import (
    HOST,
    TARGETS,
    CpuTarget,
    NativeCodeError,
    NativeLibrary,
    kernel_symbol,
    machine,
    resolve_target,
    target_for_machine,
)
from vdla.cpu_fallback.specs import (
    make_chain,
    make_conv2d,
    make_dense,
    make_global_avg_pool,
    make_im2col,
    make_pack,
    make_pool2d,
    make_reduce,
    make_softmax,
    make_table,
    make_topk,
    make_unpack,
    spec_inputs,
)
from vdla.cpu_fallback.stacking import resolve_steps
from vdla.graph import ew
from vdla.graph.types import TensorType, UnsupportedError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason="the aot extra is missing")

# ELF header: class (byte 4: 1 = 32-bit, 2 = 64-bit), data (byte 5: 1 = little endian), e_machine (bytes 18-19)
EM_ARM, EM_AARCH64, EM_X86_64 = 40, 183, 62
ELF = {"armv7-linux-gnueabihf": (1, EM_ARM), "aarch64-linux-gnu": (2, EM_AARCH64), "x86_64-linux-gnu": (2, EM_X86_64)}
ET_REL, ET_DYN = 1, 3


def elf_header(code: bytes) -> tuple[int, int, int, int]:
    """(class, data encoding, type, machine) of an ELF file."""
    assert code[:4] == b"\x7fELF"
    return code[4], code[5], int.from_bytes(code[16:18], "little"), int.from_bytes(code[18:20], "little")


def _t(shape, dtype="int8"):
    return TensorType(shape, dtype)


def _requantize_chain():
    rng = np.random.default_rng(1)
    m = rng.integers(2**29, 2**30, (1, 8, 1, 1), dtype=np.int32)
    r = resolve_steps(_t((1, 8, 6, 6), "int32"), [ew.requantize(m, np.int32(38)), ew.relu(), ew.clip(0, 100)])
    return make_chain((_t((1, 8, 6, 6), "int32"), *r.operand_types), r.steps), [m]


def _conv_with_epilogue():
    rng = np.random.default_rng(2)
    m = rng.integers(2**29, 2**30, (1, 8, 1, 1), dtype=np.int32)
    r = resolve_steps(None, [ew.requantize(m, 40), ew.relu()])
    spec = make_conv2d(_t((1, 8, 9, 10)), _t((8, 1, 3, 3)), 1, 1, 1, 8, r.operand_types, r.steps)
    return spec, [m]


def representative_specs():
    """Kernels of the models' CPU steps: requantize chains, int8 convolution and dense (with scratch),
    pooling, softmax (of float32 and of int8), layout packing (and im2col packed), reductions, top-k and a
    float32 table."""
    chain, chain_ops = _requantize_chain()
    conv, conv_ops = _conv_with_epilogue()
    entries = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    return [
        (chain, chain_ops),
        (conv, conv_ops),
        (make_conv2d(_t((1, 4, 7, 7)), _t((6, 4, 3, 3)), 2, 1), []),
        (make_dense(_t((2, 64)), _t((10, 64))), []),
        (make_pool2d(_t((1, 8, 9, 9)), "max", 3, 2, 1), []),
        (make_pool2d(_t((1, 3, 8, 8), "float32"), "avg", 2, 2), []),
        (make_global_avg_pool(_t((1, 16, 7, 7), "float32")), []),
        (make_softmax(_t((3, 37), "float32")), []),
        (make_pack(_t((1, 20, 5, 5)), 1, 16), []),
        (make_unpack(_t((1, 2, 5, 5, 1, 16)), 20), []),
        (make_reduce(_t((4, 33), "float32"), "sum", (0,)), []),
        (make_topk(_t((2, 50), "float32"), 5), []),
        (make_im2col(_t((1, 3, 17, 15)), 3, 2, 1, packed=(1, 16)), []),
        (make_softmax(_t((1, 4, 16, 9)), 2, scale=0.05), []),
        (make_table(_t((2, 50)), _t((256,), "float32")), [entries]),
    ]


def _inputs(spec, operands, rng):
    arrays = []
    types = spec_inputs(spec)
    for t in types[: len(types) - len(operands)]:
        if t.dtype == "float32":
            arrays.append(rng.standard_normal(t.shape).astype(np.float32))
        else:
            info = np.iinfo(t.np_dtype)
            arrays.append(rng.integers(max(info.min, -(2**20)), min(info.max, 2**20), t.shape, dtype=t.np_dtype))
    return [*arrays, *operands]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_llvmlite_emits_objects_for_every_target(name):
    """The x86 wheel's LLVM emits ELF32-ARM for the Cortex-A9 and AArch64 for the A53 (and x86-64)."""
    spec, _ = _requantize_chain()
    cls, data, kind, machine = elf_header(aot.compile_object(spec, TARGETS[name]))
    assert (cls, machine) == ELF[name] and data == 1 and kind == ET_REL


# zig links each board's libc stubs on first use (tens of seconds a target): make test-all, CI and make test-arm
@pytest.mark.slow
@pytest.mark.parametrize("name", ["armv7-linux-gnueabihf", "aarch64-linux-gnu"])
def test_linked_board_code_is_a_shared_object_of_the_board(name):
    spec, _ = _requantize_chain()
    lib = aot.build_library([spec, make_softmax(_t((3, 37), "float32"))], TARGETS[name])
    cls, _, kind, machine = elf_header(lib.code)
    assert (cls, machine) == ELF[name] and kind == ET_DYN
    assert kernel_symbol(spec).encode() in lib.code and lib.sha256 == aot.sha256(lib.code)


def _jit_cpu_target() -> CpuTarget:
    """The host triple with the JIT's CPU and features: code built the same way as the JIT's."""
    e = jit.engine()
    base = target_for_machine("x86_64")
    return CpuTarget("host-jit", base.triple, e.cpu, e.features, base.zig, base.machines)


@pytest.fixture(scope="module")
def host_library():
    if machine() != "x86_64":
        pytest.skip("the host is not x86-64")
    specs = representative_specs()
    return specs, aot.build_library([s for s, _ in specs], _jit_cpu_target()).load()


@pytest.mark.parametrize("index", range(len(representative_specs())))
def test_host_shared_object_is_bit_exact_with_the_jit(host_library, index):
    specs, loaded = host_library
    spec, operands = specs[index]
    arrays = _inputs(spec, operands, np.random.default_rng(index))
    got = loaded.kernel(spec)(*arrays)
    want = jit.get_kernel(spec)(*arrays)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit, NaN payloads included
    if spec.out.dtype != "float32":
        np.testing.assert_array_equal(got, spec.evaluate(*arrays))


def test_native_kernel_refuses_arrays_it_was_not_compiled_for(host_library):
    specs, loaded = host_library
    spec, _ = specs[4]  # max pool on int8 (1, 8, 9, 9)
    kernel = loaded.kernel(spec)
    x = np.zeros((1, 8, 9, 9), np.int8)
    with pytest.raises(UnsupportedError, match="compiled for int8"):
        kernel(x.astype(np.int32))
    with pytest.raises(UnsupportedError, match="C-contiguous"):
        kernel(np.zeros((1, 8, 9, 18), np.int8)[..., ::2])
    with pytest.raises(UnsupportedError, match="overlap"):
        kernel(x, out=x.reshape(-1)[: spec.out.size].reshape(spec.out.shape))


def test_a_library_lacking_a_kernel_or_with_another_hash_is_refused(host_library):
    _, loaded = host_library
    with pytest.raises(NativeCodeError, match="no kernel for softmax"):
        loaded.kernel(make_softmax(_t((5, 5), "float32")))
    lib = loaded.lib
    bad = NativeLibrary(lib.target, lib.code[:-1] + bytes([lib.code[-1] ^ 1]), lib.sha256, lib.kernels)
    with pytest.raises(NativeCodeError, match="corrupt"):
        bad.load()


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(NativeCodeError, match="known targets are host, armv7-linux-gnueabihf, aarch64-linux-gnu"):
        resolve_target("armv6-linux")
    assert resolve_target(HOST) == target_for_machine(machine())


def test_missing_linker_names_the_extra(monkeypatch):
    monkeypatch.setattr(aot.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(aot.LinkerError, match=r"pip install 'vdla\[aot\]'"):
        aot.linker_command()


FMA_OPS = ("exp", "sigmoid", "tanh", "log", "erf", "softplus", "gelu", "mish", "swish", "elu", "pow", "round")
OPERANDS = {"swish": (1.0,), "elu": (1.0,), "pow": (np.float32(1.7),)}


@pytest.mark.parametrize("op", FMA_OPS)
def test_code_for_a_cpu_without_fma_rounds_as_the_jit_does(op):
    """The portable x86-64 target has no FMA (like the Cortex-A9): its fused multiply-adds are computed in
    float64 rounded to odd and its rounding to integers inline (the A9 has no rounding instruction), and both
    must give the hardware's results (the JIT's) bit for bit, on 60,000 values of every magnitude and the
    special ones (ties and signed zeros included for round)."""
    e = jit.engine()
    if not e.traits.fma:
        pytest.skip("this host has no FMA to compare with")
    target = TARGETS["x86_64-linux-gnu"]
    assert not jit.cpu_traits(target.triple, target.features).fma
    rng = np.random.default_rng(len(op))
    x = np.concatenate(
        [
            rng.standard_normal(20000) * 4,
            rng.uniform(-90, 90, 20000),
            np.exp(rng.uniform(-30, 30, 20000)),
            [0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, np.nan, 88.7, -103.9],
            [0.5, -0.5, 1.5, 2.5, -2.5, -0.3, 8388607.5, -8388607.5, 8388608.0, 16777217.0, 3e9, -3e9],
        ]
    ).astype(np.float32)
    if op == "log":
        x = np.abs(x)
    operands = OPERANDS.get(op, ())
    r = resolve_steps(_t(x.shape, "float32"), [ew.Step(op, operands)])
    spec = make_chain((_t(x.shape, "float32"), *r.operand_types), r.steps)
    got = aot.build_library([spec], target).load().kernel(spec)(x)
    want = jit.get_kernel(spec)(x)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()  # NaN as NaN: its sign and payload are the CPU's
    differ = np.flatnonzero(got.view(np.uint32)[~nan] != want.view(np.uint32)[~nan])
    assert differ.size == 0, (x[~nan][differ[:5]], got[~nan][differ[:5]], want[~nan][differ[:5]])


@pytest.mark.parametrize("scale,zero_point", [(0.0385, 3), (1e-3, 0), (7.0, -5), (0.1, -128), (1e-30, 127), (3e30, 0)])
def test_quantize_in_integers_equals_the_oracle(monkeypatch, scale, zero_point):
    """A CPU whose float division is slow (the boards' Cortex-A9 and A53) quantizes float32 by constants in integers
    (ew_emit.threshold_quantize): run here as the portable x86-64 code with that trait, it must equal the
    oracle on every float class: every threshold and its neighbours, random bit patterns of every magnitude,
    subnormals, signed zeros and the infinities."""
    from vdla.cpu_fallback.codegen import CpuTraits
    from vdla.graph.oracle import ew_step, key_floats, quantize_thresholds

    target = TARGETS["x86_64-linux-gnu"]
    monkeypatch.setattr(jit, "cpu_traits", lambda triple, features: CpuTraits(fma=False, fast_divide=False))
    step = ew.EwStep("quantize")
    thresholds = quantize_thresholds(step, scale, zero_point).astype(np.int64)
    rng = np.random.default_rng(zero_point + 200)
    near = key_floats((thresholds[1:-1] + np.arange(-3, 4)[:, None]).ravel())
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1e-39, -1e-39, 3e38, -3e38], np.float32)
    bits = rng.integers(-(2**31), 2**31, 50000).astype(np.int32).view(np.float32)
    x = np.concatenate([rng.standard_normal(50000).astype(np.float32) * np.float32(scale * 60), near, specials, bits])
    x = x[~np.isnan(x)]
    r = resolve_steps(_t(x.shape, "float32"), [ew.quantize(scale, zero_point)])
    spec = make_chain((_t(x.shape, "float32"), *r.operand_types), r.steps)
    got = aot.build_library([spec], target).load().kernel(spec)(x)
    want = ew_step(step, x, "float32", [scale, zero_point], "int8")
    differ = np.flatnonzero(got != want)
    assert differ.size == 0, (x[differ[:5]], got[differ[:5]], want[differ[:5]])


def test_quantize_thresholds_refuse_a_scale_that_is_not_positive():
    from vdla.graph.oracle import quantize_thresholds

    step = ew.EwStep("quantize")
    assert quantize_thresholds(step, 0.0, 0) is None
    assert quantize_thresholds(step, -0.5, 0) is None
    assert quantize_thresholds(step, float("nan"), 0) is None


@pytest.mark.parametrize(
    "x,w,stride,padding,groups",
    [
        ((1, 8, 9, 10), (8, 1, 3, 3), 1, 1, 8),  # depthwise
        ((1, 4, 7, 7), (6, 4, 3, 3), 2, 1, 1),
        ((1, 160, 6, 21), (8, 160, 3, 3), 1, 1, 1),  # 1,440 terms: the float path sums in two chunks
        ((2, 3, 17, 19), (16, 3, 7, 7), 2, 3, 1),
    ],
)
def test_int8_convolution_in_integer_lanes_equals_the_float_fma_one(monkeypatch, x, w, stride, padding, groups):
    """On ARM (no CpuTraits.float_int8_dot) the int8 convolution sums in int32 SIMD lanes: run here as the
    portable x86-64 code with that trait, it equals the JIT's float32-FMA sums and the numpy reference, with
    its requantizing epilogue."""
    from vdla.cpu_fallback.codegen import CpuTraits

    target = TARGETS["x86_64-linux-gnu"]
    monkeypatch.setattr(jit, "cpu_traits", lambda triple, features: CpuTraits(float_int8_dot=False))
    rng = np.random.default_rng(x[1])
    m = rng.integers(2**29, 2**30, (1, w[0], 1, 1), dtype=np.int32)
    r = resolve_steps(None, [ew.requantize(m, 40), ew.relu()])
    spec = make_conv2d(_t(x), _t(w), stride, padding, 1, groups, r.operand_types, r.steps)
    arrays = [rng.integers(-128, 128, x).astype(np.int8), rng.integers(-128, 128, w).astype(np.int8), m]
    got = aot.build_library([spec], target).load().kernel(spec)(*arrays)
    np.testing.assert_array_equal(got, jit.get_kernel(spec)(*arrays))
    np.testing.assert_array_equal(got, spec.evaluate(*arrays))
