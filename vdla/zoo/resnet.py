"""The twelve distinct convolution layers of ResNet-18 (C1..C12 of the TVM/VDLA papers) with
deterministic random int8 data and a realistic epilogue: bias, rounding right shift, ReLU, int8 clip.

``layer_specs`` gives a model's layer table (``MODELS``: name -> layer geometry, "same" padding) and
``layer_case`` one layer's seeded data: the same name, spec and seed always give the same arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from vdla.compiler.conv2d import compile_conv2d
from vdla.compiler.spec import Conv2dSpec
from vdla.errors import VdlaError
from vdla.graph.epilogue import Epilogue
from vdla.graph.oracle import conv2d_oracle
from vdla.isa.arith import INT8_MAX


class ZooError(VdlaError, ValueError):
    """Something asked of the zoo that it does not have (a model, a layer)."""


# name: (H=W, in channels, out channels, kernel, stride), "same" padding
RESNET18 = {
    "C1": (224, 3, 64, 7, 2),
    "C2": (56, 64, 64, 3, 1),
    "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2),
    "C5": (56, 64, 128, 1, 2),
    "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2),
    "C8": (28, 128, 256, 1, 2),
    "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2),
    "C11": (14, 256, 512, 1, 2),
    "C12": (7, 512, 512, 3, 1),
}
MODELS = {"resnet18": RESNET18}


@dataclass
class LayerCase:
    """One layer with its data: input, weights and epilogue constants."""

    name: str
    spec: Conv2dSpec
    x: np.ndarray
    w: np.ndarray
    bias: np.ndarray
    shift: int

    @property
    def epilogue(self) -> Epilogue:
        """The layer's epilogue: bias, rounding shift, ReLU."""
        return Epilogue(bias=self.bias, shift=self.shift, clip=(0, INT8_MAX))

    def compile(self, config, **kwargs):
        """The layer compiled with its geometry and epilogue (``kwargs``: vthreads, cache, ...)."""
        sp = self.spec
        shape = (sp.n, sp.c, sp.h, sp.w)
        return compile_conv2d(
            shape, self.w, stride=(sp.sh, sp.sw), padding=sp.pad, epilogue=self.epilogue, config=config, **kwargs
        )

    def oracle(self, bounds: tuple[int, int] = (0, INT8_MAX)) -> np.ndarray:
        """The numpy result of the layer on its input (ReLU's bounds by default)."""
        return conv2d_oracle(self.x, self.w, self.spec, replace(self.epilogue, clip=bounds))


def layer_specs(model: str = "resnet18", batch: int = 1) -> dict[str, Conv2dSpec]:
    """The model's conv layers by name, with "same" padding."""
    if model not in MODELS:
        raise ZooError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    return {
        name: Conv2dSpec.make((batch, ic, hw, hw), oc, k, s, "same")
        for name, (hw, ic, oc, k, s) in MODELS[model].items()
    }


def layer_case(name: str, spec: Conv2dSpec, seed: int = 0) -> LayerCase:
    """Random int8 input and weights; bias and shift scaled so that outputs spread over the int8 range."""
    rng = np.random.default_rng([seed, int(name.lstrip("C"))])
    x = rng.integers(-128, 128, (spec.n, spec.c, spec.h, spec.w), dtype=np.int8)
    w = rng.integers(-128, 128, spec.weight_shape, dtype=np.int8)
    spread = 128 * 128 / 3 * np.sqrt(spec.c * spec.kh * spec.kw)  # std of a sum of products of uniform int8
    shift = max(int(np.round(np.log2(spread / 64))), 1)
    bias = rng.integers(-int(spread), int(spread) + 1, spec.oc).astype(np.int32)
    return LayerCase(name, spec, x, w, bias, shift)
