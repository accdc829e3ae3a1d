"""Rank 1 builds a different model from the others (or, with argument ``accumulate``, accumulates
over a different number of micro-steps): every rank must fail with the consistency error."""
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.distributed import make_transport  # noqa: E402

paddle.enable_static()
t = make_transport()
accumulate = sys.argv[1:] == ["accumulate"]
hidden = 600 if t.rank != 1 or accumulate else 500
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [None, 784], "float32")
    y = paddle.static.data("y", [None, 1], "int64")
    h = paddle.nn.functional.relu(paddle.nn.Linear(784, hidden)(x))
    loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.nn.Linear(hidden, 10)(h), y))
    paddle.optimizer.SGD(0.1).minimize(loss)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
paddle_ngraph.transpile(main, transport=t, accumulate_steps=(1 if t.rank == 1 else 2) if accumulate else 1)
try:
    exe.run(main, feed={"x": np.zeros((4, 784), np.float32), "y": np.zeros((4, 1), np.int64)}, fetch_list=[loss])
except Exception as e:  # Paddle wraps our error; print its message and fail
    print(f"[rank {t.rank}] ERROR: {' '.join(str(e).split())}", flush=True)
    sys.exit(1)
print(f"[rank {t.rank}] no error", flush=True)
