"""Checkpoints: K steps, save, SIGKILL, resume, K more steps equals 2K uninterrupted steps bitwise
(2 ranks under mpirun, Adam on the CPU backend); a process killed while saving leaves the last
complete checkpoint readable; only rank 0 writes."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph import CheckpointError
from paddle_ngraph.zoo import build_program

HERE = os.path.dirname(os.path.abspath(__file__))
from ranks import run_ranks  # noqa: E402
from paddle_ngraph.quiet import quiet_env  # noqa: E402

K = 6


@pytest.mark.distributed
def test_resume_after_a_kill_equals_uninterrupted_training_bitwise(tmp_path):
    root, full, resumed = tmp_path / "ckpt", tmp_path / "full", tmp_path / "resumed"
    full.mkdir(), resumed.mkdir()
    worker = os.path.join(HERE, "checkpoint_worker.py")
    proc = run_ranks(worker, 2, "--root", root, "--out", full, "--steps", 2 * K, timeout=300)
    proc = run_ranks(worker, 2, "--root", root, "--out", resumed, "--steps", K, "--save-and-die", timeout=300,
                     check=False)
    assert proc.returncode != 0  # killed after saving
    assert sorted(os.listdir(root)) == ["latest", f"step-{K:06d}"]  # rank 0 alone wrote, nothing left over
    proc = run_ranks(worker, 2, "--root", root, "--out", resumed, "--steps", K, "--resume", timeout=300)
    for rank in (0, 1):
        a, b = np.load(full / f"rank{rank}.npz"), np.load(resumed / f"rank{rank}.npz")
        assert set(a.files) == set(b.files) and any("moment" in n for n in a.files)
        for name in a.files:
            np.testing.assert_array_equal(b[name], a[name], err_msg=f"rank {rank}: {name}")


@pytest.mark.parametrize("delay", [0.5, 1.5, 3.0])
def test_a_kill_while_saving_leaves_the_last_complete_checkpoint(tmp_path, delay):
    root = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "save_loop_worker.py"), str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=quiet_env())
    try:
        first = proc.stdout.readline()  # one save is complete
        assert first.strip() == "1"
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    paddle.enable_static()
    main, _, _, _ = build_program("mnist_mlp", "adam")
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor(paddle.CPUPlace()).run(_startup_of(main))
        step = paddle_ngraph.load_checkpoint(main, str(root))
        assert step >= 1
        w = np.array(scope.find_var("linear_0.w_0").get_tensor())
        b = np.array(scope.find_var("linear_0.b_0").get_tensor())
    assert np.all(w == step) and np.all(b == step)  # one whole checkpoint, not a mix of two


def _startup_of(main):
    # The startup program that goes with build_program's main program: rebuild both together.
    _, startup, _, _ = build_program("mnist_mlp", "adam")
    return startup


def test_a_pointer_to_a_missing_checkpoint_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "latest").write_text("step-000007\n")
    with pytest.raises(CheckpointError, match="latest.*step-000007"):
        paddle_ngraph.latest_checkpoint(str(tmp_path))
    assert paddle_ngraph.latest_checkpoint(str(tmp_path / "none")) is None
