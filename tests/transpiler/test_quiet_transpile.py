"""A ``paddle_ngraph.transpile`` script prints nothing but its own output in a process the project
starts (quiet_env: glog at ERROR, Paddle's ccache warning ignored): no Python warning, no glog line,
no log line of ours; with ``PADDLE_NGRAPH_LOG_LEVEL=INFO`` our INFO lines appear, and with
``GLOG_minloglevel=0`` glog's, so that the checks below can fail."""
import os
import re
import subprocess
import sys

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "transpiler", "quiet_worker.py")
PYTHON_WARNING = re.compile(r"\b[A-Z]\w*Warning\b")  # UserWarning: ..., DeprecationWarning: ...
GLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]", re.M)


def run_worker(**env):
    base = {k: v for k, v in os.environ.items() if k not in ("PADDLE_NGRAPH_LOG_LEVEL", "GLOG_minloglevel")}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, WORKER], capture_output=True, text=True, timeout=300,
                          env=quiet_env(base, **env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def noise(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if PYTHON_WARNING.search(line) or GLOG_LINE.match(line) or "paddle_ngraph]" in line
            or re.search(r"\bWARNING\b|\bINFO\b", line)]


def test_a_transpile_script_prints_only_its_own_output():
    proc = run_worker()
    assert noise(proc.stdout + proc.stderr) == []
    assert proc.stdout.startswith("loss ")
    assert proc.stderr == ""


def test_log_level_info_from_the_environment_shows_our_info_lines():
    proc = run_worker(PADDLE_NGRAPH_LOG_LEVEL="info")
    assert re.search(r"^\[paddle_ngraph\] INFO rank 0/1: <pir program> transpiled: 1 engine segment\(s\), "
                     r"CPU backend, NULL transport$", proc.stderr, re.M), proc.stderr


def test_glog_lines_are_recognized_when_glog_is_not_quieted():
    proc = run_worker(GLOG_minloglevel="0")
    assert GLOG_LINE.search(proc.stderr), proc.stderr[-2000:]
