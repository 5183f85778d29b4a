"""Recurrent networks: ONNX's ``RNN``, ``GRU`` and ``LSTM`` (no ``onnx`` import here).

Each one is decomposed into the input projection of every time step and the recurrence:

* ``X W^T + Wb`` for all T steps and every direction at once: one ``dense`` layer over the (T*B, I) rows
  (W of every direction stacked, (D*G*H, I)), which the quantizer and placement treat as any other dense
  layer (int8 on the accelerator in a quantized model);
* one ``recurrence`` node (:func:`vdla.graph.ops.recurrence_type`) on the projected gates (T, B, D, G*H): the
  products with R, Rb, the peepholes and the activations, step by step on the CPU in float32; its output
  holds Y, then Y_h (and Y_c), which slices (and, for ``layout=1``, transposes) turn into the ONNX outputs.

Every attribute ONNX defines is taken: ``direction``, ``hidden_size`` (checked against W and R),
``activations`` with ``activation_alpha``/``activation_beta`` (consumed in order by the activations that take
them, defaults as onnxruntime's), ``clip``, ``layout``, GRU's ``linear_before_reset``, LSTM's ``input_forget``;
and every input: ``sequence_lens``, ``initial_h``, ``initial_c``, ``P`` (absent ones become constants: full
lengths, zero states, zero peepholes, zero biases).
"""

from __future__ import annotations

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, unsupported
from vdla.frontend.onnx_ops.registry import FLOAT, attr, converter
from vdla.graph.oracle import RNN_ACTIVATIONS, RNN_GATES, RNN_STATES

DIRECTIONS = {"forward": ["forward"], "reverse": ["reverse"], "bidirectional": ["forward", "reverse"]}
DEFAULT_ACTIVATIONS = {"rnn": ["Tanh"], "gru": ["Sigmoid", "Tanh"], "lstm": ["Sigmoid", "Tanh", "Tanh"]}
# ONNX activation (lower case) -> (default alpha, default beta) of those that take them (onnxruntime's)
ACTIVATION_PARAMS = {
    "affine": (0.0, 0.0),
    "scaledtanh": (0.0, 0.0),
    "hardsigmoid": (0.2, 0.5),
    "leakyrelu": (0.01, None),
    "thresholdedrelu": (0.0, None),
    "elu": (1.0, None),
}
PLAIN_ACTIVATIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu", "softsign": "softsign",
                     "softplus": "softplus"}  # fmt: skip
ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout")


def activation(name: str, alpha: float | None, beta: float | None) -> list[list]:
    """The ONNX activation ``name`` as the steps of a ``recurrence`` activation (``[op, *operands]`` each)."""
    key = name.lower()
    if key in PLAIN_ACTIVATIONS:
        return [[PLAIN_ACTIVATIONS[key]]]
    return {
        "affine": [["mul", alpha], ["add", beta]],
        "scaledtanh": [["mul", beta], ["tanh"], ["mul", alpha]],
        "hardsigmoid": [["mul", alpha], ["add", beta], ["clip", 0.0, 1.0]],
        "leakyrelu": [["prelu", alpha]],
        "thresholdedrelu": [["thresholded_relu", alpha]],
        "elu": [["elu", alpha]],
    }[key]


def _activations(node: OnnxNode, cell: str, d_n: int) -> list[list[list]]:
    """Each direction's activations in turn; alphas and betas consumed in order by those taking them."""
    names = [str(n) for n in attr(node, "activations", DEFAULT_ACTIVATIONS[cell])]
    k = RNN_ACTIVATIONS[cell]
    if len(names) == k and d_n == 2 and "activations" not in node.attrs:
        names = names * 2
    if len(names) != k * d_n:
        raise unsupported(node, f"a {cell.upper()} takes {k} activations per direction ({k * d_n}), got {names}",
                          "activations")  # fmt: skip
    alphas = [float(v) for v in attr(node, "activation_alpha", [])]
    betas = [float(v) for v in attr(node, "activation_beta", [])]
    out = []
    for name in names:
        key = name.lower()
        if key not in PLAIN_ACTIVATIONS and key not in ACTIVATION_PARAMS:
            known = sorted([*PLAIN_ACTIVATIONS, *ACTIVATION_PARAMS])
            raise unsupported(node, f"unknown activation {name!r} (known: {', '.join(known)})", "activations")
        da, db = ACTIVATION_PARAMS.get(key, (None, None))
        alpha = (alphas.pop(0) if alphas else da) if da is not None else None
        beta = (betas.pop(0) if betas else db) if db is not None else None
        out.append(activation(name, alpha, beta))
    return out


def _expect_shape(b: Builder, node: OnnxNode, i: int, what: str, shape: tuple[int, ...]) -> None:
    if b.has(node, i) and b.shape(node, i) != shape:
        raise unsupported(node, f"{what} (input {i}) must have shape {shape}, got {b.shape(node, i)}", None)


class _Geometry:
    """The checked sizes of a recurrent node: T, B, I, D, H, G and its layout."""

    def __init__(self, b: Builder, node: OnnxNode, cell: str) -> None:
        direction = str(attr(node, "direction", "forward"))
        if direction not in DIRECTIONS:
            raise unsupported(node, f"direction {direction!r} is not one of {sorted(DIRECTIONS)}", "direction")
        self.directions = DIRECTIONS[direction]
        self.layout = int(attr(node, "layout", 0))
        if self.layout not in (0, 1):
            raise unsupported(node, f"layout {self.layout} is not 0 or 1", "layout")
        x, w, r = (b.shape(node, i) for i in range(3))
        if len(x) != 3:
            raise unsupported(node, f"X must be 3-D, got shape {x}")
        self.t, self.b = (x[0], x[1]) if self.layout == 0 else (x[1], x[0])
        self.i, self.d, self.g = x[2], len(self.directions), RNN_GATES[cell]
        if len(r) != 3 or r[0] != self.d:
            raise unsupported(node, f"R must be ({self.d}, {self.g}*hidden_size, hidden_size), got {r}")
        self.h = r[2]
        hidden = attr(node, "hidden_size")
        if hidden is not None and int(hidden) != self.h:
            raise unsupported(node, f"hidden_size {hidden} does not match R's {r}", "hidden_size")
        gh = self.g * self.h
        for i, what, shape in ((1, "W", (self.d, gh, self.i)), (2, "R", (self.d, gh, self.h)),
                               (3, "B", (self.d, 2 * gh)), (4, "sequence_lens", (self.b,))):  # fmt: skip
            _expect_shape(b, node, i, what, shape)
        if b.has(node, 4) and b.is_const(node, 4):
            lens = np.asarray(b.const(node, 4, "sequence_lens"))
            if lens.size and (lens.min() < 0 or lens.max() > self.t):
                what = f"sequence_lens {lens.tolist()} must lie in 0..{self.t} (X's steps)"
                raise unsupported(node, what, "sequence_lens")
        state = (self.d, self.b, self.h) if self.layout == 0 else (self.b, self.d, self.h)
        for i in (5, 6)[: 2 if cell == "lstm" else 1]:
            _expect_shape(b, node, i, ("initial_h", "initial_c")[i - 5], state)
        if cell == "lstm":
            _expect_shape(b, node, 7, "P", (self.d, 3 * self.h))


def _projection(b: Builder, node: OnnxNode, geo: _Geometry) -> str:
    """``X W^T + Wb`` for every step and direction as one dense layer, shaped (T, B, D, G*H)."""
    x = b.tensor(node, 0)
    if geo.layout == 1:
        x = b.emit(node, "transpose", (x,), {"perm": (1, 0, 2)}, suffix="X_T")
    rows = b.reshape(node, x, (geo.t * geo.b, geo.i))
    n = geo.d * geo.g * geo.h
    if b.is_const(node, 1):
        w = b.add_param(node.input(1) + ":W", np.asarray(b.const(node, 1, "W"), np.float32).reshape(n, geo.i))
    else:
        w = b.reshape(node, b.tensor(node, 1), (n, geo.i))
    inputs = [rows, w]
    if b.has(node, 3):
        inputs.append(b.reshape(node, _bias_half(b, node, geo, 0), (n,)))
    y = b.emit(node, "dense", inputs, suffix="projection")
    return b.reshape(node, y, (geo.t, geo.b, geo.d, geo.g * geo.h))


def _bias_half(b: Builder, node: OnnxNode, geo: _Geometry, half: int) -> str:
    """Wb (``half`` 0) or Rb (1) of input B, (D, G*H)."""
    gh = geo.g * geo.h
    if b.is_const(node, 3):
        bias = np.asarray(b.const(node, 3, "B"), np.float32)[:, half * gh : (half + 1) * gh]
        return b.add_param(node.input(3) + (":Wb", ":Rb")[half], np.ascontiguousarray(bias))
    starts, stops = (0, half * gh), (geo.d, (half + 1) * gh)
    return b.emit(node, "slice", (b.tensor(node, 3),), {"starts": starts, "stops": stops, "steps": (1, 1)},
                  suffix=("Wb", "Rb")[half])  # fmt: skip


def _input_or(b: Builder, node: OnnxNode, i: int, what: str, default: np.ndarray, state: bool) -> str:
    """Input ``i`` (a state in ``layout=1`` transposed to (D, B, H)), else the constant ``default``."""
    if not b.has(node, i):
        return b.add_param(f"{node.outputs[0] or node.name}:{what}", default)
    v = b.tensor(node, i)
    if state and int(attr(node, "layout", 0)) == 1:
        v = b.emit(node, "transpose", (v,), {"perm": (1, 0, 2)}, suffix=f"{what}_T")
    return v


def _recurrence_inputs(b: Builder, node: OnnxNode, geo: _Geometry, cell: str) -> list[str]:
    gh, d, h = geo.g * geo.h, geo.d, geo.h
    zeros_state = np.zeros((d, geo.b, h), np.float32)
    rb = (
        _bias_half(b, node, geo, 1) if b.has(node, 3) else b.add_param(f"{node.name}:Rb", np.zeros((d, gh), np.float32))
    )
    inputs = [
        _projection(b, node, geo),
        b.tensor(node, 2),
        rb,
        _input_or(b, node, 4, "lengths", np.full(geo.b, geo.t, np.int32), False),
        _input_or(b, node, 5, "h0", zeros_state, True),
    ]
    if cell == "lstm":
        inputs.append(_input_or(b, node, 6, "c0", zeros_state, True))
        inputs.append(_input_or(b, node, 7, "P", np.zeros((d, 3 * h), np.float32), False))
    return inputs


def _outputs(b: Builder, node: OnnxNode, geo: _Geometry, states: str, cell: str) -> None:
    """Y (rows 0..T-1), Y_h (row T) and Y_c (row T+1) of the recurrence's output, as the layout puts them."""
    full = (geo.t + RNN_STATES[cell], geo.d, geo.b, geo.h)
    rows = [(0, geo.t), (geo.t, geo.t + 1), (geo.t + 1, geo.t + 2)]
    for k, out in enumerate(node.outputs[: 1 + RNN_STATES[cell]]):
        if not out:
            continue
        start, stop = rows[k]
        attrs = {"starts": (start, 0, 0, 0), "stops": (stop, *full[1:]), "steps": (1, 1, 1, 1)}
        v = b.emit(node, "slice", (states,), attrs, suffix=("Y", "Y_h", "Y_c")[k])
        if k == 0:
            perm = (2, 0, 1, 3) if geo.layout == 1 else None
        else:
            v = b.reshape(node, v, full[1:])
            perm = (1, 0, 2) if geo.layout == 1 else None
        if perm is None:
            b.alias(out, v)
        else:
            b.emit(node, "transpose", (v,), {"perm": perm}, out=out)


def _check_dtypes(b: Builder, node: OnnxNode) -> None:
    for i in range(len(node.inputs)):
        if b.has(node, i):
            b.require_dtype(node, i, ("int32",) if i == 4 else FLOAT)


def _recurrent(cell: str, extra: dict[str, str]) -> None:
    """Register the converter of ONNX ``cell`` (``extra``: its own attribute -> the recurrence's)."""

    def convert(b: Builder, node: OnnxNode) -> None:
        _check_dtypes(b, node)
        geo = _Geometry(b, node, cell)
        clip = attr(node, "clip")
        if clip is not None and not float(clip) > 0:
            raise unsupported(node, f"clip {clip} must be positive", "clip")
        attrs = {"cell": cell, "directions": geo.directions, "activations": _activations(node, cell, geo.d),
                 "clip": None if clip is None else float(clip)}  # fmt: skip
        for onnx_name, name in extra.items():
            value = int(attr(node, onnx_name, 0))
            if value not in (0, 1):
                raise unsupported(node, f"{onnx_name} must be 0 or 1, got {value}", onnx_name)
            attrs[name] = value
        states = b.emit(node, "recurrence", _recurrence_inputs(b, node, geo, cell), attrs, suffix="states")
        _outputs(b, node, geo, states, cell)

    converter(cell.upper(), attrs=(*ATTRS, *extra))(convert)


_recurrent("rnn", {})
_recurrent("gru", {"linear_before_reset": "linear_before_reset"})
_recurrent("lstm", {"input_forget": "input_forget"})
