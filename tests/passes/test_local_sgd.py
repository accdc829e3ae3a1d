"""Local SGD (passes/local_sgd.py): the sync and local variants, and what is refused. Paddle's
schedule and adaptive rule: tests/distributed/test_local_sgd_schedule.py; the multi-rank runs
against a NumPy definition: tests/distributed/test_localsgd.py."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph import Config
from paddle_ngraph.errors import ConfigError
from paddle_ngraph.frontend import decode, loss_name
from paddle_ngraph.ir.roles import STATE_PREFIX
from paddle_ngraph.ir.ops.optimizer import OptimizerUpdate
from paddle_ngraph.passes.local_sgd import SNAPSHOT_PREFIX, supported_updates, build_local, build_sync
from paddle_ngraph.transpiler import engines
from paddle_ngraph.zoo.models import build_program

from harness import ir_guard

paddle.enable_static()


def converted(optimizer="momentum"):
    main, _, _, _ = build_program("mnist_mlp", optimizer)
    return paddle_ngraph.convert(main)


def updates(function):
    return [n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)]


def test_sync_averages_only_the_updated_parameters_through_their_snapshots():
    original = converted("momentum")
    sync, params, snapshots = build_sync(original, 2, bucket_bytes=0)
    assert not [n for n in original.ordered_nodes() if n.op_type == "AllReduce"]  # left as it was
    assert sorted(params) == sorted(u.inputs[u.param_input].node.name for u in updates(original))
    assert [p.name for p in sync.parameters[-len(params):]] == [SNAPSHOT_PREFIX + n for n in params]
    assert all(p.attrs["role"] == "snapshot" for p in snapshots)
    for name in params:
        # param = snapshot - AllReduce_sum(snapshot - updated) * float32(1/2)
        average = sync.results[STATE_PREFIX + name].node
        assert average.op_type == "Subtract" and average.inputs[0].node.name == SNAPSHOT_PREFIX + name
        mean = average.inputs[1].node
        assert mean.op_type == "Multiply" and mean.inputs[1].node.attrs["value"] == np.float32(0.5)
        reduce = mean.inputs[0].node
        assert reduce.op_type == "AllReduce" and reduce.attrs["reduction"] == "sum"
        delta = reduce.inputs[mean.inputs[0].index].node
        assert delta.op_type == "Subtract" and isinstance(delta.inputs[1].node, OptimizerUpdate)
    velocities = [r for r in sync.results if r.startswith(STATE_PREFIX) and "velocity" in r]
    assert velocities and all(isinstance(sync.results[r].node, OptimizerUpdate) for r in velocities)
    local = build_local(original)
    assert not [n for n in local.ordered_nodes() if n.op_type == "AllReduce"]
    assert [p.name for p in local.parameters] == [p.name for p in original.parameters]


def test_sync_averages_batch_norms_running_statistics_too_as_paddles_iter_parameters():
    main, _, _, _ = build_program("resnet_small", "momentum")
    original = paddle_ngraph.convert(main)
    _, params, _ = build_sync(original, 2)
    updated = {u.inputs[u.param_input].node.name for u in updates(original)}
    running = set(params) - updated
    assert running and all(n.startswith("batch_norm") and n.endswith(("w_1", "w_2")) for n in running)
    assert updated <= set(params) and not [n for n in params if "velocity" in n]


def test_sync_buckets_the_differences_like_the_gradients():
    sync, params, _ = build_sync(converted("sgd"), 2, bucket_bytes=32 << 20, min_buckets=2)
    buckets = [n for n in sync.ordered_nodes() if n.op_type == "AllReduce"]
    assert len(buckets) == 2 and sum(len(b.inputs) for b in buckets) == len(params)
    assert {b.attrs["bucket"] for b in buckets} == {"localsgd_bucket_0", "localsgd_bucket_1"}


def test_adam_is_refused_as_paddles_local_sgd_covers_sgd_and_momentum():
    with pytest.raises(ConfigError, match="SGD and Momentum.*AdamUpdate of"):
        supported_updates(converted("adam"))


@pytest.mark.parametrize("ir", ["pir", "legacy"])
def test_the_loss_is_found_from_the_gradient_seed(ir):
    with ir_guard(ir):
        main, _, _, loss = build_program("mnist_mlp", "sgd")
        view = decode(main)
        assert loss_name(view) == view.name_of(loss)


@pytest.mark.parametrize("values,message", [
    (dict(localsgd_adaptive=True), "localsgd_adaptive needs localsgd_k_steps >= 1"),
    (dict(localsgd_k_steps=2, zero_stage=1), "cannot be combined with zero_stage 1"),
    (dict(localsgd_k_steps=2, accumulate_steps=4), "cannot be combined with accumulate_steps 4"),
    (dict(localsgd_k_steps=2, compress="bf16"), "cannot be combined with compress 'bf16'"),
    (dict(localsgd_k_steps=2, reduction="sum"), "cannot be combined with reduction 'sum'"),
    (dict(localsgd_k_steps=-1), "'localsgd_k_steps' must be >= 0"),
    (dict(localsgd_begin_step=-1), "'localsgd_begin_step' must be >= 0"),
])
def test_combinations_local_sgd_cannot_honour_are_config_errors(values, message):
    with pytest.raises(ConfigError, match=message):
        Config(**values)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_one_process_trains_as_without_local_sgd(optimizer):
    """As Paddle's _can_apply (worker_num <= 1): nothing to average, plain training."""
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.random((8, 784), dtype=np.float32), "y": rng.integers(0, 10, (8, 1))} for _ in range(3)]
    results = []
    for options in ({}, dict(localsgd_k_steps=2, localsgd_adaptive=True)):
        main, startup, _, loss = build_program("mnist_mlp", optimizer)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            paddle_ngraph.transpile(main, backend="INTERPRETER", transport="null", **options)
            assert engines()[-1].local is None
            results.append([exe.run(main, feed=f, fetch_list=[loss])[0] for f in feeds])
    np.testing.assert_array_equal(results[0], results[1])


def test_transpile_refuses_adam_on_one_process_too():
    main, startup, _, _ = build_program("mnist_mlp", "adam")
    with pytest.raises(ConfigError, match="SGD and Momentum"):
        paddle_ngraph.transpile(main, backend="INTERPRETER", transport="null", localsgd_k_steps=4)
