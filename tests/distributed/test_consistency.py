"""Ranks given different programs fail fast, every one of them, naming the ranks and the first differing op."""
import sys
import time

import numpy as np
import pytest

from ranks import run_ranks

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed



def train_a_program_differing_on_rank_1(mode):
    """On every rank: rank 1 builds a different model from the others (``mode="accumulate"``: the
    same model, accumulated over a different number of micro-steps); the rank prints the
    consistency error it stops with and exits 1."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport

    paddle.enable_static()
    t = make_transport()
    accumulate = mode == "accumulate"
    hidden = 600 if t.rank != 1 or accumulate else 500
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 784], "float32")
        y = paddle.static.data("y", [None, 1], "int64")
        h = paddle.nn.functional.relu(paddle.nn.Linear(784, hidden)(x))
        loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.nn.Linear(hidden, 10)(h), y))
        paddle.optimizer.SGD(0.1).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main, transport=t, accumulate_steps=(1 if t.rank == 1 else 2) if accumulate else 1)
    try:
        exe.run(main, feed={"x": np.zeros((4, 784), np.float32), "y": np.zeros((4, 1), np.int64)}, fetch_list=[loss])
    except Exception as e:  # Paddle wraps our error; print its message and fail
        print(f"[rank {t.rank}] ERROR: {' '.join(str(e).split())}", flush=True)
        sys.exit(1)
    print(f"[rank {t.rank}] no error", flush=True)


def test_mismatched_programs_fail_on_every_rank_within_30s():
    start = time.monotonic()
    proc = run_ranks(train_a_program_differing_on_rank_1, 3, "model", timeout=120, check=False)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert elapsed < 30 + 15  # 30 s for the check itself; process start-up of 3 Paddle ranks on 2 cores on top
    out = proc.stdout
    for rank in range(3):
        line = next((l for l in out.splitlines() if l.startswith(f"[rank {rank}] ERROR")), None)
        assert line is not None, out[-3000:] + proc.stderr[-2000:]
        assert "differ between ranks" in line and "rank(s) [1]" in line and "first difference at op" in line, line
        assert "500" in line and "600" in line, line


def test_ranks_accumulating_over_different_numbers_of_micro_steps_fail_on_every_rank():
    """Rank 1 would update (and AllReduce) on every call, the others on every second: caught at start-up."""
    proc = run_ranks(train_a_program_differing_on_rank_1, 3, "accumulate", timeout=120, check=False)
    assert proc.returncode != 0
    for rank in range(3):
        line = next((l for l in proc.stdout.splitlines() if l.startswith(f"[rank {rank}] ERROR")), None)
        assert line is not None, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "rank(s) [1]" in line and "accumulate_steps=2" in line and "accumulate_steps=1" in line, line


def train_with_loss_scaled_on_rank_1(ir):
    """On every rank: the same model and ops, but rank 1 minimizes twice the loss and the others three
    times it, programs that differ only in a constant's value; the rank prints the error it stops
    with and exits 1."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport

    paddle.enable_static()
    t = make_transport()
    guard = paddle.pir_utils.IrGuard() if ir == "pir" else paddle.pir_utils.OldIrGuard()
    with guard:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [None, 4], "float32")
            y = paddle.static.data("y", [None, 1], "int64")
            loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.nn.Linear(4, 3)(x), y))
            loss = loss * (2.0 if t.rank == 1 else 3.0)
            paddle.optimizer.SGD(0.1).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle_ngraph.transpile(main, transport=t)
        feed = {"x": np.ones((4, 4), np.float32), "y": np.zeros((4, 1), np.int64)}
        try:
            exe.run(main, feed=feed, fetch_list=[loss])
        except Exception as e:  # Paddle wraps our error; print its message and fail
            print(f"[rank {t.rank}] ERROR: {' '.join(str(e).split())}", flush=True)
            sys.exit(1)
    print(f"[rank {t.rank}] no error", flush=True)


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_programs_differing_in_a_constant_fail_on_every_rank(ir):
    """Unnoticed, rank 1 would average a gradient of another scale into the others'."""
    proc = run_ranks(train_with_loss_scaled_on_rank_1, 2, ir, timeout=120, check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    for rank in range(2):
        line = next((l for l in proc.stdout.splitlines() if l.startswith(f"[rank {rank}] ERROR")), None)
        assert line is not None, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "differ between ranks" in line and "rank(s) [1]" in line, line
