"""Tensor parallelism of dygraph Layers on the engine (docs/model-parallel.md, "Dygraph"): fleet's
``meta_parallel`` layers under ``fleet.init`` with ``hybrid_configs``, ``strategy.ngraph`` and
``fleet.distributed_model``, trained by ``loss.backward(); opt.step()``.

The oracle is Paddle's own, as for the static path (test_model_parallel.py): the shards
all-gathered into one dense Layer (``paddle.nn.initializer.Assign``) that Paddle trains eagerly in
one process on the global batch (the data-parallel replicas' batches concatenated). Two models
cover the layer kinds:

- ``gathered``: a dense ``Embedding`` before a ``ColumnParallelLinear(gather_output=True)`` (so
  its gradient flows through ``c_identity``'s VJP, which Paddle 3.3.1 lacks in PIR), a
  ``RowParallelLinear(input_is_parallel=False)`` (``c_split``), a dense head; the loss eager after
  the Layer;
- ``sharded``: ``VocabParallelEmbedding``, ``ColumnParallelLinear(gather_output=False)``,
  ``RowParallelLinear(input_is_parallel=True)``, a class-sharded head and ``ParallelCrossEntropy``
  inside the Layer.

5 SGD steps: losses within rtol 5e-5, the first step's gradients reassembled equal to the dense
ones (the dense embedding's among them: non-zero), the trained shards reassembled equal to the
dense parameters (1e-5); the same with the gradients clipped by the global norm and by each
gradient's norm (the dense model's norms: the shards' squares summed over the model-parallel
group). Each job checks several things (the suite's time): mp 2 on 2 ranks under
mpirun on both backends (fleet's wrapper on the CPU backend, ``paddle_ngraph.DataParallel`` on the
interpreter), under ``paddle.distributed.launch``, and 2 replicas x 2 shards on 4 ranks (there also
with micro-batches under ``no_sync``). The first job also checks that a tensor-parallel Layer the
engine cannot capture raises (no eager run).
"""
import numpy as np
import pytest

from ranks import run_ranks
from paddle_ngraph.distributed.ccl import available as ccl_available

pytestmark = pytest.mark.distributed
needs_ccl = pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")

VOCAB, EMB, SEQ, HIDDEN, MIDDLE, CLASSES = 8, 6, 3, 10, 6, 4
BATCH, STEPS, LR, SEED = 4, 5, 0.1, 7
# model -> parameter -> (full shape, the axis its shards cut, None: whole on every rank). Biases of
# the parallel linears start at zero (fleet's layers fix their initializer).
MODELS = {
    "gathered": {"emb": ((VOCAB, EMB), None), "col_w": ((SEQ * EMB, HIDDEN), 1), "col_b": ((HIDDEN,), 0),
                 "row_w": ((HIDDEN, MIDDLE), 0), "row_b": ((MIDDLE,), None),
                 "out_w": ((MIDDLE, CLASSES), None), "out_b": ((CLASSES,), None)},
    "sharded": {"emb": ((VOCAB, EMB), 0), "col_w": ((SEQ * EMB, HIDDEN), 1), "col_b": ((HIDDEN,), 0),
                "row_w": ((HIDDEN, MIDDLE), 0), "row_b": ((MIDDLE,), None),
                "out_w": ((MIDDLE, CLASSES), 1), "out_b": ((CLASSES,), 0)},
}
ZERO_INIT = {"col_b", "row_b", "out_b"}
# Clipping by a norm: under tensor parallelism the norm must be the dense model's (the squares of the
# shards summed over the model-parallel group). Limits well below the gradients' norms (checked).
CLIP_NORM = 0.05
CLIPS = {"global_norm": "ClipGradByGlobalNorm", "norm": "ClipGradByNorm"}  # paddle.nn classes


def full_weights(model: str) -> dict:
    rng = np.random.default_rng(SEED)
    return {name: (np.zeros(shape, "float32") if name in ZERO_INIT and (model == "sharded" or name != "out_b")
                   else rng.uniform(-0.5, 0.5, shape).astype("float32"))
            for name, (shape, _) in MODELS[model].items()}


def shard(model: str, name: str, value: np.ndarray, mp_rank: int, mp: int) -> np.ndarray:
    axis = MODELS[model][name][1]
    return value if axis is None else np.split(value, mp, axis=axis)[mp_rank]


def rank_weights(model: str, mp_rank: int, mp: int, replica: int) -> dict:
    """This rank's initial values: its shards of the dense weights, off by a constant on every rank
    but the first of its data-parallel group, and, for the whole (not sharded) ones, on every rank
    but the first of its model-parallel group too. The wrapper's initial broadcasts must undo
    exactly that (a shard is never overwritten by another shard)."""
    weights = {}
    for name, value in full_weights(model).items():
        offset = replica + (mp_rank if MODELS[model][name][1] is None else 0)
        weights[name] = shard(model, name, value, mp_rank, mp) + np.float32(0.25 * offset)
    return weights


def batch(step: int, replica: int):
    """Replica ``replica``'s batch: the same on every rank of one model, and at every step (so that
    the loss falls)."""
    rng = np.random.default_rng(1000 + replica)
    return rng.integers(0, VOCAB, (BATCH, SEQ)).astype("int64"), rng.integers(0, CLASSES, (BATCH, 1)).astype("int64")


def build(model: str, weights: dict, parallel: bool):
    """The Layer (``parallel``: fleet's tensor-parallel layers holding ``weights``' shards; else the
    dense Layer) and the names of its parameters by our names."""
    import paddle
    from paddle import nn
    import paddle.nn.functional as F
    from paddle.distributed.fleet import meta_parallel as mpu

    def attr(name):
        return paddle.ParamAttr(initializer=nn.initializer.Assign(weights[name]))

    class Gathered(nn.Layer):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, EMB, weight_attr=attr("emb"))
            if parallel:
                self.col = mpu.ColumnParallelLinear(SEQ * EMB, HIDDEN, weight_attr=attr("col_w"), has_bias=True,
                                                    gather_output=True)
                self.row = mpu.RowParallelLinear(HIDDEN, MIDDLE, weight_attr=attr("row_w"), has_bias=True,
                                                 input_is_parallel=False)
            else:
                self.col = nn.Linear(SEQ * EMB, HIDDEN, weight_attr=attr("col_w"), bias_attr=attr("col_b"))
                self.row = nn.Linear(HIDDEN, MIDDLE, weight_attr=attr("row_w"), bias_attr=attr("row_b"))
            self.out = nn.Linear(MIDDLE, CLASSES, weight_attr=attr("out_w"), bias_attr=attr("out_b"))

        def forward(self, ids):
            h = paddle.reshape(self.emb(ids), [-1, SEQ * EMB])
            return self.out(self.row(F.relu(self.col(h))))

    class Sharded(nn.Layer):
        def __init__(self):
            super().__init__()
            if parallel:
                self.emb = mpu.VocabParallelEmbedding(VOCAB, EMB, weight_attr=attr("emb"))
                self.col = mpu.ColumnParallelLinear(SEQ * EMB, HIDDEN, weight_attr=attr("col_w"), has_bias=True,
                                                    gather_output=False)
                self.row = mpu.RowParallelLinear(HIDDEN, MIDDLE, weight_attr=attr("row_w"), has_bias=True,
                                                 input_is_parallel=True)
                self.out = mpu.ColumnParallelLinear(MIDDLE, CLASSES, weight_attr=attr("out_w"), has_bias=True,
                                                    gather_output=False)
                self.loss = mpu.ParallelCrossEntropy()
            else:
                self.emb = nn.Embedding(VOCAB, EMB, weight_attr=attr("emb"))
                self.col = nn.Linear(SEQ * EMB, HIDDEN, weight_attr=attr("col_w"), bias_attr=attr("col_b"))
                self.row = nn.Linear(HIDDEN, MIDDLE, weight_attr=attr("row_w"), bias_attr=attr("row_b"))
                self.out = nn.Linear(MIDDLE, CLASSES, weight_attr=attr("out_w"), bias_attr=attr("out_b"))
                self.loss = None

        def forward(self, ids, label):
            h = paddle.reshape(self.emb(ids), [-1, SEQ * EMB])
            logits = self.out(self.row(F.relu(self.col(h))))
            if self.loss is not None:
                return self.loss(logits, label).mean()
            return F.cross_entropy(logits, label).mean()

    layer = Gathered() if model == "gathered" else Sharded()
    names = {"emb": layer.emb.weight, "col_w": layer.col.weight, "col_b": layer.col.bias,
             "row_w": layer.row.weight, "row_b": layer.row.bias, "out_w": layer.out.weight, "out_b": layer.out.bias}
    return layer, names


def train(model: str, layer, params: dict, replica: int, replicas: int = 1, wrap=lambda opt: opt, clip=None):
    """5 SGD steps: (losses, the first step's gradients, the trained parameters). ``replicas`` > 1:
    the batches of that many replicas concatenated (the dense run); ``wrap``: what becomes of the
    optimizer (fleet.distributed_optimizer); ``clip``: a key of CLIPS."""
    import paddle
    import paddle.nn.functional as F

    grad_clip = getattr(paddle.nn, CLIPS[clip])(CLIP_NORM) if clip else None
    opt = wrap(paddle.optimizer.SGD(LR, parameters=layer.parameters(), grad_clip=grad_clip))
    losses, grads = [], {}
    for step in range(STEPS):
        parts = [batch(step, r) for r in range(replica, replica + replicas)]
        ids = paddle.to_tensor(np.concatenate([p[0] for p in parts]))
        label = paddle.to_tensor(np.concatenate([p[1] for p in parts]))
        loss = F.cross_entropy(layer(ids), label).mean() if model == "gathered" else layer(ids, label)
        loss.backward()
        if step == 0:
            grads = {n: np.array(p.grad) for n, p in params.items()}
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, grads, {n: np.array(p) for n, p in params.items()}


def mp_worker(dp: int, mp: int, interpreter_too: bool, clipping: bool = True):
    """One rank: fleet.init with hybrid_configs, both models through fleet.distributed_model on the
    CPU backend (and, with ``interpreter_too``, again through paddle_ngraph.DataParallel on the
    interpreter); with ``clipping``, the sharded model again with each norm clip."""
    import paddle
    import paddle.distributed.fleet as fleet

    import paddle_ngraph
    from paddle_ngraph.ir.ops.collective import COLLECTIVE_OPS

    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"backend": "CPU"}
    strategy.hybrid_configs = {"dp_degree": dp, "mp_degree": mp, "pp_degree": 1}
    fleet.init(is_collective=True, strategy=strategy)
    rank = paddle.distributed.get_rank()
    mp_rank, replica = rank % mp, rank // mp
    runs = {}
    for backend in ["CPU"] + ["INTERPRETER"] * interpreter_too:
        for model in MODELS:
            weights = rank_weights(model, mp_rank, mp, replica)
            layer, params = build(model, weights, parallel=True)
            if backend == "CPU":
                wrapped = fleet.distributed_model(layer)
            else:
                wrapped = paddle_ngraph.DataParallel(layer, backend=backend, mp_degree=mp)
            losses, grads, trained = train(model, wrapped, params, replica, wrap=fleet.distributed_optimizer)
            engine = wrapped.engine
            compiled = [c for c in engine.compiled.values() if c is not None]
            functions = [c.capture.forward for c in compiled] + [c.backward_sync_function for c in compiled]
            collectives = sorted({(n.op_type, n.attrs["group"], bool(n.attrs["bucket"])) for f in functions
                                  for n in f.ordered_nodes() if n.op_type in COLLECTIVE_OPS})
            runs[(backend, model)] = {"losses": losses, "grads": grads, "params": trained, "steps": engine.steps,
                                      "eager_steps": engine.eager_steps, "updates": engine.updates,
                                      "collectives": collectives, "transport": engine.transport.name,
                                      "sharded": sorted(n for n, p in params.items() if p.is_distributed)}
    clipped = {}
    for clip in ("global_norm", "norm") if clipping else ():  # the sharded model (every layer kind sharded), CPU backend
        layer, params = build("sharded", rank_weights("sharded", mp_rank, mp, replica), parallel=True)
        clipped[clip] = train("sharded", fleet.distributed_model(layer), params, replica,
                              wrap=fleet.distributed_optimizer, clip=clip)[2]
    no_sync = None
    if dp > 1:  # two micro-batches a step, the first under no_sync
        weights = rank_weights("sharded", mp_rank, mp, replica)
        layer, params = build("sharded", weights, parallel=True)
        wrapped = fleet.distributed_model(layer)
        trained = train_micro_batches(wrapped, params, range(replica, replica + 1), fleet.distributed_optimizer)
        no_sync = {"params": trained, "updates": wrapped.engine.updates}
    return {"rank": rank, "runs": runs, "refusal": uncapturable_refusal(mp) if interpreter_too else None,
            "no_sync": no_sync, "clipped": clipped}


def train_micro_batches(layer, params: dict, replicas, wrap=lambda opt: opt):
    """5 SGD steps of the sharded model, each on two halves of the batch of each of ``replicas``.
    With one replica (a rank): the first half's backward under ``no_sync``, the second's averages
    the accumulated sum over the data-parallel group, as paddle.DataParallel does. With several
    (the dense run): the sum of every replica's halves' losses over the number of replicas."""
    import paddle

    opt = wrap(paddle.optimizer.SGD(LR, parameters=layer.parameters()))
    half = BATCH // 2
    for step in range(STEPS):
        parts = [batch(step, r) for r in replicas]
        halves = [[(paddle.to_tensor(ids[k:k + half]), paddle.to_tensor(label[k:k + half])) for k in (0, half)]
                  for ids, label in parts]
        if len(parts) == 1:
            with layer.no_sync():
                layer(*halves[0][0]).backward()
            layer(*halves[0][1]).backward()
        else:
            total = sum(layer(*h) for replica in halves for h in replica) / len(parts)
            total.backward()
        opt.step()
        opt.clear_grad()
    return {n: np.array(p) for n, p in params.items()}


def uncapturable_refusal(mp: int) -> str:
    """What a tensor-parallel Layer that cannot be captured does: it cannot run eagerly either
    (Paddle has no CPU kernels for the ops), so the call raises, naming the Layer and why."""
    import paddle
    from paddle.distributed.fleet import meta_parallel as mpu

    import paddle_ngraph
    from paddle_ngraph.errors import ConversionError

    class Peek(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.col = mpu.ColumnParallelLinear(4, 4, gather_output=True, has_bias=True)

        def forward(self, x):
            h = self.col(x)
            return h * float(h.numpy().max() > 0)

    model = paddle_ngraph.DataParallel(Peek(), mp_degree=mp)
    try:
        model(paddle.ones([2, 4]))
    except ConversionError as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def dense_run(model: str, replicas: int, clip=None):
    """Paddle alone, eagerly, one process: the dense Layer on the concatenated batches."""
    import paddle

    paddle.disable_static()
    layer, params = build(model, full_weights(model), parallel=False)
    return train(model, layer, params, 0, replicas, clip=clip)


def check_clipping_against_dense(results, dp: int, mp: int):
    """Clipping by the global norm and by each gradient's norm: the trained shards reassembled
    equal Paddle's dense model clipped the same way (so the sharded gradients' norms were the
    dense ones), which clipping changed (the limits bite)."""
    results = sorted(results, key=lambda r: r["rank"])
    unclipped = dense_run("sharded", dp)[2]
    for clip in ("global_norm", "norm"):
        dense = dense_run("sharded", dp, clip=clip)[2]
        assert not np.allclose(dense["col_w"], unclipped["col_w"], rtol=1e-3), clip
        for name, (_, axis) in MODELS["sharded"].items():
            for replica in range(dp):
                shards = [results[replica * mp + m]["clipped"][clip][name] for m in range(mp)]
                got = shards[0] if axis is None else np.concatenate(shards, axis=axis)
                np.testing.assert_allclose(got, dense[name], rtol=1e-5, atol=1e-6, err_msg=f"{clip} {name}")


def reassembled(results, key, what: str, name: str, axis, replica: int, mp: int):
    shards = [results[replica * mp + m]["runs"][key][what][name] for m in range(mp)]
    if axis is None:
        for other in shards[1:]:  # a whole parameter stays equal on the ranks of a model
            np.testing.assert_array_equal(other, shards[0], err_msg=f"{key} {what} {name}")
        return shards[0]
    return np.concatenate(shards, axis=axis)


def check_against_dense(results, dp: int, mp: int, backends=("CPU",)):
    results = sorted(results, key=lambda r: r["rank"])
    for model, layout in MODELS.items():
        dense_losses, dense_grads, dense_params = dense_run(model, dp)
        assert dense_losses[-1] < dense_losses[0], model  # it trains
        for backend in backends:
            key = (backend, model)
            replica_losses = [results[r * mp]["runs"][key]["losses"] for r in range(dp)]
            for rank in range(dp * mp):
                run = results[rank]["runs"][key]
                assert run["losses"] == replica_losses[rank // mp], f"{key}: rank {rank}'s loss is not its model's"
                assert run["steps"] == STEPS and run["eager_steps"] == 0, (key, run["steps"], run["eager_steps"])
                assert sorted(run["sharded"]) == sorted(n for n, (_, axis) in layout.items() if axis is not None)
            np.testing.assert_allclose(np.mean(replica_losses, axis=0), dense_losses, rtol=5e-5, err_msg=str(key))
            for name, (_, axis) in layout.items():
                for replica in range(dp):
                    # Gradients of the first step: each replica's are of its own batch, averaged over
                    # the data-parallel group, so every replica holds the dense gradient.
                    grad = reassembled(results, key, "grads", name, axis, replica, mp)
                    np.testing.assert_allclose(grad, dense_grads[name], rtol=1e-5, atol=1e-6, err_msg=f"{key} {name}")
                    param = reassembled(results, key, "params", name, axis, replica, mp)
                    np.testing.assert_allclose(param, dense_params[name], rtol=1e-5, atol=1e-5, err_msg=f"{key} {name}")
                    for other in range(1, dp):  # the ranks of a data-parallel group: bitwise the same
                        for m in range(mp):
                            assert np.array_equal(results[other * mp + m]["runs"][key]["params"][name],
                                                  results[m]["runs"][key]["params"][name]), (key, name, other, m)
            assert np.abs(dense_grads["emb"]).max() > 0  # the gradient through c_identity's VJP is there


def collectives_of(results, backend, model):
    return [r["runs"][(backend, model)]["collectives"] for r in sorted(results, key=lambda r: r["rank"])]


def test_two_ranks_mpirun_both_backends():
    """mp_degree 2 = ranks: the model's own collectives over every rank, no gradient AllReduce."""
    run = run_ranks(mp_worker, 2, 1, 2, True, timeout=400)
    check_against_dense(run.results, 1, 2, backends=("CPU", "INTERPRETER"))
    check_clipping_against_dense(run.results, 1, 2)
    for backend in ("CPU", "INTERPRETER"):
        for collectives in collectives_of(run.results, backend, "gathered"):
            # c_concat's AllGather (forward), c_identity's gradient and mp_allreduce_sum: AllReduce.
            assert collectives == [("AllGather", (), False), ("AllReduce", (), False)], collectives
        for collectives in collectives_of(run.results, backend, "sharded"):
            assert collectives == [("AllReduce", (), False)], collectives
    assert {r["runs"][("CPU", "gathered")]["transport"] for r in run.results} == {"MPI"}
    for result in run.results:
        refusal = result["refusal"]
        assert refusal.startswith("CaptureError: Layer Peek") and ".numpy()" in refusal, refusal
        assert "with mp_degree 2 it cannot run eagerly either" in refusal, refusal


@needs_ccl
def test_two_ranks_paddle_launch():
    run = run_ranks(mp_worker, 2, 1, 2, False, False, launcher="launch", timeout=400)
    check_against_dense(run.results, 1, 2)
    assert {r["runs"][("CPU", "sharded")]["transport"] for r in run.results} == {"CCL"}


def test_two_replicas_of_two_shards_on_four_ranks():
    """dp 2 x mp 2: gradients averaged over each data-parallel group ({0, 2}, {1, 3}) only."""
    run = run_ranks(mp_worker, 4, 2, 2, False, timeout=600)
    check_against_dense(run.results, 2, 2)
    check_clipping_against_dense(run.results, 2, 2)
    # no_sync: the accumulated micro-batches averaged once per step over the data-parallel group.
    dense_layer, dense_params = build("sharded", full_weights("sharded"), parallel=False)
    dense = train_micro_batches(dense_layer, dense_params, range(2))
    results = sorted(run.results, key=lambda r: r["rank"])
    assert all(r["no_sync"]["updates"] == STEPS for r in results)
    for name, (_, axis) in MODELS["sharded"].items():
        for replica in range(2):
            shards = [results[replica * 2 + m]["no_sync"]["params"][name] for m in range(2)]
            whole = shards[0] if axis is None else np.concatenate(shards, axis=axis)
            np.testing.assert_allclose(whole, dense[name], rtol=1e-5, atol=1e-5, err_msg=f"no_sync {name}")
    for rank, collectives in enumerate(collectives_of(run.results, "CPU", "sharded")):
        model, replicas = (rank - rank % 2, rank - rank % 2 + 1), (rank % 2, rank % 2 + 2)
        assert ("AllReduce", model, False) in collectives, collectives
        assert {group for _, group, bucket in collectives if bucket} == {replicas}, collectives
