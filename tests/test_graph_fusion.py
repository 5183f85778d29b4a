"""Operator fusion by TVM's post-dominator rules (vdla.graph.fusion.fuse_ops) and partitioning into
accelerator groups and CPU regions (vdla.graph.partition), on hand-built and random graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vdla.graph import Graph, Node, TensorType, check_fusion, dump, fuse_ops, post_dominators, region_graph
from vdla.graph.fusion import Fusion, Group, split_groups
from vdla.graph.interp import evaluate
from vdla.graph.ops import COMPLEX, OPAQUE, infer_types, kind
from vdla.graph.partition import ACCEL, CPU, Partition, partition
from vdla.graph.verify import GraphError, verify

RNG = np.random.default_rng(7)
I8 = TensorType((1, 4, 6, 6), "int8")
F32 = TensorType((1, 4, 6, 6), "float32")


def names(fusion: Fusion) -> list[list[str]]:
    return [[n.output for n in g.nodes] for g in fusion.groups]


def int8_params(*convs: str) -> dict[str, np.ndarray]:
    params = {}
    for c in convs:
        params[f"w{c}"] = RNG.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8)
        params[f"b{c}"] = RNG.integers(-500, 500, (4, 1, 1), dtype=np.int32)
    return params


def epilogue(c: str, x: str, residual: str | None = None) -> list[Node]:
    """conv2d(int8) -> add(bias) -> mul -> rshift [-> add(residual)] -> clip -> cast(int8), ending at ``y{c}``."""
    nodes = [
        Node("conv2d", (x, f"w{c}"), f"acc{c}", {"padding": 1}),
        Node("add", (f"acc{c}", f"b{c}"), f"ab{c}"),
        Node("mul", (f"ab{c}",), f"m{c}", {"b": 3}),
        Node("rshift", (f"m{c}",), f"s{c}", {"shift": 4}),
    ]
    last = f"s{c}"
    if residual is not None:
        nodes.append(Node("add", (last, residual), f"res{c}"))
        last = f"res{c}"
    return nodes + [
        Node("clip", (last,), f"c{c}", {"lo": -128, "hi": 127}),
        Node("cast", (f"c{c}",), f"y{c}", {"dtype": "int8"}),
    ]


def fused(graph: Graph) -> Fusion:
    verify(graph)
    return fuse_ops(graph)


# ---------------------------------------------------------------------------------------------------------
# Fusion on hand-built graphs


def test_linear_conv_bias_relu_is_one_group():
    nodes = [
        Node("conv2d", ("x", "w0"), "acc", {"padding": 1}),
        Node("add", ("acc", "b0"), "ab"),
        Node("relu", ("ab",), "r"),
    ]
    graph = Graph({"x": I8}, nodes, ["r"], int8_params("0"))
    f = fused(graph)
    assert names(f) == [["acc", "ab", "r"]]
    (g,) = f.groups
    assert g.anchor.output == "acc" and g.kind == COMPLEX
    assert (g.inputs, g.outputs, g.params) == (("x",), ("r",), ("w0", "b0"))
    assert f.group_of == {"acc": 0, "ab": 0, "r": 0}


def test_diamond_after_conv_is_one_group_anchored_at_the_conv():
    nodes = [
        Node("conv2d", ("x", "w0"), "acc", {"padding": 1}),
        Node("relu", ("acc",), "r"),
        Node("add", ("acc", "b0"), "a"),
        Node("add", ("r", "a"), "o"),
    ]
    graph = Graph({"x": I8}, nodes, ["o"], int8_params("0"))
    assert post_dominators(graph) == {"acc": "o", "r": "o", "a": "o", "o": None}
    f = fused(graph)
    assert names(f) == [["acc", "r", "a", "o"]]
    assert f.groups[0].anchor.op == "conv2d"


def test_conv_feeding_two_convs_is_fused_into_neither():
    nodes = [
        *epilogue("0", "x"),
        *epilogue("1", "y0"),
        *epilogue("2", "y0"),
        Node("add", ("y1", "y2"), "sum"),
    ]
    graph = Graph({"x": I8}, nodes, ["sum"], int8_params("0", "1", "2"))
    assert post_dominators(graph)["y0"] == "sum"  # the least common post-dominator of both branches
    f = fused(graph)
    conv0, branch2, branch1 = names(f)
    assert conv0 == ["acc0", "ab0", "m0", "s0", "c0", "y0"]
    assert branch2 == ["acc2", "ab2", "m2", "s2", "c2", "y2"]  # "sum" went to conv1's group, so not here
    assert branch1 == ["acc1", "ab1", "m1", "s1", "c1", "y1", "sum"]
    assert [g.inputs for g in f.groups] == [("x",), ("y0",), ("y0", "y2")]


def test_an_opaque_node_fuses_with_nothing():
    nodes = [
        Node("dense", ("x", "w"), "d"),
        Node("relu", ("d",), "r"),
        Node("softmax", ("r",), "s"),
        Node("exp", ("s",), "e"),
        Node("mul", ("e",), "m", {"b": 2.0}),
    ]
    params = {"w": RNG.standard_normal((4, 8)).astype(np.float32)}
    graph = Graph({"x": TensorType((2, 8), "float32")}, nodes, ["m"], params)
    assert names(fused(graph)) == [["d", "r"], ["s"], ["e", "m"]]


def test_an_opaque_node_on_one_branch_keeps_the_conv_out_of_the_join():
    nodes = [
        Node("conv2d", ("x", "w"), "acc", {"padding": 1}),
        Node("softmax", ("acc",), "sm", {"axis": 1}),
        Node("relu", ("acc",), "r"),
        Node("add", ("sm", "r"), "o"),
    ]
    graph = Graph({"x": F32}, nodes, ["o"], {"w": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)})
    assert names(fused(graph)) == [["acc"], ["sm"], ["r", "o"]]


def test_two_convs_in_a_row_make_two_groups():
    graph = Graph({"x": I8}, [*epilogue("0", "x"), *epilogue("1", "y0")], ["y1"], int8_params("0", "1"))
    f = fused(graph)
    assert [len(g.nodes) for g in f.groups] == [6, 6]
    assert [g.anchor.output for g in f.groups] == ["acc0", "acc1"]
    assert f.groups[1].inputs == ("y0",) and f.groups[0].outputs == ("y0",)


def test_elementwise_fuses_into_a_following_reduction_which_fuses_nothing_forward():
    nodes = [
        Node("mul", ("x",), "m", {"b": 0.5}),
        Node("relu", ("m",), "r"),
        Node("max_pool2d", ("r",), "p", {"kernel": 2}),
        Node("tanh", ("p",), "t"),
    ]
    f = fused(Graph({"x": F32}, nodes, ["t"]))
    assert names(f) == [["m", "r", "p"], ["t"]]
    assert f.groups[0].anchor.op == "max_pool2d"


def test_a_conv_is_not_fused_into_a_reduction_injective_op_or_broadcasting_consumer():
    nodes = [
        *epilogue("0", "x"),
        Node("max_pool2d", ("y0",), "p", {"kernel": 2}),
        Node("conv2d", ("x", "w0"), "acc", {"padding": 1}),
        Node("reshape", ("acc",), "flat", {"shape": (1, -1)}),
    ]
    graph = Graph({"x": I8}, nodes, ["p", "flat"], int8_params("0"))
    assert names(fused(graph)) == [[n.output for n in epilogue("0", "x")], ["p"], ["acc"], ["flat"]]
    small = TensorType((1, 4, 3, 3), "float32")
    nodes = [Node("conv2d", ("x", "w"), "acc"), Node("add", ("acc", "y"), "o")]  # (1,4,1,1) + (1,4,5,5)
    graph = Graph({"x": small, "y": TensorType((1, 4, 5, 5), "float32")}, nodes, ["o"])
    graph.params["w"] = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    assert names(fused(graph)) == [["acc"], ["o"]]


def test_injective_ops_fuse_in_the_second_phase():
    nodes = [
        Node("transpose", ("x",), "t", {"perm": (0, 1, 3, 2)}),
        Node("relu", ("t",), "r"),
        Node("tanh", ("r",), "h"),
        Node("pad", ("h",), "pd", {"pads": ((0, 0), (0, 0), (1, 1), (1, 1))}),
        Node("conv2d", ("pd", "w"), "acc"),
    ]
    graph = Graph({"x": F32}, nodes, ["acc"], {"w": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)})
    # transpose joins the elementwise chain (second phase), which joins pad; pad does not join the conv
    assert names(fused(graph)) == [["t", "r", "h", "pd"], ["acc"]]


def test_a_graph_output_is_not_fused_forward():
    nodes = [
        Node("conv2d", ("x", "w0"), "acc", {"padding": 1}),
        Node("add", ("acc", "b0"), "a"),
        Node("relu", ("a",), "r"),
    ]
    graph = Graph({"x": I8}, nodes, ["a", "r"], int8_params("0"))
    assert post_dominators(graph)["a"] is None
    f = fused(graph)
    assert names(f) == [["acc", "a"], ["r"]]
    assert f.groups[0].outputs == ("a",)


def residual_block() -> Graph:
    """Two quantized conv layers; the second adds the first's output (its skip) before clip and cast."""
    nodes = [*epilogue("0", "x"), *epilogue("1", "y0", residual="y0"), Node("relu", ("y1",), "out")]
    return Graph({"x": I8}, nodes, ["out"], int8_params("0", "1"))


def test_residual_block_groups_the_whole_epilogue_with_the_skip_from_an_earlier_group():
    graph = residual_block()
    f = fused(graph)
    assert names(f) == [
        ["acc0", "ab0", "m0", "s0", "c0", "y0"],
        ["acc1", "ab1", "m1", "s1", "res1", "c1", "y1", "out"],
    ]
    g0, g1 = f.groups
    assert g1.anchor.output == "acc1" and g1.inputs == ("y0",)
    assert g0.outputs == ("y0",) and g1.outputs == ("out",)
    assert f.ipdom["y0"] == "res1"


def test_check_fusion_rejects_broken_groups():
    graph = residual_block()
    f = fuse_ops(graph)
    g0, g1 = f.groups
    swapped = Fusion((g1, g0), {n: 1 - i for n, i in f.group_of.items()}, f.ipdom)
    with pytest.raises(GraphError, match="later group"):
        check_fusion(graph, swapped)
    one = Group(0, tuple(graph.nodes), g0.anchor, ("x",), ("out",), tuple(graph.params))
    with pytest.raises(GraphError, match="more than one complex"):
        check_fusion(graph, Fusion((one,), dict.fromkeys(f.group_of, 0), f.ipdom))
    holey = Group(0, (g0.nodes[0], g1.nodes[-1]), g0.anchor, (), (), ())
    rest = Group(1, g0.nodes[1:] + g1.nodes[:-1], g1.anchor, (), (), ())
    group_of = {n.output: g.index for g in (holey, rest) for n in g.nodes}
    with pytest.raises(GraphError, match="not convex|later group"):
        check_fusion(graph, Fusion((holey, rest), group_of, f.ipdom))


# ---------------------------------------------------------------------------------------------------------
# Random DAGs: post-dominators, convexity and acyclicity by brute-force path enumeration

SHAPE = (1, 4, 4, 4)
RANDOM_PARAMS = {
    "w": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3,
    "b": RNG.standard_normal((4, 1, 1)).astype(np.float32),
}


def _random_node(op: str, a: str, b: str, out: str) -> Node:
    return {
        "relu": Node("relu", (a,), out),
        "tanh": Node("tanh", (a,), out),
        "add": Node("add", (a, b), out),
        "bias": Node("add", (a, "b"), out),
        "mul": Node("mul", (a,), out, {"b": 0.5}),
        "conv": Node("conv2d", (a, "w"), out, {"padding": 1}),
        "pool": Node("max_pool2d", (a,), out, {"kernel": 3, "stride": 1, "padding": 1}),
        "softmax": Node("softmax", (a,), out, {"axis": 1}),
        "transpose": Node("transpose", (a,), out, {"perm": (0, 1, 3, 2)}),
        "reshape": Node("reshape", (a,), out, {"shape": SHAPE}),
    }[op]


@st.composite
def random_graphs(draw) -> Graph:
    values, nodes = ["x"], []
    for k in range(draw(st.integers(1, 11))):
        op = draw(
            st.sampled_from(["relu", "tanh", "add", "bias", "mul", "conv", "pool", "softmax", "transpose", "reshape"])
        )
        a = draw(st.sampled_from(values[-3:]))
        nodes.append(_random_node(op, a, draw(st.sampled_from(values)), f"n{k}"))
        values.append(f"n{k}")
    read = {v for n in nodes for v in n.inputs}
    extra = draw(st.lists(st.sampled_from(values[1:]), max_size=2))
    outputs = list(dict.fromkeys([n.output for n in nodes if n.output not in read] + extra))
    return Graph({"x": TensorType(SHAPE, "float32")}, nodes, outputs, dict(RANDOM_PARAMS))


SINK = "<sink>"


def paths_to_sink(graph: Graph) -> dict[str, list[list[str]]]:
    """Every path from each node to the virtual sink (every node reaches it in these graphs)."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    paths: dict[str, list[list[str]]] = {}
    for node in reversed(graph.nodes):
        v = node.output
        paths[v] = [[v, SINK]] if v in outputs else []
        paths[v] += [[v, *p] for c in consumers.get(v, []) for p in paths[c.output]]
    return paths


def brute_ipdom(paths: list[list[str]]) -> str | None:
    common = set.intersection(*(set(p[1:]) for p in paths))
    first = next(v for v in paths[0][1:] if v in common)
    return None if first == SINK else first


def check_paths(fusion: Fusion, paths: dict[str, list[list[str]]]) -> None:
    """Along every path, group indices never decrease (acyclic, topological) and a path that left a
    group never comes back to it (convex)."""
    for ps in paths.values():
        for p in ps:
            seq = [fusion.group_of[v] for v in p[:-1]]
            assert seq == sorted(seq)
            runs = [g for i, g in enumerate(seq) if i == 0 or g != seq[i - 1]]
            assert len(runs) == len(set(runs))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_random_dags_fuse_into_convex_acyclic_groups(graph: Graph):
    verify(graph)
    paths = paths_to_sink(graph)
    assert post_dominators(graph) == {v: brute_ipdom(ps) for v, ps in paths.items()}
    fusion = fuse_ops(graph)
    check_paths(fusion, paths)
    for g in fusion.groups:
        assert sum(kind(n.op) == COMPLEX for n in g.nodes) <= 1
        assert len(g.nodes) == 1 or all(kind(n.op) != OPAQUE for n in g.nodes)
        if any(kind(n.op) == COMPLEX for n in g.nodes):
            assert kind(g.anchor.op) == COMPLEX
    feeds = {"x": RNG.standard_normal(SHAPE).astype(np.float32)}
    for capability in (conv_on_accel, chain_claim):
        part = partition(graph, fusion, capability)
        check_regions(graph, part, paths)
        check_round_trip(graph, part, feeds)


# ---------------------------------------------------------------------------------------------------------
# Partitioning


def conv_on_accel(group: Group) -> str | None:
    return None if group.anchor.op == "conv2d" else f"{group.anchor.op} runs on the CPU"


def int8_capability(graph: Graph):
    types = infer_types(graph)

    def can(group: Group) -> str | None:
        a = group.anchor
        if a.op != "conv2d":
            return f"{a.op} is not a conv2d"
        if types[a.inputs[0]].dtype != "int8" or types[a.inputs[1]].dtype != "int8":
            return "not int8"
        return None

    return can


def check_regions(graph: Graph, part: Partition, paths: dict[str, list[list[str]]]) -> None:
    """Regions are convex and in topological order; accelerator regions hold one group each."""
    for ps in paths.values():
        for p in ps:
            seq = [part.region_of[v] for v in p[:-1]]
            assert seq == sorted(seq)
    for r in part.regions:
        assert {part.targets[g] for g in r.groups} == {r.target}
        assert r.target == CPU or len(r.groups) == 1
    assert set(part.reasons) == {i for i, t in enumerate(part.targets) if t == CPU}


def check_round_trip(graph: Graph, part: Partition, feeds: dict[str, np.ndarray]) -> None:
    """Running the regions' sub-graphs in order on what earlier regions produced gives the whole graph's
    values; each group's sub-graph too."""
    whole = evaluate(graph, feeds, keep=True)
    env = dict(feeds)
    types = infer_types(graph)
    for region in part.regions:
        sub = region_graph(graph, region, types)
        verify(sub)
        out = evaluate(sub, {v: env[v] for v in sub.inputs})
        for v, a in out.items():
            np.testing.assert_array_equal(a, whole[v])
        env.update(out)
    for o in graph.outputs:
        np.testing.assert_array_equal(env[o], whole[o])
    for group in part.fusion.groups:
        sub = region_graph(graph, group, types)
        out = evaluate(sub, {v: whole[v] for v in sub.inputs})
        assert all(np.array_equal(a, whole[v]) for v, a in out.items())


def partition_graph() -> Graph:
    """conv0 -> pool -> conv1 -> concat(conv1, pool) -> reshape -> dequantize -> softmax, and a float
    conv2 the accelerator cannot run."""
    nodes = [
        *epilogue("0", "x"),
        Node("max_pool2d", ("y0",), "p", {"kernel": 3, "stride": 1, "padding": 1}),
        *epilogue("1", "p"),
        Node("concat", ("y1", "p"), "cat", {"axis": 1}),
        Node("reshape", ("cat",), "flat", {"shape": (1, -1)}),
        Node("dequantize", ("flat",), "f", {"scale": 0.05, "zero_point": 0}),
        Node("softmax", ("f",), "sm"),
        Node("conv2d", ("xf", "wf"), "accf", {"padding": 1}),
        Node("relu", ("accf",), "rf"),
    ]
    params = int8_params("0", "1") | {"wf": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)}
    return Graph({"x": I8, "xf": F32}, nodes, ["sm", "rf"], params, name="net")


def region_names(part: Partition) -> list[tuple[str, list[str]]]:
    return [(r.target, [n.output for n in r.nodes]) for r in part.regions]


def test_partition_places_groups_and_merges_connected_cpu_groups():
    graph = partition_graph()
    fusion = fused(graph)
    part = partition(graph, fusion, int8_capability(graph))
    conv0, conv1 = [n.output for n in epilogue("0", "x")], [n.output for n in epilogue("1", "p")]
    assert names(fusion) == [conv0, ["p"], conv1, ["cat", "flat", "f"], ["sm"], ["accf", "rf"]]
    assert part.targets == (ACCEL, CPU, ACCEL, CPU, CPU, CPU)
    # "p" and "cat" are connected directly, but conv1 lies between them on another path; the float conv is
    # independent of the softmax's region (no accelerator region orders them), so the two join
    assert region_names(part) == [
        (ACCEL, conv0),
        (CPU, ["p"]),
        (ACCEL, conv1),
        (CPU, ["cat", "flat", "f", "sm", "accf", "rf"]),
    ]
    assert part.notes() == {
        "p": "max_pool2d is not a conv2d",
        "flat": "reshape is not a conv2d",
        "sm": "softmax is not a conv2d",
        "accf": "not int8",
    }
    assert [r.label for r in part.on(ACCEL)] == ["accel0", "accel2"]
    assert part.placement["acc1"] == ACCEL and part.placement["flat"] == CPU
    assert part.regions[3].inputs == ("y1", "p", "xf") and part.regions[3].outputs == ("sm", "rf")
    assert part.regions[1].outputs == ("p",)
    check_regions(graph, part, paths_to_sink(graph))


def test_cost_hook_moves_an_accelerable_group_and_cpu_regions_merge_around_it():
    graph = partition_graph()
    fusion = fuse_ops(graph)
    part = partition(
        graph, fusion, int8_capability(graph), cost=lambda g: "faster on the CPU" if g.anchor.output == "acc1" else None
    )
    assert part.targets[2] == CPU and part.reasons[2] == "faster on the CPU"
    assert [len(r.groups) for r in part.regions] == [1, 5]  # the float conv joins: nothing orders them
    after_pool = [*[n.output for n in epilogue("1", "p")], "cat", "flat", "f", "sm", "accf", "rf"]
    assert region_names(part)[1][1] == ["p", *after_pool]


def test_region_sub_graphs_round_trip():
    graph = partition_graph()
    part = partition(graph, fuse_ops(graph), int8_capability(graph))
    feeds = {
        "x": RNG.integers(-128, 128, I8.shape, dtype=np.int8),
        "xf": RNG.standard_normal(F32.shape).astype(np.float32),
    }
    check_round_trip(graph, part, feeds)
    sub = region_graph(graph, part.regions[3])
    assert sub.name == "net.cpu3" and list(sub.inputs) == ["y1", "p", "xf"] and sub.outputs == ["sm", "rf"]
    assert sub.inputs["y1"] == TensorType((1, 4, 6, 6), "int8") and set(sub.params) == {"wf"}
    acc = region_graph(graph, part.fusion.groups[0])
    assert acc.name == "net.group0" and set(acc.params) == {"w0", "b0"} and acc.outputs == ["y0"]


def test_cpu_regions_that_would_depend_on_each_other_in_a_cycle_stay_apart():
    """Two CPU branches, each feeding a convolution whose consumer is on the CPU: merging every CPU group
    with its CPU producers and joining independent CPU regions would make each convex region read the other
    through an accelerator region (a cycle no order runs). The merges that would close the cycle are
    refused, and the partition round-trips. (Found by the random DAGs above.)"""
    r = lambda a, out: Node("relu", (a,), out)  # noqa: E731
    c = lambda a, out: Node("conv2d", (a, "w"), out, {"padding": 1})  # noqa: E731
    nodes = [r("x", "n0"), c("n0", "n1"), r("x", "n2"), r("n0", "n3"), r("n1", "n4")]
    nodes += [r("n2", "n5"), r("n3", "n6"), r("n5", "n7"), c("n5", "n8"), r("n8", "n9")]
    graph = Graph({"x": TensorType(SHAPE, "float32")}, nodes, ["n4", "n6", "n7", "n9"], dict(RANDOM_PARAMS))
    fusion = fuse_ops(graph)
    feeds = {"x": RNG.standard_normal(SHAPE).astype(np.float32)}
    for capability in (conv_on_accel, chain_claim):
        part = partition(graph, fusion, capability)
        check_regions(graph, part, paths_to_sink(graph))
        check_round_trip(graph, part, feeds)


def test_residual_block_partition_round_trips():
    graph = residual_block()
    part = partition(graph, fuse_ops(graph), int8_capability(graph))
    assert part.targets == (ACCEL, ACCEL)
    check_round_trip(graph, part, {"x": RNG.integers(-128, 128, I8.shape, dtype=np.int8)})


def test_dot_dump_shows_placement_colours_and_group_clusters():
    graph = partition_graph()
    fusion = fuse_ops(graph)
    part = partition(graph, fusion, int8_capability(graph))
    types = infer_types(graph)
    text = dump.dot(graph, types, part.placement, fusion.group_of)
    assert f'fillcolor="{dump.COLOURS[ACCEL]}"' in text and f'fillcolor="{dump.COLOURS[CPU]}"' in text
    for g in range(len(fusion.groups)):
        assert f"subgraph cluster_{g} " in text
    cluster = text.split("subgraph cluster_0 ")[1].split("}")[0]
    assert all(f'"{n.output}"' in cluster for n in fusion.groups[0].nodes)
    assert "@accel" in dump.text(graph, types, part.placement) and "@cpu" in dump.text(graph, types, part.placement)


# ---------------------------------------------------------------------------------------------------------
# Partial claims: the accelerator runs part of a fused group, the group is split around it


def chain_claim(group: Group) -> str | tuple[str, ...]:
    """Claim a conv anchor and the run of nodes after it up to (not including) the first ``relu`` or
    the group's end: a stand-in for an epilogue matcher."""
    if group.anchor.op != "conv2d":
        return f"{group.anchor.op} is not a conv2d"
    names = group.names
    start = names.index(group.anchor.output)
    end = next((i for i in range(start + 1, len(names)) if group.nodes[i].op == "relu"), len(names))
    return names[start:end]


def side_input_graph() -> Graph:
    """A conv epilogue whose residual is a relu of another input (fused into the conv's group as a
    producer) and a relu after the cast (fused as a consumer)."""
    nodes = [Node("relu", ("x2",), "p"), *epilogue("0", "x", residual="p"), Node("relu", ("y0",), "out")]
    return Graph({"x": I8, "x2": I8}, nodes, ["out"], int8_params("0"), name="side")


def test_a_partial_claim_splits_the_group_into_before_claim_and_after():
    graph = side_input_graph()
    fusion = fused(graph)
    conv = [n.output for n in epilogue("0", "x", residual="p")]
    assert names(fusion) == [["p", *conv, "out"]]
    part = partition(graph, fusion, chain_claim)
    assert names(part.fusion) == [["p"], conv, ["out"]]
    assert part.targets == (CPU, ACCEL, CPU)
    assert part.reasons == {0: "fused with acc0 outside the part the accelerator runs"} | {
        2: "fused with acc0 outside the part the accelerator runs"
    }
    assert region_names(part) == [(CPU, ["p"]), (ACCEL, conv), (CPU, ["out"])]
    check_regions(graph, part, paths_to_sink(graph))
    feeds = {v: RNG.integers(-128, 128, I8.shape, dtype=np.int8) for v in ("x", "x2")}
    check_round_trip(graph, part, feeds)


def test_split_groups_keeps_a_whole_group_claim_unchanged_and_checks_the_result():
    graph = residual_block()
    fusion = fuse_ops(graph)
    same = split_groups(graph, fusion, [fusion.groups[1].names])
    assert names(same) == names(fusion) and [g.anchor for g in same.groups] == [g.anchor for g in fusion.groups]
    with pytest.raises(GraphError, match="not convex"):
        split_groups(graph, fusion, [("acc1", "c1")])  # acc1 -> ab1 -> ... -> c1 leaves the claim and returns


def two_branches() -> Graph:
    nodes = [*epilogue("0", "x"), *epilogue("1", "y0"), *epilogue("2", "y0"), Node("add", ("y1", "y2"), "sum")]
    return Graph({"x": I8}, nodes, ["sum"], int8_params("0", "1", "2"))


def claims_by_anchor(claims: dict[str, tuple[str, ...]]):
    return lambda g: claims.get(g.anchor.output, g.names)


def test_a_claim_may_take_nodes_fusion_gave_to_another_group():
    graph = two_branches()
    fusion = fuse_ops(graph)
    chain1, chain2 = [[n.output for n in epilogue(c, "y0")] for c in "12"]
    assert names(fusion)[1:] == [chain2, [*chain1, "sum"]]
    part = partition(graph, fusion, claims_by_anchor({"acc2": (*chain2, "sum"), "acc1": tuple(chain1)}))
    assert region_names(part)[1:] == [(ACCEL, chain1), (ACCEL, [*chain2, "sum"])]
    assert part.targets == (ACCEL, ACCEL, ACCEL) and not part.reasons
    check_round_trip(graph, part, {"x": RNG.integers(-128, 128, I8.shape, dtype=np.int8)})


def test_claims_that_overlap_or_cannot_be_cut_out_leave_the_group_on_the_cpu():
    graph = two_branches()
    fusion = fuse_ops(graph)
    chain2 = tuple(n.output for n in epilogue("2", "y0"))
    part = partition(graph, fusion, claims_by_anchor({"acc2": (*chain2, "acc1", "c1"), "acc1": ("acc1", "ab1")}))
    assert part.notes() == {
        "acc2": "its accelerator part reaches ['acc1', 'c1'] in other fused groups and cannot be cut out",
        "sum": "fused with acc1 outside the part the accelerator runs",
    }
    rest1 = ["m1", "s1", "c1", "y1"]
    assert region_names(part)[1:] == [(ACCEL, ["acc1", "ab1"]), (CPU, [*rest1, *chain2, "sum"])]
    part = partition(graph, fusion, claims_by_anchor({"acc2": (*chain2, "sum"), "acc1": ("acc1", "sum")}))
    assert part.notes()["acc1"] == "sum is already part of another accelerator group"
    check_regions(graph, part, paths_to_sink(graph))
