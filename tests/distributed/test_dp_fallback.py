"""Fallback programs on N ranks under mpirun train like one process on the concatenated batch:
every gradient is averaged exactly once, whether an engine segment or a Paddle op made it and
whether the engine or Paddle runs its update. Ranks end bitwise identical."""
import os
import sys

import numpy as np
import pytest

from harness import assert_trained_close, ir_guard
from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transpiler"))
import fallback_models as fm  # noqa: E402
from fallback_worker import BATCH, STEPS  # noqa: E402

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

WORKER = os.path.join(HERE, "fallback_worker.py")


@pytest.mark.parametrize("ir, middle, optimizer, backend, nranks", [
    ("pir", "custom", "sgd", "CPU", 2),            # a custom operator between engine segments
    ("legacy", "custom", "momentum", "CPU", 2),
    ("pir", "param_cumsum", "adagrad", "CPU", 2),  # updates in Paddle; one gradient made by Paddle
    ("legacy", "param_cumsum", "sgd", "INTERPRETER", 3),
])
def test_ranks_equal_one_process(tmp_path, ir, middle, optimizer, backend, nranks):
    fm.custom_op_module()  # built once here, so that the ranks only load it
    run_ranks(WORKER, nranks, ir, middle, optimizer, backend, tmp_path)
    xs, ys = fm.data(STEPS, BATCH)
    with ir_guard(ir):
        _, ref_losses, ref_params = fm.train(middle, optimizer, xs, ys)
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(nranks)]
    # Each rank's loss is the mean over its share; their mean is the loss of the whole batch.
    np.testing.assert_allclose(np.mean([r["losses"] for r in ranks], axis=0), ref_losses, rtol=1e-4, atol=1e-6)
    assert sorted(k for k in ranks[0].files if k != "losses") == sorted(ref_params)
    for name, ref in ref_params.items():
        for r in ranks[1:]:
            assert np.array_equal(r[name], ranks[0][name]), f"{name}: ranks differ"
        assert_trained_close(ranks[0][name], ref, optimizer, name, lr=0.1, norm_tol=1e-5, elementwise=False)
