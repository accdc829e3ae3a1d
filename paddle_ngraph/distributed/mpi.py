"""The MPI transport, over mpi4py and the Open MPI from PyPI, for jobs started by ``mpirun``.

MPI has no float16 or bfloat16 datatype: those are reduced with a user-defined
MPI operation that computes in float32 and rounds once, so every rank gets the
same bits. ``avg`` is a sum followed by one multiplication by 1/size, applied
identically on every rank. MPI is initialized by mpi4py on import and finalized
by it at exit only if it initialized it, as nGraph's MPI backend did.

The CPU backend's native path reduces in C++: when every rank runs on one node, over shared
memory (``Transport.shared_memory``); else with MPI_Allreduce.

Hierarchical allreduce (``set_hierarchical``): when ranks span several hosts, a reduce to
one leader per node (over shared memory), an allreduce among the leaders (the only traffic
between hosts) and a broadcast within each node. A node is a host name, or
``PADDLE_NGRAPH_NODE_ID`` where set (for tests and odd topologies).
"""
from __future__ import annotations

import functools
import logging
import os
import sys
import time

import numpy as np

from ..errors import ConfigError, TransportError
from .registry import TransportSpec, register_transport
from .transport import NativeLink, Transport

log = logging.getLogger("paddle_ngraph.distributed")
NODE_ID_ENV = "PADDLE_NGRAPH_NODE_ID"
HIERARCHICAL_MODES = ("auto", "on", "off")


def import_mpi():
    """mpi4py, bound to the MPI library of the launcher that started us.

    mpi4py's wheel picks an MPI library at import; with the Intel MPI runtime
    installed (it ships the libfabric oneCCL needs) it would pick Intel MPI even
    under Open MPI's mpirun, leaving every process a singleton.
    """
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        os.environ.setdefault("MPI4PY_MPIABI", "openmpi")
        # A rank waiting in a collective for a slower peer yields its core instead of spinning: the CPU
        # backend's communication thread waits there while the same rank's backward pass computes.
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        _preload_openmpi_libfabric()
    from mpi4py import MPI

    return MPI


def _preload_openmpi_libfabric():
    """Open MPI's libmpi looks for libfabric.so.1 in its own folder first, where the Intel MPI
    runtime wheel (a dependency of oneccl-cpu) puts an older copy; loading Open MPI's copy first
    makes the loader bind libmpi to it by soname."""
    import ctypes
    import sys

    path = os.path.join(sys.prefix, "lib", "openmpi", "libfabric.so.1")
    if os.path.exists(path):
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(values: np.ndarray) -> np.ndarray:
    # Round to nearest even, as Paddle's bfloat16 conversion does.
    bits = values.astype(np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


_NUMPY_REDUCE = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


class MpiTransport(Transport):
    name = "MPI"

    def __init__(self, comm=None):
        try:
            MPI = import_mpi()
        except ImportError as e:  # pragma: no cover - mpi4py is a dependency
            raise TransportError(f"the MPI transport needs mpi4py: {e}") from None
        self.MPI = MPI
        self.comm = comm or MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._half_ops = {}
        self.topology: NodeTopology | None = None
        self.hierarchical = False  # set by set_hierarchical; flat MPI_Allreduce until then
        self._group_native = None  # native_group_link's duplicate of comm

    def set_hierarchical(self, mode: str = "auto") -> bool:
        """Chooses flat or hierarchical allreduce; collective (every rank calls it). ``auto``: hierarchical
        when ranks span more than one node and some node has more than one rank. Returns the choice."""
        if mode not in HIERARCHICAL_MODES:
            raise ConfigError(f"unknown hierarchical mode {mode!r}; valid: {', '.join(HIERARCHICAL_MODES)}")
        if self.topology is None:
            self.topology = NodeTopology(self.comm, self.MPI)
        if mode == "auto":
            self.hierarchical = self.topology.nodes > 1 and self.topology.largest_node > 1
        else:
            self.hierarchical = mode == "on"
        if self.hierarchical:
            self.topology.native_handles()  # the duplicates for the native path, now, while all ranks are here
        if self.rank == 0:
            log.info("rank 0: %s allreduce (hierarchical=%s; %d node(s) of %s rank(s))",
                     "hierarchical" if self.hierarchical else "flat", mode, self.topology.nodes,
                     "/".join(map(str, self.topology.node_sizes)))
        return self.hierarchical

    def native_group_link(self) -> NativeLink:
        """Collectives named by a group of these ranks from C++ (flat MPI), on a duplicate of this
        communicator made on first use: collective over its ranks, which link their executables at
        the same step (their first call), groups in the order of ``make_groups``."""
        if self._group_native is None:
            self._group_native = self.comm.Dup()
        return NativeLink("mpi-group", (self.MPI._handleof(self._group_native),))

    def _make_group(self, ranks):
        """A communicator of ``ranks`` by MPI_Comm_create_group: collective over those ranks only,
        so each group is made by its members alone (tagged by its first rank, so that groups made
        at the same time by different members never match each other's messages)."""
        try:
            comm = self.comm.Create_group(self.comm.Get_group().Incl(list(ranks)), tag=ranks[0])
        except self.MPI.Exception as e:
            raise TransportError(f"rank {self.rank}: making the communicator of group {ranks} failed: "
                                 f"{e.Get_error_string()}") from None
        return MpiGroupTransport(comm, ranks, self)

    def native_link(self) -> NativeLink:
        """The CPU backend's own MPI communicator (native/cpu/src/mpi_communicator.cc), hierarchical
        over ``native_comms`` when they are set, where the backend is built with MPI."""
        return NativeLink("mpi", self.native_comms())

    def native_comms(self) -> tuple[int, int]:
        """Handles (MPI_Comm as integers) of the node and leaders communicators for the native path,
        duplicates of the Python ones so that the two paths never share a communicator; (0, 0): flat.
        The leaders handle is 0 on ranks that are not their node's leader."""
        if not self.hierarchical:
            return 0, 0
        return self.topology.native_handles()

    def _op(self, reduction: str, dtype: np.dtype, bfloat16: bool):
        MPI = self.MPI
        if dtype in (np.float16,) or bfloat16:
            key = (reduction, "bf16" if bfloat16 else "f16")
            if key not in self._half_ops:
                self._half_ops[key] = MPI.Op.Create(self._half_reducer(reduction, bfloat16), commute=True)
            return self._half_ops[key]
        return {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}[reduction]

    @staticmethod
    def _half_reducer(reduction: str, bfloat16: bool):
        combine = _NUMPY_REDUCE[reduction]

        def reduce(inbuf, inoutbuf, datatype):
            if bfloat16:
                a = np.frombuffer(inbuf, dtype=np.uint16)
                b = np.frombuffer(inoutbuf, dtype=np.uint16)
                b[:] = _f32_to_bf16(combine(_bf16_to_f32(a), _bf16_to_f32(b)))
            else:
                a = np.frombuffer(inbuf, dtype=np.float16)
                b = np.frombuffer(inoutbuf, dtype=np.float16)
                b[:] = combine(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)

        return reduce

    def _mpi_type(self, dtype: np.dtype, bfloat16: bool):
        if dtype == np.float16 or bfloat16:
            return self.MPI.UINT16_T if bfloat16 else self.MPI.SHORT  # opaque 16-bit payload for the custom op
        return self.MPI._typedict[dtype.char]

    def allreduce(self, array, reduction="sum", name="", bfloat16=False):
        self.check_reduction(reduction)
        array = np.ascontiguousarray(array)
        if array.dtype == np.uint16 and not bfloat16:
            raise TransportError(f"rank {self.rank}: tensor '{name}' has dtype uint16; pass bfloat16=True for bfloat16 data")
        out = np.empty_like(array)
        base = "sum" if reduction == "avg" else reduction
        mpi_type = self._mpi_type(array.dtype, bfloat16)
        op = self._op(base, array.dtype, bfloat16)
        try:
            if self.hierarchical:
                self._hierarchical_allreduce(array, out, mpi_type, op)
            else:
                self.comm.Allreduce([array, mpi_type], [out, mpi_type], op=op)
        except self.MPI.Exception as e:
            kind = "hierarchical allreduce" if self.hierarchical else "MPI_Allreduce"
            raise TransportError(f"rank {self.rank}: {kind} of tensor '{name}' ({array.dtype}, "
                                 f"{array.size} elements) failed: {e.Get_error_string()}") from None
        if reduction == "avg":
            out = _average(out, self.size, bfloat16)
        return out

    def _hierarchical_allreduce(self, array, out, mpi_type, op):
        """Reduce to the node leader, allreduce among leaders, broadcast within the node: every rank
        ends with the leader's bits. ``avg`` divides afterwards, once, as the flat path does."""
        node, leaders = self.topology.node_comm, self.topology.leaders_comm
        if node.Get_rank() == 0:
            out[...] = array
            node.Reduce(self.MPI.IN_PLACE, [out, mpi_type], op=op, root=0)
            if leaders is not None and leaders.Get_size() > 1:
                leaders.Allreduce(self.MPI.IN_PLACE, [out, mpi_type], op=op)
        else:
            node.Reduce([array, mpi_type], None, op=op, root=0)
        node.Bcast([out, mpi_type], root=0)

    def broadcast(self, array, root=0):
        self.comm.Bcast(np.ascontiguousarray(array).view(np.uint8), root=root)
        return array

    def allgather(self, array, out=None):
        array = np.ascontiguousarray(array)
        out = self._allgather_output(array, self.size, out)
        self.comm.Allgather(array.view(np.uint8), out.view(np.uint8))
        return out

    def reduce_scatter(self, array, reduction="sum"):
        """MPI_Reduce_scatter_block: half an allreduce's traffic (ZeRO-1 sends the other half as
        the allgather of the updated parameters)."""
        self.check_reduction(reduction)
        array = np.ascontiguousarray(array)
        if array.shape[0] % self.size or array.dtype.kind not in "fiu" or array.dtype == np.float16:
            return super().reduce_scatter(array, reduction)
        out = np.empty((array.shape[0] // self.size,) + array.shape[1:], dtype=array.dtype)
        base = "sum" if reduction == "avg" else reduction
        mpi_type = self._mpi_type(array.dtype, False)
        try:
            self.comm.Reduce_scatter_block([array, mpi_type], [out, mpi_type], op=self._op(base, array.dtype, False))
        except self.MPI.Exception as e:
            raise TransportError(f"rank {self.rank}: MPI_Reduce_scatter_block ({array.dtype}, {array.size} elements) "
                                 f"failed: {e.Get_error_string()}") from None
        return _average(out, self.size, False) if reduction == "avg" else out

    def alltoall(self, array):
        flat = self._alltoall_input(array)
        out = np.empty_like(flat)
        try:
            self.comm.Alltoall(flat.view(np.uint8), out.view(np.uint8))
        except self.MPI.Exception as e:
            raise TransportError(f"rank {self.rank}: MPI_Alltoall ({flat.dtype}, {flat.size} elements) "
                                 f"failed: {e.Get_error_string()}") from None
        return out

    def send(self, array, peer, tag=0):
        self.comm.Send(np.ascontiguousarray(array).view(np.uint8), dest=peer, tag=tag)

    def recv(self, array, peer, tag=0):
        self.comm.Recv(array.view(np.uint8), source=peer, tag=tag)

    def barrier(self):
        self.comm.Barrier()

    def allgather_object(self, obj):
        return self.comm.allgather(obj)

    def end_job(self):
        self.comm.Abort(1)

    def close(self):
        self._close_groups()
        if self._group_native is not None:
            self._group_native.Free()
            self._group_native = None
        for op in self._half_ops.values():
            op.Free()
        self._half_ops.clear()
        if self.topology is not None:
            self.topology.free()
            self.topology = None
            self.hierarchical = False


class MpiGroupTransport(MpiTransport):
    """The MPI transport over a group of the job's ranks (``Transport.group``): its own communicator,
    flat collectives; its ``rank`` and ``size`` are within the group, ``ranks`` the global ones."""

    def __init__(self, comm, ranks: tuple[int, ...], parent: MpiTransport):
        super().__init__(comm)
        self.ranks = ranks
        self.parent = parent

    def set_hierarchical(self, mode: str = "auto") -> bool:
        return False

    def native_link(self):
        return None  # the job's transport links the executor; this group: native_group_link

    def group(self, ranks):
        raise TransportError(f"group {self.ranks}: groups are made from the job's transport")

    def end_job(self):
        self.parent.end_job()

    def close(self):
        super().close()
        if self.comm is not None:
            self.comm.Free()
            self.comm = None

    def __repr__(self):
        return f"<MPI transport group {self.ranks}: rank {self.rank} of {self.size}>"


def node_key(MPI) -> str:
    """What identifies this rank's node: ``PADDLE_NGRAPH_NODE_ID`` if set, else the host name."""
    override = os.environ.get(NODE_ID_ENV, "").strip()
    return f"id:{override}" if override else f"host:{MPI.Get_processor_name()}"


class NodeTopology:
    """The ranks of ``comm`` grouped by node: a communicator per node (its rank 0 is the leader)
    and one of the leaders. Built collectively."""

    def __init__(self, comm, MPI):
        keys = comm.allgather(node_key(MPI))
        order = sorted(set(keys), key=keys.index)  # nodes numbered by their lowest rank
        self.nodes = len(order)
        self.node_sizes = [keys.count(k) for k in order]
        self.largest_node = max(self.node_sizes)
        self.node_index = order.index(keys[comm.Get_rank()])
        self.node_comm = comm.Split(self.node_index, key=comm.Get_rank())
        is_leader = self.node_comm.Get_rank() == 0
        leaders = comm.Split(0 if is_leader else MPI.UNDEFINED, key=comm.Get_rank())
        self.leaders_comm = leaders if is_leader else None
        self._MPI = MPI
        self._native = None

    def native_handles(self) -> tuple[int, int]:
        if self._native is None:  # collective over the node (and the leaders), once
            node = self.node_comm.Dup()
            leaders = self.leaders_comm.Dup() if self.leaders_comm is not None else None
            self._native = (node, leaders)
        node, leaders = self._native
        handle = self._MPI._handleof
        return handle(node), handle(leaders) if leaders is not None else 0

    def free(self):
        comms = [self.node_comm, self.leaders_comm, *(self._native or ())]
        for comm in comms:
            if comm is not None:
                comm.Free()
        self._native = None


def _average(out: np.ndarray, size: int, bfloat16: bool) -> np.ndarray:
    """Sum / size, the same arithmetic on every rank."""
    if bfloat16:
        return _f32_to_bf16(_bf16_to_f32(out) / np.float32(size))
    if np.issubdtype(out.dtype, np.integer):
        return out // size
    if out.dtype == np.float16:
        return (out.astype(np.float32) / np.float32(size)).astype(np.float16)
    return out / out.dtype.type(size)


# Whether a rank failing ends the whole MPI job (see _end_the_job_on_failure); "status": the nonzero
# status the interpreter is exiting with through sys.exit, once known (_Exit).
_ABORT_ON_UNCAUGHT = {"installed": False, "armed": False, "status": 0}
# Seconds a rank leaving with an error waits before ending the others: ranks failing together (at a
# step every rank refused) print their own messages first.
GRACE_S = 1.0


class _Exit(SystemExit):
    """What ``sys.exit`` raises once the MPI transport exists: a SystemExit that notes its status
    when it ends the interpreter. Python drops the SystemExit that left the main program with no
    Python frame running, then exits with its status; one caught inside the program (or ending a
    thread) is dropped with the catcher's frame running, and noted nowhere."""

    def __del__(self):
        try:
            if sys._getframe(0).f_back is not None:
                return
            code = self.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
            if status:
                _ABORT_ON_UNCAUGHT["status"] = status
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


def _exit(status=None):
    raise _Exit(status)


def _end_the_job_on_failure(transport: MpiTransport) -> None:
    """An uncaught exception, or a ``sys.exit`` with a nonzero status, on one rank ends the job with
    MPI_Abort, after Python printed what it prints.

    Without this the rank would leave through Python's finalization, where mpi4py's MPI_Finalize
    waits for every other rank of the job (Open MPI 5), while they wait for this one in a collective
    it will never join (a dygraph Layer's gradient AllReduce at the next backward, a static step's
    buckets): both sides wait forever. mpi4py's own ``python -m mpi4py`` ends a job so too; it sees
    the status of a SystemExit around the whole program, which a library cannot put there, so
    ``sys.exit`` is replaced by a function raising a SystemExit that notes its status when it ends
    the interpreter (``_Exit``), and an exit handler, which runs before mpi4py's MPI_Finalize, ends the
    job on a nonzero status. A ``raise SystemExit(1)`` of the program's own, or a ``sys.exit`` bound
    before the transport existed (``from sys import exit``), is not seen. A status of 0 finalizes as
    usual. Elastic training disarms both: there the others go on without a rank that ended."""
    if _ABORT_ON_UNCAUGHT["installed"] or transport.size < 2:
        return
    _ABORT_ON_UNCAUGHT.update(installed=True, armed=True)
    import atexit

    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        previous_hook(kind, value, tb)
        if not _ABORT_ON_UNCAUGHT["armed"]:
            return
        print(f"[paddle_ngraph] rank {transport.rank}: uncaught {kind.__name__}; ending every rank of the "
              f"job (MPI_Abort) rather than leaving them waiting for this one", file=sys.stderr, flush=True)
        transport.end_job()

    def end_on_failed_exit():
        status = _ABORT_ON_UNCAUGHT["status"]
        if not (status and _ABORT_ON_UNCAUGHT["armed"]):
            return
        print(f"[paddle_ngraph] rank {transport.rank}: leaving with exit status {status}; ending every rank of "
              f"the job (MPI_Abort) rather than leaving them waiting for this one", file=sys.stderr, flush=True)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        time.sleep(GRACE_S)
        transport.comm.Abort(status)

    sys.excepthook = excepthook
    sys.exit = functools.wraps(sys.exit)(_exit)
    atexit.register(end_on_failed_exit)  # after mpi4py's registration (at its import), so it runs first


def disarm_abort_on_uncaught_exception() -> None:
    """A failing rank no longer ends the job (elastic training: the others go on)."""
    _ABORT_ON_UNCAUGHT["armed"] = False


def _build(info, timeout_s: float | None) -> MpiTransport:
    if info.launcher == "paddle":
        raise ConfigError("transport 'mpi' cannot join processes started by paddle.distributed.launch "
                          "(MPI singletons cannot connect); use mpirun, or the 'ccl' transport")
    transport = MpiTransport()
    _end_the_job_on_failure(transport)
    return transport


register_transport(TransportSpec("mpi", _build, auto_for=("mpirun",)))
