"""Layers with an op the engine lacks, for the segmented-Layer tests (one process and mpirun ranks).

The op is ``pdng_signed_square``, the Paddle custom operator of the static fallback tests
(tests/transpiler/custom_ops, built once under build/): it and its gradient run in Paddle, the rest
of the captured program on the engine.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "transpiler"))
from fallback_models import custom_op_module  # noqa: E402

FEATURES, HIDDEN, CLASSES = 6, 8, 3


def signed_square(x):
    return custom_op_module().pdng_signed_square(x)


class SquareMLP(nn.Layer):
    """Linear -> signed_square -> tanh -> Linear, plus a bias whose gradient only Paddle makes
    (it passes through the custom operator alone)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(FEATURES, HIDDEN), nn.Linear(HIDDEN, CLASSES)
        self.offset = self.create_parameter([HIDDEN], default_initializer=nn.initializer.Uniform(-0.5, 0.5))

    def forward(self, x):
        h = F.tanh(signed_square(self.fc1(x)) + signed_square(self.offset))
        return self.fc2(h)


class SquareConvNet(nn.Layer):
    """MNIST-like: conv -> relu -> signed_square -> max pool -> Linear (no batch norm: N ranks
    then train exactly as one process on the concatenated batch)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, CLASSES)

    def forward(self, x):
        h = F.max_pool2d(signed_square(F.relu(self.conv(x))), 2)
        return self.fc(h.reshape([x.shape[0], -1]))


class SquareConvBN(SquareConvNet):
    """With batch norm, whose running statistics the engine segment updates in the Layer's buffers."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2D(4)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(signed_square(self.conv(x)))), 2)
        return self.fc(h.reshape([x.shape[0], -1]))


LAYERS = {"mlp": SquareMLP, "conv": SquareConvNet, "convbn": SquareConvBN}
INPUT_SHAPES = {"mlp": (FEATURES,), "conv": (1, 8, 8), "convbn": (1, 8, 8)}


def data(layer: str, steps: int, batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((steps, batch, *INPUT_SHAPES[layer])).astype("float32")
    ys = rng.integers(0, CLASSES, (steps, batch, 1)).astype("int64")
    return xs, ys


def make_optimizer(kind: str, parameters):
    if kind == "sgd":
        return paddle.optimizer.SGD(0.1, parameters=parameters)
    return paddle.optimizer.Adam(0.01, parameters=parameters, grad_clip=nn.ClipGradByGlobalNorm(1.0))


def train(layer: str, optimizer: str, xs, ys, wrap: dict | None = None, rank: int = 0, nranks: int = 1,
          micro: int = 1):
    """Losses (this rank's share of each batch), final state and, on the engine (``wrap``: the
    DataParallel options), its counters. Every rank starts from the same seed's weights. ``micro``:
    each batch in that many micro-batches, the gradients of all but the last accumulated under
    ``no_sync`` (on the engine; the reference accumulates them in one process)."""
    import contextlib

    import paddle_ngraph

    paddle.seed(0)
    model = inner = LAYERS[layer]()
    if wrap is not None:
        model = paddle_ngraph.DataParallel(inner, **wrap)
    opt = make_optimizer(optimizer, model.parameters())
    size = len(xs[0]) // micro
    share = size // nranks
    losses = []
    for xb, yb in zip(xs, ys):
        step_losses = []
        for m in range(micro):
            lo = m * size + rank * share
            x, y = paddle.to_tensor(xb[lo:lo + share]), paddle.to_tensor(yb[lo:lo + share])
            local = model.no_sync() if wrap is not None and m < micro - 1 else contextlib.nullcontext()
            with local:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
            step_losses.append(float(loss))
        opt.step()
        opt.clear_grad()
        losses.append(np.mean(step_losses))
    state = {k: v.numpy() for k, v in inner.state_dict().items()}
    counters = None
    if wrap is not None:
        engine = model.engine
        compiled = [c for c in engine.compiled.values() if c is not None and c.segmented]
        counters = {"steps": engine.steps, "eager_steps": engine.eager_steps, "updates": engine.updates,
                    "segmented": [c.summary() for c in compiled],
                    "averaged_in_engine": [len(c.averaged_in_engine) for c in compiled]}
    return np.array(losses), state, counters
