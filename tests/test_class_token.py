"""The class token selected before the final LayerNorm (issue 53): ``select_rows_first`` moves a row selection
(``take``/``slice`` of whole rows) before the row-wise nodes computing its input, so the LayerNorm runs on the
selected rows alone."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.graph import Graph, Node, TensorType
from vdla.graph.interp import evaluate
from vdla.graph.passes import select_rows_first
from vdla.graph.verify import verify

TOKENS, DIM = 17, 64
RNG = np.random.default_rng(531)


def _rows_graph(index: tuple) -> Graph:
    """``(T, D) -> mul by a column constant -> layer_norm -> reshape (1, T, D) -> take(index) -> dense``."""
    params = {
        "c": RNG.uniform(0.5, 2.0, (DIM,)).astype(np.float32),
        "g": RNG.uniform(0.5, 1.5, (DIM,)).astype(np.float32),
        "b": RNG.normal(0, 0.1, (DIM,)).astype(np.float32),
        "w": RNG.normal(0, 0.2, (DIM, DIM)).astype(np.float32),
    }
    n = len(index[1])
    nodes = [
        Node("mul", ("x", "c"), "m"),
        Node("layer_norm", ("m", "g", "b"), "n", {"axis": 1, "epsilon": 1e-5}),
        Node("reshape", ("n",), "n3", {"shape": (1, TOKENS, DIM)}),
        Node("take", ("n3",), "t", {"index": index}),
        Node("reshape", ("t",), "t2", {"shape": (n, DIM)}),
        Node("dense", ("t2", "w"), "y"),
    ]
    return Graph({"x": TensorType((TOKENS, DIM), "float32")}, nodes, ["y"], params)


@pytest.mark.parametrize("rows", [(0,), (3, 4, 5), (2, 0, 9)])
def test_select_rows_first_normalizes_the_selected_rows_alone(rows):
    """The take moves before the reshape, the LayerNorm and the column product onto the input's rows (any rows:
    the move is exact for each); values unchanged, bit for bit."""
    g = _rows_graph((None, rows, None))
    out = select_rows_first(g)
    verify(out, after="select_rows_first")
    assert [n.op for n in out.nodes][:3] == ["take", "mul", "layer_norm"]
    assert out.nodes[0].inputs == ("x",) and out.nodes[0].attrs["index"] == (rows, None)
    x = RNG.normal(0, 1, (TOKENS, DIM)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(out, {"x": x})["y"], evaluate(g, {"x": x})["y"])


def test_select_rows_first_leaves_what_does_not_commute():
    """A selection of features before a LayerNorm over them, a take of a value another node reads too, and a take
    after a constant that varies along the token axis all stay where they are."""
    nodes = [
        Node("layer_norm", ("x",), "n", {"axis": 1, "epsilon": 1e-5}),
        Node("take", ("n",), "y", {"index": ((0,), (0, 1, 2))}),
    ]
    features = Graph({"x": TensorType((TOKENS, DIM), "float32")}, nodes, ["y"])
    assert [n.op for n in select_rows_first(features).nodes] == ["layer_norm", "take"]
    shared = _rows_graph((None, (0,), None))
    shared = shared.copy(outputs=["y", "n3"])
    assert [n.op for n in select_rows_first(shared).nodes][:3] == ["mul", "layer_norm", "reshape"]
    params = {"c": RNG.normal(0, 1, (TOKENS, 1)).astype(np.float32)}
    nodes = [Node("add", ("x", "c"), "a"), Node("take", ("a",), "y", {"index": ((0,), None)})]
    per_token = Graph({"x": TensorType((TOKENS, DIM), "float32")}, nodes, ["y"], params)
    assert [n.op for n in select_rows_first(per_token).nodes] == ["add", "take"]


def test_select_rows_first_moves_a_slice_of_rows_and_leaves_a_gather_of_offsets():
    """A ``slice`` of rows 2..9 moves before the LayerNorm as a ``take`` does; a ``gather`` by flat offsets (rows
    scattered through the flattened value) stays after it."""
    ln = Node("layer_norm", ("x",), "n", {"axis": 1, "epsilon": 1e-5})
    rows = Node("slice", ("n",), "y", {"starts": (2, 0), "stops": (9, DIM), "steps": (1, 1)})
    g = Graph({"x": TensorType((TOKENS, DIM), "float32")}, [ln, rows], ["y"])
    out = select_rows_first(g)
    assert [n.op for n in out.nodes] == ["slice", "layer_norm"]
    x = RNG.normal(0, 1, (TOKENS, DIM)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(out, {"x": x})["y"], evaluate(g, {"x": x})["y"])
    offsets = {"i": (np.arange(DIM, dtype=np.int32) + 3 * DIM).reshape(1, DIM)}
    gather = Node("gather", ("n", "i"), "y")
    g = Graph({"x": TensorType((TOKENS, DIM), "float32")}, [ln, gather], ["y"], offsets)
    assert [n.op for n in select_rows_first(g).nodes] == ["layer_norm", "gather"]


def test_a_selection_moves_before_a_quantize_only_onto_an_int8_value():
    """In a QDQ graph ``add -> Q -> DQ -> layer_norm -> Q -> DQ -> take`` the take moves onto the int8 value the
    first quantize writes (the LayerNorm on the selected rows between its quantizations) and no further: the sum
    stays quantized whole, as the previous layer's epilogue computes it."""
    q = {"scale": 0.05, "zero_point": 0}
    nodes = [
        Node("add", ("x", "z"), "s"),
        Node("quantize", ("s",), "sq", q),
        Node("dequantize", ("sq",), "sf", q),
        Node("layer_norm", ("sf",), "n", {"axis": 1, "epsilon": 1e-5}),
        Node("quantize", ("n",), "nq", q),
        Node("dequantize", ("nq",), "nf", q),
        Node("take", ("nf",), "y", {"index": ((0,), None)}),
    ]
    t = TensorType((TOKENS, DIM), "float32")
    g = Graph({"x": t, "z": t}, nodes, ["y"])
    out = select_rows_first(g)
    ops = ["add", "quantize", "take", "dequantize", "layer_norm", "quantize", "dequantize"]
    assert [n.op for n in out.nodes] == ops
    feeds = {k: RNG.normal(0, 1, (TOKENS, DIM)).astype(np.float32) for k in "xz"}
    np.testing.assert_array_equal(evaluate(out, feeds)["y"], evaluate(g, feeds)["y"])
