"""2 ranks train the MLP with check_finite; rank 1 feeds a NaN at step 3 (a valid feed otherwise)."""
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard  # noqa: E402


def main():
    paddle.enable_static()
    x, y = digits_as_mnist()
    main_prog, startup, _, loss = build_program("mnist_mlp", "sgd")
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main_prog, check_finite=True)
    from paddle_ngraph.transpiler import engines

    transport = engines()[-1].transport
    for step in range(6):
        xb, yb = shard(x, y, 16, transport.rank, transport.size, step)
        if step == 3 and transport.rank == 1:
            xb = xb.copy()
            xb[0, 0] = np.nan
        exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
    print(f"rank {transport.rank}: finished without noticing", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
