"""The transport that goes with the launcher, built by name: the one place that chooses it
(``transpile``'s default and fleet's ``NgraphOptimizer`` both call ``make_transport``).

MPI cannot join processes that Paddle's launcher started (see README), so those need the
ccl transport. ``detect_launcher`` (``launcher.py``) is re-exported here.
"""
from __future__ import annotations

import math

from ..errors import ConfigError
from .ccl import CclTransport
from .launcher import LaunchInfo, detect_launcher  # noqa: F401  (re-exported)
from .mpi import MpiTransport
from .transport import NullTransport


def make_transport(name: str | None = None, timeout_s: float | None = None, info: LaunchInfo | None = None):
    """A transport by name: "null", "mpi", "ccl" (alias "mlsl"), or "auto"/None to follow the
    launcher (mpirun -> mpi, paddle.distributed.launch -> ccl, one process -> null).
    ``timeout_s``: how long the ccl transport's start-up rendezvous waits for the other ranks."""
    info = detect_launcher() if info is None else info
    key = (name or "auto").lower()
    if key == "auto":
        key = info.auto_transport()
    if key == "null":
        return NullTransport()
    if key == "mpi":
        if info.launcher == "paddle":
            raise ConfigError("transport 'mpi' cannot join processes started by paddle.distributed.launch "
                              "(MPI singletons cannot connect); use mpirun, or the 'ccl' transport")
        return MpiTransport()
    if key in ("ccl", "mlsl"):  # "mlsl": nGraph's name for Intel's CPU transport, now oneCCL
        return CclTransport() if timeout_s is None else CclTransport(timeout_s=int(math.ceil(timeout_s)))
    raise ConfigError(f"unknown transport '{name}'; valid: auto, null, mpi, ccl (alias mlsl)")
