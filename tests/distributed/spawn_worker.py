"""Dygraph data-parallel training started by ``paddle.distributed.spawn`` (tests/distributed/test_spawn.py).

    python spawn_worker.py OUT_DIR --order paddle_first|ngraph_first --api dp|fleet

The parent process is plain Paddle: it trains the Layer on the whole batches (the reference) and
then spawns 2 ranks, each training on its half through paddle_ngraph. ``--order`` says whether
Paddle's own process group (``init_parallel_env``, or fleet's ``fleet.init``) is made before or
after the engine's transport, since both meet at a TCPStore on the same port under spawn (which
sets no PADDLE_MASTER). After training every rank also sums a tensor with Paddle's own
``paddle.distributed.all_reduce`` beside the engine. Each rank writes OUT_DIR/rank<r>.npz; the
parent OUT_DIR/reference.npz.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # this checkout

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle import nn  # noqa: E402

GLOBAL_BATCH, STEPS, NRANKS = 8, 4, 2


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(10, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def batch(step):
    rng = np.random.RandomState(step)
    return rng.rand(GLOBAL_BATCH, 10).astype("float32"), rng.randint(0, 3, (GLOBAL_BATCH, 1)).astype("int64")


def train(model, params, rank, nranks):
    opt = paddle.optimizer.Momentum(0.1, parameters=params)
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        x, y = x[rank::nranks], y[rank::nranks]
        loss = F.cross_entropy(model(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses


def paddles_group(api):
    if api == "fleet":
        from paddle.distributed import fleet

        strategy = fleet.DistributedStrategy()
        strategy.ngraph = True
        fleet.init(is_collective=True, strategy=strategy)
    else:
        dist.init_parallel_env()


def rank_main(out_dir, order, api):
    import paddle_ngraph

    paddle.seed(7)
    net = MLP()
    if order == "paddle_first":
        paddles_group(api)
    if api == "fleet":  # fleet.distributed_model needs fleet.init before it
        from paddle.distributed import fleet

        model = fleet.distributed_model(net)
    else:
        model = paddle_ngraph.DataParallel(net)  # connects the engine's transport
    if order == "ngraph_first":
        paddles_group(api)
    rank, nranks = dist.get_rank(), dist.get_world_size()
    losses = train(model, net.parameters(), rank, nranks)
    total = paddle.to_tensor(np.array([rank + 1.0], "float32"))
    dist.all_reduce(total)
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), losses=np.array(losses), all_reduce=total.numpy(),
             **{f"param:{p.name}": p.numpy() for p in net.parameters()})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--order", choices=("paddle_first", "ngraph_first"), default="paddle_first")
    parser.add_argument("--api", choices=("dp", "fleet"), default="dp")
    args = parser.parse_args()
    if args.api == "fleet" and args.order == "ngraph_first":
        parser.error("fleet.distributed_model comes after fleet.init")
    paddle.seed(7)
    net = MLP()
    names = [p.name for p in net.parameters()]
    losses = train(net, net.parameters(), 0, 1)
    np.savez(os.path.join(args.out_dir, "reference.npz"), losses=np.array(losses),
             **{f"param:{n}": p.numpy() for n, p in zip(names, net.parameters())})
    dist.spawn(rank_main, args=(args.out_dir, args.order, args.api), nprocs=NRANKS)


if __name__ == "__main__":
    main()
