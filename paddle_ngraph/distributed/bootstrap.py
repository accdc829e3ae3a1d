"""The transport that goes with the launcher, built by name: the one place that chooses it
(``transpile``'s default and fleet's ``NgraphOptimizer`` both call ``make_transport``).

The transports and the launchers each suits are the registry's (``registry.py``).
``detect_launcher`` (``launcher.py``) is re-exported here.
"""
from __future__ import annotations

from ..errors import ConfigError
from .launcher import LaunchInfo, detect_launcher  # noqa: F401  (re-exported)
from .registry import described_transport_names, find_transport

# The transport every later ``make_transport("auto" | "mpi")`` returns, while one is pinned: an
# elastic job's current group (paddle_ngraph.elastic pins each new group after a rank is lost).
_PINNED = None


def pin_transport(transport):
    """Makes ``transport`` the one "auto" and "mpi" mean in this process (None: unpin)."""
    global _PINNED
    _PINNED = transport


def pinned_transport():
    return _PINNED


def make_transport(name: str | None = None, timeout_s: float | None = None, info: LaunchInfo | None = None):
    """A transport by name: a registered one ("null", "mpi", "ccl" alias "mlsl"), or "auto"/None to
    follow the launcher (mpirun -> mpi, paddle.distributed.launch -> ccl, one process -> null).
    ``timeout_s``: how long the ccl transport's start-up rendezvous waits for the other ranks."""
    key = (name or "auto").lower()
    if _PINNED is not None and key in ("auto", "mpi"):
        return _PINNED
    info = detect_launcher() if info is None else info
    if key == "auto":
        key = info.auto_transport()
    spec = find_transport(key)
    if spec is None:
        raise ConfigError(f"unknown transport '{name}'; valid: {described_transport_names()}")
    return spec.build(info, timeout_s)
