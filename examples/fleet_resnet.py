"""Fleet static-graph data-parallel training of a small ResNet on CPU.

A standard fleet collective training script; the two lines marked "paddle_ngraph" are the
only difference from a plain one. Launch with either launcher:

    mpirun -np 2 python examples/fleet_resnet.py --steps 50
    python -m paddle.distributed.launch --nproc_per_node 2 examples/fleet_resnet.py --steps 50

Model: conv3x3(16)-bn-relu, a basic block, a stride-2 basic block with a projection skip,
global average pooling, fc10, on 3x16x16 inputs. Data: a synthetic 10-class image set
(a fixed random pattern per class plus noise), generated identically on every rank; each
rank trains on its own shard of every global batch. Batch norm statistics are per rank,
as in Paddle's own data parallelism (no sync_batch_norm), so the saved moving means and
variances differ between ranks while the trained weights are identical.
"""
import argparse
import os

import numpy as np
import paddle
import paddle.distributed.fleet as fleet
import paddle.nn.functional as F

import paddle_ngraph  # noqa: F401  # paddle_ngraph: adds strategy.ngraph to fleet


def load_data(n=2048, seed=0):
    rng = np.random.default_rng(seed)
    patterns = rng.standard_normal((10, 3, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 10, size=n)
    images = patterns[labels] + 1.5 * rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
    return images, labels.astype(np.int64).reshape(-1, 1)


def shard(x, y, batch, rank, nranks, step):
    """This rank's part of global batch ``step`` (nranks x batch samples), cycling over the data."""
    start = (step * batch * nranks) % (len(x) - batch * nranks + 1) + rank * batch
    return x[start:start + batch], y[start:start + batch]


def conv_bn(x, cin, cout, kernel, stride=1):
    conv = paddle.nn.Conv2D(cin, cout, kernel, stride=stride, padding=kernel // 2, bias_attr=False)
    return paddle.nn.BatchNorm2D(cout)(conv(x))


def basic_block(x, cin, cout, stride):
    h = F.relu(conv_bn(x, cin, cout, 3, stride))
    h = conv_bn(h, cout, cout, 3)
    skip = x if stride == 1 and cin == cout else conv_bn(x, cin, cout, 1, stride)
    return F.relu(h + skip)


def build_model():
    x = paddle.static.data("x", [None, 3, 16, 16], "float32")
    y = paddle.static.data("y", [None, 1], "int64")
    h = F.relu(conv_bn(x, 3, 16, 3))
    h = basic_block(h, 16, 16, 1)
    h = basic_block(h, 16, 32, 2)                                  # 32x8x8
    h = paddle.reshape(F.adaptive_avg_pool2d(h, 1), [-1, 32])
    logits = paddle.nn.Linear(32, 10)(h)
    return paddle.mean(F.cross_entropy(logits, y))


def train(args):
    fleet.init(is_collective=True)
    rank, nranks = fleet.worker_index(), fleet.worker_num()
    paddle.seed(args.seed)
    main = paddle.static.default_main_program()
    loss = build_model()

    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True  # paddle_ngraph: run data parallelism on CPU
    opt = fleet.distributed_optimizer(paddle.optimizer.Momentum(learning_rate=args.lr, momentum=0.9), strategy)
    opt.minimize(loss)

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    x, y = load_data()
    for step in range(args.steps):
        xb, yb = shard(x, y, args.batch_size, rank, nranks, step)
        loss_value, = exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"[rank {rank}] step {step} loss {float(loss_value):.8g}", flush=True)
    if args.save:
        path = os.path.join(args.save, f"rank{rank}", "model")
        paddle.static.save(main, path)
        print(f"[rank {rank}] saved {path}.pdparams", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-every", type=int, default=10)
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
