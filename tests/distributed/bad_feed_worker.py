"""Rank 1 feeds a batch of the wrong shape at step 2: every rank must stop with the message."""
import os
import sys
import time

os.environ.setdefault("GLOG_minloglevel", "2")
import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.distributed import make_transport  # noqa: E402
from paddle_ngraph.zoo import build_program  # noqa: E402

paddle.enable_static()
t = make_transport()
main, startup, _, loss = build_program("mnist_mlp", "sgd")
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
paddle_ngraph.transpile(main, transport=t)
start = time.time()
for step in range(5):
    width = 700 if (t.rank == 1 and step == 2) else 784
    try:
        exe.run(main, feed={"x": np.zeros((8, width), np.float32), "y": np.zeros((8, 1), np.int64)},
                fetch_list=[loss])
    except Exception as e:
        message = " ".join(str(e).split())
        print(f"[rank {t.rank}] STOPPED at step {step} after {time.time() - start:.1f}s: "
              f"{message[message.find('ExecutionError'):]}", flush=True)
        sys.exit(1)
print(f"[rank {t.rank}] finished", flush=True)
