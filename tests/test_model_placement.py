"""The model compiler's placement comes from the fused groups: vdla.model.place.place runs the
post-dominator fusion and vdla.graph.partition, the accelerator claiming a conv and the epilogue chain it
expresses; the rest of a fused group runs on the CPU, and a conv whose epilogue it cannot express stays
whole on the CPU with its note (compile report, CPU step, DOT dump)."""

from __future__ import annotations

import numpy as np
import pytest

from vdla.config import load_config
from vdla.graph import Graph, Node, TensorType, dump, fuse_ops
from vdla.graph.interp import evaluate
from vdla.graph.ops import infer_types
from vdla.graph.partition import ACCEL, CPU
from vdla.model import Module
from vdla.model.pipeline import compile_graph_model
from vdla.model.place import place

RNG = np.random.default_rng(3)
X = TensorType((1, 16, 6, 6), "float32")
NOT_EXPRESSIBLE = "its epilogue is not bias -> multiplier -> shift"  # the start of match_accel's reason


def conv_graph(epilogue: list[Node], name: str) -> Graph:
    """x -> quantize -> conv2d(int8) -> ``epilogue`` (reading ``acc``, ending at ``y``) -> dequantize."""
    nodes = [
        Node("quantize", ("x",), "xq", {"scale": 0.05, "zero_point": 0}),
        Node("conv2d", ("xq", "w"), "acc", {"padding": 1}),
        *epilogue,
        Node("dequantize", ("y",), "out", {"scale": 0.1, "zero_point": 0}),
    ]
    params = {
        "w": RNG.integers(-127, 128, (16, 16, 3, 3), dtype=np.int8),
        "b": RNG.integers(-2000, 2000, (16, 1, 1), dtype=np.int32),
    }
    return Graph({"x": X}, nodes, ["out"], params, name=name)


def split_graph() -> Graph:
    """An expressible epilogue, then a relu on the int8 result: fusion takes the relu (and the
    dequantize) into the conv's group, the accelerator's epilogue ends at the cast."""
    return conv_graph(
        [
            Node("add", ("acc", "b"), "ab"),
            Node("mul", ("ab",), "m", {"b": 1 << 20, "shift": 30}),
            Node("clip", ("m",), "c", {"lo": -128, "hi": 127}),
            Node("cast", ("c",), "q", {"dtype": "int8"}),
            Node("relu", ("q",), "y"),
        ],
        "split",
    )


def cpu_graph() -> Graph:
    """Two shifts in a row: an epilogue the accelerator cannot express."""
    return conv_graph(
        [
            Node("add", ("acc", "b"), "ab"),
            Node("rshift", ("ab",), "s1", {"shift": 4}),
            Node("rshift", ("s1",), "s2", {"shift": 6}),
            Node("clip", ("s2",), "c", {"lo": -128, "hi": 127}),
            Node("cast", ("c",), "y", {"dtype": "int8"}),
        ],
        "whole_cpu",
    )


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2.0, X.shape).astype(np.float32)


def _run_matches_interpreter(graph: Graph, artifact) -> None:
    module = Module(artifact)
    for seed in (0, 1):
        x = _inputs(seed)
        np.testing.assert_array_equal(module.run(x), evaluate(graph, {"x": x})["out"])


def test_a_fused_group_larger_than_the_epilogue_is_split_at_the_end_of_the_accelerator_chain():
    graph = split_graph()
    fusion = fuse_ops(graph)
    group = fusion.groups[fusion.group_of["acc"]]
    assert [n.output for n in group.nodes] == ["acc", "ab", "m", "c", "q", "y", "out"]
    plan = place(graph, infer_types(graph), load_config("pynq"))
    chain = ["acc", "ab", "m", "c", "q"]
    assert [(r.target, [n.output for n in r.nodes]) for r in plan.partition.regions] == [
        (CPU, ["xq"]),
        (ACCEL, chain),
        (CPU, ["y", "out"]),
    ]
    (layer,) = plan.layers.values()
    assert layer.nodes == tuple(chain) and layer.epilogue.multiplier == 1 << 20 and layer.epilogue.shift == 30
    assert not plan.notes  # the conv runs on the accelerator: nothing to explain
    artifact, report = compile_graph_model(graph, "pynq")
    # compiled, the int8 ReLU after the cast becomes the layer's activation table (vdla.graph.tables)
    assert {v for v, where in report.placement.items() if where == ACCEL} == {*chain, "y"}
    assert [s.kind for s in artifact.steps] == ["cpu", "accel", "cpu"]
    assert {n.op for n in artifact.steps[2].graph.nodes} == {"unpack_blocked", "dequantize"}
    assert artifact.accel_macs == artifact.total_macs > 0
    _run_matches_interpreter(graph, artifact)


@pytest.fixture(scope="module")
def whole_cpu(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dump")
    graph = cpu_graph()
    artifact, report = compile_graph_model(graph, "pynq", dump=directory)
    return graph, artifact, report, directory


def test_a_conv_whose_epilogue_is_not_expressible_goes_whole_to_the_cpu_with_its_note(whole_cpu):
    graph, artifact, report, _ = whole_cpu
    fusion = fuse_ops(graph)
    assert [n.output for n in fusion.groups[fusion.group_of["acc"]].nodes] == ["acc", "ab", "s1", "s2", "c", "y", "out"]
    assert list(report.notes) == ["acc"] and report.notes["acc"].startswith(NOT_EXPRESSIBLE)
    assert set(report.placement.values()) == {CPU}
    assert [s.kind for s in artifact.steps] == ["cpu"]  # the quantize and the conv's group: one CPU region
    assert artifact.steps[0].note == f"acc: {report.notes['acc']}"
    assert artifact.accel_macs == 0 < artifact.total_macs
    _run_matches_interpreter(graph, artifact)


def test_the_dot_dump_of_the_partition_colours_by_placement_and_draws_the_fused_groups(whole_cpu, tmp_path):
    directory = whole_cpu[3]
    (dot,) = directory.glob("*_partition.dot")
    text = dot.read_text()
    acc = next(line for line in text.splitlines() if line.strip().startswith('"acc" ['))
    assert f'fillcolor="{dump.COLOURS[CPU]}"' in acc
    assert "subgraph cluster_" in text
    compile_graph_model(split_graph(), "pynq", dump=tmp_path)
    (dot,) = tmp_path.glob("*_partition.dot")
    lines = {line.strip().split(" ")[0]: line for line in dot.read_text().splitlines() if "fillcolor" in line}
    assert all(f'fillcolor="{dump.COLOURS[ACCEL]}"' in lines[f'"{v}"'] for v in ("acc", "q", "y"))  # y: a table
    assert f'fillcolor="{dump.COLOURS[CPU]}"' in lines['"out"']
