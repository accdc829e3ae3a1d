"""Programs with control flow and with what Paddle's own optimizers emit around the update, for the
control-flow fallback tests (one process, and the mpirun workers of tests/distributed).

Each ``build(name)`` is x -> Linear -> ReLU -> Linear -> softmax cross-entropy, trained by SGD
through the optimizer or the control flow ``name`` chooses:

- ``gradient_merge``: ``paddle.incubate.optimizer.GradientMergeOptimizer(SGD, k_steps=2)`` (legacy
  only: Paddle 3.3.1 refuses it in PIR); the update is in a ``conditional_block`` sub-block.
- ``lookahead``: ``paddle.incubate.optimizer.LookAhead(SGD, alpha=0.5, k=2)``.
- ``model_average``: SGD, and ``paddle.incubate.optimizer.ModelAverage``'s ``average_accumulates``.
- ``ema``: SGD, and ``paddle.static.ExponentialMovingAverage.update``.
- ``while_loop``: a ``static.nn.while_loop`` in the forward pass (three steps of h -> 0.5 h + 0.1).
- ``cond``: a ``static.nn.cond`` in the forward pass (PIR only: Paddle 3.3.1's legacy cond fails).
"""
from __future__ import annotations

import numpy as np
import paddle

from fallback_models import CLASSES, FEATURES, HIDDEN, data, run_steps  # noqa: F401  (data: the same batches)
LR = 0.1
NAMES = ("gradient_merge", "lookahead", "model_average", "ema", "while_loop", "cond")


def build(name: str, batch: int = -1):
    """(main, startup, loss) of ``name``; raises what Paddle raises if it cannot build it."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [batch, FEATURES], "float32")
        y = paddle.static.data("y", [batch, 1], "int64")
        h = paddle.nn.functional.relu(paddle.nn.Linear(FEATURES, HIDDEN)(x))
        if name == "while_loop":
            i = paddle.full([1], 0, "int64")
            limit = paddle.full([1], 3, "int64")
            _, h = paddle.static.nn.while_loop(lambda i, h: i < limit, lambda i, h: [i + 1, h * 0.5 + 0.1], [i, h])
        elif name == "cond":
            h = paddle.static.nn.cond(paddle.mean(h) > 0.2, lambda: h * 2.0, lambda: h - 0.5)
        logits = paddle.nn.Linear(HIDDEN, CLASSES)(h)
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
        sgd = paddle.optimizer.SGD(LR)
        if name == "gradient_merge":
            paddle.incubate.optimizer.GradientMergeOptimizer(sgd, k_steps=2, avg=True).minimize(loss)
        elif name == "lookahead":
            paddle.incubate.optimizer.LookAhead(sgd, alpha=0.5, k=2).minimize(loss)
        else:
            sgd.minimize(loss)
        if name == "model_average":
            paddle.incubate.optimizer.ModelAverage(0.15, min_average_window=2, max_average_window=4).minimize(loss)
        elif name == "ema":
            paddle.static.ExponentialMovingAverage(0.9).update()
    return main, startup, loss


def persistable_names(main) -> list[str]:
    """The persistable dense variables of the program (parameters, accumulators, counters)."""
    if paddle.framework.in_pir_mode():
        names = [op.attrs()["parameter_name"] for op in main.global_block().ops if op.name() == "builtin.parameter"]
        names += [op.attrs()["name"] for op in main.global_block().ops
                  if op.name() == "pd_op.data" and op.attrs().get("persistable") not in (None, False, [False])]
        return sorted(set(names))
    from paddle.base import core

    return sorted(v.name for v in main.list_vars()
                  if v.persistable and v.desc.type() == core.VarDesc.VarType.DENSE_TENSOR and v.name not in ("x", "y"))


def train(name, xs, ys, transpile=None, seed=1, rank=0, nranks=1):
    """Losses and final persistable values of ``len(xs)`` steps; with ``transpile`` (a dict of
    options) on the engine, each rank feeding its ``1/nranks`` share of every batch."""
    paddle.seed(seed)
    main, startup, loss = build(name)

    def persistables(scope):
        values = {}
        for n in persistable_names(main):
            var = scope.find_var(n)
            if var is not None and var.get_tensor()._is_initialized():
                values[n] = np.array(var.get_tensor())
        return values

    losses, values = run_steps(main, startup, loss, xs, ys, persistables, transpile, rank, nranks)
    return main, losses, values
