"""The ONNX importer: an ONNX model (file or ``onnx.ModelProto``) -> a verified :class:`vdla.graph.Graph`.

Steps, each failing with an error that names the file (or model) or the node (docs/model.md, "Import
rules"):

1. read the model (a malformed or truncated file is a :class:`FrontendError` naming the file), check the
   opset of the default domain is between 7 and the newest the installed ``onnx`` knows, run
   ``onnx.checker``;
2. fix the input shapes: a dimension that is symbolic, missing, -1 or 0 is dynamic and must be given in
   ``input_shapes`` (else an error naming the input, the dimensions and the ``--input-shape`` that fixes
   them); a fixed one given there must be given its own value;
3. set the shapes the model stores for computed values (``value_info``, outputs) aside as hints, rewrite
   float16/bfloat16/float64 as float32 (an :class:`OnnxImportWarning` names what), run ONNX shape inference;
4. convert node by node (:mod:`vdla.frontend.onnx_ops`): initializers and ``Constant`` nodes are
   constants (an initializer holding NaN, or an infinity where a node reads it as weights, is a
   :class:`FrontendError` naming it and the node), ``Shape`` of a value is a constant; a node whose inputs
   are all constants (shape arithmetic, folded weights) is evaluated now with ``onnx.reference`` (except
   ``DequantizeLinear``, kept so quantized weights stay int8); an ``If`` on a constant condition is replaced
   by its taken branch; every other node is brought to its operator's newest form
   (:func:`vdla.frontend.onnx_ops.legacy.modernize`) and must have a converter, attributes and dtypes it
   accepts, else an :class:`~vdla.graph.types.UnsupportedError` names the node, its op type and attributes.
   Every node vdla cannot run is reported together, before anything runs;
5. check every converted value against ONNX's inferred shape (except where that inference is known wrong:
   :data:`_INFERENCE_DEFAULT_WRONG`) and element type, warn where a stored hint
   disagrees with vdla's shape (vdla's wins), name the graph outputs as in the model, and verify the graph
   (:func:`vdla.graph.verify.verify`, ``after="onnx import"``).

Values keep their ONNX names (made unique and printable). A uint8 tensor is held as int8 ``value - 128``;
a uint8 graph input is fed, and a uint8 graph output returned, as int32 holding the uint8 values. An int64
tensor is held as int32 (:mod:`vdla.frontend.builder` states where): an int64 graph input is fed, and an
int64 output returned, as int32. A bool tensor is a bool graph value.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vdla.errors import VdlaError
from vdla.frontend.builder import Builder, OnnxNode, Value, unsupported, valid_name
from vdla.frontend.errors import FrontendError, OnnxImportWarning
from vdla.frontend.onnx_ops import ATTRS, CONVERTERS, SUPPORTED
from vdla.frontend.onnx_ops.legacy import modernize
from vdla.graph.graph import Graph, Node
from vdla.graph.passes import fresh_name
from vdla.graph.types import DTYPES, TensorType, UnsupportedError
from vdla.graph.verify import verify
from vdla.untrusted import check_size, max_read_bytes, read_file

try:
    import onnx
    from onnx import helper, numpy_helper

    from vdla.frontend.control import MAX_ITERATIONS, MAX_UNROLLED_NODES, copy_graph, identity, stack, subgraph, take
    from vdla.frontend.control import attr as proto_attr
    from vdla.frontend.control import constant as const_node
except ModuleNotFoundError as e:  # pragma: no cover - the onnx extra
    if e.name is None or not e.name.startswith("onnx"):
        raise
    raise ImportError("importing ONNX models needs the onnx package: pip install 'vdla[onnx]'") from e

MIN_OPSET = 7
# attributes holding an element type (TensorProto enum), given to the converters as a dtype name
_DTYPE_ATTRS = ("to", "output_dtype", "dtype")
# never evaluated at import even on constant inputs: a dequantized int8 weight stays int8 in the graph
_KEEP = ("DequantizeLinear",)
# control flow: the importer's method for each (branches compiled both, loops unrolled)
_CONTROL = {"If": "inline_if", "Loop": "unroll_loop", "Scan": "unroll_scan"}
# (op type, attribute) whose absence ONNX's shape inference reads as 0 where the operator's default is 1 (onnx
# 1.23.2: STFT's onesided): such a node's outputs are not checked against the inferred shapes
_INFERENCE_DEFAULT_WRONG = {("STFT", "onesided")}
# float element types a model may compute in, which vdla computes in float32
_WIDE_FLOATS = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16",
                onnx.TensorProto.DOUBLE: "float64"}  # fmt: skip
# every op type the importer takes: the converters' and If (inlined on a constant condition)
IMPORTED = tuple(sorted((*SUPPORTED, *_CONTROL)))
# what a converter raises on a node that is malformed in a way its checks did not foresee (reported as the node's
# UnsupportedError, like a node vdla cannot run)
_MALFORMED = (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError)
Shape = tuple[int | None, ...]  # None: a dimension not known (dynamic, symbolic or missing)
# the inputs of each op type that are its weights: an initializer read there must be finite (NaN anywhere is
# refused; an infinity elsewhere is a mask or an unbounded clip)
WEIGHT_INPUTS = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (0, 1, 2), "MatMul": (0, 1), "BatchNormalization": (1, 2, 3, 4),
    "InstanceNormalization": (1, 2), "LayerNormalization": (1, 2), "PRelu": (1,), "LSTM": (1, 2, 3), "GRU": (1, 2, 3),
    "RNN": (1, 2, 3),
}  # fmt: skip


def max_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` package knows."""
    return int(onnx.defs.onnx_opset_version())


@functools.cache
def _dtype_name(elem_type: int) -> str:
    if elem_type == onnx.TensorProto.STRING:  # numpy holds strings as objects
        return "string"
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        if not elem_type:
            return "undefined"
        try:
            return onnx.TensorProto.DataType.Name(elem_type).lower()
        except ValueError:  # not an element type of this onnx
            return f"element type {elem_type}"


def _warn(message: str) -> None:
    warnings.warn(message, OnnxImportWarning, stacklevel=2)


def _dynamic_rewrites(proto: onnx.ModelProto, dequantize: bool) -> onnx.ModelProto:
    """``proto``, or a rewritten copy when it holds onnxruntime's fused or (``dequantize``) dynamic units."""
    from vdla.frontend.dynamic import dequantize_dynamic, expand_contrib

    kinds = {n.op_type for n in proto.graph.node}
    if not kinds & {"DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLinear"}:
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    expand_contrib(copy)
    if dequantize:
        dequantize_dynamic(copy)
    return copy


def _load(model: str | os.PathLike | onnx.ModelProto, limit: int) -> tuple[onnx.ModelProto, str]:
    """The model and how errors name it (the file path, or the graph name of a ModelProto); the file, each tensor
    it holds and all of them together within the read limit ``limit`` (:mod:`vdla.untrusted`) before any tensor
    is made an array."""
    if isinstance(model, onnx.ModelProto):
        where = f"ONNX model {model.graph.name or '(unnamed)'!r}"
        _check_claims(model, where, limit)
        return model, where
    if not isinstance(model, str | os.PathLike):
        raise FrontendError(f"expected an ONNX file path or an onnx.ModelProto, got {type(model).__name__}")
    path = Path(model)
    where = str(path)
    if not path.is_file():
        raise FrontendError(f"{where}: no such ONNX file")
    data = read_file(path, limit, FrontendError)
    try:
        proto = onnx.load_from_string(data)
    except Exception as e:  # protobuf DecodeError, ...
        raise FrontendError(f"{where}: not a readable ONNX model (malformed or truncated file?): {e}") from e
    if not proto.graph.node and not proto.graph.output:
        raise FrontendError(f"{where}: not a readable ONNX model: it has no graph (empty or truncated file?)")
    _check_claims(proto, where, limit)
    _load_external(proto, path, where, limit)
    return proto, where


def _tensors(proto: onnx.ModelProto) -> Iterator[tuple[str, onnx.TensorProto]]:
    """Every tensor the model holds, with what it is: initializers and tensor attributes, subgraphs included."""
    for g in _graphs(proto.graph):
        for t in g.initializer:
            yield f"initializer {t.name!r}", t
        for node in g.node:
            for a in node.attribute:
                for t in [a.t] if a.type == onnx.AttributeProto.TENSOR else a.tensors:
                    yield f"{node.op_type} node {node.name or node.output[:1]!r} attribute {a.name!r}", t


def _names(g: onnx.GraphProto) -> Iterator[tuple[str, str | bytes]]:
    """Every name of graph ``g`` itself (not its subgraphs'), with what it names."""
    yield "the graph's name", g.name
    for kind, items in (("initializer", g.initializer), ("input", g.input), ("output", g.output)):
        yield from ((f"{kind} {k}", t.name) for k, t in enumerate(items))
    yield from ((f"value_info {k}", vi.name) for k, vi in enumerate(g.value_info))
    for k, n in enumerate(g.node):
        yield from ((f"node {k} {field}", getattr(n, field)) for field in ("name", "op_type", "domain"))
        yield from ((f"node {k} input {i}", v) for i, v in enumerate(n.input))
        yield from ((f"node {k} output {i}", v) for i, v in enumerate(n.output))
        yield from ((f"node {k} attribute {i}", a.name) for i, a in enumerate(n.attribute))


def _check_text(proto: onnx.ModelProto, where: str) -> None:
    """Refuse a name that is not UTF-8 text (protobuf hands it over as bytes)."""
    for g in _graphs(proto.graph):
        for what, name in _names(g):
            if not isinstance(name, str):
                raise FrontendError(f"{where}: {what} in graph {g.name!r}: its name {name[:40]!r} is not UTF-8 text")


def _check_claims(proto: onnx.ModelProto, where: str, limit: int) -> None:
    """Refuse a name that is not text, a tensor with a negative dimension, or whose shape claims more than
    ``limit`` bytes (alone, or all together), before any is made an array."""
    _check_text(proto, where)
    total = 0
    for what, t in _tensors(proto):
        if any(d < 0 for d in t.dims):
            raise FrontendError(f"{where}: {what}: shape {list(t.dims)} has a negative dimension")
        dtype = _dtype_name(t.data_type)
        itemsize = np.dtype(dtype).itemsize if dtype in np.sctypeDict else 1
        nbytes = math.prod(t.dims) * max(itemsize, 1)
        check_size(nbytes, limit, f"{where}: {what}", f"a {dtype} tensor of shape {list(t.dims)}", FrontendError)
        total += nbytes
        check_size(total, limit, f"{where}: {what}", "the tensors up to this one", FrontendError)


def _load_external(proto: onnx.ModelProto, path: Path, where: str, limit: int) -> None:
    """Load the tensors stored in files beside the model, each a regular file inside the model's directory whose
    size (or the ``length`` read of it) is within the read limit."""
    base = path.parent.resolve()
    external = [(what, t) for what, t in _tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]
    for what, t in external:
        info = {e.key: e.value for e in t.external_data}
        target = (base / info.get("location", "")).resolve()
        if not target.is_relative_to(base) or not target.is_file():
            raise FrontendError(
                f"{where}: {what}: its external data {info.get('location')!r} is not a file beside the model"
            )
        size = target.stat().st_size
        try:
            size = min(size, int(info.get("length", size)))
        except ValueError as e:
            raise FrontendError(f"{where}: {what}: external data length {info.get('length')!r}") from e
        check_size(size, limit, f"{where}: {what}", f"its external data {info.get('location')!r}", FrontendError)
    if external:
        try:
            onnx.load_external_data_for_model(proto, str(base))
        except Exception as e:  # missing file, a bad offset, ...
            raise FrontendError(f"{where}: the external data cannot be read: {e}") from e


def model_opset(proto: onnx.ModelProto, where: str) -> int:
    """The model's default-domain opset, checked to lie in [7, :func:`max_opset`]."""
    versions = [int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise FrontendError(f"{where}: the model imports no default-domain (ai.onnx) opset")
    opset = max(versions)
    if not MIN_OPSET <= opset <= max_opset():
        raise FrontendError(
            f"{where}: opset {opset} is not supported: vdla imports opsets {MIN_OPSET} to {max_opset()} "
            f"(onnx {onnx.__version__}); convert the model with onnx.version_converter"
        )
    return opset


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph of its nodes (If branches, loop bodies), depth first."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from _graphs(sub)


def _dynamic(d: onnx.TensorShapeProto.Dimension) -> bool:
    """A dimension without a fixed size: symbolic (``dim_param``), missing, or the -1 or 0 exporters write."""
    return not d.HasField("dim_value") or d.dim_value < 1


def _dim_text(d: onnx.TensorShapeProto.Dimension) -> str:
    if d.HasField("dim_param"):
        return repr(d.dim_param)
    return str(d.dim_value) if d.HasField("dim_value") else "unknown"


def _fix_input(vi: onnx.ValueInfoProto, shape: tuple[int, ...] | None, where: str) -> None:
    """Fix every dimension of graph input ``vi`` in place: a dynamic one to ``shape``'s (required), a fixed
    one checked against it."""
    if not vi.type.HasField("tensor_type"):
        raise FrontendError(f"{where}: input {vi.name!r} is not a tensor")
    dims = vi.type.tensor_type.shape.dim  # the checker requires a shape (a rank) on every graph input
    if shape is None:
        dynamic = [k for k, d in enumerate(dims) if _dynamic(d)]
        if dynamic:
            example = tuple(1 if _dynamic(d) else int(d.dim_value) for d in dims)
            which = ", ".join(f"{k} ({_dim_text(dims[k])})" for k in dynamic)
            what = f"dimension {which} is" if len(dynamic) == 1 else f"dimensions {which} are"
            raise FrontendError(
                f"{where}: input {vi.name!r} {what} dynamic; fix it with input_shapes={{{vi.name!r}: {example}}} "
                f"(CLI: --input-shape {vi.name}={'x'.join(map(str, example))}), with the sizes you run"
            )
        return
    if len(shape) != len(dims):
        raise FrontendError(f"{where}: input {vi.name!r} has rank {len(dims)}, input_shapes gives {shape}")
    for k, (d, n) in enumerate(zip(dims, shape, strict=True)):
        if n < 1:
            raise FrontendError(f"{where}: input {vi.name!r} dimension {k}: size {n} must be >= 1")
        if not _dynamic(d) and d.dim_value != n:
            raise FrontendError(
                f"{where}: input {vi.name!r} dimension {k} is {d.dim_value} in the model, input_shapes gives {n}"
            )
        d.dim_value = n  # dim_value and dim_param are one field (a oneof): the symbol goes


def _static_inputs(
    proto: onnx.ModelProto, where: str, input_shapes: Mapping[str, tuple[int, ...]] | None
) -> onnx.ModelProto:
    """A copy of the model with every graph input dimension fixed (from the model or ``input_shapes``)."""
    given = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    inits = {t.name for t in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    unknown = sorted(set(given) - {i.name for i in inputs})
    if unknown:
        names = ", ".join(repr(i.name) for i in inputs)
        raise FrontendError(f"{where}: input_shapes names {unknown}, which are not graph inputs (inputs: {names})")
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    for vi in fixed.graph.input:
        if vi.name not in inits:
            _fix_input(vi, given.get(vi.name), where)
    return fixed


def _strip_hints(proto: onnx.ModelProto) -> dict[str, Shape]:
    """Remove the shapes the model stores for computed values (``value_info``, graph and branch outputs),
    in place, and return them: exporters write them for their own input shapes (or stale), so they are
    hints, compared with what vdla computes but never trusted."""
    hints: dict[str, Shape] = {}
    for g in _graphs(proto.graph):
        for vi in [*g.value_info, *g.output]:
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.HasField("shape"):
                hints[vi.name] = tuple(None if _dynamic(d) else int(d.dim_value) for d in tt.shape.dim)
        del g.value_info[:]
        for vi in g.output:
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
    return hints


def _narrow(t: onnx.TensorProto, where: str) -> str | None:
    """Rewrite a float16/bfloat16/float64 tensor as float32 in place; its old dtype name, else None."""
    wide = _WIDE_FLOATS.get(t.data_type)
    if wide is not None:
        try:
            value = numpy_helper.to_array(t)
        except Exception as e:  # data that does not fill its dims, ...
            raise FrontendError(f"{where}: tensor {t.name!r} ({wide}) cannot be read: {e}") from e
        t.CopyFrom(numpy_helper.from_array(value.astype(np.float32), t.name))
    return wide


def _listing(kind: str, names: list[str]) -> str:
    """``input 'x'`` for one name, ``3 initializers ('w', 'b', 'fc')`` for several (the first 4 shown)."""
    if len(names) == 1:
        return f"{kind} {names[0]!r}"
    shown = ", ".join(map(repr, names[:4])) + (", ..." if len(names) > 4 else "")
    return f"{len(names)} {kind}s ({shown})"


def _as_float32(proto: onnx.ModelProto, where: str) -> None:
    """Rewrite every float16/bfloat16/float64 tensor, value type and Cast target of the model as float32, in place,
    with one :class:`OnnxImportWarning` per dtype naming what changed (vdla computes in float32)."""
    found: dict[str, dict[str, list[str]]] = {}  # dtype -> kind -> names

    def note(wide: str | None, kind: str, name: str) -> None:
        if wide is not None:
            found.setdefault(wide, {}).setdefault(kind, []).append(name)

    for g in _graphs(proto.graph):
        for t in g.initializer:
            note(_narrow(t, where), "initializer", t.name)
        for kind, infos in (("input", g.input), ("output", g.output)):
            for vi in infos:
                tt = vi.type.tensor_type
                if vi.type.HasField("tensor_type") and tt.elem_type in _WIDE_FLOATS:
                    note(_WIDE_FLOATS[tt.elem_type], kind, vi.name)
                    tt.elem_type = onnx.TensorProto.FLOAT
        for node in g.node:
            for a in node.attribute:
                wide = None
                if a.type == onnx.AttributeProto.TENSOR:
                    wide = _narrow(a.t, where)
                elif a.type == onnx.AttributeProto.INT and a.name in _DTYPE_ATTRS and a.i in _WIDE_FLOATS:
                    wide, a.i = _WIDE_FLOATS[a.i], onnx.TensorProto.FLOAT
                note(wide, node.op_type, node.name or node.output[0])
    for wide, kinds in sorted(found.items()):
        what = ", ".join(_listing(kind, names) for kind, names in kinds.items())
        _warn(f"{where}: {wide} computed in float32 (vdla's float type): {what}")


def _attrs(node: onnx.NodeProto, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH or a.type == onnx.AttributeProto.GRAPHS:
            out[a.name] = "<subgraph>"
            continue
        if a.type == onnx.AttributeProto.SPARSE_TENSOR:
            out[a.name] = "<sparse tensor>"
            continue
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list):
            v = [i.decode("utf-8", "replace") if isinstance(i, bytes) else i for i in v]
        if a.name in _DTYPE_ATTRS and isinstance(v, int):
            v = _dtype_name(v)
        out[a.name] = v
    return out


def _fold(proto: onnx.NodeProto, opset: int, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Evaluate one node on constant inputs with the ONNX reference implementation."""
    from onnx.reference import ReferenceEvaluator

    inits = [numpy_helper.from_array(np.asarray(a), name) for name, a in arrays.items()]
    outputs = [onnx.ValueInfoProto(name=o) for o in proto.output if o]
    graph = onnx.helper.make_graph([proto], "fold", [], outputs, initializer=inits)
    results = ReferenceEvaluator(graph, opsets={"": opset}).run(None, {})
    return [np.asarray(r) for r in results]


def _shape_text(shape: Shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class _Importer:
    def __init__(self, proto: onnx.ModelProto, where: str, opset: int, hints: Mapping[str, Shape], limit: int) -> None:
        self.proto, self.where, self.opset, self.hints, self.limit = proto, where, opset, hints, limit
        self.b = Builder(opset)
        self.errors: list[UnsupportedError] = []
        self.poisoned: set[str] = set()
        self.inferred: dict[str, tuple[str, Shape | None]] = {}
        self.node_names: set[str] = set()
        self.readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}  # value -> (node, input index) reading it

    def infer_shapes(self) -> None:
        """ONNX's shape inference of the model (its stored hints stripped), the cross-check of every converted
        value. Not strict: a node it cannot infer (the branch of an If that the fixed shapes rule out) is left
        unchecked; vdla infers every shape itself."""
        try:
            inferred = onnx.shape_inference.infer_shapes(self.proto, check_type=True, data_prop=True)
        except Exception as e:  # onnx.shape_inference.InferenceError and friends
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            _warn(f"{self.where}: ONNX shape inference fails ({reason}); vdla imports with its own shapes only")
            return
        for g in _graphs(inferred.graph):
            for vi in [*g.value_info, *g.output]:
                if not vi.type.HasField("tensor_type"):
                    continue
                tt = vi.type.tensor_type
                shape = (
                    tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
                    if tt.HasField("shape")
                    else None
                )
                self.inferred[vi.name] = (_dtype_name(tt.elem_type), shape)

    def run(self) -> Graph:
        g, b = self.proto.graph, self.b
        graphs = list(_graphs(g))
        inits = [t.name for sub in graphs for t in sub.initializer]
        names = [*inits, *(i.name for i in g.input), *(o for sub in graphs for n in sub.node for o in n.output)]
        b.reserve(names)
        b.used = {i for sub in graphs for n in sub.node for i in n.input if i} | {
            o.name for sub in graphs for o in sub.output
        }
        for sub in graphs:
            for n in sub.node:
                for i, name in enumerate(n.input):
                    self.readers.setdefault(name, []).append((n, i))
        self.bind_initializers(g)
        if g.sparse_initializer:
            raise FrontendError(f"{self.where}: sparse initializers are not supported")
        self.bind_inputs(g)
        self.convert_nodes(g.node)
        outputs = self.outputs()
        self.warn_stale_hints()
        if self.errors:
            if len(self.errors) == 1:  # named with the file, as the list of several is
                e = self.errors[0]
                raise UnsupportedError(e.op, f"{str(e).removeprefix(f'{e.op}: ')} (in {self.where})") from e
            lines = "\n".join(f"  - {e}" for e in self.errors)
            raise UnsupportedError(
                self.errors[0].op, f"{self.where}: {len(self.errors)} nodes cannot be imported:\n{lines}"
            )
        used = {i for n in b.nodes for i in n.inputs} | set(outputs)
        params = {k: v for k, v in b.params.items() if k in used}
        stem = Path(self.where).stem if Path(self.where).suffix == ".onnx" else ""
        graph = Graph(dict(b.inputs), list(b.nodes), outputs, params, name=valid_name(g.name or stem, "onnx"))
        verify(graph, after=f"onnx import of {self.where}")
        return graph

    def bind_initializers(self, g: onnx.GraphProto) -> None:
        for t in g.initializer:
            try:
                value = numpy_helper.to_array(t)
            except Exception as e:  # external data not found, unknown element type, ...
                raise FrontendError(f"{self.where}: initializer {t.name!r} cannot be read: {e}") from e
            self.check_finite(t.name, value)
            self.b.bind_const(t.name, value)

    def check_finite(self, name: str, value: np.ndarray) -> None:
        """Refuse a float initializer holding NaN, or holding an infinity where a node reads it as weights
        (:data:`WEIGHT_INPUTS`), naming it, the first bad element and the node reading it."""
        if value.dtype.kind != "f" or np.isfinite(value).all():
            return
        nan = np.isnan(value)
        readers = self.readers.get(name, [])
        weights = [(n, i) for n, i in readers if i in WEIGHT_INPUTS.get(n.op_type, ())]
        if not nan.any() and not weights:
            return
        bad = nan if nan.any() else ~np.isfinite(value)
        at = tuple(int(k) for k in np.argwhere(bad)[0]) if value.ndim else ()
        n, i = (weights or readers or [(None, 0)])[0]
        reader = f", input {i} of {n.op_type} node {n.name or n.output[0]!r}" if n is not None else ""
        raise FrontendError(
            f"{self.where}: initializer {name!r}{reader} holds {int(bad.sum())} {'NaN' if nan.any() else 'infinite'} "
            f"value(s) of {value.size} (the first at {list(at)}: {value[at]}): "
            + ("the weights of a model must be finite" if weights else "a NaN constant makes what it touches NaN")
        )

    def bind_inputs(self, g: onnx.GraphProto) -> None:
        b = self.b
        inits = {t.name for t in g.initializer}
        for vi in g.input:
            if vi.name in inits:
                continue
            tt = vi.type.tensor_type
            dtype = _dtype_name(tt.elem_type)
            shape = tuple(int(d.dim_value) for d in tt.shape.dim)
            if dtype in np.sctypeDict:
                nbytes = math.prod(shape) * np.dtype(dtype).itemsize
                check_size(nbytes, self.limit, f"{self.where}: input {vi.name!r}", f"shape {shape}", FrontendError)
            vname = b.preferred[vi.name]
            if dtype in DTYPES or dtype == "int64":  # an int64 input is fed as int32 (its values must fit)
                t = TensorType(shape, "int32" if dtype == "int64" else dtype)
                b.inputs[vname] = b.types[vname] = t
                b.values[vi.name] = Value(name=vname, type=t, int64=dtype == "int64")
                if dtype == "int64":
                    b.int64.add(vname)
            elif dtype == "uint8":  # fed as int32 holding the uint8 values, held as int8 value - 128
                b.inputs[vname] = b.types[vname] = TensorType(shape, "int32")
                node = OnnxNode(f"input {vi.name}", "Input", (vi.name,), (vi.name,))
                shifted = b.emit(node, "add", (vname,), {"b": -128}, suffix="shifted")
                held = b.emit(node, "cast", (shifted,), {"dtype": "int8"}, suffix="int8")
                b.values[vi.name] = Value(name=held, type=b.types[held], uint8=True)
            else:
                b.values[vi.name] = Value(bad_dtype=dtype, const=None)
                b.values[vi.name].type = TensorType(shape, "float32")  # the shape, for error messages

    def convert_nodes(self, nodes: Sequence[onnx.NodeProto]) -> None:
        """Convert ``nodes`` in order; a node that fails is recorded and poisons the nodes reading it."""
        for index, proto in enumerate(nodes):
            name = fresh_name(valid_name(proto.name, f"{proto.op_type}_{index}"), self.node_names)
            node = OnnxNode(
                name, proto.op_type, tuple(proto.input), tuple(proto.output), _attrs(proto, self.where), self.opset,
                proto.domain,
            )  # fmt: skip
            if any(i in self.poisoned for i in node.inputs if i):
                self.poisoned.update(o for o in node.outputs if o)
                continue
            try:
                self.convert(node, proto)
                self.check(node)
            except UnsupportedError as e:
                self.errors.append(e)
                self.poisoned.update(o for o in node.outputs if o)
            except VdlaError:
                raise
            except _MALFORMED as e:  # a converter's own check missed it: the node is malformed, named as any other
                self.errors.append(
                    unsupported(node, f"its inputs or attributes are malformed ({type(e).__name__}: {e})")
                )
                self.poisoned.update(o for o in node.outputs if o)

    def convert(self, node: OnnxNode, proto: onnx.NodeProto) -> None:
        b = self.b
        if node.domain not in ("", "ai.onnx"):
            raise unsupported(node, f"operator domain {node.domain!r} is not supported (only the default ai.onnx)")
        present = [i for i in node.inputs if i]
        missing = [i for i in present if i not in b.values]
        if missing:
            raise unsupported(node, f"reads {missing}, which are not defined before it")
        if node.op_type == "Constant":
            CONVERTERS["Constant"](b, node)
            return
        if node.op_type in _CONTROL:
            getattr(self, _CONTROL[node.op_type])(node, proto)
            return
        if present and node.op_type not in _KEEP and all(b.values[i].const is not None for i in present):
            self.check_claims(node)
            try:
                results = _fold(proto, self.opset, {i: b.values[i].const for i in present})
            except Exception as e:
                raise unsupported(node, f"evaluating it on its constant inputs failed: {e}") from e
            for o, r in zip([o for o in node.outputs if o], results, strict=False):
                b.bind_const(o, r)
            return
        if node.op_type not in CONVERTERS:
            raise unsupported(node, f"operator {node.op_type} is not supported (vdla imports: {', '.join(IMPORTED)})")
        node = modernize(b, node)
        unknown = sorted(set(node.attrs) - ATTRS[node.op_type])
        if unknown:
            raise unsupported(node, "vdla does not support this attribute here", unknown[0])
        CONVERTERS[node.op_type](b, node)

    def inline_if(self, node: OnnxNode, proto: onnx.NodeProto) -> None:
        """An If whose condition is a constant (once the input shapes are fixed, as exporters' shape checks
        are): the taken branch's nodes converted in place, its outputs bound to the If's. A condition
        computed at run time: :meth:`runtime_if`."""
        v = self.b.value(node, 0)
        if v.const is None:
            self.runtime_if(node, proto)
            return
        if v.const.size != 1:
            raise unsupported(node, f"the condition {node.input(0)!r} is of shape {v.const.shape}, not one value")
        taken = "then" if bool(v.const.reshape(-1)[0]) else "else"
        branch = subgraph(proto, f"{taken}_branch")
        for t in branch.initializer:
            self.check_finite(t.name, numpy_helper.to_array(t))
        copy = copy_graph(branch, f"{node.name}.{taken}/")  # renamed: a loop body's copies hold one each
        self.convert_generated(copy.nodes)
        for out, result in zip(node.outputs, copy.outputs, strict=False):
            r = self.branch_result(node, f"{taken}_branch", result) if out else None
            if r is None and out:
                self.poisoned.add(out)
            elif out:
                self.b.values[out] = r

    def convert_generated(self, nodes: Sequence[onnx.NodeProto]) -> None:
        """Convert nodes made here (renamed subgraph copies, the glue around them): their names registered
        as the model's are (:meth:`run`), then converted in order."""
        b = self.b
        b.reserve(o for n in nodes for o in n.output)
        b.used.update(i for n in nodes for i in n.input if i)
        for sub in (
            s for n in nodes for a in n.attribute for s in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
        ):
            for g in _graphs(sub):
                b.used.update(i for n in g.node for i in n.input if i)
                b.used.update(o.name for o in g.output)
        self.convert_nodes(nodes)

    def branch_result(self, node: OnnxNode, which: str, name: str) -> Value | None:
        """The value ``name`` a branch or body gives, None when its node failed (the error is recorded)."""
        if name in self.poisoned:
            return None
        if name not in self.b.values:
            raise unsupported(node, f"{which} output {name!r} is not defined")
        return self.b.values[name]

    def runtime_if(self, node: OnnxNode, proto: onnx.NodeProto) -> None:
        """An If whose condition is computed at run time: both branches imported (every value of branch
        ``then`` of node X named ``X.then/...``, so each branch's steps say which they belong to), each output
        ``Where(cond, then, else)``. Both branches compute on every input in calibration, so it sees every sample
        in both; a compiled model runs only the branch taken (:mod:`vdla.graph.branches`). The two branches'
        outputs must agree in shape and element type, else the node is refused."""
        cond = self.b.value(node, 0)
        if cond.shape and int(np.prod(cond.shape)) != 1:
            raise unsupported(node, f"the condition {node.input(0)!r} is of shape {cond.shape}, not one value")
        copies = {k: copy_graph(subgraph(proto, f"{k}_branch"), f"{node.name}.{k}/") for k in ("then", "else")}
        for c in copies.values():
            self.convert_generated(c.nodes)
        glue = []
        for k, out in enumerate(node.outputs):
            then_out, else_out = copies["then"].outputs[k], copies["else"].outputs[k]
            t = self.branch_result(node, "then_branch", then_out)
            e = self.branch_result(node, "else_branch", else_out)
            if not out or t is None or e is None:
                self.poisoned.update([out] if out and (t is None or e is None) else [])
                continue
            if t.shape != e.shape or t.onnx_dtype != e.onnx_dtype:
                raise unsupported(
                    node, f"output {k} {out!r}: the then branch gives {t.onnx_dtype}{list(t.shape)}, the else branch "
                    f"{e.onnx_dtype}{list(e.shape)}; vdla compiles both, so they must agree",
                )  # fmt: skip
            glue.append(
                helper.make_node("Where", [node.input(0), then_out, else_out], [out], name=f"{node.name}.select{k}")
            )
        self.convert_generated(glue)

    def loop_bound(self, node: OnnxNode) -> tuple[int, bool]:
        """The most iterations a Loop runs and whether its body's condition may end it sooner; refused,
        naming the node, when they are not known once the input shapes are fixed."""
        m = self.b.value(node, 0).const if node.input(0) else None
        c = self.b.value(node, 1).const if node.input(1) else np.array(True)
        if node.input(0) and m is None:
            both = " and its condition" if c is None else ""
            raise unsupported(
                node, f"the trip count {node.input(0)!r}{both} computed at run time: vdla cannot bound the loop "
                "(it unrolls a Loop whose trip count is a constant once the input shapes are fixed)",
            )  # fmt: skip
        if c is None:
            raise unsupported(
                node, f"the condition {node.input(1)!r} is computed at run time: vdla cannot bound the loop (it "
                "unrolls a Loop whose condition is a constant once the input shapes are fixed)",
            )  # fmt: skip
        if not bool(np.asarray(c).reshape(-1)[0]):
            return 0, False
        if m is None:
            return MAX_ITERATIONS, True
        trips = int(np.asarray(m).reshape(-1)[0])
        if trips > MAX_ITERATIONS:
            raise unsupported(node, f"trip count {trips} is above the {MAX_ITERATIONS} iterations vdla unrolls")
        return max(trips, 0), False

    def unroll_loop(self, node: OnnxNode, proto: onnx.NodeProto) -> None:
        """A Loop unrolled at import: each iteration a renamed copy of the body (``X.iter<i>/...``), its
        iteration number and condition constants, its loop-carried values the previous iteration's; scan
        outputs stacked along a new first axis. The body's condition must be a constant in every iteration."""
        trips, until_false = self.loop_bound(node)
        body = subgraph(proto, "body")
        n_state = len(node.inputs) - 2
        state = list(node.inputs[2:])
        scans: list[list[str]] = [[] for _ in range(len(body.output) - 1 - n_state)]
        budget = MAX_UNROLLED_NODES
        for i in range(trips):
            copy = copy_graph(body, f"{node.name}.iter{i}/")
            budget -= len(copy.nodes)
            if budget < 0:
                raise unsupported(node, f"unrolled, its {i} iterations hold over {MAX_UNROLLED_NODES} nodes")
            head = [const_node(copy.inputs[0], i, np.int64), const_node(copy.inputs[1], True, np.bool_)]
            head += [identity(s, d) for s, d in zip(state, copy.inputs[2:], strict=True)]
            self.convert_generated([*head, *copy.nodes])
            results = [self.branch_result(node, "body", o) for o in copy.outputs]
            if any(r is None for r in results):
                self.poisoned.update(o for o in node.outputs if o)
                return
            state = copy.outputs[1 : 1 + n_state]
            for k, o in enumerate(copy.outputs[1 + n_state :]):
                scans[k].append(o)
            done = results[0].const
            if done is None:
                raise unsupported(node, f"the body's condition {body.output[0].name!r} is computed at run time")
            if not bool(np.asarray(done).reshape(-1)[0]):
                break
        else:
            if until_false:
                raise unsupported(node, f"its condition stays true past {MAX_ITERATIONS} iterations")
        self.bind_results(node, state, scans, [0] * len(scans))

    def bind_results(self, node: OnnxNode, state: list[str], scans: list[list[str]], axes: list[int]) -> None:
        """The Loop's or Scan's outputs: the final loop-carried values, then each scan output stacked."""
        glue = [identity(s, o) for s, o in zip(state, node.outputs, strict=False) if o]
        for parts, axis, out in zip(scans, axes, node.outputs[len(state) :], strict=False):
            if not out:
                continue
            if not parts:
                raise unsupported(node, f"scan output {out!r} would be empty (no iteration runs)")
            glue += stack(parts, out, axis, self.opset)
        self.convert_generated(glue)

    def unroll_scan(self, node: OnnxNode, proto: onnx.NodeProto) -> None:
        """A Scan (opset 9 and later) unrolled over its sequence length, known from the input shapes: each
        iteration a renamed copy of the body, fed slice t of every scan input (from the end where its
        direction is 1), its scan outputs stacked along their axes (in reverse order where the direction is 1)."""
        if self.opset < 9:
            self.unroll_scan8(node, proto)
            return
        body = subgraph(proto, "body")
        m = int(proto_attr(proto, "num_scan_inputs", 0))
        n_state = len(node.inputs) - m
        xs = list(node.inputs[n_state:])
        ranks = [len(self.b.value(node, n_state + j).shape) for j in range(m)]
        in_axes = [a % r for a, r in zip(proto_attr(proto, "scan_input_axes", [0] * m), ranks, strict=True)]
        in_dirs = list(proto_attr(proto, "scan_input_directions", [0] * m))
        lengths = {self.b.value(node, n_state + j).shape[a] for j, a in enumerate(in_axes)}
        if len(lengths) != 1:
            raise unsupported(node, f"its scan inputs have different sequence lengths {sorted(lengths)}")
        length = lengths.pop()
        if length > MAX_ITERATIONS:
            raise unsupported(node, f"sequence length {length} is above the {MAX_ITERATIONS} iterations vdla unrolls")
        k_out = len(body.output) - n_state
        run = self.scan_body(node, body, list(node.inputs[:n_state]), xs, in_axes, in_dirs, length, node.name)
        if run is None:
            return
        state, scans = run
        out_dirs = list(proto_attr(proto, "scan_output_directions", [0] * k_out))
        scans = [p[::-1] if d else p for p, d in zip(scans, out_dirs, strict=True)]
        out_axes = list(proto_attr(proto, "scan_output_axes", [0] * k_out))
        axes = [a % (len(self.b.values[p[0]].shape) + 1) if p else 0 for a, p in zip(out_axes, scans, strict=True)]
        self.bind_results(node, state, scans, axes)

    def scan_body(
        self, node: OnnxNode, body: onnx.GraphProto, state: list[str], xs: list[str], axes: list[int],
        dirs: list[int], length: int, prefix: str,
    ) -> tuple[list[str], list[list[str]]] | None:  # fmt: skip
        """``length`` renamed copies of a Scan's ``body`` (``<prefix>.iter<t>/...``), copy t fed the previous
        state and slice t of each of ``xs`` along its axis (from the end where its direction is 1): the final
        state and each scan output's per-iteration values, None when a body node failed (recorded)."""
        scans: list[list[str]] = [[] for _ in body.output[len(state) :]]
        for t in range(length):
            copy = copy_graph(body, f"{prefix}.iter{t}/")
            head = [identity(s, d) for s, d in zip(state, copy.inputs, strict=False)]
            for j, (x, a, d) in enumerate(zip(xs, axes, dirs, strict=True)):
                head += take(x, copy.inputs[len(state) + j], length - 1 - t if d else t, a)
            self.convert_generated([*head, *copy.nodes])
            if any(self.branch_result(node, "body", o) is None for o in copy.outputs):
                self.poisoned.update(o for o in node.outputs if o)
                return None
            for k, o in enumerate(copy.outputs[len(state) :]):
                scans[k].append(o)
            state = copy.outputs[: len(state)]
        return state, scans

    def unroll_scan8(self, node: OnnxNode, proto: onnx.NodeProto) -> None:
        """Opset 8's Scan: a batch axis 0 on every input and output, the sequence on axis 1, ``directions``
        per scan input; unrolled per batch entry (``sequence_lens``, when given, must be a constant holding
        the full length for every entry)."""
        body = subgraph(proto, "body")
        m = int(proto_attr(proto, "num_scan_inputs", 0))
        n_state = len(node.inputs) - 1 - m
        batch, length = self.b.value(node, 1 + n_state).shape[:2]
        if node.input(0):
            lens = self.b.value(node, 0).const
            if lens is None or np.any(np.asarray(lens) != length):
                raise unsupported(node, f"sequence_lens must be a constant holding the full length {length}")
        if batch * length > MAX_ITERATIONS:
            raise unsupported(node, f"{batch} x {length} iterations are above the {MAX_ITERATIONS} vdla unrolls")
        dirs = list(proto_attr(proto, "directions", [0] * m))
        finals: list[list[str]] = [[] for _ in range(n_state)]
        outs: list[list[str]] = [[] for _ in body.output[n_state:]]
        for b in range(batch):
            pick = [(v, f"{node.name}.batch{b}/{v}") for v in node.inputs[1:]]
            self.convert_generated([n for v, d in pick for n in take(v, d, b, 0)])
            names = [d for _, d in pick]
            run = self.scan_body(
                node, body, names[:n_state], names[n_state:], [0] * m, dirs, length, f"{node.name}.b{b}"
            )
            if run is None:
                return
            for k, s in enumerate(run[0]):
                finals[k].append(s)
            for k, parts in enumerate(run[1]):
                outs[k].append(f"{node.name}.b{b}/scan{k}")
                self.convert_generated(stack(parts, outs[k][-1], 0, self.opset))
        glue = [
            n
            for parts, o in zip([*finals, *outs], node.outputs, strict=False)
            if o
            for n in stack(parts, o, 0, self.opset)
        ]
        self.convert_generated(glue)

    def warn_stale_hints(self) -> None:
        """One warning naming the stored shapes (:func:`_strip_hints`) that disagree with vdla's."""
        stale = []
        for name, hint in self.hints.items():
            v = self.b.values.get(name)
            if v is None or (v.const is None and v.type is None):
                continue
            shape = v.shape
            if len(hint) != len(shape) or any(h is not None and h != d for h, d in zip(hint, shape, strict=True)):
                stale.append(f"{name!r} stored {_shape_text(hint)}, computed {_shape_text(shape)}")
        if stale:
            shown = "; ".join(stale[:6]) + (f"; and {len(stale) - 6} more" if len(stale) > 6 else "")
            _warn(
                f"{self.where}: shapes stored in the model (value_info, outputs) that do not hold for the input "
                f"shapes given (vdla uses the shapes it computes): {shown}"
            )

    def check_claims(self, node: OnnxNode) -> None:
        """Refuse to evaluate a node whose outputs ONNX's shape inference sizes above the read limit."""
        for o in node.outputs:
            dtype, shape = self.inferred.get(o, ("undefined", None))
            if shape is not None and None not in shape and dtype in np.sctypeDict:
                nbytes = math.prod(shape) * np.dtype(dtype).itemsize
                check_size(
                    nbytes,
                    self.limit,
                    f"{self.where}: node {node.name!r} ({node.op_type})",
                    f"output {o!r}",
                    FrontendError,
                )

    def check(self, node: OnnxNode) -> None:
        """Every output a later node or the graph reads is defined, within the read limit, with ONNX's inferred
        shape and type."""
        b = self.b
        for k, o in enumerate(node.outputs):
            if not o or o in self.poisoned:
                continue
            v = b.values.get(o)
            if v is None:
                if o not in b.used:
                    continue  # an optional output nothing reads
                raise unsupported(node, f"output {k} {o!r} is read but not supported")
            nbytes = v.const.nbytes if v.const is not None else v.type.size * v.type.np_dtype.itemsize
            check_size(
                nbytes, self.limit, f"{self.where}: node {node.name!r} ({node.op_type})", f"output {o!r}", FrontendError
            )
            want = self.inferred.get(o)
            if want is None:
                continue
            dtype, shape = want
            if any(op == node.op_type and a not in node.attrs for op, a in _INFERENCE_DEFAULT_WRONG):
                shape = None
            if shape is not None and all(d is not None for d in shape) and tuple(shape) != v.shape:
                raise FrontendError(
                    f"{self.where}: importing {node.op_type} {node.describe()} gave output {o!r} shape {v.shape}, "
                    f"ONNX shape inference says {tuple(shape)} (a bug in vdla's importer)"
                )
            got = v.onnx_dtype
            if dtype != "undefined" and got != dtype and not (v.const is not None and v.const.dtype == bool):
                raise FrontendError(
                    f"{self.where}: importing {node.op_type} {node.describe()} gave output {o!r} dtype {got}, "
                    f"ONNX says {dtype} (a bug in vdla's importer)"
                )

    def outputs(self) -> list[str]:
        """The graph outputs, named as in the model."""
        b = self.b
        out_node = OnnxNode("graph outputs", "Output", (), ())
        names: list[str] = []
        produced = {n.output for n in b.nodes}
        shared = Counter(b.values[o.name].name for o in self.proto.graph.output if o.name in b.values)
        for o in self.proto.graph.output:
            if o.name in self.poisoned:
                continue
            v = b.values.get(o.name)
            if v is None:
                self.errors.append(unsupported(out_node, f"graph output {o.name!r} is not defined"))
                continue
            want = b.preferred.get(o.name) or b.fresh(valid_name(o.name, "output"))
            if v.const is not None:
                try:
                    arr = b.param_array(OnnxNode(f"output {o.name}", "Output", (o.name,), ()), 0, v.const)
                except UnsupportedError as e:
                    self.errors.append(e)
                    continue
                if v.const.dtype == np.uint8:
                    arr = v.const.astype(np.int32)
                b.params[want] = arr
                b.types[want] = TensorType.of(arr, want)
                names.append(want)
            elif v.uint8:  # held as value - 128: returned as int32 holding the uint8 values
                node = OnnxNode(f"output {o.name}", "Output", (o.name,), (o.name,))
                held = v.name
                if held == want:  # the output's name goes to the int32 result
                    held = b.fresh(f"{want}:uint8")
                    self.rename(v.name, held)
                wide = b.emit(node, "cast", (held,), {"dtype": "int32"}, suffix="int32")
                names.append(b.emit(node, "add", (wide,), {"b": 128}, out=o.name))
            elif v.name == want:
                names.append(want)
            elif v.name in produced and shared[v.name] == 1:  # an alias (Identity, Dropout): take the name
                self.rename(v.name, want)
                names.append(want)
            else:
                names.append(self.identity(out_node, v.name, o.name))
        return names

    def identity(self, node: OnnxNode, vname: str, onnx_name: str) -> str:
        return self.b.emit(node, "reshape", (vname,), {"shape": self.b.types[vname].shape}, out=onnx_name)

    def rename(self, old: str, new: str) -> None:
        b = self.b
        b.nodes = [
            Node(n.op, tuple(new if i == old else i for i in n.inputs), new if n.output == old else n.output, n.attrs)
            for n in b.nodes
        ]
        b.types[new] = b.types.pop(old)


def import_onnx(
    model: str | os.PathLike | onnx.ModelProto,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    dequantize_dynamic: bool = False,
    max_bytes: int | None = None,
) -> Graph:
    """Import an ONNX model (a file path or an ``onnx.ModelProto``) as a verified vdla :class:`Graph`.

    ``input_shapes`` fixes dynamic input dimensions (``{"input": (1, 3, 224, 224)}``). onnxruntime's fused
    dynamic quantization operators are expanded to standard ones; ``dequantize_dynamic`` (the model compiler
    sets it when it calibrates) turns dynamically quantized MatMul/Conv units with constant weights back into
    float operators (:mod:`vdla.frontend.dynamic`); the model given is never modified. The file, each tensor it
    holds and each value it computes must fit the read limit (``max_bytes``, :func:`vdla.untrusted.max_read_bytes`),
    checked before they are allocated. Raises
    :class:`FrontendError` for a file or model that cannot be read as given (naming the file) and
    :class:`~vdla.graph.types.UnsupportedError` naming every node vdla cannot run (its name, op type,
    attributes and the attribute or dtype at fault).
    """
    limit = max_read_bytes(max_bytes)
    proto, where = _load(model, limit)
    proto = _dynamic_rewrites(proto, dequantize_dynamic)
    opset = model_opset(proto, where)
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # onnx.checker.ValidationError
        raise FrontendError(f"{where}: the ONNX checker rejects the model: {e}") from e
    fixed = _static_inputs(proto, where, input_shapes)
    hints = _strip_hints(fixed)
    _as_float32(fixed, where)
    importer = _Importer(fixed, where, opset, hints, limit)
    importer.infer_shapes()
    return importer.run()
