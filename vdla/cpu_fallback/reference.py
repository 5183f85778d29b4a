"""Numpy references for every kernel, written from the operator semantics (not from the generated code).

``reference(spec, *arrays)`` computes what ``get_kernel(spec)(*arrays)`` must return.
"""

from __future__ import annotations

from functools import singledispatch

import numpy as np

from vdla.cpu_fallback.specs import (
    ChainSpec,
    ConcatSpec,
    CpuConv2dSpec,
    CpuConvTransposeSpec,
    CpuDenseSpec,
    CumSumSpec,
    GatherSpec,
    GlobalAvgPoolSpec,
    GridSampleSpec,
    Im2colSpec,
    InterleaveSpec,
    MatMulSpec,
    NllLossSpec,
    NormSpec,
    OneHotSpec,
    PackSpec,
    PadSpec,
    Pool2dSpec,
    ReduceSpec,
    ResizeSpec,
    ScatterSpec,
    SliceSpec,
    SoftmaxSpec,
    Spec,
    TableSpec,
    TakeSpec,
    TopKSpec,
    TransposeSpec,
    TriluSpec,
    UnpackSpec,
)
from vdla.graph import layout, oracle


def chain(spec: ChainSpec, arrays: list[np.ndarray]) -> np.ndarray:
    """Apply the chain's steps with numpy broadcasting; ``arrays[0]`` is the primary input."""
    return oracle.chain(spec.steps, spec.inputs, arrays, spec.out.shape, spec.out.dtype)


@singledispatch
def reference(spec: Spec, *arrays: np.ndarray) -> np.ndarray:
    """Expected output of the kernel for ``spec`` on ``arrays``."""
    raise TypeError(f"no reference for {type(spec).__name__}")


@reference.register
def _(spec: ChainSpec, *arrays: np.ndarray) -> np.ndarray:
    return chain(spec, list(arrays))


@reference.register
def _(spec: Pool2dSpec, x: np.ndarray) -> np.ndarray:
    return oracle.pool2d(x, spec.window, spec.kind, spec.count_include_pad, spec.p)


@reference.register
def _(spec: GlobalAvgPoolSpec, x: np.ndarray) -> np.ndarray:
    return oracle.global_avg_pool(x) if spec.mean else oracle.global_sum_pool(x)


@reference.register
def _(spec: SoftmaxSpec, x: np.ndarray) -> np.ndarray:
    if spec.scale is not None:  # exp(scale * (q - max q)) in float64, as the table holds it
        x = x.astype(np.float64) * spec.scale
    return oracle.softmax(x, spec.axis, spec.kind)


@reference.register
def _(spec: TransposeSpec, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(spec.perm))


@reference.register
def _(spec: PackSpec, x: np.ndarray) -> np.ndarray:
    return layout.pack_activation(x, spec.batch, spec.block)


@reference.register
def _(spec: UnpackSpec, x: np.ndarray) -> np.ndarray:
    return layout.unpack_activation(x, spec.images, spec.channels)


@reference.register
def _(spec: ConcatSpec, *arrays: np.ndarray) -> np.ndarray:
    return np.concatenate(arrays, axis=spec.axis)


@reference.register
def _(spec: PadSpec, x: np.ndarray) -> np.ndarray:
    return np.pad(x, spec.pads, constant_values=spec.value)


@reference.register
def _(spec: Im2colSpec, x: np.ndarray) -> np.ndarray:
    cols = oracle.im2col(x, spec.window)
    return cols if spec.packed is None else layout.pack_activation(cols, *spec.packed)


@reference.register
def _(spec: SliceSpec, x: np.ndarray) -> np.ndarray:
    index = tuple(
        slice(a, a + n * s if a + n * s >= 0 else None, s)
        for a, s, n in zip(spec.starts, spec.steps, spec.out.shape, strict=True)
    )
    return np.ascontiguousarray(x[index])


@reference.register
def _(spec: ResizeSpec, x: np.ndarray) -> np.ndarray:
    return oracle.resize(x, spec.filters, spec.scales, spec.out.shape, spec.extrapolation_value)


@reference.register
def _(spec: MatMulSpec, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return oracle.matmul(a, b)


def _with_epilogue(spec: CpuDenseSpec | CpuConv2dSpec, acc: np.ndarray, operands: tuple[np.ndarray, ...]) -> np.ndarray:
    return chain(spec.epilogue, [acc, *operands]) if spec.epilogue else acc


@reference.register
def _(spec: CpuDenseSpec, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    return _with_epilogue(spec, oracle.dense(x, w), operands)


@reference.register
def _(spec: CpuConv2dSpec, x: np.ndarray, w: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    return _with_epilogue(spec, oracle.conv2d(x, w, spec.window, spec.groups), operands)


@reference.register
def _(spec: CpuConvTransposeSpec, x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    win = spec.window
    acc = oracle.conv_transpose(x, w, win.stride, win.dilation, win.pads, spec.out.shape[2:], spec.groups)
    return oracle.add_bias(acc, *bias)


@reference.register
def _(spec: InterleaveSpec, *phases: np.ndarray) -> np.ndarray:
    return oracle.interleave(list(phases), spec.stride)


@reference.register
def _(spec: TakeSpec, x: np.ndarray, *fill: np.ndarray) -> np.ndarray:
    return oracle.take(x, spec.index, fill[0].reshape(-1)[0] if fill else spec.value)


@reference.register
def _(spec: GatherSpec, x: np.ndarray, index: np.ndarray) -> np.ndarray:
    return oracle.gather(x, index)


@reference.register
def _(spec: TableSpec, x: np.ndarray, entries: np.ndarray) -> np.ndarray:
    return oracle.table(x, entries)


@reference.register
def _(spec: ScatterSpec, x: np.ndarray, index: np.ndarray, updates: np.ndarray) -> np.ndarray:
    return oracle.scatter(x, index, updates, spec.reduction)


@reference.register
def _(spec: GridSampleSpec, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    return oracle.grid_sample(x, grid, spec.mode, spec.padding_mode, spec.align_corners)


@reference.register
def _(spec: OneHotSpec, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
    return oracle.one_hot(indices, values, spec.depth, spec.axis)


def _(spec: ReduceSpec, x: np.ndarray) -> np.ndarray:
    return oracle.reduce(x, spec.kind, spec.axes, spec.select_last_index).reshape(spec.out.shape)


@reference.register
def _(spec: NormSpec, x: np.ndarray, *affine: np.ndarray) -> np.ndarray:
    return oracle.normalize(x, spec.axis, spec.epsilon, spec.kind == "layer_norm", *affine)


@reference.register
def _(spec: CumSumSpec, x: np.ndarray) -> np.ndarray:
    return oracle.cumsum(x, spec.axis, spec.exclusive, spec.reverse)


@reference.register
def _(spec: TopKSpec, x: np.ndarray) -> np.ndarray:
    values, index = oracle.topk(x, spec.k, spec.axis, spec.largest)
    return index if spec.indices else values


@reference.register
def _(spec: TriluSpec, x: np.ndarray) -> np.ndarray:
    return oracle.trilu(x, spec.upper, spec.k)


@reference.register
def _(spec: NllLossSpec, x: np.ndarray, target: np.ndarray, *weight: np.ndarray) -> np.ndarray:
    return oracle.nll_loss(x, target, *weight, ignore_index=spec.ignore_index)
