"""Tensor parallelism of Paddle's legacy static programs on the engine (docs/model-parallel.md):
``paddle.distributed.split`` (a parallel embedding, column- and row-parallel linears) under
``fleet.init(is_collective=True, strategy)`` with ``strategy.tensor_parallel`` and ``strategy.ngraph``,
under the real mpirun.

The oracle is Paddle's own, as its tests of split do: the shards all-gathered into one dense model
(``paddle.nn.initializer.Assign``) that Paddle's executor trains in one process on the global batch
(the data-parallel replicas' batches concatenated). Losses agree within rtol 5e-5 over 5 SGD steps,
and the trained shards reassembled equal the dense model's parameters (1e-5).
"""
import numpy as np
import pytest

from ranks import run_ranks
from paddle_ngraph.distributed.ccl import available as ccl_available

needs_ccl = pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")

VOCAB, EMB, SEQ, HIDDEN, MIDDLE, CLASSES = 8, 6, 3, 10, 6, 4
BATCH, STEPS, LR, SEED = 4, 5, 0.1, 7
# name -> (full shape, how split: the axis the shards cut, or None for a replicated parameter)
PARAMS = {"emb": ((VOCAB, EMB), 0),
          "w0": ((SEQ * EMB, HIDDEN), 1), "b0": ((HIDDEN,), 0),    # column-parallel
          "w1": ((HIDDEN, MIDDLE), 0), "b1": ((MIDDLE,), None),    # row-parallel: the bias is whole
          "w2": ((MIDDLE, CLASSES), 1), "b2": ((CLASSES,), 0)}     # column-parallel, output gathered


def full_weights() -> dict:
    rng = np.random.default_rng(SEED)
    return {name: rng.uniform(-0.5, 0.5, shape).astype("float32") for name, (shape, _) in PARAMS.items()}


def shard(name: str, value: np.ndarray, mp_rank: int, mp: int) -> np.ndarray:
    axis = PARAMS[name][1]
    return value if axis is None else np.split(value, mp, axis=axis)[mp_rank]


def batch(step: int, replica: int):
    """Replica ``replica``'s batch of step ``step``: the same on every rank of one model (and at
    every step, so that the loss falls)."""
    rng = np.random.default_rng(1000 + replica)
    return (rng.integers(0, VOCAB, (BATCH, SEQ)).astype("int64"), rng.integers(0, CLASSES, (BATCH, 1)).astype("int64"))


def _param(name, value):
    import paddle

    return paddle.ParamAttr(name=name, initializer=paddle.nn.initializer.Assign(value))


def mp_worker(mp: int, backend: str, parallel_loss: bool = False, hybrid: bool = False):
    """One rank's training. ``parallel_loss``: the last layer's output stays sharded by class and
    the loss is Paddle's c_softmax_with_cross_entropy over the shards (fleet's ParallelCrossEntropy;
    Paddle's static helper names the global rank and size, so mp_degree must be the number of ranks);
    else the output is gathered (c_concat) and the loss is plain cross entropy. ``hybrid``: the degree
    given as ``hybrid_configs`` (dp_degree, mp_degree) instead of ``tensor_parallel_configs``."""
    import paddle_ngraph  # noqa: F401  # strategy.ngraph
    import paddle
    import paddle.distributed.fleet as fleet
    from paddle_ngraph.transpiler.engine import engines

    before = {e.id for e in engines()}  # an earlier configuration's, in a job of several (mp_worker_configs)
    paddle.enable_static()
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"backend": backend}
    nranks = paddle.distributed.get_world_size()
    if hybrid:
        strategy.hybrid_configs = {"dp_degree": nranks // mp, "mp_degree": mp}
    else:
        strategy.tensor_parallel = True
        strategy.tensor_parallel_configs = {"tensor_parallel_degree": mp}
    fleet.init(is_collective=True, strategy=strategy)
    rank, nranks = fleet.worker_index(), fleet.worker_num()
    mp_rank, replica, replicas = rank % mp, rank // mp, nranks // mp
    weights = {n: shard(n, v, mp_rank, mp) for n, v in full_weights().items()}
    split = paddle.distributed.split
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            ids = paddle.static.data("ids", [BATCH, SEQ], "int64")
            y = paddle.static.data("y", [BATCH, 1], "int64")
            h = split(ids, (VOCAB, EMB), "embedding", num_partitions=mp, weight_attr=_param("emb", weights["emb"]))
            h = paddle.reshape(h, [BATCH, SEQ * EMB])
            h = split(h, (SEQ * EMB, HIDDEN), "linear", axis=1, num_partitions=mp, gather_out=False,
                      weight_attr=_param("w0", weights["w0"]), bias_attr=_param("b0", weights["b0"]))
            h = paddle.nn.functional.relu(h)
            h = split(h, (HIDDEN, MIDDLE), "linear", axis=0, num_partitions=mp,
                      weight_attr=_param("w1", weights["w1"]), bias_attr=_param("b1", weights["b1"]))
            h = split(h, (MIDDLE, CLASSES), "linear", axis=1, num_partitions=mp, gather_out=not parallel_loss,
                      weight_attr=_param("w2", weights["w2"]), bias_attr=_param("b2", weights["b2"]))
            if parallel_loss:
                from paddle.distributed.fleet.layers.mpu.mp_ops import _c_softmax_with_cross_entropy

                loss = paddle.mean(_c_softmax_with_cross_entropy(h, y))
            else:
                loss = paddle.mean(paddle.nn.functional.cross_entropy(h, y))
            fleet.distributed_optimizer(paddle.optimizer.SGD(LR)).minimize(loss)
        op_types = [op.type for op in main.global_block().ops]
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        losses = []
        for step in range(STEPS):
            ids_b, y_b = batch(step, replica)
            losses.append(float(exe.run(main, feed={"ids": ids_b, "y": y_b}, fetch_list=[loss])[0]))
        scope = paddle.static.global_scope()
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}
    from paddle_ngraph.ir.ops.collective import COLLECTIVE_OPS

    mine = [e for e in engines() if e.id not in before]
    collectives = [(n.op_type, n.attrs["group"], n.attrs["bucket"]) for e in mine
                   for n in e.function.ordered_nodes() if n.op_type in COLLECTIVE_OPS]
    return {"rank": rank, "losses": losses, "params": params, "op_types": op_types, "collectives": collectives,
            "transport": mine[0].transport.name}


def mp_worker_configs(mp: int, configs: list):
    """mp_worker for each (backend, parallel_loss) of ``configs``, one after the other in one job
    (fleet.init again for each, its own program; the parameters' values assigned again by each
    startup): the job pays Paddle's import and mpirun's start-up once."""
    return {config: mp_worker(mp, *config) for config in configs}


def dense_run(replicas: int):
    """Paddle alone, one process: the dense model on the concatenated batches of the replicas."""
    import paddle

    paddle.enable_static()
    weights = full_weights()
    F = paddle.nn.functional
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            ids = paddle.static.data("ids", [BATCH * replicas, SEQ], "int64")
            y = paddle.static.data("y", [BATCH * replicas, 1], "int64")
            p = {n: paddle.static.create_parameter(list(v.shape), "float32", attr=_param(n, v))
                 for n, v in weights.items()}
            h = paddle.reshape(F.embedding(ids, p["emb"]), [BATCH * replicas, SEQ * EMB])
            h = F.relu(F.linear(h, p["w0"], p["b0"]))
            h = F.linear(h, p["w1"], p["b1"])
            h = F.linear(h, p["w2"], p["b2"])
            loss = paddle.mean(F.cross_entropy(h, y))
            paddle.optimizer.SGD(LR).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        losses = []
        for step in range(STEPS):
            parts = [batch(step, r) for r in range(replicas)]
            feed = {"ids": np.concatenate([b[0] for b in parts]), "y": np.concatenate([b[1] for b in parts])}
            losses.append(float(exe.run(main, feed=feed, fetch_list=[loss])[0]))
        scope = paddle.static.global_scope()
        return losses, {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}


def check_against_dense(results, nranks: int, mp: int):
    replicas = nranks // mp
    dense_losses, dense_params = dense_run(replicas)
    by_rank = sorted(results, key=lambda r: r["rank"])
    # The ranks of one model agree on its loss; the replicas' mean is the dense model's global loss.
    replica_losses = [by_rank[r * mp]["losses"] for r in range(replicas)]
    for r in range(nranks):
        np.testing.assert_allclose(by_rank[r]["losses"], replica_losses[r // mp], rtol=1e-6)
    np.testing.assert_allclose(np.mean(replica_losses, axis=0), dense_losses, rtol=5e-5)
    assert dense_losses[-1] < dense_losses[0]  # it trained
    for name, (_, axis) in PARAMS.items():
        for replica in range(replicas):
            shards = [by_rank[replica * mp + m]["params"][name] for m in range(mp)]
            whole = shards[0] if axis is None else np.concatenate(shards, axis=axis)
            np.testing.assert_allclose(whole, dense_params[name], atol=1e-5, rtol=1e-5, err_msg=name)
            if axis is None:  # a replicated parameter stays equal on the ranks of a model
                for other in shards[1:]:
                    np.testing.assert_array_equal(other, shards[0])


PADDLE_MP_OPS = {"c_identity", "c_concat", "c_split", "mp_allreduce_sum", "all_reduce", "c_embedding",
                 "c_embedding_grad", "c_softmax_with_cross_entropy", "c_softmax_with_cross_entropy_grad"}


TWO_RANK_CONFIGS = [(backend, parallel_loss) for backend in ("INTERPRETER", "CPU") for parallel_loss in (False, True)]


@pytest.fixture(scope="module")
def two_ranks():
    """Every configuration of 2 ranks, trained in one job: {(backend, parallel_loss): each rank's result}."""
    run = run_ranks(mp_worker_configs, 2, 2, TWO_RANK_CONFIGS)
    return {config: [result[config] for result in run.results] for config in TWO_RANK_CONFIGS}


@pytest.mark.distributed
@pytest.mark.parametrize("backend", ["INTERPRETER", "CPU"])
@pytest.mark.parametrize("parallel_loss", [False, True], ids=["gathered_loss", "parallel_loss"])
def test_split_layers_on_two_ranks_match_the_dense_model(two_ranks, backend, parallel_loss):
    """mp_degree = 2 = ranks: no data-parallel AllReduce at all."""
    results = two_ranks[backend, parallel_loss]
    check_against_dense(results, 2, 2)
    for result in results:  # what Paddle's split emits, replaced by the engine
        assert any(t.startswith("ngraph_engine") for t in result["op_types"])
        assert not PADDLE_MP_OPS & set(result["op_types"])
        # Only the model's own collectives, over the model-parallel group (every rank: "()"); no
        # gradient bucket: the two ranks are one model, with no replica to average with. The
        # parallel loss needs three AllReduces where the gathered one needs one AllGather.
        expected = ["AllReduce"] * 7 if parallel_loss else ["AllGather"] + ["AllReduce"] * 4
        assert sorted(c[0] for c in result["collectives"]) == expected
        assert all(group == () and not bucket for _, group, bucket in result["collectives"])


@pytest.mark.distributed
@pytest.mark.parametrize("launcher", ["mpirun", pytest.param("launch", marks=needs_ccl)])
def test_split_layers_with_data_parallel_replicas(launcher):
    """4 ranks: 2 replicas of a model sharded over 2; gradients averaged over each data-parallel group.
    The degrees come as hybrid_configs here (tensor_parallel_configs in the 2-rank tests). Under
    mpirun over MPI's group communicators, under paddle.distributed.launch over oneCCL's."""
    run = run_ranks(mp_worker, 4, 2, "CPU", False, True, launcher=launcher, timeout=400)
    check_against_dense(run.results, 4, 2)
    for result in run.results:
        assert result["transport"] == {"mpirun": "MPI", "launch": "CCL"}[launcher]
        rank = result["rank"]
        model, replicas = (rank - rank % 2, rank - rank % 2 + 1), (rank % 2, rank % 2 + 2)
        buckets = [group for _, group, bucket in result["collectives"] if bucket]
        assert buckets and all(group == replicas for group in buckets)
        assert all(group == model for _, group, bucket in result["collectives"] if not bucket)
