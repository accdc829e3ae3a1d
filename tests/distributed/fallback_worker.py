"""One rank of a fallback program under mpirun: trains its share of every batch on the engine
(ops it lacks left to Paddle) and saves losses and parameters to <out>/rank<r>.npz.

  mpirun -np N python fallback_worker.py IR MIDDLE OPTIMIZER BACKEND OUT
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "transpiler")]

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import fallback_models as fm  # noqa: E402
from harness import ir_guard  # noqa: E402

STEPS, BATCH = 4, 12  # as test_dp_fallback.py


def main():
    ir, middle, optimizer, backend, out = sys.argv[1:6]
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    xs, ys = fm.data(STEPS, BATCH)
    with ir_guard(ir):
        # Each rank initializes differently: the start-up broadcast (of the parameters only Paddle
        # ops read, too) must make them rank 0's, which are the reference's (seed 1).
        _, losses, params = fm.train(middle, optimizer, xs, ys, transpile={"backend": backend}, seed=1 + rank,
                                     rank=rank, nranks=size)
    np.savez(os.path.join(out, f"rank{rank}.npz"), losses=losses, **params)


if __name__ == "__main__":
    paddle.enable_static()
    main()
