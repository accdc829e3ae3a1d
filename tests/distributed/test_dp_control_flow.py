"""Control flow and Paddle's own optimizers on 2 ranks under mpirun train like one process on the
concatenated batch: GradientMergeOptimizer's update in a conditional_block reads sums of averaged
gradients (the segment making each sum averages it and writes the average back), LookAhead's (in
both IRs: in PIR its assign_out_ writes the slow weights into the parameters the engine updates) and
ModelAverage's extra ops, a while loop and legacy conditional blocks (with select_input/select_output)
run in Paddle between engine segments. Ranks end
bitwise identical."""
import os
import sys

import numpy as np
import pytest

from harness import assert_trained_close, ir_guard
from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transpiler"))
import cflow_models as cm  # noqa: E402

pytestmark = pytest.mark.distributed

STEPS, BATCH, NRANKS = 6, 12, 2
CASES = [("gradient_merge", "CPU", "legacy"), ("lookahead", "CPU", "legacy"), ("lookahead", "CPU", "pir"),
         ("model_average", "INTERPRETER", "legacy"), ("while_loop", "CPU", "legacy"),
         ("conditional_block", "CPU", "legacy"), ("select_input", "INTERPRETER", "legacy")]


def train_on_this_rank(cases):
    """On every rank: each case on its share of every batch; {case: (losses, values)}."""
    import paddle

    paddle.enable_static()
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    xs, ys = cm.data(STEPS, BATCH)
    trained = {}
    for name, backend, ir in cases:
        with ir_guard(ir):
            # Each rank initializes differently: the start-up broadcast makes them rank 0's.
            _, losses, values = cm.train(name, xs, ys, transpile={"backend": backend}, seed=1 + rank, rank=rank,
                                         nranks=size)
        trained[name, backend, ir] = losses, values
    return trained


@pytest.fixture(scope="module")
def trained_by_rank():
    return run_ranks(train_on_this_rank, NRANKS, CASES).results


@pytest.mark.parametrize("name, backend, ir", CASES)
def test_ranks_equal_one_process(trained_by_rank, name, backend, ir):
    xs, ys = cm.data(STEPS, BATCH)
    with ir_guard(ir):
        _, ref_losses, ref_values = cm.train(name, xs, ys)
    ranks = [rank[name, backend, ir] for rank in trained_by_rank]
    np.testing.assert_allclose(np.mean([losses for losses, _ in ranks], axis=0), ref_losses, rtol=1e-4, atol=1e-6)
    values = ranks[0][1]
    assert sorted(values) == sorted(ref_values)
    for key, ref in ref_values.items():
        for _, other in ranks[1:]:
            assert np.array_equal(other[key], values[key]), f"{key}: ranks differ"
        assert_trained_close(values[key], ref, "sgd", key, lr=cm.LR, norm_tol=1e-5, elementwise=False)
