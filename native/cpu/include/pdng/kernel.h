// The kernel interface of the native CPU backend.
//
// Framework-neutral: nothing here knows Paddle or Python. The Python side of the
// backend specializes a function to concrete shapes and plans its memory; the
// executor (executor.h) then creates one Kernel object per node, once, with the
// node's attributes and the concrete types of its inputs and outputs. A kernel
// does all its shape-dependent preparation in its constructor (oneDNN primitive
// creation, scratch allocation) so that run() allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace pdng {

// Numbered as paddle_ngraph.ir.types.DType is declared (the Python side relies on it).
enum class DType : int32_t {
  Bool = 0, UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5,
  Float16 = 6, BFloat16 = 7, Float32 = 8, Float64 = 9,
};

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

struct TensorDesc {
  DType dtype = DType::Float32;
  Shape shape;
  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }
  std::string str() const;  // "float32[2x3]"
};

// A bound tensor: data pointer plus its (concrete, contiguous, row-major) type.
struct Tensor {
  void* data = nullptr;
  TensorDesc desc;
  template <class T> T* as() const { return static_cast<T*>(data); }
  int64_t numel() const { return desc.numel(); }
  const Shape& shape() const { return desc.shape; }
  DType dtype() const { return desc.dtype; }
  int rank() const { return desc.rank(); }
};

// Any failure inside a kernel: the executor prefixes the node's name and op type.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A node's attributes. Python bools and ints arrive as ints, floats as floats
// (scalars as one-element lists), strings as strings; None is absent.
//
// The IR op is the one source of attribute defaults: a node carries every attribute its op
// declares (ir/ops/, filled in by the Node constructor) and the runtime sends them all, so a
// kernel reads them as required. A missing one is an Error naming the attribute (the executor
// adds the node and its op type); only attributes whose value may be None (DropoutMask's seed)
// are tested with has().
class Attrs {
 public:
  void set_ints(const std::string& name, std::vector<int64_t> v) { ints_[name] = std::move(v); }
  void set_floats(const std::string& name, std::vector<double> v) { floats_[name] = std::move(v); }
  void set_string(const std::string& name, std::string v) { strings_[name] = std::move(v); }

  bool has(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  bool get_bool(const std::string& name) const { return get_int(name) != 0; }
  // A float attribute; an int attribute of that name is accepted too (Python's 1 for 1.0).
  double get_float(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;

 private:
  std::unordered_map<std::string, std::vector<int64_t>> ints_;
  std::unordered_map<std::string, std::vector<double>> floats_;
  std::unordered_map<std::string, std::string> strings_;
};

// What a kernel factory sees of its node.
struct NodeInfo {
  std::string name;
  std::string op_type;
  Attrs attrs;
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Once per step. `in` and `out` have the descs of the NodeInfo, with data bound.
  // Outputs never alias inputs unless the kernel's factory was told so.
  virtual void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) = 0;
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const NodeInfo&)>;

// Registration happens at library load (PDNG_REGISTER_KERNEL); one factory per op type.
void register_kernel(const std::string& op_type, KernelFactory factory);
bool has_kernel(const std::string& op_type);
std::vector<std::string> kernel_op_types();
// Throws Error if no kernel is registered for the op type or the factory refuses the node.
std::unique_ptr<Kernel> create_kernel(const NodeInfo& node);

// A kernel that needs no preparation: a function called with the node and the tensors.
using KernelFn = void (*)(const NodeInfo& node, const std::vector<Tensor>& in, std::vector<Tensor>& out);
class FnKernel : public Kernel {
 public:
  FnKernel(const NodeInfo& node, KernelFn fn) : node_(node), fn_(fn) {}
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { fn_(node_, in, out); }

 private:
  NodeInfo node_;
  KernelFn fn_;
};

// Registers a KernelFn or a factory under an op type.
inline KernelFactory fn_factory(KernelFn fn) {
  return [fn](const NodeInfo& node) { return std::unique_ptr<Kernel>(new FnKernel(node, fn)); };
}

#define PDNG_CONCAT_INNER(a, b) a##b
#define PDNG_CONCAT(a, b) PDNG_CONCAT_INNER(a, b)
// PDNG_REGISTER_KERNEL("MatMul", factory) where factory is a KernelFactory.
#define PDNG_REGISTER_KERNEL(op_type, factory) \
  static const bool PDNG_CONCAT(pdng_registered_, __COUNTER__) = (::pdng::register_kernel(op_type, factory), true)
// PDNG_REGISTER_KERNEL_FN("Relu", relu_fn) where relu_fn is a KernelFn.
#define PDNG_REGISTER_KERNEL_FN(op_type, fn) PDNG_REGISTER_KERNEL(op_type, ::pdng::fn_factory(fn))

// Throws Error(message) unless cond.
#define PDNG_CHECK(cond, message)                          \
  do {                                                     \
    if (!(cond)) throw ::pdng::Error(std::string(message)); \
  } while (0)

// Dispatch on a runtime dtype to a typed body: PDNG_DISPATCH_FLOAT(dtype, T, { body using T; })
#define PDNG_DISPATCH_CASE(enum_value, type, T, ...) \
  case ::pdng::DType::enum_value: {                  \
    using T = type;                                  \
    __VA_ARGS__;                                     \
    break;                                           \
  }
#define PDNG_DISPATCH_FLOAT(dtype, T, ...)                                                       \
  switch (dtype) {                                                                              \
    PDNG_DISPATCH_CASE(Float32, float, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Float64, double, T, __VA_ARGS__)                                         \
    default:                                                                                    \
      throw ::pdng::Error(std::string("unsupported dtype ") + ::pdng::dtype_name(dtype) +       \
                          " (float32 or float64 expected)");                                    \
  }
#define PDNG_DISPATCH_NUMERIC(dtype, T, ...)                                                     \
  switch (dtype) {                                                                              \
    PDNG_DISPATCH_CASE(Float32, float, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Float64, double, T, __VA_ARGS__)                                         \
    PDNG_DISPATCH_CASE(Int32, int32_t, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Int64, int64_t, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Int16, int16_t, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Int8, int8_t, T, __VA_ARGS__)                                            \
    PDNG_DISPATCH_CASE(UInt8, uint8_t, T, __VA_ARGS__)                                          \
    default:                                                                                    \
      throw ::pdng::Error(std::string("unsupported dtype ") + ::pdng::dtype_name(dtype));       \
  }
#define PDNG_DISPATCH_ALL(dtype, T, ...)                                                         \
  switch (dtype) {                                                                              \
    PDNG_DISPATCH_CASE(Float32, float, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Float64, double, T, __VA_ARGS__)                                         \
    PDNG_DISPATCH_CASE(Int32, int32_t, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Int64, int64_t, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Int16, int16_t, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Int8, int8_t, T, __VA_ARGS__)                                            \
    PDNG_DISPATCH_CASE(UInt8, uint8_t, T, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Bool, bool, T, __VA_ARGS__)                                              \
    PDNG_DISPATCH_CASE(Float16, uint16_t, T, __VA_ARGS__)                                       \
    PDNG_DISPATCH_CASE(BFloat16, uint16_t, T, __VA_ARGS__)                                      \
  }

// Threads for the plain-loop kernels (OpenMP) and oneDNN; set by the executor.
int num_threads();
void set_num_threads(int n);

// Row-major strides of a shape, in elements.
std::vector<int64_t> row_major_strides(const Shape& shape);

}  // namespace pdng
