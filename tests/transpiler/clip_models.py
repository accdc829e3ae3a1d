"""A small network trained with gradient clipping and weight decay, for the raw-gradient tests
(one process and the mpirun worker of tests/distributed/test_dp_clip.py)."""
from __future__ import annotations

import numpy as np
import paddle

CLIPS = {"global": lambda: paddle.nn.ClipGradByGlobalNorm(0.3), "norm": lambda: paddle.nn.ClipGradByNorm(0.1),
         "value": lambda: paddle.nn.ClipGradByValue(0.05)}
# Paddle 3.3.1 builds ClipGradByGlobalNorm only in PIR and ClipGradByValue only in legacy programs.
IR_OF = {"global": "pir", "norm": "legacy", "value": "legacy"}
STEPS, BATCH = 4, 8


def build(clip: str, decay: str = "l2"):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 3], "float32")
        h = paddle.nn.functional.relu(paddle.nn.Linear(3, 5)(x))
        loss = paddle.nn.Linear(5, 1)(h).mean() * 10
        regularizer = {"l2": paddle.regularizer.L2Decay(0.01), "l1": paddle.regularizer.L1Decay(0.01)}[decay]
        paddle.optimizer.Momentum(0.1, grad_clip=CLIPS[clip](), weight_decay=regularizer).minimize(loss)
    return main, startup, loss


def data():
    return np.random.default_rng(0).standard_normal((STEPS, BATCH, 3)).astype("float32")


def train(clip, decay="l2", transpile=None, rank=0, nranks=1):
    import paddle_ngraph

    paddle.seed(1)
    main, startup, loss = build(clip, decay)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        if transpile is not None:
            paddle_ngraph.transpile(main, **transpile)
        share = BATCH // nranks
        losses = [float(exe.run(main, feed={"x": xb[rank * share:(rank + 1) * share]}, fetch_list=[loss])[0])
                  for xb in data()]
    return main, np.array(losses)


def train_merged(clip, decay="l2", transpile=None, rank=0, nranks=1, merge=1):
    """The parameters after training on ``data()``: transpiled (``transpile``, with its
    ``accumulate_steps`` = ``merge``), one exe.run per batch on this rank's share; else Paddle
    alone, one step per ``merge`` consecutive batches concatenated (what accumulation equals)."""
    import paddle_ngraph

    paddle.seed(1)
    main, startup, _ = build(clip, decay)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        batches = data()
        if transpile is None:
            batches = batches.reshape(STEPS // merge, merge * BATCH, 3)
        else:
            paddle_ngraph.transpile(main, **transpile)
            share = BATCH // nranks
            batches = batches[:, rank * share:(rank + 1) * share]
        for xb in batches:
            exe.run(main, feed={"x": xb})
        return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in _parameters(main, startup)}


def _parameters(main, startup):
    if paddle.framework.in_pir_mode():
        names = [op.attrs()["parameter_name"] for op in startup.global_block().ops
                 if op.name() == "builtin.set_parameter"]
        return [type("P", (), {"name": n}) for n in sorted(names)]
    return main.all_parameters()
