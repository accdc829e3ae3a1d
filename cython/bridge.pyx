# cython: language_level=3
"""The hot boundary between Paddle's ``ngraph_engine`` operator and the engine.

``ngraph_engine``'s kernel calls ``_run`` with raw buffers once per step. We
wrap them as NumPy arrays without copying, call the engine registered under
the op's ``engine_id``, and copy its outputs into tensors the kernel allocates.
The callback takes the GIL only for itself: Paddle's executor releases it
while it runs ops, possibly on its own worker threads.
"""
from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport memcpy, strncpy

import numpy as np
cimport numpy as cnp

cnp.import_array()

ctypedef void* (*alloc_fn)(void* ctx, int index, int dtype, int ndim, const int64_t* shape) noexcept nogil

# Paddle's phi::DataType codes (paddle/phi/common/data_type.h) and their NumPy types.
# bfloat16 is carried as its raw 16 bits.
_NUMPY_OF_PADDLE = {1: np.bool_, 2: np.uint8, 3: np.int8, 5: np.int16, 7: np.int32, 9: np.int64,
                    10: np.float32, 11: np.float64, 15: np.float16, 16: np.uint16}

_engines = {}


def register_engine(int64_t engine_id, engine):
    """``engine.run(arrays, paddle_dtypes) -> list of (paddle_dtype, ndarray)``."""
    _engines[engine_id] = engine


def unregister_engine(int64_t engine_id):
    _engines.pop(engine_id, None)


def run_callback_address():
    """Address of ``_run``, handed to the operator library's ``pdng_set_run_callback``."""
    return <uintptr_t>&_run


cdef extern from *:
    """
    static __thread int pdng_keeps_thread_state = 0;
    """
    int pdng_keeps_thread_state

cdef extern from "Python.h":
    ctypedef struct PyThreadState:
        pass
    ctypedef int PyGILState_STATE
    PyGILState_STATE PyGILState_Ensure() nogil
    int PyGILState_Check() nogil
    PyThreadState* PyEval_SaveThread() nogil


cdef int _run(int64_t engine_id, int n, void** ptrs, const int* dtypes, const int* ndims, const int64_t* shapes,
              void* alloc_ctx, alloc_fn alloc, char* error, int error_len) noexcept nogil:
    # Paddle's executor calls from its own worker threads, which Python does not know: taking the GIL
    # there makes a thread state and dropping it destroys it again, every step. The first call on a
    # thread makes one that stays (ensured once, never released), so later calls only take the GIL.
    # (Not on a thread that holds the GIL already: releasing it here would return to its caller without it.)
    global pdng_keeps_thread_state
    if not pdng_keeps_thread_state and not PyGILState_Check():
        PyGILState_Ensure()
        PyEval_SaveThread()
        pdng_keeps_thread_state = 1
    return _run_with_gil(engine_id, n, ptrs, dtypes, ndims, shapes, alloc_ctx, alloc, error, error_len)


# Paddle dtype code -> NumPy type number (-1: none), looked up per input and step: a C table, as
# the callback runs on Paddle's worker threads, where a dict lookup is a cache miss more.
cdef int _TYPE_NUM_OF_PADDLE[32]
for _code in range(32):
    _TYPE_NUM_OF_PADDLE[_code] = cnp.dtype(_NUMPY_OF_PADDLE[_code]).num if _code in _NUMPY_OF_PADDLE else -1


cdef object _wrap(void* ptr, int dtype, int ndim, const int64_t* shape):
    cdef cnp.npy_intp dims[16]
    cdef int i, type_num = _TYPE_NUM_OF_PADDLE[dtype] if 0 <= dtype < 32 else -1
    if ndim > 16:
        raise ValueError(f"tensors of rank {ndim} are not supported (at most 16)")
    for i in range(ndim):
        dims[i] = shape[i]
    if type_num < 0:
        raise TypeError(f"unsupported Paddle dtype code {dtype}")
    if ptr == NULL:  # zero-size tensors may have no buffer
        return np.empty([dims[i] for i in range(ndim)], dtype=_NUMPY_OF_PADDLE[dtype])
    return cnp.PyArray_SimpleNewFromData(ndim, dims, type_num, ptr)


cdef int _run_with_gil(int64_t engine_id, int n, void** ptrs, const int* dtypes, const int* ndims,
                       const int64_t* shapes, void* alloc_ctx, alloc_fn alloc, char* error,
                       int error_len) noexcept with gil:
    cdef int i, offset = 0
    cdef void* dst
    cdef const int64_t* out_shape
    cdef cnp.ndarray contiguous
    cdef int64_t out_dims[16]
    cdef int d, out_ndim
    cdef Py_ssize_t nbytes
    try:
        engine = _engines.get(engine_id)
        if engine is None:
            raise RuntimeError(
                f"ngraph_engine {engine_id} is not known in this process: a transpiled program only runs in the "
                f"process that transpiled it; call paddle_ngraph.transpile again after loading a program")
        arrays = []
        for i in range(n):
            arrays.append(_wrap(ptrs[i], dtypes[i], ndims[i], shapes + offset))
            offset += ndims[i]
        outputs = engine.run(arrays, [dtypes[i] for i in range(n)])
        for i, (code, value) in enumerate(outputs):
            if type(value) is np.ndarray and cnp.PyArray_IS_C_CONTIGUOUS(value):
                contiguous = value
            else:
                contiguous = np.asarray(value, order="C")  # keeps 0-d arrays 0-d, unlike ascontiguousarray
            out_ndim = cnp.PyArray_NDIM(contiguous)
            if out_ndim > 16:
                raise ValueError(f"output {i} has rank {out_ndim} (at most 16)")
            for d in range(out_ndim):
                out_dims[d] = cnp.PyArray_DIMS(contiguous)[d]
            out_shape = out_dims
            nbytes = cnp.PyArray_NBYTES(contiguous)
            dst = alloc(alloc_ctx, i, code, out_ndim, out_shape)
            if dst == NULL and nbytes:
                raise RuntimeError(f"ngraph_engine could not allocate output {i}")
            if nbytes:
                memcpy(dst, cnp.PyArray_DATA(contiguous), nbytes)
        return 0
    except BaseException as e:
        message = f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:error_len]
        strncpy(error, message, error_len)
        return 1
