"""paddle.Model (hapi) in static mode with fleet's strategy.ngraph on 2 ranks under mpirun, both IRs
(the pattern of Paddle's dist_hapi_mnist_static test, on CPU): train_batch on each rank's half of
the batch trains as Paddle's one process on the whole batch, and eval_batch runs.

Before: legacy hapi's static adapter called fleet.init and fleet.distributed_optimizer with a
DistributedStrategy of its own, so Paddle's RawProgramOptimizer ran and failed at prepare
("comm_id must be generated in paddlepaddle-xpu"); its eval program's dist.all_gather crashed
Paddle's CPU kernel (SIGSEGV); hapi's PIR adapter minimized with the optimizer alone, so each rank
trained on its own half, silently. In one process hapi static stays Paddle's."""
import os

import numpy as np
import pytest

from ranks import run_ranks

pytestmark = pytest.mark.distributed

STEPS, BATCH = 3, 8


def data():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((STEPS, BATCH, 6)).astype("float32"),
            rng.integers(0, 3, (STEPS, BATCH, 1)).astype("int64"))


def train(ir: str, ngraph: bool):
    """(losses per step of this rank, parameters, eval loss) of paddle.Model in static mode."""
    os.environ["FLAGS_enable_pir_api"] = "1" if ir == "pir" else "0"
    import paddle
    from paddle import nn
    from paddle.static import InputSpec

    import paddle_ngraph  # noqa: F401  (strategy.ngraph)

    paddle.enable_static()
    paddle.seed(3)
    rank, size = 0, 1
    if ngraph:
        from paddle.distributed import fleet

        rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
        strategy = fleet.DistributedStrategy()
        strategy.ngraph = True
        fleet.init(is_collective=True, strategy=strategy)
    net = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
    model = paddle.Model(net, [InputSpec([None, 6], "float32", "x")], [InputSpec([None, 1], "int64", "label")])
    model.prepare(paddle.optimizer.Momentum(0.1, momentum=0.9, parameters=model.parameters()),
                  nn.CrossEntropyLoss(), paddle.metric.Accuracy())
    xs, ys = data()
    share = BATCH // size
    mine = slice(rank * share, (rank + 1) * share)
    losses = [float(np.ravel(model.train_batch([x[mine]], [y[mine]])[0][0])[0]) for x, y in zip(xs, ys)]
    evaluated = float(np.ravel(model.eval_batch([xs[0]], [ys[0]])[0][0])[0])
    scope = paddle.static.global_scope()
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in net.parameters()}
    return losses, params, evaluated


def one_process(ir):
    import multiprocessing

    # A fresh Paddle for each IR. The worker ends on its own (close, join): Pool's exit would
    # terminate it with SIGTERM, and Paddle's signal handler, which allocates, was seen to deadlock
    # when the signal came inside free().
    pool = multiprocessing.get_context("spawn").Pool(1)
    try:
        result = pool.apply_async(train, (ir, False)).get(timeout=300)
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()
    return result


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_two_ranks_train_as_one_process(ir):
    ranks = run_ranks(train, 2, ir, True).results
    ref_losses, ref_params, ref_eval = one_process(ir)
    np.testing.assert_allclose(np.mean([r[0] for r in ranks], axis=0), ref_losses, rtol=1e-5)
    for name, value in ref_params.items():
        assert np.array_equal(ranks[0][1][name], ranks[1][1][name]), f"{name}: ranks differ"
        np.testing.assert_allclose(ranks[0][1][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    # Each rank evaluates the same whole batch here: Paddle's figure, on every rank.
    for _, _, evaluated in ranks:
        np.testing.assert_allclose(evaluated, ref_eval, rtol=1e-5)
