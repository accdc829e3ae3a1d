"""tools/bench_zoo.py runs end to end (one small model, one round) and reports both systems."""
import os
import re
import subprocess
import sys

import pytest

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "bench_zoo.py")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=600,
                          env=quiet_env())


@pytest.mark.slow
def test_smoke_with_and_without_fallback():
    proc = run("--models", "squeezenet1_1", "--rounds", "1", "--steps", "1", "--warmup", "1", "--batch", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = [line for line in proc.stdout.splitlines() if line.startswith("| `squeezenet1_1`")]
    assert len(row) == 1 and row[0].endswith("x |")
    proc = run("--models", "squeezenet1_1", "--rounds", "1", "--steps", "1", "--warmup", "1", "--batch", "2",
               "--leave-to-paddle", "pd_op.squeeze", "pd_op.squeeze_grad")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\[bench_zoo\] squeezenet1_1: built in [0-9.]+ s, 3 engine segment\(s\)$", proc.stderr, re.M)


def test_unknown_op_refused():
    proc = run("--leave-to-paddle", "pd_op.no_such_op")
    assert proc.returncode == 2 and "pd_op.no_such_op has no converter" in proc.stderr
