"""Quiet processes: what the project sets in every process it starts, and the Paddle warnings it
silences around its own calls into Paddle. Importing this module does not import Paddle.

Paddle's C++ logs through glog, which reads ``GLOG_minloglevel`` once, when ``libpaddle.so`` is
loaded (0: INFO, 1: WARNING, 2: ERROR). The tools, the Makefile and the tests' subprocess helpers
start their processes with 2 unless the caller's environment sets it, so that
``GLOG_minloglevel=0 python tools/bench.py ...`` still shows everything. ``import paddle_ngraph``
leaves the user's own process alone: in the usual order (``import paddle`` first) glog is
configured already, and changing another library's logging from an import would surprise.
"""
from __future__ import annotations

import contextlib
import os
import warnings

GLOG_QUIET = "2"  # glog: ERROR and FATAL only

# ``import paddle`` (paddle/utils/cpp_extension/cpp_extension.py, at import) warns "No ccache
# found" when ccache is not on PATH: advice for compiling custom operators, which nobody running
# our tools or tests does. PYTHONWARNINGS syntax: action:message-prefix:category:module.
CCACHE_FILTER = "ignore:No ccache found:UserWarning:paddle.utils.cpp_extension.extension_utils"

# Paddle's PIR backward (autograd/ir_backward.py -> paddle.full_like) reads ``Value.place``, which
# warns "Tensor do not have 'place' interface for pir graph mode" on every optimizer.minimize of a
# PIR program: Paddle's own code path, nothing a user of ours can change.
PIR_PLACE_MESSAGE = r"Tensor do not have 'place' interface for pir graph mode"


def quiet_env(env=None, **extra) -> dict:
    """A copy of ``env`` (default ``os.environ``) for a process the project starts: glog at ERROR
    and Paddle's ccache warning ignored, unless ``env`` says otherwise; then ``extra`` on top."""
    env = dict(os.environ if env is None else env)
    env.setdefault("GLOG_minloglevel", GLOG_QUIET)
    current = env.get("PYTHONWARNINGS", "")
    if CCACHE_FILTER not in current.split(","):
        # First: later entries take precedence, so the caller's own filters still win.
        env["PYTHONWARNINGS"] = ",".join(f for f in (CCACHE_FILTER, current) if f)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def quiet_this_process() -> None:
    """For the project's own entry points (tools/*.py), before they import Paddle: the same as
    ``quiet_env`` for this process and the processes it starts."""
    os.environ.update(quiet_env())
    warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning,
                            module=r"paddle\.utils\.cpp_extension\.extension_utils")


@contextlib.contextmanager
def paddle_minimize_warnings_ignored():
    """Around our own calls of ``optimizer.minimize`` on a PIR program (see PIR_PLACE_MESSAGE)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PIR_PLACE_MESSAGE, category=UserWarning)
        yield
