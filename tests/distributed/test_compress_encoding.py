"""The 16-bit encodings of the compressed AllReduce and the scheme's model (single process)."""
import numpy as np
import pytest

from paddle_ngraph.distributed import NullTransport
from paddle_ngraph.distributed.compress import compressed_allreduce, decode, encode, expected_result
from paddle_ngraph.errors import TransportError


def test_bf16_rounds_to_nearest_even_and_keeps_float32_range():
    x = np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, 3e38, -1e-30])
    back = decode(encode(x, "bf16"), "bf16")
    # ties go to the even neighbour; just above a tie rounds up; large and tiny values stay finite
    assert back[0] == 1.0 and back[1] == 1 + 4 * 2 ** -8 and back[2] == 1 + 2 ** -7
    assert np.isfinite(back[3]) and back[4] < 0
    np.testing.assert_allclose(back, x, rtol=2 ** -8)


def test_fp16_is_ieee_half_and_overflows_to_inf():
    x = np.float32([65504, 65519, 65520, -1e6, 2 ** -24, 2 ** -26, 1 + 2 ** -11])
    back = decode(encode(x, "fp16"), "fp16")
    assert back[0] == 65504 and back[1] == 65504
    assert back[2] == np.inf and back[3] == -np.inf
    assert back[4] == 2 ** -24 and back[5] == 0 and back[6] == 1.0
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(back, x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("fmt,nan", [("bf16", 0x7FC0), ("fp16", 0x7E00)])
def test_nan_has_one_encoding(fmt, nan):
    x = np.float32([np.nan, -np.nan]).copy()
    x.view(np.uint32)[1] |= 0x12345  # another payload
    assert (encode(x, fmt) == nan).all()


def test_model_sums_in_rank_order_in_float32_and_rounds_once():
    rows = np.float32([[1.0, 3.0], [2 ** -9, 2 ** -9], [2 ** -9, 2 ** -9]])
    # bf16, rank order: (1 + 2^-9) + 2^-9 = 1 + 2^-8 in float32, a tie, rounded once to even: 1.0
    got = expected_result(rows, "bf16", "sum")
    assert got[0] == 1.0
    assert got[1] == decode(encode(np.float32([3 + 2 ** -8]), "bf16"), "bf16")[0]
    avg = expected_result(rows, "fp16", "avg")
    total = np.float32(1.0) + np.float32(2 ** -9) + np.float32(2 ** -9)
    assert avg[0] == np.float32(np.float16(total / np.float32(3)))


def test_one_process_scheme_is_one_rounding_and_checks_its_input():
    t = NullTransport()
    x = np.float32([0.1, 70000, -3.3])
    np.testing.assert_array_equal(compressed_allreduce(t, x, "avg", "fp16"), decode(encode(x, "fp16"), "fp16"))
    with pytest.raises(TransportError, match="needs float32"):
        compressed_allreduce(t, x.astype(np.float64), "avg", "bf16", name="g")
    with pytest.raises(TransportError, match="supports sum and avg, not 'max'"):
        compressed_allreduce(t, x, "max", "bf16", name="g")
    with pytest.raises(TransportError, match="unknown compression 'int8'"):
        encode(x, "int8")
