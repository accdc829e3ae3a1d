"""A transpiled legacy program whose engine op leaves output slots unused (a loss and a metric:
the 16-slot ``ngraph_engine``) runs through ``CompiledProgram(main, build_strategy)``, as Paddle's
test harness (test_dist_base.py) and fleet scripts run it, and trains as Paddle's executor does.

Before: the unused slots shared one variable (transpiler/rewrite.py), which Paddle's executor runs
but ``CompiledProgram``'s ir::Graph refused at construction: "Variable ngraph_engine_N.unused occurs
in output of ngraph_engine multiple times" (found with Paddle's dist_mnist_lars model)."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.transpiler.engine_op import is_engine_op

from harness import ir_guard

STEPS, BATCH = 3, 8


def build():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        paddle.seed(5)
        x = paddle.static.data("x", [None, 6], "float32")
        y = paddle.static.data("y", [None, 1], "int64")
        probs = paddle.nn.functional.softmax(paddle.nn.Linear(10, 4)(paddle.nn.functional.relu(paddle.nn.Linear(6, 10)(x))))
        loss = paddle.mean(paddle.nn.functional.cross_entropy(probs, y, use_softmax=False))
        acc = paddle.static.accuracy(input=probs, label=y)
        paddle.optimizer.Momentum(0.1, momentum=0.9).minimize(loss)
    return main, startup, loss, acc


def build_strategy():
    strategy = paddle.static.BuildStrategy()
    strategy.enable_inplace = False
    strategy.memory_optimize = False
    strategy.fuse_all_reduce_ops = True
    return strategy


def train(transpile: bool, direct_steps: int = 0):
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((BATCH, 6)).astype("float32"),
              "y": rng.integers(0, 4, (BATCH, 1)).astype("int64")} for _ in range(STEPS + direct_steps)]
    with ir_guard("legacy"):
        main, startup, loss, acc = build()
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            if transpile:
                paddle_ngraph.transpile(main)
                engines = [op for op in main.global_block().ops if is_engine_op(op.type)]
                assert [op.type for op in engines] == ["ngraph_engine"]  # slots left unused
                assert len(set(engines[0].output_arg_names)) < len(engines[0].output_arg_names)
            compiled = paddle.static.CompiledProgram(main, build_strategy=build_strategy())
            out = [exe.run(compiled, feed=f, fetch_list=[loss, acc]) for f in feeds[:STEPS]]
            # The program itself still runs directly afterwards.
            out += [exe.run(main, feed=f, fetch_list=[loss, acc]) for f in feeds[STEPS:]]
            params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
        if transpile:
            paddle_ngraph.release(main)
    return [(float(l), float(a)) for l, a in out], params


@pytest.mark.parametrize("direct_steps", [0, 2])
def test_compiled_program_of_a_transpiled_program_trains_as_paddle(direct_steps):
    ref_out, ref_params = train(False, direct_steps)
    out, params = train(True, direct_steps)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5)
    for name, value in ref_params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
