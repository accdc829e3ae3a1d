# cython: language_level=3
"""The runtime boundary of the CPU backend: builds a native executor from a plan, runs steps.

One ``run`` call per step: input buffers in (NumPy arrays, zero-copy), the GIL released for
the whole native step; results are views of the executor's arena, valid until the next run.
C++ errors (pdng::Error, naming the node) reach Python as ``ExecutionError``.
"""
from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport strncpy
from libcpp.vector cimport vector
from libcpp.string cimport string

import numpy as np
cimport numpy as cnp

from paddle_ngraph.errors import ExecutionError

from pdng_cpu cimport (AllreduceFn, Executor, LastErrorFn, NodeInfo, TensorDesc, kernel_op_types,
                       make_function_communicator, make_mpi_communicator, make_mpi_group_communicator,
                       mpi_available, node_collectives_run,
                       num_threads, pdng_make_desc)

cnp.import_array()

# Numbered as pdng::DType (and paddle_ngraph.ir.types.DType's declaration order).
DTYPE_CODES = {"bool": 0, "uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float16": 6,
               "bfloat16": 7, "float32": 8, "float64": 9}


def registered_op_types():
    """The op types with a native kernel."""
    return sorted(t.decode() for t in kernel_op_types())


def has_native_mpi():
    return mpi_available()


def shared_memory_collectives():
    """{"AllReduce": n, "ReduceScatter": n, "AllGather": n}: the collectives this process has run
    over shared memory among the ranks of its node (node_allreduce.h), on any transport."""
    return {kind: node_collectives_run(kind.encode()) for kind in ("AllReduce", "ReduceScatter", "AllGather")}


def default_threads():
    return num_threads()


cdef TensorDesc _desc(tensor_type) except *:
    return pdng_make_desc(DTYPE_CODES[tensor_type.dtype.value], [int(d) for d in tensor_type.shape])


cdef void _set_attrs(NodeInfo& info, dict attrs) except *:
    for key, value in attrs.items():
        name = key.encode()
        if value is None or isinstance(value, np.ndarray):
            continue  # None is absent; arrays (Constant values) travel as buffers
        if isinstance(value, str):
            info.attrs.set_string(name, value.encode())
        elif isinstance(value, (bool, int, np.integer)):
            info.attrs.set_ints(name, [int(value)])
        elif isinstance(value, (float, np.floating)):
            info.attrs.set_floats(name, [float(value)])
        elif isinstance(value, (list, tuple)):
            if all(isinstance(v, (bool, int, np.integer)) for v in value):
                info.attrs.set_ints(name, [int(v) for v in value])
            else:
                info.attrs.set_floats(name, [float(v) for v in value])
        else:
            raise TypeError(f"attribute '{key}' of type {type(value).__name__} cannot go to a native kernel")


cdef NodeInfo _node_info(node) except *:
    cdef NodeInfo info
    info.name = node.name.encode()
    info.op_type = node.op_type.encode()
    _set_attrs(info, node.attrs)
    for i in node.inputs:
        info.inputs.push_back(_desc(i.type))
    for t in node.output_types:
        info.outputs.push_back(_desc(t))
    return info


cdef void _fallback(void* context, int node_index, int n_in, void* const* in_ptrs, int n_out,
                    void* const* out_ptrs, char* error, int error_len) noexcept with gil:
    """Runs a collective node the native communicator does not handle, on the communication thread."""
    cdef NativeExecutable owner = <NativeExecutable>context
    try:
        owner.fallback(node_index, [<uintptr_t>in_ptrs[i] for i in range(n_in)],
                       [<uintptr_t>out_ptrs[i] for i in range(n_out)])
    except BaseException as e:
        message = f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:error_len]
        strncpy(error, message, error_len)


def array_at(uintptr_t address, dtype, shape):
    """A NumPy array over memory owned elsewhere (no copy); the caller keeps the owner alive.
    Called several times per dygraph step (paddle_ngraph/dygraph/runner.py): no tuple is made of
    ``shape`` and a NumPy dtype is used as it is."""
    cdef cnp.npy_intp dims[32]
    cdef Py_ssize_t i, ndim = len(shape)
    cdef int typenum = (<cnp.dtype>dtype).type_num if isinstance(dtype, cnp.dtype) else cnp.dtype(dtype).num
    if ndim > 32:
        raise ValueError(f"arrays of rank {ndim} are not supported (at most 32)")
    for i in range(ndim):
        dims[i] = shape[i]
    return cnp.PyArray_SimpleNewFromData(ndim, dims, typenum, <void*>address)


cdef object _array_at(void* address, int typenum, tuple shape):
    cdef cnp.npy_intp dims[32]
    cdef Py_ssize_t i
    for i in range(len(shape)):
        dims[i] = shape[i]
    return cnp.PyArray_SimpleNewFromData(len(shape), dims, typenum, address)


cdef class NativeExecutable:
    """A native executor, built step by step from the liveness steps and memory plan of a
    specialization (paddle_ngraph/backends/cpu/executable.py, ``Specialization._build``)."""

    cdef Executor* executor
    cdef public object fallback       # fallback(node_index, in_addresses, out_addresses)
    cdef list constants               # keeps nothing native alive; for reports
    cdef list result_types            # (NumPy type number, shape tuple) per result
    cdef vector[void*] input_ptrs
    # The inputs' signature that ``run_if_accepted`` takes unchecked (``accept_signature``).
    cdef bint accepted_known
    cdef vector[int] accepted_typenums
    cdef vector[int] accepted_ndims
    cdef vector[cnp.npy_intp] accepted_dims

    def __cinit__(self):
        self.executor = new Executor()
        self.fallback = None
        self.result_types = []

    def __dealloc__(self):
        del self.executor

    def set_arena_size(self, int64_t nbytes):
        self.executor.set_arena_size(nbytes)

    def add_arena_buffer(self, int64_t offset, int64_t nbytes):
        return self.executor.add_arena_buffer(offset, nbytes)

    def add_input_buffer(self, int index, int64_t nbytes):
        return self.executor.add_input_buffer(index, nbytes)

    def add_output_buffer(self, int index, int64_t nbytes):
        return self.executor.add_output_buffer(index, nbytes)

    def add_constant_buffer(self, cnp.ndarray value):
        value = np.ascontiguousarray(value)
        return self.executor.add_constant_buffer(cnp.PyArray_DATA(value), value.nbytes)

    def add_view_buffer(self, int base, int64_t offset, int64_t nbytes):
        return self.executor.add_view_buffer(base, offset, nbytes)

    def add_compute(self, node, inputs, outputs):
        cdef NodeInfo info = _node_info(node)
        try:
            self.executor.add_compute(info, inputs, outputs)
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None

    def add_collective_start(self, node, int node_index, inputs, outputs, int region, tensor_names=()):
        cdef NodeInfo info = _node_info(node)
        cdef vector[string] names = [n.encode() for n in tensor_names]
        return self.executor.add_collective_start(info, node_index, inputs, outputs, region, names)

    def set_check_finite(self, bint on):
        self.executor.set_check_finite(on)

    def add_collective_wait(self, int collective):
        self.executor.add_collective_wait(collective)

    def set_results(self, buffers, types):
        self.executor.set_results(buffers)
        self.result_types = [(cnp.dtype(dtype).num, tuple(int(d) for d in shape)) for dtype, shape in types]

    def set_num_inputs(self, int n):
        self.executor.set_num_inputs(n)

    def set_threads(self, int n):
        self.executor.set_threads(n)

    def use_fallback(self, fallback):
        self.fallback = fallback
        self.executor.set_fallback(_fallback, <void*>self)

    def use_native_mpi(self, uintptr_t node_comm=0, uintptr_t leaders_comm=0, bint shared_memory=True):
        """AllReduce from C++; hierarchical over these communicator handles (mpi4py's MPI._handleof)
        if node_comm is not 0, else flat on MPI_COMM_WORLD: over shared memory within the node when
        shared_memory and every rank can map the others' memory, MPI_Allreduce otherwise."""
        try:
            self.executor.set_communicator(make_mpi_communicator(node_comm, leaders_comm, shared_memory))
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None

    def use_native_mpi_comm(self, uintptr_t comm):
        """AllReduce from C++, flat MPI on ``comm`` (an MPI_Comm handle, mpi4py's MPI._handleof) in
        place of MPI_COMM_WORLD: an elastic job's group, which shrinks and grows."""
        try:
            self.executor.set_communicator(make_mpi_group_communicator(comm))
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None

    def use_native_mpi_group(self, group, uintptr_t group_comm):
        """The collectives over ``group`` (the global ranks of their "group" attribute) from C++,
        flat MPI over ``group_comm`` (an MPI_Comm handle of those ranks, mpi4py's MPI._handleof)."""
        cdef vector[int64_t] ranks = [int(r) for r in group]
        try:
            self.executor.set_group_communicator(ranks, make_mpi_group_communicator(group_comm))
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None

    @property
    def communicator(self):
        """How the native allreduce reaches the other ranks ("none": only the Python fallback)."""
        return self.executor.communicator_description().decode()

    def use_native_functions(self, int rank, int size, uintptr_t allreduce, uintptr_t last_error,
                             bint shared_memory=False):
        """Allreduce through C functions of the pdng_ccl ABI (the oneCCL transport), called from C++;
        over shared memory within the node instead when shared_memory and every rank can map the others'."""
        try:
            self.executor.set_communicator(make_function_communicator(rank, size, <AllreduceFn>allreduce,
                                                                      <LastErrorFn>last_error, shared_memory))
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None

    def run(self, list inputs, dict outputs=None):
        """Runs one step on C-contiguous arrays; returns the results as views of the arena.
        ``outputs``: input index -> a C-contiguous array of that input's size where the values
        that replace the input (its output buffers) are written instead of into the input."""
        cdef int n = len(inputs)
        cdef cnp.ndarray array
        cdef vector[void*] output_ptrs
        self.input_ptrs.resize(n)
        for i in range(n):
            array = inputs[i]
            self.input_ptrs[i] = cnp.PyArray_DATA(array)
        if outputs:
            output_ptrs = self.input_ptrs
            for i, target in outputs.items():
                array = target
                if array.nbytes != (<cnp.ndarray>inputs[i]).nbytes or not array.flags.c_contiguous:
                    raise ExecutionError(f"input {i}: the memory given for its new value has {array.nbytes} "
                                         f"bytes (contiguous: {array.flags.c_contiguous}), the input "
                                         f"{(<cnp.ndarray>inputs[i]).nbytes}")
                output_ptrs[i] = cnp.PyArray_DATA(array)
        try:
            with nogil:
                if output_ptrs.size():
                    self.executor.run(self.input_ptrs.data(), n, output_ptrs.data())
                else:
                    self.executor.run(self.input_ptrs.data(), n)
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None
        return self._results()

    cdef list _results(self):
        results = []
        cdef int typenum
        cdef tuple shape
        for i in range(len(self.result_types)):
            typenum, shape = self.result_types[i]
            view = _array_at(self.executor.result_data(i), typenum, shape)
            cnp.set_array_base(view, self)  # the executor outlives its results
            results.append(view)
        return results

    def accept_signature(self, list inputs):
        """Remembers the NumPy types and shapes of ``inputs`` (C-contiguous arrays the caller,
        ``CPUExecutable.call``, has just checked against the function) for ``run_if_accepted``."""
        cdef cnp.ndarray array
        cdef int d
        self.accepted_known = False
        self.accepted_typenums.clear()
        self.accepted_ndims.clear()
        self.accepted_dims.clear()
        for value in inputs:
            array = value
            self.accepted_typenums.push_back(cnp.PyArray_TYPE(array))
            self.accepted_ndims.push_back(cnp.PyArray_NDIM(array))
            for d in range(cnp.PyArray_NDIM(array)):
                self.accepted_dims.push_back(cnp.PyArray_DIMS(array)[d])
        self.accepted_known = True

    def run_if_accepted(self, list inputs):
        """``run`` without the caller's checks, for NumPy arrays (not subclasses) of the remembered
        signature in native byte order and C-contiguous; None, having done nothing, for anything
        else (the caller's full path checks it and explains). The dygraph engine calls its
        executables with the same signature at every step, where the checks in Python took 3-4 us
        a call."""
        cdef Py_ssize_t n = len(inputs), i, offset = 0
        cdef int d, ndim
        cdef cnp.ndarray array
        cdef cnp.npy_intp* shape
        if not self.accepted_known or n != <Py_ssize_t>self.accepted_typenums.size():
            return None
        self.input_ptrs.resize(n)
        for i in range(n):
            value = inputs[i]
            if type(value) is not np.ndarray:
                return None
            array = <cnp.ndarray>value
            ndim = cnp.PyArray_NDIM(array)
            if ndim != self.accepted_ndims[i] or cnp.PyArray_TYPE(array) != self.accepted_typenums[i] \
                    or not cnp.PyArray_IS_C_CONTIGUOUS(array) or not cnp.PyArray_ISNOTSWAPPED(array):
                return None
            shape = cnp.PyArray_DIMS(array)
            for d in range(ndim):
                if shape[d] != self.accepted_dims[offset + d]:
                    return None
            offset += ndim
            self.input_ptrs[i] = cnp.PyArray_DATA(array)
        try:
            with nogil:
                self.executor.run(self.input_ptrs.data(), <int>n)
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None
        return self._results()

    def set_profiling(self, bint on):
        self.executor.set_profiling(on)

    @property
    def step_seconds(self):
        """Wall time of each step of the last run, when profiling is on."""
        return list(self.executor.step_seconds())

    def set_tracing(self, bint on):
        self.executor.set_tracing(on)

    def last_trace(self):
        """When tracing is on: ([(begin, end)] per step, [(begin, end)] of each collective's transfer)
        of the last run, in seconds of the monotonic clock (time.monotonic()'s)."""
        cdef const vector[double]* steps = &self.executor.step_trace()
        cdef const vector[double]* transfers = &self.executor.collective_trace()
        return ([(steps[0][2 * i], steps[0][2 * i + 1]) for i in range(steps.size() // 2)],
                [(transfers[0][2 * i], transfers[0][2 * i + 1]) for i in range(transfers.size() // 2)])

    @property
    def arena_bytes(self):
        return self.executor.arena_bytes()

    @property
    def num_steps(self):
        return self.executor.num_steps()

    @property
    def last_wait_seconds(self):
        return self.executor.last_wait_seconds()

    @property
    def last_comm_seconds(self):
        return self.executor.last_comm_seconds()

    def collective_progress(self):
        """(collectives submitted, collectives completed) since this executable was built; safe to
        read from another thread while a step runs (the stall watchdog does)."""
        return self.executor.collectives_submitted(), self.executor.collectives_completed()


cdef class StepPlan:
    """One engine operator's whole step on one specialization, resolved once: what the engine's
    Python (transpiler/engine.py) and ``CPUExecutable.call`` do per step, for the plain case (one
    process, the plain schedule, no collectives, no timeline) of a step whose inputs are the very
    signature that a full step accepted before. ``run`` returns None, having done nothing, whenever
    anything differs; the caller then takes the full path, which checks and explains. Paddle's
    executor calls the engine operator from its worker threads, where the interpreter's code and
    objects are cold: each attribute lookup, dict lookup and small object of that Python costs a
    cache miss, 20-30 us per operator and step in all, against 3-5 us here."""

    cdef NativeExecutable native
    cdef object owner                 # the CPUExecutable; its ``last`` is this specialization
    cdef object specialization
    cdef Py_ssize_t n_total           # Paddle's inputs, ordering inputs included
    cdef Py_ssize_t n_paddle          # Paddle's inputs the function takes
    cdef vector[int] codes            # their Paddle dtype codes
    cdef vector[int] typenums         # NumPy type of each function input
    cdef vector[int] ndims
    cdef vector[int64_t] dims         # their shapes, flat
    cdef dict handover
    cdef list handed_in               # names, in the function's order after Paddle's inputs
    cdef vector[int] result_is_input  # per result: the input it was written into in place, or -1
    cdef list writeback               # (result, input) positions
    cdef list handed_out              # (name, result position, copy: whether it lives in an input)
    cdef list fetch                   # (Paddle dtype code, result position)

    def __init__(self, NativeExecutable native, owner, specialization, int n_total, list codes, list input_types,
                 dict handover, list handed_in, dict result_is_input, list writeback, list handed_out, list fetch):
        self.native = native
        self.owner = owner
        self.specialization = specialization
        self.n_total = n_total
        self.n_paddle = len(codes)
        self.codes = codes
        for dtype, shape in input_types:
            self.typenums.push_back(cnp.dtype(dtype).num)
            self.ndims.push_back(len(shape))
            for d in shape:
                self.dims.push_back(d)
        self.handover = handover
        self.handed_in = handed_in
        self.result_is_input.assign(len(native.result_types), -1)
        for position, index in result_is_input.items():
            self.result_is_input[position] = index
        self.writeback = writeback
        self.handed_out = handed_out
        self.fetch = fetch

    cdef bint _matches(self, Py_ssize_t i, object value, Py_ssize_t* offset):
        if type(value) is not np.ndarray:
            return False
        cdef cnp.ndarray array = <cnp.ndarray>value
        cdef int ndim = cnp.PyArray_NDIM(array), d
        if ndim != self.ndims[i] or cnp.PyArray_TYPE(array) != self.typenums[i] \
                or not cnp.PyArray_IS_C_CONTIGUOUS(array):
            return False
        cdef cnp.npy_intp* shape = cnp.PyArray_DIMS(array)
        for d in range(ndim):
            if shape[d] != self.dims[offset[0] + d]:
                return False
        offset[0] += ndim
        self.native.input_ptrs[i] = cnp.PyArray_DATA(array)
        return True

    cdef object _result(self, int position, list inputs):
        if self.result_is_input[position] >= 0:
            return inputs[self.result_is_input[position]]
        cdef int typenum
        cdef tuple shape
        typenum, shape = self.native.result_types[position]
        view = _array_at(self.native.executor.result_data(position), typenum, shape)
        cnp.set_array_base(view, self.native)
        return view

    def run(self, list arrays, list codes):
        """The fetched values [(Paddle dtype code, array)] of a step, or None (nothing done)."""
        if len(arrays) != self.n_total or len(codes) != self.n_total:
            return None
        cdef Py_ssize_t i, offset = 0, n_in = self.n_paddle + len(self.handed_in)
        self.native.input_ptrs.resize(n_in)
        for i in range(self.n_paddle):
            if <int>codes[i] != self.codes[i] or not self._matches(i, arrays[i], &offset):
                return None
        inputs = arrays[:self.n_paddle]
        for i in range(self.n_paddle, n_in):
            value = self.handover.get(self.handed_in[i - self.n_paddle])
            if value is None or not self._matches(i, value, &offset):
                return None
            inputs.append(value)
        self.owner.last = self.specialization
        try:
            with nogil:
                self.native.executor.run(self.native.input_ptrs.data(), <int>n_in)
        except RuntimeError as e:
            raise ExecutionError(str(e)) from None
        cdef int result_pos, input_pos
        for result_pos, input_pos in self.writeback:
            if self.result_is_input[result_pos] != input_pos:
                result = self._result(result_pos, inputs)
                target = inputs[input_pos]
                if cnp.PyArray_DATA(<cnp.ndarray>result) != cnp.PyArray_DATA(<cnp.ndarray>target):
                    np.copyto(target, result, casting="no")
        cdef bint copy
        for name, result_pos, copy in self.handed_out:
            value = self._result(result_pos, inputs)
            self.handover[name] = value.copy() if copy else value
        return [(code, self._result(result_pos, inputs)) for code, result_pos in self.fetch]
