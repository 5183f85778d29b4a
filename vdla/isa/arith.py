"""The accelerator's integer arithmetic, defined once: 32-bit wrap-around and requantization.

These are the semantics of the ALU's MUL/RSHR/REQ operations and of the EPI ``req`` OUT path, and
the numpy definition every other place uses: the simulator, the compiler's reference of its fused
epilogue, the CPU fallback's ``requantize`` kernel (its JIT code and its numpy reference) and the
quantizer that chooses multipliers and shifts. A CPU group and an accelerator epilogue therefore
agree bit for bit on the same tensor.

Range (the one documented range): values and multipliers are int32; the ALU's MUL forms their
exact 64-bit product and rounds it right by a shift in ``[0, MUL_MAX_SHIFT]`` before keeping the low
32 bits (:func:`mul_shift`), so a requantization multiplier keeps its full 31-bit precision whatever
the accumulator's size; the RSHR/REQ/EPI shifts lie in ``[0, MAX_SHIFT]``; every shift rounds half up,
``(v + 2^(s-1)) >> s``, computed without overflow; the clamp bounds lie within int8.
"""

from __future__ import annotations

import numpy as np

from vdla.isa.instructions import IsaError

MAX_SHIFT = 31  # the REQ/EPI shift field is 5 bits
MUL_MAX_SHIFT = 63  # the shift of MUL's 64-bit product (imm[5:0] of an ALU MUL reading ACC[src])
INT8_MIN, INT8_MAX = -128, 127


def wrap32(v: np.ndarray | int) -> np.ndarray:
    """Two's-complement wrap of integer values to the int32 range (returned as int64)."""
    return (np.asarray(v, np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)


def rounding_shift(v: np.ndarray | int, shift: np.ndarray | int, limit: int = MAX_SHIFT) -> np.ndarray:
    """``(v + 2^(shift-1)) >> shift`` (round half up; ``shift`` 0 leaves ``v``), exact in int64.

    ``shift`` (scalar or per element) must lie in [0, ``limit``] (``limit`` at most MUL_MAX_SHIFT); ``v``
    any int64 value: the rounding bit is added after the shift, ``(v >> s) + ((v >> (s-1)) & 1)``, so
    nothing overflows.
    """
    s = np.asarray(shift, np.int64)
    if np.any((s < 0) | (s > limit)):
        raise IsaError(f"shift {shift} outside [0, {limit}]")
    v = np.asarray(v, np.int64)
    return np.where(s > 0, (v >> s) + ((v >> np.maximum(s - 1, 0)) & 1), v)


def mul_shift(x: np.ndarray | int, multiplier: np.ndarray | int, shift: np.ndarray | int = 0) -> np.ndarray:
    """The ALU's MUL: ``wrap32(rounding_shift(x * multiplier, shift))`` on the exact 64-bit product of two
    int32 values, ``shift`` in [0, MUL_MAX_SHIFT] (0: the product's low 32 bits). Returned as int64."""
    p = np.asarray(x, np.int64) * np.asarray(multiplier, np.int64)
    return wrap32(rounding_shift(p, shift, MUL_MAX_SHIFT))


def shift_lanes(a: np.ndarray | int, amount: np.ndarray | int, rounding: bool = False) -> np.ndarray:
    """The ALU's SHR (``rounding``: RSHR) on int32 values: ``s = clamp(amount, -31, 31)``; ``a >> s``
    (arithmetic; RSHR adds ``2^(s-1)`` first, computed without overflow) for ``s >= 0``, else ``a << -s``,
    wrapped to int32. ``amount`` is an immediate or, lane by lane, a row's own values. Returned as int64."""
    a = np.asarray(a, np.int64)
    s = np.clip(np.asarray(amount, np.int64), -31, 31)
    right = np.maximum(s, 0)
    if rounding:
        a = a + np.where(right > 0, np.left_shift(1, np.maximum(right - 1, 0)), 0)
    return wrap32(np.where(s >= 0, a >> right, a << np.maximum(-s, 0)))


def lane_sum(v: np.ndarray | int, shape: tuple[int, ...]) -> np.ndarray:
    """The ALU's LSUM: the sum of each row's lanes in every lane, wrapped to int32 (the adder tree's carries past
    bit 31 are dropped, as ADD's). ``v``: rows whose last two axes (batch x block_out) are the lanes, or an
    immediate, which every lane holds; ``shape``: the result's (the destination rows'). Returned as int64."""
    v = np.asarray(v, np.int64)
    lanes = shape[-2] * shape[-1]
    total = v * lanes if v.ndim == 0 else v.reshape(v.shape[: v.ndim - 2] + (-1,)).sum(-1)[..., None, None]
    return wrap32(np.broadcast_to(total, shape))


def requantize(
    x: np.ndarray,
    multiplier: np.ndarray | int = 1,
    shift: np.ndarray | int = 0,
    lo: np.ndarray | int = INT8_MIN,
    hi: np.ndarray | int = INT8_MAX,
) -> np.ndarray:
    """``clamp(mul_shift(x, multiplier, shift), lo, hi)`` as int8: the exact product rounded once.

    Operands broadcast like numpy; ``lo <= hi`` within int8 (ReLU folded in is ``lo = 0``).
    """
    return np.clip(mul_shift(x, multiplier, shift), lo, hi).astype(np.int8)


def choose_requantization(real: np.ndarray | float, where: str = "") -> tuple[np.ndarray, int]:
    """Per-channel multipliers and one shift with ``mul_shift(acc, m, shift)`` closest to ``acc * real``:
    the largest shift in [0, MUL_MAX_SHIFT] whose rounded multipliers all fit in int32, so the largest
    multiplier lies in [2^30, 2^31) (a relative error of at most 2^-31) and the result is the exact
    product rounded once, for any int32 accumulator. ``where`` names the layer in errors."""
    return choose_multipliers(real, 1, MUL_MAX_SHIFT, where)


def choose_multipliers(
    real: np.ndarray | float, acc_bound: np.ndarray | int, max_shift: int = MAX_SHIFT, where: str = ""
) -> tuple[np.ndarray, int]:
    """Integer multipliers and one common shift with ``m / 2^shift`` closest to each positive ``real``
    scale, such that ``acc * m`` stays within int32 for every ``|acc| <= acc_bound`` (per entry).

    This is how a real-valued scale becomes an integer multiply and rounding shift (the shift per layer,
    the multipliers per channel): the largest shift in [0, ``max_shift``] whose rounded multipliers all
    fit, which minimises the relative error of every scale. With ``acc_bound`` 1 only the multiplier
    itself must fit in int32 (the 64-bit product of MUL with a shift).

    Raises :class:`IsaError` prefixed by ``where`` (the layer and tensor), naming the channel (the entry of
    ``real``) whose scale is not positive and finite, rounds to a zero multiplier or does not fit.
    """
    r = np.atleast_1d(np.asarray(real, np.float64))
    at = f"{where}: " if where else ""
    bad = np.flatnonzero(~np.isfinite(r) | ~(r > 0))
    if bad.size:
        raise IsaError(f"{at}requantization scales must be positive and finite, got {_entry(r, int(bad[0]))}")
    m_max = np.maximum((2**31 - 1) // np.maximum(np.broadcast_to(np.asarray(acc_bound, np.int64), r.shape), 1), 1)
    for shift in range(max_shift, -1, -1):
        m_f = np.rint(r * 2.0**shift)  # compared in float: a large shift would overflow int64
        if np.all(m_f <= m_max):
            m = m_f.astype(np.int64)
            if np.any(m == 0):
                c = int(np.argmin(r))
                raise IsaError(
                    f"{at}a requantization scale of {_entry(r, c)} is below the multiplier's resolution (at shift "
                    f"{shift}, {2.0**-shift:.3g} is its step; the largest scale is {r.max():.4g})"
                )
            return m, shift
    c = int(np.argmax(r / m_max))
    raise IsaError(f"{at}a requantization scale of {_entry(r, c)} does not fit: at most {m_max[c]} (shift 0)")


def _entry(r: np.ndarray, c: int) -> str:
    """Entry ``c`` of the scales ``r``, with its channel where there are several."""
    return f"{r[c]:.4g} (channel {c})" if r.size > 1 else f"{r[c]:.4g}"
