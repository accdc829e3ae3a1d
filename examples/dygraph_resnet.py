#!/usr/bin/env python
"""Dygraph data-parallel training of paddle.vision's ResNet-18 on CPU with paddle_ngraph.DataParallel.

A plain dygraph training loop over an unmodified `paddle.vision.models.resnet18`: the whole network,
batch norm included, runs its forward and backward on the engine, with the gradients averaged across
the ranks inside backward, bucket by bucket while the rest of backward runs; the optimizer (Momentum
with weight decay) is yours and runs in Paddle. Launch with either launcher:

    python -m paddle.distributed.launch --nproc_per_node 2 examples/dygraph_resnet.py
    mpirun --allow-run-as-root --oversubscribe -np 2 python examples/dygraph_resnet.py

(the first over oneCCL, the second over MPI; --allow-run-as-root only as root, --oversubscribe when
there are more ranks than cores), or in one process. Paddle's launcher shows rank 0's output and
writes every rank's to log/workerlog.<rank>; mpirun shows every rank's.

Data: a synthetic 10-class set of --image-size square RGB images (a fixed random pattern per class plus
noise), generated identically on every rank; a DistributedBatchSampler gives each rank its own
disjoint shard of every epoch. Batch-norm statistics are per rank, as with paddle.DataParallel without
SyncBatchNorm: the running means and variances differ between ranks, the trained weights do not. Rank
0 prints its loss and step time every --log-every steps (the first step captures and compiles the
network) and the final loss; at the end every rank prints what its engine did and a checksum of its
trainable parameters (batch-norm statistics excluded), which is the same on every rank.
"""
import argparse
import hashlib
import time

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.vision.models import resnet18

import paddle_ngraph


class Arrays(paddle.io.Dataset):
    """Samples i of NumPy arrays. (Paddle 3.3.1's TensorDataset, over Paddle tensors, crashes in
    DataLoader worker processes: this one also serves num_workers > 0.)"""

    def __init__(self, *arrays):
        self.arrays = arrays

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])


def synthetic_images(n: int, size: int, seed: int = 0):
    """(images [n, 3, size, size], labels [n, 1]): a class's fixed random pattern plus noise."""
    rng = np.random.default_rng(seed)
    patterns = rng.standard_normal((10, 3, size, size)).astype(np.float32)
    labels = rng.integers(0, 10, size=n)
    images = patterns[labels] + 1.5 * rng.standard_normal((n, 3, size, size)).astype(np.float32)
    return images, labels.astype(np.int64).reshape(-1, 1)


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
    paddle.seed(args.seed)  # the initialization; DataParallel then gives every rank rank 0's parameters and buffers

    model = paddle_ngraph.DataParallel(resnet18(num_classes=10))
    opt = paddle.optimizer.Momentum(args.lr, momentum=0.9, parameters=model.parameters(), weight_decay=5e-4)

    images, labels = synthetic_images(args.samples, args.image_size)
    dataset = Arrays(images, labels)
    # drop_last: every step has the same shapes (captured once), every rank the same step count.
    sampler = paddle.io.DistributedBatchSampler(dataset, args.batch_size, shuffle=True, drop_last=True)
    loader = paddle.io.DataLoader(dataset, batch_sampler=sampler, num_workers=0)
    if len(sampler) == 0:
        raise SystemExit(f"--batch-size {args.batch_size}: larger than a rank's shard ({args.samples} samples "
                         f"over {nranks} ranks); raise --samples")
    if rank == 0:
        print(f"[rank 0] ResNet-18 on {args.samples} synthetic {args.image_size}x{args.image_size} images, {nranks} "
              f"ranks x batch {args.batch_size}, {len(sampler)} steps per epoch, {args.steps} steps, Momentum lr "
              f"{args.lr}", flush=True)

    model.train()
    step, epoch, loss_value = 0, 0, None
    tick = time.perf_counter()
    while step < args.steps:
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            step += 1
            loss_value = float(loss)
            if rank == 0 and (step == 1 or step % args.log_every == 0 or step == args.steps):
                now = time.perf_counter()
                print(f"[rank 0] step {step:4d}/{args.steps}  loss {loss_value:.4f}  {now - tick:.2f} s", flush=True)
                tick = now
            if step == args.steps:
                break
        epoch += 1

    if rank == 0:
        print(f"[rank 0] final loss {loss_value:.4f} (step {step}, rank 0's shard)", flush=True)
    engine = model.engine  # also listed by paddle_ngraph.engines()
    print(f"[rank {rank}] engine ({engine.transport.name} transport): {engine.steps} forward calls on the engine, "
          f"{engine.updates} gradient synchronizations, {engine.eager_steps} eager calls", flush=True)
    print(f"[rank {rank}] parameter checksum {parameter_checksum(model)}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    p.add_argument("--batch-size", type=int, default=16, help="per rank (default 16)")
    p.add_argument("--image-size", type=int, default=32, help="height and width of the images (default 32)")
    p.add_argument("--samples", type=int, default=1024, help="size of the synthetic data set (default 1024)")
    p.add_argument("--lr", type=float, default=0.02, help="Momentum's learning rate (default 0.02)")
    p.add_argument("--seed", type=int, default=1, help="parameter initialization (default 1)")
    p.add_argument("--log-every", type=int, default=5, metavar="N", help="rank 0 prints its loss every N steps")
    args = p.parse_args()
    if min(args.steps, args.batch_size, args.image_size, args.samples, args.log_every) < 1:
        p.error("--steps, --batch-size, --image-size, --samples and --log-every must be at least 1")
    train(args)


if __name__ == "__main__":
    main()
