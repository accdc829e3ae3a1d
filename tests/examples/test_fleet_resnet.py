"""examples/fleet_resnet.py (static fleet, a small ResNet with batch norm) on 2 ranks under mpirun, a few
steps, saving each rank's parameters: the ranks trained on different shards (their losses differ) and
end with bitwise-identical weights, while batch norm's moving mean and variance, which follow each rank's
own batches, differ between them (as the example's docstring says).
"""
import os
import pickle
import re

import numpy as np
import pytest
from example_runs import EXAMPLES, NRANKS, under_mpirun

EXAMPLE = os.path.join(EXAMPLES, "fleet_resnet.py")
STEPS = 4


@pytest.mark.distributed
def test_ranks_end_with_the_same_weights_and_their_own_batch_norm_statistics(tmp_path):
    output = under_mpirun(tmp_path, EXAMPLE, "--steps", STEPS, "--log-every", STEPS - 1, "--save", tmp_path / "saved")
    last = dict(re.findall(rf"\[rank (\d+)\] step {STEPS - 1} loss ([\d.]+)", output))
    assert sorted(last) == [str(r) for r in range(NRANKS)], output[-3000:]
    assert len(set(last.values())) == NRANKS, f"the ranks trained on the same data: {last}"
    saved = []
    for rank in range(NRANKS):
        with open(tmp_path / "saved" / f"rank{rank}" / "model.pdparams", "rb") as f:
            saved.append(pickle.load(f))
    # Paddle names batch norm's scale and shift w_0 and b_0, its moving mean and variance w_1 and w_2.
    statistics = {name for name in saved[0] if re.fullmatch(r"batch_norm2d_\d+\.w_[12]", name)}
    weights = set(saved[0]) - statistics
    assert statistics and any(name.startswith("conv2d_") for name in weights), sorted(saved[0])
    for other in saved[1:]:
        assert set(other) == set(saved[0])
        assert [n for n in sorted(weights) if not np.array_equal(other[n], saved[0][n])] == []
        assert all(not np.array_equal(other[n], saved[0][n]) for n in statistics), "batch-norm statistics are equal"
