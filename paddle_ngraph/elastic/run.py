"""``@elastic.run``: calls the training function again, from the last commit, after a rank is lost.

    @paddle_ngraph.elastic.run(min_ranks=2)
    def train(state):
        model = paddle_ngraph.DataParallel(state.model)      # binds the current group
        while state.step < steps:
            ... one step on this rank's shard for elastic.rank() of elastic.size() ...
            state.step += 1
            state.commit()

    train(state)

(A static program: ``program, (loss,) = state.transpile([loss], **keys)`` inside the function,
for ``State(program=main)``.)

On a lost rank (``RankLostError`` on some survivor; the others see the revoked communicator):
every survivor shrinks the group (MPI_Comm_shrink: they agree on who is left), takes the last
commit of the new rank 0, runs the reset callbacks and calls the function again. Below
``min_ranks`` survivors, the commit is written to ``State.checkpoint_dir`` and every survivor
raises ``TooFewRanksError`` with one message naming the ranks and the checkpoint.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import sys

from ..errors import RankLostError, TooFewRanksError
from .group import replace_group, start_group

log = logging.getLogger("paddle_ngraph.elastic")


def run(func=None, *, min_ranks: int = 1):
    """Decorator of a training function ``func(state, *args, **kwargs)``; see the module docstring."""
    if func is None:
        return functools.partial(run, min_ranks=min_ranks)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        transport = start_group()
        if state.commits == 0:
            state.commit()  # the starting point: what a loss before the first commit goes back to
        if transport is None:
            return func(state, *args, **kwargs)
        state.sync(transport)  # every rank starts from rank 0's state, whatever its seed
        while True:
            try:
                result = func(state, *args, **kwargs)
                transport.check_alive()  # a rank may have finished while another died: all agree first
                return result
            except Exception as error:
                if transport.lost is None and not isinstance(error, RankLostError):
                    raise  # not a lost rank: the user's error, as without elastic
                transport = _recover(transport, state, min_ranks)

    return wrapper


def _recover(transport, state, min_ranks: int):
    lost = transport.lost
    _end_without_finalize()
    survivors = transport.shrink()
    replace_group(survivors)
    gone = sorted(set(transport.world_ranks) - set(survivors.world_ranks))
    state.sync(survivors)
    where = f"commit {state.commits}"
    if survivors.size < min_ranks:
        path = None
        if state.checkpoint_dir is not None:
            path = state.save(rank=survivors.rank)
        path = survivors.broadcast_object(path, root=0)  # every survivor names it, once it is on disk
        on_disk = f"written to {path}" if path else "not written: State(checkpoint_dir=...) was not given"
        _ENDING["status"] = 1  # training stopped: the process fails, even if the error is caught
        raise TooFewRanksError(
            f"rank {survivors.rank} (world rank {survivors.world_ranks[survivors.rank]}): elastic training stopped: "
            f"lost world rank(s) {gone}; {survivors.size} rank(s) left (world ranks {survivors.world_ranks}), "
            f"below min_ranks={min_ranks}; the last commit ({where}) is {on_disk}") from None
    log.warning("rank %d (world rank %d): lost world rank(s) %s (%s); continuing on %d rank(s) (world ranks %s) "
                "from %s", survivors.rank, survivors.world_ranks[survivors.rank], gone, lost, survivors.size,
                survivors.world_ranks, where)
    state.reset()
    return survivors


_ENDING = {"armed": False, "status": 0}


def _end_without_finalize():
    """Once a rank is lost, this process ends without MPI_Finalize: Open MPI's finalize waits on
    every process of the job, the dead one included, and was seen to hang a survivor at exit (one
    run in four of the below-minimum test). The status is 1 after an uncaught exception or once
    training stopped below ``min_ranks``, else 0 (an explicit ``sys.exit(n)`` after a recovered
    loss ends with 0 too). Output is flushed first."""
    if _ENDING["armed"]:
        return
    _ENDING["armed"] = True
    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        _ENDING["status"] = 1
        previous_hook(kind, value, tb)

    sys.excepthook = excepthook

    def end():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(_ENDING["status"])

    atexit.register(end)  # after mpi4py's registration, so it runs first

