"""Gradient clipping on N ranks equals one process on the concatenated batch: the AllReduce
averages each raw gradient, and the clipping (global norm, per-tensor norm, value) and weight
decay run on the average (transpiler/gradients.py). Averaging the clipped gradients instead
gives other losses from the second step on."""
import os
import sys

import numpy as np
import pytest

from harness import ir_guard
from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transpiler"))
import clip_models  # noqa: E402

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

CASES = [("global", "l2", "CPU"), ("value", "l1", "CPU"), ("norm", "l2", "INTERPRETER")]


def train_clipped_on_this_rank(cases):
    """On every rank: each case on its share of every batch, one after the other; the losses by case."""
    import paddle

    paddle.enable_static()
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    losses = {}
    for clip, decay, backend in cases:
        with ir_guard(clip_models.IR_OF[clip]):
            _, losses[clip, decay, backend] = clip_models.train(clip, decay, transpile={"backend": backend},
                                                                rank=rank, nranks=size)
    return losses


@pytest.fixture(scope="module")
def losses_by_rank():
    """Every case in one job of 2 ranks."""
    return run_ranks(train_clipped_on_this_rank, 2, CASES).results


@pytest.mark.parametrize("clip, decay, backend", CASES)
def test_clipped_training_on_two_ranks_equals_one_process(losses_by_rank, clip, decay, backend):
    with ir_guard(clip_models.IR_OF[clip]):
        _, reference = clip_models.train(clip, decay)
    ranks = [losses_by_rank[r][clip, decay, backend] for r in range(2)]
    # Each rank's loss is the mean over its half; their mean is the loss of the whole batch.
    np.testing.assert_allclose((ranks[0] + ranks[1]) / 2, reference, rtol=1e-5, atol=1e-6)
