"""Gradient clipping and weight decay: a small Linear model trained 3 steps with
``paddle_ngraph.transpile`` ends with Paddle's own losses and parameters.

Paddle 3.3.1 itself cannot build some combinations: ClipGradByGlobalNorm in legacy programs
(its static path calls paddle.sqrt on a Variable) and ClipGradByValue in PIR programs
(``_pir_clip`` raises NotImplementedError); those run in the other IR only.
"""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.transpiler.engine_op import is_engine_op

from harness import assert_trained_close, ir_guard

STEPS = 3
LR = 0.1
rng = np.random.default_rng(0)
X = rng.standard_normal((8, 5)).astype("float32")
Y = rng.standard_normal((8, 3)).astype("float32")

SETUPS = {
    "ClipGradByGlobalNorm": (lambda: dict(grad_clip=paddle.nn.ClipGradByGlobalNorm(0.5)), ["pir"]),
    "ClipGradByNorm": (lambda: dict(grad_clip=paddle.nn.ClipGradByNorm(0.3)), ["legacy", "pir"]),
    "ClipGradByValue": (lambda: dict(grad_clip=paddle.nn.ClipGradByValue(0.05)), ["legacy"]),
    "L1Decay": (lambda: dict(weight_decay=paddle.regularizer.L1Decay(0.05)), ["legacy", "pir"]),
    "L2Decay": (lambda: dict(weight_decay=paddle.regularizer.L2Decay(0.05)), ["legacy", "pir"]),
}
CASES = [(name, ir) for name, (_, irs) in SETUPS.items() for ir in irs]


def op_types(main):
    if paddle.framework.in_pir_mode():
        return {op.name() for op in main.global_block().ops}
    return {op.type for op in main.global_block().ops}


def train(setup, transpiled, backend=None):
    paddle.seed(1)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [8, 5], "float32")
        y = paddle.static.data("y", [8, 3], "float32")
        linear = paddle.nn.Linear(5, 3)
        loss = paddle.mean((linear(x) - y) ** 2)
        paddle.optimizer.SGD(LR, **SETUPS[setup][0]()).minimize(loss)
    emitted = op_types(main)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if transpiled:
            assert paddle_ngraph.transpile(main, backend=backend) is main
            emitted = op_types(main)  # what is left in Paddle after transpiling
        losses = [float(exe.run(main, feed={"x": X, "y": Y}, fetch_list=[loss])[0]) for _ in range(STEPS)]
        names = [linear.weight.name, linear.bias.name]
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    return emitted, np.array(losses), params


@pytest.mark.parametrize("setup,ir", CASES)
def test_training_matches_paddle(setup, ir, backend):
    with ir_guard(ir):
        emitted, ref_losses, ref_params = train(setup, transpiled=False)
        left, losses, params = train(setup, transpiled=True, backend=backend)
    # The program exercises the ops this converts (clip_by_norm, sign, ...), and the engine runs them.
    wanted = {"ClipGradByGlobalNorm": "squared_l2_norm", "ClipGradByNorm": "clip_by_norm", "ClipGradByValue": "clip",
              "L1Decay": "sign", "L2Decay": None}[setup]
    if wanted:
        assert any(t.removeprefix("pd_op.") == wanted for t in emitted), sorted(emitted)
    assert any(map(is_engine_op, left)), left
    assert not any(t.removeprefix("pd_op.") in ("squared_l2_norm", "clip_by_norm", "clip", "sign", "sgd", "sgd_")
                   for t in left), sorted(left)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert params.keys() == ref_params.keys()
    for name in params:
        assert_trained_close(params[name], ref_params[name], "sgd", name, lr=LR)
