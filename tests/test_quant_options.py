"""One home for the quantization options (issue 51): :class:`vdla.graph.quantize.QuantOptions`, taken whole by
:func:`~vdla.graph.quantize.quantize_model` and :func:`~vdla.graph.autofloat.auto_float`, inherited by
:class:`~vdla.model.pipeline.CompileOptions`; the old spellings (the method as the third argument, the fields as
keywords) still work and give the same graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vdla.compiler import CompileError
from vdla.graph.autofloat import auto_float
from vdla.graph.calibrate import QuantizationError
from vdla.graph.graph import Graph, Node
from vdla.graph.quantize import QuantOptions, quantize_model
from vdla.graph.types import TensorType
from vdla.model.pipeline import CompileOptions


def _graph() -> Graph:
    rng = np.random.default_rng(3)
    params = {
        "w1": rng.normal(0, 0.4, (4, 2, 3, 3)).astype(np.float32),
        "b1": rng.normal(0, 0.1, 4).astype(np.float32),
        "w2": rng.normal(0, 0.3, (3, 4, 1, 1)).astype(np.float32),
    }
    nodes = [
        Node("conv2d", ("x", "w1", "b1"), "c1", {"padding": 1}),
        Node("relu", ("c1",), "r1"),
        Node("conv2d", ("r1", "w2"), "y", {"padding": 0}),
    ]
    return Graph({"x": TensorType((1, 2, 5, 5), "float32")}, nodes, ["y"], params, name="two")


def _data() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(4).normal(0, 1, (8, 2, 5, 5)).astype(np.float32)}


def _same(a: Graph, b: Graph) -> bool:
    return [n.op for n in a.nodes] == [n.op for n in b.nodes] and all(
        np.array_equal(a.params[k], b.params[k]) for k in a.params
    )


def test_options_the_method_name_and_keywords_give_the_same_quantization():
    g, data = _graph(), _data()
    whole, rep = quantize_model(g, data, QuantOptions(calibration="minmax", keep_float=("y",)))
    named, _ = quantize_model(g, data, "minmax", keep_float=["y"])
    keywords, _ = quantize_model(g, data, calibration="minmax", keep_float="y")
    assert rep.method == "minmax" and rep.kept_float == ("y",)
    assert _same(whole, named) and _same(whole, keywords)
    default, _ = quantize_model(g, data)
    assert not _same(whole, default)  # the options did reach the quantizer


def test_compile_options_are_quantization_options():
    opts = CompileOptions("pynq", calibration="entropy", keep_float=["a"], power_of_two=True)
    assert isinstance(opts, QuantOptions) and opts.config == "pynq"
    assert opts.quant == QuantOptions(calibration="entropy", keep_float=("a",), power_of_two=True)
    assert type(opts.quant) is QuantOptions
    quant_fields = {f.name for f in dataclasses.fields(QuantOptions)}
    assert quant_fields <= {f.name for f in dataclasses.fields(CompileOptions)}
    assert all(f.kw_only for f in dataclasses.fields(CompileOptions) if f.name in quant_fields)


def test_bad_options_are_refused_naming_them():
    with pytest.raises(QuantizationError, match="unknown calibration method 'kl'"):
        QuantOptions(calibration="kl")
    with pytest.raises(QuantizationError, match=r"percentile must lie in \(0, 100\], got 0"):
        QuantOptions(percentile=0)
    with pytest.raises(QuantizationError, match=r"unknown quantization option\(s\) \['methd'\]; the options are calib"):
        quantize_model(_graph(), _data(), methd="minmax")
    with pytest.raises(CompileError, match="unknown calibration method 'kl'"):
        CompileOptions(calibration="kl")
    with pytest.raises(CompileError, match=r"unknown compile option\(s\) \['calibraton'\]; the options are config"):
        CompileOptions().updated(calibraton="entropy")


def test_auto_float_takes_the_same_options():
    g, data = _graph(), _data()
    a = auto_float(g, data, 0.5, QuantOptions(calibration="minmax", keep_float=("y",)))
    b = auto_float(g, data, 0.5, calibration="minmax", keep_float=("y",))
    assert a.report.user_kept == b.report.user_kept == ("y",) and a.quant.method == "minmax"
    assert _same(a.qgraph, b.qgraph)
