"""Dynamically quantized ONNX models (onnxruntime's ``quantize_dynamic``) rewritten before import.

Two rewrites of the ``onnx.ModelProto``, both run by :func:`vdla.frontend.onnx.import_onnx`:

* :func:`expand_contrib` (always): onnxruntime's fused ``com.microsoft`` forms, ``DynamicQuantizeMatMul`` and
  ``MatMulIntegerToFloat``, become the standard pattern ``quantize_dynamic`` writes (below), which the
  converters of :mod:`vdla.frontend.onnx_ops.dynquant` import exactly.
* :func:`dequantize_dynamic` (with calibration data): every unit

      DynamicQuantizeLinear(x) -> (q, sx, zx)
      MatMulInteger / ConvInteger(q, Wq, zx, zw) -> Cast(to=float) -> Mul(., Mul(sx, sw))

  with a constant weight ``Wq``, constant ``zw`` and ``sw`` becomes the float ``MatMul`` / ``Conv`` of ``x``
  with the dequantized weight ``(Wq - zw) * sw``. The run-time scale of ``x`` is then no longer needed:
  vdla's calibration gives ``x`` a static scale and its own quantization puts the layer on the accelerator
  (the integer weights are kept to the last bit: ``(Wq - zw) * sw`` requantizes to the same int8 codes up to
  the rounding of vdla's per-channel scale). Units that do not match are left as they are, exact on the CPU.

Invariant: both rewrites keep every output name and only remove nodes whose outputs nothing else reads.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

_FLOAT = onnx.TensorProto.FLOAT
_CONTRIB = "com.microsoft"


def _consumers(graph: onnx.GraphProto) -> Counter:
    """How many node inputs and graph outputs read each value."""
    n = Counter(i for node in graph.node for i in node.input if i)
    n.update(o.name for o in graph.output)
    return n


def _inits(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in graph.initializer}


def expand_contrib(proto: onnx.ModelProto) -> int:
    """Replace ``DynamicQuantizeMatMul`` and ``MatMulIntegerToFloat`` (com.microsoft) by standard operators,
    in place; the number replaced."""
    g = proto.graph
    out: list[onnx.NodeProto] = []
    done = 0
    for node in g.node:
        if node.domain == _CONTRIB and node.op_type in ("DynamicQuantizeMatMul", "MatMulIntegerToFloat"):
            out.extend(_expanded(node))
            done += 1
        else:
            out.append(node)
    if done:
        del g.node[:]
        g.node.extend(out)
    return done


def _expanded(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """DynamicQuantizeMatMul(A, B, b_scale, b_zp, bias) or MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp,
    b_zp, bias) as DynamicQuantizeLinear (the former) + MatMulInteger + Cast + Mul (+ Add)."""
    ins = list(node.input) + [""] * 7
    p = (node.name or node.output[0]) + "/"
    nodes: list[onnx.NodeProto] = []
    if node.op_type == "DynamicQuantizeMatMul":
        a, b, sb, zb, bias = ins[:5]
        q, sa, za = p + "q", p + "a_scale", p + "a_zp"
        nodes.append(helper.make_node("DynamicQuantizeLinear", [a], [q, sa, za], name=p + "dql"))
    else:
        q, b, sa, sb, za, zb, bias = ins[:7]
    y = node.output[0]
    nodes += [
        helper.make_node("MatMulInteger", [q, b, za, zb], [p + "int"], name=p + "mmi"),
        helper.make_node("Cast", [p + "int"], [p + "f"], to=_FLOAT, name=p + "cast"),
        helper.make_node("Mul", [sa, sb], [p + "scale"], name=p + "scale"),
        helper.make_node("Mul", [p + "f", p + "scale"], [p + "mm" if bias else y], name=p + "mul"),
    ]
    if bias:
        nodes.append(helper.make_node("Add", [p + "mm", bias], [y], name=p + "bias"))
    return nodes


def dequantize_dynamic(proto: onnx.ModelProto) -> int:
    """Rewrite every matching dynamic quantization unit (module docstring) as its float operator, in place;
    the number rewritten."""
    g = proto.graph
    inits = _inits(g)
    made = {n.output[0]: n for n in g.node for _ in n.output[:1]}
    dropped: set[int] = set()
    added: dict[int, onnx.NodeProto] = {}
    new_inits: list[onnx.TensorProto] = []
    uses = _consumers(g)
    by_input: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            by_input.setdefault(i, []).append(n)
    for node in g.node:
        unit = _unit(node, made, by_input, uses, inits)
        if unit is None:
            continue
        float_node, weight = unit[0], unit[1]
        new_inits.append(weight)
        added[id(unit[2])] = float_node  # the float op takes the final Mul's place
        dropped.update(id(n) for n in unit[3])
    if not added:
        return 0
    kept = [added.get(id(n), n) for n in g.node if id(n) not in dropped or id(n) in added]
    del g.node[:]
    g.node.extend(kept)
    g.initializer.extend(new_inits)
    _prune(g)
    return len(added)


Readers = dict[str, list[onnx.NodeProto]]
Unit = tuple[onnx.NodeProto, onnx.TensorProto, onnx.NodeProto, list[onnx.NodeProto]]


def _unit(
    node: onnx.NodeProto, made: dict[str, onnx.NodeProto], by_input: Readers, uses: Counter, inits: dict
) -> Unit | None:
    """The float node, its weight initializer, the node it replaces and the nodes it removes, for a unit
    whose integer node is ``node``; None when ``node`` does not start one."""
    if node.op_type not in ("MatMulInteger", "ConvInteger") or node.domain not in ("", "ai.onnx"):
        return None
    ins = list(node.input) + [""] * 4
    dql = made.get(ins[0])
    if dql is None or dql.op_type != "DynamicQuantizeLinear" or ins[2] != dql.output[2] or ins[1] not in inits:
        return None
    if ins[3] and ins[3] not in inits:
        return None
    cast = _only(node.output[0], by_input, uses)
    if cast is None or cast.op_type != "Cast" or _attr(cast, "to") != _FLOAT:
        return None
    mul = _only(cast.output[0], by_input, uses)
    if mul is None or mul.op_type != "Mul":
        return None
    other = [i for i in mul.input if i != cast.output[0]]
    smul = made.get(other[0]) if len(other) == 1 else None
    if smul is None or smul.op_type != "Mul" or dql.output[1] not in smul.input:
        return None
    ws = [i for i in smul.input if i != dql.output[1]]
    if len(ws) != 1 or ws[0] not in inits:
        return None
    wq = inits[ins[1]].astype(np.float64)
    zw = inits[ins[3]].astype(np.float64) if ins[3] else 0.0
    sw = inits[ws[0]].astype(np.float64)
    conv = node.op_type == "ConvInteger"
    if conv:  # per-output-channel zero point and scale lie along the weight's axis 0
        shape = (-1,) + (1,) * (wq.ndim - 1)
        zw, sw = np.reshape(zw, shape) if np.size(zw) > 1 else zw, np.reshape(sw, shape) if sw.size > 1 else sw
    wf = ((wq - zw) * sw).astype(np.float32)
    wname = ins[1] + "/dequantized"
    weight = numpy_helper.from_array(wf, wname)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    op = "Conv" if conv else "MatMul"
    fl = helper.make_node(op, [dql.input[0], wname], [mul.output[0]], name=(node.name or op) + "/float", **attrs)
    return fl, weight, mul, [node, cast, mul]


def _only(value: str, by_input: Readers, uses: Counter) -> onnx.NodeProto | None:
    """The single node reading ``value``, when nothing else (no graph output) reads it."""
    readers = by_input.get(value, [])
    return readers[0] if len(readers) == 1 and uses[value] == 1 else None


def _attr(node: onnx.NodeProto, name: str) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return None


def _prune(g: onnx.GraphProto) -> None:
    """Drop the nodes (the scale products, unused DynamicQuantizeLinear) none of whose outputs is read."""
    while True:
        uses = _consumers(g)
        dead = [
            n for n in g.node if n.op_type in ("Mul", "DynamicQuantizeLinear") and not any(uses[o] for o in n.output)
        ]
        if not dead:
            return
        ids = {id(n) for n in dead}
        kept = [n for n in g.node if id(n) not in ids]
        del g.node[:]
        g.node.extend(kept)
