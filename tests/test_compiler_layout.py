"""Packing activations, weights and per-channel rows into the accelerator's layouts, and back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vdla.graph.layout import (
    pack_activation,
    pack_channels,
    pack_weights,
    unpack_activation,
    unpack_weights,
)

dims = st.integers(1, 5)
blocks = st.sampled_from([(1, 16), (1, 8), (2, 16), (2, 8)])


@settings(max_examples=40, deadline=None)
@given(n=dims, c=st.integers(1, 40), h=dims, w=dims, bb=blocks, seed=st.integers(0, 2**16))
def test_activation_round_trip(n, c, h, w, bb, seed):
    batch, block = bb
    x = np.random.default_rng(seed).integers(-128, 128, (n, c, h, w), dtype=np.int8)
    p = pack_activation(x, batch, block)
    assert p.shape == (-(-n // batch), -(-c // block), h, w, batch, block)
    np.testing.assert_array_equal(unpack_activation(p, n, c), x)
    assert np.count_nonzero(p) == np.count_nonzero(x)  # padding is zero


@settings(max_examples=40, deadline=None)
@given(
    o=st.integers(1, 40),
    i=st.integers(1, 40),
    k=st.sampled_from([1, 3, 5, 7]),
    blk=st.sampled_from([8, 16]),
    seed=st.integers(0, 2**16),
)
def test_weight_round_trip(o, i, k, blk, seed):
    w = np.random.default_rng(seed).integers(-128, 128, (o, i, k, k), dtype=np.int8)
    p = pack_weights(w, blk, blk)
    assert p.shape == (-(-o // blk), -(-i // blk), k, k, blk, blk)
    np.testing.assert_array_equal(unpack_weights(p, o, i), w)
    assert np.count_nonzero(p) == np.count_nonzero(w)


def test_element_order_is_nchw1n16c():
    x = np.arange(2 * 20 * 2 * 3).reshape(2, 20, 2, 3).astype(np.int64)
    p = pack_activation(x, 1, 16)
    # element (n, cb, y, x) holds the 16 channels cb*16 .. cb*16+15 of one pixel of image n
    np.testing.assert_array_equal(p[1, 1, 0, 2, 0, :4], x[1, 16:20, 0, 2])
    assert not p[1, 1, 0, 2, 0, 4:].any()
    q = pack_activation(x, 2, 16)  # batch lanes next to the channels: (n/2, c/16, h, w, 2n, 16c)
    np.testing.assert_array_equal(q[0, 0, 1, 1, :, 3], x[:, 3, 1, 1])


def test_weight_block_is_out_by_in():
    w = np.arange(20 * 18).reshape(20, 18, 1, 1)
    p = pack_weights(w, 16, 16)
    assert p[1, 0, 0, 0, 3, 5] == w[19, 5, 0, 0]
    assert p[0, 1, 0, 0, 2, 1] == w[2, 17, 0, 0]


@pytest.mark.parametrize("batch", [1, 2])
def test_channel_rows_repeat_over_batch_lanes(batch):
    v = np.arange(1, 21, dtype=np.int32) * 1000
    p = pack_channels(v, batch, 16)
    assert p.shape == (2, batch, 16) and p.dtype == np.int32
    for b in range(batch):
        np.testing.assert_array_equal(p[:, b].reshape(-1)[:20], v)
    assert not p[1, :, 4:].any()
