"""examples/tensor_parallel_transformer.py, run as a user runs it: 2 ranks under mpirun (the model
split in two, tensor parallelism only), against its --dense run (Paddle alone, one process, the
unsharded model from the same weights):

- rank 0's losses equal the dense run's at every step (rtol 1e-4), and they fall;
- each rank holds at most 55% of the dense model's parameters and Adam state (the bytes it prints,
  measured in its scope), and the dense size the sharded run computes from the shapes is what the
  dense run measures in its own scope.

Under paddle.distributed.launch (oneCCL) the same run prints the same losses and shares.
Also: --help shows both launch commands.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from example_runs import EXAMPLES, NRANKS, example_env, under_launch, under_mpirun

from paddle_ngraph.distributed.ccl import available as ccl_available

SCRIPT = os.path.join(EXAMPLES, "tensor_parallel_transformer.py")
STEPS = 30
STATE = re.compile(r"\[rank (\d+)\] parameters \+ optimizer state: (\d+) bytes; the dense model's: (\d+) bytes; "
                   r"share ([\d.]+) \(mp (\d+)\)")


def losses(output: str) -> list[float]:
    printed = [(int(s), float(v)) for s, v in re.findall(r"\[rank 0\] step +(\d+) loss ([\d.]+)", output)]
    assert [s for s, _ in printed] == list(range(STEPS)), output[-5000:]
    return [v for _, v in printed]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The output of the run under mpirun, which both tests read."""
    return under_mpirun(tmp_path_factory.mktemp("mpirun"), SCRIPT, "--steps", STEPS, "--log-every", 1)


@pytest.mark.distributed
def test_two_shards_train_as_the_dense_model_with_half_the_state_each(sharded, tmp_path):
    dense = subprocess.run([sys.executable, SCRIPT, "--dense", "--steps", str(STEPS), "--log-every", "1"],
                           capture_output=True, text=True, timeout=120, env=example_env(), cwd=tmp_path)
    assert dense.returncode == 0, dense.stderr[-5000:]

    parallel_losses, dense_losses = losses(sharded), losses(dense.stdout)
    np.testing.assert_allclose(parallel_losses, dense_losses, rtol=1e-4)
    assert parallel_losses[-1] < 0.6 * parallel_losses[0], parallel_losses  # about 4.6 -> 1.6

    states = {int(r): (int(mine), int(whole), float(share), int(mp))
              for r, mine, whole, share, mp in STATE.findall(sharded)}
    assert sorted(states) == list(range(NRANKS)), sharded[-5000:]
    (_, measured, computed, _, _), = STATE.findall(dense.stdout)
    assert int(measured) == int(computed), dense.stdout  # the dense run's scope holds what the shapes say
    for rank, (mine, whole, share, mp) in states.items():
        assert mp == NRANKS and whole == int(measured), states
        assert abs(share - mine / whole) < 1e-3 and share <= 0.55, f"rank {rank}: {states[rank]}"


@pytest.mark.distributed
@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_under_paddle_launch_as_under_mpirun(sharded, tmp_path):
    launched = under_launch(tmp_path, SCRIPT, "--steps", STEPS, "--log-every", 1)
    mpi = sharded
    np.testing.assert_allclose(losses(launched), losses(mpi), rtol=1e-5)
    assert sorted(STATE.findall(launched)) == sorted(STATE.findall(mpi)), launched[-5000:]


def test_help_shows_both_launchers():
    shown = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True, timeout=60,
                           env=example_env()).stdout
    assert "mpirun -np MP" in shown and "paddle.distributed.launch --nproc_per_node MP" in shown, shown
