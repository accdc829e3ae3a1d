#!/usr/bin/env python
"""Fleet data-parallel training of a LeNet-style CNN on handwritten digits, on CPU, with paddle_ngraph.

An ordinary Paddle fleet collective training script: the two lines marked "paddle_ngraph" are what
makes it run on CPU (Paddle 3.3.1's own static collective training does not); the data helper comes
from paddle_ngraph.zoo only to spare a download. What `make demo` runs (see the Makefile):

    python -m paddle.distributed.launch --nproc_per_node 2 examples/fleet_mnist_demo.py

Data: scikit-learn's bundled handwritten digits laid out as 28x28 MNIST images; the last --held-out
samples are kept for evaluation, the rest is the training set. A DataLoader over a
DistributedBatchSampler gives each rank its own disjoint shard of every epoch. After each epoch rank 0
measures the accuracy on the held-out samples. At the end rank 0 times Paddle's own executor on the
same model, optimizer and per-rank batch (a fresh program, not transpiled, in its one process) and
prints one summary: the accuracy reached and both training throughputs.
"""
import argparse
import json
import os
import time
import warnings

import numpy as np
import paddle
import paddle.distributed.fleet as fleet
import paddle.nn.functional as F

import paddle_ngraph  # noqa: F401  # paddle_ngraph: adds strategy.ngraph to fleet
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


class Digits(paddle.io.Dataset):
    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.images)


def load_data(held_out: int):
    """(train, test) as (images [N, 1, 28, 28], labels [N, 1]); the test set is the last samples."""
    x, y = digits_as_mnist()
    x = x.reshape(-1, 1, 28, 28)
    return (x[:-held_out], y[:-held_out]), (x[-held_out:], y[-held_out:])


def build():
    """The training program in the current program guard: returns (loss, eval program, its logits).

    The evaluation program is a clone of the forward pass, taken before the loss (so it feeds only
    x) and before minimize (so it holds no backward or update). It reads the parameters by name
    from the scope, where the engine updates them in place: it always evaluates the current weights.
    """
    x = paddle.static.data("x", [None, 1, 28, 28], "float32")
    logits = LeNet()(x)
    mapping = paddle.pir.IrMapping()
    eval_program = paddle.static.default_main_program().clone(mapping)
    eval_logits = mapping.look_up(logits)
    y = paddle.static.data("y", [None, 1], "int64")
    loss = paddle.mean(F.cross_entropy(logits, y))
    return loss, eval_program, eval_logits


def evaluate(exe, eval_program, eval_logits, test) -> int:
    """How many held-out samples the current weights classify correctly."""
    logits, = exe.run(eval_program, feed={"x": test[0]}, fetch_list=[eval_logits])
    return int(np.sum(np.argmax(logits, axis=1) == test[1][:, 0]))


def loader(data, batch_size: int, nranks: int, rank: int):
    # drop_last: every step has the same shape (one compilation), every rank the same step count.
    sampler = paddle.io.DistributedBatchSampler(Digits(*data), batch_size, num_replicas=nranks, rank=rank,
                                                shuffle=True, drop_last=True)
    return sampler, paddle.io.DataLoader(Digits(*data), batch_sampler=sampler, num_workers=0, return_list=True)


def paddle_executor_samples_per_s(args, train) -> float:
    """Paddle's own executor on the same model, optimizer and per-rank batch: a fresh program,
    not transpiled, in this process, fed by the same kind of DataLoader (one rank's view)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup), warnings.catch_warnings():
        # Paddle's PIR backward warns "Tensor do not have 'place' interface" on every minimize
        # (autograd/ir_backward.py reads Value.place); fleet's minimize above is quieted by paddle_ngraph.
        warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface", category=UserWarning)
        loss, _, _ = build()
        paddle.optimizer.Adam(learning_rate=args.lr).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    _, data = loader(train, args.batch_size, 1, 0)
    warmup, done, seconds = args.warmup, 0, 0.0
    with paddle.static.scope_guard(paddle.static.Scope()):
        exe.run(startup)
        while done < warmup + args.compare_steps:
            tick = time.perf_counter()
            for xb, yb in data:
                exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
                done += 1
                now = time.perf_counter()
                if done > warmup:
                    seconds += now - tick
                tick = now
                if done == warmup + args.compare_steps:
                    break
    return args.compare_steps * args.batch_size / seconds


def train(args):
    paddle.enable_static()
    # Paddle's fleet logs "distributed strategy initialized" at INFO for every strategy made.
    fleet.set_log_level("WARNING")
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True  # paddle_ngraph: run data parallelism on CPU
    fleet.init(is_collective=True, strategy=strategy)
    rank, nranks = fleet.worker_index(), fleet.worker_num()
    paddle.seed(args.seed)

    loss, eval_program, eval_logits = build()
    optimizer = fleet.distributed_optimizer(paddle.optimizer.Adam(learning_rate=args.lr))
    optimizer.minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    main = paddle.static.default_main_program()

    train_data, test_data = load_data(args.held_out)
    sampler, data = loader(train_data, args.batch_size, nranks, rank)
    if args.epochs * len(sampler) <= args.warmup:
        raise SystemExit(f"{args.epochs} epoch(s) of {len(sampler)} steps leave no step to time after "
                         f"--warmup {args.warmup}")
    if rank == 0:
        print(f"[rank 0] LeNet on {len(train_data[0])} digits ({len(test_data[0])} held out), {nranks} ranks x "
              f"batch {args.batch_size}, {len(sampler)} steps per epoch, Adam lr {args.lr}", flush=True)
    trained_on = []
    step, timed_steps, timed_seconds = 0, 0, 0.0
    for epoch in range(1, args.epochs + 1):
        losses = []
        tick = time.perf_counter()
        for xb, yb in data:
            loss_value, = exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
            step += 1
            now = time.perf_counter()
            if step > args.warmup:  # the first steps specialize and compile the engine
                timed_steps += 1
                timed_seconds += now - tick
            tick = now
            losses.append(float(loss_value))
        if args.record_indices:
            # The sampler shuffles by its epoch counter, which iterating advanced: replay that epoch.
            sampler.set_epoch(sampler.epoch - 1)
            trained_on.append([i for batch in sampler for i in batch])
        if rank == 0:
            correct = evaluate(exe, eval_program, eval_logits, test_data)
            print(f"[rank 0] epoch {epoch:2d}/{args.epochs}  train loss {np.mean(losses):.4f} (rank 0's shard)  "
                  f"held-out accuracy {100 * correct / len(test_data[0]):.1f}%", flush=True)
    if args.record_indices:
        os.makedirs(args.record_indices, exist_ok=True)
        with open(os.path.join(args.record_indices, f"rank{rank}.json"), "w") as f:
            json.dump(trained_on, f)
    if rank == 0:
        # Rank 0's step rate is the job's: every step ends with the AllReduce of all ranks' gradients.
        engine = timed_steps * args.batch_size * nranks / timed_seconds
        rows = [(f"paddle_ngraph engine, {nranks} ranks x batch {args.batch_size}",
                 f"{engine:.0f} samples/s ({engine / nranks:.0f} per rank)")]
        if args.compare_steps:
            rows.append((f"Paddle's executor, not transpiled, 1 process, same model, batch {args.batch_size}",
                         f"{paddle_executor_samples_per_s(args, train_data):.0f} samples/s"))
        width = max(len(label) for label, _ in rows)
        lines = [f"summary: held-out accuracy {100 * correct / len(test_data[0]):.1f}% "
                 f"({correct}/{len(test_data[0])}) after {args.epochs} epochs; training throughput:"]
        lines += [f"  {label + ':':{width + 1}} {value}" for label, value in rows]
        lines.append(f"  (steps after the first {args.warmup}: data loading included, evaluation excluded; "
                     f"{len(os.sched_getaffinity(0))} cores here)")
        print("\n".join(f"[rank 0] {line}" for line in lines), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=15, help="default 15")
    p.add_argument("--batch-size", type=int, default=64, help="per rank (default 64)")
    p.add_argument("--lr", type=float, default=5e-3, help="Adam's learning rate (default 0.005)")
    p.add_argument("--seed", type=int, default=1, help="parameter initialization (default 1)")
    p.add_argument("--held-out", type=int, default=297, metavar="N",
                   help="the last N samples are the test set (default 297: 1500 remain, an even split)")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the throughput (default 3)")
    p.add_argument("--compare-steps", type=int, default=100, metavar="N",
                   help="steps of Paddle's own executor timed for the comparison, 0: none (default 100)")
    p.add_argument("--record-indices", metavar="DIR",
                   help="debug: write the sample indices each rank trained on to DIR/rank<r>.json")
    train(p.parse_args())


if __name__ == "__main__":
    main()
