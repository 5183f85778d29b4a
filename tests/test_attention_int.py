"""One attention head in integers (issue 53, vdla.graph.attention and oracle.attention_int): each step against its
definition, the whole against float attention on the int8 inputs, and the refusals naming their limits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vdla.graph import attention as att
from vdla.graph import oracle
from vdla.graph.attention import IntAttention
from vdla.graph.types import UnsupportedError

RNG = np.random.default_rng(53)


def head(tokens: int, d: int, keep: np.ndarray | None = None, spread: float = 1.0):
    """Normal Q, K, V quantized at 4 sigma, the score and output scales from the float scores and output (the
    calibrated 127th of their largest value): (q, k, v, params, float output)."""
    s_in = 4 / 127
    q, k, v = (np.clip(np.rint(RNG.normal(0, spread, (tokens, d)) / s_in), -128, 127).astype(np.int8) for _ in "qkv")
    scores = (q * s_in).astype(np.float64) @ (k * s_in).astype(np.float64).T / math.sqrt(d)
    masked = scores if keep is None else np.where(np.asarray(keep, bool)[None, :], scores, -np.inf)
    p = np.exp(masked - masked.max(axis=-1, keepdims=True))
    want = (p / p.sum(axis=-1, keepdims=True)) @ (v * s_in).astype(np.float64)
    score_scale = min(np.abs(scores).max() / 127, 15 * math.log(2) / 255)
    params = IntAttention.of(d, s_in, s_in, s_in, score_scale, np.abs(want).max() / 127)
    return q, k, v, params, want


@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("tokens", [1, 17, 65, 197])
@pytest.mark.parametrize("masked", [False, True])
def test_within_an_output_step_of_float_attention(tokens, d, masked):
    keep = RNG.random(tokens) > 0.3 if masked else None
    if keep is not None:
        keep[0] = True
    q, k, v, p, want = head(tokens, d, keep)
    out_scale = np.abs(want).max() / 127
    err = (oracle.attention_int(q, k, v, p, keep) * out_scale - want) / out_scale
    assert np.sqrt(np.mean(err**2)) < 0.5 and np.abs(err).max() < 2.0


def test_a_fully_masked_row_and_a_single_key_give_exact_values():
    q, k, v, p, _ = head(5, 32)
    assert not oracle.attention_int(q, k, v, p, np.zeros(5, bool)).any()  # Z = 0: U = 0, the output 0
    one = np.zeros(5, bool)
    one[3] = True
    ratio = p.out_multiplier / 2.0**p.out_shift * 2**p.out_exponent  # v_scale / out_scale
    want = np.clip(np.rint(v[3] * ratio), -128, 127)
    got = oracle.attention_int(q, k, v, p, one)
    assert np.abs(got - want[None, :]).max() <= 1  # softmax of one key is 1: V requantized (within rounding)


def test_exp_planes_put_back_together_and_fit_int8():
    e = np.asarray(att.exp_table(15 * math.log(2) / 255), np.int64)
    hi, lo = att.exp_planes(e)
    np.testing.assert_array_equal(256 * hi.astype(np.int64) + lo, e)
    assert e[0] == 0 and e[-1] == att.EXP_ONE and 0 <= hi.min() and hi.max() <= 127
    assert e[1] >= 1  # at the widest score scale the smallest unmasked exp is still nonzero


def test_reciprocal_within_its_bound_for_every_exponent():
    z = np.unique(np.concatenate([2 ** np.arange(31) - 1, 2 ** np.arange(31), RNG.integers(1, 2**31 - 1, 20000)]))
    z = z[z >= 1]
    k = oracle.reciprocal_exponent(z)
    np.testing.assert_array_equal(k, np.floor(np.log2(z.astype(np.float64))).astype(np.int64))
    m = oracle.shift_lanes(z, k - att.FRAC)
    assert m.min() >= 1 << att.FRAC and m.max() < 2 << att.FRAC
    r = oracle.reciprocal_fixed(m)
    rel = r.astype(np.float64) * m / 4.0**att.FRAC - 1
    assert np.abs(rel).max() < 2e-5


def test_scores_requantized_with_the_mask_bias_reach_minus_128():
    q, k, v, p, _ = head(40, 64, spread=3.0)
    acc = oracle.dense(q, k).astype(np.int64)
    assert oracle.requantize(acc + p.mask_bias, p.score_multiplier, p.score_shift).max() == -128
    assert (acc + p.mask_bias).min() > -(2**31)


def test_refusals_name_the_limit():
    with pytest.raises(UnsupportedError, match=r"ln\(2\^15\) = 10.4.*up to 0.04077"):
        IntAttention.of(64, 0.03, 0.03, 0.03, 0.05, 0.01)
    p = IntAttention.of(64, 0.03, 0.03, 0.03, 0.04, 0.01)
    with pytest.raises(UnsupportedError, match="a key mask of 3 values for 4 keys"):
        att.key_bias(p, np.ones(3), 4)
