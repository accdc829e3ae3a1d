"""What ``fleet.distributed_model`` and ``fleet.distributed_optimizer`` do around a tensor-parallel
Layer (docs/model-parallel.md, "Dygraph"), besides training it: its inputs, the Layers refused, and
clipping in an optimizer with parameter groups (Paddle's ``hybrid_parallel_mp_amp.py`` builds one):
each group clips with its own ``grad_clip``, which must use the dense model's norms too. Paddle's ``TensorParallel`` gives every rank of a model-parallel group its first rank's
inputs before each forward (``mp_configs.need_broadcast_data``, on by default), so ranks fed
different batches still train one model, the dense model on the first rank's batch. The engine
does the same, honours ``need_broadcast_data = False``, and refuses inputs whose shapes differ
between the ranks with a ValidationError on every rank (a broadcast of mismatched sizes would fail
or hang). A Layer built from Paddle's sequence-parallel linears is refused at the wrapper with a
ConfigError naming them (the capture cannot trace their PyLayers, and the engine's backward does not
run the gradient hooks of the parameters they mark). mp 2 on 2 ranks under mpirun, one job for all.
"""
import numpy as np
import pytest

from ranks import run_ranks

pytestmark = pytest.mark.distributed

IN, MID, BATCH, LR = 4, 8, 3, 0.1


def inputs_worker():
    import paddle
    import paddle_ngraph  # noqa: F401  (strategy.ngraph)
    from paddle.distributed import fleet
    from paddle_ngraph.errors import ValidationError

    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 2, "pp_degree": 1}
    fleet.init(is_collective=True, strategy=strategy)
    mp_rank = fleet.get_hybrid_communicate_group().get_model_parallel_rank()
    rng = np.random.default_rng(3)
    w1, w2 = rng.uniform(-1, 1, (IN, MID)).astype("float32"), rng.uniform(-1, 1, (MID, IN)).astype("float32")
    x0 = rng.uniform(-1, 1, (BATCH, IN)).astype("float32")
    mine = x0 if mp_rank == 0 else x0 + 1  # this rank's own batch: rank 1's differs from rank 0's

    def assign(value):
        return paddle.ParamAttr(initializer=paddle.nn.initializer.Assign(value))

    class Sharded(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.col = fleet.meta_parallel.ColumnParallelLinear(
                IN, MID, weight_attr=assign(np.split(w1, 2, 1)[mp_rank]), gather_output=False, has_bias=False)
            self.row = fleet.meta_parallel.RowParallelLinear(
                MID, IN, weight_attr=assign(np.split(w2, 2, 0)[mp_rank]), input_is_parallel=True, has_bias=False)

        def forward(self, x):
            return (self.row(self.col(x)) ** 2).mean()

    def sharded_model(need_broadcast_data=True):
        fleet.fleet._user_defined_strategy.hybrid_configs = {
            "dp_degree": 1, "mp_degree": 2, "pp_degree": 1,
            "mp_configs": {"need_broadcast_data": need_broadcast_data}}
        return fleet.distributed_model(Sharded())

    def dense_loss_and_grads(x):
        a, b = paddle.to_tensor(w1, stop_gradient=False), paddle.to_tensor(w2, stop_gradient=False)
        loss = ((paddle.to_tensor(x) @ a @ b) ** 2).mean()
        loss.backward()
        return float(loss), a.grad.numpy(), b.grad.numpy()

    model = sharded_model()
    x = paddle.to_tensor(mine)
    loss = model(x)
    loss.backward()
    inner = model._layers
    broadcast = {"loss": float(loss), "col_grad": inner.col.weight.grad.numpy(),
                 "row_grad": inner.row.weight.grad.numpy(), "x_after": x.numpy()}
    own = float(sharded_model(need_broadcast_data=False)(paddle.to_tensor(mine)))
    refused = None
    try:
        sharded_model()(paddle.to_tensor(rng.uniform(-1, 1, (BATCH + mp_rank, IN)).astype("float32")))
    except ValidationError as e:
        refused = str(e)
    dense = dense_loss_and_grads(x0)
    return {"mp_rank": mp_rank, "broadcast": broadcast, "own": own, "refused": refused, "dense": dense,
            "x0": x0, "mine": mine, "sequence_parallel": sequence_parallel_refusal(),
            "clip_groups": {kind: clipped_in_groups(kind, Sharded, w1, w2, x0, mp_rank) for kind in CLIPS}}


CLIPS = ("ClipGradByGlobalNorm", "ClipGradByNorm")  # paddle.nn classes; 0.05: below the gradients' norms


def clipped_in_groups(kind, sharded_class, w1, w2, x, mp_rank):
    """3 SGD steps of the sharded model and of the dense one, each optimizer given its parameters as
    two groups (the second with weight decay), clipping by ``kind``: this rank's shards and the
    dense weights after them."""
    import paddle
    from paddle.distributed import fleet

    def optimizer(first, second):
        return paddle.optimizer.SGD(LR, grad_clip=getattr(paddle.nn, kind)(0.05),
                                    parameters=[{"params": [first]}, {"params": [second], "weight_decay": 0.01}])

    sharded = sharded_class()
    sharded_opt = fleet.distributed_optimizer(optimizer(sharded.col.weight, sharded.row.weight))
    model = fleet.distributed_model(sharded)
    a, b = (paddle.create_parameter(w.shape, "float32", default_initializer=paddle.nn.initializer.Assign(w))
            for w in (w1, w2))
    dense_opt = optimizer(a, b)
    for _ in range(3):
        model(paddle.to_tensor(x)).backward()
        sharded_opt.step()
        sharded_opt.clear_grad()
        ((paddle.to_tensor(x) @ a @ b) ** 2).mean().backward()
        dense_opt.step()
        dense_opt.clear_grad()
    return {"col": sharded.col.weight.numpy(), "row": sharded.row.weight.numpy(),
            "dense_col": np.split(a.numpy(), 2, 1)[mp_rank], "dense_row": np.split(b.numpy(), 2, 0)[mp_rank]}


def sequence_parallel_refusal():
    import paddle
    from paddle.distributed import fleet
    from paddle.distributed.fleet.utils import sequence_parallel_utils as spu
    from paddle_ngraph.errors import ConfigError

    class SequenceParallel(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.col = spu.ColumnSequenceParallelLinear(IN, MID, gather_output=False, has_bias=True)
            self.norm = paddle.nn.LayerNorm(MID)
            spu.mark_as_sequence_parallel_parameter(self.norm.weight)

        def forward(self, x):
            return self.norm(self.col(spu.ScatterOp.apply(x)))

    try:
        fleet.distributed_model(SequenceParallel())
    except ConfigError as e:
        return str(e)
    return None


def test_the_wrapper_of_a_tensor_parallel_layer():
    run = run_ranks(inputs_worker, 2, timeout=120)
    for r in run.results:
        dense_loss, dense_col, dense_row = r["dense"]
        got = r["broadcast"]
        # rank 1 was given another batch: the model is still the dense one on rank 0's batch
        np.testing.assert_allclose(got["loss"], dense_loss, rtol=1e-6)
        np.testing.assert_allclose(got["col_grad"], np.split(dense_col, 2, 1)[r["mp_rank"]], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["row_grad"], np.split(dense_row, 2, 0)[r["mp_rank"]], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got["x_after"], r["x0"])  # written in place, as Paddle's broadcast does
        # need_broadcast_data False: each rank keeps its own batch (the sums mix two batches)
        assert not np.isclose(r["own"], dense_loss, rtol=1e-3)
        assert r["refused"] is not None and "Sharded" in r["refused"] and "(3, 4)" in r["refused"] \
            and "(4, 4)" in r["refused"], r["refused"]
        refusal = r["sequence_parallel"]
        assert refusal is not None and "Layer SequenceParallel uses Paddle's sequence parallelism" in refusal
        assert "col (ColumnSequenceParallelLinear)" in refusal and "parameter norm.weight" in refusal, refusal
        for kind, got in r["clip_groups"].items():
            np.testing.assert_allclose(got["col"], got["dense_col"], rtol=1e-5, atol=1e-6, err_msg=kind)
            np.testing.assert_allclose(got["row"], got["dense_row"], rtol=1e-5, atol=1e-6, err_msg=kind)
