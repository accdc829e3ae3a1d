"""Which launcher started us, and the transport that goes with it.

``mpirun`` (Open MPI) sets ``OMPI_COMM_WORLD_SIZE``/``OMPI_COMM_WORLD_RANK``;
``paddle.distributed.launch`` sets ``PADDLE_TRAINERS_NUM``/``PADDLE_TRAINER_ID``
(and PADDLE_MASTER, PADDLE_TRAINER_ENDPOINTS). MPI cannot join processes that
Paddle's launcher started (see README), so those need the ccl transport.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass
class LaunchInfo:
    launcher: str  # "mpirun", "paddle", or "none"
    rank: int
    size: int
    master: str = ""


def detect_launcher(env=None) -> LaunchInfo:
    env = os.environ if env is None else env
    if "OMPI_COMM_WORLD_SIZE" in env:
        return LaunchInfo("mpirun", int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"]))
    if "PMI_SIZE" in env and "PMI_RANK" in env:
        return LaunchInfo("mpirun", int(env["PMI_RANK"]), int(env["PMI_SIZE"]))
    if "PADDLE_TRAINERS_NUM" in env:
        return LaunchInfo("paddle", int(env.get("PADDLE_TRAINER_ID", 0)), int(env["PADDLE_TRAINERS_NUM"]),
                          env.get("PADDLE_MASTER", ""))
    return LaunchInfo("none", 0, 1)


def make_transport(name: str | None = None):
    """A transport by name ("null", "mpi", "ccl"/"mlsl") or chosen from the launcher."""
    from .mpi import MpiTransport
    from .transport import NullTransport

    info = detect_launcher()
    if name is None:
        name = {"mpirun": "mpi", "paddle": "ccl", "none": "null"}[info.launcher]
        if info.size == 1:
            name = "null"
    key = name.lower()
    if key == "null":
        return NullTransport()
    if key == "mpi":
        if info.launcher == "paddle":
            raise ConfigError("transport 'mpi' cannot join processes started by paddle.distributed.launch "
                              "(MPI singletons cannot connect); use mpirun, or the 'ccl' transport")
        return MpiTransport()
    if key in ("ccl", "mlsl"):  # "mlsl": nGraph's name for Intel's CPU transport, now oneCCL
        from .ccl import CclTransport

        return CclTransport()
    raise ConfigError(f"unknown transport '{name}'; valid: null, mpi, ccl (alias mlsl)")
