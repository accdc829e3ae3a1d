"""distributed.agreement: one AllReduce tells every rank whether all gave the same key. Ranks that
differ are covered where it is used, on real ranks: tests/distributed/test_failures.py (programs
that differ at a step) and tests/distributed/test_dygraph_interleaved.py (captures that differ)."""
import pytest

from paddle_ngraph.distributed import NullTransport
from paddle_ngraph.distributed.agreement import agree


def test_one_rank_agrees_with_itself_and_gets_its_flags_back():
    assert agree(NullTransport(), 2 ** 48 - 1, (0, 3)) == (True, [0, 3])
    assert agree(NullTransport(), 0) == (True, [])


@pytest.mark.parametrize("key", [-1, 2 ** 53])
def test_keys_a_float64_cannot_carry_exactly_are_refused(key):
    with pytest.raises(ValueError, match="agreement key"):
        agree(NullTransport(), key)
