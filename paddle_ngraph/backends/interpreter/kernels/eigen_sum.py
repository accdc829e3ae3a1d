"""The sum of squares in the order of Paddle's Eigen, for the LarsMomentumUpdate kernel (optimizer.py).

Paddle's CPU lars_momentum (phi/kernels/cpu/lars_momentum_kernel.cc) takes its norms with
Eigen's ``x.square().sum().sqrt()``. Eigen sums in its own order, which differs from NumPy's
pairwise sum; the norm sets every element's learning rate, so a norm one ulp off moves the
whole parameter. ``eigen_sum_squares`` repeats Eigen's order (TensorReduction.h, full
reduction on the default device, SumReducer) as Paddle's AVX build compiles it:

- ranges longer than ``LEAF_PACKETS`` packets are halved, the split rounded up to a packet
  boundary (from the range's first index), each half reduced the same way, left + right;
- a leaf adds pairs of packets into two packet accumulators (lane-wise, in order), one
  leftover packet into the first, the last < 1 packet's elements into a scalar; the
  accumulators are added lane-wise, then folded (AVX ``predux``: lanes i and i + 4, then
  (0 + 2) + (1 + 3)) and added to the scalar.

A packet is 32 bytes: 8 floats or 4 doubles. tests/backends/test_lars_kernels.py checks the
result bit for bit against Paddle's kernel, from 1 element to 3e5, in both dtypes.
"""
from __future__ import annotations

import numpy as np


PACKET_BYTES = 32  # AVX


LEAF_PACKETS = 1024  # Eigen's InnerMostDimReducer::kLeafSize


def _fold(acc: np.ndarray):
    while acc.shape[0] > 4:
        half = acc.shape[0] // 2
        acc = acc[:half] + acc[half:]
    pair = acc[:2] + acc[2:]
    return pair[0] + pair[1]


def _leaf(sq: np.ndarray, first: int, n: int, lanes: int):
    t = sq.dtype.type
    seg = sq[first:first + n]
    unrolled, vectorized = n // (2 * lanes) * 2 * lanes, n // lanes * lanes
    acc, acc2 = np.zeros(lanes, sq.dtype), np.zeros(lanes, sq.dtype)
    if unrolled:
        pairs = seg[:unrolled].reshape(-1, 2, lanes)
        # cumsum adds the rows strictly in order (np.sum would add them pairwise)
        acc = np.cumsum(pairs[:, 0], axis=0, dtype=sq.dtype)[-1]
        acc2 = np.cumsum(pairs[:, 1], axis=0, dtype=sq.dtype)[-1]
    if unrolled < vectorized:
        acc = acc + seg[unrolled:vectorized]
    scalar = t(0)
    for value in seg[vectorized:]:
        scalar = t(scalar + value)
    return t(scalar + _fold(acc + acc2))


def _tree(sq: np.ndarray, first: int, n: int, lanes: int):
    if n <= lanes * LEAF_PACKETS:
        return _leaf(sq, first, n, lanes)
    split = lanes * -(-(first + -(-n // 2)) // lanes)
    left = min(split - first, n)
    total = _tree(sq, first, left, lanes)
    if left < n:
        total = sq.dtype.type(total + _tree(sq, split, n - left, lanes))
    return total


def eigen_sum_squares(x: np.ndarray):
    """sum(x * x) in x's float dtype, added in the order of Eigen's ``x.square().sum()``."""
    sq = np.ascontiguousarray(x).reshape(-1)
    sq = sq * sq
    return _tree(sq, 0, sq.size, PACKET_BYTES // sq.dtype.itemsize)
