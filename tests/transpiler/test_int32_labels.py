"""Training with int32 labels and indices, as Paddle trains it, in both IRs.

A program may declare its label int32; a PIR program declaring it int64 may also be fed int32 (and
one declaring int32 fed int64): Paddle's PIR executor hands the kernels the dtype fed, and its
label and index kernels take either. The engine converts such a feed to the declared dtype.
"""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ExecutionError

from harness import IRS, assert_trained_close, ir_guard

F = paddle.nn.functional
STEPS, LR, CLASSES = 5, 0.1, 4
rng = np.random.default_rng(7)
X = rng.standard_normal((5, 16, 8)).astype("float32")
Y = rng.integers(0, CLASSES, (5, 16, 1))


def train(ir, declared, fed, transpiled, backend=None):
    """Losses and parameters after STEPS of SGD on a Linear + Embedding classifier whose label
    (``declared`` in the program, fed as ``fed``) is the cross-entropy label, the embedding's ids
    and a gather index."""
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 8], "float32")
            y = paddle.static.data("y", [-1, 1], declared)
            table = paddle.static.create_parameter([CLASSES, 8], "float32", name="table")
            ids = paddle.reshape(y, [-1])
            h = paddle.static.nn.fc(x + F.embedding(ids, table), CLASSES, name="fc")
            loss = F.cross_entropy(h, y) + 0.1 * paddle.mean(paddle.gather(h, ids))
            paddle.optimizer.SGD(LR).minimize(loss)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            paddle.seed(1)
            exe.run(startup)
            if transpiled:
                paddle_ngraph.transpile(main, backend=backend, fallback=False)
            losses = [float(exe.run(main, feed={"x": X[s], "y": Y[s].astype(fed)}, fetch_list=[loss])[0])
                      for s in range(STEPS)]
            params = {n: np.array(scope.find_var(n).get_tensor()) for n in ("table", "fc.w_0", "fc.b_0")}
    return np.array(losses), params


def assert_same_training(ref, got):
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    assert ref[0][-1] < ref[0][0]
    for name in ref[1]:
        assert_trained_close(got[1][name], ref[1][name], "sgd", name, lr=LR)


@pytest.mark.parametrize("ir", IRS)
def test_int32_label_trains_as_paddle(ir, backend):
    assert_same_training(train(ir, "int32", "int32", False), train(ir, "int32", "int32", True, backend))


@pytest.mark.parametrize("declared,fed", [("int64", "int32"), ("int32", "int64")])
def test_pir_feed_of_the_other_index_dtype_trains_as_paddle(declared, fed, backend):
    assert_same_training(train("pir", declared, fed, False), train("pir", declared, fed, True, backend))


def test_int64_feed_outside_a_declared_int32_is_refused_naming_it():
    with ir_guard("pir"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 8], "float32")
            y = paddle.static.data("y", [-1, 1], "int32")
            loss = F.cross_entropy(paddle.static.nn.fc(x, CLASSES), y)
            paddle.optimizer.SGD(LR).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(paddle.static.Scope()):
            exe.run(startup)
            paddle_ngraph.transpile(main, fallback=False)
            big = np.full((16, 1), 2**31, dtype="int64")
            with pytest.raises((ExecutionError, ValueError, OSError), match="input 'y': int64 values .* outside the int32"):
                exe.run(main, feed={"x": X[0], "y": big}, fetch_list=[loss])
