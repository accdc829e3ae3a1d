// Small helpers shared by the kernel files (native/cpu/kernels/*.cc): the threading thresholds and
// range split of the plain loops, axis and dimension arithmetic, the checks of a node's inputs and
// outputs (with the messages the kernels report), and the float32/float64 kernel factories.
//
// Header-only (inline functions and templates) so that the loops that call them stay inlined.
// Constants that a kernel file tunes on its own (elementwise_loops.h's and optimizer.cc's work per
// thread, pool.cc's and conv.cc's thresholds) stay there.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "pdng/kernel.h"

namespace pdng {

// --- threading -----------------------------------------------------------------------------------
// Elements (work) below which a plain-loop kernel runs on the calling thread only: waking and
// joining the other threads costs more than they save. Shared by parallel_ranges and the
// `#pragma omp ... if (...)` tests of the reduction, normalization and loss kernels.
inline constexpr int64_t kParallelMin = 32768;

// Rank limit of the fixed-size per-dim arrays (odometers, broadcast plans), which keep the
// kernels' index arithmetic free of allocations.
inline constexpr int kMaxRank = 32;

// Lanes (adjacent columns) reduced together along a non-innermost axis (for_each_lane_group and
// the kernels' loops over one lane group).
inline constexpr int64_t kLanes = 64;

// The calling thread's number inside an OpenMP parallel region (0 without OpenMP), so that
// callers need no #ifdef _OPENMP of their own.
inline int thread_index() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// The number of threads of the current OpenMP parallel region (1 without OpenMP).
inline int thread_count() {
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}

// Calls f(begin, end, thread) on a static split of [0, items) over at most max_threads threads
// (0: no cap); one thread when `work` (elements touched) is at most kParallelMin. The split
// depends on the thread count only, so a kernel can keep per-thread scratch indexed by `thread`.
// f must not throw (an exception cannot leave an OpenMP region).
template <class F>
void parallel_ranges(int64_t items, int64_t work, F&& f, int max_threads = 0) {
  if (items <= 0) return;
  int64_t nt = work > kParallelMin ? std::min<int64_t>(num_threads(), items) : 1;
  if (max_threads > 0) nt = std::min<int64_t>(nt, max_threads);
  if (nt <= 1) {
    f(int64_t(0), items, 0);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(static_cast<int>(nt))
  {
    const int64_t T = thread_count(), t = thread_index();
    const int64_t b = items * t / T, e = items * (t + 1) / T;
    if (b < e) f(b, e, static_cast<int>(t));
  }
#else
  f(int64_t(0), items, 0);
#endif
}

// --- axes and dims -------------------------------------------------------------------------------
// An axis attribute in [-rank, rank) as an index in [0, rank), as NumPy takes it; throws Error
// naming the attribute (`what`) otherwise.
inline int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what = "axis") {
  const int64_t a = axis < 0 ? axis + rank : axis;
  PDNG_CHECK(a >= 0 && a < rank, what + " " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

// The product of the dims [begin, end) of a shape (1 when empty), e.g. the outer and inner sizes
// around an axis; dims past the rank count as 1.
inline int64_t prod(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) n *= s[i];
  return n;
}

// A tensor viewed as [outer, n, inner] around one axis, for the kernels that reduce along it;
// rows() = outer * inner is the number of reductions (one result per row).
struct AxisLayout {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t numel() const { return outer * n * inner; }
  int64_t rows() const { return outer * inner; }
};

inline AxisLayout axis_layout(const Shape& shape, int64_t axis) {
  AxisLayout L;
  L.outer = prod(shape, 0, axis);
  L.n = shape[axis];
  L.inner = prod(shape, axis + 1, shape.size());
  return L;
}

// Calls body(tag, base, lanes, row) for groups of lanes (reduction rows) of an AxisLayout, on
// several threads when it has kParallelMin elements: element k of lane j is at
// base + k * stride + j, the lane's row (its label, loss, ...) is row + j; stride 1 and one lane
// when tag is std::true_type (inner == 1, contiguous rows), else stride inner and up to kLanes
// lanes. Every lane group is processed whole by one thread, so results do not depend on the
// thread count.
template <class Body>
void for_each_lane_group(const AxisLayout& L, Body&& body) {
  const bool parallel = L.numel() >= kParallelMin;
  if (L.inner == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t o = 0; o < L.outer; ++o) {
      Body b = body;  // a private copy: its captures then live in registers
      b(std::true_type{}, o * L.n, int64_t(1), o);
    }
  } else {
    const int64_t blocks = (L.inner + kLanes - 1) / kLanes;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t item = 0; item < L.outer * blocks; ++item) {
      const int64_t o = item / blocks, j0 = (item % blocks) * kLanes;
      Body b = body;
      b(std::false_type{}, o * L.n * L.inner + j0, std::min(kLanes, L.inner - j0), o * L.inner + j0);
    }
  }
}

// --- checks of a node ----------------------------------------------------------------------------
// `what` (an input or output of the node) has the shape `expected`.
inline void check_shape(const TensorDesc& got, const Shape& expected, const std::string& what) {
  if (got.shape != expected)
    throw Error(what + " is " + got.str() + ", expected shape [" + shape_str(expected) + "]");
}

// The node has exactly n_in inputs and n_out outputs (the executor does not check arities).
inline void check_arity(const NodeInfo& node, size_t n_in, size_t n_out) {
  PDNG_CHECK(node.inputs.size() == n_in && node.outputs.size() == n_out,
             node.op_type + " expects " + std::to_string(n_in) + " inputs and " + std::to_string(n_out) + " outputs, got " +
                 std::to_string(node.inputs.size()) + " and " + std::to_string(node.outputs.size()));
}

// t has ref's dtype and shape (an output like its input, a gradient like its value, ...).
inline void check_like(const TensorDesc& t, const TensorDesc& ref, const std::string& what) {
  PDNG_CHECK(t.dtype == ref.dtype && t.shape == ref.shape, what + " " + t.str() + " does not match " + ref.str());
}

// t holds `count` elements of `dtype`, whatever its shape (per-channel vectors, per-row results).
inline void check_count(const TensorDesc& t, DType dtype, int64_t count, const std::string& what) {
  PDNG_CHECK(t.dtype == dtype && t.numel() == count,
             what + " " + t.str() + " must hold " + std::to_string(count) + " " + dtype_name(dtype) + " values");
}

// The dtype of a kernel that has float32 and float64 implementations only (the message of
// PDNG_DISPATCH_FLOAT, for kernels that check in their constructor).
inline void check_float_dtype(DType dtype) {
  PDNG_CHECK(dtype == DType::Float32 || dtype == DType::Float64,
             std::string("unsupported dtype ") + dtype_name(dtype) + " (float32 or float64 expected)");
}

// A 2-D spatial attribute (strides, dilations, paddings, window) as its (H, W) pair.
inline std::vector<int64_t> hw_attr(const Attrs& attrs, const char* name) {
  const auto& v = attrs.get_ints(name);
  PDNG_CHECK(v.size() == 2, std::string("attribute ") + name + " needs 2 values (H, W)");
  return v;
}

// --- float32 / float64 kernels -------------------------------------------------------------------
// Creates K<float> or K<double> for a floating-point dtype (Error for any other dtype).
template <template <class> class K>
std::unique_ptr<Kernel> make_float_kernel(const NodeInfo& node, DType dtype) {
  PDNG_DISPATCH_FLOAT(dtype, T, return std::unique_ptr<Kernel>(new K<T>(node)));
  return nullptr;
}

// A factory of K<float> / K<double> by the dtype of input `dtype_input`.
template <template <class> class K>
KernelFactory float_factory(int dtype_input = 0) {
  return [dtype_input](const NodeInfo& node) {
    PDNG_CHECK(static_cast<size_t>(dtype_input) < node.inputs.size(),
               node.op_type + " expects at least " + std::to_string(dtype_input + 1) + " inputs");
    return make_float_kernel<K>(node, node.inputs[dtype_input].dtype);
  };
}

// Whether no element is NaN or +-inf (x * 0 is NaN exactly for those). oneDNN's softmax does not
// propagate them as the interpreter does, so the loops handle tensors that hold any (the same for
// oneDNN's GELU).
inline bool all_finite(const float* x, int64_t n) {
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kBlock);
    float probe = 0;
#pragma omp simd reduction(+ : probe)
    for (int64_t i = b * kBlock; i < end; ++i) probe += x[i] * 0.0f;
    bad |= probe != 0.0f;  // NaN != 0
  }
  return !bad;
}

}  // namespace pdng
