#!/usr/bin/env python
"""Step time of a Megatron MLP block in dygraph: tensor-parallel on the engine, or dense (docs/model-parallel.md).

The block is a ColumnParallelLinear(width, 4 x width, gather_output=False), ReLU and a
RowParallelLinear(4 x width, width, input_is_parallel=True) (fleet.meta_parallel) under
``--mode mp``, run under ``mpirun -np 2`` with ``hybrid_configs`` mp_degree 2 and
``strategy.ngraph``; the same block of paddle.nn.Linear in one process under ``--mode engine``
(paddle_ngraph.DataParallel, the CPU backend) or ``--mode paddle`` (Paddle eagerly). Each step is
forward, a mean-square loss, backward and an SGD step; the first step (capture and compilation on
the engine) is printed apart, then the median of the others with their spread (min-max). The
machine is shared: compare runs made one after the other, several times.

  python tools/bench_dygraph_tensor_parallel.py --mode paddle
  python tools/bench_dygraph_tensor_parallel.py --mode engine
  mpirun -np 2 --allow-run-as-root --oversubscribe python tools/bench_dygraph_tensor_parallel.py --mode mp
"""
import argparse
import statistics
import time

import numpy as np

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()

import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle.distributed import fleet  # noqa: E402

import paddle_ngraph  # noqa: E402


def block(mode: str, width: int):
    hidden = 4 * width

    class Block(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            if mode == "mp":
                from paddle.distributed.fleet import meta_parallel as mpu

                self.up = mpu.ColumnParallelLinear(width, hidden, gather_output=False, has_bias=True)
                self.down = mpu.RowParallelLinear(hidden, width, input_is_parallel=True, has_bias=True)
            else:
                self.up, self.down = paddle.nn.Linear(width, hidden), paddle.nn.Linear(hidden, width)

        def forward(self, x):
            return self.down(F.relu(self.up(x)))

    return Block()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", required=True, choices=("mp", "engine", "paddle"))
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    if args.mode == "mp":
        strategy = fleet.DistributedStrategy()
        strategy.ngraph = True
        strategy.ngraph_configs = {"backend": "CPU"}
        strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 2, "pp_degree": 1}
        fleet.init(is_collective=True, strategy=strategy)
        model = fleet.distributed_model(block("mp", args.width))
    elif args.mode == "engine":
        model = paddle_ngraph.DataParallel(block("engine", args.width), backend="CPU")
    else:
        model = block("paddle", args.width)
    opt = paddle.optimizer.SGD(0.01, parameters=model.parameters())
    x = paddle.to_tensor(np.random.default_rng(0).standard_normal((args.batch, args.width)).astype("float32"))
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        float(loss)
        times.append((time.perf_counter() - start) * 1e3)
    rank = paddle.distributed.get_rank()
    steady = times[1:] or times
    print(f"{args.mode} rank {rank}: first step {times[0]:.0f} ms, then median {statistics.median(steady):.1f} ms "
          f"({min(steady):.1f}-{max(steady):.1f}) over {len(steady)} steps; parameters "
          f"{sum(int(np.prod(p.shape)) for p in model.parameters()) * 4:,} bytes here", flush=True)


if __name__ == "__main__":
    main()
