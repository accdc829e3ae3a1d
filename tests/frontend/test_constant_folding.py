"""Operands computed from constants only are folded at conversion time (frontend/constant_folding.py):
a slice whose bounds come from a static shape (``paddle.shape(x)[1] - 1 - i``, the reversed
recurrence of Paddle's dygraph-to-static GRU models) runs on the engine, so a Layer holding it is
captured whole instead of in segments around that slice and the ops its dynamic output then refused."""
import numpy as np
import paddle
import pytest
from paddle import nn

import paddle_ngraph
from paddle_ngraph.frontend.constant_folding import folded_value
from paddle_ngraph.ir import ops

pytestmark = pytest.mark.usefixtures("dynamic_mode")
STEPS, BATCH, LENGTH, FEATURES = 3, 4, 5, 6


def test_arithmetic_on_constants_is_folded_and_a_graph_input_is_not():
    shape = ops.Constant(np.array([4, 5, 6], dtype="int64")).output()
    one = ops.Constant(np.array([1], dtype="int64")).output()
    last = ops.Subtract(ops.Slice(shape, starts=[1], ends=[2], axes=[0]).output(), one).output()
    np.testing.assert_array_equal(folded_value(last), [4])
    fed = ops.Parameter(dtype="int64", shape=(1,)).output()
    assert folded_value(ops.Subtract(fed, one).output()) is None


class ReversedRecurrence(nn.Layer):
    """Steps over the sequence backwards, each step's slice bounds taken from the input's shape."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(FEATURES, FEATURES)
        self.out = nn.Linear(FEATURES, 2)

    def forward(self, x):
        hidden = paddle.zeros([x.shape[0], FEATURES])
        for i in range(x.shape[1]):
            j = paddle.shape(x)[1] - 1 - i
            step = paddle.reshape(paddle.slice(x, axes=[1], starts=[j], ends=[j + 1]), [-1, FEATURES])
            hidden, _ = self.cell(step, hidden)
        return self.out(hidden).mean()


def _train(wrap: bool):
    paddle.seed(0)
    layer = ReversedRecurrence()
    model = paddle_ngraph.DataParallel(layer) if wrap else layer
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    xs = np.random.default_rng(0).standard_normal((STEPS, BATCH, LENGTH, FEATURES)).astype("float32")
    losses = []
    for x in xs:
        loss = model(paddle.to_tensor(x))
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, {k: v.numpy() for k, v in layer.state_dict().items()}, model


def test_slice_bounds_from_a_static_shape_run_on_the_engine():
    ref_losses, ref_state, _ = _train(wrap=False)
    losses, state, model = _train(wrap=True)
    [compiled] = [c for c in model.engine.compiled.values() if c is not None]
    assert not getattr(compiled, "segmented", False), compiled.summary()
    assert model.engine.steps == STEPS and model.engine.eager_steps == 0
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for name in ref_state:
        np.testing.assert_allclose(state[name], ref_state[name], rtol=1e-5, atol=1e-6, err_msg=name)
