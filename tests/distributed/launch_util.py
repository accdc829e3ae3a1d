"""Running a script on N ranks under the real paddle.distributed.launch (no mpirun)."""
import os
import subprocess
import sys
import tempfile

from paddle_ngraph.quiet import quiet_env


def launch(nranks: int, script: str, *args, timeout: float = 300, env=None):
    """Returns (returncode, combined worker logs)."""
    log_dir = tempfile.mkdtemp(prefix="pdng_launch_")
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nranks),
           "--log_dir", log_dir, script, *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=quiet_env(**(env or {})))
    logs = []
    for rank in range(nranks):
        path = os.path.join(log_dir, f"workerlog.{rank}")
        if os.path.exists(path):
            logs.append(open(path, errors="replace").read())
    return proc.returncode, "\n".join(logs) + proc.stdout[-2000:] + proc.stderr[-2000:]
