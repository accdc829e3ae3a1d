"""bfloat16 as the IR carries it: raw 16-bit patterns in NumPy ``uint16`` arrays (NumPy has no
bfloat16 type), with the two conversions that give those bits their meaning.

The bits are those of Paddle's ``phi::dtype::bfloat16`` on the CPU, checked against its ``cast``
kernel: float32 -> bfloat16 rounds to nearest even, a value past the largest finite bfloat16
becomes inf, and every NaN (whatever its sign or payload) becomes 0x7FFF. Wider or integer
sources go to float32 first (so float64 -> bfloat16 rounds twice, as Paddle's does).
bfloat16 -> float32 is exact: the 16 bits are float32's upper half.
"""
from __future__ import annotations

import numpy as np

#: The NaN that Paddle's float32 -> bfloat16 conversion makes of any NaN.
PADDLE_NAN_BITS = 0x7FFF


def round_nearest_even(values, nan_bits: int = PADDLE_NAN_BITS) -> np.ndarray:
    """float32 values -> bfloat16 bits (uint16), round to nearest even; NaNs become ``nan_bits``."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit carries into the kept half exactly when the dropped
    # half is above the midpoint, or at it with an odd kept half: ties go to even.
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    out = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():  # the carry would run a NaN's payload into its exponent, or past the sign
        out = np.where(nan, np.uint16(nan_bits), out)
    return out


def to_bfloat16(values) -> np.ndarray:
    """Any real values -> bfloat16 bits, through float32 as Paddle's conversion goes."""
    with np.errstate(over="ignore", invalid="ignore"):
        return round_nearest_even(np.asarray(values).astype(np.float32))


def widen(bits) -> np.ndarray:
    """bfloat16 bits -> float32 values, exactly."""
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(values) -> np.ndarray:
    """float32 values -> the nearest bfloat16 values (ties to even), as float32, shape kept; a NaN
    stays a NaN. What ``precision: bf16`` does to the inputs of a matmul or convolution
    (ir/ops/precision.py)."""
    array = np.asarray(values, dtype=np.float32)
    return widen(round_nearest_even(array)).reshape(array.shape)
