"""A user's script of ``paddle_ngraph.transpile`` (no fleet), for test_quiet_transpile.py: the zoo's
MNIST MLP, transpiled, a few steps; on one process or under mpirun. It sets nothing about logging
or warnings itself: what it prints is what a user would see."""
import sys

import numpy as np
import paddle

import paddle_ngraph
from paddle_ngraph.zoo import build_program, make_batch

paddle.enable_static()
main, startup, _, loss = build_program("mnist_mlp", "sgd", 0.03, seed=1)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
paddle_ngraph.transpile(main)
rng = np.random.default_rng(0)
for step in range(3):
    (value,) = exe.run(main, feed=make_batch("mnist_mlp", 8, rng), fetch_list=[loss])
print(f"loss {float(value):.6f}", file=sys.stdout, flush=True)
