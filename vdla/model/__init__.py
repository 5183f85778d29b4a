"""Whole models: compile an ONNX model (or a graph) into a deployable artifact and run it.

>>> module = vdla.compile("model.onnx", config="pynq", backend="sim")   # doctest: +SKIP
>>> y = module.run(x)                                                  # doctest: +SKIP
>>> module.save("model.vdla"); vdla.load("model.vdla", backend="rtl")  # doctest: +SKIP

Loading and running (:mod:`vdla.model.artifact`, :mod:`vdla.model.executor`) never import the
compiler or ONNX; compiling (:mod:`vdla.model.pipeline`) does.
"""

from __future__ import annotations

from typing import Any

from vdla.model.artifact import Artifact, ArtifactError, load_artifact
from vdla.model.executor import ModelInputError, Module, RunReport, load


def compile(  # noqa: A001 - the public name the API promises (vdla.compile)
    model: Any,
    calib: Any = None,
    options: Any = None,
    *,
    backend: str = "sim",
    cache: Any = None,
    log: Any = None,
    progress: Any = None,
    backend_options: dict[str, Any] | None = None,
    **option_fields: Any,
) -> Module:
    """Compile ``model`` (an ONNX path or ``onnx.ModelProto``, or a :class:`vdla.graph.Graph`) as ``options``
    (:class:`vdla.model.pipeline.CompileOptions`) say, its fields also taken as keywords (``config="pynq"``,
    ``calibration="entropy"``, ``keep_float=[...]``, ``power_of_two=True``, ...), and bind it to a device of
    ``backend`` (``backend_options`` go to the device). ``calib`` (an ``.npz`` path or a dict of arrays,
    samples along the first axis) quantizes a float model (docs/quantization.md); a QDQ model keeps its own
    scales. The compile report is ``module.compile_report``. The module runs the CPU code this call compiled
    for this machine (``cpu_targets``) without a signature (``trust_native``, see docs/security.md)."""
    from vdla.model.pipeline import compile_model

    artifact, report = compile_model(model, calib, options, cache=cache, log=log, progress=progress, **option_fields)
    # the artifact's native code (cpu_targets) was built by this process: trusted without a signature
    module = Module(artifact, backend, **{"trust_native": True, **(backend_options or {})})
    module.compile_report = report
    return module


__all__ = ["Artifact", "ArtifactError", "ModelInputError", "Module", "RunReport", "compile", "load", "load_artifact"]
