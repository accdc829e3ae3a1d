"""paddle_ngraph/quiet.py: the environment of the processes the project starts."""
import os
import subprocess
import sys

from paddle_ngraph.quiet import CCACHE_FILTER, quiet_env

IMPORT_PADDLE = [sys.executable, "-c", "import paddle"]


def test_quiet_env_sets_glog_and_the_ccache_filter_unless_the_caller_did():
    assert quiet_env({}) == {"GLOG_minloglevel": "2", "PYTHONWARNINGS": CCACHE_FILTER}
    env = quiet_env({"GLOG_minloglevel": "0", "PYTHONWARNINGS": "error"}, OMP_NUM_THREADS=1)
    # The caller's filters come last: they take precedence over ours.
    assert env == {"GLOG_minloglevel": "0", "PYTHONWARNINGS": CCACHE_FILTER + ",error", "OMP_NUM_THREADS": "1"}
    assert quiet_env(env) == env  # idempotent


def test_quiet_env_leaves_os_environ_alone():
    before = dict(os.environ)
    quiet_env(EXTRA_FOR_THE_TEST="1")
    assert dict(os.environ) == before


def test_the_ccache_filter_silences_paddles_warning_at_import():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    # No ccache on PATH (Paddle looks there and with `which`): Paddle warns.
    env["PATH"] = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                                  if d and not os.path.exists(os.path.join(d, "ccache")))
    loud = subprocess.run(IMPORT_PADDLE, capture_output=True, text=True, timeout=120, env=env)
    assert "No ccache found" in loud.stderr
    quiet = subprocess.run(IMPORT_PADDLE, capture_output=True, text=True, timeout=120, env=quiet_env(env))
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr[-2000:]
