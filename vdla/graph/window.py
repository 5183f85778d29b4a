"""2-D sliding-window geometry (convolution and pooling), with the project's one padding order.

Padding is always ``(top, bottom, left, right)`` inside vdla: the pairs numpy's ``np.pad`` takes per
axis, and the order of the LOAD instruction's pad fields (y_pad_0, y_pad_1, x_pad_0, x_pad_1).
ONNX's ``pads`` attribute, (top, left, bottom, right), is converted once by :func:`pads_from_onnx`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdla.graph.types import UnsupportedError

Pads = tuple[int, int, int, int]  # (top, bottom, left, right)


def _need(op: str, cond: bool, message: str) -> None:
    if not cond:
        raise UnsupportedError(op, message)


def pads_from_onnx(pads: tuple[int, ...] | list[int]) -> Pads:
    """ONNX 2-D ``pads`` (top, left, bottom, right) -> vdla's (top, bottom, left, right)."""
    top, left, bottom, right = (int(p) for p in pads)
    return top, bottom, left, right


def normalize_padding(
    padding: int | str | tuple[int, ...], kernel: tuple[int, int] = (1, 1), op: str = "conv2d"
) -> Pads:
    """Padding from an int, ``"same"`` (kernel // 2 on each side of an odd kernel), ``(ph, pw)`` or
    ``(top, bottom, left, right)``; every side a non-negative int."""
    kh, kw = kernel
    if padding == "same":
        _need(op, kh % 2 == 1 and kw % 2 == 1, f"padding='same' needs an odd kernel, got {kh}x{kw}")
        return kh // 2, kh // 2, kw // 2, kw // 2
    p = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
    if len(p) == 2:
        p = (p[0], p[0], p[1], p[1])
    ok = len(p) == 4 and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in p)
    _need(op, ok, f"padding must be an int, 'same', (ph, pw) or (top, bottom, left, right) >= 0, got {padding!r}")
    return tuple(int(i) for i in p)  # type: ignore[return-value]


def pair(op: str, name: str, v: int | tuple[int, ...], minimum: int = 1) -> tuple[int, int]:
    """An int or a pair of ints, each at least ``minimum``, as a pair."""
    t = (v, v) if isinstance(v, int) else tuple(v)
    _need(op, len(t) == 2 and all(isinstance(i, int) and i >= minimum for i in t), f"bad {name} {v!r}")
    return t[0], t[1]


@dataclass(frozen=True)
class Window:
    """2-D sliding-window geometry: kernel, stride, dilation (each (rows, cols)) and pads
    (top, bottom, left, right)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: Pads

    def pad_before(self, axis: int) -> int:
        """Padding before the first row (``axis`` 0: top) or column (``axis`` 1: left)."""
        return self.pads[2 * axis]

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        """Output rows and columns over an ``h`` x ``w`` input (floor division, as ONNX and PyTorch)."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        top, bottom, left, right = self.pads
        return (h + top + bottom - dh * (kh - 1) - 1) // sh + 1, (w + left + right - dw * (kw - 1) - 1) // sw + 1

    def valid_taps(self, o: int, size: int, axis: int) -> tuple[int, ...]:
        """Kernel taps along ``axis`` (0 rows, 1 columns) that fall inside an input of ``size`` for output
        index ``o`` (the others read padding)."""
        k, s, d, pad = self.kernel[axis], self.stride[axis], self.dilation[axis], self.pad_before(axis)
        return tuple(t for t in range(k) if 0 <= o * s + t * d - pad < size)

    def covers(self, h: int, w: int) -> bool:
        """Whether every output position's window holds at least one input element (what a pooling needs:
        a window entirely in the padding has no maximum and no average)."""
        oh, ow = self.out_size(h, w)
        return all(self.valid_taps(o, h, 0) for o in range(oh)) and all(self.valid_taps(o, w, 1) for o in range(ow))


def make_window(op: str, hw: tuple[int, int], kernel, stride, dilation, padding) -> tuple[Window, tuple[int, int]]:
    """Window from int-or-tuple attributes (padding as :func:`normalize_padding` takes it); checks the
    window fits the input and returns it with the output size."""
    k = pair(op, "kernel", kernel)
    p = normalize_padding(padding, k, op)
    win = Window(k, pair(op, "stride", stride), pair(op, "dilation", dilation), p)
    oh, ow = win.out_size(*hw)
    _need(op, oh >= 1 and ow >= 1, f"window {win.kernel} with padding {p} does not fit input {hw}")
    return win, (oh, ow)
