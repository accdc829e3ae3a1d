"""accumulate_steps: k exe.run calls on micro-batches of B make one update equal to Paddle's own
executor running one step on the concatenated batch of kB (mean loss), on every backend."""
import contextlib

import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ConfigError
from paddle_ngraph.transpiler import engines
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard

from harness import IRS, assert_trained_close, ir_guard
from test_transpile_mlp import parameter_names

K, B = 4, 8
LR = {"sgd": 0.05, "adam": 0.001}
x_all, y_all = digits_as_mnist()


def params_of(scope, main):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in parameter_names(main)}


@contextlib.contextmanager
def transpiled_mlp(backend, accumulate_steps):
    """mnist_mlp with SGD, started in a scope of its own and transpiled: (main, loss, scope, exe)."""
    main, startup, _, loss = build_program("mnist_mlp", "sgd", lr=LR["sgd"])
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        paddle_ngraph.transpile(main, backend=backend, accumulate_steps=accumulate_steps)
        yield main, loss, scope, exe


def micro_batches(update):
    """The K micro-batches of update ``update``; their concatenation is that update's big batch."""
    xb, yb = shard(x_all, y_all, K * B, 0, 1, update)
    return [(xb[i * B:(i + 1) * B], yb[i * B:(i + 1) * B]) for i in range(K)], (xb, yb)


def train(optimizer, updates, accumulate_steps=None, backend=None, on_micro_step=None):
    """Paddle on the big batches (``accumulate_steps`` None), or the engine on the micro-batches."""
    main, startup, _, loss = build_program("mnist_mlp", optimizer, lr=LR[optimizer])
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        paddle.seed(0)
        exe.run(startup)
        if accumulate_steps:
            paddle_ngraph.transpile(main, backend=backend, accumulate_steps=accumulate_steps)
        losses = []
        for update in range(updates):
            micro, (xb, yb) = micro_batches(update)
            if not accumulate_steps:
                losses.append(float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0]))
                continue
            for i, (xm, ym) in enumerate(micro):
                before = params_of(scope, main)
                losses.append(float(exe.run(main, feed={"x": xm, "y": ym}, fetch_list=[loss])[0]))
                if on_micro_step:
                    on_micro_step(i, before, params_of(scope, main))
        return losses, params_of(scope, main)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("updates", [1, 3])
def test_k_micro_batches_equal_one_paddle_step_on_the_concatenated_batch(ir, optimizer, updates, backend):
    with ir_guard(ir):
        run(optimizer, updates, backend)


def run(optimizer, updates, backend):
    ref_losses, ref = train(optimizer, updates)

    def unchanged_until_the_kth(i, before, after):
        changed = [n for n in before if not np.array_equal(before[n], after[n])]
        if i < K - 1:
            assert not changed, f"micro-step {i + 1} of {K} changed {changed}"
        else:
            assert sorted(changed) == sorted(before), f"the {K}-th micro-step left {set(before) - set(changed)}"

    losses, got = train(optimizer, updates, accumulate_steps=K, backend=backend, on_micro_step=unchanged_until_the_kth)
    assert len(losses) == K * updates
    # A mean loss over kB is the mean of the k micro-batch losses (each fetched on its own call).
    np.testing.assert_allclose(np.mean(np.reshape(losses, (updates, K)), axis=1), ref_losses, rtol=1e-5)
    assert got.keys() == ref.keys() and len(got) == 4
    for name in got:
        assert_trained_close(got[name], ref[name], optimizer, name, lr=LR[optimizer])


def test_accumulate_steps_1_is_plain_training(backend):
    """k = 1 is the default path (no accumulators): every call updates."""
    with ir_guard("legacy"), transpiled_mlp(backend, 1) as (main, loss, scope, exe):
        engine = engines()[-1]
        assert engine.accumulate is None and engine.accumulators == []
        micro, _ = micro_batches(0)
        before = params_of(scope, main)
        exe.run(main, feed={"x": micro[0][0], "y": micro[0][1]}, fetch_list=[loss])
        after = params_of(scope, main)
    assert all(not np.array_equal(before[n], after[n]) for n in before)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_accumulate_steps_below_1_or_not_an_int_is_a_config_error(bad):
    main, startup, _, _ = build_program("mnist_mlp", "sgd")
    with pytest.raises(ConfigError, match="accumulate_steps"):
        paddle_ngraph.transpile(main, backend="INTERPRETER", accumulate_steps=bad)


def test_a_program_without_an_optimizer_update_cannot_accumulate():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [None, 4], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
    with pytest.raises(ConfigError, match="no optimizer update"):
        paddle_ngraph.transpile(main, backend="INTERPRETER", fetch_list=[loss], accumulate_steps=2)


def test_a_checkpoint_between_micro_steps_is_refused_and_after_the_kth_is_written(tmp_path):
    from paddle_ngraph.checkpoint import CheckpointError, save_checkpoint

    with ir_guard("legacy"), transpiled_mlp("INTERPRETER", 2) as (main, loss, scope, exe):
        micro, _ = micro_batches(0)
        exe.run(main, feed={"x": micro[0][0], "y": micro[0][1]}, fetch_list=[loss])
        with pytest.raises(CheckpointError, match="after micro-step 1 of 2"):
            save_checkpoint(main, str(tmp_path), step=1, rank=0)
        exe.run(main, feed={"x": micro[1][0], "y": micro[1][1]}, fetch_list=[loss])
        assert save_checkpoint(main, str(tmp_path), step=1, rank=0) is not None


@pytest.mark.parametrize("clip", ["global", "norm"])
def test_clipping_reads_the_merged_gradient_once_per_update(clip):
    """Paddle's gradient merge clips the mean of the k gradients, not each micro-batch's gradient:
    with clipping, k micro-steps still equal one step of Paddle on the concatenated batch."""
    import clip_models

    with ir_guard(clip_models.IR_OF[clip]):
        reference = clip_models.train_merged(clip, merge=2)
        got = clip_models.train_merged(clip, transpile={"accumulate_steps": 2}, merge=2)
    assert sorted(got) == sorted(reference) and reference
    for name, value in reference.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
