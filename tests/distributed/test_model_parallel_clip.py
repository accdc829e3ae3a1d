"""Gradient clipping in a legacy static tensor-parallel program (docs/model-parallel.md): a clip by
value is exact on shards and trains the dense model; a clip by a norm would take the norm of this
rank's shard of a gradient (each rank clipping by another norm than the dense model's, and the
shards training no model), so the transpile refuses it, naming the op and the sharded parameter.

Paddle's static_model_parallel_by_col.py model (a column-parallel linear, the loss the sum of its
output), mp 2 on 2 ranks under mpirun, one job for both; the dense model is trained by Paddle's
executor in the same process.
"""
import numpy as np
import pytest

from ranks import run_ranks

pytestmark = pytest.mark.distributed

IN, OUT, BATCH, STEPS, LR, LIMIT = 4, 4, 2, 4, 0.1, 0.05  # LIMIT: below the gradients' values and norms


def clip_worker():
    import paddle
    import paddle_ngraph  # noqa: F401  (strategy.ngraph)
    from paddle.distributed import fleet
    from paddle_ngraph.errors import ConfigError

    paddle.enable_static()
    rng = np.random.default_rng(2021)
    weight, bias = rng.uniform(-1, 1, (IN, OUT)).astype("float32"), rng.uniform(-1, 1, (OUT,)).astype("float32")
    batches = [rng.random((BATCH, IN)).astype("float32") for _ in range(STEPS)]
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.tensor_parallel = True
    strategy.tensor_parallel_configs = {"tensor_parallel_degree": 2}
    fleet.init(is_collective=True, strategy=strategy)
    rank = fleet.worker_index()

    def attr(value):
        return paddle.ParamAttr(initializer=paddle.nn.initializer.Assign(value))

    def train(clip, sharded):
        with paddle.pir_utils.OldIrGuard():
            main, startup, scope = paddle.static.Program(), paddle.static.Program(), paddle.static.Scope()
            with paddle.static.program_guard(main, startup), paddle.static.scope_guard(scope):
                x = paddle.static.data("x", [BATCH, IN], "float32")
                if sharded:
                    w, b = np.split(weight, 2, 1)[rank], np.split(bias, 2)[rank]
                    out = paddle.distributed.split(x, (IN, OUT), "linear", axis=1, num_partitions=2,
                                                   weight_attr=attr(w), bias_attr=attr(b))
                else:
                    out = paddle.static.nn.fc(x, OUT, weight_attr=attr(weight), bias_attr=attr(bias))
                loss = paddle.mean(out) * float(BATCH * OUT)  # the sum (paddle.sum refuses legacy Variables)
                opt = paddle.optimizer.SGD(LR, grad_clip=clip)
                if sharded:
                    fleet.distributed_optimizer(opt, strategy).minimize(loss)
                else:
                    opt.minimize(loss)
                exe = paddle.static.Executor(paddle.CPUPlace())
                exe.run(startup)
                losses = [float(exe.run(main, feed={"x": b}, fetch_list=[loss])[0]) for b in batches]
                weights = [np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()]
        return losses, {w.ndim: w for w in weights}

    by_value = train(paddle.nn.ClipGradByValue(LIMIT), sharded=True)
    dense = train(paddle.nn.ClipGradByValue(LIMIT), sharded=False)
    refused = None
    try:
        train(paddle.nn.ClipGradByNorm(LIMIT), sharded=True)
    except ConfigError as e:
        refused = str(e)
    return {"rank": rank, "by_value": by_value, "dense": dense, "refused": refused}


def test_clipping_of_a_static_tensor_parallel_program():
    run = run_ranks(clip_worker, 2, timeout=120)
    for r in run.results:
        (losses, shards), (dense_losses, dense) = r["by_value"], r["dense"]
        np.testing.assert_allclose(losses, dense_losses, rtol=1e-6)
        np.testing.assert_allclose(shards[2], np.split(dense[2], 2, 1)[r["rank"]], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(shards[1], np.split(dense[1], 2)[r["rank"]], rtol=1e-6, atol=1e-7)
        assert r["refused"] is not None and "op 'clip_by_norm'" in r["refused"], r["refused"]
        assert "a shard of a tensor-parallel layer (mp_degree 2)" in r["refused"], r["refused"]
