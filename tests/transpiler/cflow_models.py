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
- ``conditional_block``: (legacy) a ``ConditionalBlock`` overwriting a default with a Linear of
  its own on the steps its predicate holds (every other step, by a persistable step counter, the
  same on every rank).
- ``select_input``: (legacy) what Paddle's legacy ``static.nn.cond`` emits, built from its parts
  since that function fails in Paddle 3.3.1: a ``ConditionalBlock`` per branch, each writing a
  variable of its own, and ``select_input`` picking one (``select_output`` in the backward).
"""
from __future__ import annotations

import numpy as np
import paddle

from fallback_models import CLASSES, FEATURES, HIDDEN, data, run_steps  # noqa: F401  (data: the same batches)
LR = 0.1
NAMES = ("gradient_merge", "lookahead", "model_average", "ema", "while_loop", "cond", "conditional_block", "select_input")


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
        elif name in ("conditional_block", "select_input"):
            h = _legacy_branches(name, h)
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


def _legacy_branches(name, h):
    from paddle.static.nn.control_flow import ConditionalBlock, select_input

    step = paddle.static.create_global_var([1], 0, "int64", persistable=True, name="step")
    paddle.increment(step)
    even = paddle.equal(step % 2, paddle.zeros([1], "int64"))
    if name == "conditional_block":
        inner = paddle.nn.Linear(HIDDEN, HIDDEN)
        out = paddle.tensor.create_tensor("float32")
        paddle.assign(h - 0.5, out)
        with ConditionalBlock([even], is_scalar_condition=True).block():
            paddle.assign(inner(h) * 2.0, out)
        return out
    odd = _legacy_logical_not(even)
    taken, other = paddle.tensor.create_tensor("float32"), paddle.tensor.create_tensor("float32")
    with ConditionalBlock([even], is_scalar_condition=True).block():
        paddle.assign(h * 2.0, taken)
    with ConditionalBlock([odd], is_scalar_condition=True).block():
        paddle.assign(h - 0.5, other)
    return select_input([other, taken], paddle.cast(even, "int32"))


def _legacy_logical_not(x):
    """``paddle.logical_not`` of a legacy program (Paddle 3.3.1's calls a PIR-only function)."""
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper("logical_not")
    out = helper.create_variable_for_type_inference("bool")
    helper.append_op(type="logical_not", inputs={"X": [x]}, outputs={"Out": [out]})
    return out


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

    losses, values, _ = run_steps(main, startup, loss, xs, ys, persistables, transpile, rank, nranks)
    return main, losses, values
