"""sync_batch_norm in one process: the global-statistics conversion (BatchNormSums, AllReduce of the
sums, BatchNormTrainingFromSums; the same in the backward) equals Paddle's batch_norm training step
when there is one rank, forward, gradients and running statistics; Paddle's own sync_batch_norm ops
convert. The multi-rank equivalence is tests/distributed/test_sync_batch_norm.py."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from harness import IRS, check_against_paddle, ir_guard, run_function, sync_batch_norm_program
from helpers import TOL
from paddle_ngraph.frontend import ConversionSession, decode
from paddle_ngraph.ir.ops.collective import STATISTICS_BUCKET, is_statistics
from paddle_ngraph.passes import InsertAllReduce, PassManager
from paddle_ngraph.backends.cpu.passes.liveness import Liveness

rng = np.random.default_rng(0)
W = rng.standard_normal((3, 5, 5)).astype("float32")


def _bn2d(channels, **kwargs):
    return paddle.nn.BatchNorm2D(channels, weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Uniform(0.5, 1.5)),
                                 bias_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Normal()), **kwargs)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_global_statistics_in_one_process_equal_batch_norm(ir, dtype, data_format):
    # A mean far from 0 (3) against a spread of 1: what a one-pass variance in float32 would lose.
    x = (rng.standard_normal((3, 4, 2, 5)) + 3).astype(dtype)
    if dtype == "float64":
        paddle.set_default_dtype("float64")
    try:
        check_against_paddle(lambda x: _bn2d(x.shape[3 if data_format == "NHWC" else 1], data_format=data_format)(x),
                             {"x": x}, ir=ir, sync_batch_norm=True, **TOL[dtype])
    finally:
        paddle.set_default_dtype("float32")


@pytest.mark.parametrize("ir", IRS)
def test_global_statistics_batch_norm_1d(ir):
    x = rng.standard_normal((6, 4)).astype("float32")
    check_against_paddle(lambda x: paddle.nn.BatchNorm1D(4)(x), {"x": x}, ir=ir, sync_batch_norm=True)


def _bn_program(ir, sync_ops=False, momentum=0.8):
    """conv -> BatchNorm2D -> relu -> weighted mean, trained by SGD; ``sync_ops``: its batch_norm ops made Paddle's
    sync_batch_norm ops (harness.sync_batch_norm_program)."""
    with ir_guard("legacy" if sync_ops else ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [4, 3, 5, 5], "float32")
            layer = paddle.nn.BatchNorm2D(3, momentum=momentum)
            w = paddle.static.data("w", [3, 5, 5], "float32")  # a loss whose gradient is not uniform
            conv = paddle.nn.Conv2D(3, 3, 3, padding=1, bias_attr=False)  # (translate_to_pir: no reshape2 XShape)
            loss = paddle.mean(paddle.nn.functional.relu(layer(conv(x))) * w)
            paddle.optimizer.SGD(0.1).minimize(loss)
    if sync_ops:
        main = sync_batch_norm_program(main, ir)
    return main, startup, layer


@pytest.mark.parametrize("ir", IRS)
def test_running_statistics_and_update_equal_paddle(ir):
    """One SGD step with the global-statistics function (one rank) against Paddle's batch_norm step."""
    x = (rng.standard_normal((4, 3, 5, 5)) * 2 + 1).astype("float32")
    main, startup, layer = _bn_program(ir)
    with ir_guard(ir):
        function = paddle_ngraph.convert(main, fetch_list=[], sync_batch_norm=True)
        assert sum(is_statistics(n) for n in function.ordered_nodes()) == 2  # forward sums, backward sums
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            results = run_function(function, {"x": x, "w": W})  # from the initial scope
            exe.run(main, feed={"x": x, "w": W})
            names = [layer._mean.name, layer._variance.name, layer.weight.name, layer.bias.name]
            after = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    for n in names:
        np.testing.assert_allclose(results["state:" + n], after[n], rtol=1e-5, atol=1e-6, err_msg=n)


def _op_types(function):
    return [n.op_type for n in function.ordered_nodes()]


@pytest.mark.parametrize("ir", IRS)
def test_paddle_sync_batch_norm_ops_convert(ir):
    """Paddle's own sync_batch_norm/sync_batch_norm_grad (PIR: pd_op.sync_batch_norm_): plain batch
    norm in one process, the global-statistics form with several ranks; Paddle's executor on the
    plain program gives what our conversion of the sync one gives."""
    plain, startup, layer = _bn_program(ir)
    synced, _, _ = _bn_program(ir, sync_ops=True)
    view = decode(synced)
    kinds = {op.type for op in view.ops}
    assert kinds >= ({"sync_batch_norm", "sync_batch_norm_grad"} if ir == "legacy"
                     else {"pd_op.sync_batch_norm_", "pd_op.sync_batch_norm_grad"}), kinds
    one = paddle_ngraph.convert(synced, fetch_list=[])
    assert "BatchNormTraining" in _op_types(one) and "AllReduce" not in _op_types(one)
    session = ConversionSession(view, nranks=2)
    session.convert_ops([op for op in view.ops if op.block == 0])
    types = [n.op_type for n in session.function([], name="two").ordered_nodes()]
    assert "BatchNormTrainingFromSums" in types and "BatchNormTrainingBackpropFromSums" in types
    assert "BatchNormTraining" not in types

    x = (rng.standard_normal((4, 3, 5, 5)) + 0.5).astype("float32")
    functions = {sync: paddle_ngraph.convert(synced, fetch_list=[], sync_batch_norm=sync) for sync in (False, True)}
    with ir_guard(ir):
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            results = {sync: run_function(f, {"x": x, "w": W}) for sync, f in functions.items()}
            exe.run(plain, feed={"x": x, "w": W})
            names = [layer._mean.name, layer._variance.name, layer.weight.name, layer.bias.name]
            after = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    for sync, got in results.items():
        for n in names:
            np.testing.assert_allclose(got["state:" + n], after[n], rtol=1e-5, atol=1e-6, err_msg=f"{n} sync={sync}")


def test_statistics_collectives_are_not_gradient_buckets():
    """The gradient pass buckets scale and bias gradients as any (the rank's own sums), never the
    statistics AllReduces; the schedule starts each gradient bucket as soon as it is complete,
    not after the rest of the backward pass (which depends on a statistics collective)."""
    main, _, layer = _bn_program("pir")
    view = decode(main)
    session = ConversionSession(view, sync_batch_norm=True, nranks=2)
    session.convert_ops([op for op in view.ops if op.block == 0])
    function = session.function([], name="two")
    insert = InsertAllReduce(2, bucket_bytes=0)
    PassManager([insert]).run(function)
    buckets = [n for n in function.ordered_nodes() if n.op_type == "AllReduce" and not is_statistics(n)]
    statistics = [n for n in function.ordered_nodes() if is_statistics(n)]
    assert len(statistics) == 2 and all(n.attrs["bucket"].startswith(STATISTICS_BUCKET) for n in statistics)
    assert all(n.attrs["reduction"] == "sum" for n in statistics)
    assert {layer.weight.name, layer.bias.name} <= {p for b in insert.buckets for p in b}
    for bucket in buckets:
        assert all(i.node.op_type != "AllReduce" for i in bucket.inputs)
    liveness = Liveness()
    liveness.run(function)
    steps = [(s.kind, s.node) for s in liveness.steps]
    order = {(kind, node.id): k for k, (kind, node) in enumerate(steps)}
    # The backward statistics are waited for before dx is computed; the scale/bias gradient
    # bucket (made by the same node as those sums) starts before that wait.
    bn_bucket = next(b for b in buckets if any(i.node.op_type == "BatchNormBackpropSums" for i in b.inputs))
    backward_sums = next(n for n in statistics if n.inputs[0].node.op_type == "BatchNormBackpropSums")
    assert order[("start", bn_bucket.id)] < order[("wait", backward_sums.id)]
    updates = [k for k, (kind, node) in enumerate(steps) if node.op_type == "SGDUpdate"]
    computes = [k for k, (kind, node) in enumerate(steps) if kind == "compute" and node.op_type != "SGDUpdate"]
    assert min(updates) > max(computes)  # the updates still come last


def test_zero_1_shards_the_gradients_not_the_statistics():
    """ZeRO-1 reduce-scatters scale and bias gradients like any, and leaves the statistics AllReduces
    (sum, unchanged inputs) alone."""
    from paddle_ngraph.passes.shard_optimizer import ShardOptimizer

    main, _, layer = _bn_program("pir")
    view = decode(main)
    session = ConversionSession(view, sync_batch_norm=True, nranks=2)
    session.convert_ops([op for op in view.ops if op.block == 0])
    function = session.function([], name="two")
    before = {n.id: [i.node.op_type for i in n.inputs] for n in function.ordered_nodes() if is_statistics(n)}
    sharding = ShardOptimizer(2, bucket_bytes=0)
    PassManager([sharding, InsertAllReduce(2, bucket_bytes=0)]).run(function)
    nodes = function.ordered_nodes()
    after = {n.id: [i.node.op_type for i in n.inputs] for n in nodes if is_statistics(n)}
    assert after == before and all(n.attrs["reduction"] == "sum" for n in nodes if is_statistics(n))
    scattered = [n for n in nodes if n.op_type == "ReduceScatter"]
    assert scattered and not any(is_statistics(n) for n in scattered)
    assert not any(n.op_type == "AllReduce" and not is_statistics(n) for n in nodes)  # all gradients sharded
    assert {layer.weight.name, layer.bias.name} <= {p for bucket in sharding.buckets for p in bucket.params}
