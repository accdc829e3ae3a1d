"""float16 on the CPU backend: its native kernels compute none (Convert included), so it refuses the
nodes reading or making float16 when asked (``Backend.refuses``) and ``transpile`` leaves their ops to
Paddle. A program casting to float16, as Paddle's FP16AllReduceOptimizer does around every gradient
on one device, then trains as Paddle's executor trains it, instead of failing in the first step's
compile inside the engine operator."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.backends import get_backend
from paddle_ngraph.errors import ExecutionError

from harness import IRS, ir_guard

STEPS, BATCH = 3, 8


def build(ir: str, fp16_allreduce: bool):
    """x -> fc -> relu -> (float16 and back) -> fc -> cross entropy, Momentum; with
    ``fp16_allreduce`` (legacy) the gradients pass through float16 too (FP16AllReduceOptimizer)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = 7
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 6], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.nn.functional.relu(paddle.static.nn.fc(x, 8))
        h = paddle.cast(paddle.cast(h, "float16"), "float32")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.static.nn.fc(h, 3), y))
        opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
        if fp16_allreduce:
            from paddle.distributed.fleet.meta_optimizers import FP16AllReduceOptimizer
            opt = FP16AllReduceOptimizer(opt)
        opt.minimize(loss)
    return main, startup, loss


def train(ir: str, fp16_allreduce: bool, transpile: bool):
    rng = np.random.RandomState(3)
    xs = rng.uniform(-1, 1, (STEPS, BATCH, 6)).astype("float32")
    ys = rng.randint(0, 3, (STEPS, BATCH, 1)).astype("int64")
    with ir_guard(ir):
        main, startup, loss = build(ir, fp16_allreduce)
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            left = paddle_ngraph.unsupported_ops(main, backend="CPU") if transpile else None
            if transpile:
                paddle_ngraph.transpile(main, backend="CPU")
                engines = paddle_ngraph.engines()[-1:]
                planned = engines[0].plan.left_to_paddle()
            losses = [float(np.asarray(exe.run(main, feed={"x": xs[i], "y": ys[i]}, fetch_list=[loss])[0]))
                      for i in range(STEPS)]
            params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()} \
                if ir == "legacy" else {}
    return losses, params, (left, planned) if transpile else None


@pytest.mark.parametrize("ir,fp16_allreduce", [("legacy", False), ("legacy", True), ("pir", False)])
def test_casts_to_float16_left_to_paddle_train_like_paddle(ir, fp16_allreduce):
    ref_losses, ref_params, _ = train(ir, fp16_allreduce, transpile=False)
    losses, params, (left, planned) = train(ir, fp16_allreduce, transpile=True)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for name, value in ref_params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    casts = [entry for entry in left if entry["op_type"].removeprefix("pd_op.") == "cast"]
    assert casts and casts[0]["reason"] == "refused" and "float16" in casts[0]["detail"]
    assert [(e["op_type"], e["count"], e["reason"]) for e in left] == \
        [(e["op_type"], e["count"], e["reason"]) for e in planned]


def test_cpu_backend_compile_refuses_float16_with_a_typed_error():
    with ir_guard("pir"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [4, 8], "float32")
            out = paddle.cast(paddle.cast(x, "float16"), "float32")
        function = paddle_ngraph.convert(main, fetch_list=[out])
    with pytest.raises(ExecutionError, match=r"float16.*'Convert_\d+' \(Convert\)"):
        get_backend("CPU").compile(function)
