"""One rank of dygraph data-parallel training on the engine (tests/distributed/test_dygraph_dp.py).

    python dygraph_worker.py OUT_DIR --api dp|fleet --opt sgd|momentum --layer mlp|numpy|branch|routed|[eager_]sparse_embedding
                             [--no-sync] [--checkpoint] [--then OUT_DIR ...]
    python dygraph_worker.py OUT_DIR --scenario eager_accumulation

Every rank draws the same global batches and trains on its contiguous shard; rank r seeds its
model with r, so equal results also show that rank 0's parameters were broadcast. Rank 0 then
trains the same Layer in one plain-Paddle process on the whole batches (reference). Each rank
writes OUT_DIR/rank<r>.npz (its parameters, losses; rank 0 also the reference's) and
OUT_DIR/rank<r>.json (what the engines report: those this run made).

Several runs in one job: argument lists joined by ``--then`` (run_sequence.py), each with its own
OUT_DIR, trained one after the other in the same processes; before each, every rank prints
``RUN_MARKER`` and the run's OUT_DIR on stderr, so that a test can tell each run's messages apart.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # this checkout

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle import nn  # noqa: E402

import paddle_ngraph  # noqa: E402

GLOBAL_BATCH, STEPS = 12, 6
RUN_MARKER = "=== dygraph_worker run:"


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class NumpyInForward(MLP):
    """Cannot be captured: .numpy() on a tensor in forward."""

    def forward(self, x):
        scale = float(np.abs(x.numpy()).max() > 100) + 1.0
        return self.fc2(F.relu(self.fc1(x))) * scale


class BranchOnValue(MLP):
    """Python control flow on a tensor's value: AST turns it into pd_op.if, which stays eager."""

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if h.mean() > 100.0:
            h = h * 0.5
        return self.fc2(h)


class RoutedRows(MLP):
    """Eager (a branch on a tensor's value): the rows whose first feature is above 1 also go through
    fc_pos, so a rank whose shard has no such row leaves fc_pos without a gradient while another
    rank has one; ``unused`` never gets a gradient on any rank."""

    def __init__(self):
        super().__init__()
        self.fc_pos, self.unused = nn.Linear(32, 8), nn.Linear(3, 3)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        out = self.fc2(h)
        rows = paddle.nonzero(x[:, 0] > 1.0).flatten()
        if rows.numel() > 0:
            out = out + paddle.scatter(paddle.zeros_like(out), rows, self.fc_pos(paddle.gather(h, rows)))
        return out


class SparseEmbedding(nn.Layer):
    """An Embedding(sparse=True) over ids made from the input (0..9 of 40 rows): plain Paddle's
    gradient of the table is selected rows, the engine's captured backward computes it dense."""

    def __init__(self):
        super().__init__()
        self.embedding, self.fc2 = nn.Embedding(40, 8, sparse=True), nn.Linear(32, 8)

    def forward(self, x):
        ids = paddle.cast(paddle.clip(paddle.abs(x[:, :4]) * 3.0, 0.0, 9.0), "int64")
        return self.fc2(paddle.flatten(self.embedding(ids), 1))


class EagerSparseEmbedding(SparseEmbedding):
    """Cannot be captured (.numpy() in forward): runs eagerly, and Paddle's own backward gives the
    table a selected-rows gradient, holding different rows on each rank."""

    def forward(self, x):
        scale = float(np.abs(x.numpy()).max() > 100) + 1.0
        return super().forward(x) * scale


LAYERS = {"mlp": MLP, "numpy": NumpyInForward, "branch": BranchOnValue, "routed": RoutedRows,
          "sparse_embedding": SparseEmbedding, "eager_sparse_embedding": EagerSparseEmbedding}


def make_optimizer(kind, parameters):
    if kind == "sgd":
        return paddle.optimizer.SGD(0.1, parameters=parameters)
    return paddle.optimizer.Momentum(0.05, momentum=0.9, parameters=parameters,
                                     grad_clip=nn.ClipGradByGlobalNorm(0.5), weight_decay=1e-3)


def batches(micro: int):
    rng = np.random.default_rng(1234)
    return [[(rng.standard_normal((GLOBAL_BATCH, 16)).astype("float32"),
              rng.standard_normal((GLOBAL_BATCH, 8)).astype("float32")) for _ in range(micro)] for _ in range(STEPS)]


def train(model, opt, data, lo, hi, no_sync_ctx=None, checkpoint=None):
    losses = []
    for step, micro_batches in enumerate(data):
        for k, (x, y) in enumerate(micro_batches):
            x, y = paddle.to_tensor(x[lo:hi]), paddle.to_tensor(y[lo:hi])
            local = no_sync_ctx is not None and k < len(micro_batches) - 1
            if local:
                with no_sync_ctx():
                    loss = F.mse_loss(model(x), y)
                    loss.backward()
            else:
                loss = F.mse_loss(model(x), y)
                loss.backward()
            losses.append(float(loss))
        opt.step()
        opt.clear_grad()
        if checkpoint is not None and step == checkpoint[0]:
            paddle.save(model.state_dict(), checkpoint[1] + ".pdparams")
            paddle.save(opt.state_dict(), checkpoint[1] + ".pdopt")
    return losses


def params_of(layer):
    return {k: v.numpy() for k, v in layer.state_dict().items()}


class TwoWeights(nn.Layer):
    """Eager (``.item()``): the rank chooses which weight its forward reads."""

    def __init__(self):
        super().__init__()
        self.w1 = self.create_parameter([2, 1], default_initializer=nn.initializer.Constant(1.0))
        self.w2 = self.create_parameter([2, 1], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x, use_w1):
        return paddle.matmul(x, self.w1 if use_w1.item() else self.w2)


class EmbeddingOrNot(nn.Layer):
    """Eager (``.item()``): the rank chooses whether its forward reaches the sparse embedding."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4, sparse=True)
        self.other = self.create_parameter([4])

    def forward(self, ids, use_emb):
        return self.emb(ids).sum() if use_emb.item() else (self.other * 1.0).sum()


def eager_accumulation(out_dir: str, rank: int):
    """Gradients of eager backward passes accumulated between clears, where one rank's backward does
    not reach a parameter some steps: w2.grad after each backward, and what it must be (the average
    over the ranks of each step's gradient, summed since the last clear). Then a sparse embedding
    that one rank reaches and the other not, alternately: it trains (no dense zeros in its slot)."""
    model = paddle_ngraph.DataParallel(TwoWeights())
    x = paddle.to_tensor(np.ones((1, 2), np.float32))
    got, expected, total = [], [], 0.0
    # (rank 1 reads w1 instead of w2, clear after this step); rank 0 always reads w2
    for rank1_uses_w1, clear in [(True, False), (False, True), (True, False), (False, False), (True, True),
                                 (True, False), (False, False)]:
        model(x, paddle.to_tensor(rank1_uses_w1 and rank == 1)).sum().backward()
        total += (1.0 + (0.0 if rank1_uses_w1 else 1.0)) / 2
        got.append(float(model._layers.w2.grad.numpy()[0, 0]))
        expected.append(total)
        if clear:
            model.clear_gradients()
            total = 0.0
    paddle.seed(0)
    sparse = paddle_ngraph.DataParallel(EmbeddingOrNot())
    before = sparse._layers.emb.weight.numpy()
    opt = paddle.optimizer.SGD(0.1, parameters=sparse.parameters())
    ids = paddle.to_tensor(np.array([[1, 2]], np.int64))
    for use in ([1, 0], [0, 1]):
        sparse(ids, paddle.to_tensor(use[rank])).backward()
        opt.step()
        opt.clear_grad()
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), got=np.array(got), expected=np.array(expected),
             table_change=sparse._layers.emb.weight.numpy() - before)


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--api", default="dp")
    parser.add_argument("--opt", default="sgd")
    parser.add_argument("--layer", default="mlp")
    parser.add_argument("--no-sync", action="store_true")
    parser.add_argument("--checkpoint", action="store_true")
    parser.add_argument("--scenario", choices=["eager_accumulation"], help="instead of training: eager_accumulation()")
    args = parser.parse_args(argv)
    if args.scenario:
        eager_accumulation(args.out, paddle.distributed.get_rank())
        return 0
    before = {e.id for e in paddle_ngraph.engines()}  # earlier runs' engines, in a job of several

    if args.api == "fleet":
        from paddle.distributed import fleet

        strategy = fleet.DistributedStrategy()
        strategy.ngraph = True
        strategy.ngraph_configs = {"bucket_mb": 0.001}  # several buckets on a small model
        fleet.init(is_collective=True, strategy=strategy)
    rank, size = paddle.distributed.get_rank(), paddle.distributed.get_world_size()
    paddle.seed(rank)
    layer = LAYERS[args.layer]()
    if args.api == "fleet":
        from paddle.distributed import fleet

        model = fleet.distributed_model(layer)
        opt = fleet.distributed_optimizer(make_optimizer(args.opt, model.parameters()))
    else:
        model = paddle_ngraph.DataParallel(layer, bucket_mb=0.001)
        opt = make_optimizer(args.opt, model.parameters())
    initial = params_of(layer)  # rank 0's, after the broadcast
    data = batches(2 if args.no_sync else 1)
    shard = GLOBAL_BATCH // size
    lo, hi = rank * shard, (rank + 1) * shard
    checkpoint = (2, os.path.join(args.out, f"ckpt{rank}")) if args.checkpoint else None
    losses = train(model, opt, data, lo, hi, model.no_sync if args.no_sync else None, checkpoint)
    result = {f"param:{k}": v for k, v in params_of(layer).items()}
    result["losses"] = np.array(losses)
    report = {"engines": [{"type": type(e).__name__, "steps": e.steps, "updates": e.updates,
                           "eager_steps": getattr(e, "eager_steps", 0)} for e in paddle_ngraph.engines()
                           if e.id not in before]}
    if checkpoint is not None:
        # Resume from the checkpoint in a fresh Layer and optimizer: the same parameters at the end.
        paddle.seed(100 + rank)
        resumed_layer = LAYERS[args.layer]()
        resumed = paddle_ngraph.DataParallel(resumed_layer, bucket_mb=0.001)
        resumed.set_state_dict(paddle.load(checkpoint[1] + ".pdparams"))
        opt2 = make_optimizer(args.opt, resumed.parameters())
        opt2.set_state_dict(paddle.load(checkpoint[1] + ".pdopt"))
        train(resumed, opt2, data[3:], lo, hi, resumed.no_sync if args.no_sync else None)
        result.update({f"resumed:{k}": v for k, v in params_of(resumed_layer).items()})
    if rank == 0:
        reference = LAYERS[args.layer]()
        reference.set_state_dict({k: paddle.to_tensor(v) for k, v in initial.items()})
        ref_opt = make_optimizer(args.opt, reference.parameters())
        ref_losses = train(reference, ref_opt, data, 0, GLOBAL_BATCH)
        result.update({f"reference:{k}": v for k, v in params_of(reference).items()})
        result["reference_losses"] = np.array(ref_losses)
    np.savez(os.path.join(args.out, f"rank{rank}.npz"), **result)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    print(f"[rank {rank}] done", flush=True)
    return 0


if __name__ == "__main__":
    from run_sequence import split_runs

    for run in split_runs(sys.argv[1:]):
        print(f"{RUN_MARKER} {run[0]}", file=sys.stderr, flush=True)
        main(run)
    sys.exit(0)
