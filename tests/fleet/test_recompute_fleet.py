"""strategy.recompute with recompute_configs['checkpoints'] under strategy.ngraph: the engine
recomputes (instead of Paddle's RecomputeOptimizer), and training is bitwise what it is without."""
import numpy as np
import paddle
import pytest

import paddle_ngraph  # noqa: F401  (adds strategy.ngraph)
from paddle_ngraph.fleet.features import config_overrides
from paddle_ngraph.transpiler import engines
from paddle_ngraph.zoo.models import MODELS, checkpoint_names, make_batch, make_optimizer

from harness import IRS, ir_guard
from helpers import parameter_names

import paddle.distributed.fleet as fleet  # noqa: E402


@pytest.fixture
def static_fleet():
    paddle.enable_static()
    fleet.init(is_collective=True)
    yield


def train(recompute: bool, ir: str = "legacy", steps: int = 3):
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        main.random_seed = startup.random_seed = 1
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            _, loss = MODELS["transformer_layer"](dropout=0.0)
            strategy = fleet.DistributedStrategy()
            strategy.ngraph = True
            if recompute:
                strategy.recompute = True
                strategy.recompute_configs = {"checkpoints": checkpoint_names("transformer_layer", main)}
            fleet.distributed_optimizer(make_optimizer("adam", 0.01), strategy).minimize(loss)
        engine = engines()[-1]
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            rng = np.random.default_rng(0)
            losses = [np.array(exe.run(main, feed=make_batch("transformer_layer", 16, rng), fetch_list=[loss])[0])
                      for _ in range(steps)]
            params = {name: np.array(scope.find_var(name).get_tensor()) for name in parameter_names(main)}
    return losses, params, engine


@pytest.mark.parametrize("ir", IRS)
def test_recompute_is_the_engines_and_changes_no_bit(static_fleet, ir):
    """In PIR the checkpoints are named by position ('%<op index>.<output>', read from the forward
    program before minimize, the only place fleet gives): minimize inserts ops before the forward's,
    so the names are resolved to their values before it (they named nothing after it)."""
    losses, params, plain = train(recompute=False, ir=ir)
    losses_r, params_r, engine = train(recompute=True, ir=ir)
    assert engine.recomputed and not plain.recomputed
    assert fleet.fleet._get_applied_meta_list() == ["NgraphOptimizer"]
    assert all(np.array_equal(a, b) for a, b in zip(losses, losses_r))
    assert params.keys() == params_r.keys()
    assert all(np.array_equal(params[n], params_r[n]) for n in params)
    assert engine.executable.peak_bytes < plain.executable.peak_bytes


def test_overrides_follow_paddles_rules():
    strategy = fleet.DistributedStrategy()
    assert config_overrides(strategy) == {}
    strategy.recompute = True  # no checkpoints: Paddle does not recompute either
    assert config_overrides(strategy) == {}
    strategy.recompute_configs = {"checkpoints": ["a", "b"]}
    assert config_overrides(strategy) == {"recompute_checkpoints": ["a", "b"]}
