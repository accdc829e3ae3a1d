"""Checkpoints of a tensor-parallel legacy static program (docs/model-parallel.md, checkpoint/shards.py),
on 4 ranks (2 data-parallel replicas of a model sharded over mp_degree 2), under the real mpirun, on
both backends (each job trains a program per backend).

Two jobs. The first trains the model 7 steps straight (recording its state after 5) and, in a scope
of its own, 3 steps that it saves. The second, a new job, loads that checkpoint, trains 2 more steps,
saves, and trains on. Checked: the first replica of each shard writes its own files (``model.tp00``,
``model.tp01``), the second replica nothing; steps 4 and 5 after the resume are the straight run's
bitwise (losses, parameters and Adam's moments); the dense checkpoint reassembled from the shards
(tools/assemble_checkpoint.py) holds the shards concatenated along their axes, and Paddle's dense model loaded from it (one
process, the replicas' batches concatenated) gives the mp run's losses of steps 6 and 7 (the second
depends on the reassembled moments).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from ranks import run_ranks

ASSEMBLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "assemble_checkpoint.py")
VOCAB, EMB, SEQ, HIDDEN, MIDDLE, CLASSES = 8, 6, 3, 10, 6, 4
BATCH, LR, SEED, MP, NRANKS = 4, 0.05, 11, 2, 4
SAVED_AT, RESUMED_TO, STRAIGHT = 3, 5, 7
BACKENDS = ("CPU", "INTERPRETER")
# name -> (full shape, the axis split's layer cuts, or None: whole on every rank)
PARAMS = {"emb": ((VOCAB, EMB), 0),
          "w0": ((SEQ * EMB, HIDDEN), 1), "b0": ((HIDDEN,), 0),    # column-parallel
          "w1": ((HIDDEN, MIDDLE), 0), "b1": ((MIDDLE,), None),    # row-parallel: the bias is whole
          "w2": ((MIDDLE, CLASSES), 1), "b2": ((CLASSES,), 0)}     # column-parallel, output gathered


def full_weights() -> dict:
    rng = np.random.default_rng(SEED)
    return {name: rng.uniform(-0.5, 0.5, shape).astype("float32") for name, (shape, _) in PARAMS.items()}


def batch(step: int, replica: int):
    rng = np.random.default_rng(100 * step + replica)
    return rng.integers(0, VOCAB, (BATCH, SEQ)).astype("int64"), rng.integers(0, CLASSES, (BATCH, 1)).astype("int64")


def _attr(name, value):
    import paddle

    return paddle.ParamAttr(name=name, initializer=paddle.nn.initializer.Assign(value))


def _strategy(backend: str):
    import paddle_ngraph  # noqa: F401  # strategy.ngraph
    import paddle.distributed.fleet as fleet

    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"backend": backend}
    strategy.hybrid_configs = {"dp_degree": NRANKS // MP, "mp_degree": MP}
    return strategy


def _init_fleet():
    import paddle
    import paddle.distributed.fleet as fleet

    paddle.enable_static()
    fleet.init(is_collective=True, strategy=_strategy("CPU"))
    return fleet.worker_index()


def _build_mp(rank: int, backend: str):
    """The model sharded as this rank holds it, trained by Adam (whose moments are sharded too) on
    ``backend`` (the strategy given to distributed_optimizer, over fleet.init's)."""
    import paddle
    import paddle.distributed.fleet as fleet

    mp_rank = rank % MP
    weights = {n: v if PARAMS[n][1] is None else np.split(v, MP, axis=PARAMS[n][1])[mp_rank]
               for n, v in full_weights().items()}
    split = paddle.distributed.split
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        ids = paddle.static.data("ids", [BATCH, SEQ], "int64")
        y = paddle.static.data("y", [BATCH, 1], "int64")
        h = split(ids, (VOCAB, EMB), "embedding", num_partitions=MP, weight_attr=_attr("emb", weights["emb"]))
        h = paddle.reshape(h, [BATCH, SEQ * EMB])
        h = split(h, (SEQ * EMB, HIDDEN), "linear", axis=1, num_partitions=MP, gather_out=False,
                  weight_attr=_attr("w0", weights["w0"]), bias_attr=_attr("b0", weights["b0"]))
        h = paddle.nn.functional.relu(h)
        h = split(h, (HIDDEN, MIDDLE), "linear", axis=0, num_partitions=MP,
                  weight_attr=_attr("w1", weights["w1"]), bias_attr=_attr("b1", weights["b1"]))
        h = split(h, (MIDDLE, CLASSES), "linear", axis=1, num_partitions=MP, gather_out=True,
                  weight_attr=_attr("w2", weights["w2"]), bias_attr=_attr("b2", weights["b2"]))
        loss = paddle.mean(paddle.nn.functional.cross_entropy(h, y))
        fleet.distributed_optimizer(paddle.optimizer.Adam(LR), strategy=_strategy(backend)).minimize(loss)
    return main, startup, loss


def _persistables(main) -> dict:
    """Every persistable tensor of ``main`` in the current scope: parameters, Adam's moments and
    powers of beta, the learning rate."""
    import paddle

    scope, out = paddle.static.global_scope(), {}
    for var in main.list_vars():
        if var.persistable and var.type == paddle.base.core.VarDesc.VarType.DENSE_TENSOR:
            found = scope.find_var(var.name)
            if found is not None and found.get_tensor()._is_initialized():
                out[var.name] = np.array(found.get_tensor())
    return out


def _train(exe, main, loss, steps, replica, on_step=None):
    losses = []
    for step in steps:
        ids, y = batch(step, replica)
        losses.append(float(exe.run(main, feed={"ids": ids, "y": y}, fetch_list=[loss])[0]))
        if on_step is not None:
            on_step(step + 1)
    return losses


def first_job(root: str):
    """Per backend: the straight run (state after RESUMED_TO steps kept), and a run of SAVED_AT
    steps saved under ``root/<backend>``."""
    rank = _init_fleet()
    return {backend: _first_run(os.path.join(root, backend), rank, backend) for backend in BACKENDS}


def _first_run(root: str, rank: int, backend: str):
    import paddle
    import paddle_ngraph
    from paddle_ngraph.transpiler import engines_of

    replica = rank // MP
    with paddle.pir_utils.OldIrGuard():
        with paddle.static.scope_guard(paddle.static.Scope()):
            main, startup, loss = _build_mp(rank, backend)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            kept = {}
            straight = _train(exe, main, loss, range(STRAIGHT), replica,
                              lambda done: kept.update(_persistables(main)) if done == RESUMED_TO else None)
        with paddle.static.scope_guard(paddle.static.Scope()):
            main, startup, loss = _build_mp(rank, backend)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            _train(exe, main, loss, range(SAVED_AT), replica)
            saved = paddle_ngraph.save_checkpoint(main, root, SAVED_AT)
            executables = sorted({type(e.executable).__name__ for e in engines_of(main)})
    return {"rank": rank, "straight": straight, "state": kept, "saved": saved, "executables": executables}


def resume_job(root: str):
    """A new job, per backend: loads the last checkpoint of ``root/<backend>``, trains to RESUMED_TO,
    saves, trains on to STRAIGHT."""
    rank = _init_fleet()
    return {backend: _resumed_run(os.path.join(root, backend), rank, backend) for backend in BACKENDS}


def _resumed_run(root: str, rank: int, backend: str):
    import paddle
    import paddle_ngraph

    replica = rank // MP
    with paddle.pir_utils.OldIrGuard(), paddle.static.scope_guard(paddle.static.Scope()):
        main, startup, loss = _build_mp(rank, backend)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        start = paddle_ngraph.load_checkpoint(main, root)
        resumed = _train(exe, main, loss, range(start, RESUMED_TO), replica)
        state = _persistables(main)
        saved = paddle_ngraph.save_checkpoint(main, root, RESUMED_TO)
        after = _train(exe, main, loss, range(RESUMED_TO, STRAIGHT), replica)
    return {"rank": rank, "start": start, "losses": resumed + after, "state": state, "saved": saved}


def dense_from_checkpoint(dense_root: str):
    """Paddle alone, one process: the dense model loaded from ``dense_root``, trained on the
    replicas' batches concatenated from step RESUMED_TO on. Returns (loaded step, losses, state)."""
    import paddle
    import paddle_ngraph

    F = paddle.nn.functional
    replicas = NRANKS // MP
    with paddle.pir_utils.OldIrGuard(), paddle.static.scope_guard(paddle.static.Scope()):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            ids = paddle.static.data("ids", [BATCH * replicas, SEQ], "int64")
            y = paddle.static.data("y", [BATCH * replicas, 1], "int64")
            p = {n: paddle.static.create_parameter(list(shape), "float32", attr=paddle.ParamAttr(name=n))
                 for n, (shape, _) in PARAMS.items()}
            h = paddle.reshape(F.embedding(ids, p["emb"]), [BATCH * replicas, SEQ * EMB])
            h = F.relu(F.linear(h, p["w0"], p["b0"]))
            h = F.linear(h, p["w1"], p["b1"])
            h = F.linear(h, p["w2"], p["b2"])
            loss = paddle.mean(F.cross_entropy(h, y))
            paddle.optimizer.Adam(LR).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        step = paddle_ngraph.load_checkpoint(main, dense_root)
        loaded = _persistables(main)
        losses = []
        for s in range(step, STRAIGHT):
            parts = [batch(s, r) for r in range(replicas)]
            feed = {"ids": np.concatenate([b[0] for b in parts]), "y": np.concatenate([b[1] for b in parts])}
            losses.append(float(exe.run(main, feed=feed, fetch_list=[loss])[0]))
    return step, losses, loaded


@pytest.fixture(scope="module")
def both_backends(tmp_path_factory):
    """The two jobs, each training on both backends; backend -> (root, first job's, resumed job's)."""
    root = str(tmp_path_factory.mktemp("mp_ckpt"))
    first = run_ranks(first_job, NRANKS, root, timeout=400).results
    resumed = run_ranks(resume_job, NRANKS, root, timeout=400).results
    by_rank = lambda results, backend: sorted((r[backend] for r in results), key=lambda r: r["rank"])  # noqa: E731
    return {b: (os.path.join(root, b), by_rank(first, b), by_rank(resumed, b)) for b in BACKENDS}


@pytest.fixture(params=BACKENDS)
def jobs(both_backends, request):
    root, first, resumed = both_backends[request.param]
    expected = {"CPU": "CPUExecutable", "INTERPRETER": "InterpreterExecutable"}[request.param]
    assert all(r["executables"] == [expected] for r in first)  # the backend the strategy named
    return root, first, resumed


@pytest.mark.distributed
def test_each_shard_is_written_once_and_resume_is_exact(jobs):
    from paddle_ngraph.checkpoint import read_manifest

    root, first, resumed = jobs
    step3 = os.path.join(root, "step-000003")
    # The first replica of each shard (ranks 0 and 1) writes; the second (2 and 3) does not.
    assert [r["saved"] for r in first] == [step3, step3, None, None]
    assert sorted(os.listdir(step3)) == sorted(["shards.json"] + [f"model.tp{m:02d}.{kind}" for m in range(MP)
                                                                  for kind in ("pdparams", "pdopt", "pdmodel")])
    manifest = read_manifest(step3)
    assert (manifest["mp_degree"], manifest["dp_degree"]) == (MP, NRANKS // MP)
    sharded = {n: axis for n, (_, axis) in PARAMS.items() if axis is not None}
    for name, axis in sharded.items():  # the parameters, and Adam's moments of each, along its axis
        assert manifest["shard_axes"][name] == axis, name
        assert manifest["shard_axes"][f"{name}_moment1_0"] == axis
        assert manifest["shard_axes"][f"{name}_moment2_0"] == axis
    assert "b1" not in manifest["shard_axes"]
    for r in range(NRANKS):
        assert resumed[r]["start"] == SAVED_AT
        # Steps 4 and 5 after the resume, and the two after them, are the straight run's, bitwise.
        assert resumed[r]["losses"] == first[r]["straight"][SAVED_AT:], r
        assert set(resumed[r]["state"]) == set(first[r]["state"])
        for name, value in first[r]["state"].items():
            np.testing.assert_array_equal(resumed[r]["state"][name], value, err_msg=f"rank {r}: {name}")
    # The replicas of one shard hold the same values, the shards of one model different ones.
    np.testing.assert_array_equal(first[0]["state"]["w0"], first[2]["state"]["w0"])
    assert first[0]["state"]["w0"].shape == (SEQ * EMB, HIDDEN // MP)
    assert [r["saved"] for r in resumed] == [os.path.join(root, "step-000005")] * 2 + [None, None]


@pytest.mark.distributed
def test_dense_checkpoint_from_the_shards_trains_as_the_mp_run(jobs, tmp_path):
    root, first, resumed = jobs
    dense_root = str(tmp_path / "dense")
    # The tool, given the root: its latest checkpoint, step 5.
    proc = subprocess.run([sys.executable, ASSEMBLE, root, dense_root], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{os.path.join(root, 'step-000005')} -> {os.path.join(dense_root, 'step-000005')}"
    step, losses, loaded = dense_from_checkpoint(dense_root)
    assert step == RESUMED_TO
    # What Paddle loaded: each value of the shards concatenated along its axis, bitwise.
    model = first[0:MP]
    for name, (shape, axis) in PARAMS.items():
        for state in (name, f"{name}_moment1_0", f"{name}_moment2_0"):
            whole = (model[0]["state"][state] if axis is None
                     else np.concatenate([m["state"][state] for m in model], axis=axis))
            assert whole.shape == shape
            np.testing.assert_array_equal(loaded[state], whole, err_msg=state)
    # Paddle's dense model from there: the mp run's global losses (the replicas' mean).
    mp_losses = np.mean([resumed[0]["losses"][-2:], resumed[MP]["losses"][-2:]], axis=0)
    np.testing.assert_allclose(losses, mp_losses, rtol=5e-5)
