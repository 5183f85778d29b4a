"""Whole models: compile an ONNX model (or a graph) into a deployable artifact and run it.

>>> module = vdla.compile("model.onnx", config="pynq", backend="sim")   # doctest: +SKIP
>>> y = module.run(x)                                                  # doctest: +SKIP
>>> module.save("model.vdla"); vdla.load("model.vdla", backend="rtl")  # doctest: +SKIP

Loading and running (:mod:`vdla.model.artifact`, :mod:`vdla.model.executor`) never import the
compiler or ONNX; compiling (:mod:`vdla.model.build`) does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vdla.graph.calibrate import DEFAULT_PERCENTILE
from vdla.model.artifact import Artifact, ArtifactError, load_artifact
from vdla.model.executor import ModelInputError, Module, RunReport, load


def compile(  # noqa: A001 - the public name the API promises (vdla.compile)
    model: Any,
    calib: Any = None,
    config: str = "pynq",
    backend: str = "sim",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    dump: str | Path | None = None,
    cache: Any = None,
    log: Any = None,
    calibration: str = "percentile",
    percentile: float = DEFAULT_PERCENTILE,
    keep_float: Any = (),
    **backend_options: Any,
) -> Module:
    """Compile ``model`` (an ONNX path or ``onnx.ModelProto``, or a :class:`vdla.graph.Graph`) and bind it
    to a device of ``backend``. ``calib`` (an ``.npz`` path or a dict of arrays, samples along the first
    axis) quantizes a float model with scales by ``calibration`` (``minmax``, ``percentile``, ``entropy``),
    the nodes in ``keep_float`` left in float (docs/quantization.md); a QDQ model keeps its own scales."""
    from vdla.model.build import compile_model

    artifact, report = compile_model(
        model,
        calib=calib,
        config=config,
        input_shapes=input_shapes,
        dump=dump,
        cache=cache,
        log=log,
        calibration=calibration,
        percentile=percentile,
        keep_float=keep_float,
    )
    module = Module(artifact, backend, **backend_options)
    module.compile_report = report
    return module


__all__ = ["Artifact", "ArtifactError", "ModelInputError", "Module", "RunReport", "compile", "load", "load_artifact"]
