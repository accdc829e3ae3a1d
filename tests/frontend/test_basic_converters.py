"""Converters of the dist_mnist_mlp ops, against Paddle's executor in both IRs."""
import numpy as np
import paddle
import pytest

from harness import IRS, check_against_paddle, static_op

rng = np.random.default_rng(0)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("tx,ty", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul(ir, dtype, tx, ty):
    a = rng.standard_normal((5, 3) if tx else (3, 5)).astype(dtype)
    b = rng.standard_normal((4, 5) if ty else (5, 4)).astype(dtype)
    check_against_paddle(lambda a, b: static_op(lambda: paddle.matmul(a, b, transpose_x=tx, transpose_y=ty),
                                                "matmul_v2", {"X": a, "Y": b}, {"trans_x": tx, "trans_y": ty}),
                         {"a": a, "b": b}, ir=ir, rtol=1e-5 if dtype == "float32" else 1e-10)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("ashape,bshape,tx,ty", [((2, 3, 4), (4, 5), False, False),
                                                 ((2, 3, 1, 4), (5, 4), False, True),
                                                 ((2, 4, 3), (4, 5), True, False),
                                                 ((2, 3, 4), (2, 4, 5), False, False)], ids=str)
def test_batched_matmul_broadcast(ir, ashape, bshape, tx, ty):
    """A batch of x against a 2-D y (not transposed x: one product over x's rows, and y's gradient one
    product, not a batch summed), a transposed x, and a batch against a batch."""
    a = rng.standard_normal(ashape).astype("float32")
    b = rng.standard_normal(bshape).astype("float32")
    check_against_paddle(lambda a, b: static_op(lambda: paddle.matmul(a, b, transpose_x=tx, transpose_y=ty),
                                                "matmul_v2", {"X": a, "Y": b}, {"trans_x": tx, "trans_y": ty}),
                         {"a": a, "b": b}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_bilinear(ir, dtype, with_bias):
    """paddle.nn.Bilinear's op (bilinear_tensor_product / pd_op.bilinear): the output and the
    gradients of x, y, the weight and the bias."""
    feeds = {"x": rng.standard_normal((5, 3)).astype(dtype), "y": rng.standard_normal((5, 4)).astype(dtype),
             "w": rng.standard_normal((6, 3, 4)).astype(dtype)}
    if with_bias:
        feeds["bias"] = rng.standard_normal((1, 6)).astype(dtype)

    def build(x, y, w, bias=None):
        inputs = {"X": x, "Y": y, "Weight": w, **({"Bias": bias} if bias is not None else {})}
        return static_op(lambda: paddle.nn.functional.bilinear(x, y, w, bias), "bilinear_tensor_product", inputs)

    check_against_paddle(build, feeds, ir=ir, rtol=1e-5 if dtype == "float32" else 1e-10)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("yshape", [(4,), (3, 4), (1, 4)])
def test_add_broadcast(ir, yshape):
    x = rng.standard_normal((3, 4)).astype("float32")
    y = rng.standard_normal(yshape).astype("float32")
    check_against_paddle(lambda x, y: x + y, {"x": x, "y": y}, ir=ir)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pir_in_place_elementwise_forms(dtype):
    """add_, subtract_, multiply_ and divide_: PIR's in-place ops (built by _C_ops; Paddle's backward
    accumulates gradients with add_ under FLAGS_max_inplace_grad_add). The legacy IR has no such
    op types (its in-place ops are the plain ones writing their input's variable). z is read after
    the four updated it, as Paddle's executor gives it."""
    x = rng.standard_normal((3, 4)).astype(dtype)
    y = (rng.uniform(0.5, 2.0, (3, 4)) * rng.choice([-1, 1], (3, 4))).astype(dtype)
    built = []

    def build(x, y):
        z = x * 1
        paddle._C_ops.add_(z, y)
        paddle._C_ops.subtract_(z, x)
        paddle._C_ops.multiply_(z, y)
        paddle._C_ops.divide_(z, x)
        built.extend(op.name() for op in paddle.static.default_main_program().global_block().ops)
        return z + 1

    check_against_paddle(build, {"x": x, "y": y}, ir="pir", grads=False)
    assert {"pd_op.add_", "pd_op.subtract_", "pd_op.multiply_", "pd_op.divide_"} <= set(built)


@pytest.mark.parametrize("ir", IRS)
def test_relu(ir):
    x = rng.standard_normal((6, 7)).astype("float32")
    check_against_paddle(lambda x: paddle.nn.functional.relu(x), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("axis,keepdim", [(None, False), (0, False), (1, True)])
def test_mean_and_sum(ir, axis, keepdim):
    x = rng.standard_normal((4, 5)).astype("float32")
    dims = {"dim": [] if axis is None else [axis], "keep_dim": keepdim, "reduce_all": axis is None}
    check_against_paddle(lambda x: [static_op(lambda: paddle.mean(x, axis=axis, keepdim=keepdim), "reduce_mean", {"X": x}, dims),
                                    static_op(lambda: paddle.sum(x, axis=axis, keepdim=keepdim), "reduce_sum", {"X": x}, dims)],
                         {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("label_dtype", ["int64", "int32"])  # Paddle's kernel takes either
def test_softmax_cross_entropy(ir, dtype, label_dtype):
    logits = rng.standard_normal((8, 10)).astype(dtype)
    label = rng.integers(0, 10, (8, 1)).astype(label_dtype)
    check_against_paddle(
        lambda logits, label: paddle.nn.functional.cross_entropy(logits, label, reduction="none"),
        {"logits": logits, "label": label}, ir=ir, rtol=1e-5 if dtype == "float32" else 1e-10)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("label_dtype", ["int64", "int32"])
def test_softmax_cross_entropy_ignore_index(ir, label_dtype):
    logits = rng.standard_normal((6, 5)).astype("float32")
    label = np.array([[0], [4], [-100], [2], [-100], [1]], dtype=label_dtype)
    check_against_paddle(
        lambda logits, label: paddle.nn.functional.cross_entropy(logits, label, reduction="none", ignore_index=-100),
        {"logits": logits, "label": label}, ir=ir)
