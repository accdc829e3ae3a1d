"""Reference models as Paddle static programs, buildable in either IR.

Each builder runs inside ``program_guard`` and returns (feeds, loss). Building
inside ``unique_name.guard()`` gives the same variable names every time, so
programs built on different ranks or twice in one process agree.
"""
from __future__ import annotations

import paddle


def mnist_mlp():
    """dist_mnist_mlp of the nGraph documentation: 784-600-10, ReLU, softmax cross-entropy."""
    x = paddle.static.data("x", [None, 784], "float32")
    y = paddle.static.data("y", [None, 1], "int64")
    hidden = paddle.nn.functional.relu(paddle.nn.Linear(784, 600)(x))
    logits = paddle.nn.Linear(600, 10)(hidden)
    loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
    return {"x": ([None, 784], "float32"), "y": ([None, 1], "int64")}, loss


MODELS = {"mnist_mlp": mnist_mlp}


def make_optimizer(name: str, lr: float):
    name = name.lower()
    if name == "sgd":
        return paddle.optimizer.SGD(lr)
    if name == "momentum":
        return paddle.optimizer.Momentum(lr, momentum=0.9)
    if name == "adam":
        return paddle.optimizer.Adam(lr)
    raise ValueError(f"unknown optimizer '{name}'; valid: sgd, momentum, adam")


def build_program(model: str = "mnist_mlp", optimizer: str = "sgd", lr: float = 0.03, seed: int = 1):
    """Returns (main, startup, feeds, loss) with backward and the optimizer appended."""
    if model not in MODELS:
        raise ValueError(f"unknown model '{model}'; valid: {', '.join(MODELS)}")
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = seed
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        feeds, loss = MODELS[model]()
        make_optimizer(optimizer, lr).minimize(loss)
    return main, startup, feeds, loss
