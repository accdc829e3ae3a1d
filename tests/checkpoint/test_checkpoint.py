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
from paddle_ngraph.quiet import quiet_env
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard
from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))

K = 6


def train_with_checkpoints(root, steps, save_and_die=False, resume=False):
    """On every rank: the MLP with Adam (state: moments, beta powers) on the CPU backend for
    ``steps`` steps; ``resume``: from the latest checkpoint in ``root`` on; ``save_and_die``: then
    save the checkpoint and SIGKILL this process (every rank). Returns the rank's final parameters
    and optimizer state."""
    x, y = digits_as_mnist()
    paddle.enable_static()
    main_prog, startup, _, loss = build_program("mnist_mlp", "adam", lr=0.001)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main_prog)
    from paddle_ngraph.transpiler import engines

    transport = engines()[-1].transport
    first = paddle_ngraph.load_checkpoint(main_prog, root) if resume else 0
    for step in range(first, first + steps):
        xb, yb = shard(x, y, 16, transport.rank, transport.size, step)
        exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
    if save_and_die:
        paddle_ngraph.save_checkpoint(main_prog, root, first + steps)
        transport.barrier()  # rank 0's save is complete before anyone dies
        os.kill(os.getpid(), signal.SIGKILL)
    scope = paddle.static.global_scope()
    names = [n for n in scope.local_var_names() if n.startswith("linear_") or "moment" in n or "pow" in n]
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def resume_and_train_uninterrupted(root):
    """On every rank, in one job: K steps from the checkpoint in ``root``, then, in a scope of its
    own, 2K steps from the start (the reference: training that was never interrupted)."""
    trained = {}
    for name, args in (("resumed", (K, False, True)), ("uninterrupted", (2 * K,))):
        with paddle.static.scope_guard(paddle.static.Scope()):
            trained[name] = train_with_checkpoints(root, *args)
    return trained


@pytest.mark.distributed
def test_resume_after_a_kill_equals_uninterrupted_training_bitwise(tmp_path):
    root = tmp_path / "ckpt"
    proc = run_ranks(train_with_checkpoints, 2, root, K, True, timeout=300, check=False)
    assert proc.returncode != 0  # killed after saving
    assert sorted(os.listdir(root)) == ["latest", f"step-{K:06d}"]  # rank 0 alone wrote, nothing left over
    trained = run_ranks(resume_and_train_uninterrupted, 2, root, timeout=300).results
    for rank in (0, 1):
        a, b = trained[rank]["uninterrupted"], trained[rank]["resumed"]
        assert set(a) == set(b) and any("moment" in n for n in a)
        for name in a:
            np.testing.assert_array_equal(b[name], a[name], err_msg=f"rank {rank}: {name}")


@pytest.mark.parametrize("delay", [0.5, 1.5, pytest.param(3.0, marks=pytest.mark.slow)])
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
