"""elastic.State in one process: a commit restored repeats the steps after it bit for bit, before
the optimizer's first step too, and the same commit read back from disk does as well."""
import numpy as np
import paddle
import pytest

from paddle_ngraph import elastic
from paddle_ngraph.checkpoint import latest_checkpoint
from paddle_ngraph.errors import ConfigError

pytestmark = pytest.mark.usefixtures("dynamic_mode")


def _state(root=None, seed=0):
    paddle.seed(seed)
    # The optimizer's file is keyed by Paddle's parameter names: the same names as the saved run's.
    with paddle.utils.unique_name.guard():
        model = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.Dropout(0.5), paddle.nn.Linear(8, 1))
    scheduler = paddle.optimizer.lr.StepDecay(0.1, step_size=2, gamma=0.5)
    optimizer = paddle.optimizer.Adam(learning_rate=scheduler, parameters=model.parameters())
    return elastic.State(model, optimizer, checkpoint_dir=root, step=0)


def _steps(state, n):
    """n steps with dropout (Paddle's generator) and data from NumPy's: both must be restored."""
    state.model.train()
    with paddle.utils.unique_name.guard():  # accumulators named as in a fresh process, for load()
        return _run_steps(state, n)


def _run_steps(state, n):
    for _ in range(n):
        x = paddle.to_tensor(np.random.standard_normal((5, 4)).astype(np.float32))
        state.model(x).square().mean().backward()
        state.optimizer.step()
        state.optimizer.clear_grad()
        state.optimizer._learning_rate.step()
        state.step += 1
    return {k: np.array(v) for k, v in state.model.state_dict().items()}


def _same(a, b):
    return sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("before", [0, 3])
def test_restore_repeats_the_steps_bitwise(before):
    state = _state()
    _steps(state, before)
    state.commit()
    first = _steps(state, 3)
    assert state.step == before + 3
    state.restore()
    assert state.step == before
    assert _same(_steps(state, 3), first)


def test_the_commit_on_disk_loads_and_repeats_the_steps(tmp_path):
    state = _state(str(tmp_path))
    _steps(state, 2)
    np.random.seed(5)
    state.commit(save=True)
    assert latest_checkpoint(str(tmp_path)).endswith("step-000001")
    np.random.seed(9)
    paddle.seed(9)
    want = _steps(state, 2)
    fresh = _state(str(tmp_path), seed=3)
    assert fresh.load() == 1 and fresh.step == 2
    np.random.seed(9)
    paddle.seed(9)
    assert _same(_steps(fresh, 2), want)


def test_values_are_declared_and_json_on_disk(tmp_path):
    state = _state(str(tmp_path))
    with pytest.raises(AttributeError, match="declare it in State"):
        state.epoch = 1
    with pytest.raises(ConfigError, match="taken by State"):
        elastic.State(state.model, commits=1)
    with pytest.raises(ConfigError, match="paddle.nn.Layer"):
        elastic.State(object())
    state.step = object()
    state.commit()
    with pytest.raises(ConfigError, match="JSON"):
        state.save()


@pytest.mark.usefixtures("dynamic_mode")
def test_a_layer_commit_reuses_the_arrays_of_the_one_before_the_last_and_never_the_last():
    """Copies go into the arrays of the commit before the last (no fresh memory per commit), while
    the last commit, which a failure half-way through a commit goes back to, stays whole."""
    import copy

    from paddle_ngraph.elastic.layer_state import LayerState

    paddle.seed(3)
    model = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.Linear(8, 1))
    opt = paddle.optimizer.Momentum(learning_rate=0.1, parameters=model.parameters())

    def step():
        model(paddle.randn([5, 4])).mean().backward()
        opt.step()
        opt.clear_grad()

    part = LayerState(model, opt)
    step()
    first = part.snapshot(None)
    step()
    second = part.snapshot(first)
    second_then = copy.deepcopy(second)
    step()
    third = part.snapshot(second)
    reused = [k for k in third["model"] if third["model"][k] is first["model"][k]]
    assert reused == list(third["model"])  # every parameter went into the first commit's arrays
    for name in second["model"]:
        np.testing.assert_array_equal(second["model"][name], second_then["model"][name])
        assert third["model"][name] is not second["model"][name]
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(third["model"][name], np.array(value))
    velocities = [k for k, v in opt.state_dict().items() if isinstance(v, paddle.Tensor)]
    assert velocities
    for key in velocities:
        np.testing.assert_array_equal(third["optimizer"][key], np.array(opt.state_dict()[key]))


@pytest.mark.usefixtures("dynamic_mode")
def test_a_float_learning_rate_is_part_of_the_commit():
    """Paddle's optimizer state dict holds a scheduler's rate but not a float one: a rank that joins
    a group whose rate on_resize scaled must take it from the commit, not from its own optimizer."""
    model = paddle.nn.Linear(2, 1)
    opt = paddle.optimizer.SGD(learning_rate=0.05, parameters=model.parameters())
    state = elastic.State(model, opt, step=0)
    opt.set_lr(0.05 * (2 / 3))  # as on_resize="scale_lr" after 3 -> 2 ranks
    state.commit()
    opt.set_lr(0.05)  # a fresh rank's own optimizer
    state.restore()
    assert opt.get_lr() == 0.05 * (2 / 3)


def test_the_commit_on_disk_keeps_the_float_learning_rate_and_the_group_sizes(tmp_path):
    """A job restarted from disk (Paddle's launcher with an etcd master restarts every worker)
    must find what on_resize changed: the rate a 'scale_lr' resize set, which no Paddle file
    holds, and the sizes of the group at the commit and at the job's start."""
    with paddle.utils.unique_name.guard():
        model = paddle.nn.Linear(2, 1)
    opt = paddle.optimizer.SGD(learning_rate=0.05, parameters=model.parameters())
    state = elastic.State(model, opt, checkpoint_dir=str(tmp_path), step=0)
    state.commit()  # the job's start: one process, size 1
    opt.set_lr(0.05 * (2 / 3))  # as on_resize="scale_lr" after 3 -> 2 ranks
    state.__dict__["_initial_size"] = 3  # as if the job began on three ranks
    state.commit(save=True)
    with paddle.utils.unique_name.guard():
        fresh_model = paddle.nn.Linear(2, 1)
    fresh_opt = paddle.optimizer.SGD(learning_rate=0.05, parameters=fresh_model.parameters())
    fresh = elastic.State(fresh_model, fresh_opt, checkpoint_dir=str(tmp_path), step=0)
    assert fresh.load() == 2
    assert fresh_opt.get_lr() == 0.05 * (2 / 3)
    assert fresh.committed_size == 1 and fresh.initial_size == 3
    fresh_opt.set_lr(0.05)
    fresh.restore()  # the loaded commit holds the rate, as an in-memory one does
    assert fresh_opt.get_lr() == 0.05 * (2 / 3)
