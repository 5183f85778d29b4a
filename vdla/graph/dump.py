"""Text and Graphviz DOT dumps of a graph, for ``vdla compile --dump DIR`` (one pair per pass).

The DOT colours each node by where it runs (``placement``: node output -> ``"accel"`` or ``"cpu"``)
and draws fused groups as clusters (``groups``: node output -> group index).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vdla.graph.graph import Graph
from vdla.graph.ops import attrs_text, kind
from vdla.graph.types import TensorType

COLOURS = {"accel": "#9ecae1", "cpu": "#fdd0a2", None: "#e0e0e0"}


def text(graph: Graph, types: Mapping[str, TensorType], placement: Mapping[str, str] | None = None) -> str:
    """One line per input, parameter and node: ``%name: type = op(inputs) {attrs} @place``."""
    placement = placement or {}
    lines = [f"graph {graph.name}"]
    lines += [f"  input %{n}: {t}" for n, t in graph.inputs.items()]
    lines += [f"  param %{n}: {types.get(n, '?')}" for n in graph.params]
    for node in graph.nodes:
        args = ", ".join(f"%{i}" for i in node.inputs)
        attrs = attrs_text(node.attrs)
        where = f" @{placement[node.output]}" if node.output in placement else ""
        lines.append(
            f"  %{node.output}: {types.get(node.output, '?')} = {node.op}({args})"
            f"{' {' + attrs + '}' if attrs else ''}{where}"
        )
    lines.append(f"  outputs {', '.join('%' + o for o in graph.outputs)}")
    return "\n".join(lines) + "\n"


NL = "\\n"  # a line break inside a DOT label


def _quote(s: str) -> str:
    return '"' + s.replace('"', "'") + '"'


def dot(
    graph: Graph,
    types: Mapping[str, TensorType],
    placement: Mapping[str, str] | None = None,
    groups: Mapping[str, int] | None = None,
) -> str:
    """Graphviz DOT: inputs as ellipses, nodes as boxes coloured by placement, fused groups as clusters."""
    placement, groups = placement or {}, groups or {}
    out = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB; node [fontname=Helvetica, fontsize=10];"]
    for n, t in graph.inputs.items():
        out.append(f"  {_quote(n)} [shape=ellipse, label={_quote(n + NL + str(t))}];")
    by_group: dict[int, list[str]] = {}
    for node in graph.nodes:
        colour = COLOURS.get(placement.get(node.output), COLOURS[None])
        label = f"{node.op} ({kind(node.op)}){NL}{node.output}: {types.get(node.output, '?')}"
        line = f"{_quote(node.output)} [shape=box, style=filled, fillcolor={_quote(colour)}, label={_quote(label)}];"
        if node.output in groups:
            by_group.setdefault(groups[node.output], []).append(line)
        else:
            out.append("  " + line)
    for g, lines in sorted(by_group.items()):
        out.append(f"  subgraph cluster_{g} {{ label={_quote(f'group {g}')}; style=dashed;")
        out += ["    " + line for line in lines]
        out.append("  }")
    for node in graph.nodes:
        for i in dict.fromkeys(node.inputs):
            if i in graph.params:
                continue
            out.append(f"  {_quote(i)} -> {_quote(node.output)};")
    for o in graph.outputs:
        out.append(f"  {_quote(o)} -> {_quote('out:' + o)}; {_quote('out:' + o)} [shape=plaintext, label={_quote(o)}];")
    out.append("}")
    return "\n".join(out) + "\n"


def write(
    directory: str | Path,
    step: int,
    name: str,
    graph: Graph,
    types: Mapping[str, TensorType],
    placement: Mapping[str, str] | None = None,
    groups: Mapping[str, int] | None = None,
) -> list[Path]:
    """Write ``NN_name.txt`` and ``NN_name.dot`` into ``directory`` (created); returns the paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    base = d / f"{step:02d}_{name}"
    paths = [base.with_suffix(".txt"), base.with_suffix(".dot")]
    paths[0].write_text(text(graph, types, placement))
    paths[1].write_text(dot(graph, types, placement, groups))
    return paths
