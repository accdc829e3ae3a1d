# C++ declarations of libpdng_cpu (native/cpu/include), for cython/cpu_runtime.pyx.
from libc.stdint cimport int64_t, uintptr_t
from libcpp cimport bool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "pdng/kernel.h" namespace "pdng" nogil:
    cdef cppclass Attrs:
        void set_ints(const string&, vector[int64_t])
        void set_floats(const string&, vector[double])
        void set_string(const string&, string)

    cdef cppclass TensorDesc:
        vector[int64_t] shape

    cdef cppclass NodeInfo:
        string name
        string op_type
        Attrs attrs
        vector[TensorDesc] inputs
        vector[TensorDesc] outputs

    vector[string] kernel_op_types()
    int num_threads()


cdef extern from "pdng/executor.h" namespace "pdng" nogil:
    ctypedef void (*CollectiveFallback)(void*, int, int, void* const*, int, void* const*, char*, int) noexcept

    cdef cppclass Communicator:
        int rank()
        int size()

    cdef cppclass Executor:
        Executor() except +
        void set_arena_size(int64_t) except +
        int add_arena_buffer(int64_t, int64_t) except +
        int add_input_buffer(int, int64_t) except +
        int add_output_buffer(int, int64_t) except +
        int add_constant_buffer(const void*, int64_t) except +
        int add_view_buffer(int, int64_t, int64_t) except +
        void add_compute(const NodeInfo&, const vector[int]&, const vector[int]&) except +
        int add_collective_start(const NodeInfo&, int, const vector[int]&, const vector[int]&, int,
                                 const vector[string]&) except +
        void set_check_finite(bool)
        void add_collective_wait(int) except +
        void set_results(const vector[int]&) except +
        void set_num_inputs(int)
        void set_communicator(shared_ptr[Communicator]) except +
        void set_group_communicator(const vector[int64_t]& group, shared_ptr[Communicator]) except +
        string communicator_description()
        void set_fallback(CollectiveFallback, void*)
        void set_threads(int)
        void run(void* const*, int) except +
        void run(void* const*, int, void* const*) except +
        void* result_data(int) except +
        int64_t arena_bytes()
        int num_steps()
        double last_wait_seconds()
        double last_comm_seconds()
        int64_t collectives_submitted()
        int64_t collectives_completed()
        void set_profiling(bool)
        const vector[double]& step_seconds()
        void set_tracing(bool)
        const vector[double]& step_trace()
        const vector[double]& collective_trace()


cdef extern from "pdng/mpi_communicator.h" namespace "pdng" nogil:
    bool mpi_available()
    shared_ptr[Communicator] make_mpi_group_communicator(uintptr_t group_comm) except +
    shared_ptr[Communicator] make_mpi_communicator(uintptr_t node_comm, uintptr_t leaders_comm,
                                                   bint shared_memory) except +


cdef extern from "pdng/node_allreduce.h" namespace "pdng" nogil:
    int64_t node_collectives_run(const string& kind) except +


cdef extern from "pdng/function_communicator.h" namespace "pdng" nogil:
    ctypedef int (*AllreduceFn)(const void*, void*, size_t, int, int)
    ctypedef const char* (*LastErrorFn)()
    shared_ptr[Communicator] make_function_communicator(int, int, AllreduceFn, LastErrorFn, bint) except +


cdef extern from *:
    """
    #include "pdng/kernel.h"
    // Cython cannot name C++ enum classes conveniently: set a desc's dtype from its code.
    static inline pdng::TensorDesc pdng_make_desc(int dtype, const std::vector<int64_t>& shape) {
      pdng::TensorDesc d;
      d.dtype = static_cast<pdng::DType>(dtype);
      d.shape = shape;
      return d;
    }
    """
    TensorDesc pdng_make_desc(int dtype, const vector[int64_t]& shape)
