"""A conv2d schedule: the point of the search space the compiler lowers a layer with.

A :class:`Schedule` fixes the tile (output-channel blocks ``toc``, output rows ``toh``, output
columns ``tow``, and for a 1x1 layer over 1x1 images, batch groups ``tn``: a dense layer's tokens), the
input-channel blocks reduced per step (``tic``), the number of virtual threads and the tile order. Whether it
fits the buffers is :class:`~vdla.compiler.conv_lowering.ConvLowering`'s question; the blocks it lowers to are
built by :mod:`vdla.compiler.conv_emit`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vdla.compiler.spec import CompileError

ORDERS = ("oc", "spatial")


@dataclass(frozen=True)
class Schedule:
    """Tile sizes (in blocks of the intrinsic for channels, in pixels for rows/columns), threads, order.

    ``order`` "oc" walks output-channel tiles outermost (weights stay resident across pixels);
    "spatial" walks pixel tiles outermost (inputs stay resident across output-channel tiles).
    ``res_inp``: the int8 residual comes into the INP share on the load stage and a GEMM against the
    identity weights adds it to the accumulators (a rescaled one: copies it into them, for the ALU to multiply
    and add); else it is LOADed into the accumulators on the compute stage and added on the ALU.
    ``tn``: image groups per tile (batch lanes each), more than one only where
    :attr:`~vdla.compiler.conv_lowering.ConvLowering.token_tiles` allows it (a dense layer's tokens).
    """

    toc: int
    toh: int
    tow: int
    tic: int
    vthreads: int
    order: str = "oc"
    res_inp: bool = False
    tn: int = 1

    def __post_init__(self) -> None:
        if min(self.toc, self.toh, self.tow, self.tic, self.vthreads, self.tn) < 1:
            raise CompileError(f"schedule {self} has a tile size or thread count below 1")
        if self.order not in ORDERS:
            raise CompileError(f"schedule order must be one of {ORDERS}, got {self.order!r}")

    def describe(self) -> str:
        """Short text form, e.g. ``oc4 oh7 ow7 ic1 vt2 oc`` (``n65`` after the output channels for tiles of 65
        image groups, `` res-inp`` appended for a residual in INP)."""
        images = f" n{self.tn}" * (self.tn > 1)
        text = f"oc{self.toc}{images} oh{self.toh} ow{self.tow} ic{self.tic} vt{self.vthreads} {self.order}"
        return text + " res-inp" * self.res_inp

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Schedule:
        return cls(**d)
