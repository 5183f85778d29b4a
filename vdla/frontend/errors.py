"""The frontend's error: a model file or model that cannot be read as asked; and its warning.

Operators, attribute values and dtypes vdla cannot run are :class:`vdla.graph.types.UnsupportedError`
(naming the node, its op type and attributes); everything wrong with the input itself (a malformed or
truncated file, an opset outside the supported range, a dynamic dimension without a fixed size, a
model the ONNX checker rejects) is a :class:`FrontendError` naming the file or model. What the importer
changes in a model it does import (float16/float64 computed in float32, a stored shape that does not hold
for the input shapes given) is an :class:`OnnxImportWarning` naming the file and the values.
"""

from __future__ import annotations

from vdla.errors import VdlaError


class FrontendError(VdlaError, ValueError):
    """A model that cannot be imported as given: the message names the file (or model) and what is wrong."""


class OnnxImportWarning(UserWarning):
    """A model imported with a change the user should know of: the message names the file and what changed."""
