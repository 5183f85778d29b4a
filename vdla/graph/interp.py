"""The numpy interpreter of the graph: every operator of :mod:`vdla.graph.ops` evaluated by the oracle.

It is the reference a compiled model is checked against (the same graph, run op by op in numpy), the
constant folder's evaluator, and the CPU path of last resort where llvmlite is not installed. It
computes exactly what the operator definitions say, with the accelerator's integer arithmetic
(:mod:`vdla.isa.arith`) for integer ops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from vdla.graph import layout, oracle
from vdla.graph.ew import EW_OPERANDS, node_steps
from vdla.graph.graph import Graph, Node
from vdla.graph.ops import im2col_type, infer_types, slice_type
from vdla.graph.types import TensorType, UnsupportedError
from vdla.graph.window import make_window

Eval = Callable[[Node, list[np.ndarray], TensorType], np.ndarray]
EVAL: dict[str, Eval] = {}


def _register(*names: str) -> Callable[[Eval], Eval]:
    def deco(fn: Eval) -> Eval:
        for n in names:
            EVAL[n] = fn
        return fn

    return deco


def evaluate_node(node: Node, args: list[np.ndarray], types: list[TensorType], out: TensorType) -> np.ndarray:
    """The value of ``node`` on input arrays ``args`` (of types ``types``); ``out`` is its output type."""
    if node.op in EW_OPERANDS:
        names = [node.inputs[0]]
        steps = node_steps([node], names)
        by_name = dict(zip(node.inputs, zip(args, types, strict=True), strict=True))
        arrays = [by_name[n][0] for n in names]
        return oracle.chain(steps, [by_name[n][1].plain for n in names], arrays, out.shape, out.dtype)
    fn = EVAL.get(node.op)
    if fn is None:
        raise UnsupportedError(node.op, f"the interpreter has no rule for node {node.output!r}")
    return fn(node, args, out)


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray], keep: bool = False) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (one array per graph input); returns the outputs, or every value if
    ``keep``."""
    types = infer_types(graph)
    env: dict[str, np.ndarray] = dict(graph.params)
    for name, t in graph.inputs.items():
        if name not in feeds:
            raise UnsupportedError("evaluate", f"missing input {name!r}")
        a = np.asarray(feeds[name])
        if a.shape != t.shape or a.dtype.name != t.dtype:
            raise UnsupportedError("evaluate", f"input {name!r} must be {t}, got {a.dtype.name}{list(a.shape)}")
        env[name] = a
    for node in graph.nodes:
        args = [env[i] for i in node.inputs]
        env[node.output] = evaluate_node(node, args, [types[i] for i in node.inputs], types[node.output])
    return env if keep else {o: env[o] for o in graph.outputs}


def _accumulate_bias(acc: np.ndarray, bias: list[np.ndarray], axis_shape: tuple[int, ...]) -> np.ndarray:
    if not bias:
        return acc
    b = bias[0].reshape(axis_shape)
    if acc.dtype == np.int32:
        return oracle.wrap32(acc.astype(np.int64) + b.astype(np.int64)).astype(np.int32)
    return (acc + b.astype(np.float32)).astype(np.float32)


@_register("conv2d")
def _conv2d(node: Node, args: list[np.ndarray], out: TensorType) -> np.ndarray:
    x, w, *bias = args
    a = node.attrs
    win, _ = make_window(
        "conv2d", x.shape[2:], w.shape[2:], a.get("stride", 1), a.get("dilation", 1), a.get("padding", 0)
    )
    acc = oracle.conv2d(x, w, win, int(a.get("groups", 1)))
    return _accumulate_bias(acc, bias, (1, -1, 1, 1))


@_register("im2col")
def _im2col(node: Node, args: list[np.ndarray], out: TensorType) -> np.ndarray:
    a = node.attrs
    win, _ = im2col_type(
        TensorType.of(args[0], "im2col"), a["kernel"], a.get("stride", 1), a.get("padding", 0), a.get("dilation", 1)
    )
    return oracle.im2col(args[0], win)


@_register("dense")
def _dense(node: Node, args: list[np.ndarray], out: TensorType) -> np.ndarray:
    x, w, *bias = args
    return _accumulate_bias(oracle.dense(x, w), bias, (1, -1))


def _slice_attrs(node: Node) -> tuple:
    return node.attrs["starts"], node.attrs["stops"], node.attrs["steps"]


EVAL["matmul"] = lambda node, args, out: oracle.matmul(*args)


@_register("batch_norm")
def _batch_norm(node: Node, args: list[np.ndarray], out: TensorType) -> np.ndarray:
    x, scale, bias, mean, var = (v.astype(np.float64) for v in args)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    eps = float(node.attrs.get("epsilon", 1e-5))
    k = scale / np.sqrt(var + eps)
    return (x * k.reshape(shape) + (bias - mean * k).reshape(shape)).astype(np.float32)


def _pool(kind: str) -> Eval:
    def rule(node: Node, args: list[np.ndarray], out: TensorType) -> np.ndarray:
        (x,) = args
        a = node.attrs
        win, _ = make_window(
            f"{kind}_pool2d", x.shape[2:], a["kernel"], a.get("stride") or a["kernel"], 1, a.get("padding", 0)
        )
        return oracle.pool2d(x, win, kind, bool(a.get("count_include_pad", False)))

    return rule


EVAL["max_pool2d"] = _pool("max")
EVAL["avg_pool2d"] = _pool("avg")
EVAL["global_avg_pool"] = lambda node, args, out: oracle.global_avg_pool(args[0])
EVAL["global_sum_pool"] = lambda node, args, out: oracle.global_sum_pool(args[0])
EVAL["softmax"] = lambda node, args, out: oracle.softmax(args[0], int(node.attrs.get("axis", -1)))
EVAL["reshape"] = lambda node, args, out: args[0].reshape(out.shape)
EVAL["transpose"] = lambda node, args, out: np.ascontiguousarray(args[0].transpose(node.attrs["perm"]))
EVAL["concat"] = lambda node, args, out: np.concatenate(args, axis=int(node.attrs.get("axis", 0)))
EVAL["slice"] = lambda node, args, out: np.ascontiguousarray(
    args[0][np.ix_(*slice_type(TensorType.of(args[0], "slice"), *_slice_attrs(node))[0])]
)
EVAL["resize"] = lambda node, args, out: oracle.resize(
    args[0], *(node.attrs[k] for k in ("mode", "coordinate_mode", "nearest_mode", "scales")), out.shape
)
EVAL["pack_blocked"] = lambda node, args, out: layout.pack_activation(args[0], node.attrs["batch"], node.attrs["block"])
EVAL["unpack_blocked"] = lambda node, args, out: layout.unpack_activation(args[0], out.shape[0], out.shape[1])


@_register("pad")
def _pad(node: Node, args: list[np.ndarray], out: TensorType) -> np.ndarray:
    value = node.attrs.get("value", 0)
    return np.pad(args[0], node.attrs["pads"], constant_values=value).astype(args[0].dtype)
