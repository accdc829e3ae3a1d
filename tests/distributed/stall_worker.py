"""A rank that stops taking part: frozen (SIGSTOP) or alive but elsewhere (sleeping between steps).

argv: mode ("freeze" | "sleep"), backend, timeout_s. Rank 1 misbehaves before step 3; the others must
stop within about timeout_s with the watchdog's report. The transport follows the launcher.
"""
import os
import signal
import sys
import time

os.environ.setdefault("GLOG_minloglevel", "2")
import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.distributed import make_transport  # noqa: E402
from paddle_ngraph.zoo import build_program  # noqa: E402

mode, backend, timeout_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
paddle.enable_static()
t = make_transport()
main, startup, _, loss = build_program("mnist_mlp", "sgd")
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
paddle_ngraph.transpile(main, transport=t, backend=backend, timeout_s=timeout_s, bucket_mb=0.1)
for step in range(6):
    if step == 3 and t.rank == 1:
        print(f"[rank 1] {mode} before step 3", flush=True)
        if mode == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(600)
    exe.run(main, feed={"x": np.ones((8, 784), np.float32), "y": np.zeros((8, 1), np.int64)}, fetch_list=[loss])
    print(f"[rank {t.rank}] step {step} done", flush=True)
print(f"[rank {t.rank}] finished without noticing the stall", flush=True)
