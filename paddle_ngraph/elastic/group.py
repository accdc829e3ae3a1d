"""The current group of an elastic job: the transport every collective of this process goes
over, replaced by the survivors' group after a rank is lost."""
from __future__ import annotations

from ..distributed import detect_launcher
from ..distributed.bootstrap import pin_transport, pinned_transport


def start_group():
    """The elastic MPI transport over every rank mpirun started, pinned (DataParallel and transpile
    then use it); the current one if already started; None in a one-process job."""
    current = pinned_transport()
    if current is not None:
        return current
    if detect_launcher().size == 1:
        return None
    from ..distributed.elastic_mpi import ElasticMpiTransport

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
