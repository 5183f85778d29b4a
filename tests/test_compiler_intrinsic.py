"""The declarative GEMM intrinsic, tensorization, micro-op lowering and transfer planning."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vdla.compiler import CompileError
from vdla.compiler.intrinsic import Access, Contraction, GemmIntrinsic, conv2d_contraction, dim, tensorize
from vdla.compiler.microcode import Limits, lower_nest, merge_axes, uop_count
from vdla.compiler.transfer import plan_transfers
from vdla.config import load_config


@pytest.mark.parametrize("cfg, lanes", [("pynq", (1, 16, 16)), ("block8", (1, 8, 8)), ("batch2", (2, 16, 16))])
def test_conv2d_tensorizes_on_every_config(cfg, lanes):
    intr = GemmIntrinsic.from_config(load_config(cfg))
    assert dict(intr.lanes) == dict(zip(("n", "i", "o"), lanes))
    t = tensorize(conv2d_contraction(3, 20, 40, 7, 7, 3, 3, 1, 1, 1, 1), intr)
    assert dict(t.binding) == {"n": "b", "o": "oc", "i": "ic"}
    ext = t.blocked_extents
    assert (ext["b"], ext["ic"], ext["oc"]) == (-(-3 // lanes[0]), -(-20 // lanes[1]), -(-40 // lanes[2]))
    assert (ext["ky"], ext["oh"]) == (3, 7)


def test_nest_strides_follow_the_buffer_layouts():
    t = tensorize(conv2d_contraction(1, 32, 32, 4, 6, 3, 3, 2, 2, 1, 1), GemmIntrinsic.from_config(load_config("pynq")))
    layouts = {
        "out": ((0, 1), (24, 1), (6, 1), (1, 1)),
        "lhs": ((0, 1), (117, 1), (13, 1), (1, 1)),
        "rhs": ((18, 1), (9, 1), (3, 1), (1, 1)),
    }
    nest = dict(
        zip(
            ("oc", "oh", "ow", "ic", "ky", "kx"),
            t.nest(
                {"oc": 2, "oh": 4, "ow": 6, "ic": 2, "ky": 3, "kx": 3}, layouts, ("oc", "oh", "ow", "ic", "ky", "kx")
            ),
        )
    )
    assert nest["oh"] == (4, (6, 26, 0))  # stride 2 rows of a 13-wide window
    assert nest["ow"] == (6, (1, 2, 0)) and nest["ic"] == (2, (0, 117, 9)) and nest["oc"] == (2, (24, 0, 18))


def test_tensorize_rejects_a_computation_without_the_intrinsic_roles():
    c = Contraction(
        extents=(("b", 1), ("oc", 4), ("ic", 4), ("j", 4)),
        out=Access("out", (dim("b"), dim("oc"))),
        lhs=Access("inp", (dim("b"), dim("ic"), dim("j"))),
        rhs=Access("wgt", (dim("oc"), dim("ic"), dim("j"))),
        reduce=("ic", "j"),
    )
    with pytest.raises(CompileError, match="lane 'i'.* matches axes \\['ic', 'j'\\]"):
        tensorize(c, GemmIntrinsic.from_config(load_config("pynq")))


def expand(kernel) -> list[tuple[int, int, int]]:
    """Every (dst, src, wgt) the hardware loops visit."""
    out = []
    for o, i in itertools.product(range(kernel.iter_out), range(kernel.iter_in)):
        for u in kernel.uops:
            out.append(tuple(int(u[f] + o * kernel.factor_out[f] + i * kernel.factor_in[f]) for f in range(3)))
    return out


axes = st.lists(st.tuples(st.integers(1, 6), st.tuples(*[st.integers(0, 3000)] * 3)), min_size=1, max_size=5)


@settings(max_examples=80, deadline=None)
@given(nest=axes, base=st.tuples(*[st.integers(0, 50)] * 3))
def test_micro_kernel_visits_every_point_of_the_nest_once(nest, base):
    nest = tuple(nest)
    limits = Limits.of(load_config("pynq"))
    if uop_count(nest, limits) > limits.max_uops:  # five axes of 6 with strides too large for the loops' factors
        with pytest.raises(CompileError, match=f"exceeds the UOP buffer \\({limits.max_uops}\\)"):
            lower_nest(nest, base, limits)
        return
    kernel = lower_nest(nest, base, limits)
    want = [
        tuple(base[f] + sum(i * s[f] for i, (_, s) in zip(idx, nest)) for f in range(3))
        for idx in itertools.product(*(range(e) for e, _ in nest))
    ]
    assert sorted(expand(kernel)) == sorted(want)
    assert len(kernel.uops) == uop_count(nest, limits)
    assert all(max(kernel.factor_out[f], kernel.factor_in[f]) <= limits.max_factor[f] for f in range(3))


def test_contiguous_axes_merge_and_large_strides_stay_in_micro_ops():
    assert merge_axes(((4, (10, 0, 0)), (10, (1, 0, 0))), 16383) == ((40, (1, 0, 0)),)
    limits = Limits.of(load_config("pynq"))
    kernel = lower_nest(((3, (5000, 0, 0)), (7, (1, 0, 0)), (2, (0, 0, 1))), (0, 0, 0), limits)
    assert len(kernel.uops) == 3 and 5000 in kernel.uops[:, 0]  # 5000 exceeds the 11-bit dst factor


@settings(max_examples=80, deadline=None)
@given(
    ext=st.lists(st.integers(1, 5), min_size=1, max_size=4), gaps=st.lists(st.integers(0, 3), min_size=4, max_size=4)
)
def test_transfers_cover_a_box_exactly(ext, gaps):
    strides, s = [], 1
    for e, g in zip(reversed(ext), gaps):  # each axis's DRAM stride is at least the inner box, maybe more
        strides.append(s)
        s = s * e + g
    strides.reverse()
    axes_ = list(zip(ext, strides))
    got = []
    for tr in plan_transfers(100, 7, axes_):
        for r, c in itertools.product(range(tr.y), range(tr.x)):
            got.append((tr.sram + r * tr.x + c, tr.offset + r * tr.stride + c))
    dense = np.arange(int(np.prod(ext))).reshape(ext)
    want = [
        (100 + int(dense[idx]), 7 + sum(i * st_ for i, st_ in zip(idx, strides)))
        for idx in itertools.product(*(range(e) for e in ext))
    ]
    assert sorted(got) == sorted(want)
    if not any(gaps[: len(ext) - 1]):
        assert len(plan_transfers(0, 0, axes_)) == 1  # a contiguous box is one transfer


@settings(max_examples=40, deadline=None)
@given(nest=axes, base=st.tuples(*[st.integers(0, 50)] * 3))
def test_pinned_outer_axis_drives_the_outer_loop(nest, base):
    """An init GEMM steps its bias rows with the outer loop: with pin_outer the first axis is the outer loop
    (a unit axis leaves iter_out at 1) and the kernel still visits every point once."""
    nest = tuple((e, (s[0] % 2000, s[1] % 2000, s[2] % 1000)) if k == 0 else (e, s) for k, (e, s) in enumerate(nest))
    limits = Limits.of(load_config("pynq"))
    kernel = lower_nest(nest, base, limits, pin_outer=True)
    ext, strides = nest[0]
    assert kernel.iter_out == ext and (ext == 1 or kernel.factor_out == strides)
    want = [
        tuple(base[f] + sum(i * s[f] for i, (_, s) in zip(idx, nest)) for f in range(3))
        for idx in itertools.product(*(range(e) for e, _ in nest))
    ]
    assert sorted(expand(kernel)) == sorted(want)
    assert len(kernel.uops) == uop_count(nest, limits, pin_outer=True)
