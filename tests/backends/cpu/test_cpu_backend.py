"""The CPU backend as a backend: completeness, specialization, errors, threads, collectives in one process."""
import os

import numpy as np
import pytest

import paddle_ngraph
from paddle_ngraph import ExecutionError, _cpu
from paddle_ngraph.backends import get_backend
from paddle_ngraph.backends.cpu import default_threads
from paddle_ngraph.distributed.transport import NullTransport
from paddle_ngraph.ir import Function, op_types, ops

NOT_KERNELS = {"Parameter", "Constant", "AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv"}


def test_every_ir_op_has_a_native_kernel():
    """Collectives run on the communication thread, parameters and constants are buffers."""
    missing = sorted(set(op_types()) - NOT_KERNELS - set(_cpu.registered_op_types()))
    assert missing == []


def linear_softmax():
    x = ops.Parameter(dtype="float32", shape=(-1, 3), name="x")
    w = ops.Parameter(dtype="float32", shape=(3, 4), name="w")
    y = ops.Parameter(dtype="int64", shape=(-1, 1), name="y")
    sce = ops.SoftmaxCrossEntropy(ops.MatMul(x.output(), w.output(), name="mm").output(), y.output(), name="loss")
    return Function([x, w, y], {"loss": sce.output(1)})


def test_each_batch_size_is_compiled_once_and_matches_the_interpreter():
    f = linear_softmax()
    cpu, ref = get_backend("CPU").compile(f), get_backend("INTERPRETER").compile(f)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype("float32")
    for batch in (8, 5, 8):
        inputs = [rng.standard_normal((batch, 3)).astype("float32"), w, rng.integers(0, 4, (batch, 1))]
        np.testing.assert_allclose(cpu.call(inputs)[0], ref.call(inputs)[0], rtol=1e-6)
    assert len(cpu._specializations) == 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("a_shape, b_shape, ta, tb", [
    ((7, 1), (5, 1), False, True),   # the input gradient of a Linear with one input feature
    ((1, 7), (5, 1), True, True),
    ((1, 7), (1, 5), True, False),
    ((7, 1), (1, 5), False, False),
    ((7, 3), (5, 3), False, True),
    ((3, 7), (3, 5), True, False),
    ((2, 7, 1), (5, 1), False, True),
])
def test_matmul_with_a_dimension_of_one_stored_transposed_matches_the_interpreter(a_shape, b_shape, ta, tb, dtype):
    """A one-row or one-column operand marked transposed: some of oneDNN's AVX-512 matmuls read the
    strides such an operand had, (1, 1), as another layout and gave wrong products."""
    a = ops.Parameter(dtype=dtype, shape=a_shape, name="a")
    b = ops.Parameter(dtype=dtype, shape=b_shape, name="b")
    f = Function([a, b], {"c": ops.MatMul(a.output(), b.output(), transpose_a=ta, transpose_b=tb).output()})
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)]
    expected = get_backend("INTERPRETER").compile(f).call(inputs)[0]
    np.testing.assert_allclose(get_backend("CPU").compile(f).call(inputs)[0], expected, rtol=1e-5, atol=1e-6)


def test_a_bad_label_names_the_node():
    f = linear_softmax()
    inputs = [np.ones((2, 3), "float32"), np.ones((3, 4), "float32"), np.array([[1], [7]])]
    with pytest.raises(ExecutionError, match=r"node 'loss' \(SoftmaxCrossEntropy\).*7"):
        get_backend("CPU").compile(f).call(inputs)


def test_a_wrong_dtype_names_the_input():
    with pytest.raises(ExecutionError, match="input 'w': dtype float64"):
        get_backend("CPU").compile(linear_softmax()).call(
            [np.ones((2, 3), "float32"), np.ones((3, 4)), np.zeros((2, 1), "int64")])


def test_threads_default_to_the_cores_shared_by_the_ranks_of_the_node(monkeypatch):
    cores = len(__import__("os").sched_getaffinity(0))
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_SIZE", raising=False)
    monkeypatch.delenv("PADDLE_LOCAL_SIZE", raising=False)
    assert default_threads() == cores
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", str(2 * cores))
    assert default_threads() == 1  # never 0


def test_collectives_in_one_process():
    """AllReduce in place (the identity on one rank, with or without a transport) and AllGather
    through the transport's path (it needs one, as in the interpreter)."""
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    y = ops.Parameter(dtype="float64", shape=(4,), name="y")
    reduced = ops.AllReduce(x.output(), y.output(), reduction="avg")
    f = Function([x, y], {"a": reduced.output(0), "b": reduced.output(1)})
    xv, yv = np.arange(6, dtype="float32").reshape(2, 3), np.arange(4.0)
    for transport in (None, NullTransport()):
        a, b = get_backend("CPU").compile(f).call([xv, yv], transport)
        np.testing.assert_array_equal(a, xv)
        np.testing.assert_array_equal(b, yv)
    g = Function([x], {"g": ops.AllGather(x.output(), world_size=1).output(0)})
    np.testing.assert_array_equal(get_backend("CPU").compile(g).call([xv], NullTransport())[0], xv)
    with pytest.raises(ExecutionError, match="AllGather.*needs a transport"):
        get_backend("CPU").compile(g).call([xv])


@pytest.mark.skipif(not os.environ.get("PDNG_EXPECT_LIBRARY"), reason="only under make sanitize")
def test_CPU_tests_run_on_the_expected_native_library():
    """make sanitize must test the sanitized build, not the normal one next to the extension."""
    _cpu.registered_op_types()
    maps = open("/proc/self/maps").read()
    assert os.path.abspath(os.environ["PDNG_EXPECT_LIBRARY"]) in maps


def test_check_finite_names_the_tensor_after_allreduce():
    x = ops.Parameter(dtype="float32", shape=(4,), name="grad")
    f = Function([x], {"r": ops.AllReduce(x.output(), reduction="sum", bucket="grad_bucket_0").output(0)})
    value = np.array([1, 2, np.inf, 4], dtype="float32")
    np.testing.assert_array_equal(get_backend("CPU").compile(f).call([value])[0], value)  # off by default
    with pytest.raises(ExecutionError, match=r"non-finite value inf in .*element 2 .*bucket 'grad_bucket_0'"):
        get_backend("CPU", check_finite=True).compile(f).call([value])
    with pytest.raises(paddle_ngraph.ConfigError, match="check_finite"):
        get_backend("INTERPRETER", check_finite=True)


def test_a_kernel_reads_every_attribute_as_required():
    """The IR op is the one source of attribute defaults: a node whose attribute is missing (the runtime
    sends them all) fails when its kernel is made, naming the node, its op type and the attribute."""
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    softmax = ops.Softmax(x.output(), axis=-1, name="probabilities")
    del softmax.attrs["axis"]
    native = _cpu.NativeExecutable()
    with pytest.raises(ExecutionError, match=r"node 'probabilities' \(Softmax\): missing integer attribute 'axis'"):
        native.add_compute(softmax, [0], [1])


def test_a_small_step_runs_on_one_thread_unless_threads_are_set(monkeypatch):
    from paddle_ngraph.backends.cpu import work

    monkeypatch.setattr("paddle_ngraph.backends.cpu.executable.default_threads", lambda: 2)
    inputs = [np.ones((2, 3), "float32"), np.ones((3, 4), "float32"), np.zeros((2, 1), "int64")]
    auto, explicit = get_backend("CPU").compile(linear_softmax()), get_backend("CPU", threads=2).compile(linear_softmax())
    np.testing.assert_array_equal(auto.call(inputs)[0], explicit.call(inputs)[0])
    assert work.step_flops(auto.last.function) < work.SMALL_STEP_FLOPS
    assert (auto.last.threads, explicit.last.threads) == (1, 2)
    # A product big enough to share: the cores again.
    a = ops.Parameter(dtype="float32", shape=(-1, 512), name="a")
    b = ops.Parameter(dtype="float32", shape=(512, 512), name="b")
    product = get_backend("CPU").compile(Function([a, b], {"ab": ops.MatMul(a.output(), b.output()).output()}))
    product.call([np.ones((512, 512), "float32"), np.ones((512, 512), "float32")])
    assert work.step_flops(product.last.function) >= work.SMALL_STEP_FLOPS and product.last.threads == 2


def test_step_flops_count_multiply_adds_of_products_and_convolutions():
    from paddle_ngraph.backends.cpu.work import node_flops

    a = ops.Parameter(dtype="float32", shape=(5, 3), name="a")
    b = ops.Parameter(dtype="float32", shape=(5, 4), name="b")
    assert node_flops(ops.MatMul(a.output(), b.output(), transpose_a=True)) == 2 * 3 * 4 * 5
    data = ops.Parameter(dtype="float32", shape=(2, 3, 8, 8), name="data")
    filters = ops.Parameter(dtype="float32", shape=(6, 3, 3, 3), name="filters")
    conv = ops.Convolution(data.output(), filters.output(), pads_begin=(1, 1), pads_end=(1, 1))
    assert node_flops(conv) == 2 * (2 * 6 * 8 * 8) * (3 * 3 * 3)
    assert node_flops(ops.Relu(data.output())) == 2 * 3 * 8 * 8


def test_a_new_shape_is_checked_against_the_function_after_an_accepted_one():
    cpu = get_backend("CPU").compile(linear_softmax())
    cpu.call([np.ones((2, 3), "float32"), np.ones((3, 4), "float32"), np.zeros((2, 1), "int64")])
    with pytest.raises(ExecutionError, match=r"input 'w': shape \[3, 5\]"):
        cpu.call([np.ones((2, 3), "float32"), np.ones((3, 5), "float32"), np.zeros((2, 1), "int64")])


def test_results_in_inputs_are_the_results_sharing_an_input_buffer():
    x = ops.Parameter(dtype="float32", shape=(2, 6), name="x")
    viewed = ops.Reshape(x.output(), shape=[3, 4])
    computed = ops.Relu(x.output())
    cpu = get_backend("CPU").compile(Function([x], {"view": viewed.output(), "relu": computed.output()}))
    array = np.arange(12, dtype="float32").reshape(2, 6)
    view, relu = cpu.call([array])
    assert cpu.results_in_inputs() == {0} and np.shares_memory(view, array)
    assert not np.shares_memory(relu, array)
