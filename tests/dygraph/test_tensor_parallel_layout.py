"""The layout of a tensor-parallel dygraph Layer without ranks: Paddle's ring ids mapped to their
ranks (ir/groups.py), and which group each tensor starts from (dygraph/tensor_parallel.py). The
multi-rank runs: tests/distributed/test_dygraph_model_parallel.py."""
import pytest

from paddle_ngraph.dygraph.tensor_parallel import initial_broadcasts
from paddle_ngraph.ir.groups import RankLayout

# Paddle's group ids on 4 ranks with dp 2 x mp 2 (measured): data parallel 14 {0, 2} and 15 {1, 3},
# model parallel 16 {0, 1} and 17 {2, 3}, the default group 0.
RINGS = ((0, (0, 1, 2, 3)), (14, (0, 2)), (15, (1, 3)), (16, (0, 1)), (17, (2, 3)))


def test_rings_are_paddles_group_ids_and_the_whole_job_is_spelled_empty():
    layout = RankLayout(4, 1, 2, rings=RINGS)
    assert layout.ring(16) == (0, 1) and layout.ring(15) == (1, 3) and layout.ring(0) == ()
    with pytest.raises(KeyError):
        layout.ring(1)  # the legacy global ring is no ring here
    assert "16: ranks [0, 1]" in layout.ring_names()
    assert RankLayout(4, 1, 2).ring(1) == () and "0: model parallel" in RankLayout(4, 1, 2).ring_names()


def test_every_tensor_starts_from_its_data_parallel_group_and_whole_ones_from_the_model_group():
    layout = RankLayout(4, 3, 2, rings=RINGS)
    plan = initial_broadcasts(layout, ["w_shard", "b_whole"], {"w_shard"})
    assert plan == [((1, 3), ["w_shard", "b_whole"]), ((2, 3), ["b_whole"])]
    # One replica (dp 1): only the model-parallel group, of every rank here.
    assert initial_broadcasts(RankLayout(2, 1, 2), ["w_shard", "b_whole"], {"w_shard"}) == [((), ["b_whole"])]
