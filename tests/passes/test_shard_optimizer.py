"""The ZeRO-1 pass: reduce-scatter, one fused update per bucket on a slice, allgather."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.ir.roles import STATE_PREFIX
from paddle_ngraph.passes import InsertAllReduce, PassManager
from paddle_ngraph.passes.shard_optimizer import SHARD_PREFIX, ShardOptimizer
from paddle_ngraph.zoo.models import build_program

paddle.enable_static()


def sharded(optimizer="adam", nranks=3, bucket_mb=0.5):
    main, _, _, _ = build_program("mnist_mlp", optimizer)
    function = paddle_ngraph.convert(main)
    before = {p.name: p.output_types[0] for p in function.parameters}
    trained = sorted(p.name for p in function.parameters if p.attrs["role"] == "parameter")
    shard = ShardOptimizer(nranks, bucket_bytes=int(bucket_mb * (1 << 20)))
    PassManager([shard, InsertAllReduce(nranks)]).run(function)
    return function, shard, before, trained


def op_types(function):
    return [n.op_type for n in function.ordered_nodes()]


@pytest.mark.parametrize("optimizer,sliced_state", [("sgd", 0), ("momentum", 1), ("adam", 2)])
def test_each_bucket_is_reduce_scattered_updated_on_a_slice_and_gathered(optimizer, sliced_state):
    function, shard, before, trained = sharded(optimizer)
    types = op_types(function)
    buckets = shard.buckets
    assert len(buckets) >= 2
    assert types.count("ReduceScatter") == types.count("AllGather") == len(buckets)
    assert "AllReduce" not in types  # no gradient is reduced twice
    params = [n for b in buckets for n in b.params]
    assert sorted(params) == trained and len(trained) == 4
    for b in buckets:
        total = sum(b.sizes)
        assert b.shard_size == -(-total // 3)  # padded to a multiple of the rank count
        assert len(b.slices) == 1 + sliced_state  # the parameters' slice, then each sliced state
        for name in b.slices:
            slice_type = function.parameter(name).output_types[0]
            assert tuple(slice_type.shape) == (b.shard_size,)
            assert STATE_PREFIX + name in function.results  # updated in place every step
    # The full moments and velocities left the function (the engine frees them); beta powers stay.
    names = {p.name for p in function.parameters}
    removed = set(before) - names
    assert len(removed) == sliced_state * len(params)
    assert not any(STATE_PREFIX + n in function.results for n in removed)
    if optimizer == "adam":
        pows = [n for n in names if "beta1_pow" in n]
        assert len(pows) == len(params) and all(STATE_PREFIX + n in function.results for n in pows)
    # Every parameter is written back whole, from the gathered slices.
    for n in params:
        result = function.results[STATE_PREFIX + n]
        assert tuple(result.type.shape) == tuple(before[n].shape)
    assert [p.name for p in function.parameters][-len(shard.buckets) * (1 + sliced_state):] == \
        [n for b in buckets for n in b.slices]  # the slices come last: the engine appends them


def test_one_rank_changes_nothing():
    main, _, _, _ = build_program("mnist_mlp", "adam")
    function = paddle_ngraph.convert(main)
    assert not ShardOptimizer(1).run(function)


@pytest.mark.parametrize("optimizer", ["lamb", "lars"])
def test_norm_based_updates_are_not_sliced_and_keep_their_allreduce(optimizer):
    """Lamb's trust ratio and LARS's local learning rate need whole-parameter norms: their
    parameters stay on AllReduce, one per gradient."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 8], "float32")
        loss = paddle.mean(paddle.nn.Linear(8, 4)(x))
        if optimizer == "lamb":
            paddle.optimizer.Lamb(0.01).minimize(loss)
        else:
            paddle.incubate.optimizer.LarsMomentumOptimizer(0.1, 0.9).minimize(loss)
    function = paddle_ngraph.convert(main)
    shard = ShardOptimizer(2)
    PassManager([shard, InsertAllReduce(2)]).run(function)
    types = op_types(function)
    assert not shard.buckets and "ReduceScatter" not in types
    update = {"lamb": "LambUpdate", "lars": "LarsMomentumUpdate"}[optimizer]
    assert types.count(update) == 2
    for node in function.ordered_nodes():
        if node.op_type == update:  # its gradient comes whole from the (fused) AllReduce
            assert node.inputs[node.grad_input].node.op_type == "AllReduce"
    assert not any(p.name.startswith(SHARD_PREFIX) for p in function.parameters)



def test_a_bucket_led_by_a_one_element_parameter_slices_the_moments_not_the_beta_powers():
    """Adam's beta powers have shape (1,): so has a (1,) bias. Which state is sliced is the update's
    to say (its moments), not a shape comparison with the bucket's first parameter."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [4, 6], "float32")
        out = paddle.nn.Linear(16, 1)(paddle.nn.functional.relu(paddle.nn.Linear(6, 16)(x)))
        paddle.optimizer.Adam(0.01).minimize(paddle.mean(out))
    function = paddle_ngraph.convert(main)
    pows = sorted(p.name for p in function.parameters if "_pow_acc" in p.name)
    shard = ShardOptimizer(3, bucket_bytes=1)  # a bucket per parameter: the (1,) bias leads its own
    PassManager([shard, InsertAllReduce(3)]).run(function)
    assert any(b.sizes == [1] for b in shard.buckets)
    for b in shard.buckets:
        assert len(b.slices) == 3, b.slices  # the parameters, moment 1, moment 2
    names = {p.name for p in function.parameters}
    assert set(pows) <= names and all(STATE_PREFIX + n in function.results for n in pows)
