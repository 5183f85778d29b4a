"""ONNX RNN, GRU and LSTM (vdla/frontend/onnx_ops/recurrent.py): imported as one dense input projection and a
``recurrence`` node, run by the CPU JIT and by the numpy interpreter against onnxruntime in every direction,
with lengths shorter than T, initial states, peepholes, layout 1, clip and every activation; and what is
refused at import, named."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("llvmlite")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vdla.cpu_fallback import compile_graph  # noqa: E402
from vdla.frontend import FrontendError, import_onnx  # noqa: E402
from vdla.frontend.reference import reference_run  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
T, B, I, H = 6, 3, 5, 4  # noqa: E741
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _weights(rng: np.random.Generator, op: str, d: int, h: int = H, i: int = I) -> dict[str, np.ndarray]:
    g = GATES[op]
    w = {
        "W": rng.normal(0, 0.6, (d, g * h, i)).astype(np.float32),
        "R": rng.normal(0, 0.6, (d, g * h, h)).astype(np.float32),
        "B": rng.normal(0, 0.3, (d, 2 * g * h)).astype(np.float32),
    }
    if op == "LSTM":
        w["P"] = rng.normal(0, 0.5, (d, 3 * h)).astype(np.float32)
    return w


def _model(op: str, d: int, layout: int, feeds: dict, consts: dict, outputs=("Y", "Y_h", "Y_c"), **attrs):
    """One recurrent node: inputs in ONNX's order, each a graph input (``feeds``), an initializer
    (``consts``) or absent."""
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][: 8 if op == "LSTM" else 6]
    names = [n if n in feeds or n in consts else "" for n in order]
    while names and not names[-1]:
        names.pop()
    t_b = (T, B) if layout == 0 else (B, T)
    shapes = {"Y": (*t_b[:1], d, *t_b[1:], H) if layout == 0 else (B, T, d, H)}
    shapes["Y_h"] = shapes["Y_c"] = (d, B, H) if layout == 0 else (B, d, H)
    outs = [o for o in outputs if op == "LSTM" or o != "Y_c"]
    node_outs = [o if o in outs else "" for o in ("Y", "Y_h", "Y_c")[: 3 if op == "LSTM" else 2]]
    while not node_outs[-1]:
        node_outs.pop()
    node = helper.make_node(op, names, node_outs, name=op.lower(), hidden_size=H, layout=layout, **attrs)
    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    vis = [helper.make_tensor_value_info(k, types[a.dtype], list(a.shape)) for k, a in feeds.items()]
    ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(shapes[o])) for o in outs]
    inits = [numpy_helper.from_array(a, k) for k, a in consts.items()]
    graph = helper.make_graph([node], op, vis, ys, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _check(model, feeds: dict[str, np.ndarray]) -> list[str]:
    """onnxruntime, the JIT and the interpreter agree on every output; returns the graph's operators."""
    want = reference_run(model, feeds)
    graph = import_onnx(model)
    for got in (compile_graph(graph)(**feeds), evaluate(graph, feeds)):
        for name, w in want.items():
            assert got[name].shape == w.shape, name
            np.testing.assert_allclose(got[name], w, err_msg=name, **TOL)
    return [n.op for n in graph.nodes]


def _case(op: str, direction: str, layout: int = 0, seed: int = 0):
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    consts = _weights(rng, op, d)
    x_shape = (T, B, I) if layout == 0 else (B, T, I)
    state = (d, B, H) if layout == 0 else (B, d, H)
    feeds = {
        "X": rng.normal(0, 1, x_shape).astype(np.float32),
        "sequence_lens": np.array([T, 3, 0], np.int32),
        "initial_h": rng.normal(0, 0.5, state).astype(np.float32),
    }
    if op == "LSTM":
        feeds["initial_c"] = rng.normal(0, 0.5, state).astype(np.float32)
    return _model(op, d, layout, feeds, consts, direction=direction), feeds


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_cells_in_every_direction_with_lengths_and_initial_states(op, direction):
    model, feeds = _case(op, direction)
    ops = _check(model, feeds)
    assert ops.count("dense") == 1 and ops.count("recurrence") == 1, ops  # the decomposition


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1_clip_and_gru_linear_before_reset(op):
    """onnxruntime runs no ``layout=1`` node: the reference is the ``layout=0`` model on the transposed
    tensors (the ONNX conformance cases test_*_batchwise check layout 1 against ONNX's own reference)."""
    rng = np.random.default_rng(5)
    consts = _weights(rng, op, 2)
    feeds = {"X": rng.normal(0, 2, (B, T, I)).astype(np.float32), "sequence_lens": np.array([2, T, 4], np.int32)}
    feeds["initial_h"] = rng.normal(0, 0.5, (B, 2, H)).astype(np.float32)
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    attrs = {"direction": "bidirectional", "clip": 0.7, **extra}
    batchwise = _model(op, 2, 1, feeds, consts, **attrs)
    seqwise = {k: v.transpose(1, 0, 2) if k in ("X", "initial_h") else v for k, v in feeds.items()}
    want = reference_run(_model(op, 2, 0, seqwise, consts, **attrs), seqwise)
    back = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
    graph = import_onnx(batchwise)
    for got in (compile_graph(graph)(**feeds), evaluate(graph, feeds)):
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w.transpose(back[name]), err_msg=name, **TOL)


def test_lstm_input_forget_and_computed_weights():
    """Coupled input and forget gates; W, R, B and P fed at run time (the projection's weight is computed)."""
    rng = np.random.default_rng(7)
    feeds = {"X": rng.normal(0, 1, (T, B, I)).astype(np.float32), **_weights(rng, "LSTM", 1)}
    model = _model("LSTM", 1, 0, feeds, {}, direction="reverse", input_forget=1)
    _check(model, feeds)


ACTIVATION_SETS = [
    # LSTM bidirectional: six slots, alphas and betas consumed in order by those taking them
    (["HardSigmoid", "Affine", "LeakyRelu", "Sigmoid", "ScaledTanh", "ThresholdedRelu"],
     [0.3, 0.8, 0.05, 0.9, 0.4], [0.45, 0.1, 0.6]),
    (["Sigmoid", "Elu", "Softsign", "HardSigmoid", "Softplus", "Relu"], [0.7], []),
    (["Sigmoid", "Tanh", "Tanh", "Affine", "ScaledTanh", "Elu"], [], []),  # onnxruntime's defaults
]  # fmt: skip


@pytest.mark.parametrize("activations,alpha,beta", ACTIVATION_SETS)
def test_every_activation_with_its_alpha_and_beta(activations, alpha, beta):
    rng = np.random.default_rng(11)
    consts = _weights(rng, "LSTM", 2)
    consts["R"] *= 0.5
    feeds = {"X": rng.normal(0, 1, (T, B, I)).astype(np.float32)}
    attrs = {"activations": activations}
    attrs |= {"activation_alpha": alpha} if alpha else {}
    attrs |= {"activation_beta": beta} if beta else {}
    _check(_model("LSTM", 2, 0, feeds, consts, direction="bidirectional", **attrs), feeds)


def test_only_some_outputs():
    """Y absent, only Y_h (and an LSTM's Y_c absent)."""
    rng = np.random.default_rng(2)
    consts = _weights(rng, "LSTM", 1)
    feeds = {"X": rng.normal(0, 1, (T, B, I)).astype(np.float32)}
    ops = _check(_model("LSTM", 1, 0, feeds, consts, outputs=("Y_h",)), feeds)
    assert ops.count("slice") == 1


def _bad(op: str, **change):
    rng = np.random.default_rng(0)
    consts = _weights(rng, op, 1)
    attrs = {"direction": "forward"}
    for k, v in change.items():
        if k in consts or k == "sequence_lens":
            consts[k] = v
        else:
            attrs[k] = v
    feeds = {"X": np.zeros((T, B, I), np.float32)}
    return _model(op, 1, 0, feeds, consts, **attrs)


@pytest.mark.parametrize(
    "op,change,words",
    [
        ("LSTM", {"direction": "sideways"}, ["direction", "sideways"]),
        ("GRU", {"activations": ["Sigmoid", "Swishy"]}, ["activations", "Swishy"]),
        ("RNN", {"activations": ["Tanh", "Tanh"]}, ["activations"]),
        ("LSTM", {"W": np.zeros((1, 4 * H, I + 1), np.float32)}, ["W", "shape"]),
        ("GRU", {"R": np.zeros((1, 3 * H, H), np.float32)[:, :-1]}, ["R"]),
        ("RNN", {"B": np.zeros((1, 3), np.float32)}, ["B", "shape"]),
        ("LSTM", {"P": np.zeros((1, H), np.float32)}, ["P", "shape"]),
        ("LSTM", {"clip": -1.0}, ["clip"]),
        ("GRU", {"linear_before_reset": 2}, ["linear_before_reset"]),
        ("LSTM", {"sequence_lens": np.array([T + 1] + [T] * (B - 1), np.int32)}, ["sequence_lens", f"0..{T}"]),
        ("RNN", {"sequence_lens": np.array([-1] + [T] * (B - 1), np.int32)}, ["sequence_lens"]),
    ],
)
def test_bad_attributes_are_refused_naming_node_and_attribute(op, change, words):
    with pytest.raises((UnsupportedError, FrontendError)) as e:
        import_onnx(_bad(op, **change))
    message = str(e.value)
    assert op.lower() in message, message  # the node's name
    for w in words:
        assert w in message, message


def test_hidden_size_mismatch_is_refused():
    rng = np.random.default_rng(0)
    feeds = {"X": np.zeros((T, B, I), np.float32)}
    model = _model("GRU", 1, 0, feeds, _weights(rng, "GRU", 1))
    model.graph.node[0].attribute[0].i = H + 1  # hidden_size
    with pytest.raises((UnsupportedError, FrontendError), match="hidden_size"):
        import_onnx(model)
