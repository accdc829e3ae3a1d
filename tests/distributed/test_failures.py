"""Failures on one rank reach every rank: no hangs."""
import os
import re
import sys
import time

import pytest

from ranks import run_ranks
from paddle_ngraph.distributed.ccl import available as ccl_available
from paddle_ngraph.quiet import quiet_env

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))


def train_with_a_bad_feed_on_rank_1(ir="pir", kind="shape"):
    """On every rank: rank 1 feeds a batch of the wrong shape (``kind="dtype"``: float64 for
    float32) at step 2; each rank prints the message it stops with and exits 1. ``ir``: the program's
    IR (in a legacy program Paddle's executor checks feeds too, on the rank that was given them)."""
    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.zoo import build_program

    paddle.enable_static()
    t = make_transport()
    guard = paddle.pir_utils.OldIrGuard() if ir == "legacy" else paddle.pir_utils.IrGuard()
    with guard:
        main, startup, _, loss = build_program("mnist_mlp", "sgd")
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle_ngraph.transpile(main, transport=t)
        start = time.time()
        for step in range(5):
            bad = t.rank == 1 and step == 2
            width = 700 if bad and kind == "shape" else 784
            dtype = np.float64 if bad and kind == "dtype" else np.float32
            try:
                exe.run(main, feed={"x": np.zeros((8, width), dtype), "y": np.zeros((8, 1), np.int64)},
                        fetch_list=[loss])
            except Exception as e:
                message = " ".join(str(e).split())
                print(f"[rank {t.rank}] STOPPED at step {step} after {time.time() - start:.1f}s: "
                      f"{message[message.find('ExecutionError'):]}", flush=True)
                sys.exit(1)
        print(f"[rank {t.rank}] finished", flush=True)


def train_with_a_nan_on_rank_1():
    """On every rank: the MLP with check_finite, 2 ranks; rank 1 feeds a NaN at step 3 (a valid feed
    otherwise)."""
    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.transpiler import engines
    from paddle_ngraph.zoo import build_program, digits_as_mnist, shard

    paddle.enable_static()
    x, y = digits_as_mnist()
    main_prog, startup, _, loss = build_program("mnist_mlp", "sgd")
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main_prog, check_finite=True)
    transport = engines()[-1].transport
    for step in range(6):
        xb, yb = shard(x, y, 16, transport.rank, transport.size, step)
        if step == 3 and transport.rank == 1:
            xb = xb.copy()
            xb[0, 0] = np.nan
        exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
    print(f"rank {transport.rank}: finished without noticing", flush=True)


def assert_all_stopped_naming_rank_1(output: str, nranks: int, problem: str = "input 'x': shape [8, 700]"):
    for rank in range(nranks):
        match = re.search(rf"\[rank {rank}\] STOPPED at step 2 .*", output)
        assert match, output[-3000:]
        line = match.group(0)
        assert "feeds rejected on rank(s) [1]" in line and problem in line, line


# 2 ranks under mpirun: test_bad_feed_on_one_rank_stops_every_rank_in_both_irs[shape-pir] runs that very
# job (PIR, a bad shape, 2 ranks); here the world of 3, where two ranks wait for the one that stops.
@pytest.mark.parametrize("nranks", [3])
def test_bad_feed_on_one_rank_stops_every_rank_under_mpirun(nranks):
    start = time.monotonic()
    proc = run_ranks(train_with_a_bad_feed_on_rank_1, nranks, timeout=90, check=False)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    assert_all_stopped_naming_rank_1(proc.stdout, nranks)


@pytest.mark.parametrize("ir", ["legacy", "pir"])
@pytest.mark.parametrize("kind, problem", [("shape", "input 'x': shape [8, 700]"),
                                           ("dtype", "input 'x': dtype float64, the program declares float32")])
def test_bad_feed_on_one_rank_stops_every_rank_in_both_irs(ir, kind, problem):
    """In a legacy program too, where Paddle's executor would refuse the feed on rank 1 alone and
    leave the others waiting for it in the step."""
    start = time.monotonic()
    proc = run_ranks(train_with_a_bad_feed_on_rank_1, 2, ir, kind, timeout=90, check=False)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    assert_all_stopped_naming_rank_1(proc.stdout, 2, problem)


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_bad_feed_on_one_rank_stops_every_rank_under_paddle_launch():
    start = time.monotonic()
    run = run_ranks(train_with_a_bad_feed_on_rank_1, 2, timeout=90, launcher="launch", check=False)
    code, logs = run.returncode, run.output
    assert time.monotonic() - start < 60
    assert code != 0
    assert_all_stopped_naming_rank_1(logs, 2)


def test_uncaught_exception_on_one_rank_ends_the_mpi_job():
    """A rank leaving through an uncaught exception would wait in MPI_Finalize for the others,
    which wait for it in the gradient AllReduce: the job hung. Under mpirun it ends the job, its
    traceback printed."""
    import subprocess

    from ranks import MPIRUN

    start = time.monotonic()
    proc = subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
                           os.path.join(HERE, "uncaught_worker.py")],
                          env=quiet_env(), capture_output=True, text=True, timeout=120)
    logs = proc.stdout + proc.stderr
    assert proc.returncode != 0, logs[-3000:]
    assert time.monotonic() - start < 90
    assert "RuntimeError: an error of the user's own code on rank 1" in logs, logs[-3000:]
    assert "rank 1: uncaught RuntimeError; ending every rank of the job (MPI_Abort)" in logs, logs[-3000:]
    assert "rank 0: step 1 done" in logs and "rank 0: step 2 done" not in logs, logs[-3000:]


def test_uncaught_exception_on_one_rank_ends_the_launch_job(tmp_path):
    """The same under paddle.distributed.launch (oneCCL): the rank waited in oneCCL's teardown for
    rank 0, which waited for it in the gradient AllReduce, and the job hung. The rank now leaves at
    once after its traceback, and the launcher ends the job."""
    import subprocess

    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--log_dir", str(tmp_path),
                           "--nproc_per_node", "2", os.path.join(HERE, "uncaught_worker.py")],
                          env=quiet_env(), capture_output=True, text=True, timeout=150)
    logs = proc.stdout + proc.stderr + "".join(p.read_text(errors="replace") for p in tmp_path.glob("workerlog.*"))
    assert proc.returncode != 0, logs[-3000:]
    assert time.monotonic() - start < 120
    assert "RuntimeError: an error of the user's own code on rank 1" in logs, logs[-3000:]
    assert "rank 1: uncaught RuntimeError; leaving at once so that the launcher ends the other ranks" in logs, \
        logs[-3000:]
    assert "rank 0: step 2 done" not in logs, logs[-3000:]


def test_sys_exit_with_an_error_status_on_one_rank_ends_the_mpi_job():
    """Rank 1 catches its own error and leaves with sys.exit(1): no uncaught exception, but the
    same wait as above (this rank in MPI_Finalize, the others in the AllReduce) without the abort."""
    import subprocess

    from ranks import MPIRUN

    start = time.monotonic()
    proc = subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
                           os.path.join(HERE, "uncaught_worker.py"), "exit"],
                          env=quiet_env(), capture_output=True, text=True, timeout=90)
    logs = proc.stdout + proc.stderr
    assert proc.returncode != 0, logs[-3000:]
    assert time.monotonic() - start < 60
    assert "rank 1: an error of the user's own code on rank 1; leaving with sys.exit(1)" in logs, logs[-3000:]
    assert "rank 1: leaving with exit status 1; ending every rank of the job (MPI_Abort)" in logs, logs[-3000:]
    assert "rank 0: step 2 done" not in logs, logs[-3000:]


def _worker_pids(marker: str) -> list[int]:
    import subprocess

    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()
            if marker in line and "mpirun" not in line and "distributed.launch" not in line
            and "prterun" not in line and " ps " not in line]


def _left_after(marker: str, seconds: float) -> list[int]:
    """The job's processes still there after up to ``seconds``: a launcher that has returned may
    still be reaping its ranks (Paddle's stops them with SIGTERM, then SIGKILL after 3 s), which a
    loaded machine stretches."""
    deadline = time.monotonic() + seconds
    while _worker_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    return _worker_pids(marker)


def _rank_of(pid: int) -> int:
    environ = dict(item.split("=", 1) for item in
                   open(f"/proc/{pid}/environ").read().split("\0") if "=" in item)
    return int(environ.get("OMPI_COMM_WORLD_RANK", environ.get("PADDLE_TRAINER_ID", -1)))


def _wait_for_step(log_dir, step: int, deadline: float):
    """Until tools/train_mnist.py's rank 0 has printed ``step`` (in the job's log, or under Paddle's
    launcher in its workerlog.0)."""
    pattern = re.compile(r"\[rank 0\] step\s+(\d+)\s+loss")
    while time.monotonic() < deadline:
        for path in (log_dir / "job.log", log_dir / "workerlog.0"):
            text = path.read_text(errors="replace") if path.exists() else ""
            if any(int(m.group(1)) >= step for m in pattern.finditer(text)):
                return
        time.sleep(0.2)


@pytest.mark.parametrize("launcher", ["mpirun", "paddle"])
def test_killed_rank_ends_the_job_without_orphans(launcher, tmp_path):
    """SIGKILL one rank mid-training: every process of the job is gone within 60 s."""
    import signal
    import subprocess
    import sys

    if launcher == "paddle" and not ccl_available():
        pytest.skip("the ccl transport is not built (oneCCL not installed)")
    script = os.path.join(HERE, "..", "..", "tools", "train_mnist.py")
    steps = "987651" if launcher == "mpirun" else "987652"  # a marker to find this job's ranks
    args = [script, "--steps", steps, "--log-every", "1", "--batch-size", "16"]
    if launcher == "mpirun":
        from ranks import MPIRUN

        cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
               "--log_dir", str(tmp_path), *args]
    log = open(tmp_path / "job.log", "w")
    job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=quiet_env())
    try:
        deadline = time.monotonic() + 60
        while len(_worker_pids(f"--steps {steps}")) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        # Training has started on both ranks once rank 0 has logged its third step (each step's
        # AllReduce needs rank 1): wait for that rather than for a fixed time, which a loaded
        # machine may not be enough for.
        _wait_for_step(tmp_path, 3, deadline=time.monotonic() + 90)
        victims = _worker_pids(f"--steps {steps}")
        assert len(victims) == 2, (victims, open(tmp_path / "job.log").read()[-3000:])
        # Paddle's launcher names the first failed rank in rank order: when the survivor's oneCCL
        # aborts on the lost peer before the launcher looks, a killed rank 1 would be named second.
        # Killing rank 0 there names the victim whatever the order of the two failures.
        victim = next(p for p in victims if _rank_of(p) == 0) if launcher == "paddle" else victims[-1]
        victim_rank = _rank_of(victim)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        while _worker_pids(f"--steps {steps}") and time.monotonic() - killed_at < 60:
            time.sleep(0.5)
        assert not _worker_pids(f"--steps {steps}"), "ranks left running 60 s after one was killed"
        assert job.wait(timeout=30) != 0
        # The launcher names the rank that disappeared and how.
        log_text = open(tmp_path / "job.log").read()
        named = (rf"process rank {victim_rank} with PID \d+ on node \S+ exited on\s+signal 9"
                 if launcher == "mpirun" else rf"Container rank {victim_rank} status failed .* code -9")
        assert re.search(named, log_text), log_text[-3000:]
    finally:
        if job.poll() is None:
            job.kill()
        for pid in _worker_pids(f"--steps {steps}"):
            os.kill(pid, signal.SIGKILL)


def test_a_nan_gradient_stops_every_rank_naming_the_step_and_tensor():
    """check_finite: rank 1's NaN reaches every rank's reduced gradients; each rank stops at that
    step with the gradient's name (the job ends through the abort path, non-zero, no hang)."""
    start = time.monotonic()
    proc = run_ranks(train_with_a_nan_on_rank_1, 2, timeout=90, check=False)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    assert "finished without noticing" not in proc.stdout
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "non-finite value" in line]
    assert lines, out[-3000:]
    assert all("step 3" in line and "@GRAD" in line and "after AllReduce of bucket" in line for line in lines), lines


STALL_TIMEOUT_S = 5


def train_with_rank_1_stalling(mode, backend, timeout_s):
    """On every rank: rank 1 stops taking part before step 3, frozen (``mode="freeze"``: SIGSTOP) or
    alive but elsewhere (``"sleep"``: sleeping between steps); the others must stop within about
    ``timeout_s`` with the watchdog's report. The transport follows the launcher."""
    import signal

    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.zoo import build_program

    paddle.enable_static()
    t = make_transport()
    main, startup, _, loss = build_program("mnist_mlp", "sgd")
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main, transport=t, backend=backend, timeout_s=float(timeout_s), bucket_mb=0.1)
    for step in range(6):
        if step == 3 and t.rank == 1:
            print(f"[rank 1] {mode} before step 3", flush=True)
            if mode == "freeze":
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(600)
        exe.run(main, feed={"x": np.ones((8, 784), np.float32), "y": np.zeros((8, 1), np.int64)}, fetch_list=[loss])
        print(f"[rank {t.rank}] step {step} done", flush=True)
    print(f"[rank {t.rank}] finished without noticing the stall", flush=True)


# What the stalling job's ranks have on their command line (tests/rank_main.py's target).
STALLING_RANKS = f"{os.path.basename(__file__)}::{train_with_rank_1_stalling.__name__}"


def _assert_stall_report(output: str, waiting_ranks: list[int], rank_state: str):
    """Every waiting rank printed the watchdog's report naming rank 1 as missing."""
    for rank in waiting_ranks:
        match = re.search(rf"\[rank {rank}\] paddle_ngraph: aborting the job: stall: .*", output)
        assert match, output[-4000:]
        line = match.group(0)
        assert f"timeout_s {STALL_TIMEOUT_S}" in line and "in step 3" in line, line
        assert re.search(rf"missing: rank 1 \({rank_state}", line), line
        assert "not submitted: the input check of step 3" in line, line
    assert "finished without noticing" not in output


# One backend, 3 ranks: the waiting ranks stall in the engine's input check of step 3, before the
# backend's executable is called (the watchdog's position there is the engine's, not the backend's
# counters), so the INTERPRETER would run the same path; 3 ranks make two ranks wait and report.
# 2 ranks on the CPU backend stall the same way under the launcher and in the stays-away test below.
@pytest.mark.parametrize("backend,nranks", [("CPU", 3)])
def test_a_frozen_rank_stops_every_rank_naming_it_under_mpirun(backend, nranks):
    """Rank 1 is SIGSTOPped (alive to the launcher, absent from the collectives): the others stop
    after timeout_s with the report, and the job ends without orphans."""
    start = time.monotonic()
    proc = run_ranks(train_with_rank_1_stalling, nranks, "freeze", backend, STALL_TIMEOUT_S, timeout=120,
                     check=False)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    _assert_stall_report(proc.stdout + proc.stderr, [r for r in range(nranks) if r != 1], "silent for")
    assert not _left_after(STALLING_RANKS, 15)


def train_dygraph_with_rank_1_sleeping(timeout_s):
    """On every rank: a Layer on the engine; rank 1 sleeps before step 3 while the others wait for it
    in the backward's gradient AllReduce. They must stop within about ``timeout_s``."""
    import numpy as np
    import paddle

    import paddle_ngraph

    model = paddle_ngraph.DataParallel(paddle.nn.Sequential(paddle.nn.Linear(6, 8), paddle.nn.ReLU(),
                                                            paddle.nn.Linear(8, 2)), timeout_s=float(timeout_s))
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    rank = paddle.distributed.get_rank()
    for step in range(6):
        if step == 3 and rank == 1:
            print("[rank 1] sleep before step 3", flush=True)
            time.sleep(600)
        model(paddle.to_tensor(np.ones((4, 6), np.float32))).square().mean().backward()
        opt.step()
        opt.clear_grad()
        print(f"[rank {rank}] step {step} done", flush=True)
    print(f"[rank {rank}] finished without noticing the stall", flush=True)


def test_a_rank_that_stays_away_from_a_dygraph_backward_is_named_under_mpirun():
    """The stall watchdog bounds a dygraph Layer's gradient AllReduce too (timeout_s had no effect
    there: rank 0 waited as long as rank 1 slept)."""
    start = time.monotonic()
    proc = run_ranks(train_dygraph_with_rank_1_sleeping, 2, STALL_TIMEOUT_S, timeout=120, check=False)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    match = re.search(r"\[rank 0\] paddle_ngraph: aborting the job: stall: .*", output)
    assert match, output[-4000:]
    assert f"timeout_s {STALL_TIMEOUT_S}" in match.group(0) and "missing: rank 1" in match.group(0), match.group(0)
    assert "finished without noticing" not in output


def test_a_rank_that_stays_away_is_named_alive_under_mpirun():
    proc = run_ranks(train_with_rank_1_stalling, 2, "sleep", "CPU", STALL_TIMEOUT_S, timeout=120, check=False)
    assert proc.returncode != 0
    _assert_stall_report(proc.stdout + proc.stderr, [0], r"alive; between steps, last in step 2")
    assert not _left_after(STALLING_RANKS, 15)


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_a_frozen_rank_stops_every_rank_naming_it_under_paddle_launch():
    start = time.monotonic()
    run = run_ranks(train_with_rank_1_stalling, 2, "freeze", "CPU", STALL_TIMEOUT_S, timeout=120, launcher="launch",
                    check=False)
    code, logs = run.returncode, run.output
    assert time.monotonic() - start < 60
    assert code != 0
    _assert_stall_report(logs, [0], "silent for")
    assert not _left_after(STALLING_RANKS, 15)


def _tiny_program(train: bool):
    """x [N, 8] -> fc -> squared error against y, in the current IR; ``train``: with SGD (its
    gradients are averaged over the ranks). The same parameter names whichever is built, as an
    evaluation program has."""
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 8], "float32")
        y = paddle.static.data("y", [None, 1], "float32")
        out = paddle.static.nn.fc(x, 1, weight_attr=paddle.ParamAttr(name="w"), bias_attr=paddle.ParamAttr(name="b"))
        loss = paddle.nn.functional.square_error_cost(out, y).mean()
        if train:
            paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def run_with_rank_1_off_script(ir, cases, timeout_s):
    """On every rank, a program of ``ir`` on 2 ranks, the cases in ``cases`` one after the other, each
    caught: ``"missing_feed"``, rank 1 leaves out feed 'y' at step 1; ``"different_programs"``, a
    training and an evaluation program run alternately, rank 1 skipping the first evaluation.
    Prints ``[rank r] <case> STOPPED after <s>s: <message>`` for each case, ``<case> no error``
    where there was none."""
    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport

    paddle.enable_static()
    t = make_transport()
    feed = {"x": np.ones((4, 8), np.float32), "y": np.zeros((4, 1), np.float32)}
    with paddle.pir_utils.OldIrGuard() if ir == "legacy" else paddle.pir_utils.IrGuard():
        train, startup, loss = _tiny_program(train=True)
        evaluate, _, eval_loss = _tiny_program(train=False)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle_ngraph.transpile(train, transport=t, timeout_s=float(timeout_s))
        paddle_ngraph.transpile(evaluate, transport=t, timeout_s=float(timeout_s))
        if "missing_feed" in cases:
            calls = [(train, feed, loss)] * 3
            calls[1] = (train, {"x": feed["x"]} if t.rank == 1 else feed, loss)
            _run_calls(exe, t.rank, "missing_feed", calls)
        if "different_programs" in cases:
            calls = [(train, feed, loss), (evaluate, feed, eval_loss)] * 2
            if t.rank == 1:
                del calls[1]
            _run_calls(exe, t.rank, "different_programs", calls)
    print(f"[rank {t.rank}] finished", flush=True)


def _run_calls(exe, rank, case, calls):
    start = time.time()
    try:
        for program, feed, fetched in calls:
            exe.run(program, feed=feed, fetch_list=[fetched])
    except Exception as e:
        message = " ".join(str(e).split())
        message = message[message.find("ExecutionError"):] if "ExecutionError" in message else message[-600:]
        print(f"[rank {rank}] {case} STOPPED after {time.time() - start:.1f}s: {message}", flush=True)
        return
    print(f"[rank {rank}] {case} no error", flush=True)


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_a_missing_feed_and_ranks_in_different_programs_stop_every_rank_at_once(ir):
    """Two cases in one job (each caught on every rank, then the next), with the watchdog at its
    default 60 s: a feed rank 1 leaves out, which Paddle would refuse on rank 1 alone before the
    engine runs; and rank 1 running the training program while rank 0 runs the evaluation program,
    each at its own engine's input check, whose collectives would otherwise match each other's."""
    start = time.monotonic()
    proc = run_ranks(run_with_rank_1_off_script, 2, ir, ("missing_feed", "different_programs"), 60, timeout=120)
    assert time.monotonic() - start < 50  # Paddle's start-up on 2 ranks; a stall would take 60 s
    for rank in range(2):
        out = proc.rank_stdout[rank]
        missing = re.search(rf"\[rank {rank}\] missing_feed STOPPED after ([\d.]+)s: (.*)", out)
        assert missing, out[-3000:]
        assert float(missing.group(1)) < 10, missing.group(0)
        assert ("step 1: feeds rejected on rank(s) [1], so every rank stops: rank 1: feed 'y' missing"
                in missing.group(2)), missing.group(0)
        different = re.search(rf"\[rank {rank}\] different_programs STOPPED after ([\d.]+)s: (.*)", out)
        assert different, out[-3000:]
        assert float(different.group(1)) < 10, different.group(0)
        line = different.group(2)
        assert "the ranks are running different transpiled programs at this exe.run, so every rank stops" in line, line
        assert re.search(r"rank 0: engine \d+ at its step 0 \(\d+ ops, 0 collective\(s\)", line), line
        assert re.search(r"rank 1: engine \d+ at its step 2 \(\d+ ops, [1-9]\d* collective\(s\)", line), line
        assert f"[rank {rank}] finished" in out
