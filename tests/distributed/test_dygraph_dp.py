"""Dygraph Layers on the engine across ranks: paddle_ngraph.DataParallel and fleet with strategy.ngraph.

Each case runs tests/distributed/dygraph_worker.py under the real launcher. Ranks train on their
shards of the same global batches; the parameters must equal one plain-Paddle process on the whole
batches (1e-5) and be bitwise identical across ranks.
"""
import glob
import json
import os

import numpy as np
import pytest

from ranks import run_ranks

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dygraph_worker.py")


def check(out_dir, nranks, resumed=False):
    ranks = [np.load(os.path.join(out_dir, f"rank{r}.npz")) for r in range(nranks)]
    first = ranks[0]
    names = [k[len("param:"):] for k in first.files if k.startswith("param:")]
    assert names
    for name in names:
        ours, reference = first[f"param:{name}"], first[f"reference:{name}"]
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5, err_msg=name)
        for r, other in enumerate(ranks[1:], 1):
            assert np.array_equal(other[f"param:{name}"], ours), f"{name}: rank {r} differs from rank 0"
        if resumed:
            assert np.array_equal(first[f"resumed:{name}"], ours), f"{name}: resuming from the checkpoint differs"
    return [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(nranks)]


def run_mpi(tmp_path, nranks, *args):
    proc = run_ranks(WORKER, nranks, str(tmp_path), *args, timeout=180)
    return proc


# The cases of 2 ranks under mpirun: one job trains them one after the other (the worker's --then),
# each with its own Layer, optimizer and output directory, so that the job pays Paddle's import and
# mpirun's start-up once instead of once per case. Fleet's last, so that the cases through
# paddle_ngraph.DataParallel run, as a script without fleet does, where fleet.init was never called.
SHARED = {
    "sgd_no_sync_checkpoint": ("--opt", "sgd", "--no-sync", "--checkpoint"),
    "numpy": ("--layer", "numpy", "--opt", "momentum"),
    "branch": ("--layer", "branch", "--opt", "momentum"),
    "routed": ("--layer", "routed", "--opt", "momentum"),
    "sparse_sgd": ("--opt", "sgd", "--layer", "sparse_embedding"),
    "sparse_momentum": ("--opt", "momentum", "--layer", "sparse_embedding"),
    "eager_sparse": ("--opt", "sgd", "--layer", "eager_sparse_embedding"),
    "eager_accumulation": ("--scenario", "eager_accumulation"),
    "fleet_momentum": ("--api", "fleet", "--opt", "momentum"),
}


@pytest.fixture(scope="module")
def shared_job(tmp_path_factory):
    """{case: (its output directory, each rank's stderr of that case alone)} of SHARED's job."""
    from dygraph_worker import RUN_MARKER

    dirs = {case: str(tmp_path_factory.mktemp(case)) for case in SHARED}
    argv = []
    for case, args in SHARED.items():
        argv += [*(["--then"] if argv else []), dirs[case], *args]
    proc = run_ranks(WORKER, 2, *argv, timeout=300)
    stderr = {case: [] for case in SHARED}
    for text in proc.rank_stderr:
        parts = {}
        for part in text.split(RUN_MARKER)[1:]:
            out_dir, _, rest = part.partition("\n")
            parts[out_dir.strip()] = rest
        for case in SHARED:
            stderr[case].append(parts[dirs[case]])
    return {case: (dirs[case], "".join(stderr[case])) for case in SHARED}


def test_two_ranks_sgd_no_sync_checkpoint(shared_job):
    out_dir, _ = shared_job["sgd_no_sync_checkpoint"]
    reports = check(out_dir, 2, resumed=True)
    engine = reports[0]["engines"][0]
    # 6 steps of 2 micro-batches: 12 forward calls on the engine, 6 gradient synchronizations.
    assert engine["steps"] == 12 and engine["updates"] == 6 and engine["eager_steps"] == 0


def test_three_ranks_momentum_clip(tmp_path):
    run_mpi(tmp_path, 3, "--opt", "momentum")
    check(tmp_path, 3)


def test_fleet_mpirun_momentum_clip(shared_job):
    out_dir, _ = shared_job["fleet_momentum"]
    engine = check(out_dir, 2)[0]["engines"][0]
    assert engine["steps"] == 6 and engine["updates"] == 6


def test_fleet_paddle_launch(tmp_path):
    run_ranks(WORKER, 2, str(tmp_path), "--api", "fleet", "--opt", "momentum", timeout=240, launcher="launch")
    check(tmp_path, 2)


@pytest.mark.parametrize("layer", ["numpy", "branch"])
def test_uncapturable_layer_runs_eagerly_with_one_message(shared_job, layer):
    out_dir, stderr = shared_job[layer]
    engine = check(out_dir, 2)[0]["engines"][0]
    assert engine["steps"] == 0 and engine["eager_steps"] == 6 and engine["updates"] == 6
    said = [line for line in stderr.splitlines() if "runs eagerly" in line]
    assert len(said) == 2, said  # one per rank
    reason = ".numpy()" if layer == "numpy" else "control flow on tensor values"
    assert all(reason in line and "Layer " in line for line in said), said


def test_eager_layer_whose_ranks_reach_different_parameters(shared_job):
    # Some steps give one rank's shard rows for fc_pos and the other's none, and one parameter is
    # never used: the gradients are still averaged after every backward (zeros where a rank has
    # none), equal to one process on the whole batch, the unused parameter left without gradient.
    import dygraph_worker

    x = np.stack([x for (x, _), in dygraph_worker.batches(1)])[:, :, 0] > 1.0  # steps x rows
    half = dygraph_worker.GLOBAL_BATCH // 2
    assert any(a.any() != b.any() for a, b in zip(x[:, :half], x[:, half:]))  # the case this covers
    out_dir, _ = shared_job["routed"]
    engine = check(out_dir, 2)[0]["engines"][0]
    assert engine["steps"] == 0 and engine["eager_steps"] == 6 and engine["updates"] == 6


@pytest.mark.parametrize("opt", ["sgd", "momentum"])
def test_sparse_embedding_trains_as_one_process(shared_job, opt):
    """Embedding(sparse=True): plain Paddle's table gradient is selected rows, the captured backward's
    is dense; on 2 ranks (momentum: with a global-norm clip and weight decay) the whole Layer still
    runs on the engine and trains as one process does."""
    out_dir, _ = shared_job[f"sparse_{opt}"]
    engine = check(out_dir, 2)[0]["engines"][0]
    assert engine["steps"] == 6 and engine["updates"] == 6 and engine["eager_steps"] == 0


def test_eager_sparse_embedding_trains_as_one_process(shared_job):
    """Run eagerly, Embedding(sparse=True) has Paddle's selected-rows gradient, other rows on each
    rank: averaged dense and handed back as selected rows of every row, SGD trains as one process."""
    out_dir, _ = shared_job["eager_sparse"]
    engine = check(out_dir, 2)[0]["engines"][0]
    assert engine["eager_steps"] == 6 and engine["updates"] == 6


def test_eager_gradients_accumulate_across_backwards_where_a_rank_misses_a_parameter(shared_job):
    """The average of an eager backward is a new gradient tensor: written into one that clear_grad()
    had zeroed, on the rank whose backward did not reach the parameter, the next backward
    overwrote it instead of adding to it (Paddle's no_sync_gradient_check model, 8% off). A sparse
    embedding one rank does not reach gets zeros of its own kind, selected rows (dense ones crashed)."""
    out_dir, _ = shared_job["eager_accumulation"]
    for rank in range(2):
        result = np.load(os.path.join(out_dir, f"rank{rank}.npz"))
        np.testing.assert_allclose(result["got"], result["expected"], rtol=1e-6, err_msg=f"rank {rank}")
        change = result["table_change"]  # rows 1 and 2: -0.1 * (1 + 0) / 2 at each of the two steps
        np.testing.assert_allclose(change[[1, 2]], -0.1, rtol=1e-5, err_msg=f"rank {rank}")
        assert not np.delete(change, [1, 2], axis=0).any()
