"""InsertAllReduce with ``compress``: float32 buckets marked, others not; bad values refused."""
import pytest

from paddle_ngraph.errors import ConfigError
from paddle_ngraph.ir import Function, ops
from paddle_ngraph.ir.ops.optimizer import OptimizerUpdate
from paddle_ngraph.passes import InsertAllReduce, PassManager


def sgd_function(dtypes):
    params, results = [], {}
    lr = ops.Parameter(dtype="float32", shape=(1,), name="lr")
    for i, dtype in enumerate(dtypes):
        p = ops.Parameter(dtype=dtype, shape=(4,), name=f"w{i}", role="parameter")
        g = ops.Parameter(dtype=dtype, shape=(4,), name=f"g{i}")
        params += [p, g]
        update_lr = lr if dtype == "float32" else ops.Parameter(dtype=dtype, shape=(1,), name=f"lr{i}")
        if update_lr is not lr:
            params.append(update_lr)
        results[f"w{i}_out"] = ops.SGDUpdate(p.output(), g.output(), update_lr.output(), name=f"sgd{i}").output()
    return Function([lr, *params], results, name="f")


@pytest.mark.parametrize("compress", ["bf16", "fp16"])
def test_float32_buckets_are_marked_and_float64_left_alone(compress):
    function = sgd_function(["float32", "float64", "float32"])
    PassManager([InsertAllReduce(2, bucket_bytes=0, compress=compress)]).run(function)
    reduces = {n.inputs[0].dtype.value: n for n in function.ordered_nodes() if n.op_type == "AllReduce"}
    assert reduces["float32"].attrs["compress"] == compress
    assert reduces["float64"].attrs["compress"] == "none"
    updates = [n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)]
    assert all(u.inputs[u.grad_input].node.op_type == "AllReduce" for u in updates)


def test_default_is_uncompressed():
    function = sgd_function(["float32"])
    PassManager([InsertAllReduce(2)]).run(function)
    assert [n.attrs["compress"] for n in function.ordered_nodes() if n.op_type == "AllReduce"] == ["none"]


def test_bad_compress_or_reduction_is_a_config_error():
    with pytest.raises(ConfigError, match="compress 'int8' is not one of none, bf16, fp16"):
        InsertAllReduce(2, compress="int8")
    with pytest.raises(ConfigError, match="compress 'bf16' needs reduction sum or avg, not 'max'"):
        InsertAllReduce(2, compress="bf16", reduction="max")
