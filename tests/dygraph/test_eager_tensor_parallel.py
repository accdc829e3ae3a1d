"""The eager CPU versions of mp_ops' functions in one process (the 2-rank training against the dense
model is tests/distributed/test_dygraph_eager_model_parallel.py): on one rank the parallel cross
entropy is Paddle's softmax cross entropy (loss and gradient, ignore_index honored), refusals are
typed, Paddle's functions come back on uninstall, and outside dynamic mode Paddle's own run."""
import numpy as np
import paddle
import pytest

from paddle_ngraph.distributed.transport import NullTransport
from paddle_ngraph.dygraph import eager_tensor_parallel as eager
from paddle_ngraph.errors import ValidationError

pytestmark = pytest.mark.usefixtures("dynamic_mode")  # conftest: dygraph for the test, restored after


@pytest.fixture
def installed():
    from paddle.distributed import collective
    from paddle.distributed.fleet.layers.mpu import mp_ops

    paddle_functions = {name: getattr(mp_ops, name) for name in eager.PATCHED}
    eager.install(lambda ranks: NullTransport())
    try:
        yield mp_ops, collective, paddle_functions
    finally:
        eager.uninstall()
    assert {name: getattr(mp_ops, name) for name in eager.PATCHED} == paddle_functions
    assert collective._c_identity is paddle_functions["_c_identity"]


def test_cross_entropy_on_one_rank_is_paddles(installed):
    mp_ops, collective, _ = installed
    assert collective._c_softmax_with_cross_entropy is mp_ops._c_softmax_with_cross_entropy
    rng = np.random.default_rng(3)
    logits_np = rng.normal(size=(5, 7)).astype("float32")
    labels_np = np.array([[1], [6], [-100], [0], [3]], "int64")
    results = []
    for function in (mp_ops._c_softmax_with_cross_entropy, None):
        logits = paddle.to_tensor(logits_np, stop_gradient=False)
        labels = paddle.to_tensor(labels_np)
        if function is None:
            loss = paddle.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="none")
        else:
            loss = function(logits, labels, ignore_index=-100)
        (loss * paddle.arange(1, 6, dtype="float32").reshape([5, 1])).sum().backward()
        results.append((loss.numpy(), logits.grad.numpy()))
    (loss, grad), (want_loss, want_grad) = results
    assert loss[2, 0] == 0 and not grad[2].any()  # the ignored row
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6, atol=1e-6)


def test_refusals_are_typed_and_name_the_function(installed):
    mp_ops, _, _ = installed
    logits = paddle.rand([2, 4])
    with pytest.raises(ValidationError, match="_c_softmax_with_cross_entropy.*soft labels"):
        mp_ops._c_softmax_with_cross_entropy(logits, paddle.zeros([2, 2], dtype="int64"))
    from paddle.distributed import ReduceOp
    with pytest.raises(ValidationError, match="_mp_allreduce: only ReduceOp.SUM"):
        mp_ops._mp_allreduce(logits, op=ReduceOp.MAX)


def test_identity_and_split_gradients_on_one_rank(installed):
    mp_ops, _, _ = installed
    x = paddle.to_tensor(np.arange(6, dtype="float32").reshape(2, 3), stop_gradient=False)
    y = mp_ops._c_split(mp_ops._c_identity(x), group=None)
    z = mp_ops._c_concat(mp_ops._mp_allreduce(y * 2.0))
    (z * z).sum().backward()
    np.testing.assert_array_equal(z.numpy(), 2 * x.numpy())
    np.testing.assert_array_equal(x.grad.numpy(), 8 * x.numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precisions_travel_as_their_values(installed, dtype):
    """NumPy sees bfloat16 as uint16 bits: the collectives must move values, in the tensor's dtype."""
    mp_ops, _, _ = installed
    x = paddle.to_tensor([[0.5, -1.25, 3.0]], dtype=dtype, stop_gradient=False)
    y = mp_ops._c_concat(mp_ops._mp_allreduce(mp_ops._c_identity(x)))
    (y * 2.0).sum().backward()
    assert y.dtype == x.dtype and x.grad.dtype == x.dtype
    np.testing.assert_array_equal(y.astype("float32").numpy(), [[0.5, -1.25, 3.0]])
    np.testing.assert_array_equal(x.grad.astype("float32").numpy(), [[2.0, 2.0, 2.0]])


def test_paddles_own_outside_dynamic_mode(installed):
    mp_ops, _, paddle_functions = installed
    paddle.enable_static()
    try:
        with paddle.static.program_guard(paddle.static.Program()):
            x = paddle.static.data("x", [2, 4], "float32")
            assert paddle.framework.in_pir_mode()
            # Paddle's PIR branch: the op the capture converts, not the eager PyLayer.
            assert mp_ops._c_identity(x).get_defining_op().name() == "pd_op.c_identity"
    finally:
        paddle.disable_static()
