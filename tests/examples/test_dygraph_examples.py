"""The dygraph examples, run as a user runs them: 2 ranks under paddle.distributed.launch (oneCCL), and
examples/dygraph_data_parallel.py also under mpirun (MPI), for a few steps each.

For each run: it succeeds; on every rank the Layer ran on the engine, over the launcher's
transport (the engine's counters, which every example prints: one engine forward per training
step, one gradient synchronization per step, nothing left to eager Paddle); the ranks end with
bitwise-identical trainable parameters (the checksum each rank prints); and the loss rank 0
prints went down. Also: `--help` of each example shows both launch commands and the --steps option.
"""
import os
import re
import subprocess
import sys

import pytest
from example_runs import EXAMPLES, NRANKS, ROOT, example_env, under_launch, under_mpirun

from paddle_ngraph.distributed.ccl import available as ccl_available

FLEET_MNIST, DATA_PARALLEL, RESNET = (os.path.join(EXAMPLES, f"dygraph_{name}.py")
                                      for name in ("fleet_mnist", "data_parallel", "resnet"))
needs_ccl = pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")


def check_run(output: str, transport: str, steps: int, engine_forwards_on_rank0: int | None = None) -> list[float]:
    """The checks every run shares (module docstring); returns rank 0's printed losses, in step order."""
    engines = {int(r): (t, int(f), int(s), int(e)) for r, t, f, s, e in re.findall(
        r"\[rank (\d+)\] engine \((\w+) transport\): (\d+) forward calls on the engine, (\d+) gradient "
        r"synchronizations, (\d+) eager calls", output)}
    assert sorted(engines) == list(range(NRANKS)), output[-5000:]
    for rank, seen in engines.items():
        forwards = engine_forwards_on_rank0 if rank == 0 and engine_forwards_on_rank0 is not None else steps
        assert seen == (transport, forwards, steps, 0), f"rank {rank}: {seen}\n{output[-5000:]}"
    checksums = dict(re.findall(r"\[rank (\d+)\] parameter checksum (\w+)", output))
    assert sorted(checksums) == [str(r) for r in range(NRANKS)], output[-5000:]
    assert len(set(checksums.values())) == 1, f"the ranks' parameters differ: {checksums}"
    printed = re.findall(r"\[rank 0\] step +(\d+)/\d+ +loss ([\d.]+)", output)
    losses = [(int(step), float(loss)) for step, loss in printed]
    assert losses and losses[0][0] == 1 and losses[-1][0] == steps, output[-5000:]
    final = re.findall(r"\[rank 0\] final loss ([\d.]+) \(step (\d+)", output)
    assert final == [(f"{losses[-1][1]:.4f}", str(steps))], output[-5000:]
    return [loss for _, loss in losses]


@pytest.mark.distributed
@needs_ccl
def test_fleet_mnist_under_paddle_launch(tmp_path):
    steps = 20
    losses = check_run(under_launch(tmp_path, FLEET_MNIST, "--steps", steps), "CCL", steps)
    assert losses[-1] < 0.6 * losses[0], losses  # about 2.4 -> 0.5 in 20 steps


@pytest.mark.distributed
@needs_ccl
def test_data_parallel_under_paddle_launch(tmp_path):
    steps = 20
    output = under_launch(tmp_path, DATA_PARALLEL, "--steps", steps)
    # Rank 0's evaluation is one more forward on the engine (eval mode, no gradients).
    losses = check_run(output, "CCL", steps, engine_forwards_on_rank0=steps + 1)
    assert losses[-1] < 0.6 * losses[0], losses
    accuracy = float(re.search(r"held-out accuracy ([\d.]+)%", output).group(1))
    assert accuracy > 50.0, output[-3000:]  # 10% is chance; about 80% after 20 steps


@pytest.mark.distributed
def test_data_parallel_under_mpirun(tmp_path):
    steps = 20
    output = under_mpirun(tmp_path, DATA_PARALLEL, "--steps", steps)
    losses = check_run(output, "MPI", steps, engine_forwards_on_rank0=steps + 1)
    assert losses[-1] < 0.6 * losses[0], losses
    assert float(re.search(r"held-out accuracy ([\d.]+)%", output).group(1)) > 50.0, output[-3000:]


@pytest.mark.distributed
@needs_ccl
def test_resnet18_under_paddle_launch(tmp_path):
    steps = 5
    losses = check_run(under_launch(tmp_path, RESNET, "--steps", steps, "--log-every", 5), "CCL", steps)
    assert losses[-1] < losses[0], losses  # about 3.2 -> 1.3: the classes are easy to tell apart


def test_help_shows_both_launch_commands_and_steps():
    scripts = [FLEET_MNIST, DATA_PARALLEL, RESNET]
    procs = [subprocess.Popen([sys.executable, script, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=example_env()) for script in scripts]
    for script, proc in zip(scripts, procs):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        relative = os.path.relpath(script, ROOT)
        assert f"python -m paddle.distributed.launch --nproc_per_node 2 {relative}" in out, out
        assert f"mpirun --allow-run-as-root --oversubscribe -np 2 python {relative}" in out, out
        assert "--steps" in out, out
