"""Benchmark suite of the CPU fallback: JIT kernels against the best numpy formulation, in the same run.

Every record is measured as the median over ``repeat`` rounds (JIT and baselines interleaved); when several
numpy formulations are reasonable, the fastest one is the baseline. The int8 conv is also timed against
onnxruntime's QLinearConv (one thread, like the JIT kernels).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from vdla.config import DEFAULT_PRESET, load_config
from vdla.cpu_fallback import jit
from vdla.cpu_fallback.specs import (
    make_chain,
    make_conv2d,
    make_dense,
    make_global_avg_pool,
    make_pack,
    make_pool2d,
    make_softmax,
    make_transpose,
    make_unpack,
)
from vdla.cpu_fallback.stacking import compile_graph, resolve_steps
from vdla.graph import ew
from vdla.graph.graph import Graph, Node
from vdla.graph.layout import activation_blocks, blocked_shape
from vdla.graph.types import TensorType
from vdla.isa.arith import INT8_MAX, INT8_MIN, requantize
from vdla.zoo.resnet import layer_specs

RNG_SEED = 0


@dataclass
class Record:
    """One benchmarked kernel or chain (times in seconds per call)."""

    name: str
    shape: str
    jit_s: float | None
    numpy_s: float | None
    speedup_vs_numpy: float | None
    compile_s: float
    correct: bool
    extra: dict[str, float] = field(default_factory=dict)


def _batch_size(fn: Callable[[], object], target: float) -> int:
    """Calls per timed batch so that a batch lasts about ``target`` seconds."""
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    return max(1, int(target / max(once, 1e-7)))


def _time_batch(fn: Callable[[], object], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def measure(fns: Sequence[Callable[[], object]], repeat: int, batch_s: float = 0.002) -> list[float]:
    """Median seconds per call of each function over ``repeat`` short batches, interleaved so that noise
    from other processes hits all of them alike (and a disturbed batch is just an outlier)."""
    for fn in fns:
        fn()  # warm-up (page faults, caches)
    sizes = [_batch_size(fn, batch_s) for fn in fns]
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for s, fn, number in zip(samples, fns, sizes, strict=True):
            s.append(_time_batch(fn, number))
    return [statistics.median(s) for s in samples]


@dataclass
class Case:
    name: str
    shape: str
    kernel: jit.Kernel
    args: tuple[np.ndarray, ...]
    expected: np.ndarray
    baselines: list[Callable[[], object]]  # numpy formulations; the fastest counts
    exact: bool = True
    others: dict[str, list[Callable[[], object]]] = field(default_factory=dict)  # other baselines (fastest)

    def run(self, repeat: int) -> Record:
        out = np.empty(self.kernel.out.shape, self.kernel.out.np_dtype)
        got = self.kernel(*self.args, out=out)
        if self.exact:
            correct = bool(np.array_equal(got, self.expected))
        else:
            correct = bool(np.allclose(got, self.expected, rtol=1e-4, atol=1e-5))
        groups = [self.baselines, *self.others.values()]
        times = measure([lambda: self.kernel(*self.args, out=out), *(f for g in groups for f in g)], repeat)
        jit_s, best, i = times[0], [], 1
        for g in groups:
            best.append(min(times[i : i + len(g)]))
            i += len(g)
        np_s = best[0]
        extra = {}
        for label, t in zip(self.others, best[1:], strict=True):
            extra[f"{label}_s"] = t
            extra[f"speedup_vs_{label}"] = t / jit_s
        return Record(self.name, self.shape, jit_s, np_s, np_s / jit_s, self.kernel.compile_s, correct, extra)


def _fresh(spec) -> jit.Kernel:
    """Compile ``spec`` now (bypassing the memory cache) so that ``compile_s`` is a real compile time."""
    jit.clear_cache()
    return jit.get_kernel(spec)


def _chain_case(name: str, x: np.ndarray, steps: list[ew.Step], baselines, exact: bool = True) -> Case:
    r = resolve_steps(x, steps)
    spec = make_chain((TensorType.of(x, name), *r.operand_types), r.steps)
    args = (x, *r.operands)
    return Case(name, "x".join(map(str, spec.out.shape)), _fresh(spec), args, spec.evaluate(*args), baselines, exact)


def elementwise_cases(rng: np.random.Generator) -> list[Case]:
    shape = (1, 64, 56, 56)
    f = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal((1, 64, 1, 1)).astype(np.float32)
    acc = rng.integers(-(2**20), 2**20, shape, dtype=np.int32)
    res = rng.integers(-128, 128, shape, dtype=np.int8)
    q = rng.integers(-128, 128, shape, dtype=np.int8)
    fo = np.empty(shape, np.float32)
    io = np.empty(shape, np.int8)
    t64 = np.empty(shape, np.int64)
    t32 = np.empty(shape, np.float32)
    m, s, scale = 181, 16, np.float32(0.05)  # |acc * m| < 2^31: requantize's int32 product does not wrap

    def np_requant(v: np.ndarray) -> np.ndarray:
        np.multiply(v, np.int64(m), out=t64)
        np.add(t64, 1 << (s - 1), out=t64)
        np.right_shift(t64, s, out=t64)
        return np.clip(t64, INT8_MIN, INT8_MAX, out=t64)

    def np_chain() -> None:
        np_requant(acc)
        np.add(t64, res, out=t64)
        np.clip(t64, 0, 127, out=t64)  # relu and clip(0, 127) merged: numpy's best shot
        np.copyto(io, t64, casting="unsafe")

    def np_sigmoid_exp() -> None:
        np.negative(f, out=fo)
        np.exp(fo, out=fo)
        np.add(fo, 1, out=fo)
        np.reciprocal(fo, out=fo)

    def np_sigmoid_tanh() -> None:
        np.multiply(f, 0.5, out=fo)
        np.tanh(fo, out=fo)
        np.multiply(fo, 0.5, out=fo)
        np.add(fo, 0.5, out=fo)

    def np_quantize() -> None:
        np.divide(f, scale, out=t32)
        np.rint(t32, out=t32)
        np.clip(t32, INT8_MIN, INT8_MAX, out=t32)
        np.copyto(io, t32, casting="unsafe")

    def np_dequantize() -> None:
        np.copyto(fo, q, casting="unsafe")
        np.multiply(fo, scale, out=fo)

    with np.errstate(over="ignore"):
        return [
            _chain_case(
                "chain_requant_add_relu_clip",
                acc,
                [ew.requantize(m, s), ew.add(res), ew.relu(), ew.clip(0, 127), ew.cast("int8")],
                [np_chain],
            ),
            _chain_case("add_f32", f, [ew.add(g)], [lambda: np.add(f, g, out=fo)]),
            _chain_case("add_bias_broadcast_f32", f, [ew.add(bias)], [lambda: np.add(f, bias, out=fo)]),
            _chain_case("mul_f32", f, [ew.mul(g)], [lambda: np.multiply(f, g, out=fo)]),
            _chain_case("max_f32", f, [ew.maximum(g)], [lambda: np.maximum(f, g, out=fo)]),
            _chain_case("relu_f32", f, [ew.relu()], [lambda: np.maximum(f, 0, out=fo)]),
            _chain_case(
                "clip_f32",
                f,
                [ew.clip(-1.0, 1.0)],
                [
                    lambda: np.clip(f, -1.0, 1.0, out=fo),
                    lambda: np.minimum(np.maximum(f, -1.0, out=fo), 1.0, out=fo),
                ],
            ),
            _chain_case("exp_f32", f, [ew.exp()], [lambda: np.exp(f, out=fo)], exact=False),
            _chain_case("sigmoid_f32", f, [ew.sigmoid()], [np_sigmoid_exp, np_sigmoid_tanh], exact=False),
            _chain_case("tanh_f32", f, [ew.tanh()], [lambda: np.tanh(f, out=fo)], exact=False),
            _chain_case("quantize_f32_int8", f, [ew.quantize(float(scale))], [np_quantize]),
            _chain_case("dequantize_int8_f32", q, [ew.dequantize(float(scale))], [np_dequantize]),
            _chain_case(
                "requantize_int32_int8",
                acc,
                [ew.requantize(m, s)],
                [lambda: np.copyto(io, np_requant(acc), casting="unsafe")],
            ),
        ]


def _max_pool_numpy(x: np.ndarray, k: int, s: int, p: int, out: np.ndarray) -> list[Callable[[], object]]:
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.full((*x.shape[:2], x.shape[2] + 2 * p, x.shape[3] + 2 * p), fill, x.dtype)
    oh, ow = out.shape[2:]

    def shifted() -> None:
        xp[:, :, p : p + x.shape[2], p : p + x.shape[3]] = x
        np.copyto(out, xp[:, :, : s * oh : s, : s * ow : s])
        for i in range(k):
            for j in range(k):
                if i or j:
                    np.maximum(out, xp[:, :, i : i + s * oh : s, j : j + s * ow : s], out=out)

    def windows() -> None:
        xp[:, :, p : p + x.shape[2], p : p + x.shape[3]] = x
        sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s].max(axis=(4, 5), out=out)

    return [shifted, windows]


def pooling_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for dtype in ("float32", "int8"):
        x = (rng.standard_normal((1, 64, 112, 112)) * 40).astype(dtype)
        spec = make_pool2d(TensorType.of(x, "max_pool2d"), "max", 3, 2, 1)
        out = np.empty(spec.out.shape, x.dtype)
        cases.append(
            Case(
                f"max_pool2d_3x3s2_{dtype}",
                "1x64x112x112",
                _fresh(spec),
                (x,),
                spec.evaluate(x),
                _max_pool_numpy(x, 3, 2, 1, out),
            )
        )
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    spec = make_pool2d(TensorType.of(x, "avg_pool2d"), "avg", 2, 2, 0)
    out = np.empty(spec.out.shape, np.float32)

    def np_avg() -> None:
        np.add(x[:, :, 0::2, 0::2], x[:, :, 0::2, 1::2], out=out)
        np.add(out, x[:, :, 1::2, 0::2], out=out)
        np.add(out, x[:, :, 1::2, 1::2], out=out)
        np.multiply(out, 0.25, out=out)

    cases.append(
        Case(
            "avg_pool2d_2x2s2_f32",
            "1x64x56x56",
            _fresh(spec),
            (x,),
            spec.evaluate(x),
            [np_avg, lambda: x.reshape(1, 64, 28, 2, 28, 2).mean(axis=(3, 5))],
            exact=False,
        )
    )
    feat = rng.standard_normal((1, 512, 7, 7)).astype(np.float32)
    spec = make_global_avg_pool(TensorType.of(feat, "global_avg_pool"))
    cases.append(
        Case(
            "global_avg_pool_f32",
            "1x512x7x7",
            _fresh(spec),
            (feat,),
            spec.evaluate(feat),
            [
                lambda: feat.mean(axis=(2, 3), keepdims=True),
                lambda: feat.reshape(512, 49).sum(axis=1) * np.float32(1 / 49),
            ],
            exact=False,
        )
    )
    return cases


def layout_cases(rng: np.random.Generator) -> list[Case]:
    x = rng.integers(-128, 128, (1, 64, 56, 56), dtype=np.int8)
    pack = make_pack(TensorType.of(x, "pack_blocked"), 1, 16)
    xb = pack.evaluate(x)
    unpack = make_unpack(TensorType.of(xb, "unpack_blocked"), 64)
    po, uo = np.empty(xb.shape, np.int8), np.empty(x.shape, np.int8)
    pview = po.reshape(1, 4, 56, 56, 16)
    uview = uo.reshape(1, 4, 16, 56, 56)
    nhwc = make_transpose(TensorType.of(x, "transpose"), (0, 2, 3, 1))
    to = np.empty(nhwc.out.shape, np.int8)
    return [
        Case(
            "pack_nchw_to_blocked16_int8",
            "1x64x56x56",
            _fresh(pack),
            (x,),
            xb,
            [lambda: np.copyto(pview, x.reshape(1, 4, 16, 56, 56).transpose(0, 1, 3, 4, 2))],
        ),
        Case(
            "unpack_blocked16_to_nchw_int8",
            "1x4x56x56x1x16",
            _fresh(unpack),
            (xb,),
            x,
            [lambda: np.copyto(uview, xb.reshape(1, 4, 56, 56, 16).transpose(0, 1, 4, 2, 3))],
        ),
        Case(
            "transpose_nchw_to_nhwc_int8",
            "1x64x56x56",
            _fresh(nhwc),
            (x,),
            nhwc.evaluate(x),
            [lambda: np.copyto(to, x.transpose(0, 2, 3, 1))],
        ),
    ]


def _qlinearconv_session(
    x: np.ndarray, w: np.ndarray, stride: int, pad: int, group: int, scales, unsigned: bool
) -> Callable[[], object]:
    """onnxruntime QLinearConv (one thread) on the same int8 data; ``unsigned`` feeds it as uint8 with zero
    point 128 (the same convolution), which is MLAS's fast path on x86."""
    from onnx import TensorProto, helper, numpy_helper

    from vdla.frontend.reference import reference_session

    xs, ws, ys = scales
    zp = np.array(128, np.uint8) if unsigned else np.array(0, np.int8)
    feed = (x.astype(np.int16) + 128).astype(np.uint8) if unsigned else x
    inits = [
        numpy_helper.from_array(np.array(xs, np.float32), "xs"),
        numpy_helper.from_array(zp, "xz"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(ws, np.float32), "ws"),
        numpy_helper.from_array(np.array(0, np.int8), "wz"),
        numpy_helper.from_array(np.array(ys, np.float32), "ys"),
        numpy_helper.from_array(zp, "yz"),
    ]
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
        ["y"],
        strides=[stride] * 2,
        pads=[pad] * 4,
        group=group,
    )
    elem = TensorProto.UINT8 if unsigned else TensorProto.INT8
    graph = helper.make_graph(
        [node],
        "qconv",
        [helper.make_tensor_value_info("x", elem, x.shape)],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = reference_session(model, optimized=True)  # onnxruntime's own int8 kernel, as a deployment runs it
    return lambda: sess.run(None, {"x": feed})


def _multiplier_shift(real: float, acc_max: int) -> tuple[int, int]:
    """Integer multiplier and shift (<= 31) approximating a positive real scale factor as m / 2^s, the
    most precise pair whose products with accumulators up to ``acc_max`` stay within int32."""
    m_max = (2**31 - 1) // acc_max
    shift = min(31, int(np.floor(np.log2(m_max / real))))
    return min(int(round(real * 2.0**shift)), m_max), shift


def _im2col_numpy(x: np.ndarray, w: np.ndarray, stride: int, pad: int, m: int, s: int) -> Callable[[], object]:
    """im2col + float32 BLAS (exact while |sums| < 2^24, true here), then the integer requantize."""
    oc, _, k, _ = w.shape
    wf = w.reshape(oc, -1).astype(np.float32)
    xp = np.zeros((x.shape[1], x.shape[2] + 2 * pad, x.shape[3] + 2 * pad), np.float32)

    def conv() -> np.ndarray:
        xp[:, pad : pad + x.shape[2], pad : pad + x.shape[3]] = x[0]
        cols = sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::stride, ::stride]
        oh, ow = cols.shape[1:3]
        acc = wf @ cols.transpose(0, 3, 4, 1, 2).reshape(-1, oh * ow)
        return requantize(acc.astype(np.int32), m, s)

    return conv


def _depthwise_numpy(x: np.ndarray, w: np.ndarray, pad: int, m: int, s: int) -> Callable[[], object]:
    """Depthwise stride-1 conv as a sum of shifted planes times per-channel taps (int32)."""
    c, _, k, _ = w.shape
    xp = np.zeros((c, x.shape[2] + 2 * pad, x.shape[3] + 2 * pad), np.int32)
    acc = np.empty((c, x.shape[2] + 2 * pad - k + 1, x.shape[3] + 2 * pad - k + 1), np.int32)
    taps = w.reshape(c, k, k, 1, 1).astype(np.int32)
    oh, ow = acc.shape[1:]

    def conv() -> np.ndarray:
        xp[:, pad : pad + x.shape[2], pad : pad + x.shape[3]] = x[0]
        np.multiply(xp[:, :oh, :ow], taps[:, 0, 0], out=acc)
        for i in range(k):
            for j in range(k):
                if i or j:
                    np.add(acc, xp[:, i : i + oh, j : j + ow] * taps[:, i, j], out=acc)
        return requantize(acc, m, s)

    return conv


def conv_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    shapes = [  # name, x shape, w shape, stride, pad, groups
        ("conv2d_int8_3x3_64", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
        ("conv2d_int8_stem_7x7s2", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
        ("conv2d_int8_depthwise_3x3", (1, 64, 56, 56), (64, 1, 3, 3), 1, 1, 64),
    ]
    for name, xs, wsh, stride, pad, groups in shapes:
        x = rng.integers(-128, 128, xs, dtype=np.int8)
        w = rng.integers(-128, 128, wsh, dtype=np.int8)
        scales = (0.02, 0.01, 0.02 * 0.01 * wsh[1] * wsh[2] * wsh[3] * 8)
        m, s = _multiplier_shift(scales[0] * scales[1] / scales[2], 128 * 128 * wsh[1] * wsh[2] * wsh[3])
        spec = make_conv2d(
            TensorType.of(x, name),
            TensorType.of(w, name),
            stride,
            pad,
            1,
            groups,
            (),
            (resolve_steps(None, [ew.requantize(m, s)]).steps),
        )
        baseline = _depthwise_numpy(x, w, pad, m, s) if groups > 1 else _im2col_numpy(x, w, stride, pad, m, s)
        cases.append(
            Case(
                name,
                f"x{'x'.join(map(str, xs))}_w{'x'.join(map(str, wsh))}",
                _fresh(spec),
                (x, w),
                spec.evaluate(x, w),
                [baseline],
                others={
                    "onnxruntime": [_qlinearconv_session(x, w, stride, pad, groups, scales, u) for u in (False, True)]
                },
            )
        )
    return cases


def dense_softmax_cases(rng: np.random.Generator) -> list[Case]:
    x = rng.standard_normal((1, 512)).astype(np.float32)
    w = rng.standard_normal((1000, 512)).astype(np.float32)
    b = rng.standard_normal((1, 1000)).astype(np.float32)
    r = resolve_steps(None, [ew.add(b)])
    spec = make_dense(TensorType.of(x, "dense"), TensorType.of(w, "dense"), r.operand_types, r.steps)
    do = np.empty((1, 1000), np.float32)

    def np_dense() -> None:
        np.matmul(x, w.T, out=do)
        np.add(do, b, out=do)

    xi = rng.integers(-128, 128, (1, 512), dtype=np.int8)
    wi = rng.integers(-128, 128, (1000, 512), dtype=np.int8)
    wf = wi.astype(np.float32)
    ispec = make_dense(TensorType.of(xi, "dense"), TensorType.of(wi, "dense"))

    s = (rng.standard_normal((32, 1000)) * 4).astype(np.float32)
    sspec = make_softmax(TensorType.of(s, "softmax"), -1)
    so = np.empty_like(s)

    def np_softmax() -> None:
        np.subtract(s, s.max(axis=1, keepdims=True), out=so)
        np.exp(so, out=so)
        np.divide(so, so.sum(axis=1, keepdims=True), out=so)

    return [
        Case(
            "dense_f32_bias",
            "1x512_w1000x512",
            _fresh(spec),
            (x, w, b),
            spec.evaluate(x, w, b),
            [np_dense, lambda: x @ w.T + b, lambda: np.dot(w, x[0]) + b[0]],
            exact=False,
        ),
        Case(
            "dense_int8",
            "1x512_w1000x512",
            _fresh(ispec),
            (xi, wi),
            ispec.evaluate(xi, wi),
            [
                lambda: (wf @ xi[0].astype(np.float32)).astype(np.int32),
                lambda: xi.astype(np.int32) @ wi.T.astype(np.int32),
            ],
        ),
        Case("softmax_f32", "32x1000", _fresh(sspec), (s,), sspec.evaluate(s), [np_softmax], exact=False),
    ]


# ---------------------------------------------------------------------------------------------------------
# ResNet-18: the kernels left on the CPU


def resnet18_cpu_graph(rng: np.random.Generator, config: str = DEFAULT_PRESET) -> Graph:
    """CPU side of an int8 ResNet-18 (batch 1): input quantize, the 3-channel stem conv (not accelerated),
    max pool, packing into the blocked layout, the residual epilogue of each of the 8 basic blocks (the
    accelerator's int32 output requantized, added to the skip path, relu, clip), unpacking, global average
    pool, the classifier and softmax. The blocked layout is the ``config``'s.
    """
    batch, block = activation_blocks(load_config(config))
    nodes = [
        Node("quantize", ("image",), "q0", {"scale": 1 / 64, "zero_point": 0}),
        Node("conv2d", ("q0", "stem_w", "stem_b"), "stem", {"stride": 2, "padding": 3}),
        Node(
            "requantize",
            ("stem",),
            "stem_q",
            {"multiplier": 658, "shift": 19, "lo": INT8_MIN, "hi": INT8_MAX},
        ),
        Node("relu", ("stem_q",), "stem_r"),
        Node("max_pool2d", ("stem_r",), "pool", {"kernel": 3, "stride": 2, "padding": 1}),
        Node("pack_blocked", ("pool",), "packed", {"batch": batch, "block": block}),
    ]
    inputs = {"image": TensorType((1, 3, 224, 224), "float32")}
    outputs = ["packed"]
    specs = layer_specs("resnet18")  # the basic blocks' outputs: two per stage, shaped like its 3x3 conv
    stages = [(specs[n].oc, specs[n].oh) for n in ("C2", "C2", "C6", "C6", "C9", "C9", "C12", "C12")]
    for i, (c, hw) in enumerate(stages):
        shape = blocked_shape((1, c, hw, hw), batch, block)
        inputs[f"acc{i}"] = TensorType(shape, "int32")
        inputs[f"skip{i}"] = TensorType(shape, "int8")
        nodes += [
            Node(
                "requantize",
                (f"acc{i}",),
                f"rq{i}",
                {"multiplier": 66 + i, "shift": 14, "lo": INT8_MIN, "hi": INT8_MAX},
            ),
            Node("add", (f"rq{i}", f"skip{i}"), f"sum{i}"),
            Node("relu", (f"sum{i}",), f"relu{i}"),
            Node("clip", (f"relu{i}",), f"clip{i}", {"lo": 0, "hi": 127}),
            Node("cast", (f"clip{i}",), f"block{i}", {"dtype": "int8"}),
        ]
        outputs.append(f"block{i}")
    nodes += [
        Node("unpack_blocked", ("block7",), "features", {"channels": 512}),
        Node("global_avg_pool", ("features",), "gap"),
        Node("reshape", ("gap",), "flat", {"shape": (1, 512)}),
        Node("dense", ("flat", "fc_w", "fc_b"), "fc"),
        Node("dequantize", ("fc",), "logits", {"scale": 1e-4, "zero_point": 0}),
        Node("softmax", ("logits",), "probs", {"axis": -1}),
    ]
    outputs.append("probs")
    params = {
        "stem_w": rng.integers(-128, 128, (64, 3, 7, 7), dtype=np.int8),
        "stem_b": rng.integers(-1000, 1000, 64, dtype=np.int32),
        "fc_w": rng.integers(-128, 128, (1000, 512), dtype=np.int8),
        "fc_b": rng.integers(-1000, 1000, 1000, dtype=np.int32),
    }
    return Graph(inputs, nodes, outputs, params)


def resnet18_compile_record(rng: np.random.Generator, repeat: int) -> Record:
    graph = resnet18_cpu_graph(rng)
    jit.clear_cache()
    t0 = time.perf_counter()
    compiled = compile_graph(graph)
    compile_s = time.perf_counter() - t0
    feeds = {
        name: (
            rng.standard_normal(t.shape).astype(np.float32)
            if t.dtype == "float32"
            else rng.integers(
                -128 if t.dtype == "int8" else -(2**24),
                128 if t.dtype == "int8" else 2**24,
                t.shape,
                dtype=t.dtype,
            )
        )
        for name, t in graph.inputs.items()
    }
    outs = compiled(**feeds)
    env = dict(compiled.params) | feeds
    for stage in compiled.groups:
        env[stage.output] = stage.evaluate(*(env[a] for a in stage.args))
    correct = all(np.allclose(outs[n], env[n], rtol=1e-5, atol=1e-6) for n in graph.outputs)
    (jit_s,) = measure([lambda: compiled(**feeds)], repeat)
    return Record(
        f"resnet18_cpu_kernels_compile ({sum(s.kernel is not None for s in compiled.groups)} kernels)",
        "batch 1",
        jit_s,
        None,
        None,
        compile_s,
        correct,
    )


SUITES = {
    "elementwise": elementwise_cases,
    "pooling": pooling_cases,
    "layout": layout_cases,
    "conv": conv_cases,
    "dense": dense_softmax_cases,
}


def limit_blas_threads() -> None:
    """Put numpy's OpenBLAS on one thread, like the JIT kernels (as threadpoolctl does, through ctypes).

    Besides fairness, idle BLAS threads woken up between interleaved timings distort the measurements.
    """
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return
    for path in paths:
        lib = ctypes.CDLL(path)
        for name in (
            "openblas_set_num_threads",
            "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads",
        ):
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(1)
                break


def run(
    repeat: int = 21, suites: Sequence[str] = tuple(SUITES) + ("resnet18",), only: Sequence[str] = ()
) -> list[Record]:
    """Run the selected suites with the disk cache off (so compile times are real), BLAS on one thread.

    ``only``: measure just the kernels of these names (``resnet18`` for the ResNet-18 record).
    """
    jit.set_disk_cache(None)
    limit_blas_threads()
    rng = np.random.default_rng(RNG_SEED)
    records = []
    for suite in suites:
        if suite == "resnet18":
            if not only or "resnet18" in only:
                records.append(resnet18_compile_record(rng, repeat))
            continue
        records += [case.run(repeat) for case in SUITES[suite](rng) if not only or case.name in only]
    return records


def print_table(records: Sequence[Record]) -> None:
    from rich.console import Console
    from rich.table import Table

    fmt = lambda v: "-" if v is None else f"{v * 1e6:,.1f}"  # noqa: E731
    table = Table(title="vdla CPU fallback: JIT vs numpy (median, microseconds per call)")
    for col in ("kernel", "shape", "jit us", "numpy us", "speedup", "compile ms", "correct", "other"):
        table.add_column(col, justify="left" if col in ("kernel", "shape", "other") else "right")
    for r in records:
        other = ", ".join(
            f"{k[:-2]} {v * 1e6:,.1f} us" if k.endswith("_s") else f"x{v:.2f}" for k, v in r.extra.items()
        )
        table.add_row(
            r.name,
            r.shape,
            fmt(r.jit_s),
            fmt(r.numpy_s),
            "-" if r.speedup_vs_numpy is None else f"{r.speedup_vs_numpy:.2f}x",
            f"{r.compile_s * 1e3:.1f}",
            "yes" if r.correct else "NO",
            other,
        )
    console = Console()
    if not console.is_terminal:
        console.width = 180
    console.print(table)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="write the records as a JSON list")
    parser.add_argument("--repeat", type=int, default=21, help="timed batches per kernel (the median is reported)")
    parser.add_argument(
        "--suite", action="append", choices=[*SUITES, "resnet18"], help="run only these suites (repeatable)"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="measure only the kernel of this name, e.g. add_f32, or resnet18 (repeatable)",
    )


def main_from_args(args: argparse.Namespace) -> int:
    records = run(args.repeat, args.suite or (*SUITES, "resnet18"), args.only or ())
    print_table(records)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                [{**{k: v for k, v in asdict(r).items() if k != "extra"}, **r.extra} for r in records],
                f,
                indent=2,
            )
    return 0 if all(r.correct for r in records) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return main_from_args(parser.parse_args(argv))
