"""One rank of clip_models under mpirun: its share of every batch; saves rank<r>.npz (losses).

  mpirun -np N python clip_worker.py CLIP DECAY BACKEND OUT
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "transpiler")]

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import clip_models  # noqa: E402
from harness import ir_guard  # noqa: E402

if __name__ == "__main__":
    paddle.enable_static()
    clip, decay, backend, out = sys.argv[1:5]
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    with ir_guard(clip_models.IR_OF[clip]):
        _, losses = clip_models.train(clip, decay, transpile={"backend": backend}, rank=rank, nranks=size)
    np.savez(os.path.join(out, f"rank{rank}.npz"), losses=losses)
