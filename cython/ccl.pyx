# cython: language_level=3
"""Cython binding of the native oneCCL transport (native/ccl): buffers in, ``nogil`` around each call."""
from libc.stddef cimport size_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "pdng_ccl.h" nogil:
    int PDNG_CCL_ADDRESS_MAX
    const char* pdng_ccl_last_error()
    int pdng_ccl_create_main_kvs(char* address, size_t capacity, size_t* length)
    int pdng_ccl_create_communicator(const char* address, size_t length, int size, int rank)
    int pdng_ccl_allreduce(const void* send, void* recv, size_t count, int dtype, int reduction)
    int pdng_ccl_broadcast(void* buffer, size_t count, int dtype, int root)
    int pdng_ccl_allgather(const void* send, void* recv, size_t count, int dtype)
    int pdng_ccl_reduce_scatter(const void* send, void* recv, size_t recv_count, int dtype, int reduction)
    int pdng_ccl_send(const void* buffer, size_t count, int dtype, int peer)
    int pdng_ccl_recv(void* buffer, size_t count, int dtype, int peer)
    int pdng_ccl_barrier()
    int pdng_ccl_group_store(int* slot, char* address, size_t capacity, size_t* length)
    int pdng_ccl_group_join(int* slot, const char* address, size_t length, int size, int rank)
    int pdng_ccl_group_allreduce(int slot, const void* send, void* recv, size_t count, int dtype, int reduction)
    int pdng_ccl_group_broadcast(int slot, void* buffer, size_t count, int dtype, int root)
    int pdng_ccl_group_allgather(int slot, const void* send, void* recv, size_t count, int dtype)
    int pdng_ccl_group_reduce_scatter(int slot, const void* send, void* recv, size_t recv_count, int dtype,
                                      int reduction)
    void pdng_ccl_finalize()

# Codes of pdng_dtype and pdng_reduction (native/ccl/pdng_ccl.h).
DTYPE_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int32": 4, "int64": 5, "uint8": 6}
REDUCTION_CODES = {"sum": 0, "prod": 1, "min": 2, "max": 3}


class CclError(RuntimeError):
    pass


cdef int check(int rc) except -1:
    if rc != 0:
        raise CclError(pdng_ccl_last_error().decode("utf-8", "replace"))
    return 0


def create_main_kvs() -> bytes:
    cdef char buf[4096]
    cdef size_t length = 0
    with nogil:
        rc = pdng_ccl_create_main_kvs(buf, sizeof(buf), &length)
    check(rc)
    return buf[:length]


def create_communicator(bytes address, int size, int rank):
    cdef const char* addr = address
    cdef size_t length = len(address)
    with nogil:
        rc = pdng_ccl_create_communicator(addr, length, size, rank)
    check(rc)


# The collectives: over every rank of the job, or over the group in ``group`` (a slot of
# group_join; -1: every rank).
def allreduce(cnp.ndarray send, cnp.ndarray recv, str dtype, str reduction, int group=-1):
    cdef void* s = cnp.PyArray_DATA(send)
    cdef void* r = cnp.PyArray_DATA(recv)
    cdef size_t count = send.size
    cdef int dt = DTYPE_CODES[dtype], red = REDUCTION_CODES[reduction]
    with nogil:
        if group < 0:
            rc = pdng_ccl_allreduce(s, r, count, dt, red)
        else:
            rc = pdng_ccl_group_allreduce(group, s, r, count, dt, red)
    check(rc)


def broadcast(cnp.ndarray buffer, str dtype, int root, int group=-1):
    cdef void* b = cnp.PyArray_DATA(buffer)
    cdef size_t count = buffer.size
    cdef int dt = DTYPE_CODES[dtype]
    with nogil:
        if group < 0:
            rc = pdng_ccl_broadcast(b, count, dt, root)
        else:
            rc = pdng_ccl_group_broadcast(group, b, count, dt, root)
    check(rc)


def allgather(cnp.ndarray send, cnp.ndarray recv, str dtype, int group=-1):
    cdef void* s = cnp.PyArray_DATA(send)
    cdef void* r = cnp.PyArray_DATA(recv)
    cdef size_t count = send.size
    cdef int dt = DTYPE_CODES[dtype]
    with nogil:
        if group < 0:
            rc = pdng_ccl_allgather(s, r, count, dt)
        else:
            rc = pdng_ccl_group_allgather(group, s, r, count, dt)
    check(rc)


def reduce_scatter(cnp.ndarray send, cnp.ndarray recv, str dtype, str reduction, int group=-1):
    cdef void* s = cnp.PyArray_DATA(send)
    cdef void* r = cnp.PyArray_DATA(recv)
    cdef size_t count = recv.size
    cdef int dt = DTYPE_CODES[dtype], red = REDUCTION_CODES[reduction]
    with nogil:
        if group < 0:
            rc = pdng_ccl_reduce_scatter(s, r, count, dt, red)
        else:
            rc = pdng_ccl_group_reduce_scatter(group, s, r, count, dt, red)
    check(rc)


def group_store():
    """A new group slot with its own key-value store, on the group's first rank: (slot, address)."""
    cdef char buf[4096]
    cdef size_t length = 0
    cdef int slot = -1
    with nogil:
        rc = pdng_ccl_group_store(&slot, buf, sizeof(buf), &length)
    check(rc)
    return slot, buf[:length]


def group_join(int slot, bytes address, int size, int rank) -> int:
    """Joins the group whose store is at ``address`` (collective over its ranks); ``slot``: the
    first rank's from group_store, -1 elsewhere. Returns the group's slot."""
    cdef const char* addr = address
    cdef size_t length = len(address)
    with nogil:
        rc = pdng_ccl_group_join(&slot, addr, length, size, rank)
    check(rc)
    return slot


def send(cnp.ndarray buffer, int peer):
    cdef void* b = cnp.PyArray_DATA(buffer)
    cdef size_t count = cnp.PyArray_NBYTES(buffer)
    with nogil:
        rc = pdng_ccl_send(b, count, 6, peer)
    check(rc)


def recv(cnp.ndarray buffer, int peer):
    cdef void* b = cnp.PyArray_DATA(buffer)
    cdef size_t count = cnp.PyArray_NBYTES(buffer)
    with nogil:
        rc = pdng_ccl_recv(b, count, 6, peer)
    check(rc)


def barrier():
    with nogil:
        rc = pdng_ccl_barrier()
    check(rc)


def finalize():
    with nogil:
        pdng_ccl_finalize()


def allreduce_address():
    """Addresses of pdng_ccl_allreduce and pdng_ccl_last_error, for the CPU backend's
    communication thread, which calls oneCCL from C++ without Python."""
    return <size_t>&pdng_ccl_allreduce, <size_t>&pdng_ccl_last_error
