"""The accelerator's integer arithmetic, defined once: 32-bit wrap-around and requantization.

These are the semantics of the ALU's MUL/RSHR/REQ operations and of the EPI ``req`` OUT path, and
the numpy definition every other place uses: the simulator, the compiler's reference of its fused
epilogue, the CPU fallback's ``requantize`` kernel (its JIT code and its numpy reference) and the
quantizer that chooses multipliers and shifts. A CPU group and an accelerator epilogue therefore
agree bit for bit on the same tensor.

Range (the one documented range): values and multipliers are int32; their product wraps to int32
as the 32-bit ALU's does (a quantizer picks multiplier and shift so that it does not); shifts lie in
``[0, MAX_SHIFT]`` and round half up, ``(v + 2^(s-1)) >> s``, computed without overflow; the clamp
bounds lie within int8.
"""

from __future__ import annotations

import numpy as np

from vdla.isa.instructions import IsaError

MAX_SHIFT = 31  # the REQ/EPI shift field is 5 bits
INT8_MIN, INT8_MAX = -128, 127


def wrap32(v: np.ndarray | int) -> np.ndarray:
    """Two's-complement wrap of integer values to the int32 range (returned as int64)."""
    return (np.asarray(v, np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)


def rounding_shift(v: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """``(v + 2^(shift-1)) >> shift`` (round half up; ``shift`` 0 leaves ``v``), exact in int64.

    ``shift`` (scalar or per element) must lie in [0, MAX_SHIFT]; ``v`` in the int32 range.
    """
    s = np.asarray(shift, np.int64)
    if np.any((s < 0) | (s > MAX_SHIFT)):
        raise IsaError(f"shift {shift} outside [0, {MAX_SHIFT}]")
    v = np.asarray(v, np.int64)
    return (v + np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)) >> s


def requantize(
    x: np.ndarray,
    multiplier: np.ndarray | int = 1,
    shift: np.ndarray | int = 0,
    lo: np.ndarray | int = INT8_MIN,
    hi: np.ndarray | int = INT8_MAX,
) -> np.ndarray:
    """``clamp(rounding_shift(wrap32(x * multiplier), shift), lo, hi)`` as int8.

    Operands broadcast like numpy; ``lo <= hi`` within int8 (ReLU folded in is ``lo = 0``).
    """
    v = wrap32(np.asarray(x, np.int64) * np.asarray(multiplier, np.int64))
    return np.clip(rounding_shift(v, shift), lo, hi).astype(np.int8)


def choose_requantization(
    real: np.ndarray | float, acc_bound: np.ndarray | int, out_max: int = 127
) -> tuple[int, np.ndarray, int]:
    """``(pre_shift, multipliers, shift)`` with ``rounding_shift(rounding_shift(acc, pre) * m, shift)`` closest
    to ``acc * real`` for every ``|acc| <= acc_bound``, within int32 at every step.

    Dropping ``pre`` low bits of the accumulator first costs at most ``real * 2^(pre-1)`` output steps but
    lets the multiplier grow ``2^pre``-fold; the pre-shift minimising the worst estimated error over the
    channels (rounding of the pre-shift plus the multiplier's relative error at ``out_max``) is chosen.
    """
    r = np.atleast_1d(np.asarray(real, np.float64))
    bound = np.broadcast_to(np.asarray(acc_bound, np.int64), r.shape)
    best = None
    for pre in range(0, 16):
        try:
            m, shift = choose_multipliers(r * 2.0**pre, -(-bound // (1 << pre)) + 1)
        except IsaError:
            continue
        rel = np.abs(m / 2.0**shift / (r * 2.0**pre) - 1.0)
        err = float(np.max(rel * out_max + (r * 2.0 ** (pre - 1) if pre else 0.0)))
        if best is None or err < best[0]:
            best = (err, pre, m, shift)
    if best is None:
        raise IsaError(f"no requantization of scale {r.max():.4g} fits 32 bits")
    return best[1], best[2], best[3]


def choose_multipliers(real: np.ndarray | float, acc_bound: np.ndarray | int) -> tuple[np.ndarray, int]:
    """Integer multipliers and one common shift with ``m / 2^shift`` closest to each positive ``real``
    scale, such that ``acc * m`` stays within int32 for every ``|acc| <= acc_bound`` (per entry).

    This is how a real-valued requantization scale becomes the accelerator's MUL + rounding shift
    (the shift is per layer, the multipliers per channel): the largest shift in [0, MAX_SHIFT] whose
    rounded multipliers all fit, which minimises the relative error of every scale.
    """
    r = np.atleast_1d(np.asarray(real, np.float64))
    if np.any(~np.isfinite(r)) or np.any(r <= 0):
        raise IsaError(f"requantization scales must be positive and finite, got {r}")
    m_max = np.maximum((2**31 - 1) // np.maximum(np.broadcast_to(np.asarray(acc_bound, np.int64), r.shape), 1), 1)
    for shift in range(MAX_SHIFT, -1, -1):
        m = np.rint(r * 2.0**shift).astype(np.int64)
        if np.all(m <= m_max):
            return m, shift
    raise IsaError(f"a requantization scale of {r.max():.4g} does not fit: at most {m_max.min()} (shift 0)")
