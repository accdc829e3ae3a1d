"""A dygraph training script run by plain mpirun or paddle.distributed.launch
(tests/distributed/test_failures.py): at step 2 rank 1 raises an error of the user's own code after its forward, leaving it uncaught, while
rank 0 goes on into the backward, whose gradient AllReduce waits for rank 1. With ``exit``, rank 1
catches the error itself and leaves with ``sys.exit(1)``.

    mpirun -np 2 python uncaught_worker.py [exit]
    python -m paddle.distributed.launch --nproc_per_node 2 uncaught_worker.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # this checkout

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402

model = paddle_ngraph.DataParallel(paddle.nn.Sequential(paddle.nn.Linear(6, 8), paddle.nn.ReLU(),
                                                        paddle.nn.Linear(8, 2)))
opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
rank = paddle.distributed.get_rank()
for step in range(4):
    loss = model(paddle.to_tensor(np.full((4, 6), step, np.float32))).square().mean()
    if rank == 1 and step == 2:
        try:
            raise RuntimeError("an error of the user's own code on rank 1")
        except RuntimeError as e:
            if sys.argv[1:] != ["exit"]:
                raise
            print(f"rank 1: {e}; leaving with sys.exit(1)", flush=True)
            sys.exit(1)
    loss.backward()
    opt.step()
    opt.clear_grad()
    print(f"rank {rank}: step {step} done", flush=True)
