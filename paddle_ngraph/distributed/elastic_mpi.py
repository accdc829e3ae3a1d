"""The MPI transport of elastic jobs: collectives that report a dead rank, and a group that shrinks.

Under ``mpirun --with-ft ulfm`` (Open MPI's User-Level Failure Mitigation), a collective with a
dead participant returns MPI_ERR_PROC_FAILED instead of hanging or ending the job. Not every
survivor sees that error (one may have finished the collective before the death, another be
computing): the rank that sees it revokes the communicator, so that every survivor's next (or
current) operation on it fails with MPI_ERR_REVOKED. Each then raises ``RankLostError`` and
remembers it in ``lost``: the CPU backend's communication thread turns exceptions into messages,
so the elastic loop asks the transport, not the exception, whether a rank was lost.

``shrink()`` is MPI_Comm_shrink: the survivors agree on who is left and get a new communicator,
numbered in the order of their old ranks. The transport works over its own duplicate of
MPI_COMM_WORLD, so revoking it touches nothing else.

``grow(placement)`` is MPI_Comm_spawn of this process's own command line on the hosts given,
then MPI_Intercomm_merge: the group's members keep their ranks and the new processes follow.
A spawned process finds its parents with ``join()``. Members are named by "world rank" in
messages: their rank in the job mpirun started, and for spawned processes the numbers after
the highest given so far (a job of 3 whose rank 1 died and was replaced has world ranks 0, 2, 3).

The CPU backend's collectives run from C++ (``native_link``: flat MPI on a duplicate of the
group's communicator; no shared-memory or hierarchical path, which are bound to MPI_COMM_WORLD).
A failure there revokes that duplicate (native/cpu/src/mpi_communicator.cc), which wakes the
survivors waiting in it; ``failure_noticed`` then finds it revoked and marks the group lost.
"""
from __future__ import annotations

import functools
import logging
import os
import signal

from ..errors import ConfigError, RankLostError, TransportError
from .mpi import MpiTransport, import_mpi
from .transport import NativeLink

log = logging.getLogger("paddle_ngraph.distributed")
FT_ENV = "OMPI_MCA_mpi_ft_enable"  # what `mpirun --with-ft ulfm` sets in every rank
# Set in a spawned process's environment: its world rank (see the module's docstring), known
# before MPI starts, so that its logs can be named at once.
JOINED_RANK_ENV = "PADDLE_NGRAPH_ELASTIC_WORLD_RANK"
# The intercommunicators of spawns this process took part in: disconnected before MPI_Finalize
# (see ``disconnect_spawned``).
_SPAWN_LINKS: list = []


# ULFM's heartbeat failure detector (off by default): declares a rank failed when it stops
# answering without dying (a frozen process); each rank sends a heartbeat every second from a
# thread of its own and is suspected after 4 s of silence.
HEARTBEAT_OPTIONS = ("--mca mpi_ft_detector true --mca mpi_ft_detector_thread true --mca mpi_ft_detector_period 1 "
                     "--mca mpi_ft_detector_timeout 4")


def heartbeat_detector_enabled(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get("OMPI_MCA_mpi_ft_detector", "").lower() in ("1", "true", "yes", "on")


def fault_tolerance_enabled(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get(FT_ENV, "").lower() in ("1", "true", "yes", "on")


def _guarded(method):
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if self.lost is not None:
            raise RankLostError(self.lost)
        try:
            return method(self, *args, **kwargs)
        except Exception as error:
            if self._is_process_failure(error):
                self._mark_lost(method.__name__)
                raise RankLostError(self.lost) from None
            raise
    return run


class LostAtStartError(RankLostError):
    """A rank died before the elastic group was formed (no commit exists yet)."""


class ElasticMpiTransport(MpiTransport):
    name = "MPI (elastic)"
    # No stall watchdog: ULFM reports a dead rank, and the watchdog's side channel is hosted by
    # rank 0, which may be the rank lost; it would end the survivors (a hung, living rank is not
    # detected: see docs/elastic.md).
    stall_watchdog = False

    def __init__(self, comm=None, members: list[tuple] | None = None, next_world_rank: int | None = None):
        """``members``: ``member()`` of each rank of ``comm``, in rank order (None: gathered here);
        ``next_world_rank``: the world rank the next spawned process gets."""
        MPI = import_mpi()
        if comm is None:
            if not fault_tolerance_enabled():
                raise ConfigError("elastic training needs Open MPI's fault tolerance: start the job with "
                                  "`mpirun --with-ft ulfm ...` (without it mpirun ends every rank when one dies)")
            try:
                comm = MPI.COMM_WORLD.Dup()
                comm.Set_errhandler(MPI.ERRORS_RETURN)
                if members is None:
                    members = comm.allgather(member(MPI.COMM_WORLD.Get_rank()))
            except MPI.Exception as e:
                if e.Get_error_class() not in (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED):
                    raise
                error = LostAtStartError(
                    f"world rank {MPI.COMM_WORLD.Get_rank()}: a rank of the job died before the elastic group was "
                    f"formed ({e.Get_error_string()}); there is no commit to go back to: start the job again")
                error.survivors = _survivors_at_start(MPI, comm)
                raise error from None
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        super().__init__(comm)
        self.shared_memory = False
        if members is None:
            members = comm.allgather(member(MPI.COMM_WORLD.Get_rank()))
        self.members = [tuple(m) for m in members]
        # The world rank of each member: names survive renumbering in messages.
        self.world_ranks = [m[0] for m in self.members]
        self.hosts = [m[1] for m in self.members]  # where each member runs (MPI_Get_processor_name)
        self.next_world_rank = max(self.world_ranks) + 1 if next_world_rank is None else next_world_rank
        self.lost: str | None = None  # why this group is broken, once a rank of it was lost
        self.joined = False  # made by join(): this process was spawned into the group
        # Whether a rank of this group's past was lost: its survivors end without MPI_Finalize
        # (elastic/run.py), so nobody may wait for them at exit (a spawn's disconnect would).
        self.survived_loss = False
        self._native = None  # the duplicate of comm the CPU backend's collectives run on (native_link)

    # --- failures ------------------------------------------------------------------------------
    def _is_process_failure(self, error: BaseException) -> bool:
        MPI = self.MPI
        failure_classes = {MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED}
        seen = error
        while seen is not None:  # MpiTransport re-raises MPI errors as TransportError (from None)
            if isinstance(seen, MPI.Exception) and seen.Get_error_class() in failure_classes:
                return True
            seen = seen.__context__
        return self._revoked()

    def _mark_lost(self, where: str):
        lost = self.failed_world_ranks()
        who = f"world rank(s) {lost}" if lost else "a rank (named by the survivor that saw it first)"
        self.lost = (f"rank {self.rank} (world rank {self.world_ranks[self.rank]}): {where} failed: lost {who} "
                     f"of the group of {self.size} (world ranks {self.world_ranks})")
        try:
            self.comm.Revoke()  # wakes the survivors still waiting in, or yet to enter, a collective
        except self.MPI.Exception:
            pass  # already revoked by another survivor

    def failure_noticed(self) -> bool:
        """Whether this process knows of a lost rank: one of its collectives here failed, or the
        native path's communicator was revoked (by this process's or another survivor's CPU backend,
        whose AllReduce saw the failure)."""
        if self.lost is None and self._native is not None and _is_revoked(self.MPI, self._native):
            self._mark_lost("the CPU backend's collective")
        return self.lost is not None

    def failed_world_ranks(self) -> list[int]:
        """The world ranks of the members this rank knows to have failed."""
        MPI = self.MPI
        try:
            failed = self.comm.Get_failed()
            ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), self.comm.Get_group())
            failed.Free()
        except MPI.Exception:
            return []
        return sorted(self.world_ranks[r] for r in ranks if r != MPI.UNDEFINED)

    def check_alive(self):
        """A fault-tolerant agreement over the group (MPI_Comm_agree): returns if every member is
        alive, else raises RankLostError on every survivor alike. Ends a run: a rank that finished
        while another died would otherwise leave the survivors' recovery one member short."""
        if self.failure_noticed():
            raise RankLostError(self.lost)
        try:
            self.comm.Agree(1)
        except self.MPI.Exception as error:
            if not self._is_process_failure(error):
                raise
            self._mark_lost("the final agreement")
            raise RankLostError(self.lost) from None

    def shrink(self) -> "ElasticMpiTransport":
        """The group of the survivors (MPI_Comm_shrink, fault tolerant and agreed by all of them),
        numbered in the order of their ranks here. Collective over the survivors."""
        MPI = self.MPI
        if self.lost is None:
            self._mark_lost("shrink")
        comm = self.comm
        while True:
            survivors = comm.Shrink()
            survivors.Set_errhandler(MPI.ERRORS_RETURN)
            try:
                members = survivors.allgather(self.members[self.rank])
                break
            except MPI.Exception as error:  # another member died since the shrink: shrink again
                if error.Get_error_class() not in (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED):
                    raise
                try:
                    survivors.Revoke()
                except MPI.Exception:
                    pass
                comm = survivors  # left unfreed: freeing a revoked communicator is not needed to go on
        self.close()
        smaller = ElasticMpiTransport(survivors, members, self.next_world_rank)
        smaller.survived_loss = True
        return smaller

    def grow(self, placement: list[tuple[str, int]], command: list[str], workdir: str) -> "ElasticMpiTransport":
        """The group with new processes: ``count`` of ``command`` (argv, the interpreter first) on
        each ``(host, count)`` of ``placement``, started by MPI_Comm_spawn_multiple and merged after
        the members, who keep their ranks. Collective over the group; the new processes call
        ``join()``. This transport stays usable: the caller closes it once the new group works."""
        MPI = self.MPI
        total = sum(count for _, count in placement)
        new_ranks = list(range(self.next_world_rank, self.next_world_rank + total))
        placed = [host for host, count in placement for _ in range(count)]
        infos = []
        # One entry per process, each with its own environment naming its world rank.
        for host, world in zip(placed, new_ranks):
            info = MPI.Info.Create()
            # A host of the group is in mpirun's allocation; another must be added to it.
            known = host.split(".", 1)[0] in {h.split(".", 1)[0] for h in self.hosts}
            info.Set("host" if known else "add-host", host)
            info.Set("wdir", workdir)
            info.Set("PMIX_ENVAR", f"{JOINED_RANK_ENV}={world}")
            infos.append(info)
        try:
            spawned = self.comm.Spawn_multiple([command[0]] * total, [command[1:]] * total, [1] * total, infos,
                                               root=0)
        except MPI.Exception as error:
            if self._is_process_failure(error):
                self._mark_lost("spawning new ranks")
                raise RankLostError(self.lost) from None
            raise TransportError(f"rank {self.rank}: could not start {total} new rank(s) on "
                                 f"{placement}: {error}") from None
        finally:
            for info in infos:
                info.Free()
        _SPAWN_LINKS.append(spawned)
        merged = spawned.Merge(high=False)
        merged.Set_errhandler(MPI.ERRORS_RETURN)
        members = merged.allgather(self.members[self.rank])
        next_world_rank, survived_loss = merged.bcast((self.next_world_rank + total, self.survived_loss), root=0)
        bigger = ElasticMpiTransport(merged, members, next_world_rank)
        bigger.survived_loss = survived_loss
        return bigger

    @classmethod
    def join(cls) -> "ElasticMpiTransport | None":
        """In a process that ``grow`` spawned: the group it joins (collective with the group's
        ``grow``); None in a process mpirun started."""
        MPI = import_mpi()
        parent = MPI.Comm.Get_parent()
        if parent == MPI.COMM_NULL:
            return None
        _SPAWN_LINKS.append(parent)
        merged = parent.Merge(high=True)
        merged.Set_errhandler(MPI.ERRORS_RETURN)
        # This process's world rank is the one its spawn environment names (grow numbers them in
        # the order they are merged in).
        members = merged.allgather(member(int(os.environ[JOINED_RANK_ENV])))
        next_world_rank, survived_loss = merged.bcast(None, root=0)
        transport = cls(merged, members, next_world_rank)
        transport.joined = True
        transport.survived_loss = survived_loss
        return transport

    def fence(self, lost_world_ranks: list[int]):
        """Ends (SIGKILL) the processes of ``lost_world_ranks`` that run on this host and are still
        there: a rank the others declared lost because it stopped answering (frozen, its network
        cut) must not come back into a group that went on without it, and mpirun waits for every
        process before it ends. Ranks on other hosts are out of reach from here."""
        here = self.hosts[self.rank]
        for world, host, pid, started in self.members:
            if world in lost_world_ranks and host == here and started is not None and _started(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                    log.warning("rank %d: ended world rank %d (pid %d on this host), lost to the group but still "
                                "running", self.rank, world, pid)
                except OSError:
                    pass

    # --- the collectives, each reporting a lost rank as RankLostError ------------------------------
    allreduce = _guarded(MpiTransport.allreduce)
    broadcast = _guarded(MpiTransport.broadcast)
    allgather = _guarded(MpiTransport.allgather)
    reduce_scatter = _guarded(MpiTransport.reduce_scatter)
    alltoall = _guarded(MpiTransport.alltoall)
    send = _guarded(MpiTransport.send)
    recv = _guarded(MpiTransport.recv)
    barrier = _guarded(MpiTransport.barrier)
    allgather_object = _guarded(MpiTransport.allgather_object)

    @_guarded
    def broadcast_object(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def abort(self, message: str):
        """After a lost rank the step's error goes to ``elastic.run``, which recovers; any other
        error ends the job as on every transport."""
        if not self.failure_noticed() and not self._revoked():
            super().abort(message)

    def _revoked(self) -> bool:
        try:
            return bool(self.comm.Is_revoked())
        except self.MPI.Exception:
            return True

    def set_hierarchical(self, mode: str = "auto") -> bool:
        return False  # the node and leader communicators would need shrinking too

    def native_link(self) -> NativeLink:
        """Flat MPI from C++ on a duplicate of the group's communicator, made at the first link
        (every rank links its executable at the same step, as for the other transports)."""
        if self._native is None:
            self._native = self.comm.Dup()
            self._native.Set_errhandler(self.MPI.ERRORS_RETURN)
        return NativeLink("mpi-comm", (self.MPI._handleof(self._native),))

    def close(self):
        # A revoked duplicate holds dead members: it is dropped, not freed (freeing is collective).
        if self._native is not None and self.lost is None:
            self._native.Free()
        self._native = None
        super().close()

    def __repr__(self):
        return f"<{self.name} transport rank {self.rank} of {self.size}, world ranks {self.world_ranks}>"


def _survivors_at_start(MPI, comm):
    """The survivors of a loss before the group formed, agreed by all of them (MPI_Comm_shrink of
    MPI_COMM_WORLD), or None if that failed too. Revoking first wakes a survivor still waiting in
    the duplicate or the gather. The survivors meet on it again at exit (elastic/run.py): mpirun
    ends the job when one of them exits with an error, and a survivor that had not yet noticed
    the loss was seen killed that way before it could say why."""
    for broken in (MPI.COMM_WORLD, comm):
        if broken is None:
            continue
        try:
            broken.Revoke()
        except MPI.Exception:
            pass  # already revoked by another survivor
    try:
        return MPI.COMM_WORLD.Shrink()
    except MPI.Exception:
        return None


def member(world_rank: int) -> tuple:
    """What the group knows of a member: (world rank, host, pid, start time of the process in clock
    ticks since boot, None where /proc does not say)."""
    MPI = import_mpi()
    return world_rank, MPI.Get_processor_name(), os.getpid(), _started(os.getpid())


def _started(pid: int):
    """The start time of process ``pid`` (field 22 of /proc/<pid>/stat): with the pid, names one
    process, not a later one given the same pid. None if it is gone or /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _is_revoked(MPI, comm) -> bool:
    try:
        return bool(comm.Is_revoked())
    except MPI.Exception:
        return True


def spawned_links() -> bool:
    """Whether this process took part in a spawn (as parent or as the spawned process)."""
    return bool(_SPAWN_LINKS)


def disconnect_spawned():
    """Disconnects the spawns' intercommunicators, collectively with their other sides. Called at
    exit, before MPI_Finalize, when no rank was lost: Open MPI 5's finalize otherwise disconnects
    them itself and was seen to crash there (a segmentation fault in ``ompi_dpm_dyn_finalize``)
    between processes that had not yet exchanged a message."""
    MPI = import_mpi()
    while _SPAWN_LINKS:
        link = _SPAWN_LINKS.pop()
        try:
            link.Disconnect()
        except MPI.Exception as error:
            log.warning("disconnecting from spawned ranks at exit: %s", error)
