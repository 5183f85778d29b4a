"""The epilogue's one grammar (vdla.graph.epilogue): the integer form the QDQ lowering writes is the one
placement reads back, for every kind of epilogue; the compiler's structure is derived from the same value;
the float form's walk stops where the grammar says; a chain that is not an epilogue is named."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vdla.compiler.spec import CompileError, EpilogueSpec
from vdla.graph.epilogue import (
    FLOAT_STAGES,
    INTEGER_STAGES,
    Epilogue,
    FloatDialect,
    Rescale,
    describe,
    epilogue_nodes,
    match_integer,
    walk,
)
from vdla.graph.graph import Graph, Node
from vdla.graph.interp import evaluate
from vdla.graph.ops import infer_types
from vdla.graph.oracle import conv2d, epilogue
from vdla.graph.types import TensorType
from vdla.graph.window import Window

OC = 8
X = TensorType((1, 4, 5, 5), "int8")


def _graph(ep: Epilogue, residual: str | None, seed: int) -> tuple[Graph, dict]:
    """A conv2d with ``ep`` written by :func:`epilogue_nodes` (the QDQ lowering's writer), reading an int8
    residual (rescaled or added as it is) or an int32 one; its output is read by a max pool, so the epilogue
    is not at the graph's end."""
    rng = np.random.default_rng(seed)
    params = {"w": rng.integers(-20, 21, (OC, 4, 3, 3)).astype(np.int8)}
    inputs = {"x": X}
    if residual:
        inputs["r"] = TensorType((1, OC, 5, 5), residual)

    def param(name: str, value: np.ndarray) -> str:
        params[name] = value
        return name

    conv = Node("conv2d", ("x", "w"), "c", {"padding": 1, "stride": 1})
    nodes = epilogue_nodes(conv, "x", "w", ep, "y", param, "r" if residual else None)
    nodes.append(Node("max_pool2d", ("y",), "p", {"kernel": (2, 2), "stride": 2}))
    feeds = {"x": rng.integers(-128, 128, X.shape).astype(np.int8)}
    if residual:
        lo, hi = (-128, 128) if residual == "int8" else (-3000, 3000)
        feeds["r"] = rng.integers(lo, hi, (1, OC, 5, 5)).astype(residual)
    return Graph(inputs, nodes, ["p"], params), feeds


@st.composite
def epilogues(draw) -> tuple[Epilogue, str | None]:
    """Every kind of epilogue the grammar holds: bias or not, scalar or per-channel multipliers, a residual
    added as it is (int8 or int32) or rescaled (int8), clamps within int8, an activation table or not, a row mask
    or not."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    bias = rng.integers(-5000, 5000, OC) if draw(st.booleans()) else None
    per_channel = draw(st.booleans())
    multiplier = rng.integers(1 << 20, 1 << 30, OC) if per_channel else int(rng.integers(1 << 20, 1 << 30))
    shift = draw(st.integers(20, 40))
    lo = draw(st.sampled_from([-128, -50, 0]))
    clip = (lo, draw(st.integers(max(lo, 0), 127)))
    kind = draw(st.sampled_from([None, "int8", "int32", "rescaled"]))
    table = rng.integers(-128, 128, 256).astype(np.int8) if draw(st.booleans()) else None
    row_mask = rng.random((OC, 5)) < 0.3 if draw(st.booleans()) else None
    if kind != "rescaled":
        return Epilogue(bias, multiplier, shift, kind, None, clip, table, row_mask), kind
    y_clip = (draw(st.sampled_from([-128, 0])), 127)
    rescale = Rescale(y_clip, int(rng.integers(1 << 28, 1 << 30)), 30, int(rng.integers(1 << 28, 1 << 30)), 30, 12)
    return Epilogue(bias, multiplier, shift, "int8", rescale, clip, table, row_mask), "int8"


def _same(a: Epilogue, b: Epilogue) -> bool:
    """Equal epilogues (a scalar multiplier equal to the same one per channel: the graph holds a row)."""
    arrays = np.array_equal(np.asarray(a.bias), np.asarray(b.bias)) and np.array_equal(
        np.broadcast_to(a.multiplier, (OC,)), np.broadcast_to(b.multiplier, (OC,))
    )
    rescale = (a.rescale is None) == (b.rescale is None) and (
        a.rescale is None
        or (a.rescale.as_tuple(), a.rescale.y_multiplier, a.rescale.skip_multiplier)
        == (b.rescale.as_tuple(), b.rescale.y_multiplier, b.rescale.skip_multiplier)
    )
    optional = all(
        (x is None) == (y is None) and (x is None or np.array_equal(x, y))
        for x, y in ((a.table, b.table), (a.row_mask, b.row_mask))
    )
    same = (a.shift, a.residual, tuple(a.clip)) == (b.shift, b.residual, tuple(b.clip))
    return arrays and rescale and optional and same


@settings(max_examples=60, deadline=None)
@given(case=epilogues(), seed=st.integers(0, 1000))
def test_the_integer_form_reads_back_to_the_epilogue_it_was_written_from(case, seed):
    """Writer and reader are inverse: match_integer(epilogue_nodes(ep)) == ep, the nodes and values named, and
    the graph computes what the numpy epilogue computes."""
    ep, residual = case
    graph, feeds = _graph(ep, residual, seed)
    anchor = next(n for n in graph.nodes if n.op == "conv2d")
    found = match_integer(anchor, graph, infer_types(graph))
    assert not isinstance(found, str), found
    assert _same(found.epilogue, ep) and found.output == "y" and found.residual == ("r" if residual else None)
    written = [n.output for n in graph.nodes if n.op != "max_pool2d"]
    assert list(found.nodes) == written[: len(found.nodes)] and set(found.nodes) == set(written)
    acc = conv2d(feeds["x"], graph.params["w"], Window((3, 3), (1, 1), (1, 1), (1, 1, 1, 1)))
    want = epilogue(acc, ep, feeds.get("r"))
    want = want if ep.table is None else ep.table[want.view(np.uint8)]
    want = want if ep.row_mask is None else np.where(ep.row_mask[None, :, :, None], 0, want)
    np.testing.assert_array_equal(evaluate(graph, feeds, keep=True)["y"], want)


def test_the_compiler_structure_is_derived_from_the_epilogue():
    """EpilogueSpec.of reads the value: bias, multiplier kind, shift, clamp, residual and rescale; its key is
    what the schedule cache stores (a ReLU is the clamp (0, 127))."""
    rescale = Rescale((-128, 127), 1 << 29, 30, 1 << 29, 31, 12)
    spec = EpilogueSpec.of(Epilogue(np.zeros(4, np.int64), np.arange(1, 5), 40, "int8", rescale, (0, 127)))
    assert (spec.bias, spec.multiplier, spec.shift, spec.bounds, spec.residual) == (True, "row", 40, (0, 127), "int8")
    assert spec.rescale == (-128, 127, 30, 31, 12)
    assert EpilogueSpec.of(Epilogue(multiplier=3)).multiplier == "imm"
    assert EpilogueSpec.of(Epilogue(shift=9, clip=(0, 127))).key() == "b0mnones9c0_127r-"
    mask = np.zeros((4, 6), bool)
    mask[:2, 0] = mask[2:, 5] = True
    assert EpilogueSpec.of(Epilogue(row_mask=mask)).mask == (0, 5)  # the rows an edge mask touches
    assert EpilogueSpec.of(Epilogue(row_mask=mask)).key().endswith("k0_5")
    with pytest.raises(CompileError, match="clip range"):
        EpilogueSpec.of(Epilogue(clip=(0, 300)))


def _float_graph(*tail: Node) -> tuple[Graph, Node]:
    x = TensorType((1, 4, 6, 6), "float32")
    params = {"w": np.ones((4, 4, 1, 1), np.float32), "b": np.ones((1, 4, 1, 1), np.float32)}
    nodes = [Node("conv2d", ("x", "w"), "c"), *tail, Node("softmax", (tail[-1].output,), "out", {"axis": 1})]
    graph = Graph({"x": x, "k": x}, nodes, ["out"], params)
    return graph, nodes[0]


def test_the_float_form_stops_where_the_grammar_ends():
    """bias -> residual -> clips; a second residual, or a residual after a clip, is not the epilogue's."""
    graph, conv = _float_graph(
        Node("add", ("c", "b"), "cb"),
        Node("add", ("k", "cb"), "s"),  # the residual on either side of the add
        Node("relu", ("s",), "r"),
        Node("clip", ("r",), "q", {"lo": 0.0, "hi": 6.0}),
        Node("add", ("q", "k"), "s2"),
    )
    m = walk(FLOAT_STAGES, conv, FloatDialect(graph, infer_types(graph)))
    assert [s.stage for s in m.steps] == ["bias", "residual", "clip", "clip"] and m.end == "q"
    assert m.get("residual")[0].got == {"skip": "k"}
    graph, conv = _float_graph(Node("relu", ("c",), "r"), Node("add", ("r", "b"), "late_bias"))
    m = walk(FLOAT_STAGES, conv, FloatDialect(graph, infer_types(graph)))
    assert [s.stage for s in m.steps] == ["clip"]  # a bias is only the first node after the anchor


def test_a_chain_that_is_not_an_epilogue_is_named():
    """Two shifts in a row, or a residual of another shape: placement's reason says what fits."""
    params = {"w": np.ones((OC, 4, 3, 3), np.int8)}
    nodes = [
        Node("conv2d", ("x", "w"), "c", {"padding": 1}),
        Node("rshift", ("c",), "s1", {"shift": 4}),
        Node("rshift", ("s1",), "s2", {"shift": 4}),
        Node("cast", ("s2",), "y", {"dtype": "int8"}),
    ]
    graph = Graph({"x": X}, nodes, ["y"], params)
    reason = match_integer(nodes[0], graph, infer_types(graph))
    assert reason == f"its epilogue is not {describe(INTEGER_STAGES)}"
    assert describe(INTEGER_STAGES).startswith("bias -> multiplier -> shift -> residual -> clip")
    nodes = [nodes[0], Node("add", ("c", "r"), "s"), Node("cast", ("s",), "y", {"dtype": "int8"})]
    graph = Graph({"x": X, "r": TensorType((1, 1, 5, 5), "int8")}, nodes, ["y"], params)
    assert "a residual of type" in match_integer(nodes[0], graph, infer_types(graph))
