"""The engine operator's callback, from whichever thread Paddle's executor runs it on: its worker
threads (the default; the bridge keeps a Python thread state on each from its first call) or the
thread that called exe.run (FLAGS_new_executor_serial_run)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from paddle_ngraph.quiet import quiet_env

SCRIPT = r"""
import json, sys, threading
import numpy as np
import paddle
import paddle_ngraph
from paddle_ngraph.transpiler import engine as engine_module

threads = []
run = engine_module.Engine.run
def recording_run(self, *args):
    threads.append(threading.get_native_id())
    return run(self, *args)
engine_module.Engine.run = recording_run

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    w = paddle.static.data("w", [-1, 1], "float32")
    loss = paddle.mean(paddle.abs(w) * 2.0)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
paddle_ngraph.transpile(main)
losses = []
for step in range(12):
    feed = {"w": np.arange(-4, 4, dtype="float32").reshape(8, 1) * (step + 1)}
    losses.append(float(exe.run(main, feed=feed, fetch_list=[loss])[0]))
print(json.dumps({"losses": losses, "threads": threads, "main": threading.get_native_id()}))
"""


@pytest.mark.parametrize("serial", ["0", "1"])
def test_engine_operator_runs_on_paddle_worker_threads_and_on_the_calling_thread(serial):
    env = {**quiet_env(), "FLAGS_new_executor_serial_run": serial}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = [float(np.mean(np.abs(np.arange(-4, 4, dtype="float32") * (s + 1)) * 2.0)) for s in range(12)]
    np.testing.assert_allclose(result["losses"], expected, rtol=1e-6)
    assert len(result["threads"]) == 12
    if serial == "1":
        assert set(result["threads"]) == {result["main"]}
    else:  # Paddle's worker threads, each called again after its first call kept its thread state
        assert result["main"] not in result["threads"]
        assert len(set(result["threads"])) < 12  # a pool of fewer threads than steps
