"""The gradient accumulation pass: the accumulate and apply variants of a training function."""
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ConfigError, ValidationError
from paddle_ngraph.ir.roles import FETCH_PREFIX, STATE_PREFIX, fetch_result
from paddle_ngraph.ir.ops.optimizer import OptimizerUpdate
from paddle_ngraph.passes import InsertAllReduce, PassManager
from paddle_ngraph.passes.accumulate_gradients import ACCUMULATOR_PREFIX, build_accumulate, build_apply
from paddle_ngraph.zoo.models import build_program

paddle.enable_static()


def converted(model="mnist_mlp", optimizer="adam"):
    main, _, _, _ = build_program(model, optimizer)
    return paddle_ngraph.convert(main)


def paddle_inputs(function):
    return [p.name for p in function.parameters if p.attrs["role"] != "accumulator"]


def updates(function):
    return [n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)]


def test_apply_averages_the_accumulated_gradient_that_each_update_and_allreduce_consume():
    original = converted()
    apply, accumulators, _ = build_apply(original, 4)
    assert len(updates(original)) == 4  # the original is left as it was
    assert all(u.inputs[u.grad_input].node.op_type != "Divide" for u in updates(original))
    assert [a.name for a in accumulators] == [p.name for p in apply.parameters[-4:]]
    for update in updates(apply):
        average = update.inputs[update.grad_input].node
        assert average.op_type == "Divide" and average.inputs[1].node.attrs["value"] == 4
        summed = average.inputs[0].node
        assert summed.op_type == "Add" and summed.inputs[0].node.name == \
            ACCUMULATOR_PREFIX + update.inputs[update.param_input].node.name
    PassManager([InsertAllReduce(2, bucket_bytes=0)]).run(apply)
    for update in updates(apply):  # the collective carries the average, once per k micro-steps
        reduced = update.inputs[update.grad_input].node
        assert reduced.op_type == "AllReduce" and reduced.inputs[0].node.op_type == "Divide"


def test_accumulate_has_no_update_no_collective_and_returns_the_sums():
    original = converted()
    apply, accumulators, _ = build_apply(original, 2)
    PassManager([InsertAllReduce(2)]).run(apply)
    accumulate = build_accumulate(original, paddle_inputs(apply))
    types = {n.op_type for n in accumulate.ordered_nodes()}
    assert not updates(accumulate) and "AllReduce" not in types
    assert [p.name for p in accumulate.parameters] == [p.name for p in apply.parameters]
    assert not [r for r in accumulate.results if r.startswith(STATE_PREFIX)]  # parameters, moments unchanged
    assert sorted(r for r in accumulate.results if r.startswith(ACCUMULATOR_PREFIX)) == sorted(a.name for a in accumulators)
    assert [r for r in accumulate.results if r.startswith(FETCH_PREFIX)] == \
        [r for r in apply.results if r.startswith(FETCH_PREFIX)]


def test_state_the_forward_pass_updates_advances_on_every_micro_step():
    """Batch norm's running statistics do not depend on the update: the accumulate variant keeps them."""
    original = converted("resnet_small", "sgd")
    kept = [r for r in build_accumulate(original, paddle_inputs(original)).results if r.startswith(STATE_PREFIX)]
    # batch_norm2d_i.w_1 and .w_2: the running mean and variance, two per batch-norm layer.
    assert kept and all(r.startswith(STATE_PREFIX + "batch_norm2d_") for r in kept) and len(kept) % 2 == 0, kept
    trained = {STATE_PREFIX + u.inputs[u.param_input].node.name for u in updates(original)}
    assert trained and not trained & set(kept)


def test_a_fetch_of_an_updated_value_is_rejected_naming_it():
    original = converted("mnist_mlp", "sgd")
    update = updates(original)[0]
    original.results[fetch_result("new_weight")] = update.output(0)
    with pytest.raises(ValidationError, match="fetched value 'new_weight'.*depends on the optimizer update"):
        build_accumulate(original, paddle_inputs(original))


def test_a_function_without_an_update_is_rejected():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [None, 4], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
    with pytest.raises(ConfigError, match="no optimizer update"):
        build_apply(paddle_ngraph.convert(main, fetch_list=[loss]), 2)
