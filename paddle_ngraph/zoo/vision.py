"""Training programs of every model constructor in ``paddle.vision.models``, at small inputs.

Used by the zoo tests (tests/zoo/test_vision.py) and tools/coverage.py. Each
constructor is built in static mode with 10 classes, a softmax cross-entropy loss and
Momentum; dropout layers are built with p=0 so that Paddle's executor and the engine, whose
random streams differ, compute the same function (dropout itself is tested op by op).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..quiet import paddle_minimize_warnings_ignored

CLASSES = 10
# The smallest input each constructor accepts, rounded up to a convenient size: AlexNet and
# GoogLeNet end in fixed-size layers (224), Inception v3's stem needs 75; the rest pool
# adaptively and run at 32.
INPUT_SIZE = {"alexnet": 224, "googlenet": 224, "inception_v3": 75}
DEFAULT_SIZE = 32
# Batch norm over the 2 values of a 2-image batch at a 1x1 stage outputs exactly +-1 and its
# gradients explode: such a test compares chaos. 8 images condition every zoo model's batch
# norms at these sizes; AlexNet and GoogLeNet (no batch norm, 224 pixels) take 2.
BATCH = {"alexnet": 2, "googlenet": 2}
DEFAULT_BATCH = 8


def constructors() -> list[str]:
    """Every public model constructor of ``paddle.vision.models``, sorted."""
    import paddle.vision.models as models

    return sorted(n for n in dir(models) if n[0].islower() and callable(getattr(models, n))
                  and not n.startswith("_"))


def input_size(name: str) -> int:
    return INPUT_SIZE.get(name, DEFAULT_SIZE)


def batch_size(name: str) -> int:
    return BATCH.get(name, DEFAULT_BATCH)


@contextlib.contextmanager
def _dropout_off():
    """Dropout layers built inside are built with p=0 (the op stays in the program)."""
    import paddle

    original = paddle.nn.Dropout.__init__

    def init(self, p=0.5, *args, **kwargs):
        original(self, 0.0, *args, **kwargs)

    paddle.nn.Dropout.__init__ = init
    try:
        yield
    finally:
        paddle.nn.Dropout.__init__ = original


@contextlib.contextmanager
def _default_dtype(dtype: str):
    import paddle

    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)
    try:
        yield
    finally:
        paddle.set_default_dtype(previous)


def build(name: str, batch: int | None = None, lr: float = 0.01, dtype: str = "float32"):
    """(main, startup, loss) of one training step of ``paddle.vision.models.<name>`` in the
    current IR mode (``paddle.pir_utils.IrGuard``/``OldIrGuard``), parameters in ``dtype``."""
    import paddle
    import paddle.vision.models as models

    size, batch = input_size(name), batch or batch_size(name)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with (paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup), _dropout_off(),
          _default_dtype(dtype)):
        x = paddle.static.data("x", [batch, 3, size, size], dtype)
        y = paddle.static.data("y", [batch, 1], "int64")
        constructor = getattr(models, name)
        try:
            model = constructor(num_classes=CLASSES)
        except TypeError:  # constructors without num_classes
            model = constructor()
        out = model(x)
        if isinstance(out, (list, tuple)):  # GoogLeNet's auxiliary heads: the main one
            out = out[0]
        loss = paddle.mean(paddle.nn.functional.cross_entropy(out, y))
        with paddle_minimize_warnings_ignored():
            paddle.optimizer.Momentum(lr, 0.9).minimize(loss)
    return main, startup, loss


def batches(name: str, steps: int, batch: int | None = None, seed: int = 0, dtype: str = "float32"):
    rng = np.random.default_rng(seed)
    size, batch = input_size(name), batch or batch_size(name)
    return [(rng.standard_normal((batch, 3, size, size)).astype(dtype),
             rng.integers(0, CLASSES, (batch, 1)).astype("int64")) for _ in range(steps)]
