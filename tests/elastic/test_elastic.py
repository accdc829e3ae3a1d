"""Elastic training under the real mpirun with Open MPI's fault tolerance (``--with-ft ulfm``).

A rank kills itself (SIGKILL) at step KILL_STEP: the survivors go back to the commit after
COMMITTED steps and finish on two ranks. The reference trains three ranks to that commit (saved
to disk) and two ranks from it (loaded), as separate jobs: the elastic run must end with the same
bits. Below ``min_ranks`` every survivor stops with one message and the commit is on disk.
With ``max_ranks`` and a host discovery script, a new rank joins at the first commit after the
loss (a replaced pod): the group grows back to three, bitwise as a job restarted on three there.
Under paddle.distributed.launch with an etcd master the launcher restarts every rank instead: they
resume from the newest commit on disk, bitwise as a job started from that commit.

The global batch is kept (GLOBAL_BATCH rows per step, split evenly over the ranks there are:
4 rows on each of 3 ranks, 6 on each of 2), so that a step means the same update on any group.
"""
import os
import signal

import numpy as np
import pytest

from ranks import run_ranks
from ulfm import ULFM, lost_at_start, run_ulfm_job

pytestmark = pytest.mark.distributed

# ULFM's heartbeat detector, as docs/elastic.md recommends: a rank that stops answering is lost.
HEARTBEAT = tuple(__import__("paddle_ngraph.distributed.elastic_mpi", fromlist=["HEARTBEAT_OPTIONS"])
                  .HEARTBEAT_OPTIONS.split())
STEPS = 8
COMMIT_EVERY = 2
KILL_STEP = 5          # the killed rank dies before its step 5: the last commit is after step 4
COMMITTED = 4
REJOINED = 6          # the first commit after the loss: where a new rank joins
KILLED_WORLD_RANK = 1  # not the last: the survivors are renumbered (world rank 2 becomes rank 1)
GLOBAL_BATCH = 12
ROWS_PER_RANK = 4      # on_resize="scale_lr": each rank keeps 4 rows (4 x 3 ranks is the reference's too)
FEATURES = 6
TIMEOUT = 240


def _batch(step: int, rank: int, size: int, rows: int | None = None):
    """This rank's rows of the global batch of ``step``, for a group of ``size`` (``rows``: a batch
    per rank of its own, the global batch then ``rows * size``)."""
    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((GLOBAL_BATCH, FEATURES)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) * 0.5 + 0.1).astype(np.float32)
    rows = rows or GLOBAL_BATCH // size
    return x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]


def _state(checkpoint_dir, seed, sampler=None):
    import paddle

    from paddle_ngraph import elastic

    paddle.seed(seed)  # different on every rank: elastic.run starts them all from rank 0's
    # The optimizer's file is keyed by Paddle's parameter names: the same names as the saved run's.
    with paddle.utils.unique_name.guard():
        model = paddle.nn.Sequential(paddle.nn.Linear(FEATURES, 16), paddle.nn.Tanh(), paddle.nn.Linear(16, 1))
    optimizer = paddle.optimizer.Adam(learning_rate=0.05, parameters=model.parameters())
    return elastic.State(model, optimizer, checkpoint_dir=checkpoint_dir, sampler=sampler, step=0)


def _params(state):
    return {k: np.array(v) for k, v in state.model.state_dict().items()}


def _world() -> int:
    """This process's world rank: mpirun's (or the launcher's), or for a process the group spawned,
    the one it gave."""
    for name in ("PADDLE_NGRAPH_ELASTIC_WORLD_RANK", "OMPI_COMM_WORLD_RANK", "PADDLE_TRAINER_ID"):
        if name in os.environ:
            return int(os.environ[name])
    raise KeyError("no rank in the environment")


def _train_function(stop_at: int, kill_at: int | None, min_ranks: int, save_at: int | None = None,
                    state=None, freeze: bool = False, rows: int | None = None, save_every: bool = False, **growth):
    import paddle

    import paddle_ngraph
    from paddle_ngraph import elastic

    world = _world()
    groups = []
    if state is not None and growth.pop("second_loss_in_recovery", False):
        from paddle_ngraph.distributed import make_transport

        def second_loss():
            """World rank 2 dies during the recovery from the first loss; the others meet it in a
            collective of their reset callback (a user's: agreeing on a data position, say)."""
            if world == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            make_transport("auto").barrier()

        state.register_reset_callbacks([second_loss])

    @elastic.run(min_ranks=min_ranks, **growth)
    def train(state, before_step=None):
        model = paddle_ngraph.DataParallel(state.model)  # bound to the current group
        rank, size = elastic.rank(), elastic.size()
        groups.append((size, state.step))
        print(f"world rank {world}: rank {rank} of {size} from step {state.step}; global batch {GLOBAL_BATCH} "
              f"kept: {GLOBAL_BATCH // size} rows per rank", flush=True)
        while state.step < stop_at:
            if kill_at is not None and world == KILLED_WORLD_RANK and state.step == kill_at:
                os.kill(os.getpid(), signal.SIGSTOP if freeze else signal.SIGKILL)
            if before_step is not None:
                before_step(state.step)
            x, y = _batch(state.step, rank, size, rows)
            loss = ((model(paddle.to_tensor(x)) - paddle.to_tensor(y)) ** 2).mean()
            loss.backward()
            state.optimizer.step()
            state.optimizer.clear_grad()
            state.step += 1
            if state.step % COMMIT_EVERY == 0:
                state.commit(save=save_every or state.step == save_at)

    return train, groups


def elastic_job(checkpoint_dir, min_ranks, freeze=False):
    """Three ranks; world rank 1 dies at step KILL_STEP (or freezes: SIGSTOP)."""
    world = int(os.environ["OMPI_COMM_WORLD_RANK"])
    state = _state(checkpoint_dir, seed=world)
    train, groups = _train_function(STEPS, KILL_STEP, min_ranks, freeze=freeze)
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step}


def reference_to_commit(checkpoint_dir):
    """Three ranks to the commit after step COMMITTED, saved to disk."""
    state = _state(checkpoint_dir, seed=_world())
    train, _ = _train_function(COMMITTED, None, 1, save_at=COMMITTED)
    train(state)
    return {"params": _params(state), "step": state.step}


def reference_from_commit(checkpoint_dir, save_dir=None):
    """From the latest commit in ``checkpoint_dir`` to the end (that commit saved in ``save_dir``
    if given, after REJOINED steps)."""
    state = _state(save_dir, seed=100 + int(os.environ["OMPI_COMM_WORLD_RANK"]))
    state.load(checkpoint_dir)
    train, groups = _train_function(STEPS, None, 1, save_at=REJOINED if save_dir else None)
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step}


def second_loss_job(checkpoint_dir):
    """Three ranks, world rank 1 dies at step KILL_STEP and world rank 2 during the recovery."""
    state = _state(checkpoint_dir, seed=_world())
    train, groups = _train_function(STEPS, KILL_STEP, 1, state=state, second_loss_in_recovery=True)
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step}


def scale_lr_job(checkpoint_dir):
    """Three ranks of 4 rows each; world rank 1 dies at step KILL_STEP; the two survivors keep their
    4 rows (a global batch of 8) and scale the learning rate by 2/3."""
    state = _state(checkpoint_dir, seed=_world())
    train, groups = _train_function(STEPS, KILL_STEP, 2, rows=ROWS_PER_RANK, on_resize="scale_lr")
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step, "lr": state.optimizer.get_lr()}


def reference_scaled_from_commit(checkpoint_dir):
    """Two ranks of 4 rows from the commit after step COMMITTED, the learning rate set to 2/3 of it."""
    state = _state(None, seed=300 + int(os.environ["OMPI_COMM_WORLD_RANK"]))
    state.load(checkpoint_dir)
    state.optimizer.set_lr(state.optimizer.get_lr() * (2 / 3))
    state.commit()  # a commit holds a float rate: elastic.run starts every rank from the last one
    train, groups = _train_function(STEPS, None, 1, rows=ROWS_PER_RANK)
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step, "lr": state.optimizer.get_lr()}


def rejoin_job(checkpoint_dir, discovery_script):
    """Three ranks, world rank 1 dies at step KILL_STEP; discovery lists room for three all along,
    so a new rank joins the two survivors at their first commit (after step REJOINED)."""
    state = _state(checkpoint_dir, seed=_world())
    train, groups = _train_function(STEPS, KILL_STEP, 2, max_ranks=3, discovery=discovery_script,
                                    discovery_interval=0)
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step}


def _fresh_names(function, *args):
    """``function(*args)`` with Paddle's name counters as a new process has them: the optimizer's
    moments (named when first made) then have the names a commit's optimizer file holds."""
    import paddle

    with paddle.utils.unique_name.guard():
        return function(*args)


def references_on_two_from_commit(checkpoint_dir, save_dir):
    """The two references that start two ranks from the commit in ``checkpoint_dir``, one after the
    other in one job (each its own State and elastic.run): plain (saving the commit after REJOINED
    steps in ``save_dir``), and with the learning rate scaled by 2/3 by hand."""
    return {"plain": _fresh_names(reference_from_commit, checkpoint_dir, save_dir),
            "scaled": _fresh_names(reference_scaled_from_commit, checkpoint_dir)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Three ranks to the commit after step COMMITTED; two ranks from it to the end, saving the
    commit after step REJOINED (and in the same job, two ranks from it with the rate scaled by
    hand); three ranks from the commit after REJOINED to the end; one rank from the first commit."""
    from types import SimpleNamespace

    root = str(tmp_path_factory.mktemp("reference"))
    rejoined = str(tmp_path_factory.mktemp("rejoined"))
    first = run_ulfm_job(reference_to_commit, 3, root, timeout=TIMEOUT)
    on_two = run_ulfm_job(references_on_two_from_commit, 2, root, rejoined, timeout=TIMEOUT)
    second = SimpleNamespace(results=[r["plain"] for r in on_two.results])
    scaled = SimpleNamespace(results=[r["scaled"] for r in on_two.results])
    third = run_ulfm_job(reference_from_commit, 3, rejoined, timeout=TIMEOUT)
    alone = run_ulfm_job(reference_from_commit, 1, root, timeout=TIMEOUT)
    return first, second, root, third, alone, scaled


@pytest.fixture(scope="module")
def launched_to_commit(tmp_path_factory):
    """Three ranks under paddle.distributed.launch (no etcd) to the commit after step COMMITTED,
    saved: read by both tests of the launcher without a restart (what elastic.run says and trains
    there, and the commit a restart on fewer ranks resumes from)."""
    root = str(tmp_path_factory.mktemp("launched"))
    return run_ranks(reference_to_commit, 3, root, launcher="launch", timeout=TIMEOUT), root


def _assert_bitwise(got: dict, want: dict, what: str):
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name]), \
            f"{what}: parameter {name} differs by up to {np.abs(got[name] - want[name]).max()}"


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_survives_a_lost_rank_bitwise_equal_to_restarting_on_two(reference, tmp_path, how):
    """Killed: SIGKILL. Frozen: SIGSTOP, alive but silent, found by ULFM's heartbeat detector; a
    survivor on its host ends it (else mpirun would wait for it at the end)."""
    frozen = how == "frozen"
    run = run_ulfm_job(elastic_job, 3, str(tmp_path), 2, frozen, launcher_args=ULFM + (HEARTBEAT if frozen else ()),
                       timeout=TIMEOUT, check=False)
    survivors = [r for r in range(3) if r != KILLED_WORLD_RANK]
    assert run.ends[KILLED_WORLD_RANK] is None, run.report("the killed rank reported an end")
    for world in survivors:
        assert run.ends[world] == {"exit": 0, "error": None} or run.ends[world]["exit"] == 0, \
            run.report(f"world rank {world} did not finish")
        result = run.results[world]
        assert result["step"] == STEPS
        # Three ranks from the start, then two from the commit after step COMMITTED.
        assert result["groups"] == [(3, 0), (2, COMMITTED)], run.report("groups")
        assert "lost world rank(s) [1]" in run.rank_stderr[world], run.report("no recovery message")
        _assert_bitwise(result["params"], reference[1].results[0]["params"], f"world rank {world}")
    if frozen:
        assert "ended world rank 1 (pid" in run.rank_stderr[0] + run.rank_stderr[2], run.report("not fenced")
    # The reference's two phases really ran on 3 and 2 ranks, and its ranks agree.
    assert reference[1].results[0]["groups"] == [(2, COMMITTED)]
    _assert_bitwise(reference[1].results[1]["params"], reference[1].results[0]["params"], "reference rank 1")


@pytest.mark.usefixtures("dynamic_mode")
def test_below_min_ranks_every_survivor_stops_with_the_commit_on_disk(reference, tmp_path):
    import paddle

    from paddle_ngraph import elastic
    from paddle_ngraph.checkpoint import latest_checkpoint

    root = str(tmp_path / "ckpt")
    run = run_ulfm_job(elastic_job, 3, root, 3, timeout=TIMEOUT, check=False)
    assert run.returncode != 0
    for world in (0, 2):
        end = run.ends[world]
        assert end is not None and end["exit"] != 0, run.report(f"world rank {world} did not stop")
        assert "TooFewRanksError" in end["error"], run.report("not the typed error")
        message = [line for line in run.rank_stderr[world].splitlines() + end["error"].splitlines()
                   if "elastic training stopped" in line]
        assert message, run.report("no stop message")
        assert "lost world rank(s) [1]; 2 rank(s) left (world ranks [0, 2]), below min_ranks=3" in message[0]
        assert f"written to {os.path.join(root, 'step-000003')}" in message[0], message[0]
    # The commit after step COMMITTED (the third commit: the start, steps 2 and 4) loads, bit for bit.
    assert latest_checkpoint(root) == os.path.join(root, "step-000003")
    state = _state(root, seed=7)
    assert state.load() == 3
    assert state.step == COMMITTED
    _assert_bitwise(_params(state), reference[0].results[0]["params"], "loaded commit")
    # The optimizer state too: equal to the one the reference saved at the same commit.
    want = paddle.load(os.path.join(reference[2], "step-000003", "model.pdopt"))
    got = state.optimizer.state_dict()
    moments = [key for key, value in want.items() if isinstance(value, paddle.Tensor)]
    assert moments
    for key in moments:
        assert np.array_equal(np.array(got[key]), np.array(want[key])), key


def test_a_new_rank_joins_after_a_loss_bitwise_equal_to_restarting_on_three(reference, tmp_path):
    script = tmp_path / "discover_hosts.sh"
    script.write_text("#!/bin/sh\n# the hosts this job may use, as Horovod's --host-discovery-script\necho localhost:3\n")
    script.chmod(0o755)
    run = run_ulfm_job(rejoin_job, 3, str(tmp_path / "ckpt"), str(script), timeout=TIMEOUT,
                       check=False, joining=1)
    joined = 3  # the world rank the group gives the first process it spawns
    assert run.ends[KILLED_WORLD_RANK] is None, run.report("the killed rank reported an end")
    for world in (0, 2, joined):
        assert run.ends[world] is not None and run.ends[world]["exit"] == 0, run.report(f"world rank {world} failed")
        result = run.results[world]
        assert result["step"] == STEPS
        want_groups = [(3, REJOINED)] if world == joined else [(3, 0), (2, COMMITTED), (3, REJOINED)]
        assert result["groups"] == want_groups, run.report(f"groups of world rank {world}")
        _assert_bitwise(result["params"], reference[3].results[0]["params"], f"world rank {world}")
    assert "world rank(s) [3] joined; continuing on 3 rank(s) (world ranks [0, 2, 3])" in run.rank_stderr[0], \
        run.report("no join message")
    assert "world rank 3 joined as rank 2 of 3" in run.rank_stderr[joined], run.report("no message of the new rank")
    # The reference's last phase really ran on three ranks from the commit the second one saved.
    assert reference[3].results[0]["groups"] == [(3, REJOINED)]


def test_a_second_loss_during_the_recovery_shrinks_again(reference, tmp_path):
    run = run_ulfm_job(second_loss_job, 3, str(tmp_path), timeout=TIMEOUT, check=False)
    assert run.ends[1] is None and run.ends[2] is None, run.report("a killed rank reported an end")
    assert run.ends[0] is not None and run.ends[0]["exit"] == 0, run.report("world rank 0 did not finish")
    result = run.results[0]
    assert result["step"] == STEPS
    assert result["groups"] == [(3, 0), (1, COMMITTED)], run.report("groups")
    assert "a rank was lost during the recovery" in run.rank_stderr[0], run.report("no second recovery")
    assert "lost world rank(s) [1, 2]" in run.rank_stderr[0], run.report("not both losses named")
    _assert_bitwise(result["params"], reference[4].results[0]["params"], "world rank 0")
    assert reference[4].results[0]["groups"] == [(1, COMMITTED)]


def test_under_paddles_launcher_it_trains_as_plain_data_parallel_and_says_why(reference, launched_to_commit):
    """Paddle's launcher stops every rank when one dies: no group can survive there. The same
    script still trains (over oneCCL), from rank 0's commit, and rank 0 says what is lost and
    where a restart would resume."""
    run, root = launched_to_commit
    assert "elastic.run under paddle.distributed.launch: a lost rank ends the group" in run.rank_stderr[0], \
        run.report("no warning")
    assert f"resumes every rank from the newest commit saved in {root}" in run.rank_stderr[0]
    want = reference[0].results[0]["params"]
    for world in range(3):
        got = run.results[world]["params"]
        assert run.results[world]["step"] == COMMITTED
        for name in want:  # oneCCL sums in its own order: equal to MPI's up to rounding
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
        _assert_bitwise(got, run.results[0]["params"], f"rank {world} against rank 0")


def test_on_resize_scale_lr_keeps_each_ranks_batch_and_scales_the_learning_rate(reference, tmp_path):
    run = run_ulfm_job(scale_lr_job, 3, str(tmp_path), timeout=TIMEOUT, check=False)
    want = reference[5].results[0]
    for world in (0, 2):
        assert run.ends[world] is not None and run.ends[world]["exit"] == 0, run.report(f"world rank {world}")
        result = run.results[world]
        assert result["groups"] == [(3, 0), (2, COMMITTED)], run.report("groups")
        assert "on_resize='scale_lr': 3 -> 2 ranks, the learning rate scaled by 2/3 (0.05 -> 0.0333333)" \
            in run.rank_stderr[world], run.report("the choice is not logged")
        assert result["lr"] == want["lr"] == 0.05 * (2 / 3)
        _assert_bitwise(result["params"], want["params"], f"world rank {world}")


class _Numbers:
    """Samples 0..n-1 as (x, y) rows: what each rank trained on is read back from x."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = np.full([FEATURES], i / 100.0, dtype=np.float32)
        return x, np.array([i / 50.0], dtype=np.float32)


SAMPLES = 60  # batches of 2: 10 steps of 3 ranks, or 15 of 2


def sampler_job(checkpoint_dir):
    """Three ranks read an epoch through ElasticBatchSampler and a DataLoader; world rank 1 dies at
    step KILL_STEP. Each rank returns the sample indices of each step it trained, per call."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph import elastic

    numbers = _Numbers(SAMPLES)
    world = _world()
    sampler = elastic.ElasticBatchSampler(numbers, batch_size=2)
    state = _state(checkpoint_dir, seed=world, sampler=sampler)
    calls = []

    @elastic.run(min_ranks=2)
    def train(state):
        model = paddle_ngraph.DataParallel(state.model)
        loader = paddle.io.DataLoader(numbers, batch_sampler=sampler)
        seen = []
        calls.append((elastic.size(), state.step, seen))
        for x, y in loader:
            if world == KILLED_WORLD_RANK and state.step == KILL_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            seen.append((state.step, [int(round(v * 100)) for v in x.numpy()[:, 0]]))
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            state.optimizer.step()
            state.optimizer.clear_grad()
            sampler.record_batch()
            state.step += 1
            if state.step % COMMIT_EVERY == 0:
                state.commit()

    train(state)
    return {"calls": calls, "step": state.step, "params": _params(state)}


def test_a_sampler_keeps_the_data_position_each_sample_trained_once(tmp_path):
    run = run_ulfm_job(sampler_job, 3, str(tmp_path), timeout=TIMEOUT, check=False)
    per_step = 3 * 2
    for world in (0, 2):
        assert run.ends[world] is not None and run.ends[world]["exit"] == 0, run.report(f"world rank {world}")
        first, second = run.results[world]["calls"]
        assert (first[0], first[1], second[0], second[1]) == (3, 0, 2, COMMITTED), run.report("groups")
        rank_then = 0 if world == 0 else 2
        # Three ranks, each its slice of the steps' six samples, up to the failure.
        for step, indices in first[2][:COMMITTED]:
            assert indices == list(range(step * per_step + 2 * rank_then, step * per_step + 2 * rank_then + 2))
    # From the commit after step COMMITTED, two ranks share the rest of the epoch: each sample once.
    after = [i for world in (0, 2) for _, indices in run.results[world]["calls"][1][2] for i in indices]
    assert sorted(after) == list(range(COMMITTED * per_step, SAMPLES))
    assert run.results[0]["step"] == COMMITTED + (SAMPLES - COMMITTED * per_step) // 4
    _assert_bitwise(run.results[2]["params"], run.results[0]["params"], "world rank 2 against 0")


# --- Paddle's launcher with an etcd master: every rank restarted, resumed from the commit on disk ---

# The etcd3 client Paddle's launcher imports has protobuf code of 2020, which protobuf >= 4 refuses
# to load unless protobuf runs in pure Python; the launcher's ranks inherit it (Paddle runs there).
# gRPC's fork handlers off: with them a rank forked by the launcher sometimes aborted at its start
# (3 of 13 runs), each costing a restart.
ETCD_ENV = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python", "GRPC_ENABLE_FORK_SUPPORT": "false"}
RESTARTS = 3  # the kill's restart, and room for a rank that fails to start anyway


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    """An etcd server on the loopback for Paddle's launcher (``--master etcd://...``)."""
    import shutil
    import socket
    import subprocess
    import sys
    import time

    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("no etcd binary: Debian's etcd-server package (make test-debs installs it)")
    probe = subprocess.run([sys.executable, "-c", "import etcd3"], env={**os.environ, **ETCD_ENV},
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"Paddle's launcher cannot import its etcd client etcd3 (pip install etcd3): "
                    f"{probe.stderr.strip().splitlines()[-1:]}")
    client, peer = _free_port(), _free_port()
    data = tmp_path_factory.mktemp("etcd")
    log = open(data / "etcd.log", "w")
    server = subprocess.Popen([binary, "--data-dir", str(data / "data"), "--name", "pdng-test",
                               "--listen-client-urls", f"http://127.0.0.1:{client}",
                               "--advertise-client-urls", f"http://127.0.0.1:{client}",
                               "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                               "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                               "--initial-cluster", f"pdng-test=http://127.0.0.1:{peer}"],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", client), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"etcd did not start: {(data / 'etcd.log').read_text()[-2000:]}")
                time.sleep(0.2)
        yield f"etcd://127.0.0.1:{client}"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def restarted_job(checkpoint_dir, killed_marker):
    """Three ranks under the launcher, every commit saved; world rank 1 kills itself at step
    KILL_STEP once the commit after step COMMITTED is on disk (rank 0 writes it, the others do not
    wait for that), and only in the first run (``killed_marker``): the launcher restarts all three,
    which resume from that commit."""
    import time

    from paddle_ngraph.checkpoint import latest_checkpoint

    world = _world()
    state = _state(checkpoint_dir, seed=200 + world)
    train, groups = _train_function(STEPS, None, 1, save_every=True)

    def before_step(step):
        if world == KILLED_WORLD_RANK and step == KILL_STEP and not os.path.exists(killed_marker):
            committed = os.path.join(checkpoint_dir, "step-000003")  # commits: the start, steps 2 and 4
            deadline = time.time() + 120
            while latest_checkpoint(checkpoint_dir) != committed and time.time() < deadline:
                time.sleep(0.05)
            open(killed_marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    train(state, before_step)
    return {"params": _params(state), "groups": groups, "step": state.step}


def launched_from_commit(checkpoint_dir):
    """The reference: three ranks under the launcher (no etcd, nothing killed), from the latest
    commit in ``checkpoint_dir`` to the end."""
    state = _state(None, seed=400 + _world())
    state.load(checkpoint_dir)
    train, groups = _train_function(STEPS, None, 1)
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step}


def test_under_paddles_launcher_with_etcd_every_rank_restarts_from_the_commit_on_disk(etcd, tmp_path):
    """Paddle's launcher with an etcd master restarts every rank after one dies (not the group
    alone: all of them, from the script's start); elastic.run resumes them from the newest commit
    on disk. The end is bitwise the reference's: three ranks started from that commit."""
    import shutil

    from paddle_ngraph.checkpoint.files import LATEST

    root, marker = str(tmp_path / "ckpt"), str(tmp_path / "killed")
    run = run_ranks(restarted_job, 3, root, marker, launcher="launch", env=ETCD_ENV, timeout=TIMEOUT,
                    launcher_args=("--master", etcd, "--nnodes", "1", "--max_restart", str(RESTARTS),
                                   "--elastic_level", "1", "--job_id", "restart-from-disk"))
    assert os.path.exists(marker), run.report("world rank 1 was not killed")
    assert "Pod failed" in run.launcher_output, run.report("the launcher saw no failure")
    for world in range(3):
        result = run.results[world]
        assert result["step"] == STEPS
        # The restarted run: three ranks from the commit after step COMMITTED.
        assert result["groups"] == [(3, COMMITTED)], run.report(f"groups of world rank {world}")
        assert f"rank {world} of 3: resumed from commit 3 in {root}" in run.rank_stderr[world], \
            run.report("no resume message")
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    shutil.copytree(os.path.join(root, "step-000003"), reference_dir / "step-000003")
    (reference_dir / LATEST).write_text("step-000003\n")
    reference = run_ranks(launched_from_commit, 3, str(reference_dir), launcher="launch", timeout=TIMEOUT)
    for world in range(3):
        assert reference.results[world]["groups"] == [(3, COMMITTED)]
        _assert_bitwise(run.results[world]["params"], reference.results[world]["params"], f"world rank {world}")


def launched_scaled_job(checkpoint_dir):
    """Resumed by elastic.run from the commit in ``checkpoint_dir`` (three ranks') on the ranks the
    launcher started, each keeping its 4 rows, the learning rate scaled by on_resize."""
    state = _state(checkpoint_dir, seed=500 + _world())
    train, groups = _train_function(STEPS, None, 1, rows=ROWS_PER_RANK, on_resize="scale_lr")
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step, "lr": state.optimizer.get_lr()}


def launched_scaled_reference(checkpoint_dir):
    """Loaded by hand, the rate set to 2/3 of it by hand, on two ranks of 4 rows each."""
    state = _state(None, seed=600 + _world())
    state.load(checkpoint_dir)
    state.optimizer.set_lr(state.optimizer.get_lr() * (2 / 3))
    state.commit()
    train, groups = _train_function(STEPS, None, 1, rows=ROWS_PER_RANK)
    train(state)
    return {"params": _params(state), "groups": groups, "step": state.step, "lr": state.optimizer.get_lr()}


def launched_scaled_job_and_reference(resumed_dir, reference_dir):
    """launched_scaled_job, then its reference, one after the other in one job: elastic.run under
    the launcher resumes each State from its own directory (the reference's has none: it loads its
    copy by hand), so the first leaves nothing the second reads."""
    return {"resumed": _fresh_names(launched_scaled_job, resumed_dir),
            "reference": _fresh_names(launched_scaled_reference, reference_dir)}


def test_under_paddles_launcher_a_restart_on_fewer_ranks_applies_on_resize(launched_to_commit, tmp_path):
    """A restart may come up with fewer ranks (an etcd master with --nnodes MIN:MAX and a node
    gone): the resumed commit says it was taken on three, and on_resize='scale_lr' scales the rate
    for two, bitwise as a job given that rate by hand."""
    import shutil
    from types import SimpleNamespace

    _, saved = launched_to_commit
    resumed, reference_dir = (str(tmp_path / name) for name in ("resumed", "reference"))
    shutil.copytree(saved, resumed)
    shutil.copytree(saved, reference_dir)
    # The job's stderr holds the resumed run's messages (the reference's prints no resize).
    run = run_ranks(launched_scaled_job_and_reference, 2, resumed, reference_dir, launcher="launch", timeout=TIMEOUT)
    reference = SimpleNamespace(results=[r["reference"] for r in run.results])
    for world in range(2):
        result = run.results[world]["resumed"]
        assert result["groups"] == [(2, COMMITTED)] and result["step"] == STEPS, run.report("groups")
        assert "on_resize='scale_lr': 3 -> 2 ranks" in run.rank_stderr[world], run.report("no resize message")
        assert result["lr"] == reference.results[world]["lr"] == 0.05 * (2 / 3)
        _assert_bitwise(result["params"], reference.results[world]["params"], f"world rank {world}")


def lost_at_start_job(checkpoint_dir):
    """World rank 1 dies after MPI_Init but before the elastic group is formed; the others call
    elastic.run. (A rank dead before MPI_Init leaves the others in MPI_Init: Open MPI's start-up.)"""
    from mpi4py import MPI  # MPI_Init

    MPI.COMM_WORLD.Barrier()
    if _world() == KILLED_WORLD_RANK:
        os.kill(os.getpid(), signal.SIGKILL)
    return elastic_job(checkpoint_dir, 2)


def test_a_rank_lost_before_the_group_forms_ends_every_survivor_with_the_typed_error(tmp_path):
    """No commit exists yet: the survivors cannot go back to one. Each raises LostAtStartError and
    ends without MPI_Finalize (which would wait for the dead rank), so the job ends, none hangs."""
    run = run_ranks(lost_at_start_job, 3, str(tmp_path), launcher_args=ULFM, timeout=120, check=False)
    assert run.returncode != 0
    assert run.ends[KILLED_WORLD_RANK] is None, run.report("the killed rank reported an end")
    for world in (0, 2):
        end = run.ends[world]
        assert end is not None and end["exit"] != 0, run.report(f"world rank {world} did not stop")
        assert "LostAtStartError" in end["error"], run.report("not the typed error")
        assert "died before the elastic group was formed" in end["error"], run.report("no message")
    assert lost_at_start(run), run.report("run_ulfm_job would not know this job for one to start again")
