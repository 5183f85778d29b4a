"""Model builders for tests, benchmarks, examples and experiments: ResNets, MobileNet-v1/v2 and an MLP
written to ONNX with the project's own builder (onnx.helper), seeded weights with BatchNorm, and static QDQ
quantization with onnxruntime.

``resnet(...)`` builds the standard torchvision ResNet layout (7x7/2 stem, 3x3/2 max pool, basic
blocks with strided 1x1 projections, global average pool, dense) at any width, depth and input size;
``resnet18()`` is the real thing at 224x224. ``mobilenet_v1`` and ``mobilenet_v2`` are the standard layouts
(depthwise separable convolutions; inverted residuals with linear bottlenecks and ReLU6) at any width
multiplier, input size and class count; ``mlp`` a Gemm/MatMul+Add stack with ReLU; ``unet`` a small U-Net
(its upsampling a ConvTranspose 2x2 stride 2) and ``attention`` one multi-head self-attention block. ``quantize_qdq`` is
the independent int8 reference: onnxruntime's static quantizer in QDQ format, per-channel symmetric int8
weights and symmetric int8 activations (zero point 0, what the accelerator computes with).

Invariants: a builder's model depends on its arguments alone (the weights are drawn from ``seed``); onnx and
onnxruntime are imported inside the functions that need them, so importing this module needs numpy alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np


def _helpers():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as e:  # pragma: no cover - the onnx extra
        raise ImportError("building ONNX models needs the onnx extra: pip install 'vdla[onnx]'") from e
    return onnx, TensorProto, helper, numpy_helper


class _Builder:
    """Accumulates nodes and seeded initializers of one ONNX graph."""

    def __init__(self, seed: int):
        self.onnx, self.TensorProto, self.helper, self.numpy_helper = _helpers()
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def init(self, prefix: str, value: np.ndarray, dtype: type = np.float32) -> str:
        n = self.name(prefix)
        self.inits.append(self.numpy_helper.from_array(np.asarray(value).astype(dtype), n))
        return n

    def conv_bn(
        self,
        x: str,
        c_in: int,
        c_out: int,
        k: int,
        stride: int,
        relu: bool,
        groups: int = 1,
        relu6: bool = False,
        gain: float = 1.0,
    ) -> str:
        """Conv (``groups``: grouped/depthwise), BatchNorm (its scale times ``gain``), then ReLU (``relu``) or
        ReLU6 as Clip(0, 6)."""
        w = self.rng.normal(0, np.sqrt(2.0 / (c_in // groups * k * k)), (c_out, c_in // groups, k, k))
        conv = self.name("conv")
        grouped = {"group": groups} if groups != 1 else {}
        self.nodes.append(
            self.helper.make_node(
                "Conv",
                [x, self.init("w", w)],
                [conv],
                kernel_shape=[k, k],
                strides=[stride] * 2,
                pads=[k // 2] * 4,
                **grouped,
            )
        )
        bn = self.name("bn")
        stats = [
            self.init("gamma", gain * self.rng.uniform(0.5, 1.5, c_out)),
            self.init("beta", self.rng.normal(0, 0.1, c_out)),
            self.init("mean", self.rng.normal(0, 0.1, c_out)),
            self.init("var", self.rng.uniform(0.5, 1.5, c_out)),
        ]
        self.nodes.append(self.helper.make_node("BatchNormalization", [conv, *stats], [bn], epsilon=1e-5))
        if relu6:
            out = self.name("relu6")
            bounds = [self.init("lo", np.array(0.0)), self.init("hi", np.array(6.0))]
            self.nodes.append(self.helper.make_node("Clip", [bn, *bounds], [out]))
            return out
        if not relu:
            return bn
        out = self.name("relu")
        self.nodes.append(self.helper.make_node("Relu", [bn], [out]))
        return out

    def basic_block(self, x: str, c_in: int, c_out: int, stride: int) -> str:
        a = self.conv_bn(x, c_in, c_out, 3, stride, True)
        b = self.conv_bn(a, c_out, c_out, 3, 1, False)
        skip = x if stride == 1 and c_in == c_out else self.conv_bn(x, c_in, c_out, 1, stride, False)
        s, out = self.name("add"), self.name("relu")
        self.nodes += [self.helper.make_node("Add", [b, skip], [s]), self.helper.make_node("Relu", [s], [out])]
        return out


def resnet(
    widths: Sequence[int] = (64, 128, 256, 512),
    blocks: Sequence[int] = (2, 2, 2, 2),
    image: int = 224,
    in_channels: int = 3,
    classes: int = 1000,
    seed: int = 0,
    stem: bool = True,
    name: str = "resnet",
):
    """A ResNet with basic blocks as an ``onnx.ModelProto`` (opset 13): input ``image`` (1, C, H, W),
    outputs ``logits`` (1, classes) and ``probs`` (softmax)."""
    b = _Builder(seed)
    helper = b.helper
    x, c = "image", in_channels
    if stem:
        x = b.conv_bn(x, c, widths[0], 7, 2, True)
        pool = b.name("pool")
        b.nodes.append(helper.make_node("MaxPool", [x], [pool], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
        x, c = pool, widths[0]
    for stage, (width, n) in enumerate(zip(widths, blocks, strict=True)):
        for i in range(n):
            x = b.basic_block(x, c, width, 2 if i == 0 and stage > 0 else 1)
            c = width
    return _classifier(b, x, c, classes, name, (1, in_channels, image, image))


def resnet18(seed: int = 0, image: int = 224):
    """ResNet-18 (torchvision layout, 1000 classes) with seeded weights and BatchNorm."""
    return resnet(image=image, seed=seed, name="resnet18")


def small_resnet(seed: int = 0):
    """A small ResNet for tests: conv-bn-relu stem with max pool, two residual blocks (the second with a
    strided 1x1 projection), global average pool, dense, softmax; 3x32x32 input, 10 classes."""
    return resnet(widths=(16, 32), blocks=(1, 1), image=32, classes=10, seed=seed, name="small_resnet")


def _classifier(b: _Builder, x: str, c: int, classes: int, name: str, image_shape: Sequence[int]):
    """Global average pool, flatten, dense (Gemm), softmax after ``x`` (``c`` channels); the checked
    ``onnx.ModelProto`` (opset 13) with input ``image`` and outputs ``logits`` and ``probs``."""
    helper, TensorProto = b.helper, b.TensorProto
    gap, flat = b.name("gap"), b.name("flat")
    fc_w = b.init("fc_w", b.rng.normal(0, np.sqrt(1.0 / c), (classes, c)))
    fc_b = b.init("fc_b", b.rng.normal(0, 0.01, classes))
    b.nodes += [
        helper.make_node("GlobalAveragePool", [x], [gap]),
        helper.make_node("Flatten", [gap], [flat], axis=1),
        helper.make_node("Gemm", [flat, fc_w, fc_b], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        b.nodes,
        name,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, list(image_shape))],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [image_shape[0], classes]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [image_shape[0], classes]),
        ],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    b.onnx.checker.check_model(model)
    return model


def make_divisible(v: float, divisor: int = 8) -> int:
    """MobileNet's channel rounding: the nearest multiple of ``divisor`` (at least ``divisor``), never more
    than 10% below ``v``."""
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


# MobileNet-v1's depthwise separable blocks (output channels, stride of the depthwise conv)
MOBILENET_V1_BLOCKS = (
    (64, 1),
    (128, 2),
    (128, 1),
    (256, 2),
    (256, 1),
    (512, 2),
    *((512, 1),) * 5,
    (1024, 2),
    (1024, 1),
)
# MobileNet-v2's inverted residual stages (expansion t, output channels c, repeats n, first stride s)
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))  # fmt: skip


def mobilenet_v1(
    width: float = 1.0,
    image: int = 224,
    classes: int = 1000,
    seed: int = 0,
    blocks: Sequence[tuple[int, int]] = MOBILENET_V1_BLOCKS,
    name: str = "mobilenet_v1",
):
    """MobileNet-v1 (Howard et al. 2017) as an ``onnx.ModelProto`` (opset 13): a 3x3/2 conv stem of 32
    channels, depthwise separable blocks (3x3 depthwise conv + BN + ReLU, 1x1 pointwise conv + BN + ReLU),
    global average pool, dense, softmax; channels scaled by ``width`` (rounded to multiples of 8); input
    ``image`` (1, 3, image, image), outputs ``logits`` and ``probs``."""
    b = _Builder(seed)
    c = make_divisible(32 * width)
    x = b.conv_bn("image", 3, c, 3, 2, True)
    for channels, stride in blocks:
        x = b.conv_bn(x, c, c, 3, stride, True, groups=c)  # depthwise
        out = make_divisible(channels * width)
        x = b.conv_bn(x, c, out, 1, 1, True)  # pointwise
        c = out
    return _classifier(b, x, c, classes, name, (1, 3, image, image))


def mobilenet_v2(
    width: float = 1.0,
    image: int = 224,
    classes: int = 1000,
    seed: int = 0,
    stages: Sequence[tuple[int, int, int, int]] = MOBILENET_V2_STAGES,
    name: str = "mobilenet_v2",
):
    """MobileNet-v2 (Sandler et al. 2018) as an ``onnx.ModelProto`` (opset 13): a 3x3/2 conv stem of 32
    channels, inverted residual blocks (1x1 expansion + BN + ReLU6 unless the expansion is 1, 3x3 depthwise
    conv + BN + ReLU6, linear 1x1 projection + BN, a residual add where stride 1 keeps the channels), a
    1x1 conv to 1280 channels + BN + ReLU6, global average pool, dense, softmax. ReLU6 is Clip(0, 6);
    channels are scaled by ``width`` (multiples of 8; the last conv keeps 1280 below width 1)."""
    b = _Builder(seed)
    c = make_divisible(32 * width)
    x = b.conv_bn("image", 3, c, 3, 2, False, relu6=True)
    for t, channels, n, s in stages:
        out = make_divisible(channels * width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            y = x if t == 1 else b.conv_bn(x, c, hidden, 1, 1, False, relu6=True)
            y = b.conv_bn(y, hidden, hidden, 3, stride, False, groups=hidden, relu6=True)
            y = b.conv_bn(y, hidden, out, 1, 1, False)  # linear bottleneck
            if stride == 1 and c == out:
                s_ = b.name("add")
                b.nodes.append(b.helper.make_node("Add", [x, y], [s_]))
                y = s_
            x, c = y, out
    last = make_divisible(1280 * max(1.0, width))
    x = b.conv_bn(x, c, last, 1, 1, False, relu6=True)
    return _classifier(b, x, last, classes, name, (1, 3, image, image))


def mlp(features: int = 64, hidden: Sequence[int] = (128, 64), classes: int = 10, batch: int = 1, seed: int = 0):
    """A multilayer perceptron as an ``onnx.ModelProto`` (opset 13): input ``x`` (batch, features), dense
    layers with ReLU (alternately a Gemm with its bias and a MatMul followed by an Add of the bias), a
    last dense layer to ``logits`` (batch, classes) and ``probs`` (softmax)."""
    b = _Builder(seed)
    helper, TensorProto = b.helper, b.TensorProto
    x, width = "x", features
    for i, out in enumerate([*hidden, classes]):
        w = b.rng.normal(0, np.sqrt(2.0 / width), (width, out))
        bias = b.init("bias", b.rng.normal(0, 0.1, out))
        y = "logits" if i == len(hidden) else b.name("dense")
        if i % 2 == 0:
            b.nodes.append(helper.make_node("Gemm", [x, b.init("w", w), bias], [y]))
        else:
            mm = b.name("matmul")
            b.nodes += [
                helper.make_node("MatMul", [x, b.init("w", w)], [mm]),
                helper.make_node("Add", [mm, bias], [y]),
            ]
        if i < len(hidden):
            x = b.name("relu")
            b.nodes.append(helper.make_node("Relu", [y], [x]))
        width = out
    b.nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=1))
    graph = helper.make_graph(
        b.nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, classes]),
        ],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    b.onnx.checker.check_model(model)
    return model


def _model(b: _Builder, name: str, inputs: list, outputs: list):
    helper = b.helper
    graph = helper.make_graph(b.nodes, name, inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    b.onnx.checker.check_model(model)
    return model


def unet(seed: int = 0, image: int = 16, in_channels: int = 3, widths: Sequence[int] = (16, 32), classes: int = 4):
    """A small U-Net for tests: two conv-bn-relu at full resolution (the skip), a 2x2 max pool, a conv-bn-relu
    at half resolution, a ConvTranspose 2x2 stride 2 (with bias and ReLU) back up, the skip concatenated on
    the channels, a conv-bn-relu and a 1x1 conv to ``classes`` maps: input ``image`` (1, C, H, W), output
    ``logits`` (1, classes, H, W)."""
    b = _Builder(seed)
    helper, tp = b.helper, b.TensorProto
    c1, c2 = widths
    skip = b.conv_bn(b.conv_bn("image", in_channels, c1, 3, 1, True), c1, c1, 3, 1, True)
    pool = b.name("pool")
    b.nodes.append(helper.make_node("MaxPool", [skip], [pool], kernel_shape=[2, 2], strides=[2, 2]))
    low = b.conv_bn(pool, c1, c2, 3, 1, True)
    w = b.init("up_w", b.rng.normal(0, np.sqrt(2.0 / (c2 * 4)), (c2, c1, 2, 2)))
    up, relu, cat = b.name("up"), b.name("relu"), b.name("cat")
    b.nodes += [
        helper.make_node("ConvTranspose", [low, w, b.init("up_b", b.rng.normal(0, 0.1, c1))], [up], strides=[2, 2]),
        helper.make_node("Relu", [up], [relu]),
        helper.make_node("Concat", [skip, relu], [cat], axis=1),
    ]
    y = b.conv_bn(cat, 2 * c1, c1, 3, 1, True)
    head = b.init("head_w", b.rng.normal(0, np.sqrt(1.0 / c1), (classes, c1, 1, 1)))
    b.nodes.append(helper.make_node("Conv", [y, head, b.init("head_b", b.rng.normal(0, 0.1, classes))], ["logits"]))
    return _model(
        b,
        "unet",
        [helper.make_tensor_value_info("image", tp.FLOAT, [1, in_channels, image, image])],
        [helper.make_tensor_value_info("logits", tp.FLOAT, [1, classes, image, image])],
    )


class _Yolo:
    """The YOLOv8 blocks on a :class:`_Builder`: conv + BN + SiLU, C2f, SPPF, and the decoupled head."""

    def __init__(self, b: _Builder):
        self.b, self.h = b, b.helper

    def node(self, op: str, inputs: list[str], prefix: str, **attrs) -> str:
        out = self.b.name(prefix)
        self.b.nodes.append(self.h.make_node(op, inputs, [out], **attrs))
        return out

    def const(self, prefix: str, value, dtype=np.int64) -> str:
        return self.b.init(prefix, np.asarray(value), dtype)

    def conv(self, x: str, c_in: int, c_out: int, k: int = 1, s: int = 1, gain: float = 1.0) -> str:
        y = self.b.conv_bn(x, c_in, c_out, k, s, False, gain=gain)
        return self.node("Mul", [y, self.node("Sigmoid", [y], "sig")], "silu")

    def c2f(self, x: str, c_in: int, c_out: int, n: int, shortcut: bool) -> str:
        c = c_out // 2
        y = self.conv(x, c_in, 2 * c)
        a, b_ = self.b.name("split"), self.b.name("split")
        self.b.nodes.append(self.h.make_node("Split", [y, self.const("sizes", [c, c])], [a, b_], axis=1))
        ys = [a, b_]
        for _ in range(n):
            # a residual branch ends small, as trained networks keep it (a random deep network is chaotic)
            m = self.conv(self.conv(ys[-1], c, c, 3), c, c, 3, gain=0.25 if shortcut else 1.0)
            ys.append(self.node("Add", [ys[-1], m], "add") if shortcut else m)
        return self.conv(self.node("Concat", ys, "cat", axis=1), (2 + n) * c, c_out)

    def sppf(self, x: str, c_in: int, c_out: int) -> str:
        ys = [self.conv(x, c_in, c_in // 2)]
        for _ in range(3):
            ys.append(self.node("MaxPool", [ys[-1]], "pool", kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4))
        return self.conv(self.node("Concat", ys, "cat", axis=1), 2 * c_in, c_out)

    def up(self, x: str) -> str:
        scales = self.const("scales", [1.0, 1.0, 2.0, 2.0], np.float32)
        return self.node("Resize", [x, "", scales], "up", mode="nearest")

    def head(self, f: str, c: int, c_mid: int, c_out: int) -> str:
        y = self.conv(self.conv(f, c, c_mid, 3), c_mid, c_mid, 3)
        w = self.b.init("w", self.b.rng.normal(0, np.sqrt(1.0 / c_mid), (c_out, c_mid, 1, 1)))
        return self.node("Conv", [y, w, self.b.init("b", self.b.rng.normal(0, 0.5, c_out))], "pred")

    def decode(self, box: str, cls: str, hw: tuple[int, int], stride: int, classes: int, reg_max: int):
        """Distribution focal loss decode: the expected bin of each side's softmax, boxes (x1, y1, x2, y2) in
        pixels around the cell centres; class probabilities by sigmoid."""
        h, w = hw
        dist = self.node("Reshape", [box, self.const("shape", [1, 4, reg_max, h * w])], "dist")
        soft = self.node("Softmax", [dist], "soft", axis=2)
        bins = self.const("bins", np.arange(reg_max, dtype=np.float32).reshape(1, 1, reg_max, 1), np.float32)
        side = self.node("ReduceSum", [self.node("Mul", [soft, bins], "wbin"), self.const("axes", [2])], "side")
        side = self.node("Reshape", [side, self.const("shape", [1, 4, h * w])], "sides")
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        anchors = self.const("anchors", np.stack([gx, gy]).reshape(1, 2, h * w) + 0.5, np.float32)
        lt = self.node("Slice", [side, self.const("s", [0]), self.const("e", [2]), self.const("a", [1])], "lt")
        rb = self.node("Slice", [side, self.const("s", [2]), self.const("e", [4]), self.const("a", [1])], "rb")
        corners = [self.node("Sub", [anchors, lt], "xy1"), self.node("Add", [anchors, rb], "xy2")]
        boxes = self.node("Concat", corners, "corners", axis=1)
        boxes = self.node("Mul", [boxes, self.const("stride", np.float32(stride), np.float32)], "boxes")
        logits = self.node("Reshape", [cls, self.const("shape", [1, classes, h * w])], "logits")
        return boxes, self.node("Sigmoid", [logits], "scores")


def yolov8(width: float = 0.25, depth: float = 0.33, image: int = 320, classes: int = 80, seed: int = 0):
    """A 3-scale YOLOv8 detector (Jocher et al. 2023) as an ``onnx.ModelProto`` (opset 13) with seeded weights:
    the backbone (strided conv + BN + SiLU, C2f blocks with residual bottlenecks, SPPF), the PAN neck (nearest
    2x upsampling, concatenations, C2f without shortcuts), and the decoupled head at strides 8, 16, 32 with
    the distribution-focal-loss decode (16 bins a side). ``width`` 0.25 and ``depth`` 0.33 are YOLOv8n's.
    Input ``image`` (1, 3, image, image); outputs ``boxes`` (1, 4, anchors) in pixels and ``scores``
    (1, classes, anchors)."""
    b = _Builder(seed)
    y = _Yolo(b)
    ch = [max(16, int(c * width)) for c in (64, 128, 256, 512, 1024)]
    d = [max(1, round(n * depth)) for n in (3, 6, 6, 3)]
    x = y.conv(y.conv("image", 3, ch[0], 3, 2), ch[0], ch[1], 3, 2)
    p3 = y.c2f(y.conv(y.c2f(x, ch[1], ch[1], d[0], True), ch[1], ch[2], 3, 2), ch[2], ch[2], d[1], True)
    p4 = y.c2f(y.conv(p3, ch[2], ch[3], 3, 2), ch[3], ch[3], d[2], True)
    p5 = y.sppf(y.c2f(y.conv(p4, ch[3], ch[4], 3, 2), ch[4], ch[4], d[3], True), ch[4], ch[4])
    n4 = y.c2f(y.node("Concat", [y.up(p5), p4], "cat", axis=1), ch[4] + ch[3], ch[3], d[3], False)
    n3 = y.c2f(y.node("Concat", [y.up(n4), p3], "cat", axis=1), ch[3] + ch[2], ch[2], d[3], False)
    down = y.conv(n3, ch[2], ch[2], 3, 2)
    n4 = y.c2f(y.node("Concat", [down, n4], "cat", axis=1), ch[2] + ch[3], ch[3], d[3], False)
    down = y.conv(n4, ch[3], ch[3], 3, 2)
    n5 = y.c2f(y.node("Concat", [down, p5], "cat", axis=1), ch[3] + ch[4], ch[4], d[3], False)
    c_box, c_cls = max(16, ch[2] // 4, 64), max(ch[2], min(classes, 100))
    boxes, scores = [], []
    for f, c, stride in ((n3, ch[2], 8), (n4, ch[3], 16), (n5, ch[4], 32)):
        hw = (image // stride, image // stride)
        bx, sc = y.decode(y.head(f, c, c_box, 64), y.head(f, c, c_cls, classes), hw, stride, classes, 16)
        boxes.append(bx)
        scores.append(sc)
    b.nodes += [
        b.helper.make_node("Concat", boxes, ["boxes"], axis=2),
        b.helper.make_node("Concat", scores, ["scores"], axis=2),
    ]
    anchors = sum((image // s) ** 2 for s in (8, 16, 32))
    tp = b.TensorProto
    return _model(
        b,
        "yolov8",
        [b.helper.make_tensor_value_info("image", tp.FLOAT, [1, 3, image, image])],
        [
            b.helper.make_tensor_value_info("boxes", tp.FLOAT, [1, 4, anchors]),
            b.helper.make_tensor_value_info("scores", tp.FLOAT, [1, classes, anchors]),
        ],
    )


def attention(seed: int = 0, tokens: int = 8, dim: int = 32, heads: int = 2):
    """One multi-head self-attention block for tests: input ``x`` (1, tokens, dim); Q, K and V projections
    (MatMul by constants), split into ``heads`` heads, scores ``Q @ K^T`` scaled by ``1/sqrt(dim/heads)``,
    softmax, context ``softmax @ V``, heads merged and an output projection: output ``y`` (1, tokens, dim)."""
    b = _Builder(seed)
    helper, tp = b.helper, b.TensorProto
    dh = dim // heads

    def node(op: str, inputs: list[str], **attrs) -> str:
        out = b.name(op.lower())
        b.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def proj(x: str) -> str:
        return node("MatMul", [x, b.init("w", b.rng.normal(0, np.sqrt(1.0 / dim), (dim, dim)))])

    shape = b.init("shape", np.array([1, tokens, heads, dh]), np.int64)
    q, k, v = (node("Reshape", [proj("x"), shape]) for _ in range(3))
    q, v = node("Transpose", [q], perm=[0, 2, 1, 3]), node("Transpose", [v], perm=[0, 2, 1, 3])
    kt = node("Transpose", [k], perm=[0, 2, 3, 1])
    scores = node("Mul", [node("MatMul", [q, kt]), b.init("scale", np.full(1, 1.0 / np.sqrt(dh)))])
    ctx = node("Transpose", [node("MatMul", [node("Softmax", [scores], axis=-1), v])], perm=[0, 2, 1, 3])
    merged = b.init("merged", np.array([1, tokens, dim]), np.int64)
    b.nodes.append(
        helper.make_node(
            "MatMul",
            [node("Reshape", [ctx, merged]), b.init("wo", b.rng.normal(0, np.sqrt(1.0 / dim), (dim, dim)))],
            ["y"],
        )
    )
    return _model(
        b,
        "attention",
        [helper.make_tensor_value_info("x", tp.FLOAT, [1, tokens, dim])],
        [helper.make_tensor_value_info("y", tp.FLOAT, [1, tokens, dim])],
    )


class _Encoder:
    """A pre-norm transformer encoder written as torch's opset-13 export writes it: Linear as MatMul + Add,
    LayerNorm decomposed (ReduceMean, Sub, Pow, ReduceMean, Add epsilon, Sqrt, Div, Mul, Add), GELU as
    ``x * 0.5 * (1 + erf(x / sqrt 2))``, attention as reshapes, transposes, two batched MatMuls and a
    Softmax over the last axis. Weights seeded (LeCun-normal), LayerNorm gains near 1."""

    def __init__(self, b: _Builder, tokens: int, dim: int, heads: int):
        self.b, self.tokens, self.dim, self.heads = b, tokens, dim, heads

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.b.name(op.lower())
        self.b.nodes.append(self.b.helper.make_node(op, inputs, [out], **attrs))
        return out

    def const(self, value: float) -> str:
        return self.b.init("c", np.array(value))

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        w = self.b.init("w", self.b.rng.normal(0, np.sqrt(1.0 / n_in), (n_in, n_out)))
        return self.node("Add", [self.node("MatMul", [x, w]), self.b.init("bias", self.b.rng.normal(0, 0.02, n_out))])

    def layer_norm(self, x: str) -> str:
        mean = self.node("ReduceMean", [x], axes=[-1], keepdims=1)
        d = self.node("Sub", [x, mean])
        var = self.node("ReduceMean", [self.node("Pow", [d, self.const(2.0)])], axes=[-1], keepdims=1)
        std = self.node("Sqrt", [self.node("Add", [var, self.const(1e-6)])])
        gain = self.b.init("gamma", self.b.rng.uniform(0.8, 1.2, self.dim))
        return self.node(
            "Add",
            [
                self.node("Mul", [self.node("Div", [d, std]), gain]),
                self.b.init("beta", self.b.rng.normal(0, 0.02, self.dim)),
            ],
        )

    def gelu(self, x: str) -> str:
        erf = self.node("Erf", [self.node("Div", [x, self.const(np.sqrt(2.0))])])
        return self.node("Mul", [self.node("Mul", [x, self.node("Add", [erf, self.const(1.0)])]), self.const(0.5)])

    def attention(self, x: str) -> str:
        t, d, h = self.tokens, self.dim, self.heads
        shape = self.b.init("shape", np.array([1, t, 3, h, d // h]), np.int64)
        qkv = self.node("Transpose", [self.node("Reshape", [self.linear(x, d, 3 * d), shape])], perm=[2, 0, 3, 1, 4])
        q, k, v = (self.node("Gather", [qkv, self.b.init("i", np.array(i), np.int64)], axis=0) for i in range(3))
        scores = self.node("MatMul", [q, self.node("Transpose", [k], perm=[0, 1, 3, 2])])
        probs = self.node("Softmax", [self.node("Div", [scores, self.const(np.sqrt(d // h))])], axis=-1)
        ctx = self.node("Transpose", [self.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        merged = self.node("Reshape", [ctx, self.b.init("merged", np.array([1, t, d]), np.int64)])
        return self.linear(merged, d, d)

    def layer(self, x: str, mlp: int) -> str:
        x = self.node("Add", [x, self.attention(self.layer_norm(x))])
        hidden = self.gelu(self.linear(self.layer_norm(x), self.dim, mlp))
        return self.node("Add", [x, self.linear(hidden, mlp, self.dim)])


def deit_tiny(seed: int = 0, image: int = 224, depth: int = 12, classes: int = 1000):
    """DeiT-Tiny (Touvron et al. 2021; dim 192, 3 heads of 64, MLP 768, 16x16 patches, class and distillation
    tokens) as an ``onnx.ModelProto`` (opset 13, :class:`_Encoder`'s form) with seeded weights: input
    ``image`` (1, 3, image, image), output ``logits`` (1, classes), the mean of the class token's head and
    the distillation token's (DeiT's inference)."""
    b = _Builder(seed)
    helper, tp = b.helper, b.TensorProto
    dim, patch = 192, 16
    tokens = (image // patch) ** 2 + 2
    enc = _Encoder(b, tokens, dim, 3)
    w = b.init("patch_w", b.rng.normal(0, np.sqrt(1.0 / (3 * patch * patch)), (dim, 3, patch, patch)))
    x = enc.node("Conv", ["image", w, b.init("patch_b", np.zeros(dim))], kernel_shape=[patch] * 2, strides=[patch] * 2)
    x = enc.node(
        "Transpose", [enc.node("Reshape", [x, b.init("flat", np.array([1, dim, -1]), np.int64)])], perm=[0, 2, 1]
    )
    extra = b.init("cls_dist", b.rng.normal(0, 0.02, (1, 2, dim)))
    x = enc.node(
        "Add", [enc.node("Concat", [extra, x], axis=1), b.init("pos", b.rng.normal(0, 0.02, (1, tokens, dim)))]
    )
    for _ in range(depth):
        x = enc.layer(x, 4 * dim)
    x = enc.layer_norm(x)
    heads = []
    for i in range(2):  # the class token's head and the distillation token's
        tok = enc.node("Gather", [x, b.init("i", np.array(i), np.int64)], axis=1)
        heads.append(enc.linear(tok, dim, classes))
    b.nodes.append(helper.make_node("Mul", [enc.node("Add", heads), enc.const(0.5)], ["logits"]))
    return _model(
        b,
        "deit_tiny",
        [helper.make_tensor_value_info("image", tp.FLOAT, [1, 3, image, image])],
        [helper.make_tensor_value_info("logits", tp.FLOAT, [1, classes])],
    )


def calibration_images(shape: Sequence[int], count: int, seed: int = 0) -> np.ndarray:
    """Seeded images (count, C, H, W): smooth random fields with per-image contrast, like natural images
    after normalization (a plain Gaussian would make every activation range the same)."""
    rng = np.random.default_rng(seed)
    c, h, w = shape[-3:]
    low = rng.normal(0, 1, (count, c, max(h // 4, 1), max(w // 4, 1)))
    up = np.repeat(np.repeat(low, 4, axis=2), 4, axis=3)[:, :, :h, :w]
    noise = rng.normal(0, 0.3, (count, c, h, w))
    return ((up + noise) * rng.uniform(0.5, 1.5, (count, 1, 1, 1))).astype(np.float32)


def quantize_qdq(
    model, calib: np.ndarray | Mapping[str, np.ndarray], input_name: str = "image", path: str | Path | None = None
):
    """The QDQ model onnxruntime's static quantizer writes after its recommended pre-processing (BatchNorm
    folded into the convolutions): per-channel symmetric int8 weights, symmetric int8 activations,
    MinMax calibration on ``calib``: samples stacked on the first axis, of the input ``input_name`` or, as a
    mapping, of every input by name (a model with several, such as token ids and a mask); returned as an
    ``onnx.ModelProto``."""
    import tempfile

    onnx = _helpers()[0]
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    stacked = dict(calib) if isinstance(calib, Mapping) else {input_name: calib}
    count = min(len(a) for a in stacked.values())

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter({k: a[i : i + 1] for k, a in stacked.items()} for i in range(count))

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, pre = Path(d) / "float.onnx", Path(d) / "pre.onnx"
        dst = Path(path) if path else Path(d) / "qdq.onnx"
        onnx.save(model, src)
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # folds BatchNorm into the convs
        quantize_static(
            str(pre),
            str(dst),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
        )
        return onnx.load(str(dst))


def qdq_output_scale(model, output: str = "logits") -> float:
    """The scale of a QDQ model's float ``output``: that of the DequantizeLinear writing it (one step of the
    output in real units, the unit agreement with onnxruntime is counted in)."""
    from onnx import numpy_helper

    init = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] == output and node.input[1] in init:
            return float(numpy_helper.to_array(init[node.input[1]]))
    raise ValueError(f"no DequantizeLinear with a constant scale writes {output!r}")


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cosine similarity of each row of ``a`` with the same row of ``b`` (logits per input)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine similarity of two whole outputs (any shapes of the same number of elements)."""
    return float(cosine_rows(np.reshape(a, (1, -1)), np.reshape(b, (1, -1)))[0])
