"""The operator library's ``pdng_paddle_copies``: NumPy arrays to new Paddle tensors in one call (the
dygraph engine hands its results to autograd through it)."""
import numpy as np
import paddle
import pytest

from paddle_ngraph.dygraph.runner import _paddle_copies
from paddle_ngraph.transpiler.engine_op import paddle_copies

pytestmark = pytest.mark.usefixtures("dynamic_mode")  # as the dygraph engine calls it

TAKEN = [np.float32, np.float64, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", TAKEN, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 1, 3)], ids=str)
def test_each_dtype_and_shape_arrives_as_a_paddle_tensor_with_the_arrays_values(dtype, shape):
    array = (np.random.default_rng(0).standard_normal(shape) * 10).astype(dtype)
    [tensor] = paddle_copies()([array])
    assert isinstance(tensor, paddle.Tensor)
    assert str(tensor.dtype) == f"paddle.{np.dtype(dtype).name}"
    assert tuple(tensor.shape) == shape and tensor.place.is_cpu_place() and tensor.stop_gradient
    np.testing.assert_array_equal(tensor.numpy(), array)


def test_the_tensors_are_copies_not_views_of_the_arrays():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    [tensor] = paddle_copies()([array])
    array[...] = -1  # the engine's arena is overwritten at its next call
    np.testing.assert_array_equal(tensor.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_arrays_it_does_not_take_are_none_and_the_runner_copies_them_itself():
    odd = [np.zeros((0, 3), np.float32),                  # empty
           np.ones((2, 3), np.float32).T,                 # not C-contiguous
           np.ones(2, np.complex64),                      # no entry for its dtype
           np.ones(2, np.uint16)]
    assert paddle_copies()(odd) == [None, None, None, None]
    tensors = _paddle_copies(odd)
    for array, tensor in zip(odd, tensors):
        assert tuple(tensor.shape) == array.shape
        np.testing.assert_array_equal(tensor.numpy(), array)
