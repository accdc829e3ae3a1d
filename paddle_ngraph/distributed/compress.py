"""Compressed AllReduce: float32 gradients travel as 16-bit values (bf16 or fp16), are summed in
float32, and every rank ends with the same bits.

The scheme, for a flat float32 buffer of ``count`` elements on each of N ranks:

1. each rank encodes its buffer to 16 bits and splits it into N chunks of ``ceil(count / N)``
   elements (the last padded with zeros);
2. an all-to-all gives rank r the N encodings of chunk r, one from each rank;
3. rank r decodes them and sums them in float32 in rank order 0..N-1, then for ``avg`` divides by
   N in float32 (like the uncompressed avg), and encodes the chunk's result to 16 bits once;
4. an allgather of the 16-bit chunks gives every rank all the encoded results, decoded to float32.

Each element's result is a function of the N inputs alone (decode, ordered float32 sum, divide,
encode, decode), whichever rank computed it: so every rank has the same bits, and the native MPI
path (native/cpu/src/mpi_communicator.cc) gives the bits of this reference. Bytes sent per rank:
2 * (N - 1) / N * 2 B per element, against about 2 * (N - 1) / N * 4 B for a float32 ring allreduce.

Rounding: bf16 rounds to nearest even (as Paddle's bfloat16); fp16 is IEEE half, round to nearest
even (NumPy's conversion), with values beyond 65504 becoming inf: that is the format, and
``check_finite`` reports it. A NaN encodes to one canonical NaN (bf16 0x7FC0, fp16 0x7E00).
"""
from __future__ import annotations

import numpy as np

from ..errors import TransportError

FORMATS = ("bf16", "fp16")
_CANONICAL_NAN = {"bf16": 0x7FC0, "fp16": 0x7E00}


def encode(values: np.ndarray, fmt: str) -> np.ndarray:
    """float32 -> 16-bit patterns (uint16), round to nearest even."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if fmt == "bf16":
        bits = values.view(np.uint32)
        rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
        out = ((bits + rounding) >> 16).astype(np.uint16)
    elif fmt == "fp16":
        with np.errstate(over="ignore"):
            out = values.astype(np.float16).view(np.uint16)
    else:
        raise TransportError(f"unknown compression '{fmt}'; valid: {', '.join(FORMATS)}")
    nan = np.isnan(values)
    if nan.any():
        out = np.where(nan, np.uint16(_CANONICAL_NAN[fmt]), out)
    return out


def decode(bits: np.ndarray, fmt: str) -> np.ndarray:
    """16-bit patterns -> float32 (exact)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    if fmt == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if fmt == "fp16":
        return bits.view(np.float16).astype(np.float32)
    raise TransportError(f"unknown compression '{fmt}'; valid: {', '.join(FORMATS)}")


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 values (ties to even), as float32; a NaN stays a NaN. What
    ``precision: bf16`` does to the inputs of a matmul or convolution (ir/ops/precision.py)."""
    return decode(encode(values, "bf16"), "bf16").reshape(np.shape(values))


def reduce_in_rank_order(encoded: np.ndarray, fmt: str, reduction: str) -> np.ndarray:
    """(N, n) 16-bit encodings, one row per rank -> the n float32 sums (or averages), before
    their final rounding to 16 bits."""
    parts = decode(encoded, fmt).reshape(encoded.shape)
    total = parts[0].copy()
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are values like any other here
        for row in parts[1:]:
            total += row  # float32, rank order: the same sequence of roundings on every rank
        if reduction == "avg":
            total /= np.float32(parts.shape[0])
    return total


def expected_result(inputs: np.ndarray, fmt: str, reduction: str) -> np.ndarray:
    """The scheme's result from all ranks' float32 inputs ((N, n), one row per rank), computed in
    one process: the definition the transports and the native path are tested against."""
    return decode(encode(reduce_in_rank_order(encode(inputs, fmt), fmt, reduction), fmt), fmt)


def compressed_allreduce(transport, flat: np.ndarray, reduction: str, fmt: str, name: str = "") -> np.ndarray:
    """The scheme over any transport's alltoall and allgather; returns a new float32 buffer."""
    if flat.dtype != np.float32:
        raise TransportError(f"rank {transport.rank}: compressed AllReduce of '{name}' needs float32, "
                             f"got {flat.dtype}")
    if reduction not in ("sum", "avg"):
        raise TransportError(f"rank {transport.rank}: compressed AllReduce of '{name}' supports sum and avg, "
                             f"not '{reduction}'")
    n, count = transport.size, flat.size
    chunk = -(-count // n)
    padded = np.zeros(n * chunk, dtype=np.uint16)
    padded[:count] = encode(flat.reshape(-1), fmt)
    mine = transport.alltoall(padded).reshape(n, chunk)  # row r: rank r's encoding of my chunk
    result = encode(reduce_in_rank_order(mine, fmt, reduction), fmt)
    everything = transport.allgather(result)
    return decode(everything[:count], fmt)
