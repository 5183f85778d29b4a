"""Real architectures in plain torch, at reduced widths and resolutions so each exported ONNX file stays under
about 5 MB: the layouts of torchvision's ResNet-50, MobileNet-V3-Small, EfficientNet-B0, ShuffleNet-V2 and
SqueezeNet 1.1, a small U-Net, a YOLOv8-style detector, ViT-Tiny and a BERT-tiny encoder.

Each builder returns ``(module, example_inputs, description)``. Weights are seeded; batch-norm statistics are
set by :func:`settle` (a few forward passes in training mode on seeded data), so the activations of these
random-weight networks have the ranges of trained ones and int8 quantization is meaningful.

Needs torch (the ``models`` extra: ``pip install 'vdla[models]'``) and numpy; the seeded inputs are
``vdla.zoo.suite``'s, imported from the checkout.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # vdla's zoo (numpy only) from the checkout
from vdla.zoo.suite import suite_images, token_inputs  # noqa: E402


def conv_bn(c_in: int, c_out: int, k: int = 3, s: int = 1, groups: int = 1, act: nn.Module | None = None):
    """Conv (padding k//2, no bias), BatchNorm, then ``act`` (ReLU when None is not asked for explicitly)."""
    layers = [nn.Conv2d(c_in, c_out, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    if act is not None:
        layers.append(act)
    return nn.Sequential(*layers)


def make_divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


# ---------------------------------------------------------------------------------------------------------
# ResNet-50 (torchvision's layout: bottleneck blocks 3-4-6-3, stride on the 3x3)


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        c_out = width * 4
        self.conv1 = conv_bn(c_in, width, 1, act=nn.ReLU())
        self.conv2 = conv_bn(width, width, 3, stride, act=nn.ReLU())
        self.conv3 = conv_bn(width, c_out, 1)
        self.residual_bn = self.conv3[1]
        self.down = conv_bn(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else None

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        return F.relu(self.conv3(self.conv2(self.conv1(x))) + skip)


class ResNet50(nn.Module):
    def __init__(self, base: int = 12, classes: int = 100):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, base, 7, 2, act=nn.ReLU()), nn.MaxPool2d(3, 2, 1))
        blocks, c = [], base
        for i, n in enumerate((3, 4, 6, 3)):
            width = base * 2**i
            for j in range(n):
                blocks.append(Bottleneck(c, width, 2 if j == 0 and i > 0 else 1))
                c = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------------------------------------------------
# MobileNet-V3-Small (hardswish, squeeze-excite with hardsigmoid)


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int, gate: nn.Module, act: nn.Module):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
        self.act, self.gate = act, gate

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvertedResidual(nn.Module):
    """MobileNet-V3's block (and EfficientNet's MBConv): expand 1x1, depthwise kxk, squeeze-excite, project."""

    def __init__(self, c_in, expanded, c_out, k, stride, se: int | None, act, gate, se_act=nn.ReLU):
        super().__init__()
        layers = []
        if expanded != c_in:
            layers.append(conv_bn(c_in, expanded, 1, act=act()))
        layers.append(conv_bn(expanded, expanded, k, stride, groups=expanded, act=act()))
        if se:
            layers.append(SqueezeExcite(expanded, se, gate(), se_act()))
        layers.append(conv_bn(expanded, c_out, 1))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out
        if self.residual:
            self.residual_bn = layers[-1][1]

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3Small(nn.Module):
    # (kernel, expanded, out, squeeze-excite, hardswish, stride) as in torchvision's mobilenet_v3_small
    CONFIG = [
        (3, 16, 16, True, False, 2),
        (3, 72, 24, False, False, 2),
        (3, 88, 24, False, False, 1),
        (5, 96, 40, True, True, 2),
        (5, 240, 40, True, True, 1),
        (5, 240, 40, True, True, 1),
        (5, 120, 48, True, True, 1),
        (5, 144, 48, True, True, 1),
        (5, 288, 96, True, True, 2),
        (5, 576, 96, True, True, 1),
        (5, 576, 96, True, True, 1),
    ]

    def __init__(self, width: float = 0.75, classes: int = 100):
        super().__init__()
        c = make_divisible(16 * width)
        layers = [conv_bn(3, c, 3, 2, act=nn.Hardswish())]
        for k, exp, out, se, hs, s in self.CONFIG:
            exp, out = make_divisible(exp * width), make_divisible(out * width)
            act = nn.Hardswish if hs else nn.ReLU
            squeeze = make_divisible(exp // 4) if se else None
            layers.append(InvertedResidual(c, exp, out, k, s, squeeze, act, nn.Hardsigmoid))
            c = out
        last = make_divisible(576 * width)
        layers.append(conv_bn(c, last, 1, act=nn.Hardswish()))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(last, 1024), nn.Hardswish(), nn.Linear(1024, classes))

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---------------------------------------------------------------------------------------------------------
# EfficientNet-B0 (SiLU, MBConv with squeeze-excite and sigmoid)


class EfficientNetB0(nn.Module):
    # (expand ratio, kernel, stride, out channels, repeats) as in torchvision's efficientnet_b0
    CONFIG = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3)]
    CONFIG += [(6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]

    def __init__(self, width: float = 0.5, classes: int = 100):
        super().__init__()
        c = make_divisible(32 * width)
        layers = [conv_bn(3, c, 3, 2, act=nn.SiLU())]
        for ratio, k, s, out, n in self.CONFIG:
            out = make_divisible(out * width)
            for i in range(n):
                squeeze = max(1, c // 4)
                stride = s if i == 0 else 1
                layers.append(InvertedResidual(c, c * ratio, out, k, stride, squeeze, nn.SiLU, nn.Sigmoid, nn.SiLU))
                c = out
        last = make_divisible(1280 * width)
        layers.append(conv_bn(c, last, 1, act=nn.SiLU()))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(last, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---------------------------------------------------------------------------------------------------------
# ShuffleNet-V2 (channel split, channel shuffle)


def channel_shuffle(x, groups: int = 2):
    n, c, h, w = x.shape
    return x.reshape(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        half = c_out // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(
                conv_bn(c_in, c_in, 3, stride, groups=c_in), conv_bn(c_in, half, 1, act=nn.ReLU())
            )
        b_in = c_in if stride > 1 else half
        self.branch2 = nn.Sequential(
            conv_bn(b_in, half, 1, act=nn.ReLU()),
            conv_bn(half, half, 3, stride, groups=half),
            conv_bn(half, half, 1, act=nn.ReLU()),
        )
        if stride == 1:  # half the channels pass unchanged: the branch is the unit's residual (settle)
            self.residual_bn = self.branch2[-1][1]

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch2(b)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out)


class ShuffleNetV2(nn.Module):
    def __init__(self, stages=(48, 96, 192), classes: int = 100):  # torchvision's x0.5 widths
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 24, 3, 2, act=nn.ReLU()), nn.MaxPool2d(3, 2, 1))
        layers, c = [], 24
        for out, n in zip(stages, (4, 8, 4), strict=True):
            for i in range(n):
                layers.append(ShuffleUnit(c, out, 2 if i == 0 else 1))
                c = out
        self.stages = nn.Sequential(*layers)
        self.conv5 = conv_bn(c, 1024, 1, act=nn.ReLU())
        self.fc = nn.Linear(1024, classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.stem(x)))
        return self.fc(x.mean((2, 3)))


# ---------------------------------------------------------------------------------------------------------
# SqueezeNet 1.1 (fire modules: squeeze 1x1, expand 1x1 and 3x3 concatenated)


class Fire(nn.Module):
    def __init__(self, c_in: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Conv2d(c_in, squeeze, 1)
        self.e1, self.e3 = nn.Conv2d(squeeze, expand, 1), nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.squeeze(x))
        return torch.cat((F.relu(self.e1(s)), F.relu(self.e3(s))), 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes: int = 100):
        super().__init__()
        fires = [(64, 16, 64), (128, 16, 64), "pool", (128, 32, 128), (256, 32, 128), "pool"]
        fires += [(256, 48, 192), (384, 48, 192), (384, 64, 256), (512, 64, 256)]
        layers = [nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True)]
        for f in fires:
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True) if f == "pool" else Fire(*f))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Conv2d(512, classes, 1), nn.ReLU())

    def forward(self, x):
        return torch.flatten(F.adaptive_avg_pool2d(self.classifier(self.features(x)), 1), 1)


# ---------------------------------------------------------------------------------------------------------
# A small U-Net (ConvTranspose upsampling, concatenated skips)


class UNet(nn.Module):
    def __init__(self, base: int = 16, levels: int = 3, classes: int = 4):
        super().__init__()

        def double(c_in, c_out):
            return nn.Sequential(conv_bn(c_in, c_out, 3, act=nn.ReLU()), conv_bn(c_out, c_out, 3, act=nn.ReLU()))

        self.down, c = nn.ModuleList(), 3
        for i in range(levels):
            self.down.append(double(c, base * 2**i))
            c = base * 2**i
        self.bottom = double(c, c * 2)
        self.up, self.merge = nn.ModuleList(), nn.ModuleList()
        c *= 2
        for i in reversed(range(levels)):
            self.up.append(nn.ConvTranspose2d(c, base * 2**i, 2, 2))
            self.merge.append(double(base * 2**i * 2, base * 2**i))
            c = base * 2**i
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        skips = []
        for d in self.down:
            x = d(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips), strict=True):
            x = merge(torch.cat((up(x), skip), 1))
        return self.head(x)


# ---------------------------------------------------------------------------------------------------------
# A YOLOv8-style detector (SiLU, C2f with split and concat, SPPF, nearest upsample, a decoupled head with DFL
# and the box decode)


def conv_silu(c_in, c_out, k=3, s=1):
    return conv_bn(c_in, c_out, k, s, act=nn.SiLU())


class C2f(nn.Module):
    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool):
        super().__init__()
        self.c = c_out // 2
        self.cv1, self.cv2 = conv_silu(c_in, 2 * self.c, 1), conv_silu((2 + n) * self.c, c_out, 1)
        self.m = nn.ModuleList(nn.Sequential(conv_silu(self.c, self.c), conv_silu(self.c, self.c)) for _ in range(n))
        self.shortcut = shortcut
        if shortcut:
            self.residual_bns = [m[1][1] for m in self.m]

    def forward(self, x):
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]) if self.shortcut else m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.cv1, self.cv2 = conv_silu(c_in, c_in // 2, 1), conv_silu(c_in * 2, c_out, 1)

    def forward(self, x):
        x = self.cv1(x)
        y1 = F.max_pool2d(x, 5, 1, 2)
        y2 = F.max_pool2d(y1, 5, 1, 2)
        return self.cv2(torch.cat((x, y1, y2, F.max_pool2d(y2, 5, 1, 2)), 1))


class YoloDetector(nn.Module):
    """YOLOv8's backbone, neck and head at ``width`` (v8n is 0.25) with ``classes``; the output is the decoded
    boxes (x1, y1, x2, y2 in pixels) and class probabilities of every anchor of the three scales."""

    def __init__(self, width: float = 0.125, depth: float = 0.33, classes: int = 20, reg_max: int = 16):
        super().__init__()
        ch = [max(8, int(c * width)) for c in (64, 128, 256, 512, 1024)]
        d = [max(1, round(n * depth)) for n in (3, 6, 6, 3)]
        self.b0, self.b1 = conv_silu(3, ch[0], 3, 2), conv_silu(ch[0], ch[1], 3, 2)
        self.b2, self.b3 = C2f(ch[1], ch[1], d[0], True), conv_silu(ch[1], ch[2], 3, 2)
        self.b4, self.b5 = C2f(ch[2], ch[2], d[1], True), conv_silu(ch[2], ch[3], 3, 2)
        self.b6, self.b7 = C2f(ch[3], ch[3], d[2], True), conv_silu(ch[3], ch[4], 3, 2)
        self.b8, self.b9 = C2f(ch[4], ch[4], d[3], True), SPPF(ch[4], ch[4])
        self.h12, self.h15 = C2f(ch[4] + ch[3], ch[3], d[3], False), C2f(ch[3] + ch[2], ch[2], d[3], False)
        self.h16, self.h18 = conv_silu(ch[2], ch[2], 3, 2), C2f(ch[2] + ch[3], ch[3], d[3], False)
        self.h19, self.h21 = conv_silu(ch[3], ch[3], 3, 2), C2f(ch[3] + ch[4], ch[4], d[3], False)
        self.reg_max, self.classes = reg_max, classes
        c2, c3 = max(16, ch[2] // 4, reg_max * 4), max(ch[2], min(classes, 100))
        feats = (ch[2], ch[3], ch[4])
        self.box = nn.ModuleList(
            nn.Sequential(conv_silu(c, c2), conv_silu(c2, c2), nn.Conv2d(c2, 4 * reg_max, 1)) for c in feats
        )
        self.cls = nn.ModuleList(
            nn.Sequential(conv_silu(c, c3), conv_silu(c3, c3), nn.Conv2d(c3, classes, 1)) for c in feats
        )
        self.register_buffer("bins", torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1))

    def forward(self, x):
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        n4 = self.h12(torch.cat((F.interpolate(p5, scale_factor=2, mode="nearest"), p4), 1))
        n3 = self.h15(torch.cat((F.interpolate(n4, scale_factor=2, mode="nearest"), p3), 1))
        n4 = self.h18(torch.cat((self.h16(n3), n4), 1))
        n5 = self.h21(torch.cat((self.h19(n4), p5), 1))
        boxes, scores = [], []
        for i, f in enumerate((n3, n4, n5)):
            n, _, h, w = f.shape
            stride = x.shape[2] // h
            dist = self.box[i](f).view(n, 4, self.reg_max, h * w).softmax(2)  # DFL: the expected bin
            dist = (dist * self.bins.view(1, 1, self.reg_max, 1)).sum(2)
            gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            anchors = torch.stack((gx, gy)).view(1, 2, h * w).float() + 0.5
            lt, rb = dist[:, :2], dist[:, 2:]
            boxes.append(torch.cat((anchors - lt, anchors + rb), 1) * stride)
            scores.append(self.cls[i](f).view(n, self.classes, h * w).sigmoid())
        return torch.cat(boxes, 2), torch.cat(scores, 2)


# ---------------------------------------------------------------------------------------------------------
# ViT-Tiny and a BERT-tiny encoder (attention, LayerNorm, GELU)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)

    def attention(self, x, mask=None):
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        if mask is not None:
            scores = scores + mask
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(n, t, d))

    def forward(self, x, mask=None, pre_norm: bool = True):
        if pre_norm:  # ViT
            x = x + self.attention(self.ln1(x), mask)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        x = self.ln1(x + self.attention(x, mask))  # BERT: post-norm
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class ViTTiny(nn.Module):
    def __init__(self, image: int = 64, patch: int = 8, dim: int = 192, depth: int = 2, heads: int = 3, classes=100):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, 4 * dim) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), 1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0])


class BertTiny(nn.Module):
    """BERT-tiny's encoder (2 layers, hidden 128, 2 heads) with a reduced vocabulary; inputs are token ids and
    an attention mask (1 keep, 0 pad); the output is the pooled [CLS] vector."""

    def __init__(self, vocab: int = 4096, dim: int = 128, depth: int = 2, heads: int = 2, max_len: int = 64):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.types, self.norm = nn.Embedding(2, dim), nn.LayerNorm(dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, 4 * dim) for _ in range(depth))
        self.pool = nn.Linear(dim, dim)

    def forward(self, ids, mask):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.norm(self.tokens(ids) + self.positions(positions) + self.types(torch.zeros_like(ids)))
        bias = (1.0 - mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, bias, pre_norm=False)
        return torch.tanh(self.pool(x[:, 0]))


# ---------------------------------------------------------------------------------------------------------
# The suite


@torch.no_grad()
def settle(model: nn.Module, inputs: tuple, steps: int = 8, seed: int = 0, residual_gamma: float = 0.25) -> nn.Module:
    """Seeded batch-norm statistics, as training leaves them: the batch norm that ends each residual branch
    scaled by ``residual_gamma`` (trained residual networks keep their branches small, which is what
    torchvision's ``zero_init_residual`` starts from: a deep random network whose branches are full-size is
    chaotic, each small change of an early layer growing with depth), then ``steps`` forward passes in
    training mode over perturbed copies of ``inputs`` (momentum None: the running average of all of them),
    then evaluation mode."""
    if not any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        return model.eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
        for bn in [getattr(m, "residual_bn", None), *getattr(m, "residual_bns", [])]:
            if bn is not None:
                bn.weight.mul_(residual_gamma)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        model(*(x + 0.5 * torch.randn(x.shape, generator=g) if x.is_floating_point() else x for x in inputs))
    return model.eval()


def images(n: int, size: int, seed: int) -> torch.Tensor:
    """Seeded images (n, 3, size, size): ``vdla.zoo.suite.suite_images``, the distribution vdla calibrates and
    tests the suite on."""
    return torch.from_numpy(suite_images(n, size, seed))


def token_batch(n: int, length: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded token ids and an attention mask with padding at the end of each sequence
    (``vdla.zoo.suite.token_inputs``)."""
    ids, mask = token_inputs(n, length, vocab, seed)
    return torch.from_numpy(ids), torch.from_numpy(mask)


def _images(size: int):
    return lambda seed: (images(1, size, seed),)


SUITE = {  # name: (builder, example inputs from a seed, description)
    "resnet50": (lambda: ResNet50(base=12), _images(224), "ResNet-50 layout, base width 12 (of 64), 224x224"),
    "mobilenet_v3_small": (lambda: MobileNetV3Small(0.75), _images(224), "MobileNet-V3-Small, width 0.75, 224x224"),
    "efficientnet_b0": (lambda: EfficientNetB0(0.5), _images(224), "EfficientNet-B0, width 0.5, 224x224"),
    "shufflenet_v2": (ShuffleNetV2, _images(224), "ShuffleNet-V2 x0.5, 224x224"),
    "squeezenet": (SqueezeNet, _images(224), "SqueezeNet 1.1, 224x224"),
    "unet": (lambda: UNet(16, 3), _images(64), "U-Net, base 16, 3 levels, 64x64"),
    "yolo": (lambda: YoloDetector(0.125), _images(320), "YOLOv8-style detector, width 0.125 (v8n: 0.25), 320x320"),
    "vit_tiny": (ViTTiny, _images(64), "ViT-Tiny (dim 192, 3 heads), depth 2 (of 12), 64x64, 8x8 patches"),
    "bert_tiny": (
        BertTiny,
        lambda s: token_batch(1, 32, 4096, s),
        "BERT-tiny (2 layers, 128), vocabulary 4096, 32 tokens",
    ),
}
