"""examples/fleet_mnist_mlp.py on 2 ranks under mpirun, started as the project starts processes
(quiet_env): no Python warning and no glog line from either rank, and no log line of ours at the
default log_level; with ``PADDLE_NGRAPH_LOG_LEVEL=INFO`` every rank's INFO lines appear.

Paddle's own Python logger still prints "distributed strategy initialized" (INFO) and, because the
example passes its strategy to distributed_optimizer rather than to fleet.init, a "[ WARNING]
fleet.py" line: both come from the user's script calling Paddle, which we leave alone."""
import os
import re

import pytest

from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

EXAMPLE = os.path.join(ROOT, "examples", "fleet_mnist_mlp.py")
ARGS = ["--steps", 6]
PYTHON_WARNING = re.compile(r"\b[A-Z]\w*Warning\b")
GLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]", re.M)


def run_example(**env):
    env = {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p), **env}
    saved = {k: os.environ.pop(k) for k in ("PADDLE_NGRAPH_LOG_LEVEL",) if k in os.environ}
    try:
        proc = run_ranks(EXAMPLE, 2, *ARGS, env=env, timeout=180, check=False)
    finally:
        os.environ.update(saved)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_the_fleet_example_prints_no_warning_and_no_glog_line():
    out = run_example()
    assert [line for line in out.splitlines() if PYTHON_WARNING.search(line) or GLOG_LINE.match(line)
            or "[paddle_ngraph]" in line] == []
    assert re.search(r"^\[rank 1\] .*loss", out, re.M), out


def test_log_level_info_shows_our_info_lines_on_every_rank():
    out = run_example(PADDLE_NGRAPH_LOG_LEVEL="INFO")
    for rank in (0, 1):
        assert re.search(rf"^\[paddle_ngraph\] INFO rank {rank}/2: ", out, re.M), out
