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

WORKER = os.path.join(HERE, "clip_worker.py")


@pytest.mark.parametrize("clip, decay, backend", [("global", "l2", "CPU"), ("value", "l1", "CPU"),
                                                  ("norm", "l2", "INTERPRETER")])
def test_clipped_training_on_two_ranks_equals_one_process(tmp_path, clip, decay, backend):
    run_ranks(WORKER, 2, clip, decay, backend, tmp_path)
    with ir_guard(clip_models.IR_OF[clip]):
        _, reference = clip_models.train(clip, decay)
    ranks = [np.load(tmp_path / f"rank{r}.npz")["losses"] for r in range(2)]
    # Each rank's loss is the mean over its half; their mean is the loss of the whole batch.
    np.testing.assert_allclose((ranks[0] + ranks[1]) / 2, reference, rtol=1e-5, atol=1e-6)
