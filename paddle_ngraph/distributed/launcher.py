"""Which launcher started this process, from its environment variables.

``mpirun`` (Open MPI) sets ``OMPI_COMM_WORLD_SIZE``/``OMPI_COMM_WORLD_RANK`` (other MPIs
``PMI_SIZE``/``PMI_RANK``); ``paddle.distributed.launch`` sets ``PADDLE_TRAINERS_NUM``/
``PADDLE_TRAINER_ID`` (and PADDLE_MASTER, PADDLE_TRAINER_ENDPOINTS).

Imports nothing of paddle_ngraph: the transports read it, and ``bootstrap`` chooses a
transport from it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

# The transport "auto" picks for each launcher when there is more than one rank: filled as the
# transports register (registry.py, ``TransportSpec.auto_for``), which the package's import does.
TRANSPORT_OF_LAUNCHER: dict[str, str] = {}


@dataclass
class LaunchInfo:
    launcher: str  # "mpirun", "paddle", or "none"
    rank: int
    size: int
    master: str = ""

    def auto_transport(self) -> str:
        """The transport name that ``auto`` means here: one process needs no communication."""
        return "null" if self.size == 1 else TRANSPORT_OF_LAUNCHER[self.launcher]


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
