#!/usr/bin/env python
"""Fleet data-parallel training of a LeNet-style CNN on handwritten digits, in dygraph, on CPU, with paddle_ngraph.

An ordinary Paddle dygraph fleet script: `fleet.distributed_model`, `fleet.distributed_optimizer` and
an unchanged `loss.backward(); opt.step(); opt.clear_grad()` loop. The lines marked "paddle_ngraph" are
what makes the Layer's forward and backward run on the engine, with the gradients averaged across the
ranks inside backward; the optimizer stays yours and runs in Paddle. Launch with either launcher:

    python -m paddle.distributed.launch --nproc_per_node 2 examples/dygraph_fleet_mnist.py
    mpirun --allow-run-as-root --oversubscribe -np 2 python examples/dygraph_fleet_mnist.py

(the first over oneCCL, the second over MPI; --allow-run-as-root only as root, --oversubscribe when
there are more ranks than cores). Paddle's launcher shows rank 0's output and writes every rank's to
log/workerlog.<rank>; mpirun shows every rank's.

Data: scikit-learn's bundled handwritten digits laid out as 28x28 MNIST images (no download). A
DataLoader over a DistributedBatchSampler gives each rank its own disjoint shard of every epoch. Rank
0 prints its loss every --log-every steps and the final loss; at the end every rank prints what its
engine did and a checksum of its parameters, which is the same on every rank.
"""
import argparse
import hashlib

import numpy as np
import paddle
import paddle.distributed.fleet as fleet
import paddle.nn.functional as F

import paddle_ngraph  # paddle_ngraph: adds strategy.ngraph to fleet
from paddle_ngraph.zoo.data import digits_as_mnist


class LeNet(paddle.nn.Layer):
    """conv(6, 5x5, pad 2)-pool-conv(16, 5x5)-pool-120-84-10, ReLU."""

    def __init__(self):
        super().__init__()
        self.conv1 = paddle.nn.Conv2D(1, 6, 5, padding=2)
        self.conv2 = paddle.nn.Conv2D(6, 16, 5)
        self.fc1 = paddle.nn.Linear(16 * 5 * 5, 120)
        self.fc2 = paddle.nn.Linear(120, 84)
        self.fc3 = paddle.nn.Linear(84, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2, 2)
        h = paddle.flatten(h, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(h)))))


class Arrays(paddle.io.Dataset):
    """Samples i of NumPy arrays. (Paddle 3.3.1's TensorDataset, over Paddle tensors, crashes in
    DataLoader worker processes: this one also serves num_workers > 0.)"""

    def __init__(self, *arrays):
        self.arrays = arrays

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])


def digits_loader(batch_size: int):
    """(sampler, loader) of this rank's shard of the digits, as [batch, 1, 28, 28] images and [batch, 1] labels.

    The sampler reads the ranks from Paddle's launcher variables (under mpirun, `import paddle_ngraph`
    sets them). drop_last: every step has the same shapes (captured once), every rank the same step count.
    """
    x, y = digits_as_mnist()
    dataset = Arrays(x.reshape(-1, 1, 28, 28), y)
    sampler = paddle.io.DistributedBatchSampler(dataset, batch_size, shuffle=True, drop_last=True)
    return sampler, paddle.io.DataLoader(dataset, batch_sampler=sampler, num_workers=0)


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
    # Fleet logs at INFO "distributed strategy initialized" for every strategy made, and a line per
    # communication group in fleet.init, which sets its logger to its log_level argument (default INFO).
    fleet.set_log_level("WARNING")
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True  # paddle_ngraph: the Layer runs on the engine, gradients averaged there
    fleet.init(is_collective=True, strategy=strategy, log_level="WARNING")
    rank, nranks = fleet.worker_index(), fleet.worker_num()
    paddle.seed(args.seed)  # the initialization; distributed_model then gives every rank rank 0's parameters

    model = fleet.distributed_model(LeNet())
    opt = fleet.distributed_optimizer(paddle.optimizer.Adam(learning_rate=args.lr, parameters=model.parameters()))
    sampler, loader = digits_loader(args.batch_size)
    if len(sampler) == 0:
        raise SystemExit(f"--batch-size {args.batch_size}: larger than a rank's shard ({len(sampler.dataset)} digits "
                         f"over {nranks} ranks)")
    if rank == 0:
        print(f"[rank 0] LeNet on the digits, {nranks} ranks x batch {args.batch_size}, {len(sampler)} steps per "
              f"epoch, {args.steps} steps, Adam lr {args.lr}", flush=True)

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
        print(f"[rank 0] final loss {loss_value:.4f} (step {step}, rank 0's shard)", flush=True)
    engine, = paddle_ngraph.engines()  # one per wrapped Layer
    print(f"[rank {rank}] engine ({engine.transport.name} transport): {engine.steps} forward calls on the engine, "
          f"{engine.updates} gradient synchronizations, {engine.eager_steps} eager calls", flush=True)
    print(f"[rank {rank}] parameter checksum {parameter_checksum(model)}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100, about 7 epochs on 2 ranks)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank (default 64)")
    p.add_argument("--lr", type=float, default=5e-3, help="Adam's learning rate (default 0.005)")
    p.add_argument("--seed", type=int, default=1, help="parameter initialization (default 1)")
    p.add_argument("--log-every", type=int, default=10, metavar="N", help="rank 0 prints its loss every N steps")
    args = p.parse_args()
    if args.steps < 1 or args.batch_size < 1 or args.log_every < 1:
        p.error("--steps, --batch-size and --log-every must be at least 1")
    train(args)


if __name__ == "__main__":
    main()
