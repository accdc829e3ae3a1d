"""Fleet static-graph data-parallel training of an MNIST MLP (784-600-10) on CPU.

A standard fleet collective training script; the two lines marked "paddle_ngraph" are the
only difference from a plain one. Launch with either launcher:

    mpirun -np 2 python examples/fleet_mnist_mlp.py --steps 100
    python -m paddle.distributed.launch --nproc_per_node 2 examples/fleet_mnist_mlp.py --steps 100

Data: scikit-learn's bundled handwritten digits laid out as 28x28 MNIST images (no download).
Each rank trains on its own shard of every global batch (global batch = ranks x --batch-size).
"""
import argparse
import os
import time

import numpy as np
import paddle
import paddle.distributed.fleet as fleet
import paddle.nn.functional as F

import paddle_ngraph  # noqa: F401  # paddle_ngraph: adds strategy.ngraph to fleet


def load_data():
    """The 1797 8x8 digits, each pixel scaled 3x to 24x24 and centred in 28x28, values in [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    big = np.kron(digits.images.astype(np.float32) / 16.0, np.ones((1, 3, 3), dtype=np.float32))
    images = np.zeros((len(big), 28, 28), dtype=np.float32)
    images[:, 2:26, 2:26] = big
    return images.reshape(-1, 784), digits.target.astype(np.int64).reshape(-1, 1)


def shard(x, y, batch, rank, nranks, step):
    """This rank's part of global batch ``step`` (nranks x batch samples), cycling over the data."""
    start = (step * batch * nranks) % (len(x) - batch * nranks + 1) + rank * batch
    return x[start:start + batch], y[start:start + batch]


def build_model():
    x = paddle.static.data("x", [None, 784], "float32")
    y = paddle.static.data("y", [None, 1], "int64")
    hidden = F.relu(paddle.nn.Linear(784, 600)(x))
    logits = paddle.nn.Linear(600, 10)(hidden)
    return paddle.mean(F.cross_entropy(logits, y))


def train(args):
    fleet.init(is_collective=True)
    rank, nranks = fleet.worker_index(), fleet.worker_num()
    paddle.seed(args.seed)
    main = paddle.static.default_main_program()
    loss = build_model()

    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True  # paddle_ngraph: run data parallelism on CPU
    opt = fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=args.lr), strategy)
    opt.minimize(loss)

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    x, y = load_data()
    timed_from = min(args.warmup, args.steps - 1)  # the first steps specialize and compile
    for step in range(args.steps):
        if step == timed_from:
            start = time.perf_counter()
        xb, yb = shard(x, y, args.batch_size, rank, nranks, step)
        loss_value, = exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"[rank {rank}] step {step} loss {float(loss_value):.8g}", flush=True)
    seconds = time.perf_counter() - start
    samples = (args.steps - timed_from) * args.batch_size * nranks
    print(f"[rank {rank}] {samples / seconds:.1f} samples/s (global, steps {timed_from}..{args.steps - 1}, "
          f"{nranks} ranks x batch {args.batch_size})", flush=True)
    if args.save:
        path = os.path.join(args.save, f"rank{rank}", "model")
        paddle.static.save(main, path)
        print(f"[rank {rank}] saved {path}.pdparams", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5, help="steps before the throughput is timed")
    p.add_argument("--save", metavar="DIR", help="save parameters to DIR/rank<r>/model.pdparams")
    p.add_argument("--legacy", action="store_true", help="build a legacy ProgramDesc instead of PIR")
    args = p.parse_args()
    paddle.enable_static()
    if args.legacy:
        with paddle.pir_utils.OldIrGuard():
            train(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
