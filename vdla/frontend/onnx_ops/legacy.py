"""Old opset forms (opsets 7 to 17) brought to the newest form before a converter sees them (no ``onnx``
import here).

Between opsets 7 and 18 many operators moved an attribute to an input (Slice's starts/ends/axes at 10,
TopK's k at 10, Pad's pads and value and Clip's min and max at 11, Dropout's ratio at 12, Split's split,
Squeeze/Unsqueeze's axes and ReduceSum's axes at 13, the other reductions' axes at 18). :func:`modernize`
moves such an attribute to the input it became, as a constant of the input's dtype, so that each converter
reads one form, the newest (an operator another family adds gets its old forms for free).

Upsample (opsets 7-9, scales an attribute before 9) and Resize of opset 10 (inputs ``X, scales``) become
Resize of opset 11 (``X, roi, scales``) with the coordinate transformation those versions define,
``asymmetric``. Their nearest rounding is onnxruntime's: ``floor`` when upsampling, ``ceil`` when
downsampling; a node that upsamples one axis and downsamples another (no single rounding) is refused.

Invariant: a modernized node has the op type, name and outputs of the original and computes the same
function; only its inputs and attributes change.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vdla.frontend.builder import Builder, OnnxNode, unsupported
from vdla.frontend.onnx_ops.registry import CONVERTERS, converter

# op type -> (the first opset taking these as inputs, ((attribute, input position), ...))
_REDUCE_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
              "ReduceProd", "ReduceSumSquare")  # fmt: skip
ATTR_INPUTS: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {
    "Slice": (10, (("starts", 1), ("ends", 2), ("axes", 3))),
    "TopK": (10, (("k", 1),)),
    "Upsample": (9, (("scales", 1),)),
    "Pad": (11, (("pads", 1), ("value", 2))),
    "Clip": (11, (("min", 1), ("max", 2))),
    "Dropout": (12, (("ratio", 1),)),
    "Split": (13, (("split", 1),)),
    "Squeeze": (13, (("axes", 1),)),
    "Unsqueeze": (13, (("axes", 1),)),
    "ReduceSum": (13, (("axes", 1),)),
    **{op: (18, (("axes", 1),)) for op in _REDUCE_18},
}
# attributes of integer lists (int64 inputs); the others (Pad's value, Clip's bounds, Dropout's ratio) are
# scalars of the data input's dtype (float32: their old forms take float tensors only)
_INT_ATTRS = ("starts", "ends", "axes", "k", "pads", "split")
# what Upsample and Resize before opset 11 mean, in Resize's opset 11 attributes
_OLD_RESIZE = {"coordinate_transformation_mode": "asymmetric"}


def _moved(b: Builder, node: OnnxNode, name: str) -> str:
    """A private ONNX-side name bound to attribute ``name`` of ``node`` as a constant input."""
    value = node.attrs[name]
    if name in _INT_ATTRS:
        array = np.asarray(value, np.int64).reshape(-1)
    elif name == "scales":
        array = np.asarray(value, np.float32).reshape(-1)
    else:
        array = np.asarray(value, np.float32).reshape(())
    key = f"\0{node.name}:{name}"
    b.bind_const(key, array)
    return key


def _attrs_to_inputs(b: Builder, node: OnnxNode) -> OnnxNode:
    since, moves = ATTR_INPUTS.get(node.op_type, (0, ()))
    present = [(a, i) for a, i in moves if a in node.attrs]
    if node.opset >= since or not present:
        return node
    width = max(len(node.inputs), 1 + max(i for _, i in present))
    inputs = [*node.inputs, *[""] * (width - len(node.inputs))]
    for name, i in present:
        inputs[i] = _moved(b, node, name)
    attrs = {k: v for k, v in node.attrs.items() if k not in dict(present)}
    return replace(node, inputs=tuple(inputs), attrs=attrs)


def _nearest_mode(b: Builder, node: OnnxNode) -> str:
    """onnxruntime's rounding of a pre-opset-11 nearest resize: floor upsampling, ceil downsampling."""
    scales = np.asarray(b.const(node, 1, "scales"), np.float64).ravel()
    if np.any(scales > 1) and np.any(scales < 1):
        raise unsupported(
            node, f"scales {scales.tolist()} upsample one axis and downsample another: before opset 11 the two "
            "round differently (floor, ceil); vdla resizes with one rounding for all axes",
        )  # fmt: skip
    return "ceil" if np.any(scales < 1) else "floor"


def _resize_form(b: Builder, node: OnnxNode) -> OnnxNode:
    """Upsample, or Resize before opset 11, ``(X, scales)``, as Resize of opset 11 ``(X, roi, scales)``."""
    attrs = {**node.attrs, **_OLD_RESIZE}
    if str(attrs.get("mode", "nearest")) == "nearest":
        attrs["nearest_mode"] = _nearest_mode(b, node)
    return replace(node, inputs=(node.inputs[0], "", node.inputs[1]), attrs=attrs)


def modernize(b: Builder, node: OnnxNode) -> OnnxNode:
    """``node`` in the newest form of its operator (see the module docstring); itself when it has it."""
    node = _attrs_to_inputs(b, node)
    if node.op_type == "Upsample" or (node.op_type == "Resize" and node.opset < 11):
        node = _resize_form(b, node)
    return node


@converter("Upsample", attrs=("mode", "nearest_mode", *_OLD_RESIZE))
def _upsample(b: Builder, node: OnnxNode) -> None:
    """Resize's converter on the opset 11 form :func:`modernize` gave the node."""
    CONVERTERS["Resize"](b, node)
