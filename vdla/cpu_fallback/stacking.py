"""Operator stacking: elementwise chains become one loop nest, and graphs are cut into fused kernels.

A chain of elementwise steps (with broadcast operands) is compiled into a single kernel that reads every
input once and writes the output once. In a graph (:func:`compile_graph`), each group of the fusion pass
(:func:`vdla.graph.fusion.fuse_ops`) is cut into runs (:func:`fuse`): a run of elementwise nodes is one
kernel, and a run that directly follows a conv2d or dense node becomes that kernel's epilogue, applied to
the accumulator before it is stored. Every other node is one kernel, the one its operator's definition
names (:attr:`vdla.graph.ops.OpDef.cpu`).

Graph compilation takes its kernels from a source (a spec -> callable kernel): the JIT by default, or a
loaded library of ahead-of-time code (:meth:`vdla.cpu_fallback.native.LoadedLibrary.kernel`), so both run
the same groups and specs. Only the JIT source imports llvmlite.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

import vdla.cpu_fallback.specs as specs
from vdla.cpu_fallback.specs import Spec, contiguous, make_chain
from vdla.graph.ew import Arg, Const, EwStep, Step, is_elementwise, node_steps
from vdla.graph.fusion import EPILOGUE_ANCHORS, fuse_ops
from vdla.graph.graph import Graph, Node, reshaped
from vdla.graph.opnames import CONV2D, REFUSAL
from vdla.graph.ops import OPS, VIEW, CpuKernel, infer_types
from vdla.graph.passes import fresh_name
from vdla.graph.types import TensorType, UnsupportedError


class KernelFn(Protocol):
    """What a kernel source gives: ``kernel(*inputs, out=None)`` -> the output (a JIT or native kernel)."""

    spec: Spec
    out: TensorType

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray: ...


KernelSource = Callable[[Spec], KernelFn]


def get_kernel(spec: Spec) -> KernelFn:
    """The JIT's kernel for ``spec`` (the default kernel source; imports llvmlite)."""
    from vdla.cpu_fallback.jit import get_kernel as jit_kernel

    return jit_kernel(spec)


@dataclass
class Resolved:
    """Steps with tensor operands replaced by input indices (input 0 is the primary value)."""

    steps: tuple[EwStep, ...]
    operand_types: tuple[TensorType, ...]
    operands: list[np.ndarray | TensorType]  # sources of inputs 1.. in order


def resolve_steps(primary: object, steps: Sequence[Step]) -> Resolved:
    """Turn requested steps into :class:`EwStep` s, numbering distinct tensor operands from 1."""
    sources: list[object] = [primary]
    types: list[TensorType] = []
    out: list[EwStep] = []
    for step in steps:
        if not isinstance(step, Step):
            raise UnsupportedError("chain", f"expected steps from vdla.graph.ew, got {type(step).__name__}")
        operands: list[Const | Arg] = []
        for o in step.operands:
            if isinstance(o, np.ndarray | TensorType):
                index = next((i for i, s in enumerate(sources) if s is o), None)
                if index is None:
                    types.append(TensorType.of(o, step.op))
                    sources.append(o)
                    index = len(sources) - 1
                operands.append(Arg(index))
            else:
                operands.append(Const(o.item() if isinstance(o, np.generic) else o))
        out.append(EwStep(step.op, tuple(operands), tuple(sorted(step.attrs.items()))))
    return Resolved(tuple(out), tuple(types), sources[1:])


def compile_chain(x: np.ndarray | TensorType, steps: Sequence[Step]) -> KernelFn:
    """Compile ``steps`` applied to ``x`` as one kernel; call it as ``kernel(x, *operand_arrays)``.

    Operand arrays are taken in order of first appearance (an operand that is ``x`` itself is not repeated).
    """
    r = resolve_steps(x, steps)
    return get_kernel(make_chain((TensorType.of(x, "chain"), *r.operand_types), r.steps))


def run_chain(x: np.ndarray, steps: Sequence[Step], out: np.ndarray | None = None) -> np.ndarray:
    """Compile (cached) and run a chain whose tensor operands are given as arrays in ``steps``."""
    r = resolve_steps(x, steps)
    if not all(isinstance(a, np.ndarray) for a in r.operands):
        raise UnsupportedError("chain", "run_chain needs arrays as operands; use compile_chain for types")
    arrays = [contiguous(a) for a in (x, *r.operands)]
    kernel = get_kernel(make_chain((TensorType.of(x, "chain"), *r.operand_types), r.steps))
    return kernel(*arrays, out=out)


# ---------------------------------------------------------------------------------------------------------
# Graphs


def spec_factory(kernel: CpuKernel) -> Callable[..., Spec]:
    """The kernel-spec factory of :mod:`vdla.cpu_fallback.specs` that an operator's :class:`CpuKernel` names."""
    factory = getattr(specs, kernel.factory or "", None)
    if not callable(factory):
        raise TypeError(f"CpuKernel names {kernel.factory!r}, which is no spec factory of vdla.cpu_fallback.specs")
    return factory


def node_spec(node: Node, types: Sequence[TensorType], **extra: Any) -> Spec:
    """The kernel spec of ``node`` on inputs of ``types``: its operator's CPU kernel (:attr:`OpDef.cpu
    <vdla.graph.ops.OpDef.cpu>`) built from the types, the kernel's fixed arguments, the node's attributes
    and ``extra``."""
    kernel = OPS[node.op].cpu
    args = (tuple(types),) if kernel.variadic else tuple(types)
    attrs = {k: v for k, v in node.attrs.items() if k != REFUSAL}
    try:
        return spec_factory(kernel)(*args, **dict(kernel.fixed), **attrs, **extra)
    except TypeError as e:  # attributes that the operator does not take
        raise UnsupportedError(node.op, f"bad attributes {node.attrs}: {e}") from e


def fuse(graph: Graph) -> list[list[Node]]:
    """The CPU fallback's kernels for ``graph``, in graph order: the groups of :func:`vdla.graph.fusion.fuse_ops`,
    each cut into the runs of nodes one kernel executes.

    A node joins the previous node's run when both lie in one group, it is elementwise, its running value
    is that run's output, nothing else (no other node, no graph output) reads that value and the run starts
    at an elementwise node or at a conv2d/dense (the run is then that kernel's epilogue). A node that one of
    :data:`JOINS` takes joins a run of one node (a pack_blocked of an im2col, a softmax of a dequantize). Raises
    :class:`UnsupportedError` for a node whose operator has no CPU kernel.
    """
    for node in graph.nodes:
        opdef = OPS.get(node.op)
        if opdef is None or opdef.cpu is None:
            raise UnsupportedError(node.op, f"no CPU kernel for this operator (node {node.output!r})")
    types = infer_types(graph)
    group_of = fuse_ops(graph, types).group_of
    readers = Counter(name for node in graph.nodes for name in node.inputs)
    readers.update(graph.outputs)
    runs: list[list[Node]] = []
    for node in graph.nodes:
        if runs and any(j.takes(runs[-1], node, readers, types) for j in JOINS):
            runs[-1].append(node)
            continue
        if runs and is_elementwise(node):
            last = runs[-1]
            anchor_ok = is_elementwise(last[0]) or last[0].op in EPILOGUE_ANCHORS
            value = last[-1].output
            joins = node.inputs[0] == value and readers[value] == 1 and group_of[node.output] == group_of[value]
            if anchor_ok and joins:
                last.append(node)
                continue
        runs.append([node])
    return runs


@dataclass(frozen=True)
class Join:
    """Two nodes one kernel runs: a ``second`` node reading the only output of a one-node run of ``first``, which
    nothing else reads, where ``fits(first_node, types)``; ``spec(group, types)`` is the joined kernel's spec and
    its argument names. The pair of operators names the join: :func:`fuse` forms no other two-node run of them."""

    first: str
    second: str
    fits: Callable[[Node, Mapping[str, TensorType]], bool]
    spec: Callable[[list[Node], Mapping[str, TensorType]], tuple[Spec, list[str]]]

    def takes(self, run: list[Node], node: Node, readers: Counter, types: Mapping[str, TensorType]) -> bool:
        """Whether ``node`` joins ``run``."""
        if len(run) != 1 or run[0].op != self.first or node.op != self.second:
            return False
        value = run[0].output
        return node.inputs[0] == value and readers[value] == 1 and self.fits(run[0], types)

    def of(self, group: list[Node]) -> bool:
        """Whether ``group`` is a run this join formed."""
        return len(group) == 2 and (group[0].op, group[1].op) == (self.first, self.second)


def _int8_dequantize(node: Node, types: Mapping[str, TensorType]) -> bool:
    scale = node.attrs.get("scale")
    scalar = isinstance(scale, int | float) and not isinstance(scale, bool)
    return scalar and types[node.inputs[0]].dtype == "int8"


def _packed_im2col(group: list[Node], types: Mapping[str, TensorType]) -> tuple[Spec, list[str]]:
    im2col, pack = group
    names = list(im2col.inputs)
    packed = (pack.attrs["batch"], pack.attrs["block"])
    return node_spec(im2col, [types[n] for n in names], packed=packed), names


def _softmax_of_int8(group: list[Node], types: Mapping[str, TensorType]) -> tuple[Spec, list[str]]:
    dequantize, softmax = group
    names = [dequantize.inputs[0]]
    return node_spec(softmax, [types[names[0]]], scale=float(dequantize.attrs["scale"])), names


JOINS = (
    # the im2col kernel writes the blocked layout itself (Im2colSpec.packed): one pass over the columns, not two
    Join("im2col", "pack_blocked", lambda node, types: True, _packed_im2col),
    # the softmax kernel reads the int8 values of a dequantize by a constant scale (SoftmaxSpec.scale)
    Join("dequantize", "softmax", _int8_dequantize, _softmax_of_int8),
)


@dataclass
class CompiledGroup:
    """One step of a compiled graph: a kernel (or, for ``reshape``, a free view) with its argument names."""

    kernel: KernelFn | None
    args: tuple[str, ...]
    output: str
    nodes: tuple[str, ...]
    out: TensorType

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Run the group; ``out`` (a preallocated array of the output's type) receives a kernel's result."""
        return self.kernel(*arrays, out=out) if self.kernel else arrays[0].reshape(self.out.shape)

    def evaluate(self, *arrays: np.ndarray) -> np.ndarray:
        """This step's output computed in numpy (:meth:`Spec.evaluate <vdla.cpu_fallback.specs.Spec.evaluate>`)."""
        return self.kernel.spec.evaluate(*arrays) if self.kernel else arrays[0].reshape(self.out.shape)


class CompiledGraph:
    """A graph compiled to one kernel per fused group; call with input arrays by name."""

    def __init__(self, graph: Graph, groups: list[CompiledGroup], params: dict[str, np.ndarray]) -> None:
        self.graph, self.groups, self.params = graph, groups, params

    def __call__(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        return self.run(feeds)

    def run(
        self, feeds: Mapping[str, np.ndarray], buffers: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """The graph's outputs on ``feeds``; a group whose output has an array in ``buffers`` writes it there
        (preallocated host memory), the others allocate theirs."""
        missing = set(self.graph.inputs) - set(feeds)
        if missing:
            raise UnsupportedError("graph", f"missing inputs {sorted(missing)}")
        buffers = buffers or {}
        env: dict[str, np.ndarray] = dict(self.params)
        env.update({k: contiguous(v) for k, v in feeds.items()})
        for stage in self.groups:
            env[stage.output] = stage(*(env[a] for a in stage.args), out=buffers.get(stage.output))
        return {name: env[name] for name in self.graph.outputs}


def _anchored_spec(
    anchor: Node, chain: list[Node], types: Mapping[str, TensorType], params: dict[str, np.ndarray]
) -> tuple[Spec, list[str]]:
    """Spec of a conv2d/dense node with its bias and the chain fused into the epilogue."""
    x, w, *bias = anchor.inputs
    names = [anchor.output]  # epilogue input 0 is the accumulator
    steps: tuple[EwStep, ...] = ()
    if bias:
        if bias[0] not in params:
            raise UnsupportedError(anchor.op, "bias must be a graph parameter")
        shaped = f"{bias[0]}@{anchor.output}"
        shape = (1, -1, 1, 1) if anchor.op == CONV2D else (1, -1)
        params[shaped] = contiguous(params[bias[0]].reshape(shape))
        steps = node_steps([Node("add", (anchor.output, shaped), anchor.output)], names)
    steps += node_steps(chain, names)
    epi_types = tuple(TensorType.of(params[n], anchor.op) if n in params else types[n] for n in names[1:])
    spec = node_spec(anchor, (types[x], types[w]), epilogue_inputs=epi_types, epilogue=steps)
    return spec, [x, w, *names[1:]]


def split_computed_bias(graph: Graph) -> Graph:
    """A conv2d/dense whose bias is computed (not a parameter) as the layer without bias followed by an add
    of the bias reshaped to broadcast along the channel axis (the add then fuses as the epilogue)."""
    taken = {*graph.inputs, *graph.params, *(n.output for n in graph.nodes)}
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.op not in EPILOGUE_ANCHORS or len(node.inputs) < 3 or node.inputs[2] in graph.params:
            nodes.append(node)
            continue
        acc, rows = (fresh_name(f"{node.output}:{what}", taken) for what in ("acc", "bias_rows"))
        shape = (1, -1, 1, 1) if node.op == CONV2D else (1, -1)
        nodes += [
            Node("reshape", (node.inputs[2],), rows, {"shape": shape}),
            Node(node.op, node.inputs[:2], acc, node.attrs),
            Node("add", (acc, rows), node.output),
        ]
    return graph.copy(nodes=nodes)


def graph_specs(graph: Graph) -> list[Spec]:
    """The specs of the kernels :func:`compile_graph` runs for ``graph``, in order (one per group, views
    excepted), without compiling anything: what ahead-of-time code for ``graph`` must contain."""
    specs_: list[Spec] = []
    compile_graph(graph, specs_.append)
    return specs_


def compile_graph(graph: Graph, kernels: KernelSource = get_kernel) -> CompiledGraph:
    """Fuse, type and compile every group of ``graph``, taking each group's kernel from ``kernels`` (by
    default the JIT, whose caches give already compiled kernels)."""
    graph = split_computed_bias(graph)
    params = dict(graph.params)
    types: dict[str, TensorType] = dict(graph.inputs)
    types.update({k: TensorType.of(v, "graph") for k, v in params.items()})
    stages = []
    for group in fuse(graph):
        anchor = group[0]
        if OPS[anchor.op].cpu == VIEW:
            src = types[anchor.inputs[0]]
            types[anchor.output] = TensorType(reshaped(src.shape, anchor.attrs["shape"]), src.dtype)
            stages.append(CompiledGroup(None, anchor.inputs, anchor.output, (anchor.output,), types[anchor.output]))
            continue
        join = next((j for j in JOINS if j.of(group)), None)
        if join is not None:
            spec, names = join.spec(group, types)
        elif is_elementwise(anchor):
            names = [anchor.inputs[0]]
            steps = node_steps(group, names)  # appends the chain's tensor operands to names
            spec: Spec = make_chain(tuple(types[n] for n in names), steps)
        elif anchor.op in EPILOGUE_ANCHORS:
            spec, names = _anchored_spec(anchor, group[1:], types, params)
        else:
            names = list(anchor.inputs)
            spec = node_spec(anchor, [types[n] for n in names])
        types[group[-1].output] = spec.out
        stages.append(
            CompiledGroup(kernels(spec), tuple(names), group[-1].output, tuple(n.output for n in group), spec.out)
        )
    return CompiledGraph(graph, stages, params)
