"""The current group of an elastic job: the transport every collective of this process goes
over, replaced by the survivors' group after a rank is lost."""
from __future__ import annotations

from ..distributed import detect_launcher
from ..distributed.bootstrap import pin_transport, pinned_transport


def start_group(growable: bool = False):
    """The elastic MPI transport, pinned (DataParallel and transpile then use it): in a process
    that a growing group spawned, that group; else over every rank mpirun started. The current one
    if already started; None in a one-process job that cannot grow."""
    current = pinned_transport()
    if current is not None:
        return current
    from ..distributed.elastic_mpi import ElasticMpiTransport

    launcher = detect_launcher()
    if launcher.launcher != "mpirun":
        return None  # one process (a group grows by MPI_Comm_spawn, under mpirun only)
    transport = ElasticMpiTransport.join()
    if transport is None:
        if launcher.size == 1 and not growable:
            return None
        transport = ElasticMpiTransport()
    pin_transport(transport)
    return transport


def replace_group(transport):
    pin_transport(transport)


def current_rank() -> int:
    """This process's rank in the current group (renumbered after a loss)."""
    transport = pinned_transport()
    return transport.rank if transport is not None else detect_launcher().rank


def current_size() -> int:
    """How many ranks the current group has."""
    transport = pinned_transport()
    return transport.size if transport is not None else detect_launcher().size


def current_transport():
    """The current group's transport (None in a one-process job)."""
    return pinned_transport()
