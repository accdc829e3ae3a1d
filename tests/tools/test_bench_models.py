"""tools/bench_models.py: the dygraph peers' models are the static reference models (same parameters,
same logits and loss from the same weights) and run a training step in both frameworks."""
import os
import sys

import numpy as np
import paddle
import pytest

# torch is a peer of the benchmark, installed by make bench-deps, not by make test: its halves of
# these tests are skipped without it; the Paddle dygraph halves always run.
try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (make bench-deps installs it)")

from paddle_ngraph.zoo.models import FEEDS, MODELS, build_program, make_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_models  # noqa: E402

MODEL_KWARGS = {"transformer_layer": {"dropout": 0.0}}
# Every zoo model, and the benchmark's variants of them (other sizes of the same builder).
CASES = {name: (name, MODEL_KWARGS.get(name, {})) for name in MODELS} | dict(bench_models.VARIANTS)


@pytest.fixture
def dygraph():
    was_static = not paddle.in_dynamic_mode()
    paddle.disable_static()
    try:
        yield
    finally:
        if was_static:
            paddle.enable_static()


def static_program(name, batch: dict, kwargs: dict) -> tuple[list, float, np.ndarray]:
    """([(name, value, trainable)] of the program's parameters in creation order, loss and logits on ``batch``)."""
    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard():  # Program.all_parameters() is legacy-IR only
            main, startup, _, loss = build_program(name, "sgd", **kwargs)
            scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
            with paddle.static.scope_guard(scope):
                exe.run(startup)
                params = [(p.name, np.array(scope.find_var(p.name).get_tensor()), p.trainable)
                          for p in main.all_parameters()]
                logits = next(op.input("Logits")[0] for op in main.global_block().ops
                              if op.type == "softmax_with_cross_entropy")
                loss, logits = exe.run(main, feed=batch, fetch_list=[loss, logits])  # before the SGD update
    finally:
        paddle.disable_static()
    return params, float(loss), logits


def sizes(shapes) -> list[int]:
    return sorted(int(np.prod(s)) for s in shapes)


@pytest.mark.parametrize("case", list(CASES))
def test_parameter_counts_match_the_static_program(case, dygraph):
    name, kwargs = CASES[case]
    params, *_ = static_program(name, make_batch(name, 2), kwargs)
    # Trainable parameters, and batch-norm running mean/variance (not trainable in Paddle, buffers in torch).
    static = (sizes(v.shape for _, v, trainable in params if trainable),
              sizes(v.shape for _, v, trainable in params if not trainable))
    pm = bench_models.paddle_model(name, **kwargs)
    ours = {"paddle": (sizes(p.shape for p in pm.parameters() if not p.stop_gradient),
                       sizes(p.shape for p in pm.parameters() if p.stop_gradient))}
    if torch is not None:
        tm = bench_models.torch_model(name, **kwargs)
        ours["torch"] = (sizes(p.shape for p in tm.parameters() if p.requires_grad),
                         sizes(b.shape for b in tm.buffers() if b.is_floating_point()))  # not num_batches_tracked
    for framework, (trainable, stats) in ours.items():
        assert sum(trainable) == sum(static[0]), (framework, sum(trainable), sum(static[0]))
        assert trainable == static[0] and stats == static[1], framework


@pytest.mark.parametrize("case", list(CASES))
def test_the_static_weights_give_the_static_logits(case, dygraph):
    name, kwargs = CASES[case]
    batch = make_batch(name, 4, np.random.default_rng(1))
    params, static_loss, static_logits = static_program(name, batch, kwargs)

    pm = bench_models.paddle_model(name, **kwargs)
    assert len(pm.state_dict()) == len(params)
    for (key, tensor), (static_name, value, _) in zip(pm.state_dict().items(), params):
        assert tensor.shape == list(value.shape), (key, static_name)
        tensor.set_value(value)
    *inputs, y = [paddle.to_tensor(batch[feed]) for feed in FEEDS[name]]
    logits = pm(*inputs)
    np.testing.assert_allclose(logits.numpy(), static_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(bench_models.paddle_loss(logits, y)), static_loss, rtol=1e-5)
    if torch is None:
        return

    tm = bench_models.torch_model(name, **kwargs)
    state = {k: v for k, v in tm.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert len(state) == len(params)
    with torch.no_grad():
        for (key, tensor), (static_name, value, _) in zip(state.items(), params):
            owner = tm.get_submodule(key.rpartition(".")[0])
            if isinstance(owner, torch.nn.Linear) and key.endswith("weight"):
                value = value.T  # Paddle's Linear weight is [in, out], torch's [out, in]
            assert tuple(tensor.shape) == value.shape, (key, static_name)
            tensor.copy_(torch.from_numpy(np.ascontiguousarray(value)))
        *inputs, y = [torch.from_numpy(batch[feed]) for feed in FEEDS[name]]
        logits = tm(*inputs)
        np.testing.assert_allclose(logits.numpy(), static_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(float(bench_models.torch_loss(logits, y)), static_loss, rtol=1e-5)


def feeds(name, batch, to_tensor):
    values = make_batch(name, batch, np.random.default_rng(0))
    return [to_tensor(values[feed]) for feed in FEEDS[name]]  # inputs in FEEDS order, then y


@needs_torch
@pytest.mark.parametrize("name", list(MODELS))
def test_torch_step(name):
    model = bench_models.torch_model(name, **MODEL_KWARGS.get(name, {}))
    *inputs, y = feeds(name, 4, torch.from_numpy)
    logits = model(*inputs)
    assert tuple(logits.shape) == (4, 10)
    loss = bench_models.torch_loss(logits, y)
    loss.backward()
    assert loss.ndim == 0 and np.isfinite(loss.item())
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", list(MODELS))
def test_paddle_step(name, dygraph):
    model = bench_models.paddle_model(name, **MODEL_KWARGS.get(name, {}))
    *inputs, y = feeds(name, 4, paddle.to_tensor)
    logits = model(*inputs)
    assert logits.shape == [4, 10]
    loss = bench_models.paddle_loss(logits, y)
    loss.backward()
    assert loss.ndim == 0 and np.isfinite(float(loss))
    assert all(p.grad is not None for p in model.parameters() if not p.stop_gradient)


def test_unknown_model_and_static_mode_are_refused():
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        bench_models.torch_model("vgg")
    was_dynamic = paddle.in_dynamic_mode()
    paddle.enable_static()
    try:
        with pytest.raises(RuntimeError, match="disable_static"):
            bench_models.paddle_model("mnist_mlp")
    finally:
        if was_dynamic:
            paddle.disable_static()
