// Kernel registry, attributes and type helpers.
#include "pdng/kernel.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pdng {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Bool: case DType::UInt8: case DType::Int8: return 1;
    case DType::Int16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::Float32: return 4;
    case DType::Int64: case DType::Float64: return 8;
  }
  throw Error("unknown dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "unknown";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream s;
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? "x" : "") << shape[i];
  return s.str();
}

std::string TensorDesc::str() const { return std::string(dtype_name(dtype)) + "[" + shape_str(shape) + "]"; }

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

// --- attributes ------------------------------------------------------------------------------
bool Attrs::has(const std::string& name) const {
  return ints_.count(name) || floats_.count(name) || strings_.count(name);
}

const std::vector<int64_t>& Attrs::get_ints(const std::string& name) const {
  auto it = ints_.find(name);
  if (it == ints_.end()) throw Error("missing integer attribute '" + name + "'");
  return it->second;
}

const std::vector<double>& Attrs::get_floats(const std::string& name) const {
  auto it = floats_.find(name);
  if (it == floats_.end()) throw Error("missing float attribute '" + name + "'");
  return it->second;
}

const std::string& Attrs::get_string(const std::string& name) const {
  auto it = strings_.find(name);
  if (it == strings_.end()) throw Error("missing string attribute '" + name + "'");
  return it->second;
}

int64_t Attrs::get_int(const std::string& name) const {
  const auto& v = get_ints(name);
  if (v.size() != 1) throw Error("attribute '" + name + "' is a list of " + std::to_string(v.size()) + ", not a scalar");
  return v[0];
}

double Attrs::get_float(const std::string& name) const {
  auto it = floats_.find(name);
  if (it == floats_.end()) {
    if (ints_.count(name)) return static_cast<double>(get_int(name));
    throw Error("missing float attribute '" + name + "'");
  }
  if (it->second.size() != 1) throw Error("attribute '" + name + "' is a list, not a scalar");
  return it->second[0];
}

// --- registry ----------------------------------------------------------------------------------
namespace {
std::map<std::string, KernelFactory>& registry() {
  static std::map<std::string, KernelFactory> kernels;
  return kernels;
}
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void register_kernel(const std::string& op_type, KernelFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (registry().count(op_type)) throw Error("kernel for " + op_type + " registered twice");
  registry()[op_type] = std::move(factory);
}

bool has_kernel(const std::string& op_type) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry().count(op_type) > 0;
}

std::vector<std::string> kernel_op_types() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

std::unique_ptr<Kernel> create_kernel(const NodeInfo& node) {
  KernelFactory factory;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(node.op_type);
    if (it == registry().end()) throw Error("the CPU backend has no kernel for op type " + node.op_type);
    factory = it->second;
  }
  return factory(node);
}

// --- threads -------------------------------------------------------------------------------------
namespace {
int g_threads = 0;
}

int num_threads() {
#ifdef _OPENMP
  return g_threads > 0 ? g_threads : omp_get_max_threads();
#else
  return 1;
#endif
}

void set_num_threads(int n) {
  g_threads = n;
#ifdef _OPENMP
  if (n > 0) omp_set_num_threads(n);
#endif
}

}  // namespace pdng
