"""Running an example as a user does, on 2 ranks, under paddle.distributed.launch or mpirun."""
import os
import subprocess
import sys

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
NRANKS = 2


def example_env() -> dict:
    # PYTHONPATH: a script's own directory comes first on sys.path, not the checkout (as the Makefile).
    return quiet_env(PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def under_launch(tmp_path, script: str, *args) -> str:
    """Every rank's output (the launcher's replay of rank 0's log, then the other ranks' logs); asserts success."""
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_level", "WARNING", "--nproc_per_node",
           str(NRANKS), "--log_dir", str(tmp_path / "log"), script, *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=example_env(), cwd=tmp_path)
    logs = [(tmp_path / "log" / f"workerlog.{r}") for r in range(1, NRANKS)]
    output = proc.stdout + proc.stderr + "".join(p.read_text(errors="replace") for p in logs if p.exists())
    assert proc.returncode == 0, output[-5000:]
    return output


def under_mpirun(tmp_path, script: str, *args) -> str:
    """Every rank's output; asserts success."""
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(NRANKS), sys.executable, script,
           *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=example_env(), cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    return output
