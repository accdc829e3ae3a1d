"""Paddle's own rank APIs under ``mpirun``: the launcher's ranks, told in Paddle's variables.

Paddle learns its rank from environment variables that ``paddle.distributed.launch``
sets (``PADDLE_TRAINER_ID``, ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ENDPOINTS``,
``PADDLE_CURRENT_ENDPOINT``): ``paddle.distributed.get_rank``/``get_world_size``,
``ParallelEnv``, ``paddle.io.DistributedBatchSampler`` and fleet's role maker all read
them. ``mpirun`` sets Open MPI's (``OMPI_COMM_WORLD_*``) instead, so without this
every rank believes it is rank 0 of 1 and a ``DistributedBatchSampler`` hands every rank
the same shard. ``import paddle_ngraph`` calls :func:`export_mpi_ranks`, which writes
Paddle's variables from Open MPI's (never over variables already set: a user's or
Paddle's launcher's win) and drops Paddle's cached ``ParallelEnv`` if Paddle was
imported first.

Endpoints: Paddle's dygraph ``init_parallel_env`` (and so ``fleet.init`` in dygraph mode)
opens its TCPStore at the first endpoint. When all ranks share one node they are
``127.0.0.1`` with ports derived from Open MPI's job id (the same on every rank, a
different range per job). Ranks on several nodes cannot know each other's host names
without communicating, which an import must not do: then no endpoints are exported, and
Paddle's APIs that need them (dygraph ``init_parallel_env``) need ``PADDLE_MASTER`` or
``paddle.distributed.launch``. Ranks and world size are always exported.
"""
from __future__ import annotations

import os
import sys
import zlib

from .bootstrap import detect_launcher

# Ports of the derived endpoints: a job's ranks take consecutive ports from a base in
# [PORT_LOW, PORT_LOW + PORT_SPAN), below Linux's default ephemeral range (32768-60999).
PORT_LOW = 20000
PORT_SPAN = 12000
EXPORTED_FLAG = "PADDLE_NGRAPH_EXPORTED_RANKS"  # set when the variables below came from us


def derived_endpoints(env) -> list[str] | None:
    """``127.0.0.1:<port>`` per rank when every rank is on this node, else None."""
    size = int(env["OMPI_COMM_WORLD_SIZE"])
    local_size = int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE", -1))
    if local_size != size:
        return None
    job = env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_ess_base_jobid") or ""
    span = max(PORT_SPAN - size, 1)
    base = PORT_LOW + zlib.crc32(job.encode()) % span
    return [f"127.0.0.1:{base + r}" for r in range(size)]


def paddle_variables(env) -> dict[str, str]:
    """The variables Paddle's launcher would have set for this ``mpirun`` rank ({} elsewhere)."""
    info = detect_launcher(env)
    if info.launcher != "mpirun" or "OMPI_COMM_WORLD_SIZE" not in env:
        return {}
    # The names paddle.distributed.launch sets (launch/controllers/collective.py), both its
    # current ones and the "compatible" ones most of Paddle still reads.
    values = {"PADDLE_TRAINER_ID": str(info.rank), "PADDLE_TRAINERS_NUM": str(info.size),
              "PADDLE_GLOBAL_RANK": str(info.rank), "PADDLE_GLOBAL_SIZE": str(info.size),
              # Paddle's launcher picks gloo when it selects no GPU; dygraph init_parallel_env
              # initializes nothing with the default "auto" on a CPU-only Paddle.
              "PADDLE_DISTRI_BACKEND": "gloo"}
    if "OMPI_COMM_WORLD_LOCAL_RANK" in env:
        values["PADDLE_RANK_IN_NODE"] = values["PADDLE_LOCAL_RANK"] = env["OMPI_COMM_WORLD_LOCAL_RANK"]
    if "OMPI_COMM_WORLD_LOCAL_SIZE" in env:
        values["PADDLE_LOCAL_SIZE"] = env["OMPI_COMM_WORLD_LOCAL_SIZE"]
    endpoints = derived_endpoints(env)
    if endpoints:
        values["PADDLE_TRAINER_ENDPOINTS"] = ",".join(endpoints)
        values["PADDLE_CURRENT_ENDPOINT"] = endpoints[info.rank]
    return values


def export_mpi_ranks(env=None) -> dict[str, str]:
    """Under ``mpirun``, sets Paddle's rank variables that are not set yet; returns those it set."""
    env = os.environ if env is None else env
    if "PADDLE_TRAINERS_NUM" in env and EXPORTED_FLAG not in env:
        return {}  # Paddle's launcher, or the user, said it already
    values = {k: v for k, v in paddle_variables(env).items() if k not in env or EXPORTED_FLAG in env}
    if not values:
        return {}
    env.update(values)
    env[EXPORTED_FLAG] = "1"
    if env is os.environ:
        _forget_cached_parallel_env()
    return values


def _forget_cached_parallel_env() -> None:
    """Paddle reads the variables once into a cached ``ParallelEnv``; if Paddle was imported
    (and asked) before us, the next use builds it again from the variables set now."""
    parallel = sys.modules.get("paddle.distributed.parallel")
    if parallel is not None and getattr(parallel, "_global_parallel_env", None) is not None:
        if not _initialized(parallel):
            parallel._global_parallel_env = None
    collective = sys.modules.get("paddle.distributed.collective")
    if collective is not None and getattr(collective, "_global_env", None) is not None:
        collective._global_env = None


def _initialized(parallel) -> bool:
    try:
        return bool(parallel.is_initialized())
    except Exception:  # noqa: BLE001 - an older Paddle without it
        return False
