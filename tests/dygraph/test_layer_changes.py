"""paddle_ngraph.DataParallel when the wrapped Layer changes between steps, against plain Paddle
from the same weights on the same batches: a frozen parameter made trainable again, a trainable one
frozen, a sublayer set after wrapping (and the optimizer rebuilt over the new parameters)."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from paddle import nn

import paddle_ngraph

pytestmark = pytest.mark.usefixtures("dynamic_mode")


class Growing(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)
        self.extra = None

    def forward(self, x):
        h = self.fc2(F.relu(self.fc1(x)))
        return self.extra(h) if self.extra is not None else h


def batches(n):
    rng = np.random.default_rng(3)
    return [(paddle.to_tensor(rng.standard_normal((4, 6)).astype("float32")),
             paddle.to_tensor(rng.standard_normal((4, 3)).astype("float32"))) for _ in range(n)]


def train(wrap: bool, change, steps=6):
    """``steps`` Momentum steps; ``change(net, step)`` alters the Layer before a step and returns
    True when the optimizer is to be made again over the Layer's parameters."""
    paddle.seed(0)
    net = Growing()
    net.fc1.weight.stop_gradient = True
    model = paddle_ngraph.DataParallel(net) if wrap else net
    opt = paddle.optimizer.Momentum(0.1, parameters=net.parameters())
    losses, grads = [], []
    for step, (x, y) in enumerate(batches(steps)):
        if change(net, step):
            opt = paddle.optimizer.Momentum(0.1, parameters=net.parameters())
        loss = F.mse_loss(model(x), y)
        loss.backward()
        grads.append({n: p.grad is not None for n, p in net.named_parameters()})
        opt.step()
        opt.clear_grad(set_to_zero=False)
        losses.append(float(loss))
    return losses, grads, net


def check_same(change):
    ref_losses, ref_grads, reference = train(False, change)
    losses, grads, net = train(True, change)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    assert grads == ref_grads  # which parameters got a gradient, step by step
    ref_state, state = reference.state_dict(), net.state_dict()
    assert list(state) == list(ref_state)
    for k in ref_state:
        np.testing.assert_allclose(state[k].numpy(), ref_state[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_parameters_unfrozen_and_frozen_mid_training_train_like_paddle():
    def change(net, step):
        if step == 2:
            net.fc1.weight.stop_gradient = False  # was frozen at wrapping
        if step == 4:
            net.fc2.weight.trainable = False
        return False

    check_same(change)


def test_sublayer_set_after_wrapping_is_captured_and_trained_like_paddle():
    def change(net, step):
        if step == 2:
            paddle.seed(5)
            net.extra = nn.Linear(3, 3)
            return True
        if step == 4:
            paddle.seed(6)
            net.extra = nn.Linear(3, 3)  # replaced by another of the same shape
            return True
        return False

    check_same(change)


class KeepsItsLabel(nn.Layer):
    """A forward that keeps an input in an attribute (Paddle makes the tensor a buffer, a new one at
    each call, as Paddle's YOLOv3 test model does with its ground truth) and reads a value out of
    the graph (so the Layer runs eagerly)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, label):
        self.label = label
        scale = 2.0 if float(x.abs().max()) > 1e9 else 1.0
        return self.fc(x) * scale


def test_buffers_a_forward_keeps_are_not_a_changed_layer(ngraph_logs):
    """Each eager call gives the Layer a new buffer: captured anew at every call, the Layer was traced
    each step and said its warning each step, with an INFO line claiming it had been changed."""
    paddle.seed(0)
    reference, net = KeepsItsLabel(), KeepsItsLabel()
    net.set_state_dict(reference.state_dict())
    model = paddle_ngraph.DataParallel(net, log_level="INFO")
    for m in (reference, model):
        opt = paddle.optimizer.SGD(0.1, parameters=m.parameters())
        for x, y in batches(3):
            F.mse_loss(m(x, y), y).backward()
            opt.step()
            opt.clear_grad()
    for p, q in zip(reference.parameters(), net.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-6, atol=1e-7)
    assert model.engine.eager_steps == 3
    said = [r.getMessage() for r in ngraph_logs.records if "KeepsItsLabel" in r.getMessage()]
    assert len(said) == 1 and "runs eagerly" in said[0], said
