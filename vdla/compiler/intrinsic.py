"""The GEMM intrinsic declared as data, and the tensorizer that matches a contraction to it.

The intrinsic is what one GEMM micro-op computes::

    acc[n, o] += inp[n, i] * wgt[o, i]      n < batch, o < block_out, i < block_in (reduced)

with each operand one element of its on-chip buffer (ACC, INP, WGT) and the micro-op fields
(dst, src, wgt) indexing those three buffers. Its lane extents come from the hardware config, so
the same compiler serves the 16x16 core, an 8x8 core or a batch-2 core.

A computation is declared as a :class:`Contraction` (an einsum with affine indices). The tensorizer
finds the computation axis playing each lane's role (the one that indexes exactly the same operands
as a plain dimension, with the same reduce-ness), splits it into blocks of the lane extent, and then
gives, for any tile laid out in the buffers, the (dst, src, wgt) stride of every remaining axis: the
loop nest that :mod:`vdla.compiler.microcode` turns into micro-ops and GEMM loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdla.compiler.spec import CompileError
from vdla.config import HwConfig
from vdla.isa import MemType

ROLES = ("out", "lhs", "rhs")


@dataclass(frozen=True)
class Dim:
    """One affine tensor index: sum(coeff * axis) + const."""

    terms: tuple[tuple[str, int], ...]
    const: int = 0

    def coeff(self, axis: str) -> int:
        return sum(c for a, c in self.terms if a == axis)

    @property
    def plain(self) -> str | None:
        """The axis if the index is exactly that axis, else None."""
        return self.terms[0][0] if len(self.terms) == 1 and self.terms[0][1] == 1 and not self.const else None


def dim(*terms: tuple[str, int] | str, const: int = 0) -> Dim:
    """``dim("oh")``, ``dim(("oh", 2), "ky", const=-1)``."""
    return Dim(tuple((t, 1) if isinstance(t, str) else t for t in terms), const)


@dataclass(frozen=True)
class Access:
    """A tensor indexed by one affine expression per dimension."""

    tensor: str
    dims: tuple[Dim, ...]

    def axes(self) -> set[str]:
        return {a for d in self.dims for a, c in d.terms if c}


@dataclass(frozen=True)
class Contraction:
    """out[out.dims] += lhs[lhs.dims] * rhs[rhs.dims] over every point of ``extents``."""

    extents: tuple[tuple[str, int], ...]
    out: Access
    lhs: Access
    rhs: Access
    reduce: tuple[str, ...]

    def access(self, role: str) -> Access:
        return getattr(self, role)


@dataclass(frozen=True)
class Operand:
    """One operand of the intrinsic: its buffer, its lane axes and the micro-op field indexing it."""

    buffer: MemType
    lanes: tuple[str, ...]
    uop_field: str


@dataclass(frozen=True)
class GemmIntrinsic:
    """acc[n, o] += inp[n, i] * wgt[o, i] on one element of each buffer."""

    lanes: tuple[tuple[str, int], ...]
    out: Operand = Operand(MemType.ACC, ("n", "o"), "dst")
    lhs: Operand = Operand(MemType.INP, ("n", "i"), "src")
    rhs: Operand = Operand(MemType.WGT, ("o", "i"), "wgt")
    reduce: tuple[str, ...] = ("i",)

    @classmethod
    def from_config(cls, cfg: HwConfig) -> GemmIntrinsic:
        """The intrinsic of a hardware configuration: lanes (batch, block_in, block_out)."""
        return cls(lanes=(("n", cfg.batch), ("i", cfg.block_in), ("o", cfg.block_out)))

    def operand(self, role: str) -> Operand:
        return getattr(self, role)

    @property
    def uop_fields(self) -> tuple[str, str, str]:
        """The micro-op field of each role, in ROLES order (dst, src, wgt)."""
        return tuple(self.operand(r).uop_field for r in ROLES)


@dataclass(frozen=True)
class Tensorized:
    """A contraction matched to the intrinsic: which axis each lane binds, and the blocked extents."""

    contraction: Contraction
    intrinsic: GemmIntrinsic
    binding: tuple[tuple[str, str], ...]  # (lane, computation axis)

    @property
    def blocked_extents(self) -> dict[str, int]:
        """Extent of every axis once bound axes are split into lane-sized blocks (rounded up)."""
        lane_size = dict(self.intrinsic.lanes)
        ext = dict(self.contraction.extents)
        for lane, axis in self.binding:
            ext[axis] = -(-ext[axis] // lane_size[lane])
        return ext

    def nest(
        self, tile: dict[str, int], layouts: dict[str, tuple[tuple[int, int], ...]], order: tuple[str, ...]
    ) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """The loop nest of a tile: (extent, (dst, src, wgt) stride) per axis of ``order`` with extent > 1.

        ``tile`` gives each axis's extent in the tile (in blocks for bound axes); ``layouts`` gives,
        per role, (element stride, step) of each tensor dim in its buffer: tensor index ``v`` of
        that dim sits at element ``(v - origin) // step * stride``.
        """
        fields = ("dst", "src", "wgt")
        pos = [fields.index(f) for f in self.intrinsic.uop_fields]
        axes = []
        for axis in order:
            if tile.get(axis, 1) <= 1:
                continue
            strides = [0, 0, 0]
            for role, p in zip(ROLES, pos):
                total = 0
                for d, (stride, step) in zip(self.contraction.access(role).dims, layouts[role]):
                    c = d.coeff(axis)
                    if c % step:
                        raise CompileError(f"axis {axis} steps {c} along a {role} dim laid out every {step}")
                    total += c // step * stride
                strides[p] = total
            axes.append((tile[axis], tuple(strides)))
        return tuple(axes)


def tensorize(contraction: Contraction, intrinsic: GemmIntrinsic) -> Tensorized:
    """Bind every lane of the intrinsic to the unique computation axis with the same role.

    A lane's role is the set of operands it indexes and whether it is reduced; the matching axis
    must index exactly those operands, as a plain dimension. Raises CompileError if none or several
    axes match, which names the lane and the candidates.
    """
    roles_of = {lane: {r for r in ROLES if lane in intrinsic.operand(r).lanes} for lane, _ in intrinsic.lanes}
    binding = []
    for lane, _ in intrinsic.lanes:
        want_reduce = lane in intrinsic.reduce
        candidates = []
        for axis, _ in contraction.extents:
            used = {r for r in ROLES if axis in contraction.access(r).axes()}
            plain = {r for r in ROLES if any(d.plain == axis for d in contraction.access(r).dims)}
            if used == plain == roles_of[lane] and (axis in contraction.reduce) == want_reduce:
                candidates.append(axis)
        if len(candidates) != 1:
            raise CompileError(
                f"cannot tensorize: intrinsic lane {lane!r} (operands {sorted(roles_of[lane])}"
                f"{', reduced' if want_reduce else ''}) matches axes {candidates}"
            )
        binding.append((lane, candidates[0]))
    return Tensorized(contraction, intrinsic, tuple(binding))


def conv2d_contraction(
    n: int, c: int, oc: int, oh: int, ow: int, kh: int, kw: int, sh: int, sw: int, top: int, left: int
) -> Contraction:
    """out[b, oc, oh, ow] += inp[b, ic, sh*oh + ky - top, sw*ow + kx - left] * wgt[oc, ic, ky, kx]."""
    return Contraction(
        extents=(("b", n), ("oc", oc), ("oh", oh), ("ow", ow), ("ic", c), ("ky", kh), ("kx", kw)),
        out=Access("out", (dim("b"), dim("oc"), dim("oh"), dim("ow"))),
        lhs=Access("inp", (dim("b"), dim("ic"), dim(("oh", sh), "ky", const=-top), dim(("ow", sw), "kx", const=-left))),
        rhs=Access("wgt", (dim("oc"), dim("ic"), dim("ky"), dim("kx"))),
        reduce=("ic", "ky", "kx"),
    )
