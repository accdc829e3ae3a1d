"""Checks shared by several op families: floating-point operands, per-spatial-dim attributes and
sliding windows (convolution, pooling, normalization), axes (shape, indexing)."""
from __future__ import annotations

from ..node import Node
from ..types import TensorType, normalize_axis

__all__ = ["check_same_float_dtype", "check_spatial_pairs", "window_count", "checked_axis"]


def check_same_float_dtype(node: Node, *types: TensorType):
    first = types[0]
    node.check(first.dtype.is_float, f"needs floating-point inputs, got {first}")
    for t in types[1:]:
        node.check(t.dtype == first.dtype, f"input dtypes differ: {first} and {t}")


def check_spatial_pairs(node: Node, *names: str):
    """Spatial attributes hold one value per spatial dim (H, W)."""
    for name in names:
        node.check(len(node.attrs[name]) == 2, f"attribute {name}={list(node.attrs[name])} needs 2 values (H, W)")


def window_count(node: Node, size: int, window: int, stride: int, pad_begin: int, pad_end: int,
                  dilation: int = 1, ceil_mode: bool = False) -> int:
    """Number of window positions along one dim (Paddle's ConvOutputSize / PoolOutputSize); -1 if dynamic."""
    node.check(stride > 0 and dilation > 0 and window > 0, f"window {window}, stride {stride}, dilation {dilation} must be > 0")
    node.check(pad_begin >= 0 and pad_end >= 0, f"paddings ({pad_begin}, {pad_end}) must be >= 0")
    if size < 0:
        return -1
    span = size + pad_begin + pad_end - (dilation * (window - 1) + 1)
    node.check(span >= 0, f"window {window} (dilation {dilation}) does not fit in size {size} with paddings ({pad_begin}, {pad_end})")
    return (span + (stride - 1 if ceil_mode else 0)) // stride + 1


def checked_axis(node: Node, axis: int, rank: int) -> int:
    """``axis`` normalized to [0, rank); fails naming the node when out of range."""
    normalized = normalize_axis(int(axis), rank)
    node.check(0 <= normalized < rank, f"axis {axis} out of range for rank {rank}")
    return normalized
