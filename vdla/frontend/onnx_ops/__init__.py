"""ONNX operators -> vdla graph operators: one converter per ONNX op type, in families registered with
:func:`~vdla.frontend.onnx_ops.registry.converter` (no ``onnx`` import here).

Each converter reads its node's inputs from the :class:`~vdla.frontend.builder.Builder`, checks every
attribute value and dtype it is given against what vdla runs, and emits graph nodes whose semantics are
the ONNX operator's (float32 results within the rounding of a reordered float sum; integer results
exact). Anything else is refused with :func:`~vdla.frontend.builder.unsupported` naming the node, its
op type, its attributes and the one at fault. :data:`ATTRS` lists the attributes each converter
understands: an attribute outside it is refused by the importer before the converter runs. A converter
reads its operator's newest form only: :func:`vdla.frontend.onnx_ops.legacy.modernize` rewrites an older
opset's form (attributes that later became inputs, Upsample, Resize-10) before the converter sees it.
"""

from vdla.frontend.onnx_ops import (  # noqa: F401  (each family registers its converters on import)
    attention,
    convt,
    dynquant,
    legacy,
    linear,
    math,
    pool,
    quant,
    recurrent,
    reduce,
    tensor,
)
from vdla.frontend.onnx_ops.registry import ATTRS, CONVERTERS, converter

SUPPORTED = tuple(sorted(CONVERTERS))

__all__ = ["ATTRS", "CONVERTERS", "SUPPORTED", "converter"]
