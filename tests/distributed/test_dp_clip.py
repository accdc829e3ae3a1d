"""Gradient clipping on N ranks equals one process on the concatenated batch: the AllReduce
averages each raw gradient, and the clipping (global norm, per-tensor norm, value) and weight
decay run on the average (transpiler/gradients.py). Averaging the clipped gradients instead
gives other losses from the second step on. So with gradient accumulation (the merged raw
gradient is clipped, once per update) and ZeRO-1 (a clipped gradient's parameter keeps the
plain AllReduce: clipping reads the whole averaged gradient)."""
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
# clip, what is transpiled besides it (the accumulation, ZeRO-1)
STRATEGY_CASES = [("global", (("accumulate_steps", 2),)), ("norm", (("accumulate_steps", 2),)),
                  ("global", (("zero_stage", 1),)), ("norm", (("zero_stage", 1), ("accumulate_steps", 2)))]


def train_clipped_on_this_rank(cases, strategy_cases=()):
    """On every rank: each case on its share of every batch, one after the other; the losses by
    case, then the parameters by strategy case."""
    import paddle

    paddle.enable_static()
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    losses, params = {}, {}
    for clip, decay, backend in cases:
        with ir_guard(clip_models.IR_OF[clip]):
            _, losses[clip, decay, backend] = clip_models.train(clip, decay, transpile={"backend": backend},
                                                                rank=rank, nranks=size)
    for clip, strategy in strategy_cases:
        with ir_guard(clip_models.IR_OF[clip]):
            params[clip, strategy] = clip_models.train_merged(clip, transpile=dict(strategy), rank=rank, nranks=size,
                                                              merge=dict(strategy).get("accumulate_steps", 1))
    return losses, params


@pytest.fixture(scope="module")
def trained_by_rank():
    """Every case in one job of 2 ranks."""
    return run_ranks(train_clipped_on_this_rank, 2, CASES, STRATEGY_CASES).results


@pytest.fixture(scope="module")
def losses_by_rank(trained_by_rank):
    return [losses for losses, _ in trained_by_rank]


@pytest.mark.parametrize("clip, decay, backend", CASES)
def test_clipped_training_on_two_ranks_equals_one_process(losses_by_rank, clip, decay, backend):
    with ir_guard(clip_models.IR_OF[clip]):
        _, reference = clip_models.train(clip, decay)
    ranks = [losses_by_rank[r][clip, decay, backend] for r in range(2)]
    # Each rank's loss is the mean over its half; their mean is the loss of the whole batch.
    np.testing.assert_allclose((ranks[0] + ranks[1]) / 2, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("clip, strategy", STRATEGY_CASES)
def test_clipped_training_with_accumulation_or_zero_on_two_ranks_equals_one_process(trained_by_rank, clip,
                                                                                   strategy):
    merge = dict(strategy).get("accumulate_steps", 1)
    with ir_guard(clip_models.IR_OF[clip]):
        reference = clip_models.train_merged(clip, merge=merge)
    ranks = [trained_by_rank[r][1][clip, strategy] for r in range(2)]
    assert sorted(ranks[0]) == sorted(reference) and reference
    for name, value in reference.items():
        np.testing.assert_array_equal(ranks[1][name], ranks[0][name], err_msg=f"{name} differs between ranks")
        np.testing.assert_allclose(ranks[0][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
