"""Static memory planning: every intermediate tensor gets an offset in one arena, reusing the bytes of
tensors that are no longer live.

A tensor is live from the step that writes it to the last step that reads it (inclusive). Two tensors
whose live ranges overlap never share a byte; the plan is checked for that on construction. Offsets
are aligned (4 KiB by default, a page, like the buffers the accelerator's DMA reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from vdla.errors import VdlaError


class PlanError(VdlaError, ValueError):
    """A memory plan request that cannot be met (bad lifetime, overlapping placement)."""


@dataclass(frozen=True)
class Lifetime:
    """A tensor of ``nbytes`` written at step ``first`` and last read at step ``last``."""

    name: str
    nbytes: int
    first: int
    last: int

    def overlaps(self, other: Lifetime) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class MemoryPlan:
    """Offsets of every tensor in an arena of ``total`` bytes; ``no_reuse`` is what one buffer per
    tensor would need."""

    offsets: dict[str, int]
    sizes: dict[str, int]
    total: int
    no_reuse: int

    def check(self, lifetimes: list[Lifetime]) -> None:
        """Raise :class:`PlanError` if two live tensors share a byte or a tensor leaves the arena."""
        for i, a in enumerate(lifetimes):
            lo, hi = self.offsets[a.name], self.offsets[a.name] + a.nbytes
            if hi > self.total:
                raise PlanError(f"tensor {a.name!r} [{lo}, {hi}) leaves the {self.total}-byte arena")
            for b in lifetimes[i + 1 :]:
                blo, bhi = self.offsets[b.name], self.offsets[b.name] + b.nbytes
                if a.overlaps(b) and lo < bhi and blo < hi:
                    raise PlanError(
                        f"live tensors {a.name!r} and {b.name!r} share bytes [{max(lo, blo)}, {min(hi, bhi)})"
                    )


def _align(n: int, align: int) -> int:
    return -(-n // align) * align


def plan_memory(lifetimes: list[Lifetime], align: int = 4096) -> MemoryPlan:
    """Greedy best-fit by decreasing size: each tensor takes the lowest aligned offset where it overlaps
    no already placed tensor that is live at the same time."""
    for t in lifetimes:
        if t.nbytes <= 0 or t.first > t.last:
            raise PlanError(f"tensor {t.name!r}: {t.nbytes} bytes live from step {t.first} to {t.last}")
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end, tensor)
    offsets: dict[str, int] = {}
    for t in sorted(lifetimes, key=lambda t: (-t.nbytes, t.first, t.name)):
        busy = sorted((o, e) for o, e, other in placed if other.overlaps(t))
        offset = 0
        for o, e in busy:
            if offset + t.nbytes <= o:
                break
            offset = max(offset, _align(e, align))
        offsets[t.name] = offset
        placed.append((offset, offset + t.nbytes, t))
    total = _align(max((e for _, e, _ in placed), default=0), align)
    plan = MemoryPlan(
        offsets, {t.name: t.nbytes for t in lifetimes}, total, sum(_align(t.nbytes, align) for t in lifetimes)
    )
    plan.check(lifetimes)
    return plan
