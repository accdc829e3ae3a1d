"""Fallback programs on N ranks under mpirun train like one process on the concatenated batch:
every gradient is averaged exactly once, whether an engine segment or a Paddle op made it and
whether the engine or Paddle runs its update. Ranks end bitwise identical."""
import os
import sys

import numpy as np
import pytest

from harness import assert_trained_close, ir_guard
from ranks import LAUNCHERS, run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transpiler"))
import fallback_models as fm  # noqa: E402

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

STEPS, BATCH = 4, 12
CASES = [
    ("pir", "custom", "sgd", "CPU", 2),            # a custom operator between engine segments
    ("legacy", "custom", "momentum", "CPU", 2),
    ("pir", "param_logcumsumexp", "adagrad", "CPU", 2),  # updates in Paddle; one gradient made by Paddle
    ("legacy", "param_logcumsumexp", "sgd", "INTERPRETER", 3),
]


def train_on_this_rank(cases, also=()):
    """On every rank: each case (ir, middle, optimizer, backend) on its share of every batch, on the
    engine with the ops it lacks left to Paddle; {case: (losses, parameters)}; then each of ``also``
    (a key of ALSO: the module's other runs of 2 ranks under mpirun, in the same job), by that key."""
    import paddle

    paddle.enable_static()
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    xs, ys = fm.data(STEPS, BATCH)
    trained = {}
    for ir, middle, optimizer, backend in cases:
        with ir_guard(ir):
            # Each rank initializes differently: the start-up broadcast (of the parameters only Paddle
            # ops read, too) must make them rank 0's, which are the reference's (seed 1).
            _, losses, params = fm.train(middle, optimizer, xs, ys, transpile={"backend": backend}, seed=1 + rank,
                                         rank=rank, nranks=size)
        trained[ir, middle, optimizer, backend] = losses, params
    for name in also:
        trained[name] = ALSO[name]("CPU")
    return trained


@pytest.fixture(scope="module")
def trained_by_rank():
    """{nranks: per rank {case: (losses, parameters)}}: the cases of each world size in one job, the
    2-rank one also running ALSO's (each its own program, scope and names)."""
    fm.custom_op_module()  # built once here, so that the ranks only load it
    sizes = sorted({case[-1] for case in CASES})
    return {n: run_ranks(train_on_this_rank, n, [case[:-1] for case in CASES if case[-1] == n],
                         tuple(ALSO) if n == 2 else ()).results
            for n in sizes}


@pytest.mark.parametrize("ir, middle, optimizer, backend, nranks", CASES)
def test_ranks_equal_one_process(trained_by_rank, ir, middle, optimizer, backend, nranks):
    xs, ys = fm.data(STEPS, BATCH)
    with ir_guard(ir):
        _, ref_losses, ref_params = fm.train(middle, optimizer, xs, ys)
    ranks = [{"losses": losses, **params} for losses, params in
             (rank[ir, middle, optimizer, backend] for rank in trained_by_rank[nranks])]
    # Each rank's loss is the mean over its share; their mean is the loss of the whole batch.
    np.testing.assert_allclose(np.mean([r["losses"] for r in ranks], axis=0), ref_losses, rtol=1e-4, atol=1e-6)
    assert sorted(k for k in ranks[0] if k != "losses") == sorted(ref_params)
    for name, ref in ref_params.items():
        for r in ranks[1:]:
            assert np.array_equal(r[name], ranks[0][name]), f"{name}: ranks differ"
        assert_trained_close(ranks[0][name], ref, optimizer, name, lr=0.1, norm_tol=1e-5, elementwise=False)


def _lod_on_this_rank(backend):
    import paddle

    paddle.enable_static()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PADDLE_TRAINER_ID", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PADDLE_TRAINERS_NUM", "1")))
    with ir_guard("legacy"):
        _, losses, params = fm.lod_train(STEPS, transpile={"backend": backend}, rank=rank, nranks=size)
    return losses, params


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_lod_sequences_on_ranks_equal_one_process(launcher, request):
    """A LoD program (the ops making LoD tensors left to Paddle, sequence_pool too) on 2 ranks, each
    on half of the sequences of every batch (another total length on each rank), trains as one
    process on all of them: the gradients Paddle's ops make are averaged before the engine's SGD."""
    if launcher == "mpirun":  # run by the 2-rank job of trained_by_rank
        results = [rank["lod"] for rank in request.getfixturevalue("trained_by_rank")[2]]
    else:
        results = run_ranks(_lod_on_this_rank, 2, "CPU", launcher=launcher).results
    with ir_guard("legacy"):
        _, ref_losses, ref_params = fm.lod_train(STEPS)
    np.testing.assert_allclose(np.mean([r[0] for r in results], axis=0), ref_losses, rtol=1e-5, atol=1e-7)
    for name, ref in ref_params.items():
        assert np.array_equal(results[1][1][name], results[0][1][name]), f"{name}: ranks differ"
        assert_trained_close(results[0][1][name], ref, "sgd", name, lr=0.1, norm_tol=1e-5, elementwise=False)


def _transpiled_before_startup(backend):
    """As fleet's minimize does: transpile, then run the startup program (each rank its own seed)."""
    import paddle

    import paddle_ngraph

    paddle.enable_static()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PADDLE_TRAINER_ID", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PADDLE_TRAINERS_NUM", "1")))
    xs, ys = fm.data(STEPS, BATCH)
    with ir_guard("legacy"):
        paddle.seed(1 + rank)
        main, startup, loss = fm.build("param_logcumsumexp", "sgd")
        paddle_ngraph.transpile(main, backend=backend)
        share = BATCH // size
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            losses = [float(exe.run(main, feed={"x": x[rank * share:(rank + 1) * share],
                                                "y": y[rank * share:(rank + 1) * share]}, fetch_list=[loss])[0])
                      for x, y in zip(xs, ys)]
            params = {n: np.array(scope.find_var(n).get_tensor()) for n in fm.parameter_names(main)}
    return losses, params


# The module's runs of 2 ranks under mpirun besides CASES, which train_on_this_rank runs in their job.
ALSO = {"lod": _lod_on_this_rank, "before_startup": _transpiled_before_startup}


def test_parameters_only_paddle_reads_broadcast_when_transpiled_before_startup(trained_by_rank):
    """A parameter only a Paddle op reads (``offset``), the program transpiled before the startup
    program runs (fleet's order): the first engine copies rank 0's value to every rank before that
    op reads it, and the ranks train as one process."""
    results = [rank["before_startup"] for rank in trained_by_rank[2]]
    xs, ys = fm.data(STEPS, BATCH)
    with ir_guard("legacy"):
        _, ref_losses, ref_params = fm.train("param_logcumsumexp", "sgd", xs, ys)
    np.testing.assert_allclose(np.mean([r[0] for r in results], axis=0), ref_losses, rtol=1e-5, atol=1e-7)
    for name, ref in ref_params.items():
        assert np.array_equal(results[1][1][name], results[0][1][name]), f"{name}: ranks differ"
        assert_trained_close(results[0][1][name], ref, "sgd", name, lr=0.1, norm_tol=1e-5, elementwise=False)
