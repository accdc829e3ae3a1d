"""The reference models (MLP, LeNet, small ResNet, transformer layer) train identically with
``paddle_ngraph.transpile`` + an unchanged ``exe.run`` and with plain Paddle, in both IRs.

Every persistable variable that plain training changes is compared: parameters, batch-norm
running mean and variance, optimizer accumulators.
"""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.zoo.models import MODELS, build_program, make_batch

from harness import IRS, assert_trained_close, ir_guard

STEPS = 10
BATCH = 8
LR = {"sgd": 0.03, "adam": 0.001}
MODEL_KWARGS = {"transformer_layer": {"dropout": 0.0}}  # dropout 0: deterministic


def scope_tensors(scope) -> dict:
    values = {}
    for name in scope.local_var_names():
        var = scope.find_var(name)
        try:
            tensor = var.get_tensor()
        except Exception:  # feed/fetch lists and other non-tensor variables
            continue
        if tensor._is_initialized():
            values[name] = np.array(tensor)
    return values


def train(model, optimizer, transpiled, batches, backend=None):
    main, startup, _, loss = build_program(model, optimizer, lr=LR[optimizer], **MODEL_KWARGS.get(model, {}))
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        initial = scope_tensors(scope)
        if transpiled:
            assert paddle_ngraph.unsupported_ops(main) == []
            assert paddle_ngraph.transpile(main, backend=backend) is main
            assert "ngraph_engine" in str(main)
        losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for feed in batches]
        final = scope_tensors(scope)
    return np.array(losses), initial, final


def assert_state_close(got, ref, optimizer, name):
    """10 steps of 4 models, with batch norm statistics and transformer layers: 1e-4 at tensor level."""
    assert_trained_close(got, ref, optimizer, name, lr=LR[optimizer], norm_tol=1e-4)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("model", list(MODELS))
def test_training_matches_paddle(model, ir, optimizer, backend):
    rng = np.random.default_rng(7)
    batches = [make_batch(model, BATCH, rng) for _ in range(STEPS)]
    with ir_guard(ir):
        ref_losses, initial, ref_final = train(model, optimizer, False, batches)
        losses, _, final = train(model, optimizer, True, batches, backend)
    assert np.all(np.isfinite(ref_losses))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)
    changed = [n for n in ref_final if n in initial and not np.array_equal(initial[n], ref_final[n])]
    assert changed, "plain training changed no persistable variable"
    if model == "resnet_small":  # running mean and variance of every batch norm
        assert sum(".w_1" in n or ".w_2" in n for n in changed) == 2 * 6  # 6 batch norms
    for name in changed:
        assert name in final, name
        assert_state_close(final[name], ref_final[name], optimizer, name)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("model", list(MODELS))
def test_model_builds_and_make_batch_fits(model, ir):
    with ir_guard(ir):
        main, _, feeds, _ = build_program(model, "sgd")
        assert paddle_ngraph.unsupported_ops(main) == []
    batch = make_batch(model, 3, np.random.default_rng(0))
    assert batch.keys() == feeds.keys()
    for name, (shape, dtype) in feeds.items():
        assert list(batch[name].shape) == [3 if d is None else d for d in shape]
        assert batch[name].dtype == np.dtype(dtype)
