"""Type inference of the indexing, stack, accuracy ops (ir/ops/indexing.py, shape.py), LambUpdate and LarsMomentumUpdate,
CumSum and ReduceProd (ir/ops/reduction.py): output types, and errors that name the node."""
import numpy as np
import pytest

from paddle_ngraph.backends import get_backend
from paddle_ngraph.errors import ExecutionError, ValidationError
from paddle_ngraph.ir import Function, ops


def param(shape, dtype="float32"):
    return ops.Parameter(dtype=dtype, shape=shape).output()


def const(value, dtype="int64"):
    return ops.Constant(np.asarray(value), dtype=dtype).output()


# (builder, expected output types)
GOOD = {
    "gather_1d": (lambda: ops.Gather(param((-1, 5, 6)), param((3,), "int64"), axis=1), [("float32", (-1, 3, 6))]),
    "gather_0d_removes_axis": (lambda: ops.Gather(param((4, 5)), const(2, "int32"), axis=-1), [("float32", (4,))]),
    "scatter_add": (lambda: ops.ScatterAdd(param((4, 5)), param((7,), "int64"), param((4, 7)), axis=1),
                    [("float32", (4, 5))]),
    "scatter_add_0d": (lambda: ops.ScatterAdd(param((4, 5)), const(1), param((5,)), axis=0), [("float32", (4, 5))]),
    "scatter_elements_add": (lambda: ops.ScatterElementsAdd(param((4, 5)), param((4, 2), "int64"), param((4, 2)),
                                                            axis=1), [("float32", (4, 5))]),
    "replace_slice": (lambda: ops.ReplaceSlice(param((4, 5)), param((2, 5)), axes=[0], starts=[1], ends=[-1]),
                      [("float32", (4, 5))]),
    "stack": (lambda: ops.Stack(param((2, 3)), param((2, 3)), param((2, 3)), axis=-1), [("float32", (2, 3, 3))]),
    "stack_dynamic": (lambda: ops.Stack(param((-1, 3), "int64"), param((4, 3), "int64"), axis=1),
                      [("int64", (-1, 2, 3))]),
    "top_k": (lambda: ops.TopK(param((-1, 10), "float64"), k=3), [("float64", (-1, 3)), ("int64", (-1, 3))]),
    "top_k_axis0": (lambda: ops.TopK(param((5, 2)), k=5, axis=0, largest=False),
                    [("float32", (5, 2)), ("int64", (5, 2))]),
    "accuracy": (lambda: ops.Accuracy(param((-1, 2), "int64"), param((-1, 1), "int64")),
                 [("float32", ()), ("int32", ()), ("int32", ())]),
    "lamb": (lambda: ops.LambUpdate(param((3, 2)), param((3, 2)), param(()), param((3, 2)), param((3, 2)),
                                    param((1,)), param((1,)), weight_decay=0.01),
             [("float32", (3, 2))] * 3 + [("float32", (1,))] * 2),
    "lars_momentum": (lambda: ops.LarsMomentumUpdate(param((4,), "float64"), param((4,), "float64"), param((1,)),
                                                     param((4,), "float64"), lars_weight_decay=0.0),
                      [("float64", (4,))] * 2),
    "cumsum": (lambda: ops.CumSum(param((-1, 5), "int32"), axis=-2, exclusive=True), [("int32", (-1, 5))]),
    "reduce_prod": (lambda: ops.ReduceProd(param((3, -1, 5), "float64"), axes=[0, -1]), [("float64", (-1,))]),
    "reduce_prod_all_kept": (lambda: ops.ReduceProd(param((3, 4)), keep_dims=True), [("float32", (1, 1))]),
}


@pytest.mark.parametrize("case", sorted(GOOD))
def test_infers_output_types(case):
    build, expected = GOOD[case]
    node = build()
    assert [(t.dtype.value, t.shape) for t in node.output_types] == expected


# (builder of a node named "bad", part of the expected message)
BAD = {
    "gather_float_index": (lambda: ops.Gather(param((4, 5)), param((3,)), name="bad"), "index must be int32 or int64"),
    "gather_2d_index": (lambda: ops.Gather(param((4, 5)), param((3, 1), "int64"), name="bad"), "0-D or 1-D"),
    "gather_axis": (lambda: ops.Gather(param((4, 5)), param((3,), "int64"), axis=2, name="bad"), "axis 2 out of range"),
    "scatter_add_updates": (lambda: ops.ScatterAdd(param((4, 5)), param((7,), "int64"), param((4, 6)), axis=1,
                                                   name="bad"), "updates is float32[4x6], expected shape [4, 7]"),
    "scatter_elements_rank": (lambda: ops.ScatterElementsAdd(param((4, 5)), param((4,), "int64"), param((4,)),
                                                             name="bad"), "must have the rank of data"),
    "replace_slice_shape": (lambda: ops.ReplaceSlice(param((4, 5)), param((3, 5)), axes=[0], starts=[1], ends=[3],
                                                     name="bad"), "update is float32[3x5], expected shape [2, 5]"),
    "slice_axis_twice": (lambda: ops.Slice(param((4, 5)), axes=[1, -1], starts=[0, 1], ends=[3, 4], name="bad"),
                         "axis 1 is sliced twice (axes [1, -1])"),
    "slice_lengths": (lambda: ops.Slice(param((4, 5)), axes=[0, 1], starts=[0], ends=[3, 4], name="bad"),
                      "axes, starts and ends differ in length (2, 1, 2)"),
    "stack_mismatch": (lambda: ops.Stack(param((2, 3)), param((3, 2)), name="bad"), "input 1 is float32[3x2]"),
    "stack_axis": (lambda: ops.Stack(param((2, 3)), axis=3, name="bad"), "axis 3 out of range for rank 3"),
    "top_k_too_big": (lambda: ops.TopK(param((4, 5)), k=6, name="bad"), "k=6 exceeds dim 1"),
    "top_k_scalar": (lambda: ops.TopK(param(()), k=1, name="bad"), "rank >= 1"),
    "accuracy_float_indices": (lambda: ops.Accuracy(param((4, 2)), param((4, 1), "int64"), name="bad"),
                               "indices must be integer [N, k]"),
    "accuracy_label_rows": (lambda: ops.Accuracy(param((4, 2), "int64"), param((3, 1), "int64"), name="bad"),
                            "differ in N"),
    "lamb_grad_shape": (lambda: ops.LambUpdate(param((3, 2)), param((2, 3)), param(()), param((3, 2)), param((3, 2)),
                                               param((1,)), param((1,)), name="bad"), "does not match parameter"),
    "lars_velocity_shape": (lambda: ops.LarsMomentumUpdate(param((3, 2)), param((3, 2)), param(()), param((2, 3)),
                                                           name="bad"), "velocity float32[2x3] does not match"),
    "lars_lr_elements": (lambda: ops.LarsMomentumUpdate(param((3, 2)), param((3, 2)), param((2,)), param((3, 2)),
                                                        name="bad"), "learning rate must have one element"),
    "cumsum_axis": (lambda: ops.CumSum(param((4, 5)), axis=2, name="bad"), "axis 2 out of range for rank 2"),
    "cumsum_scalar": (lambda: ops.CumSum(param(()), name="bad"), "rank >= 1"),
    "cumsum_bool": (lambda: ops.CumSum(param((4,), "bool"), name="bad"), "float32, float64, int32 or int64"),
    "reduce_prod_axis": (lambda: ops.ReduceProd(param((4, 5)), axes=[-3], name="bad"), "out of range for rank 2"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_rejects_bad_inputs_naming_the_node(case):
    build, message = BAD[case]
    with pytest.raises(ValidationError, match=r"While validating node 'bad' \(") as info:
        build()
    assert message in str(info.value)


def test_gather_kernel_rejects_an_out_of_range_index_naming_the_node():
    """NumPy would wrap a negative index; Paddle rejects it, and so does the kernel."""
    x, i = ops.Parameter(name="x", shape=(2, 3)), ops.Parameter(name="i", dtype="int64", shape=(1,))
    function = Function([x, i], {"out": ops.Gather(x.output(), i.output(), name="my_gather").output()})
    with pytest.raises(ExecutionError, match="'my_gather' .*index out of range"):
        get_backend("INTERPRETER").compile(function).call([np.zeros((2, 3), "float32"), np.array([-1])])
