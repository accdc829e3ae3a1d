"""A CPU executable called again with the signature of an earlier call skips the checks in Python
(``NativeExecutable.run_if_accepted``); anything else takes the full path, which explains."""
import numpy as np
import pytest

from paddle_ngraph.backends.cpu.executable import CPUExecutable
from paddle_ngraph.errors import ExecutionError
from paddle_ngraph.ir import Function, ops


def _relu_plus():
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    y = ops.Parameter(dtype="float32", shape=(2, 3), name="y")
    return Function([x, y], {"z": ops.Add(ops.Relu(x.output()).output(), y.output()).output()})


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2)]


def test_the_same_signature_runs_unchecked_and_gives_what_the_full_path_gives():
    exe = CPUExecutable(_relu_plus())
    x, y = _inputs()
    [first] = exe.call([x, y])
    first = first.copy()
    x2, y2 = _inputs(1)
    [again] = exe.last.native.run_if_accepted([x2, y2])  # taken: the signature of the first call
    np.testing.assert_array_equal(again, np.maximum(x2, 0) + y2)
    [through_call] = exe.call([x, y])
    np.testing.assert_array_equal(through_call, first)


@pytest.mark.parametrize("odd", ["float64", "shape", "not contiguous", "byte-swapped", "subclass", "count"])
def test_any_other_signature_is_declined_and_the_full_path_explains_or_converts(odd):
    exe = CPUExecutable(_relu_plus())
    x, y = _inputs()
    exe.call([x, y])
    native = exe.last.native
    inputs = {
        "float64": [x.astype(np.float64), y],
        "shape": [np.zeros((3, 2), np.float32), y],
        "not contiguous": [np.asfortranarray(x), y],
        "byte-swapped": [x.astype(">f4"), y],
        "subclass": [np.ma.masked_array(x), y],
        "count": [x],
    }[odd]
    assert native.run_if_accepted(inputs) is None
    if odd in ("float64", "shape", "byte-swapped", "count"):
        with pytest.raises(ExecutionError):
            exe.call(inputs)
    else:  # the full path takes these, converted
        [z] = exe.call(inputs)
        np.testing.assert_array_equal(z, np.maximum(x, 0) + y)
