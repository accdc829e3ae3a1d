"""The transport interface, after nGraph's ``Distributed``: rank, size and collectives.

Buffers are NumPy arrays. ``allreduce_many`` reduces a bucket of tensors as
one message (gradient fusion). Every implementation supports every dtype in
``DTYPES`` and every reduction in ``REDUCTIONS``; errors name the tensor,
dtype and rank.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TransportError
from ..ir.groups import check_group
from ..ir.ops.collective import REDUCTIONS
from .registry import TransportSpec, register_transport

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")


def flatten(arrays: list[np.ndarray]) -> np.ndarray:
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0]).reshape(-1).copy()
    return np.concatenate([np.ascontiguousarray(a).reshape(-1) for a in arrays])


def unflatten(flat: np.ndarray, like: list[np.ndarray]) -> list[np.ndarray]:
    out, offset = [], 0
    for a in like:
        out.append(flat[offset:offset + a.size].reshape(a.shape))
        offset += a.size
    return out


@dataclass(frozen=True)
class NativeLink:
    """How the CPU backend's native executor reaches the other ranks from C++, on its communication
    thread: one of its two native communicators, and the handles it needs."""

    # "mpi": the executor's own MPI communicator; ``handles``: (node communicator, leaders
    # communicator) as integers, (0, 0) for flat. "functions": C functions of the pdng_ccl ABI;
    # ``handles``: (address of the allreduce, address of the last-error function). "mpi-group": a
    # group's (``Transport.group``) flat MPI communicator; ``handles``: (its MPI_Comm as an integer,).
    # "mpi-comm": the executor's own flat MPI communicator on a communicator other than
    # MPI_COMM_WORLD (an elastic group's); ``handles``: (its MPI_Comm as an integer,).
    kind: str
    handles: tuple[int, ...] = ()


class Transport:
    name = "BASE"
    rank = 0
    size = 1
    # Whether the CPU backend's native AllReduce may go over shared memory among the ranks of one
    # node (native/cpu/src/node_allreduce.cc; config key shm_allreduce, set at transpile). Used only
    # where every rank can map the others' memory, and only if every rank allows it.
    shared_memory = True
    # Whether transpile bounds this transport's collectives with the stall watchdog (watchdog.py),
    # which ends every rank when one stops answering.
    stall_watchdog = True
    _groups: dict | None = None  # Transport.group's, made on first use

    # --- the primitives each transport provides -------------------------------------------
    def allreduce(self, array: np.ndarray, reduction: str = "sum", name: str = "", bfloat16: bool = False) -> np.ndarray:
        raise NotImplementedError

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        raise NotImplementedError

    def allgather(self, array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Every rank's ``array`` concatenated along axis 0, in rank order; into ``out`` (C-contiguous,
        of that shape and dtype) when given, which is returned."""
        raise NotImplementedError

    @staticmethod
    def _allgather_output(array: np.ndarray, size: int, out: np.ndarray | None) -> np.ndarray:
        shape = (size * array.shape[0],) + array.shape[1:]
        if out is None:
            return np.empty(shape, dtype=array.dtype)
        if out.shape != shape or out.dtype != array.dtype or not out.flags.c_contiguous:
            raise TransportError(f"allgather: out is {out.dtype}{list(out.shape)}, the gathered value "
                                 f"{array.dtype}{list(shape)} (C-contiguous)")
        return out

    def reduce_scatter(self, array: np.ndarray, reduction: str = "sum") -> np.ndarray:
        """Reduces across ranks and returns this rank's 1/size slice of axis 0."""
        full = self.allreduce(array, reduction)
        chunk = array.shape[0] // self.size
        return np.ascontiguousarray(full[self.rank * chunk:(self.rank + 1) * chunk])

    def alltoall(self, array: np.ndarray) -> np.ndarray:
        """Block r (of ``size`` equal blocks of the flat array) goes to rank r; returns the blocks
        received, in rank order. This default moves every rank's whole array (an allgather):
        correct, but ``size`` times the bytes; transports with a native all-to-all override it."""
        flat = self._alltoall_input(array)
        block = flat.size // self.size
        everything = self.allgather(flat.reshape(1, -1)).reshape(self.size, -1)
        return np.ascontiguousarray(everything[:, self.rank * block:(self.rank + 1) * block]).reshape(-1)

    def _alltoall_input(self, array: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(array).reshape(-1)
        if flat.size % self.size:
            raise TransportError(f"rank {self.rank}: alltoall of {flat.size} elements, not a multiple of "
                                 f"{self.size} ranks")
        return flat

    def send(self, array: np.ndarray, peer: int, tag: int = 0):
        raise NotImplementedError

    def recv(self, array: np.ndarray, peer: int, tag: int = 0):
        raise NotImplementedError

    def barrier(self):
        raise NotImplementedError

    def allgather_object(self, obj) -> list:
        raise NotImplementedError

    # --- derived ----------------------------------------------------------------------------------
    def allreduce_many(self, arrays: list[np.ndarray], reduction: str = "sum", name: str = "") -> list[np.ndarray]:
        """Reduces a bucket of same-dtype tensors as one message."""
        if not arrays:
            return []
        dtype = arrays[0].dtype
        for a in arrays:
            if a.dtype != dtype:
                raise TransportError(f"rank {self.rank}: bucket '{name}' mixes dtypes {dtype} and {a.dtype}")
        # allreduce returns a new buffer, so views of it are safe to hand out.
        return unflatten(self.allreduce(flatten(arrays), reduction, name=name), arrays)

    def set_hierarchical(self, mode: str = "auto") -> bool:
        """Hierarchical allreduce (reduce within a node, allreduce across nodes, broadcast within the
        node) where the transport implements it (MPI); returns whether it is used. Others: flat.
        oneCCL chooses topology-aware algorithms itself."""
        return False

    def allreduce_compressed(self, arrays: list[np.ndarray], reduction: str, fmt: str,
                             name: str = "") -> list[np.ndarray]:
        """A bucket of float32 tensors reduced as 16-bit values (distributed/compress.py)."""
        from .compress import compressed_allreduce

        if not arrays:
            return []
        return unflatten(compressed_allreduce(self, flatten(arrays), reduction, fmt, name), arrays)

    def check_reduction(self, reduction: str):
        if reduction not in REDUCTIONS:
            raise TransportError(f"rank {self.rank}: unknown reduction '{reduction}'; valid: {', '.join(REDUCTIONS)}")

    # --- groups ---------------------------------------------------------------------------------
    def group(self, ranks) -> "Transport":
        """The transport among ``ranks`` (global ranks in increasing order; empty: every rank):
        rank and size within the group, the same collectives. Made on first use by the group's
        ranks only, and kept; ranks that use several groups must make them in the same order
        (``make_groups`` does, in the order of their rank tuples)."""
        ranks = self._checked_group(ranks)
        if not ranks or len(ranks) == self.size:
            return self
        cache = self._group_cache()
        if ranks not in cache:
            cache[ranks] = self._make_group(ranks)
        return cache[ranks]

    def make_groups(self, groups) -> None:
        """Makes every group of ``groups`` this rank is in now, in one order every rank agrees on
        (the groups' rank tuples sorted), so that no two ranks wait for each other in different
        groups. Every rank of the job calls it (with its own groups): a transport may need them all
        (oneCCL's stores travel over the job's transport)."""
        for ranks in sorted({self._checked_group(g) for g in groups}):
            if ranks and self.rank in ranks:
                self.group(ranks)

    def _group_cache(self) -> dict:
        """This transport's groups by their rank tuples (the subclasses keep no __init__ of ours)."""
        if self._groups is None:
            self._groups = {}
        return self._groups

    def _close_groups(self):
        for group in (self._groups or {}).values():
            group.close()
        self._groups = None

    def _checked_group(self, ranks) -> tuple[int, ...]:
        try:
            ranks = check_group(ranks, self.size)
        except ValueError as e:
            raise TransportError(f"rank {self.rank}: {e}") from None
        if ranks and self.rank not in ranks:
            raise TransportError(f"rank {self.rank}: a collective over group {ranks}, which does not include "
                                 f"this rank")
        return ranks

    def _make_group(self, ranks: tuple[int, ...]) -> "Transport":
        raise TransportError(f"rank {self.rank}: the {self.name} transport has no groups of ranks (group {ranks})")

    def native_link(self) -> NativeLink | None:
        """How the CPU backend may reduce from C++ over this transport; None: only through this
        Python object (the backend calls its collectives on the communication thread)."""
        return None

    def native_group_link(self) -> NativeLink | None:
        """How the CPU backend may run, from C++, collectives named by a group whose transport this
        is (``group(ranks)``; also the job's transport for a group of every rank); None: through
        this Python object."""
        return None

    def close(self):
        pass

    def abort(self, message: str):
        """Ends every rank of the job after an error on this one; prints the message first."""
        import sys

        print(f"[rank {self.rank}] paddle_ngraph: aborting the job: {message}", file=sys.stderr, flush=True)
        self.end_job()

    def end_job(self):
        import os

        # Without the transport's own abort, exiting without a clean shutdown makes the launcher
        # (mpirun or paddle.distributed.launch) end the other ranks.
        os._exit(1)

    def __repr__(self):
        return f"<{self.name} transport rank {self.rank} of {self.size}>"


class NullTransport(Transport):
    """One process: every collective is the identity."""

    name = "NULL"

    def allreduce(self, array, reduction="sum", name="", bfloat16=False):
        self.check_reduction(reduction)
        return np.array(array, copy=True)

    def broadcast(self, array, root=0):
        return array

    def allgather(self, array, out=None):
        out = self._allgather_output(np.asarray(array), 1, out)
        out[...] = array
        return out

    def send(self, array, peer, tag=0):
        raise TransportError("rank 0: send in a one-process job has no peer")

    def recv(self, array, peer, tag=0):
        raise TransportError("rank 0: recv in a one-process job has no peer")

    def barrier(self):
        pass

    def allgather_object(self, obj):
        return [obj]

    def abort(self, message: str):
        pass  # one process: the exception reaches the caller


register_transport(TransportSpec("null", lambda info, timeout_s: NullTransport(), auto_for=("none",),
                                 connects_ranks=False))
