"""Model frontends: ONNX models in, :class:`vdla.graph.Graph` out.

``import_onnx`` needs the ``onnx`` extra (``pip install 'vdla[onnx]'``); it is imported on first use,
so ``import vdla.frontend`` stays numpy-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vdla.frontend.errors import FrontendError
from vdla.graph.graph import Graph


def import_onnx(model: str | Path | Any, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """Import an ONNX model (a path or an ``onnx.ModelProto``): see :func:`vdla.frontend.onnx.import_onnx`."""
    from vdla.frontend.onnx import import_onnx as _import

    return _import(model, input_shapes)


__all__ = ["FrontendError", "import_onnx"]
