"""What the compiler is asked to compute: a conv2d layer shape, its fused epilogue and what else is fused into it
(:class:`Fusions`), the windows of the band tilings (pooling, depthwise) and squeeze-excite's channel scale.

Each is validated on construction; anything the accelerator cannot express raises
:class:`CompileError` naming the limit that was hit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vdla.compiler.transfer import MAX_STRIDE
from vdla.errors import VdlaError
from vdla.graph.epilogue import Epilogue
from vdla.graph.types import UnsupportedError
from vdla.graph.window import Window, make_window, normalize_padding, pair
from vdla.isa.arith import INT8_MAX, INT8_MIN, MAX_SHIFT, MUL_MAX_SHIFT
from vdla.isa.instructions import MEM_FIELDS


class CompileError(VdlaError, ValueError):
    """A layer the accelerator cannot run as requested; the message names the limit and what would fit."""


def refusal(check: Callable[[], None]) -> str | None:
    """What ``check`` raises (a CompileError or UnsupportedError naming the limit) as a string, or None: the
    form of the ``*_refusal`` functions, which say why a layer cannot run a way instead of raising."""
    try:
        check()
    except (CompileError, UnsupportedError) as e:
        return str(e)
    return None


MAX_PAD = (1 << dict((n, w) for n, _, w in MEM_FIELDS)["y_pad_0"]) - 1  # 4-bit LOAD pad fields
CLIP_MIN, CLIP_MAX = INT8_MIN, INT8_MAX


def mirror_relu(clip) -> bool | None:
    """How the OUT mirror's requantization (EPI ``req``) applies the clamp ``clip``: False for int8's bounds, True
    for ReLU's [0, 127] (EPI ``relu``), None for any other bounds (a CLIP pass or the activation table must)."""
    return {(CLIP_MIN, CLIP_MAX): False, (0, CLIP_MAX): True}.get(tuple(int(v) for v in clip))


def _pair(name: str, v: int | tuple[int, int]) -> tuple[int, int]:
    t = (v, v) if isinstance(v, int) else tuple(v)
    if len(t) != 2 or not all(isinstance(i, int) for i in t):
        raise CompileError(f"{name} must be an int or a pair of ints, got {v!r}")
    return t[0], t[1]


@dataclass(frozen=True)
class Conv2dSpec:
    """A 2-D convolution on NCHW int8 activations and OIHW int8 weights.

    ``pad`` is (top, bottom, left, right). Dilation and groups are accepted only to be rejected
    with a clear message: the accelerator's addressing supports neither.
    """

    n: int
    c: int
    h: int
    w: int
    oc: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)

    @classmethod
    def make(
        cls,
        input_shape: tuple[int, int, int, int],
        oc: int,
        kernel: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | str | tuple[int, ...] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
    ) -> Conv2dSpec:
        """Build from PyTorch-style arguments; ``padding="same"`` pads by kernel // 2 (odd kernels)."""
        if _pair("dilation", dilation) != (1, 1):
            raise CompileError(
                f"dilation {dilation} is not supported: the accelerator's LOAD and GEMM "
                "addressing only expresses dilation 1"
            )
        if groups != 1:
            raise CompileError(
                f"groups={groups} is not supported: the GEMM intrinsic reduces over all "
                "input channels; only groups=1 fits"
            )
        if len(input_shape) != 4:
            raise CompileError(f"input shape must be NCHW (4 dims), got {input_shape}")
        kh, kw = _pair("kernel", kernel)
        sh, sw = _pair("stride", stride)
        try:
            pad = normalize_padding(padding, (kh, kw))
        except UnsupportedError as e:
            raise CompileError(str(e)) from e
        n, c, h, w = (int(v) for v in input_shape)
        return cls(n, c, h, w, int(oc), kh, kw, sh, sw, tuple(int(v) for v in pad))

    def __post_init__(self) -> None:
        for name in ("n", "c", "h", "w", "oc", "kh", "kw", "sh", "sw"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise CompileError(f"conv2d {name} must be a positive integer, got {v!r}")
        top, bottom, left, right = self.pad
        if min(self.pad) < 0:
            raise CompileError(f"padding {self.pad} must be non-negative")
        if max(self.pad) > MAX_PAD:
            raise CompileError(f"padding {self.pad} exceeds the 4-bit LOAD pad fields: at most {MAX_PAD} per side fits")
        if max(top, bottom) >= self.kh or max(left, right) >= self.kw:
            raise CompileError(
                f"padding {self.pad} must be smaller than the kernel {self.kh}x{self.kw} on "
                f"each side (outputs that see only padding are not supported): at most "
                f"{self.kh - 1} rows and {self.kw - 1} columns fit"
            )
        if self.oh < 1 or self.ow < 1:
            raise CompileError(f"kernel {self.kh}x{self.kw} does not fit the padded {self.h}x{self.w} input")

    @property
    def window(self) -> Window:
        """The layer's window geometry (dilation 1)."""
        return Window((self.kh, self.kw), (self.sh, self.sw), (1, 1), self.pad)

    @property
    def oh(self) -> int:
        return self.window.out_size(self.h, self.w)[0]

    @property
    def ow(self) -> int:
        return self.window.out_size(self.h, self.w)[1]

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.oc, self.oh, self.ow)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.oc, self.c, self.kh, self.kw)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the unpadded layer."""
        return self.n * self.oc * self.oh * self.ow * self.c * self.kh * self.kw

    def key(self) -> str:
        """A stable text key of the shape (schedule cache)."""
        return (
            f"n{self.n}c{self.c}h{self.h}w{self.w}o{self.oc}k{self.kh}x{self.kw}"
            f"s{self.sh}x{self.sw}p{'_'.join(map(str, self.pad))}"
        )


IMM_MIN, IMM_MAX = -(1 << 15), (1 << 15) - 1  # the ALU's 16-bit immediate


def multiplier_kind(multiplier: int | np.ndarray, shift: int = 0) -> str:
    """How a multiplier is applied: "none" (1), "imm" (a scalar fitting the immediate, with no shift: the
    immediate MUL cannot round its product) or "row"."""
    m = np.asarray(multiplier)
    if m.dtype.kind not in "iu":
        raise CompileError(f"the multiplier must be integer, got dtype {m.dtype}")
    if m.size and (m.min() < np.iinfo(np.int32).min or m.max() > np.iinfo(np.int32).max):
        raise CompileError("the multiplier must fit in int32 (the ALU multiplies 32-bit accumulators)")
    if m.ndim == 0:
        v = int(m)
        return "none" if v == 1 else "imm" if IMM_MIN <= v <= IMM_MAX and not shift else "row"
    return "row"


TABLE = "table"  # the tensor name of a layer's activation table (a constant: LUT_ENTRIES int8 entries)
ROWS = "rows"  # the tensor name of a layer's per-channel accumulator rows (bias, multipliers), in their ACC order
MASK = "mask"  # the tensor name of a layer's row-mask blocks: diagonal 0/1 WGT elements, a channel block per masked row


@dataclass(frozen=True)
class EpilogueSpec:
    """The structure of a layer's epilogue (:class:`vdla.graph.epilogue.Epilogue`) as the compiler runs it
    on the ALU after the GEMMs; the constants stay in the epilogue. Derived by :meth:`of`, never written
    twice.

    out = clip(rshr((acc + bias) * multiplier, shift) + residual, lo, hi), the product exact (64 bits) and
    rounded once (:func:`vdla.isa.arith.mul_shift`). ``multiplier`` is "none", "imm" (one integer fitting
    the 16-bit immediate, with no shift) or "row" (per channel, or a scalar that needs a shift or does not
    fit the immediate, held in the accumulator buffer like the bias; its MUL carries the shift).

    ``pool``: a max pool over the layer's output fused into its tiles (:mod:`vdla.compiler.fused_pool`): the
    window maximum is taken on the accumulators, before the multiplier, shift and clamp, which is exact because
    they are non-decreasing (the multipliers' values are checked by
    :func:`~vdla.compiler.epilogue_passes.pool_commutes`); there is then no residual.

    ``post``: the epilogue of a residual add after the layer's activation table (a layer of its own otherwise:
    a table is the last stage of an epilogue): the int8 results, tabled in OUT, read back by a GEMM against the
    identity block (EPI ``src_out``) as the add's input (``post_res``: as its residual), its other operand
    loaded from DRAM, then ``post`` applied and the result stored.

    ``gate``: a channel scale of the layer's input fused before its GEMMs (squeeze-excite's product,
    :class:`ChannelScaleSpec`): each input pixel times its channel's int8 gate and the
    scale's multiplier, rounded once by ``shift`` (:func:`vdla.isa.arith.mul_shift`) and clamped to (lo, hi); an
    identity GEMM copies each step's input window into ACC with that product in the OUT mirror (EPI ``mul``), and
    the layer's GEMMs read it from OUT (EPI ``src_out``).

    ``mask``: the output rows where some channels' elements are then zeroed (the epilogue's ``row_mask``: a value
    paired with a phase, :mod:`vdla.graph.rowpair`): GEMMs read those rows' int8 results from OUT against diagonal
    0/1 blocks (EPI ``src_out``) into a scratch row and back again, the masked lanes zero.

    ``rescale`` = (lo, hi, shift_y, shift_k, frac) is the residual add of a quantized model, which rounds
    the layer's output before the add and the sum at another scale:
    out = clip(rshr(mul(clip(rshr((acc + bias) * m, shift), lo, hi), m_y, shift_y)
    + mul(residual, m_k, shift_k), frac), bounds), the multipliers ``m_y``/``m_k`` held as rows.
    """

    bias: bool = False
    multiplier: str = "none"
    shift: int = 0
    clip: tuple[int, int] = (CLIP_MIN, CLIP_MAX)
    residual: str | None = None  # None, "int8" or "int32"
    rescale: tuple[int, int, int, int, int] | None = None  # (lo, hi, shift_y, shift_k, frac)
    pool: Window | None = None  # a max pool fused into the tiles, taken before the requantization
    table: bool = False  # the OUT mirror looks every int8 result up in the layer's activation table (EPI lut)
    post: EpilogueSpec | None = None  # a residual add after the table, read back from OUT
    post_res: bool = False  # the layer's results are the post add's residual (else its input)
    gate: tuple[int, int, int] | None = None  # (shift, lo, hi) of a channel scale of the input (squeeze-excite's)
    mask: tuple[int, ...] = ()  # output rows with channels zeroed (Epilogue.row_mask), ascending

    @classmethod
    def of(cls, ep: Epilogue, fusions: Fusions | None = None) -> EpilogueSpec:
        """The structure of ``ep`` with what ``fusions`` fuses into it: the pool, the post add and the gate. ``ep``
        and the post add's epilogue as the compiler runs them (their multipliers as it applies them:
        :func:`vdla.compiler.epilogue_passes.normalize`)."""
        f = fusions or Fusions()
        return cls(
            bias=ep.bias is not None,
            multiplier=multiplier_kind(ep.multiplier, ep.shift),
            shift=int(ep.shift),
            clip=tuple(int(v) for v in ep.clip),
            residual=ep.residual,
            rescale=None if ep.rescale is None else tuple(int(v) for v in ep.rescale.as_tuple()),
            pool=f.pool,
            table=ep.table is not None,
            post=None if f.post is None else cls.of(f.post),
            post_res=f.post_res,
            gate=None if f.gate is None else (f.gate.shift, *f.gate.clip),
            mask=() if ep.row_mask is None else tuple(int(y) for y in np.flatnonzero(np.any(ep.row_mask, axis=0))),
        )

    def __post_init__(self) -> None:
        if self.multiplier not in ("none", "imm", "row"):
            raise CompileError(f"multiplier kind must be none, imm or row, got {self.multiplier!r}")
        limit = MUL_MAX_SHIFT if self.multiplier == "row" else MAX_SHIFT
        if not isinstance(self.shift, int) or not 0 <= self.shift <= limit:
            raise CompileError(f"shift {self.shift!r} outside the range [0, {limit}] of a {self.multiplier} multiplier")
        if self.multiplier == "imm" and self.shift:
            raise CompileError("an immediate multiplier takes no shift (a shifted product needs a row multiplier)")
        lo, hi = self.clip
        if not CLIP_MIN <= lo <= hi <= CLIP_MAX:
            raise CompileError(
                f"clip range {self.clip} must satisfy {CLIP_MIN} <= lo <= hi <= {CLIP_MAX}: the STORE writes int8"
            )
        if self.residual not in (None, "int8", "int32"):
            raise CompileError(f"residual dtype must be int8 or int32, got {self.residual!r}")
        if self.rescale is not None:
            self._check_rescale()
        if self.gate is not None:
            shift, lo, hi = self.gate
            if not 0 <= shift <= MUL_MAX_SHIFT or mirror_relu((lo, hi)) is None:
                raise CompileError(
                    f"a gated input's shift {shift} must lie in [0, {MUL_MAX_SHIFT}] and its clamp {(lo, hi)} be "
                    f"int8 or [0, {CLIP_MAX}] (the OUT mirror's)"
                )
        if self.mask and (self.pool is not None or self.post is not None):
            raise CompileError("a row mask zeroes the layer's own output rows: it takes no fused pool or add after it")
        if self.pool is not None and (self.residual or self.multiplier == "imm"):
            what = f"a {self.residual} residual" if self.residual else "an immediate multiplier (its product wraps)"
            raise CompileError(f"a max pool fused before the requantization needs it non-decreasing: {what} is not")

    def _check_rescale(self) -> None:
        lo, hi, shift_y, shift_k, frac = self.rescale
        if self.residual is None or self.multiplier != "row":
            raise CompileError("a rescaled residual needs a residual input and a row multiplier")
        if not CLIP_MIN <= lo <= hi <= CLIP_MAX:
            raise CompileError(f"the layer's own clamp {(lo, hi)} must lie within int8")
        for name, v, limit in (("shift_y", shift_y, MUL_MAX_SHIFT), ("shift_k", shift_k, MUL_MAX_SHIFT)):
            if not 0 <= v <= limit:
                raise CompileError(f"rescale {name}={v} outside [0, {limit}]")
        if not 0 <= frac <= MAX_SHIFT:
            raise CompileError(f"rescale frac={frac} outside the RSHR/EPI shift range [0, {MAX_SHIFT}]")

    @property
    def bounds(self) -> tuple[int, int]:
        """The final clamp (ReLU folded in as ``lo >= 0``)."""
        return self.clip

    def key(self) -> str:
        """A stable text key of the epilogue's structure (schedule cache)."""
        lo, hi = self.bounds
        rescale = "x" + "_".join(map(str, self.rescale)) if self.rescale else ""
        pool = ""
        if self.pool is not None:
            (kh, kw), (sh, sw), pads = self.pool.kernel, self.pool.stride, self.pool.pads
            pool = f"p{kh}x{kw}s{sh}x{sw}p{'_'.join(map(str, pads))}"
        post = f"+{'r' * self.post_res}{self.post.key()}" if self.post is not None else ""
        gate = "g" + "_".join(map(str, self.gate)) if self.gate else ""
        mask = "k" + "_".join(map(str, self.mask)) if self.mask else ""
        head = f"b{int(self.bias)}m{self.multiplier}s{self.shift}c{lo}_{hi}r{self.residual or '-'}"
        return f"{head}{rescale}{pool}{post}{gate}{mask}"


@dataclass(frozen=True)
class InputUpsample:
    """Input-channel blocks ``[first, first + blocks)`` of a 1x1 convolution of stride 1 (a concatenation part)
    are a nearest upsampling by ``factor`` (rows, columns) of another tensor, the ``up`` role: ``blocks`` channel
    blocks of the layer's rows / ``factor[0]`` x columns / ``factor[1]`` pixels. The layer reads that tensor, each
    pixel for ``factor[0] x factor[1]`` output pixels, so the upsampled copy is never stored.

    Invariant: the layer's rows and columns are multiples of the factor, and so are its tiles'."""

    first: int
    blocks: int
    factor: tuple[int, int]

    def covers(self, block: int) -> bool:
        """Whether input-channel block ``block`` is one of the upsampled ones."""
        return self.first <= block < self.first + self.blocks

    def key(self) -> str:
        """A stable text key (schedule cache)."""
        return f"up{self.first}_{self.blocks}x{self.factor[0]}_{self.factor[1]}"


@dataclass(frozen=True)
class OutputView:
    """Where a layer's output pixels sit in a larger output tensor: output pixel ``(y, x)`` is pixel
    ``(offset_y + y*step_y, offset_x + x*step_x)`` of a tensor of ``full_hw`` pixels per channel block (one
    phase of an interleave: a transposed convolution's stride phases store straight into the result), and
    its channel block ``b`` is block ``blocks[0] + b`` of a tensor of ``blocks[1]`` blocks (one part of a
    channel concatenation; ``blocks[1]`` 0: the layer's own channels). ``copies``: further offsets at which the
    same pixels are stored again (the phases of a nearest upsampling, which all hold the same values: one layer
    computes them once and stores them into every phase's slots).

    Invariant: the view, at its offset and at every copy's, is inside the full tensor for the layer's
    ``out_hw`` and channel blocks (:meth:`check`)."""

    full_hw: tuple[int, int]
    offset: tuple[int, int] = (0, 0)
    step: tuple[int, int] = (1, 1)
    blocks: tuple[int, int] = (0, 0)
    copies: tuple[tuple[int, int], ...] = ()

    @property
    def offsets(self) -> tuple[tuple[int, int], ...]:
        """Every offset the layer's pixels are stored at: its own, then the copies'."""
        return (self.offset, *self.copies)

    @property
    def row_pairs(self) -> tuple[int, ...]:
        """The row offsets at which each pixel is stored twice side by side (column step 2, every row offset at
        columns 0 and 1: a nearest upsampling by 2 along the columns), in order; empty for any other view. The
        layer may then write each pixel twice into its accumulators and store whole rows."""
        rows = sorted({y for y, _ in self.offsets})
        pairs = {(y, x) for y in rows for x in (0, 1)}
        doubled = self.step[1] == 2 and len(self.offsets) == len(pairs) and set(self.offsets) == pairs
        return tuple(rows) if doubled else ()

    def out_blocks(self, own: int) -> int:
        """Channel blocks of the full tensor, for a layer of ``own`` blocks."""
        return self.blocks[1] or own

    def check(self, out_hw: tuple[int, int], epi: EpilogueSpec, own_blocks: int | None = None) -> None:
        """Raise CompileError unless the view holds an ``out_hw`` output of ``own_blocks`` channel blocks and the
        epilogue can store into it: no fused pool, and a residual (read in the layer's own shape) only when the
        view selects channel blocks alone."""
        for offset in self.offsets:
            for n, full, off, st in zip(out_hw, self.full_hw, offset, self.step, strict=True):
                if not (st >= 1 and 0 <= off < st and off + (n - 1) * st < full):
                    raise CompileError(f"output view {self} does not hold a {out_hw[0]}x{out_hw[1]} output")
        first, total = self.blocks
        if total and own_blocks is not None and not (0 <= first and first + own_blocks <= total):
            raise CompileError(f"output view {self} does not hold {own_blocks} channel blocks")
        if epi.pool is not None:
            raise CompileError("an output view takes no fused pool")
        if epi.residual and (self.full_hw, self.offset, self.step) != (tuple(out_hw), (0, 0), (1, 1)):
            raise CompileError(f"output view {self} takes a residual only when it selects channel blocks alone")

    def key(self) -> str:
        """A stable text key (schedule cache)."""
        (h, w), (oy, ox), (sy, sx) = self.full_hw, self.offset, self.step
        key = f"view{h}x{w}o{oy}_{ox}s{sy}_{sx}" + "".join(f"c{y}_{x}" for y, x in self.copies)
        return key if not self.blocks[1] else f"{key}b{self.blocks[0]}of{self.blocks[1]}"


@dataclass(frozen=True)
class WindowSpec:
    """An int8 NCHW tensor ``shape`` under a sliding ``window`` whose tiles take every column (pooling,
    depthwise): the input checks and the output geometry those compilers share. Frozen: a spec is part of its
    program's cache key."""

    shape: tuple[int, int, int, int]
    window: Window

    @staticmethod
    def window_of(what: str, op: str, shape, kernel, stride, padding) -> Window:
        """The checked window of an ``op`` over NCHW ``shape``; raises CompileError naming the limit."""
        if len(shape) != 4 or min(shape) < 1:
            raise CompileError(f"{what} input must be NCHW with every dimension >= 1, got {shape}")
        try:
            return make_window(op, tuple(shape[2:]), kernel, stride, 1, padding)[0]
        except UnsupportedError as e:
            raise CompileError(str(e)) from e

    def check_loads(self, what: str) -> None:
        """Raise CompileError unless the LOADs of a band of whole rows can read the input: padding within the pad
        fields, a row within the x_stride field."""
        if max(self.window.pads) > MAX_PAD:
            raise CompileError(f"{what} padding {self.window.pads} exceeds the LOAD pad fields: at most {MAX_PAD}")
        if self.shape[3] > MAX_STRIDE:
            raise CompileError(f"input rows of {self.shape[3]} pixels exceed the LOAD x_stride: {MAX_STRIDE} fit")

    @property
    def out_hw(self) -> tuple[int, int]:
        return self.window.out_size(*self.shape[2:])

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (*self.shape[:2], *self.out_hw)


def check_requantization(multiplier: int, shift: int, clip: tuple[int, int]) -> None:
    """Raise CompileError unless an ALU layer's requantization fits: ``clip`` within int8, ``multiplier`` within
    int32 and ``shift`` in [0, 63] (the MUL's exact product rounded once, :func:`vdla.isa.arith.mul_shift`)."""
    if not CLIP_MIN <= clip[0] <= clip[1] <= CLIP_MAX:
        raise CompileError(f"clip bounds {clip} must lie within int8")
    if not (-(1 << 31) <= multiplier < 1 << 31 and 0 <= shift <= 63):
        raise CompileError(f"multiplier {multiplier} must fit int32 and shift {shift} lie in [0, 63]")


@dataclass(frozen=True)
class ChannelScaleSpec(WindowSpec):
    """Squeeze-excite's channel product: each pixel of an int8 NCHW tensor ``shape`` times its channel's entry of
    an int8 gate of shape (N, C, 1, 1) (:attr:`gate_shape`), times ``multiplier``, rounded right by ``shift`` once
    (:func:`vdla.isa.arith.mul_shift`) and clamped to ``clip``. Its ``window`` is 1x1: each output pixel reads its
    own input pixel, in the band tiling the pooling shares. Frozen: a spec is the cache key of its program.

    Invariant: ``multiplier`` times any int8 gate fits int32, so the gate rows times the multiplier are exact."""

    multiplier: int = 1
    shift: int = 0
    clip: tuple[int, int] = (CLIP_MIN, CLIP_MAX)

    @classmethod
    def make(cls, shape, multiplier: int, shift: int, clip=(CLIP_MIN, CLIP_MAX)) -> ChannelScaleSpec:
        """The checked channel scale of an NCHW tensor ``shape``; raises CompileError naming the limit."""
        window = cls.window_of("channel scale", "channel_scale", shape, 1, 1, 0)
        return cls(tuple(int(d) for d in shape), window, int(multiplier), int(shift), tuple(int(v) for v in clip))

    def __post_init__(self) -> None:
        if self.window.kernel != (1, 1) or self.window.stride != (1, 1) or any(self.window.pads):
            raise CompileError(f"a channel scale reads single pixels, got a {self.window.kernel} window")
        self.check_loads("channel scale")
        check_requantization(self.multiplier, self.shift, self.clip)
        if abs(self.multiplier) * -INT8_MIN >= 1 << 31:
            raise CompileError(
                f"a channel scale's multiplier {self.multiplier} times an int8 gate must fit int32: "
                f"at most {((1 << 31) - 1) // -INT8_MIN} (choose_multipliers with a bound of {-INT8_MIN})"
            )

    @property
    def gate_shape(self) -> tuple[int, int, int, int]:
        """The shape of the per-channel int8 gate the scale multiplies by: (N, C, 1, 1)."""
        return (*self.shape[:2], 1, 1)

    def describe(self) -> str:
        return f"channel scale {list(self.shape)}"

    def key(self) -> str:
        """A stable text key of the scale (schedule cache)."""
        (lo, hi) = self.clip
        return f"scale:{list(self.shape)}:m{self.multiplier}s{self.shift}c{lo}_{hi}"


@dataclass(frozen=True, eq=False)
class Fusions:
    """What is fused into a conv2d layer besides its epilogue (:func:`vdla.compiler.compile_conv2d`): work that would
    otherwise be a layer of its own, reading or writing DRAM, done on chip by this one. Frozen; compared by
    identity (``post`` holds an epilogue's arrays).

    ``pool``: a max pool of the output fused into the tiles (:mod:`vdla.compiler.fused_pool`; :meth:`max_pool`
    builds it from a pooling's arguments): the layer stores the pooled tensor.
    ``post``: the epilogue of a residual add after the layer's activation table, applied to the tabled results on
    chip (:attr:`EpilogueSpec.post`): the output is ``post`` with the layer's results as its input (``post_res``:
    as its residual) and the int8 residual given to ``run`` as the other operand.
    ``gate``: a channel scale of the input (squeeze-excite's product) fused before the GEMMs: the layer computes
    conv2d(channel_scale_oracle(x, gate, s), weights) for the int8 gate ``s`` given to ``run``.
    ``up``: input-channel blocks the layer reads from the tensor they are a nearest upsampling of
    (:class:`InputUpsample`; that tensor given to ``run`` as ``up``).
    ``copy_view``: the output is also stored through this view into a second tensor (the run returns it whole as
    ``extra["copy"]``, the channels of all its blocks, lanes the layer does not write zero).

    The epilogue's structure takes the pool, post add and gate from here (:meth:`EpilogueSpec.of`), the
    lowering the views. Invariant: ``post_res`` only with ``post``."""

    pool: Window | None = None
    post: Epilogue | None = None
    post_res: bool = False
    gate: ChannelScaleSpec | None = None
    up: InputUpsample | None = None
    copy_view: OutputView | None = None

    def __post_init__(self) -> None:
        if self.post_res and self.post is None:
            raise CompileError("post_res makes the layer's results the post add's residual: it needs a post add")

    @classmethod
    def max_pool(cls, kernel, stride=None, padding=0) -> Fusions:
        """A max pool of ``kernel``, ``stride`` (default: the kernel) and ``padding`` (as a pooling takes them)
        fused into the tiles; whether it fits the layer's output is checked when the layer compiles."""
        try:
            k = pair("max_pool2d", "kernel", kernel)
            pads = normalize_padding(padding, k, "max_pool2d")
            window = Window(k, pair("max_pool2d", "stride", stride or kernel), (1, 1), pads)
        except UnsupportedError as e:
            raise CompileError(f"a fused max pool: {e}") from e
        return cls(pool=window)
