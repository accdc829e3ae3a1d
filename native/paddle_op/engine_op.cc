// The `ngraph_engine` Paddle operator: the one Paddle op a transpiled program runs.
//
// Paddle's executor calls this kernel with the engine's inputs (feeds,
// parameters, optimizer state). The kernel hands raw buffers to the engine
// through a callback set by paddle_ngraph's Cython bridge, and gives it an
// allocator for the outputs. The engine updates parameters and optimizer state
// in place, as Paddle's own optimizer ops (sgd_, adam_) do, so only values read
// by the ops left to Paddle ("anchors", e.g. the final mean of the loss) are outputs.
//
// Paddle custom operators cannot have a variable number of outputs without an
// in-place map, so the op comes in two sizes: `ngraph_engine` with kMaxOutputs
// output slots and `ngraph_engine_one` with one, for the common segment that gives
// Paddle one value (the loss; it doubles as the ordering token). Unused slots hold
// one shared empty tensor. Why the small one: Paddle's executor frees every unused
// result through its garbage collector thread, one wake-up each
// (paddle_ngraph/transpiler/rewrite.py).
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "paddle/common/enforce.h"
#include "paddle/phi/core/dense_tensor.h"
#include "paddle/extension.h"

// libpaddle's own conversion of a tensor to a `paddle.Tensor` (eager mode), as its generated Python
// API returns results; its header is not part of the wheel.
namespace paddle::pybind {
PyObject* ToPyObject(const paddle::Tensor& value, bool return_py_none_if_not_initialize);
}

namespace {

constexpr int kMaxOutputs = 16;
constexpr int kOneValueOutputs = 1;

typedef void* (*pdng_alloc_fn)(void* ctx, int index, int dtype, int ndim, const int64_t* shape);
typedef int (*pdng_run_fn)(int64_t engine_id, int n, void* const* ptrs, const int* dtypes, const int* ndims,
                           const int64_t* shapes, void* alloc_ctx, pdng_alloc_fn alloc, char* error,
                           int error_len);

pdng_run_fn g_run = nullptr;

struct OutputMeta {
  std::vector<paddle::DataType> dtypes;
  std::vector<std::vector<int64_t>> shapes;
};
std::mutex g_meta_mutex;
std::unordered_map<int64_t, OutputMeta> g_meta;

struct Allocation {
  std::vector<paddle::Tensor> outputs;
  std::vector<char> made;  // per slot: whether the engine gave it a value (of any size, 0 included)
};

// A DenseTensor given memory by Paddle's CPU allocator directly: paddle::empty dispatches a kernel
// (its infer-meta and launch) for the same allocation, a few microseconds per tensor.
std::shared_ptr<phi::DenseTensor> new_dense(phi::DataType dtype, int ndim, const int64_t* shape) {
  static phi::Allocator* allocator = paddle::GetAllocator(phi::CPUPlace());
  return std::make_shared<phi::DenseTensor>(
      allocator, phi::DenseTensorMeta(dtype, common::make_ddim(std::vector<int64_t>(shape, shape + ndim))));
}

void* allocate_output(void* ctx, int index, int dtype, int ndim, const int64_t* shape) {
  auto* alloc = static_cast<Allocation*>(ctx);
  if (index < 0 || index >= static_cast<int>(alloc->outputs.size())) return nullptr;
  auto dense = new_dense(static_cast<phi::DataType>(dtype), ndim, shape);
  void* data = dense->data();
  alloc->outputs[index] = paddle::Tensor(dense);
  alloc->made[index] = 1;
  return data;
}

// The Paddle dtype of a buffer's struct format ("f", "<d", "Zf", ...); false for the others.
bool dtype_of_format(const char* format, Py_ssize_t itemsize, phi::DataType* dtype) {
  if (format == nullptr) return false;
  while (*format == '<' || *format == '=' || *format == '@' || *format == '|') ++format;
  const std::string f(format);
  if (f == "f" && itemsize == 4) *dtype = phi::DataType::FLOAT32;
  else if (f == "d" && itemsize == 8) *dtype = phi::DataType::FLOAT64;
  else if (f == "e" && itemsize == 2) *dtype = phi::DataType::FLOAT16;
  else if ((f == "q" || f == "l") && itemsize == 8) *dtype = phi::DataType::INT64;
  else if ((f == "i" || f == "l") && itemsize == 4) *dtype = phi::DataType::INT32;
  else if (f == "h" && itemsize == 2) *dtype = phi::DataType::INT16;
  else if (f == "b" && itemsize == 1) *dtype = phi::DataType::INT8;
  else if (f == "B" && itemsize == 1) *dtype = phi::DataType::UINT8;
  else if (f == "?" && itemsize == 1) *dtype = phi::DataType::BOOL;
  else return false;
  return true;
}

// One array's copy as a new `paddle.Tensor`; None (a new reference) where it is not a non-empty,
// C-contiguous array of a dtype above.
PyObject* paddle_copy(PyObject* array) {
  Py_buffer view;
  if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  phi::DataType dtype;
  if (view.len == 0 || !dtype_of_format(view.format, view.itemsize, &dtype)) {
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
  }
  std::vector<int64_t> shape(view.shape, view.shape + view.ndim);
  auto dense = new_dense(dtype, view.ndim, shape.data());
  std::memcpy(dense->data(), view.buf, static_cast<size_t>(view.len));
  PyBuffer_Release(&view);
  return paddle::pybind::ToPyObject(paddle::Tensor(dense), false);
}

}  // namespace

extern "C" {
// New `paddle.Tensor`s holding copies of a list of NumPy arrays (None for an array it does not
// take: the caller copies that one itself), for the dygraph engine's results, which live in its
// arena until its next call. One call for all of them, and no kernel dispatch per tensor: about
// 2.5 us a tensor through paddle's Python API (its `empty` and a NumPy view to copy into).
// Called with the GIL held (ctypes.PyDLL).
PyObject* pdng_paddle_copies(PyObject* arrays) {
  PyObject* seq = PySequence_Fast(arrays, "pdng_paddle_copies takes a list of arrays");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject* out = PyList_New(n);
  if (out == nullptr) {
    Py_DECREF(seq);
    return nullptr;
  }
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* tensor = paddle_copy(PySequence_Fast_GET_ITEM(seq, i));
      if (tensor == nullptr) throw std::runtime_error("paddle could not wrap a tensor");
      PyList_SET_ITEM(out, i, tensor);
    }
  } catch (const std::exception& e) {
    Py_DECREF(out);
    Py_DECREF(seq);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_DECREF(seq);
  return out;
}

// Set once by the Cython bridge at import.
void pdng_set_run_callback(pdng_run_fn fn) { g_run = fn; }

// Declares an engine's output types, for Paddle's compile-time shape inference.
void pdng_set_output_meta(int64_t engine_id, int n, const int* dtypes, const int* ndims, const int64_t* shapes) {
  OutputMeta meta;
  const int64_t* s = shapes;
  for (int i = 0; i < n && i < kMaxOutputs; ++i) {
    meta.dtypes.push_back(static_cast<paddle::DataType>(dtypes[i]));
    meta.shapes.emplace_back(s, s + ndims[i]);
    s += ndims[i];
  }
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  g_meta[engine_id] = std::move(meta);
}
}

std::vector<paddle::Tensor> RunEngine(const std::vector<paddle::Tensor>& inputs, int64_t engine_id, int slots) {
  PD_CHECK(g_run != nullptr, "ngraph_engine: paddle_ngraph is not imported in this process");
  const int n = static_cast<int>(inputs.size());
  std::vector<void*> ptrs(n);
  std::vector<int> dtypes(n), ndims(n);
  std::vector<int64_t> shapes;
  for (int i = 0; i < n; ++i) {
    // The engine writes parameters and optimizer state through these pointers.
    ptrs[i] = const_cast<void*>(inputs[i].data());
    dtypes[i] = static_cast<int>(inputs[i].dtype());
    auto dims = inputs[i].shape();
    ndims[i] = static_cast<int>(dims.size());
    shapes.insert(shapes.end(), dims.begin(), dims.end());
  }
  Allocation alloc;
  alloc.outputs.resize(slots);
  alloc.made.assign(slots, 0);
  char error[4096] = {0};
  int rc = g_run(engine_id, n, ptrs.data(), dtypes.data(), ndims.data(), shapes.data(), &alloc, allocate_output,
                 error, sizeof(error) - 1);
  // PADDLE_THROW (not PD_CHECK): the PIR executor keeps the message of an EnforceNotMet,
  // and reports any other exception as a bare "std::exception".
  if (rc != 0) PADDLE_THROW(common::errors::External("ngraph_engine %lld: %s", static_cast<long long>(engine_id), error));
  // Unused slots all get one empty tensor, made once: no allocation per slot and step. Never
  // freed: at exit Paddle's allocators may be gone before this library's statics.
  static const paddle::Tensor* placeholder =
      new paddle::Tensor(paddle::empty({0}, paddle::DataType::FLOAT32, paddle::CPUPlace()));
  for (int i = 0; i < slots; ++i) {
    if (!alloc.made[i]) alloc.outputs[i] = *placeholder;
  }
  return alloc.outputs;
}

std::vector<std::vector<int64_t>> InferShape(int64_t engine_id, int slots) {
  std::vector<std::vector<int64_t>> shapes(slots, std::vector<int64_t>{0});
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  auto it = g_meta.find(engine_id);
  if (it != g_meta.end())
    for (size_t i = 0; i < it->second.shapes.size() && i < shapes.size(); ++i) shapes[i] = it->second.shapes[i];
  return shapes;
}

std::vector<paddle::DataType> InferDtype(int64_t engine_id, int slots) {
  std::vector<paddle::DataType> dtypes(slots, paddle::DataType::FLOAT32);
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  auto it = g_meta.find(engine_id);
  if (it != g_meta.end())
    for (size_t i = 0; i < it->second.dtypes.size() && i < dtypes.size(); ++i) dtypes[i] = it->second.dtypes[i];
  return dtypes;
}

// PD_KERNEL and friends take plain functions: one set per size.
template <int kSlots>
std::vector<paddle::Tensor> EngineForward(const std::vector<paddle::Tensor>& inputs, int64_t engine_id) {
  return RunEngine(inputs, engine_id, kSlots);
}
template <int kSlots>
std::vector<std::vector<int64_t>> EngineInferShape(const std::vector<std::vector<int64_t>>&, int64_t engine_id) {
  return InferShape(engine_id, kSlots);
}
template <int kSlots>
std::vector<paddle::DataType> EngineInferDtype(const std::vector<paddle::DataType>&, int64_t engine_id) {
  return InferDtype(engine_id, kSlots);
}

PD_BUILD_OP(ngraph_engine)
    .Inputs({paddle::Vec("X")})
    .Outputs({"Out0", "Out1", "Out2", "Out3", "Out4", "Out5", "Out6", "Out7", "Out8", "Out9", "Out10", "Out11",
              "Out12", "Out13", "Out14", "Out15"})
    .Attrs({"engine_id: int64_t"})
    .SetKernelFn(PD_KERNEL(EngineForward<kMaxOutputs>))
    .SetInferShapeFn(PD_INFER_SHAPE(EngineInferShape<kMaxOutputs>))
    .SetInferDtypeFn(PD_INFER_DTYPE(EngineInferDtype<kMaxOutputs>));

PD_BUILD_OP(ngraph_engine_one)
    .Inputs({paddle::Vec("X")})
    .Outputs({"Out0"})
    .Attrs({"engine_id: int64_t"})
    .SetKernelFn(PD_KERNEL(EngineForward<kOneValueOutputs>))
    .SetInferShapeFn(PD_INFER_SHAPE(EngineInferShape<kOneValueOutputs>))
    .SetInferDtypeFn(PD_INFER_DTYPE(EngineInferDtype<kOneValueOutputs>));
