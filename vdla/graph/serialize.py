"""Graphs to and from JSON-safe dictionaries plus named arrays (the model artifact stores them so).

Attributes are JSON values (tuples become lists, which every type rule accepts); numpy arrays and
scalars in attributes are converted to lists and plain numbers. Parameters are returned separately as
arrays, to be stored in a binary container.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdla.graph.graph import Graph, Node
from vdla.graph.types import Quant, TensorType


def _json_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple | list):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    return v


def type_to_json(t: TensorType) -> dict:
    q = (
        None
        if t.quant is None
        else {"scale": list(t.quant.scale), "zero_point": t.quant.zero_point, "axis": t.quant.axis}
    )
    return {"shape": list(t.shape), "dtype": t.dtype, "quant": q}


def type_from_json(d: dict) -> TensorType:
    q = d.get("quant")
    quant = None if q is None else Quant(tuple(q["scale"]), int(q["zero_point"]), q["axis"])
    return TensorType(tuple(int(s) for s in d["shape"]), d["dtype"], quant)


def graph_to_json(graph: Graph) -> tuple[dict, dict[str, np.ndarray]]:
    """(JSON-safe description, parameter arrays by name)."""
    desc = {
        "name": graph.name,
        "inputs": {k: type_to_json(t) for k, t in graph.inputs.items()},
        "nodes": [
            {"op": n.op, "inputs": list(n.inputs), "output": n.output, "attrs": _json_value(n.attrs)}
            for n in graph.nodes
        ],
        "outputs": list(graph.outputs),
        "params": sorted(graph.params),
        "param_types": {k: type_to_json(t) for k, t in graph.param_types.items()},
    }
    return desc, dict(graph.params)


def graph_from_json(desc: dict, arrays: dict[str, np.ndarray]) -> Graph:
    """The graph :func:`graph_to_json` described (``arrays`` must hold every parameter)."""
    missing = [p for p in desc["params"] if p not in arrays]
    if missing:
        raise KeyError(f"graph {desc['name']!r}: parameters {missing} are missing")
    return Graph(
        inputs={k: type_from_json(t) for k, t in desc["inputs"].items()},
        nodes=[Node(n["op"], tuple(n["inputs"]), n["output"], dict(n["attrs"])) for n in desc["nodes"]],
        outputs=list(desc["outputs"]),
        params={p: arrays[p] for p in desc["params"]},
        param_types={k: type_from_json(t) for k, t in desc["param_types"].items()},
        name=desc["name"],
    )
