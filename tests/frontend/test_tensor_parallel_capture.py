"""What frontend/tensor_parallel_capture.py supplies while a dygraph Layer is traced, on PIR programs
built in one process: c_identity's gradient (an AllReduce over its ring, which Paddle 3.3.1's PIR
backward drops), fleet's c_split as a slice of c_identity, and that Paddle's functions come back.
Training with these against Paddle's dense model needs ranks: tests/distributed/
test_dygraph_model_parallel.py."""
import numpy as np
import pytest

import paddle
from paddle.distributed.collective import Group
from paddle.distributed.fleet.layers.mpu import mp_ops

from paddle_ngraph.frontend import ConversionSession, decode
from paddle_ngraph.frontend.tensor_parallel_capture import tensor_parallel_tracing
from paddle_ngraph.ir.groups import RankLayout

RING = 5


def _program(split: bool):
    """x (4 x 6) -> c_identity (or fleet's c_split over a group of 2) -> matmul -> sum, with the
    gradient of x; returns (program, x's gradient or None, op names)."""
    group = Group(0, RING, [0, 1])  # this process as rank 0 of a group of two, ring id RING
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [4, 6], "float32")
        x.stop_gradient = False
        w = paddle.static.data("w", [3 if split else 6, 2], "float32")
        w.stop_gradient = False
        h = mp_ops._c_split(x, group=group) if split else mp_ops._c_identity(x, group=group)
        loss = paddle.sum(paddle.matmul(h, w))
        (grad,) = paddle.autograd.ir_backward.grad(loss, [x])
    return main, grad, [op.name() for op in main.global_block().ops]


def test_paddle_drops_the_gradient_through_c_identity():
    """The fact the capture works around (if Paddle adds the VJP, this fails: drop the patch)."""
    with paddle.pir_utils.IrGuard():
        _, grad, names = _program(split=False)
    assert "pd_op.mp_allreduce_sum" not in names
    assert grad is None or paddle.pir.is_fake_value(grad)


def test_c_identity_gradient_is_an_allreduce_over_its_ring():
    with paddle.pir_utils.IrGuard(), tensor_parallel_tracing():
        main, grad, names = _program(split=False)
    reduce = [op for op in main.global_block().ops if op.name() == "pd_op.mp_allreduce_sum"]
    assert len(reduce) == 1 and reduce[0].attrs()["ring_id"] == RING
    assert grad is not None and grad.get_defining_op().name() == "pd_op.mp_allreduce_sum"
    assert names.index("pd_op.mp_allreduce_sum") > names.index("pd_op.matmul_grad")


def test_c_split_is_this_ranks_slice_of_c_identity():
    with paddle.pir_utils.IrGuard(), tensor_parallel_tracing():
        main, grad, names = _program(split=True)
    ops = main.global_block().ops
    identity = next(op for op in ops if op.name() == "pd_op.c_identity")
    assert identity.attrs()["ring_id"] == RING
    sliced = next(op for op in ops if op.name() == "pd_op.slice")
    assert sliced.operand_source(0).get_defining_op().name() == "pd_op.c_identity"
    # The slice's gradient zero-pads; the identity's AllReduce sums the ranks' slices.
    assert names.index("pd_op.slice_grad") < names.index("pd_op.mp_allreduce_sum")
    assert grad.get_defining_op().name() == "pd_op.mp_allreduce_sum"


@pytest.mark.parametrize("backend", ["INTERPRETER", "CPU"])
def test_split_program_converts_with_paddles_ring_ids(backend):
    """The converters map ring id RING to its ranks through the layout's rings; on one rank the
    AllReduce is the identity, so x's gradient is rank 0's slice of the output gradient, padded."""
    with paddle.pir_utils.IrGuard(), tensor_parallel_tracing():
        main, grad, _ = _program(split=True)
        view = decode(main)
        session = ConversionSession(view, layout=RankLayout(1, 0, rings=((RING, (0,)),)))
        session.convert_ops([op for op in view.ops if op.block == 0])
        function = session.function([view.name_of(grad)], name="split")
    from harness import run_function

    x = np.random.default_rng(0).standard_normal((4, 6)).astype("float32")
    w = np.random.default_rng(1).standard_normal((3, 2)).astype("float32")
    (got,) = run_function(function, {"x": x, "w": w}, backend=backend).values()
    want = np.zeros((4, 6), "float32")
    want[:, :3] = w.sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_paddles_functions_are_restored():
    originals = (mp_ops._c_identity, mp_ops._c_split, mp_ops._c_softmax_with_cross_entropy,
                 paddle.autograd.ir_backward.op_has_vjp, paddle.base.core.call_vjp)
    with tensor_parallel_tracing():
        assert mp_ops._c_split is not originals[1]
    assert (mp_ops._c_identity, mp_ops._c_split, mp_ops._c_softmax_with_cross_entropy,
            paddle.autograd.ir_backward.op_has_vjp, paddle.base.core.call_vjp) == originals
