#!/usr/bin/env python
"""Dygraph data-parallel training of an MLP on handwritten digits with paddle_ngraph.DataParallel, without fleet.

`paddle_ngraph.DataParallel` is the drop-in for `paddle.DataParallel`: the script is a plain dygraph
training loop (`loss.backward(); opt.step(); opt.clear_grad()`) whose wrapped Layer runs its forward
and backward on the engine, the gradients averaged across the ranks inside backward. The optimizer
(here Momentum with gradient clipping and weight decay) is yours and runs in Paddle. There is no
`init_parallel_env` to call: the wrapper finds the ranks and the transport from the launcher, either

    python -m paddle.distributed.launch --nproc_per_node 2 examples/dygraph_data_parallel.py
    mpirun --allow-run-as-root --oversubscribe -np 2 python examples/dygraph_data_parallel.py

(the first over oneCCL, the second over MPI; --allow-run-as-root only as root, --oversubscribe when
there are more ranks than cores), or in one process (`python examples/dygraph_data_parallel.py`),
where the engine is an accelerator. Paddle's launcher shows rank 0's output and writes every rank's
to log/workerlog.<rank>; mpirun shows every rank's.

Data: scikit-learn's bundled handwritten digits as 784-pixel vectors (no download); the last
--held-out samples are kept for evaluation. Each rank trains on its own shard of every epoch
(DistributedBatchSampler). Rank 0 prints its loss every --log-every steps, the final loss and the
held-out accuracy (a forward in eval mode under no_grad, also on the engine); at the end every rank
prints what its engine did and a checksum of its parameters, which is the same on every rank.
"""
import argparse
import hashlib

import numpy as np
import paddle
import paddle.nn.functional as F

import paddle_ngraph
from paddle_ngraph.zoo.data import digits_as_mnist


class MLP(paddle.nn.Layer):
    """784-256-10, ReLU."""

    def __init__(self):
        super().__init__()
        self.hidden = paddle.nn.Linear(784, 256)
        self.out = paddle.nn.Linear(256, 10)

    def forward(self, x):
        return self.out(F.relu(self.hidden(x)))


class Arrays(paddle.io.Dataset):
    """Samples i of NumPy arrays. (Paddle 3.3.1's TensorDataset, over Paddle tensors, crashes in
    DataLoader worker processes: this one also serves num_workers > 0.)"""

    def __init__(self, *arrays):
        self.arrays = arrays

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])


def parameter_checksum(layer) -> str:
    """SHA-256 of the Layer's trainable parameters, in order: equal across ranks iff their weights are
    bitwise equal. Batch norm's running mean and variance are parameters too, but not trainable, and
    each rank's follow its own batches."""
    digest = hashlib.sha256()
    for name, param in layer.named_parameters():
        if param.stop_gradient:
            continue
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(param.numpy()).tobytes())
    return digest.hexdigest()[:16]


def train(args):
    # Under mpirun too: `import paddle_ngraph` has set Paddle's rank variables from Open MPI's.
    rank, nranks = paddle.distributed.get_rank(), paddle.distributed.get_world_size()
    paddle.seed(args.seed)  # the initialization; DataParallel then gives every rank rank 0's parameters

    model = paddle_ngraph.DataParallel(MLP())  # keyword arguments: the ngraph_configs keys, e.g. bucket_mb=8
    opt = paddle.optimizer.Momentum(args.lr, momentum=0.9, parameters=model.parameters(),
                                    grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0), weight_decay=1e-4)

    x, y = digits_as_mnist()
    if not 0 < args.held_out < len(x):
        raise SystemExit(f"--held-out {args.held_out}: must be between 1 and {len(x) - 1} (there are {len(x)} digits)")
    train_set = Arrays(x[:-args.held_out], y[:-args.held_out])
    # drop_last: every step has the same shapes (captured once), every rank the same step count.
    sampler = paddle.io.DistributedBatchSampler(train_set, args.batch_size, shuffle=True, drop_last=True)
    loader = paddle.io.DataLoader(train_set, batch_sampler=sampler, num_workers=0)
    if len(sampler) == 0:
        raise SystemExit(f"--batch-size {args.batch_size}: larger than a rank's shard ({len(train_set)} samples "
                         f"over {nranks} ranks)")
    if rank == 0:
        print(f"[rank 0] MLP on {len(train_set)} digits ({args.held_out} held out), {nranks} ranks x batch "
              f"{args.batch_size}, {len(sampler)} steps per epoch, {args.steps} steps, Momentum lr {args.lr}",
              flush=True)

    model.train()
    step, epoch, loss_value = 0, 0, None
    while step < args.steps:
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
            opt.clear_grad()
            step += 1
            loss_value = float(loss)
            if rank == 0 and (step == 1 or step % args.log_every == 0 or step == args.steps):
                print(f"[rank 0] step {step:4d}/{args.steps}  loss {loss_value:.4f}", flush=True)
            if step == args.steps:
                break
        epoch += 1

    if rank == 0:
        model.eval()
        with paddle.no_grad():
            logits = model(paddle.to_tensor(x[-args.held_out:]))
        correct = int(np.sum(np.argmax(logits.numpy(), axis=1) == y[-args.held_out:, 0]))
        print(f"[rank 0] final loss {loss_value:.4f} (step {step}, rank 0's shard), held-out accuracy "
              f"{100 * correct / args.held_out:.1f}% ({correct}/{args.held_out})", flush=True)
    engine = model.engine  # also listed by paddle_ngraph.engines()
    print(f"[rank {rank}] engine ({engine.transport.name} transport): {engine.steps} forward calls on the engine, "
          f"{engine.updates} gradient synchronizations, {engine.eager_steps} eager calls", flush=True)
    print(f"[rank {rank}] parameter checksum {parameter_checksum(model)}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank (default 64)")
    p.add_argument("--lr", type=float, default=0.05, help="Momentum's learning rate (default 0.05)")
    p.add_argument("--seed", type=int, default=1, help="parameter initialization (default 1)")
    p.add_argument("--held-out", type=int, default=297, metavar="N",
                   help="the last N samples are the test set (default 297)")
    p.add_argument("--log-every", type=int, default=10, metavar="N", help="rank 0 prints its loss every N steps")
    args = p.parse_args()
    if args.steps < 1 or args.batch_size < 1 or args.log_every < 1:
        p.error("--steps, --batch-size and --log-every must be at least 1")
    train(args)


if __name__ == "__main__":
    main()
