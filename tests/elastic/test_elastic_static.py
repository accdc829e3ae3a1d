"""Elastic training of static programs under the real mpirun with Open MPI's fault tolerance.

Two variants, each killed (SIGKILL) in world rank 1 at step KILL_STEP and compared bit for bit
with a reference that trains three ranks to the commit after step COMMITTED (saved to disk) and
two ranks from it (loaded), as separate jobs:

- ``plain`` (legacy IR, CPU backend, whose AllReduce runs from C++ on the group's communicator):
  a wide layer makes a large gradient bucket, and world rank 1 dies 0.3 s late for step 5, while
  the others wait for it inside that native AllReduce;
- ``zero1_accumulate`` (PIR, INTERPRETER, through fleet's strategy.ngraph): ZeRO-1 and
  accumulate_steps=2, with the commit after step 3, between the two calls of an update: the
  commit holds the gathered optimizer state and the averaged accumulated gradient, and the two
  survivors finish that update. A new rank then joins at their first commit (after step 6, host
  discovery listing room for three): the reference's last job is three ranks from that commit.

Under paddle.distributed.launch (whose launcher, with an etcd master, restarts every rank after a
loss) each configuration (``zero1_accumulate`` with and without fleet) resumes from the newest
commit on disk at elastic.run's start, bitwise as a job that loads that commit itself.

A third job kills world rank 0 (the writer) while it writes commit(save=True): the checkpoint
before it stays the latest and loads, equal to the reference's of that commit; the survivors'
next save removes the half-written directory.

The global batch is kept (12 rows per step: 4 on each of 3 ranks, 6 on each of 2).
"""
import glob
import os
import signal
import threading
import time

import numpy as np
import pytest

from ranks import run_ranks
from ulfm import run_ulfm_job

pytestmark = pytest.mark.distributed

STEPS = 8
KILL_STEP = 5
REJOINED = 6           # the zero1_accumulate job grows back to three at its commit after step 6
COMMITTED = 3          # commits after steps 3 and 6 (step % 3 == 0): the kill at 5 goes back to 3
COMMIT_NUMBER = 2      # the start is commit 1
KILLED_WORLD_RANK = 1
TIMEOUT = 240
VARIANTS = {
    "plain": {"ir": "legacy", "hidden": 262144, "config": {"backend": "CPU"}},
    # Through fleet: strategy.ngraph with these ngraph_configs, state.transpile() without keys.
    "zero1_accumulate": {"ir": "pir", "hidden": 16, "fleet": True, "rejoin": True,
                         "config": {"backend": "INTERPRETER", "zero_stage": 1, "accumulate_steps": 2}},
}
# Under paddle.distributed.launch: the same two configurations, the second through fleet (whose
# minimize connects the ccl transport that state.transpile then reuses), as under mpirun.
LAUNCHED_VARIANTS = {
    "plain_launched": {"ir": "legacy", "hidden": 64, "config": {"backend": "CPU"}},
    "zero1_accumulate_fleet_launched": {"ir": "pir", "hidden": 16, "fleet": True,
                                        "config": {"backend": "INTERPRETER", "zero_stage": 1, "accumulate_steps": 2}},
}


def _settings(variant: str) -> dict:
    return VARIANTS[variant] if variant in VARIANTS else LAUNCHED_VARIANTS[variant]


def _setup(variant: str, checkpoint_dir, seed: int):
    """The variant's State over a fresh program (built in the variant's IR: run it under
    ``_ir(variant)`` too), its executor and loss."""
    import paddle

    from paddle_ngraph import elastic
    from static_models import build, fleet_optimizer

    paddle.seed(seed)  # different on every rank: elastic.run starts them all from rank 0's
    settings = _settings(variant)
    wrap = fleet_optimizer(settings["config"]) if settings.get("fleet") else None
    main, startup, loss = build(hidden=settings["hidden"], distributed_optimizer=wrap)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    return elastic.State(program=main, checkpoint_dir=checkpoint_dir, step=0), exe, loss


def _ir(variant: str):
    import paddle

    paddle.enable_static()
    return paddle.pir_utils.OldIrGuard() if _settings(variant)["ir"] == "legacy" else paddle.pir_utils.IrGuard()


def _die_while_the_others_wait_in_the_allreduce():
    """World rank 1 dies 0.3 s late for its step, the others having gone ahead into the CPU
    backend's native AllReduce of that step, where they wait for its gradients: the failure must
    reach ranks blocked in C++ (the first to see it revokes the communicator)."""
    print(f"world rank {KILLED_WORLD_RANK}: dying while the others wait in the AllReduce", flush=True)
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)


def _die_while_writing(root: str, commit: int):
    """SIGKILLs this process once the temporary directory of checkpoint ``commit`` appears."""
    def watch():
        while not glob.glob(os.path.join(root, f"step-{commit:06d}.tmp-*")):
            time.sleep(0.0005)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def _world() -> int:
    """mpirun's rank, or for a process the group spawned, the world rank it gave; under Paddle's
    launcher, its rank."""
    for name in ("PADDLE_NGRAPH_ELASTIC_WORLD_RANK", "OMPI_COMM_WORLD_RANK", "PADDLE_TRAINER_ID"):
        if name in os.environ:
            return int(os.environ[name])
    raise KeyError("no rank in the environment")


def _train(state, exe, loss, variant, stop_at, *, kill=None, save_every=False, save_at=None, root=None,
           grow=False):
    from paddle_ngraph import elastic
    from static_models import batch, persistables

    world = _world()
    from paddle_ngraph.transpiler import engines_of

    groups, seen_on_reset, engine_kinds, communicators = [], [], [], []
    state.register_reset_callbacks([lambda: seen_on_reset.append(_disk(root))])

    # Host discovery (a callable here) lists room for three ranks all along: a rank joins at the
    # first commit after the loss.
    growth = {"max_ranks": 3, "discovery": lambda: ["localhost:3"], "discovery_interval": 0} if grow else {}

    @elastic.run(min_ranks=2, **growth)
    def train(state):
        settings = _settings(variant)
        keys = {} if settings.get("fleet") else settings["config"]  # fleet's: recorded at its minimize
        program, (fetch,) = state.transpile([loss], **keys)  # for the current group
        rank, size = elastic.rank(), elastic.size()
        groups.append((size, state.step))
        engine = engines_of(program)[0]
        engine_kinds.append((engine.sharded is not None, engine.accumulate_steps))
        if kill == "commit" and world == 0:
            _die_while_writing(root, COMMIT_NUMBER + 1)  # the save after step 6
        while state.step < stop_at:
            if kill == "allreduce" and world == KILLED_WORLD_RANK and state.step == KILL_STEP:
                _die_while_the_others_wait_in_the_allreduce()
            if kill == "step" and world == KILLED_WORLD_RANK and state.step == KILL_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            exe.run(program, feed=batch(state.step, rank, size), fetch_list=[fetch])
            if len(communicators) < len(groups):  # how this group's first step reached the others
                communicators.append(getattr(engine.executable, "communicator", None))
            state.step += 1
            if state.step % COMMITTED == 0:
                state.commit(save=save_every or state.step == save_at)
        if save_every:
            state.commit(save=True)

    train(state)
    return {"persistables": persistables(state), "groups": groups, "step": state.step, "disk": seen_on_reset,
            "engines": engine_kinds, "communicators": communicators}


def _disk(root):
    from paddle_ngraph.checkpoint import latest_checkpoint

    if root is None:
        return None
    return {"latest": latest_checkpoint(root), "partial": sorted(os.path.basename(p) for p in
                                                                 glob.glob(os.path.join(root, "*.tmp-*")))}


def elastic_job(root, variant):
    with _ir(variant):
        state, exe, loss = _setup(variant, root, seed=_world())
        return _train(state, exe, loss, variant, STEPS, kill="allreduce" if variant == "plain" else "step",
                      grow=VARIANTS[variant].get("rejoin", False))


def commit_kill_job(root):
    with _ir("plain"):
        state, exe, loss = _setup("plain", root, seed=int(os.environ["OMPI_COMM_WORLD_RANK"]))
        return _train(state, exe, loss, "plain", STEPS, kill="commit", save_every=True, root=root)


def reference_to_commit(roots: dict):
    """Every variant, one after the other, on three ranks to the commit after step COMMITTED, saved."""
    results = {}
    for variant, root in roots.items():
        with _ir(variant):
            state, exe, loss = _setup(variant, root, seed=int(os.environ["OMPI_COMM_WORLD_RANK"]))
            results[variant] = _train(state, exe, loss, variant, COMMITTED, save_at=COMMITTED)
    return results


def reference_from_commit(roots: dict):
    """Every variant on two ranks from its commit on disk to the end; a variant that rejoins saves
    its commit after step REJOINED."""
    results = {}
    for variant, root in roots.items():
        with _ir(variant):
            state, exe, loss = _setup(variant, root, seed=100 + int(os.environ["OMPI_COMM_WORLD_RANK"]))
            assert state.load() == COMMIT_NUMBER
            rejoin = VARIANTS[variant].get("rejoin", False)
            results[variant] = _train(state, exe, loss, variant, STEPS, save_at=REJOINED if rejoin else None)
    return results


def reference_rejoined(roots: dict):
    """The variants that rejoin, on three ranks from their commit after step REJOINED to the end."""
    results = {}
    for variant, root in roots.items():
        with _ir(variant):
            state, exe, loss = _setup(variant, root, seed=200 + int(os.environ["OMPI_COMM_WORLD_RANK"]))
            assert state.load() == COMMIT_NUMBER + 1
            results[variant] = _train(state, exe, loss, variant, STEPS)
    return results


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The variants' references: three ranks to the commit after step COMMITTED, two from it; the
    variants that rejoin also three from the commit after step REJOINED. Each job runs every
    variant it concerns."""
    roots = {variant: str(tmp_path_factory.mktemp(f"reference_{variant}")) for variant in VARIANTS}
    run_ulfm_job(reference_to_commit, 3, roots, timeout=TIMEOUT)
    second = run_ulfm_job(reference_from_commit, 2, roots, timeout=TIMEOUT)
    rejoining = {v: root for v, root in roots.items() if VARIANTS[v].get("rejoin")}
    third = run_ulfm_job(reference_rejoined, 3, rejoining, timeout=TIMEOUT)
    return {variant: ([r[variant] for r in second.results], roots[variant],
                      [r[variant] for r in third.results] if variant in rejoining else None)
            for variant in VARIANTS}


def _assert_bitwise(got: dict, want: dict, what: str):
    assert sorted(got) == sorted(want), what
    for name in want:
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name]), \
            f"{what}: {name} differs by up to {np.abs(got[name] - want[name]).max()}"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_static_survives_a_lost_rank_bitwise_equal_to_restarting_on_two(reference, variant, tmp_path):
    second, _, third = reference[variant]
    rejoin = VARIANTS[variant].get("rejoin", False)
    run = run_ulfm_job(elastic_job, 3, str(tmp_path), variant, timeout=TIMEOUT, check=False,
                       joining=1 if rejoin else 0)
    assert run.ends[KILLED_WORLD_RANK] is None, run.report("the killed rank reported an end")
    if variant == "plain":
        assert "dying while the others wait" in run.rank_stdout[KILLED_WORLD_RANK], run.report("not killed there")
        # The survivors' engines ran their AllReduce from C++ on the group's communicator.
        for world in (0, 2):
            assert run.results[world]["communicators"] == ["MPI_Allreduce on a group of 3 ranks",
                                                           "MPI_Allreduce on a group of 2 ranks"], run.report("path")
    # Each group's copy was transpiled with the variant's configuration (fleet's, recorded at minimize).
    config = VARIANTS[variant]["config"]
    engine = (config.get("zero_stage", 0) == 1, config.get("accumulate_steps", 1))
    joined = 3  # the world rank of the process the group spawns
    for world in (0, 2, joined) if rejoin else (0, 2):
        assert run.ends[world] is not None and run.ends[world]["exit"] == 0, run.report(f"world rank {world}")
        result = run.results[world]
        assert result["step"] == STEPS
        groups = [(3, 0), (2, COMMITTED)] + ([(3, REJOINED)] if rejoin else [])
        if world == joined:
            groups = [(3, REJOINED)]
        else:
            assert "lost world rank(s) [1]" in run.rank_stderr[world], run.report("no recovery message")
        assert result["groups"] == groups, run.report(f"groups of world rank {world}")
        assert result["engines"] == [engine] * len(groups)
        # Parameters, moments, beta powers, learning rate: every persistable variable.
        want = third[0] if rejoin else second[0]
        _assert_bitwise(result["persistables"], want["persistables"], f"{variant}: world rank {world}")
    assert second[0]["groups"] == [(2, COMMITTED)]
    _assert_bitwise(second[1]["persistables"], second[0]["persistables"], "reference rank 1")
    if rejoin:
        assert third[0]["groups"] == [(3, REJOINED)]
        assert "world rank(s) [3] joined" in run.rank_stderr[0], run.report("no join message")


def _files(path: str) -> dict:
    import pickle

    found = {}
    for name in ("model.pdparams", "model.pdopt"):
        with open(os.path.join(path, name), "rb") as f:
            found.update(pickle.load(f))
    return found


def test_a_kill_while_writing_a_commit_leaves_the_one_before_loadable(reference, tmp_path):
    _, reference_root, _ = reference["plain"]
    root = str(tmp_path / "ckpt")
    run = run_ulfm_job(commit_kill_job, 3, root, timeout=TIMEOUT, check=False)
    assert run.ends[0] is None, run.report("world rank 0 (the writer) reported an end")
    for world in (1, 2):
        assert run.ends[world] is not None and run.ends[world]["exit"] == 0, run.report(f"world rank {world}")
        result = run.results[world]
        assert result["groups"] == [(3, 0), (2, 2 * COMMITTED)], run.report("groups")
        # At the recovery: the commit being written is a temporary directory; `latest` names the one before.
        [disk] = result["disk"]
        assert disk["latest"] == os.path.join(root, f"step-{COMMIT_NUMBER:06d}"), disk
        assert [p for p in disk["partial"] if p.startswith(f"step-{COMMIT_NUMBER + 1:06d}.tmp-")], disk
    # That checkpoint is whole: equal bit for bit to the reference's commit after the same steps.
    _assert_bitwise(_files(os.path.join(root, f"step-{COMMIT_NUMBER:06d}")),
                    _files(os.path.join(reference_root, f"step-{COMMIT_NUMBER:06d}")), "the commit before the kill")
    # The survivors' last save (new rank 0: world rank 1) replaced the leftover and holds their state.
    assert not glob.glob(os.path.join(root, "*.tmp-*"))
    last = _files(os.path.join(root, f"step-{COMMIT_NUMBER + 2:06d}"))
    _assert_bitwise(last, run.results[1]["persistables"], "the survivors' last commit")


def launched_to_commit(roots: dict):
    """Every launched variant, one after the other, to the commit after step COMMITTED, saved."""
    results = {}
    for variant, root in roots.items():
        with _ir(variant):
            state, exe, loss = _setup(variant, root, seed=_world())
            results[variant] = _train(state, exe, loss, variant, COMMITTED, save_at=COMMITTED)["groups"]
    return results


def launched_resumed(roots: dict):
    """As a rank the launcher restarted: no load of its own, elastic.run resumes each variant from
    its directory in ``roots``."""
    results = {}
    for variant, root in roots.items():
        with _ir(variant):
            state, exe, loss = _setup(variant, root, seed=300 + _world())
            results[variant] = _train(state, exe, loss, variant, STEPS)
    return results


def launched_loaded(roots: dict):
    results = {}
    for variant, root in roots.items():
        with _ir(variant):
            state, exe, loss = _setup(variant, None, seed=400 + _world())
            assert state.load(root) == COMMIT_NUMBER
            results[variant] = _train(state, exe, loss, variant, STEPS)
    return results


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Two ranks under the launcher to the commit after step COMMITTED (saved); two ranks started
    again on that directory (resumed by elastic.run); two ranks that load a copy themselves. Each job
    runs every launched variant one after the other (its own directories, State and elastic.run):
    3 jobs instead of 3 per variant."""
    import shutil

    first = {v: str(tmp_path_factory.mktemp(f"first_{v}")) for v in LAUNCHED_VARIANTS}
    again = {v: str(tmp_path_factory.mktemp(f"again_{v}")) for v in LAUNCHED_VARIANTS}
    run_ranks(launched_to_commit, 2, first, launcher="launch", timeout=TIMEOUT)
    for variant in LAUNCHED_VARIANTS:
        shutil.rmtree(again[variant])
        shutil.copytree(first[variant], again[variant])
    resumed = run_ranks(launched_resumed, 2, first, launcher="launch", timeout=TIMEOUT)
    loaded = run_ranks(launched_loaded, 2, again, launcher="launch", timeout=TIMEOUT)
    return first, resumed, loaded


@pytest.mark.parametrize("variant", sorted(LAUNCHED_VARIANTS))
def test_static_under_paddles_launcher_resumes_from_the_commit_on_disk(launched, variant):
    """Two ranks under the launcher to the commit after step COMMITTED (saved); two ranks started
    again on that directory resume from it (ZeRO-1's optimizer state sliced again, the accumulation
    cycle where the commit left it), bitwise as two ranks that load it themselves."""
    roots, resumed, loaded = launched
    first = roots[variant]
    config = LAUNCHED_VARIANTS[variant]["config"]
    engine = (config.get("zero_stage", 0) == 1, config.get("accumulate_steps", 1))
    for world in range(2):
        result, want = resumed.results[world][variant], loaded.results[world][variant]
        assert f"rank {world} of 2: resumed from commit {COMMIT_NUMBER} in {first}" in resumed.rank_stderr[world], \
            resumed.report("no resume message")
        assert result["groups"] == want["groups"] == [(2, COMMITTED)], resumed.report("groups")
        assert result["step"] == STEPS and result["engines"] == [engine]
        _assert_bitwise(result["persistables"], want["persistables"], f"{variant}: rank {world}")
