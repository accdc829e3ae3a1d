"""The gradient AllReduce pass (passes/insert_allreduce.py) and its bucketing (passes/allreduce_buckets.py)
on small hand-built functions: bucket boundaries, min_buckets, reductions, skipped parameters,
compression, raw gradients, and that every gradient is reduced once before its update reads it.
Compression's refusals: test_insert_allreduce_compress.py."""
import pytest

from paddle_ngraph.ir.roles import FETCH_PREFIX, fetch_result, state_result
from paddle_ngraph.ir import Function, ops
from paddle_ngraph.ir.ops.optimizer import OptimizerUpdate
from paddle_ngraph.ir.types import DType
from paddle_ngraph.passes import InsertAllReduce, PassManager
from paddle_ngraph.passes.allreduce_buckets import compression_for, plan_buckets
from paddle_ngraph.passes.insert_allreduce import average_gradient_results, average_results


def training_function(layers, clipped=()):
    """One SGD update per (name, elements, dtype) of ``layers``; the gradients are made in the
    order given (the backward's ready order), each as ``x * dy`` from parameters of its own.
    ``clipped``: parameters whose update reads a processed gradient (``raw * scale``) instead of
    the raw one; returns the function and {parameter: raw gradient} for those."""
    params, results, raw = [], {}, {}
    lrs = {}
    grads = {}
    for name, elements, dtype in layers:
        x = ops.Parameter(dtype=dtype, shape=(elements,), name=f"x_{name}")
        dy = ops.Parameter(dtype=dtype, shape=(elements,), name=f"dy_{name}")
        params += [x, dy]
        grads[name] = ops.Multiply(x.output(), dy.output(), name=f"grad_{name}").output()
    for name, elements, dtype in layers:
        w = ops.Parameter(dtype=dtype, shape=(elements,), name=name, role="parameter")
        if dtype not in lrs:
            lrs[dtype] = ops.Parameter(dtype=dtype, shape=(1,), name=f"lr_{dtype}")
            params.append(lrs[dtype])
        params.append(w)
        grad = grads[name]
        if name in clipped:
            scale = ops.Parameter(dtype=dtype, shape=(elements,), name=f"clip_{name}")
            params.append(scale)
            raw[name] = grad
            grad = ops.Multiply(grad, scale.output(), name=f"clipped_{name}").output()
        results[state_result(name)] = ops.SGDUpdate(w.output(), grad, lrs[dtype].output(), name=f"sgd_{name}").output()
    return Function(params, results, name="train"), raw


def allreduces(function):
    return [n for n in function.ordered_nodes() if n.op_type == "AllReduce"]


def updates(function):
    return {n.inputs[n.param_input].node.name: n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)}


def bucket_params(function):
    """Per AllReduce (in order), the names of the gradient producers it reduces."""
    return [[i.node.name for i in node.inputs] for node in allreduces(function)]


def run(function, **options):
    options.setdefault("bucket_bytes", 32 << 20)
    allreduce = InsertAllReduce(4, **options)
    changed = PassManager([allreduce]).run(function)
    return allreduce, changed


F32 = "float32"


def test_one_allreduce_per_gradient_with_bucket_size_0_in_the_order_backward_makes_them():
    function, _ = training_function([("a", 4, F32), ("b", 8, F32), ("c", 2, F32)])
    allreduce, _ = run(function, bucket_bytes=0)
    assert bucket_params(function) == [["grad_a"], ["grad_b"], ["grad_c"]]
    assert [n.attrs["bucket"] for n in allreduces(function)] == ["grad_bucket_0", "grad_bucket_1", "grad_bucket_2"]
    assert [n.name for n in allreduces(function)] == ["allreduce_bucket_0", "allreduce_bucket_1", "allreduce_bucket_2"]
    assert allreduce.buckets == [["a"], ["b"], ["c"]]


def test_a_bucket_closes_before_the_gradient_that_would_exceed_the_size():
    # 16 + 32 = 48 bytes fit in 48; adding c (8 bytes) would exceed: c starts the next bucket, d joins it.
    function, _ = training_function([("a", 4, F32), ("b", 8, F32), ("c", 2, F32), ("d", 10, F32)])
    allreduce, _ = run(function, bucket_bytes=48)
    assert allreduce.buckets == [["a", "b"], ["c", "d"]]
    assert allreduce.effective_bucket_bytes == 48
    # A gradient larger than the bucket travels alone.
    function, _ = training_function([("a", 4, F32), ("big", 100, F32), ("c", 2, F32)])
    allreduce, _ = run(function, bucket_bytes=48)
    assert allreduce.buckets == [["a"], ["big"], ["c"]]


def test_a_large_bucket_holds_every_gradient_of_one_dtype_and_a_dtype_change_starts_a_new_one():
    function, _ = training_function([("a", 4, F32), ("b", 8, F32)])
    allreduce, _ = run(function)
    assert allreduce.buckets == [["a", "b"]]
    function, _ = training_function([("a", 4, F32), ("h", 4, "float64"), ("b", 8, F32)])
    allreduce, _ = run(function)
    assert allreduce.buckets == [["a"], ["h"], ["b"]]
    assert [n.inputs[0].dtype for n in allreduces(function)] == [DType.float32, DType.float64, DType.float32]


def test_min_buckets_lowers_the_size_to_total_over_min_buckets():
    layers = [(name, 4, F32) for name in "abcdef"]  # 6 x 16 bytes = 96
    function, _ = training_function(layers)
    allreduce, _ = run(function, min_buckets=3)
    assert allreduce.effective_bucket_bytes == 32
    assert allreduce.buckets == [["a", "b"], ["c", "d"], ["e", "f"]]
    # Rounded up: 96 / 5 -> 20 bytes, one 16-byte gradient per bucket.
    function, _ = training_function(layers)
    allreduce, _ = run(function, min_buckets=5)
    assert allreduce.effective_bucket_bytes == 20
    assert len(allreduce.buckets) == 6
    # A bucket size already smaller is kept.
    function, _ = training_function(layers)
    allreduce, _ = run(function, bucket_bytes=16, min_buckets=2)
    assert allreduce.effective_bucket_bytes == 16 and len(allreduce.buckets) == 6


@pytest.mark.parametrize("reduction", ["avg", "sum"])
def test_the_reduction_is_the_allreduce_attribute(reduction):
    function, _ = training_function([("a", 4, F32), ("b", 4, F32)])
    run(function, bucket_bytes=0, reduction=reduction)
    assert [n.attrs["reduction"] for n in allreduces(function)] == [reduction, reduction]


def test_skipped_parameters_keep_their_own_gradient():
    function, _ = training_function([("a", 4, F32), ("dist", 4, F32), ("b", 4, F32)])
    allreduce, _ = run(function, skip_params={"dist"})
    assert allreduce.buckets == [["a", "b"]]
    by_param = updates(function)
    assert by_param["dist"].inputs[by_param["dist"].grad_input].node.name == "grad_dist"
    assert "grad_dist" not in [name for bucket in bucket_params(function) for name in bucket]


def test_one_process_and_a_function_without_updates_are_left_alone():
    function, _ = training_function([("a", 4, F32)])
    assert not InsertAllReduce(1).run(function)
    assert allreduces(function) == []
    function, _ = training_function([("a", 4, F32)])
    assert not InsertAllReduce(4, skip_params={"a"}).run(function)
    assert allreduces(function) == []


@pytest.mark.parametrize("compress", ["bf16", "fp16"])
@pytest.mark.parametrize("reduction", ["avg", "sum"])
def test_only_float32_buckets_travel_compressed(compress, reduction):
    function, _ = training_function([("a", 4, F32), ("h", 4, "float64"), ("b", 4, F32)])
    run(function, reduction=reduction, compress=compress)
    assert [(n.inputs[0].dtype, n.attrs["compress"]) for n in allreduces(function)] == [
        (DType.float32, compress), (DType.float64, "none"), (DType.float32, compress)]


def test_the_compression_rule():
    for compress in ("bf16", "fp16"):
        assert compression_for(DType.float32, "avg", compress) == compress
        assert compression_for(DType.float32, "sum", compress) == compress
        assert compression_for(DType.float32, "max", compress) == "none"
        assert compression_for(DType.float32, "min", compress) == "none"
        for dtype in (DType.float64, DType.float16, DType.bfloat16, DType.int32, DType.int64):
            assert compression_for(dtype, "sum", compress) == "none"
    assert compression_for(DType.float32, "avg", "none") == "none"


def test_plan_buckets_splits_where_the_key_differs_from_the_buckets_first():
    assert plan_buckets([4, 4, 4, 4], ["x", "x", "y", "x"], 100) == ([[0, 1], [2], [3]], 100)
    assert plan_buckets([4, 4, 4, 4], ["x"] * 4, 0) == ([[0], [1], [2], [3]], 0)
    assert plan_buckets([8, 8, 8], ["x"] * 3, 100, min_buckets=3) == ([[0], [1], [2]], 8)
    assert plan_buckets([], [], 100, min_buckets=3) == ([], 0)


def test_every_gradient_is_reduced_exactly_once_before_its_update_reads_it():
    layers = [("a", 4, F32), ("b", 40, F32), ("h", 4, "float64"), ("c", 4, F32), ("d", 4, F32)]
    function, _ = training_function(layers)
    run(function, bucket_bytes=64, compress="bf16")
    order = {n.id: k for k, n in enumerate(function.ordered_nodes())}
    reduced = [i.node.name for node in allreduces(function) for i in node.inputs]
    assert sorted(reduced) == sorted(f"grad_{name}" for name, _, _ in layers)  # each once
    for name, update in updates(function).items():
        grad = update.inputs[update.grad_input]
        assert grad.node.op_type == "AllReduce"
        assert grad.node.inputs[grad.index].node.name == f"grad_{name}"  # its own output, not a neighbour's
        assert order[grad.node.id] < order[update.id]


def test_raw_gradients_are_reduced_and_every_reader_reads_the_average():
    function, raw = training_function([("a", 4, F32), ("b", 4, F32)], clipped={"b"})
    allreduce, _ = run(function, raw_gradients=raw)
    [node] = allreduces(function)
    assert [i.node.name for i in node.inputs] == ["grad_a", "grad_b"]
    assert allreduce.buckets == [["a", "b"]]
    by_param = updates(function)
    # The clipped update reads the processed gradient, computed from the average of the raw one.
    clipped = by_param["b"].inputs[by_param["b"].grad_input].node
    assert clipped.name == "clipped_b"
    assert clipped.inputs[0].node is node and clipped.inputs[0].index == 1
    assert by_param["a"].inputs[by_param["a"].grad_input].node is node
    # Nothing but the AllReduce reads a raw gradient any more.
    readers = [n.name for n in function.ordered_nodes() for i in n.inputs if i.node.name in ("grad_a", "grad_b")]
    assert readers == ["allreduce_bucket_0", "allreduce_bucket_0"]


def test_dygraph_gradient_results_are_averaged_in_buckets_in_the_order_backward_makes_them():
    function, _ = training_function([("a", 4, F32), ("b", 4, F32), ("h", 4, "float64"), ("c", 4, F32)])
    grads = {n.inputs[n.param_input].node.name: n.inputs[n.grad_input] for n in updates(function).values()}
    backward = Function(function.parameters, {f"{name}@GRAD": value for name, value in reversed(grads.items())},
                        name="backward")
    averaged = average_gradient_results(backward, list(backward.results), bucket_bytes=16, reduction="sum",
                                        compress="fp16")
    assert bucket_params(averaged) == [["grad_a"], ["grad_b"], ["grad_h"], ["grad_c"]]
    assert [(n.attrs["reduction"], n.attrs["compress"]) for n in allreduces(averaged)] == [
        ("sum", "fp16"), ("sum", "fp16"), ("sum", "none"), ("sum", "fp16")]
    for name, value in averaged.results.items():
        assert value.node.op_type == "AllReduce"
        assert value.node.inputs[value.index].node.name == f"grad_{name[:-len('@GRAD')]}"


def test_gradients_left_to_paddle_are_reduced_in_one_allreduce_per_dtype():
    function, _ = training_function([("a", 4, F32), ("h", 4, "float64"), ("b", 400, F32)])
    grads = {n.inputs[n.param_input].node.name: n.inputs[n.grad_input] for n in updates(function).values()}
    fallback = Function(function.parameters, {fetch_result(name): g for name, g in grads.items()}, name="seg")
    averaged = average_results(fallback, ["a", "h", "b"], compress="bf16")
    assert bucket_params(averaged) == [["grad_a", "grad_b"], ["grad_h"]]
    assert [(n.name, n.attrs["bucket"], n.attrs["compress"]) for n in allreduces(averaged)] == [
        ("allreduce_seg_fallback_grads_0", "seg_fallback_grads_0", "bf16"),
        ("allreduce_seg_fallback_grads_1", "seg_fallback_grads_1", "none")]
    assert averaged.results[FETCH_PREFIX + "b"].node.inputs[averaged.results[FETCH_PREFIX + "b"].index].node.name \
        == "grad_b"
