"""elastic.run(on_resize=...) in one process: what each policy changes, in both IRs."""
import numpy as np
import paddle
import pytest

from harness import IRS, ir_guard
from paddle_ngraph import elastic
from paddle_ngraph.elastic import resize
from paddle_ngraph.elastic.layer_state import scale_optimizer_lr
from paddle_ngraph.errors import ConfigError
from paddle_ngraph.transpiler import engines_of
from static_models import build


@pytest.fixture
def accumulate_policy():
    """As elastic.run(on_resize="accumulate") sets it for a job that began on 4 ranks."""
    resize.set_current("accumulate", 4)
    yield
    resize.set_current(None, None)


def test_the_policy_is_checked():
    with pytest.raises(ConfigError, match="on_resize='halve'; valid: None, 'scale_lr', 'accumulate'"):
        elastic.run(lambda state: None, on_resize="halve")


def test_accumulation_holds_the_first_global_batch_rounding_up():
    assert [resize.accumulation_factor(4, n) for n in (4, 3, 2, 1, 5)] == [1, 2, 2, 4, 1]


@pytest.mark.usefixtures("dynamic_mode")
def test_a_float_learning_rate_and_a_scheduler_are_scaled():
    layer = paddle.nn.Linear(2, 2)
    adam = paddle.optimizer.Adam(learning_rate=0.3, parameters=layer.parameters())
    assert scale_optimizer_lr(adam, 2 / 3) == ("0.3", "0.2")
    assert adam.get_lr() == 0.3 * (2 / 3)
    decay = paddle.optimizer.lr.StepDecay(learning_rate=0.5, step_size=1, gamma=0.5)
    sgd = paddle.optimizer.SGD(learning_rate=decay, parameters=layer.parameters())
    decay.step()  # 0.25
    scale_optimizer_lr(sgd, 0.5)
    assert sgd.get_lr() == 0.125
    decay.step()  # the schedule goes on from the scaled base: 0.25 * 0.5 ** 2
    assert sgd.get_lr() == 0.0625


@pytest.mark.parametrize("ir", IRS)
def test_a_static_programs_learning_rate_variable_is_scaled(ir):
    with ir_guard(ir):
        main, startup, _ = build(lr=0.05)
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            paddle.static.Executor(paddle.CPUPlace()).run(startup)
            state = elastic.State(program=main, scope=scope, step=0)
            [name] = state._part.learning_rates
            before, after = state.scale_learning_rate(0.5)
            assert before == f"{name} 0.05" and after == "0.025"
            assert np.array(scope.find_var(name).get_tensor()).item() == np.float32(0.05) * np.float32(0.5)


@pytest.mark.usefixtures("accumulate_policy")
@pytest.mark.parametrize("ir", IRS)
def test_accumulate_multiplies_the_programs_accumulate_steps(ir):
    """A job that began on 4 ranks, now on 1 (this process): 4 calls per update, times the 2 asked."""
    with ir_guard(ir):
        main, startup, loss = build()
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            paddle.static.Executor(paddle.CPUPlace()).run(startup)
            state = elastic.State(program=main, scope=scope, step=0)
            state.commit()
            assert elastic.accumulate_steps() == 4
            program, _ = state.transpile([loss], backend="INTERPRETER", accumulate_steps=2)
            assert [e.accumulate_steps for e in engines_of(program)] == [8]
