"""Saves checkpoints of the MLP in a loop, each step's parameters different, until killed."""
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.zoo import build_program  # noqa: E402


def main():
    root = sys.argv[1]
    paddle.enable_static()
    main_prog, startup, _, _ = build_program("mnist_mlp", "adam")
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    scope = paddle.static.global_scope()
    weight = scope.find_var("linear_0.w_0").get_tensor()
    step = 0
    while True:
        step += 1
        # The checkpoint of step s holds s in every weight: a torn checkpoint would mix steps.
        weight.set(np.full(np.array(weight).shape, step, dtype="float32"), paddle.CPUPlace())
        scope.find_var("linear_0.b_0").get_tensor().set(np.full((600,), step, dtype="float32"), paddle.CPUPlace())
        paddle_ngraph.save_checkpoint(main_prog, root, step, rank=0)
        print(step, flush=True)


if __name__ == "__main__":
    sys.exit(main())
