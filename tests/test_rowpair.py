"""Row pairing (``vdla.graph.rowpair``): two rows of a tensor of few channels side by side as channels.

* :func:`row_pairing` and :func:`pair_weights` against numpy: a convolution over a paired input into a paired
  output equals the pair of the convolution, for kernels 1 to 5, strides 1 and 2, padding on either side;
  the forms that are no convolution are refused;
* the rows-only im2col window of the stem (``vdla.graph.im2col``);
* the pass on a quantized model with a stem, a 3x3 layer between paired tensors, a concat of paired values,
  a 1x1 layer the concat forces to pair and an unpairing stride-2 layer: what pairs, the lowered graph's
  values, bit-exact on sim and rtl against the interpreter of the graph before the rewrite, the network's MACs
  kept and fewer cycles;
* random chains of narrow convolutions and concats: the paired graph computes the same outputs, and those
  that pair run bit-exact on sim and rtl;
* the command line's ``--no-pair-rows`` (in ``tests/test_quantize.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from full_units import FULL
from qdq_check import qdq_conv

from vdla.graph import Graph, Node, TensorType, oracle
from vdla.graph.copies import accelerator_copies
from vdla.graph.im2col import im2col_convs, im2col_window
from vdla.graph.interp import evaluate
from vdla.graph.qdq import lower_qdq
from vdla.graph.rowpair import (
    MACS,
    PAIR,
    PHASED,
    choose_pairings,
    choose_phases,
    edge_mask,
    pair_rows,
    pair_weights,
    paired_order,
    row_pairing,
)
from vdla.graph.tables import quantize_early, tabulate_chains
from vdla.graph.verify import verify
from vdla.graph.window import Window
from vdla.model import Module
from vdla.model.pipeline import compile_graph_model


def pair(x: np.ndarray) -> np.ndarray:
    """pair(x)[n, h * C + c, Y, X] = x[n, c, 2 * Y + h, X], by its definition."""
    n, c, h, w = x.shape
    out = np.empty((n, PAIR * c, h // PAIR, w), x.dtype)
    for half in range(PAIR):
        out[:, half * c : (half + 1) * c] = x[:, :, half::PAIR]
    return out


def pair_phase(x: np.ndarray, phase: int) -> np.ndarray:
    """pair(x) with its rows paired from ``-phase``: row ``2 * Y + h - phase`` at (h, Y), zero outside x."""
    return pair(np.pad(x, ((0, 0), (0, 0), (phase, phase), (0, 0)))) if phase else pair(x)


def _conv(x: np.ndarray, w: np.ndarray, stride, pads) -> np.ndarray:
    return oracle.conv2d(x, w, Window(w.shape[2:], stride, (1, 1), pads)).astype(np.int64)


CONVS = [  # (h, kernel rows, stride, top, bottom)
    (8, 1, 1, 0, 0),
    (8, 3, 1, 1, 1),
    (12, 3, 2, 1, 1),
    (12, 3, 2, 1, 0),
    (16, 5, 1, 2, 2),
    (16, 5, 2, 2, 1),
    (10, 2, 2, 0, 0),
    (8, 4, 1, 2, 1),
]


@pytest.mark.parametrize("h,kh,stride,top,bottom", CONVS)
@pytest.mark.parametrize("fi,fo", [(1, 2), (2, 2), (2, 1)])
def test_a_convolution_over_paired_rows_is_the_pairing_of_the_convolution(h, kh, stride, top, bottom, fi, fo):
    rng = np.random.default_rng(h * 100 + kh * 10 + stride + fi + 3 * fo)
    x = rng.integers(-128, 128, (2, 5, h, 7)).astype(np.int8)
    w = rng.integers(-128, 128, (6, 5, kh, 3)).astype(np.int8)
    want = _conv(x, w, (stride, 1), (top, bottom, 1, 1))
    oh = want.shape[2]
    rf = row_pairing(kh, stride, top, h, oh, fi, fo)
    if fi == 2 and fo == 1 and stride == 1 or oh % fo:
        assert rf is None  # an unpairing stride-1 convolution, or odd output rows to pair
        return
    assert rf is not None
    got = _conv(pair(x) if fi == 2 else x, pair_weights(w, rf, fi, fo), (rf.stride, 1), (rf.top, rf.bottom, 1, 1))
    np.testing.assert_array_equal(got, pair(want) if fo == 2 else want)


@pytest.mark.parametrize("h,kh,stride,top,bottom", CONVS)
@pytest.mark.parametrize("pi,po", [(0, 1), (1, 0), (1, 1)])
def test_a_convolution_between_phased_pairings_is_the_pairing_of_the_convolution(h, kh, stride, top, bottom, pi, po):
    """Rows paired from -1 (phase 1) on either side: the paired convolution over the phased pair of x, its
    output halves outside the tensor zeroed (:func:`edge_mask`), is the phased pair of the convolution. A 3x3
    convolution of stride 1 between opposite phases reads two paired rows, not three."""
    rng = np.random.default_rng(h * 100 + kh * 10 + stride + 7 * pi + 3 * po)
    x = rng.integers(-128, 128, (2, 5, h, 7)).astype(np.int8)
    w = rng.integers(-128, 128, (6, 5, kh, 3)).astype(np.int8)
    want = _conv(x, w, (stride, 1), (top, bottom, 1, 1))
    oh = want.shape[2]
    rf = row_pairing(kh, stride, top, h, oh, 2, 2, pi, po)
    if rf is None:
        assert oh % 2  # odd output rows do not pair
        return
    got = _conv(pair_phase(x, pi), pair_weights(w, rf, 2, 2), (rf.stride, 1), (rf.top, rf.bottom, 1, 1))
    if po:
        got[:, edge_mask(np.arange(12), oh)] = 0
    np.testing.assert_array_equal(got, pair_phase(want, po))
    if (kh, stride, top) == (3, 1, 1):
        assert rf.kernel == (2 if pi != po else 3)
    assert row_pairing(kh, stride, top, h, oh, 1, 2, 1, po) is None  # an unpaired input has no phase


def test_row_pairing_refuses_odd_rows():
    assert row_pairing(3, 1, 1, 9, 9, 2, 2) is None  # 9 input rows do not pair
    assert row_pairing(3, 2, 1, 10, 5, 1, 2) is None  # 5 output rows do not pair


def test_the_paired_weights_keep_every_tap_once():
    w = np.arange(1, 8 * 4 * 3 * 3 + 1, dtype=np.int32).reshape(8, 4, 3, 3)
    rf = row_pairing(3, 1, 1, 8, 8, 2, 2)
    assert (rf.kernel, rf.stride, rf.top, rf.bottom) == (3, 1, 1, 1)
    paired = pair_weights(w, rf, 2, 2)
    assert paired.shape == (16, 8, 3, 3)
    assert sorted(paired[paired != 0].tolist()) == sorted(np.tile(w.ravel(), PAIR).tolist())  # each output half


def test_the_im2col_window_takes_the_kernel_rows_alone_where_that_packs_as_well():
    assert im2col_window(3, 3, 3, 16) == (3, 3)  # 27 channels: 2 blocks, against 3 taps of 9
    assert im2col_window(3, 7, 7, 16) == (7, 7)  # ResNet-18's C1: 10 blocks, against 7 taps of 21
    assert im2col_window(3, 5, 3, 16) == (5, 1)  # a paired stem: 15 channels x 3 taps = 3 blocks, as 45
    assert im2col_window(16, 3, 3, 16) is None


# ---------------------------------------------------------------------------------------------------------
# The pass on a quantized model

S = 0.05


def _qconv(nodes, params, rng, name, x, c_in, c_out, k, stride, pad, act="relu"):
    """:func:`qdq_conv` and a requantization of its output."""
    y = qdq_conv(nodes, params, rng, name, x, c_in, c_out, k, S, stride=stride, pad=pad, act=act)
    nodes += [
        Node("quantize", (y,), f"{name}_q", {"scale": S, "zero_point": 0}),
        Node("dequantize", (f"{name}_q",), f"{name}_d", {"scale": S, "zero_point": 0}),
    ]
    return f"{name}_d"


def _stem(seed: int) -> tuple[np.random.Generator, list[Node], dict[str, np.ndarray], str]:
    """(rng, nodes, params, stem's value) of a model's start: the image quantized, the stem: 3x3 stride 2 (3 -> 8)."""
    rng = np.random.default_rng(seed)
    nodes = [
        Node("quantize", ("image",), "xq", {"scale": S, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": S, "zero_point": 0}),
    ]
    params: dict[str, np.ndarray] = {}
    return rng, nodes, params, _qconv(nodes, params, rng, "stem", "xd", 3, 8, 3, 2, 1)


def narrow_model(seed: int = 0, image: int = 32) -> Graph:
    """image -> stem: 3x3 stride 2 (3 -> 8) -> p: 1x1 (8 -> 16) -> a: 3x3 over p's channels 8..15 (8 -> 8), sigmoid
    -> concat(p, a) (24) -> b: 1x1 (24 -> 16) -> c: 3x3 stride 2 (16 -> 16), a C2f block's shape. The stem's and
    a's 8 channels are narrow; the concat pairs with a, p with the concat, p's slice (a selection convolution,
    since the concat reads p whole) and b because they cannot unpair; c unpairs."""
    rng, nodes, params, stem = _stem(seed)
    p = _qconv(nodes, params, rng, "p", stem, 8, 16, 1, 1, 0)
    h = image // 2
    nodes += [
        Node("slice", (p,), "half", {"starts": [0, 8, 0, 0], "stops": [1, 16, h, h], "steps": [1, 1, 1, 1]}),
        Node("quantize", ("half",), "half_q", {"scale": S, "zero_point": 0}),
        Node("dequantize", ("half_q",), "half_d", {"scale": S, "zero_point": 0}),
    ]
    a = _qconv(nodes, params, rng, "a", "half_d", 8, 8, 3, 1, 1, act="sigmoid")
    nodes += [
        Node("concat", (p, a), "cat", {"axis": 1}),
        Node("quantize", ("cat",), "cat_q", {"scale": S, "zero_point": 0}),
        Node("dequantize", ("cat_q",), "cat_d", {"scale": S, "zero_point": 0}),
    ]
    b = _qconv(nodes, params, rng, "b", "cat_d", 24, 16, 1, 1, 0)
    _qconv(nodes, params, rng, "c", b, 16, 16, 3, 2, 1)
    inputs = {"image": TensorType((1, 3, image, image), "float32")}
    return Graph(inputs, nodes, ["c_d"], params, name="narrow")


def lowered(graph: Graph) -> Graph:
    """The model compiler's passes before the pair (:func:`vdla.model.pipeline.compile_graph_model`)."""
    tables = tabulate_chains(quantize_early(lower_qdq(graph)))
    return tabulate_chains(quantize_early(lower_qdq(accelerator_copies(tables, 16))))


def _image(seed: int, image: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2.0, (1, 3, image, image)).astype(np.float32)


def test_the_pass_pairs_the_narrow_values_and_computes_the_same_graph():
    low = lowered(narrow_model())
    plan, paired_groups = choose_pairings(low, 16, 8)
    assert paired_groups == {plan.group(v) for v in ("stem_q", "p_q", "half_q", "a_q", "cat_q", "b_q")}
    out = pair_rows(low, 16, 8)
    types = verify(out, after="pair_rows")
    # p's channels 8..15 are its second block once paired: the selection convolution became that slice
    (view,) = [n for n in out.nodes if n.op == "slice"]
    assert view.inputs == ("p_q",) and view.output == "half_q" and view.attrs["starts"] == [0, 16, 0, 0]
    assert not any(n.attrs.get("copy") == "slice" for n in out.nodes)
    assert types["stem_q"].shape == (1, 16, 8, 16) and types["cat_q"].shape == (1, 48, 8, 16)
    convs = {n.output: n for n in out.nodes if n.op == "conv2d"}
    assert all(MACS in n.attrs for n in convs.values())  # each reads or writes paired rows
    assert out.params[convs["c_q:acc"].inputs[1]].shape == (16, 32, 2, 3)  # unpairs: 2 paired rows, stride 1
    x = _image(0)
    want, got = evaluate(low, {"image": x}, keep=True), evaluate(out, {"image": x}, keep=True)
    np.testing.assert_array_equal(got["c_q"], want["c_q"])
    (cat,) = [n for n in out.nodes if n.op == "concat"]

    halves = {k for k in plan.members if plan.halves(k, paired_groups)}
    assert {plan.classes.find(v) for v in ("b_q",)} == halves  # 16 channels, read by c alone: whole halves

    def paired(v: str) -> np.ndarray:  # a convolution's paired output: in pairs of half blocks, or whole halves
        return pair(want[v]) if plan.classes.find(v) in halves else pair(want[v])[:, paired_order(want[v].shape[1], 8)]

    for name in types:
        if name in out.params or types[name].shape == want[name].shape:
            continue
        if plan.classes.find(name) == plan.classes.find(cat.output):  # each part in its own order: p's, then a's
            expect = np.concatenate([paired(v) for v in cat.inputs], axis=1)
        else:
            expect = paired(name)
        np.testing.assert_array_equal(got[name], expect, err_msg=name)


def test_a_paired_convolution_pairs_the_halves_of_each_half_block():
    assert paired_order(8, 8).tolist() == list(range(16))
    assert paired_order(16, 8).tolist() == [*range(8), *range(16, 24), *range(8, 16), *range(24, 32)]
    assert paired_order(12, 8).tolist() == [*range(8), *range(12, 20), 8, 9, 10, 11, 20, 21, 22, 23]


def test_odd_rows_and_wide_tensors_are_left_alone():
    odd = lowered(narrow_model(image=28))  # 14 rows after the stem, 7 after c: the stem still pairs, not c
    assert verify(pair_rows(odd, 16, 8), after="pair_rows")["c_q"].shape == (1, 16, 7, 7)
    low = lowered(narrow_model())
    assert pair_rows(low, 8, 8).nodes == low.nodes  # 8 channels fill an 8-channel block


@pytest.fixture(scope="module")
def compiled():
    return {pair: compile_graph_model(narrow_model(), "pynq", pair_rows=pair)[0] for pair in (True, False)}


def test_the_paired_model_keeps_its_macs_and_runs_faster(compiled):
    paired, plain = compiled[True], compiled[False]
    assert paired.total_macs == plain.total_macs == paired.accel_macs
    layers = {s.name: s.layer for s in paired.steps if s.kind == "accel"}
    assert list(layers) == ["stem_q", "p_q", "a_q", "b_q", "c_q"]  # p's slice read in place, p stored into the concat
    assert "half_q" in {s.name for s in plain.steps}
    assert layers["stem_q"]["input"] == [1, 15, 8, 32] and layers["b_q"]["input"] == [1, 48, 8, 16]
    assert layers["stem_q"]["note"] == "output paired: two rows side by side as channels"  # the step table says so
    assert layers["c_q"]["note"].startswith("input paired") and layers["a_q"]["note"].startswith("input and output")
    cycles = []
    for art in (paired, plain):
        module = Module(art, "sim")
        module.run(_image(0))
        cycles.append(module.last_report.accel_cycles)
        module.close()
    assert cycles[0] < cycles[1], cycles


def test_the_paired_model_is_bit_exact_against_the_graph_before_the_rewrite(compiled, backend):
    module = Module(compiled[True], backend)
    ref = lower_qdq(narrow_model())
    for seed in (0, 1):
        x = _image(seed)
        np.testing.assert_array_equal(module.run(x), evaluate(ref, {"image": x})["c_d"])
    module.close()


def test_the_stem_packs_its_kernel_rows_once_paired():
    out = im2col_convs(pair_rows(lowered(narrow_model()), 16, 8), 16)
    (im2col,) = [n for n in out.nodes if n.op == "im2col"]
    assert im2col.attrs["kernel"] == [5, 1] and im2col.attrs["stride"] == [4, 1]  # two output rows of stride 2
    stem = next(n for n in out.nodes if n.op == "conv2d" and n.inputs[0] == im2col.output)
    assert out.params[stem.inputs[1]].shape == (16, 15, 1, 3)


# ---------------------------------------------------------------------------------------------------------
# Rows paired from -1: a narrow 3x3 layer between two others


def bottleneck_model(seed: int = 0, image: int = 32) -> Graph:
    """image -> stem: 3x3 stride 2 (3 -> 8) -> m1: 3x3 (8 -> 8) -> m2: 3x3 (8 -> 8), sigmoid -> c: 3x3 stride 2
    (8 -> 16): a YOLO bottleneck's two 3x3 layers over narrow values."""
    rng, nodes, params, stem = _stem(seed)
    m1 = _qconv(nodes, params, rng, "m1", stem, 8, 8, 3, 1, 1)
    m2 = _qconv(nodes, params, rng, "m2", m1, 8, 8, 3, 1, 1, act="sigmoid")
    _qconv(nodes, params, rng, "c", m2, 8, 16, 3, 2, 1)
    inputs = {"image": TensorType((1, 3, image, image), "float32")}
    return Graph(inputs, nodes, ["c_d"], params, name="bottleneck")


def test_the_value_between_two_3x3_layers_pairs_its_rows_from_minus_one():
    """m1's value is read by m2 alone: paired with its rows paired from -1, m1 and m2 each read two paired rows,
    not three. m1's pairs outside the tensor (rows -1 and 16) are zeroed by a clip of tensor bounds (the edge
    mask); the graph computes the same values, m1's the phased pair of the one before."""
    low = lowered(bottleneck_model())
    out = pair_rows(low, 16, 8)
    types = verify(out, after="pair_rows")
    convs = {n.inputs[0]: n for n in out.nodes if n.op == "conv2d"}  # by the value each reads
    m1, m2 = convs["stem_q"], convs["m1_q"]
    assert m1.attrs[PHASED] == "output" and m2.attrs[PHASED] == "input"
    assert [out.params[n.inputs[1]].shape[2] for n in (m1, m2)] == [2, 2]
    (mask,) = [n for n in out.nodes if n.op == "clip" and len(n.inputs) == 3]
    assert mask.output == "m1_q" and types["m1_q"].shape == (1, 16, 9, 16)
    x = _image(0)
    want, got = evaluate(low, {"image": x}, keep=True), evaluate(out, {"image": x}, keep=True)
    np.testing.assert_array_equal(got["m1_q"], pair_phase(want["m1_q"], 1)[:, paired_order(8, 8)])
    np.testing.assert_array_equal(got["c_q"], want["c_q"])
    plain = pair_rows(low, 16, 8, phases=False)
    assert not any(PHASED in n.attrs for n in plain.nodes)
    kernels = [plain.params[n.inputs[1]].shape[2] for n in plain.nodes if n.inputs[0] in ("stem_q", "m1_q")]
    assert kernels == [3, 3]


@pytest.fixture(scope="module")
def phased_compiled():
    from vdla.graph import rowpair as rowpair_module

    model = bottleneck_model()
    phased = compile_graph_model(model, FULL)[0]  # the phases as the full-unit build chooses them
    keep = rowpair_module.choose_phases
    rowpair_module.choose_phases = lambda *args: {}
    try:
        plain = compile_graph_model(model, FULL)[0]
    finally:
        rowpair_module.choose_phases = keep
    return model, phased, plain


def test_a_phased_model_runs_bit_exact_and_faster(phased_compiled, backend):
    """On the accelerator m1's epilogue masks its edge rows (two GEMMs reading OUT per masked row): bit for bit
    the graph before the rewrite, in fewer GEMM iterations and cycles than the same pair without the phase."""
    model, phased, plain = phased_compiled
    layers = {s.name: s.layer for s in phased.steps if s.kind == "accel"}
    assert layers["m1_q"]["note"].endswith("the output's pairs start at row -1")
    assert layers["m1_q"]["epilogue"].endswith("k0_8") and layers["m2_q"]["kernel"] == [2, 3]
    assert "the input's pairs start at row -1" in layers["m2_q"]["note"]
    ref = lower_qdq(model)
    runs = []
    for art in (phased, plain):
        module = Module(art, backend)
        for seed in (0, 1):
            x = _image(seed)
            np.testing.assert_array_equal(module.run(x), evaluate(ref, {"image": x})["c_d"])
        runs.append(module.last_report)
        module.close()
    gemms = [sum(r.result.counters.gemm_iters for r in rep.steps if r.result is not None) for rep in runs]
    assert gemms[0] < gemms[1] and runs[0].accel_cycles < runs[1].accel_cycles, (gemms, runs)


# ---------------------------------------------------------------------------------------------------------
# Random models: whatever the pass pairs, the graph computes the same values


def random_model(seed: int) -> Graph:
    """A random chain of QDQ convolutions over few channels (kernels 1 to 5, strides 1 and 2, padding from none
    to half the kernel, some with a sigmoid as a table), with channel concats of equal-sized values, ending in a
    3x3 stride-2 convolution to 16 channels."""
    rng = np.random.default_rng(seed)
    h, w = int(rng.choice([16, 24, 32])), int(rng.integers(6, 14))
    nodes = [
        Node("quantize", ("image",), "xq", {"scale": S, "zero_point": 0}),
        Node("dequantize", ("xq",), "xd", {"scale": S, "zero_point": 0}),
    ]
    params: dict[str, np.ndarray] = {}
    values = [("xd", 3, h, w)]
    for i in range(int(rng.integers(3, 7))):
        v, c, vh, vw = values[-1]
        same = [u for u in values[:-1] if u[2:] == (vh, vw) and u[0] != "xd"]
        if same and rng.random() < 0.3:
            u = same[int(rng.integers(len(same)))]
            nodes += [
                Node("concat", (v, u[0]), f"cat{i}", {"axis": 1}),
                Node("quantize", (f"cat{i}",), f"cat{i}_q", {"scale": S, "zero_point": 0}),
                Node("dequantize", (f"cat{i}_q",), f"cat{i}_d", {"scale": S, "zero_point": 0}),
            ]
            values.append((f"cat{i}_d", c + u[1], vh, vw))
            continue
        k = int(rng.choice([1, 2, 3, 5]))
        stride = int(rng.choice([1, 2])) if vh % 4 == 0 and min(vh, vw) > k + 2 else 1
        pad = int(rng.integers(0, k // 2 + 1))
        if min(vh, vw) + 2 * pad < k:
            k, pad = 1, 0
        oc = int(rng.choice([4, 8, 8, 12, 16]))
        act = "sigmoid" if rng.random() < 0.3 else "relu"
        y = _qconv(nodes, params, rng, f"l{i}", v, c, oc, k, stride, pad, act=act)
        values.append((y, oc, (vh + 2 * pad - k) // stride + 1, (vw + 2 * pad - k) // stride + 1))
    y = _qconv(nodes, params, rng, "last", values[-1][0], values[-1][1], 16, 3, 2, 1)
    inputs = {"image": TensorType((1, 3, h, w), "float32")}
    return Graph(inputs, nodes, [y], params, name=f"random{seed}")


@pytest.mark.parametrize("seed", range(24))
def test_random_models_compute_the_same_paired(seed):
    model = random_model(seed)
    low = lowered(model)
    out = pair_rows(low, 16, 8)
    verify(out, after="pair_rows")
    x = np.random.default_rng(seed).normal(0, 2.0, model.inputs["image"].shape).astype(np.float32)
    (name,) = model.outputs
    np.testing.assert_array_equal(evaluate(out, {"image": x})[name], evaluate(low, {"image": x})[name])


def test_random_models_pair_somewhere():
    """The random models above exercise the pass: most of them pair something, several pair a class's rows from
    -1, one orders a class as whole halves; the models run on the backends below have all three."""
    paired, phased, halves = [], set(), set()
    for seed in range(24):
        plan, groups = choose_pairings(lowered(random_model(seed)), 16, 8)
        paired.append(bool(groups))
        if choose_phases(plan, groups, 8):
            phased.add(seed)
        if any(plan.halves(k, groups) for k in plan.members):
            halves.add(seed)
    assert sum(paired) >= 12, paired
    assert len(phased) >= 4 and halves and phased & set(PAIRING) and halves & set(PAIRING), (phased, halves)


PAIRING = (4, 9, 16, 22)  # random models that pair several groups


@pytest.fixture(scope="module")
def random_compiled():
    return {seed: compile_graph_model(random_model(seed), "pynq")[0] for seed in PAIRING}


@pytest.mark.parametrize("seed", PAIRING)
def test_random_paired_models_run_bit_exact(seed, random_compiled, backend):
    model, artifact = random_model(seed), random_compiled[seed]
    assert any("paired" in s.layer.get("note", "") for s in artifact.steps if s.kind == "accel")
    x = np.random.default_rng(seed).normal(0, 2.0, model.inputs["image"].shape).astype(np.float32)
    module = Module(artifact, backend)
    np.testing.assert_array_equal(module.run(x), evaluate(lower_qdq(model), {"image": x})[model.outputs[0]])
    module.close()
