"""recompute_checkpoints through transpile, in both IRs and on both backends: training is bitwise
what it is without recompute (losses, parameters, Adam's moments, over several steps), the CPU
backend's arena is smaller, and checkpoints that are not forward variables are refused by name."""
import logging

import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ConfigError
from paddle_ngraph.transpiler import engines
from paddle_ngraph.zoo.models import build_program, checkpoint_names, make_batch

from harness import ir_guard

STEPS = 3
# transformer_layer's dropout: PIR programs seed their masks (random_seed), legacy ones draw anew
# per run, so two legacy runs could not be compared bit for bit with dropout on.
CASES = [("pir", "transformer_layer", {"dropout": 0.1}), ("pir", "resnet_small", {}), ("pir", "lenet", {}),
         ("pir", "mnist_mlp", {}), ("legacy", "transformer_layer", {"dropout": 0.0}), ("legacy", "mnist_mlp", {})]


def checkpoints_of(model, main):
    names = checkpoint_names(model, main)
    # mnist_mlp's layer outputs (the ReLU, the logits) leave nothing between them: keep only the logits,
    # so that the hidden layer is recomputed.
    return names[-1:] if model == "mnist_mlp" else names


def train(ir, model, kwargs, backend, recompute, handles=False):
    """Losses, then every parameter and optimizer state after STEPS Adam steps; the engine."""
    with ir_guard(ir):
        main, startup, _, loss = build_program(model, "adam", lr=0.01, **kwargs)
        checkpoints = checkpoints_of(model, main) if recompute else []
        if handles and checkpoints:  # the PIR Values themselves
            from paddle_ngraph.frontend import decode

            view = decode(main)
            checkpoints = [view.values[n] for n in checkpoints]
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            names = [n for n in scope.local_var_names() if _initialized(scope, n)]
            paddle_ngraph.transpile(main, backend=backend, recompute_checkpoints=checkpoints)
            engine = engines()[-1]
            rng = np.random.default_rng(0)
            losses = [np.array(exe.run(main, feed=make_batch(model, 16, rng), fetch_list=[loss])[0])
                      for _ in range(STEPS)]
            state = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    return losses, state, engine


def _initialized(scope, name) -> bool:
    try:
        return scope.find_var(name).get_tensor()._is_initialized()
    except ValueError:  # not a dense tensor (legacy feed and fetch lists)
        return False


@pytest.mark.parametrize("ir,model,kwargs", CASES, ids=[f"{ir}-{m}" for ir, m, _ in CASES])
def test_training_is_bitwise_unchanged_and_the_arena_smaller(backend, ir, model, kwargs):
    losses, state, plain = train(ir, model, kwargs, backend, recompute=False)
    losses_r, state_r, engine = train(ir, model, kwargs, backend, recompute=True)
    assert engine.recomputed and not plain.recomputed
    for step, (a, b) in enumerate(zip(losses, losses_r)):
        assert np.array_equal(a, b), f"step {step}: loss {a} != {b}"
    assert state.keys() == state_r.keys() and len(state) > 4
    for name in state:
        assert np.array_equal(state[name], state_r[name]), name
    if backend == "CPU":
        assert engine.executable.peak_bytes < plain.executable.peak_bytes


def test_pir_values_are_taken_as_checkpoints():
    losses, _, plain = train("pir", "transformer_layer", {"dropout": 0.1}, "CPU", recompute=False)
    losses_r, _, engine = train("pir", "transformer_layer", {"dropout": 0.1}, "CPU", recompute=True, handles=True)
    assert engine.recomputed and all(np.array_equal(a, b) for a, b in zip(losses, losses_r))


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_an_unknown_checkpoint_is_a_config_error_naming_it(ir):
    with ir_guard(ir):
        main, startup, _, _ = build_program("mnist_mlp", "sgd")
        good = checkpoint_names("mnist_mlp", main)[0]
        with pytest.raises(ConfigError, match=r"recompute_checkpoints: no variable 'hiden_layer' in"):
            paddle_ngraph.transpile(main, recompute_checkpoints=[good, "hiden_layer"])


def test_a_gradient_is_not_a_checkpoint():
    with ir_guard("legacy"):
        main, _, _, _ = build_program("mnist_mlp", "sgd")
        grad = next(n for n in main.global_block().vars if n.endswith("@GRAD"))
        with pytest.raises(ConfigError, match=rf"'{grad}' is not a forward variable"):
            paddle_ngraph.transpile(main, recompute_checkpoints=[grad])


def test_checkpoints_with_nothing_before_them_warn(caplog):
    with ir_guard("legacy"):
        main, startup, _, _ = build_program("mnist_mlp", "sgd")
        with caplog.at_level(logging.WARNING, logger="paddle_ngraph"):
            paddle_ngraph.transpile(main, recompute_checkpoints=checkpoint_names("mnist_mlp", main)[:1] + ["x"])
    assert "nothing is recomputed" in caplog.text
    assert not engines()[-1].recomputed
