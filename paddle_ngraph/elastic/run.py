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

With ``max_ranks`` and ``discovery`` the group also grows (growth.py): after a commit, where the
hosts that discovery lists have room, new processes of this command line start, take the commit
and join; every rank then calls the function again on the larger group.

Under ``paddle.distributed.launch`` no group survives a loss (the launcher stops every rank); with
an etcd master and ``--max_restart`` it starts every rank again, and each resumes here from the
newest commit in ``State.checkpoint_dir`` (``_resume_from_disk``), on the group it comes up with.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import sys

from ..checkpoint import checkpoint_step, latest_checkpoint
from ..distributed import detect_launcher
from ..distributed.elastic_mpi import HEARTBEAT_OPTIONS, heartbeat_detector_enabled
from ..errors import ConfigError, RankLostError, TooFewRanksError
from .group import replace_group, start_group
from . import resize
from .growth import GroupGrew, Growth

log = logging.getLogger("paddle_ngraph.elastic")


def run(func=None, *, min_ranks: int = 1, max_ranks: int | None = None, discovery=None,
        discovery_interval: float = 1.0, on_resize: str | None = None):
    """Decorator of a training function ``func(state, *args, **kwargs)``; see the module docstring.

    ``min_ranks``: below this many survivors, stop (the commit on disk). ``max_ranks`` and
    ``discovery`` (a host discovery script's path, or a callable returning its lines: ``host:slots``
    each): grow the group up to ``max_ranks`` onto the hosts discovery lists, checked after a commit
    at most every ``discovery_interval`` seconds. ``on_resize``: None, ``"scale_lr"`` or
    ``"accumulate"``, what changes with the group's size (resize.py)."""
    if func is None:
        return functools.partial(run, min_ranks=min_ranks, max_ranks=max_ranks, discovery=discovery,
                                 discovery_interval=discovery_interval, on_resize=on_resize)
    resize.check_policy(on_resize)
    growth = None
    if max_ranks is not None or discovery is not None:
        if max_ranks is None or discovery is None:
            raise ConfigError("elastic.run: ranks join with both max_ranks and discovery (a host discovery "
                              "script or callable); give both or neither")
        if max_ranks < max(min_ranks, 1):
            raise ConfigError(f"elastic.run: max_ranks={max_ranks} is below min_ranks={min_ranks}")
        growth = Growth(max_ranks, discovery, discovery_interval)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        try:
            transport = start_group(growable=growth is not None)
        except RankLostError as error:
            # A rank died before the group formed: every survivor raises this, and ends without
            # MPI_Finalize (which would wait for the dead rank), so that mpirun ends too; the
            # survivors leave together, each having said why.
            _arm_exit(lost=True)
            _ENDING["meet"] = getattr(error, "survivors", None)
            _ENDING["status"] = 1  # whatever the caller does with the error: the job failed
            raise
        launch = detect_launcher()
        resumed = transport is None and launch.launcher == "paddle" and _resume_from_disk(state, launch)
        if state.commits == 0:
            state.commit()  # the starting point: what a loss before the first commit goes back to
        resize.set_current(on_resize, state.initial_size)
        if transport is None:
            _without_elastic_group(growth, state)
            if resumed and state.committed_size not in (None, launch.size):
                resize.apply(on_resize, state, state.committed_size, state.initial_size, launch.size, launch.rank)
            return func(state, *args, **kwargs)
        state.sync(transport)  # every rank starts from rank 0's state, whatever its seed
        resize.set_current(on_resize, state.initial_size)
        if transport.joined:
            _arm_exit(lost=transport.survived_loss)  # the group's survivors of a loss end without finalize
            log.warning("world rank %d joined as rank %d of %d (world ranks %s) at commit %d",
                        transport.world_ranks[transport.rank], transport.rank, transport.size,
                        transport.world_ranks, state.commits)
            resize.apply(on_resize, state, state.committed_size, state.initial_size, transport.size, transport.rank)
        elif transport.rank == 0 and not heartbeat_detector_enabled():
            log.warning("elastic.run: a rank that stops answering without dying (a frozen process) is not "
                        "detected: the others wait for it. Start mpirun with ULFM's heartbeat detector: %s",
                        HEARTBEAT_OPTIONS)
        state.bind_growth(growth)
        while True:
            try:
                result = func(state, *args, **kwargs)
                transport.check_alive()  # a rank may have finished while another died: all agree first
                return result
            except GroupGrew as grew:
                transport = _grown(transport, grew, state, on_resize)
            except Exception as error:
                if not transport.failure_noticed() and not isinstance(error, RankLostError):
                    raise  # not a lost rank: the user's error, as without elastic
                transport = _recover(transport, state, min_ranks, on_resize)

    return wrapper


def _resume_from_disk(state, launch) -> bool:
    """Under ``paddle.distributed.launch``: the newest complete commit in ``State.checkpoint_dir``,
    loaded if it is newer than the state's. With an etcd master and ``--max_restart``, Paddle's
    launcher answers a dead rank by stopping the others and starting every rank again, each from
    the script's beginning: this is where they pick up, torchrun-like, on the group size they come
    up with. Every rank reads the same directory, which nothing writes while the group starts (the
    launcher stops the old ranks before it starts new ones): they load the same commit."""
    newest = latest_checkpoint(state.checkpoint_dir) if state.checkpoint_dir is not None else None
    if newest is None or checkpoint_step(newest) <= state.commits:
        return False  # nothing saved yet, or the caller loaded it (or committed past it) already
    commit = state.load()
    log.warning("rank %d of %d: resumed from commit %d in %s (taken on %s rank(s)); values %s",
                launch.rank, launch.size, commit, state.checkpoint_dir, state.committed_size or "?", state._values)
    return True


def _without_elastic_group(growth, state):
    """One process, or ranks that no elastic group can hold: under ``paddle.distributed.launch``
    the function runs as plain data parallel over the launcher's transport (its engines make the
    ranks' parameters equal at their first step, as always). Paddle 3.3.1's launcher stops every
    other rank when one dies (SIGTERM, then SIGKILL after 3 s); with an etcd master and
    ``--max_restart`` it then starts every rank again, and they resume from the newest commit on
    disk (``_resume_from_disk``); without one it restarts nothing."""
    launch = detect_launcher()
    if launch.size > 1 and launch.rank == 0:
        where = "paddle.distributed.launch" if launch.launcher == "paddle" else launch.launcher
        if state.checkpoint_dir is None:
            restart = ("commits are not written to disk (no State(checkpoint_dir=...)): a restart starts over")
        else:
            restart = (f"a restart (an etcd master and --max_restart) resumes every rank from the newest commit "
                       f"saved in {state.checkpoint_dir} (commit(save=True))")
        log.warning("elastic.run under %s: a lost rank ends the group (Paddle's launcher stops the other ranks)%s; "
                    "training runs as plain data parallel; %s. To survive a loss in place, start it with "
                    "`mpirun --with-ft ulfm`", where, "; ranks cannot join either" if growth is not None else "",
                    restart)


def _grown(transport, grew: GroupGrew, state, on_resize):
    _arm_exit()
    bigger = grew.transport
    replace_group(bigger)
    transport.close()
    state.sync(bigger)  # the new ranks take the commit just made
    log.warning("rank %d (world rank %d): world rank(s) %s joined; continuing on %d rank(s) (world ranks %s) "
                "from commit %d", bigger.rank, bigger.world_ranks[bigger.rank], grew.joined, bigger.size,
                bigger.world_ranks, state.commits)
    resize.apply(on_resize, state, state.committed_size, state.initial_size, bigger.size, bigger.rank)
    state.reset()
    return bigger


def _recover(transport, state, min_ranks: int, on_resize=None):
    """Shrinks the group, restores the commit, runs the reset callbacks; again, from the smaller
    group, when another rank is lost meanwhile."""
    lost = transport.lost
    _arm_exit(lost=True)
    before = transport.world_ranks
    while True:
        survivors = transport.shrink()
        replace_group(survivors)
        transport.fence(sorted(set(transport.world_ranks) - set(survivors.world_ranks)))
        try:
            _restore(survivors, state, min_ranks, sorted(set(before) - set(survivors.world_ranks)), lost, on_resize)
            return survivors
        except RankLostError as again:
            log.warning("rank %d (world rank %d): a rank was lost during the recovery (%s); shrinking again",
                        survivors.rank, survivors.world_ranks[survivors.rank], again)
            transport = survivors


def _restore(survivors, state, min_ranks: int, gone: list[int], lost: str, on_resize=None):
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
    resize.apply(on_resize, state, state.committed_size, state.initial_size, survivors.size, survivors.rank)
    state.reset()


# "meet": a communicator of the survivors to pass a barrier on before leaving (or None).
_ENDING = {"armed": False, "lost": False, "status": 0, "meet": None}


def _arm_exit(lost: bool = False):
    """How this process ends once its group changed.

    After a lost rank it ends without MPI_Finalize: Open MPI's finalize waits on every process of
    the job, the dead one included, and was seen to hang a survivor at exit (one run in four of the
    below-minimum test). The status is 1 after an uncaught exception or once training stopped below
    ``min_ranks``, else 0 (an explicit ``sys.exit(n)`` after a recovered loss ends with 0 too).
    Output is flushed first. After ranks joined (and none was lost), the spawns' links are
    disconnected, then MPI finalizes as usual."""
    _ENDING["lost"] = _ENDING["lost"] or lost
    if _ENDING["armed"]:
        return
    _ENDING["armed"] = True
    from ..distributed.mpi import disarm_abort_on_uncaught_exception

    disarm_abort_on_uncaught_exception()  # an elastic job goes on without a rank that ended
    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        _ENDING["status"] = 1
        previous_hook(kind, value, tb)

    sys.excepthook = excepthook

    def end():
        if not _ENDING["lost"]:
            from ..distributed.elastic_mpi import disconnect_spawned

            disconnect_spawned()
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        if _ENDING["meet"] is not None:
            _meet_before_leaving(_ENDING["meet"])
        os._exit(_ENDING["status"])

    atexit.register(end)  # after mpi4py's registration, so it runs first


def _meet_before_leaving(survivors):
    """A barrier of the survivors; a failure there (another loss) just ends the wait."""
    from mpi4py import MPI

    try:
        survivors.Set_errhandler(MPI.ERRORS_RETURN)
        survivors.Barrier()
    except MPI.Exception:
        pass
