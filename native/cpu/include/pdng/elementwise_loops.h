// The loops of the elementwise kernels, shared by the op families that run on them: binary ops
// with NumPy broadcasting (elementwise.cc, the activation backprops of activation.cc), unary ops
// over one flat range (elementwise.cc, activation.cc, Convert in tensor.cc), and the broadcasting
// plan itself (Select, BroadcastTo in shape.cc).
//
// Broadcasting: the constructor collapses the output's dims into an innermost run, along which
// each operand is either contiguous (stride 1) or constant (stride 0), and outer dims with
// per-operand strides. run() walks the outer dims with an odometer and calls a simple inner loop
// specialized for the stride pattern; same-shape operands and a scalar operand are one flat run,
// a bias over the last dim is a contiguous run per row.
//
// A functor Op has ``kinds`` (the dtype kinds it accepts), ``cost`` (relative work per element, for
// threading) and operator(); make_binary_with<Op> / make_unary_with<Op> make its kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {

// --- parallel loops ------------------------------------------------------------------------------
// Work (elements x relative cost) per thread below which a loop is not worth splitting further.
constexpr int64_t kWorkPerThread = 16384;

// Calls f(begin, end) on disjoint ranges covering [0, n), on several threads when `work` pays:
// one thread per kWorkPerThread (kernel_util.h's parallel_ranges is all-or-nothing instead).
template <class F>
void parallel_ranges_by_cost(int64_t n, int64_t work, F&& f) {
  if (n <= 0) return;
#ifdef _OPENMP
  int64_t threads = std::min<int64_t>({static_cast<int64_t>(num_threads()), work / kWorkPerThread, n});
  if (threads > 1) {
#pragma omp parallel num_threads(static_cast<int>(threads))
    {
      int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t begin = n * t / nt, end = n * (t + 1) / nt;
      if (begin < end) f(begin, end);
    }
    return;
  }
#endif
  f(0, n);
}

// --- broadcasting plan ------------------------------------------------------------------------
constexpr int kMaxInputs = 3;
constexpr int64_t kChunk = 8192;  // a long inner run is cut in chunks of this size for threading

struct Broadcast {
  int nin = 0;
  int64_t numel = 0;
  int64_t inner = 1;                      // length of the innermost run
  int64_t istride[kMaxInputs] = {0, 0, 0};  // 0 or 1: operand constant or contiguous along the run
  int nouter = 0;                         // collapsed outer dims, outermost first
  int64_t odims[kMaxRank] = {};
  int64_t ostride[kMaxInputs][kMaxRank] = {};
  int64_t rows = 1;                       // product of the outer dims
  int64_t chunk = 1, nchunks = 1;         // the run is processed in nchunks pieces of chunk elements

  Broadcast() = default;
  Broadcast(const std::vector<Shape>& inputs, const Shape& out) {
    nin = static_cast<int>(inputs.size());
    PDNG_CHECK(nin >= 1 && nin <= kMaxInputs, "internal: bad operand count for broadcasting");
    numel = shape_numel(out);
    const int rank = static_cast<int>(out.size());
    // Per operand, per output dim: the element stride (0 where the operand is broadcast).
    std::vector<std::vector<int64_t>> strides(nin, std::vector<int64_t>(rank, 0));
    for (int k = 0; k < nin; ++k) {
      const Shape& s = inputs[k];
      const int r = static_cast<int>(s.size());
      bool ok = r <= rank;
      std::vector<int64_t> rm = row_major_strides(s);
      for (int i = 0; ok && i < r; ++i) {
        int64_t d = s[i], od = out[rank - r + i];
        if (d == od && d != 1) strides[k][rank - r + i] = rm[i];
        else if (d != 1) ok = false;
      }
      if (!ok) throw Error("cannot broadcast operand " + std::to_string(k) + " of shape [" + shape_str(s) +
                           "] to the output shape [" + shape_str(out) + "]");
    }
    if (numel == 0) return;
    // Drop size-1 output dims and merge adjacent dims that every operand walks alike.
    std::vector<int64_t> dims;
    std::vector<std::vector<int64_t>> st(nin);
    for (int i = 0; i < rank; ++i) {
      if (out[i] == 1) continue;
      bool merge = !dims.empty();
      for (int k = 0; merge && k < nin; ++k) merge = st[k].back() == strides[k][i] * out[i];
      if (merge) {
        dims.back() *= out[i];
        for (int k = 0; k < nin; ++k) st[k].back() = strides[k][i];
      } else {
        dims.push_back(out[i]);
        for (int k = 0; k < nin; ++k) st[k].push_back(strides[k][i]);
      }
    }
    if (dims.empty()) {  // one element
      dims.push_back(1);
      for (int k = 0; k < nin; ++k) st[k].push_back(0);
    }
    PDNG_CHECK(static_cast<int>(dims.size()) <= kMaxRank + 1, "too many dimensions to broadcast");
    inner = dims.back();
    for (int k = 0; k < nin; ++k) {
      istride[k] = st[k].back();
      PDNG_CHECK(istride[k] == 0 || istride[k] == 1, "internal: broadcast inner stride is not 0 or 1");
    }
    nouter = static_cast<int>(dims.size()) - 1;
    for (int d = 0; d < nouter; ++d) {
      odims[d] = dims[d];
      rows *= dims[d];
      for (int k = 0; k < nin; ++k) ostride[k][d] = st[k][d];
    }
    if (inner >= 2 * kChunk) {
      chunk = kChunk;
      nchunks = (inner + kChunk - 1) / kChunk;
    } else {
      chunk = inner;
      nchunks = 1;
    }
  }

  // f(out_offset, in_offsets, n): the n outputs from out_offset on take operand k from
  // in_offsets[k] on, with stride istride[k]. `cost` is the relative cost of one element.
  template <class F>
  void for_each(int64_t cost, F&& f) const {
    if (numel == 0) return;
    parallel_ranges_by_cost(rows * nchunks, numel * cost, [&](int64_t begin, int64_t end) {
      int64_t row = begin / nchunks, ch = begin % nchunks;
      int64_t idx[kMaxRank];
      int64_t off[kMaxInputs] = {0, 0, 0};
      int64_t rest = row;
      for (int d = nouter - 1; d >= 0; --d) {
        idx[d] = rest % odims[d];
        rest /= odims[d];
        for (int k = 0; k < nin; ++k) off[k] += idx[d] * ostride[k][d];
      }
      int64_t in_off[kMaxInputs] = {0, 0, 0};
      for (int64_t item = begin; item < end; ++item) {
        int64_t lo = ch * chunk;
        int64_t n = std::min(chunk, inner - lo);
        for (int k = 0; k < nin; ++k) in_off[k] = off[k] + lo * istride[k];
        f(row * inner + lo, in_off, n);
        if (++ch == nchunks) {
          ch = 0;
          ++row;
          for (int d = nouter - 1; d >= 0; --d) {
            for (int k = 0; k < nin; ++k) off[k] += ostride[k][d];
            if (++idx[d] < odims[d]) break;
            for (int k = 0; k < nin; ++k) off[k] -= odims[d] * ostride[k][d];
            idx[d] = 0;
          }
        }
      }
    });
  }
};

// --- dtype kinds and wrapping integer arithmetic ---------------------------------------------------
enum Kinds : unsigned { kFloat = 1, kInt = 2, kBool = 4, kNumeric = kFloat | kInt, kAll = kFloat | kInt | kBool };

// The type integer arithmetic is done in: int for narrow types (promotion, no overflow in + - *),
// the unsigned type for 32/64-bit ones (wraps like NumPy, no undefined behaviour).
template <class T, class = void>
struct ArithType { using type = T; };
template <class T>
struct ArithType<T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value>> {
  using type = std::conditional_t<(sizeof(T) < 4), int, std::make_unsigned_t<T>>;
};
template <class T> using Arith = typename ArithType<T>::type;

template <class T> constexpr bool is_float_v = std::is_floating_point<T>::value;

// The inner run of a binary op, specialized on which operands are contiguous.
template <class Op, class TI, class TO>
inline void binary_run(TO* __restrict o, const TI* __restrict a, const TI* __restrict b, int64_t n, int64_t sa,
                       int64_t sb) {
  const Op op{};
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], b[i]);
  } else if (sa) {
    const TI bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], bv);
  } else if (sb) {
    const TI av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = op(av, b[i]);
  } else {
    const TO v = op(*a, *b);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

using BinaryFn = void (*)(const Broadcast&, const Tensor&, const Tensor&, Tensor&);

// Ops whose integer exponents must not be negative (PowerOp) say so with a member
// ``kRejectsNegativeIntegerExponent``; binary_fn then checks the exponents first.
template <class Op, class = void>
struct RejectsNegativeIntegerExponent : std::false_type {};
template <class Op>
struct RejectsNegativeIntegerExponent<Op, std::void_t<decltype(Op::kRejectsNegativeIntegerExponent)>>
    : std::true_type {};

template <class Op, class T>
void binary_fn(const Broadcast& p, const Tensor& a, const Tensor& b, Tensor& out) {
  using TO = decltype(Op{}(T(), T()));
  if constexpr (RejectsNegativeIntegerExponent<Op>::value && std::is_integral<T>::value && std::is_signed<T>::value) {
    // NumPy: "Integers to negative integer powers are not allowed."
    const T* e = b.as<T>();
    for (int64_t i = 0, n = b.numel(); i < n; ++i)
      if (e[i] < 0) throw Error("integers to negative integer powers are not allowed");
  }
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  TO* po = out.as<TO>();
  const int64_t sa = p.istride[0], sb = p.istride[1];
  p.for_each(Op::cost, [&](int64_t oo, const int64_t* off, int64_t n) {
    binary_run<Op, T, TO>(po + oo, pa + off[0], pb + off[1], n, sa, sb);
  });
}

template <class Op>
BinaryFn pick_binary(DType dtype) {
  switch (dtype) {
    case DType::Float32: if constexpr (bool(Op::kinds & kFloat)) return &binary_fn<Op, float>; break;
    case DType::Float64: if constexpr (bool(Op::kinds & kFloat)) return &binary_fn<Op, double>; break;
    case DType::Int32: if constexpr (bool(Op::kinds & kInt)) return &binary_fn<Op, int32_t>; break;
    case DType::Int64: if constexpr (bool(Op::kinds & kInt)) return &binary_fn<Op, int64_t>; break;
    case DType::Int16: if constexpr (bool(Op::kinds & kInt)) return &binary_fn<Op, int16_t>; break;
    case DType::Int8: if constexpr (bool(Op::kinds & kInt)) return &binary_fn<Op, int8_t>; break;
    case DType::UInt8: if constexpr (bool(Op::kinds & kInt)) return &binary_fn<Op, uint8_t>; break;
    case DType::Bool: if constexpr (bool(Op::kinds & kBool)) return &binary_fn<Op, bool>; break;
    default: break;
  }
  return nullptr;
}

class BinaryKernel : public Kernel {
 public:
  BinaryKernel(const NodeInfo& node, BinaryFn fn)
      : plan_({node.inputs[0].shape, node.inputs[1].shape}, node.outputs[0].shape), fn_(fn) {}
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { fn_(plan_, in[0], in[1], out[0]); }

 private:
  Broadcast plan_;
  BinaryFn fn_;
};

[[noreturn]] inline void unsupported(const NodeInfo& node, DType dtype) {
  throw Error(node.op_type + ": unsupported dtype " + dtype_name(dtype));
}

template <class Op>
std::unique_ptr<Kernel> make_binary_with(const NodeInfo& node) {
  check_arity(node, 2, 1);
  DType dtype = node.inputs[0].dtype;
  PDNG_CHECK(node.inputs[1].dtype == dtype, node.op_type + ": operand dtypes differ: " + node.inputs[0].str() +
                                                " and " + node.inputs[1].str());
  BinaryFn fn = pick_binary<Op>(dtype);
  if (!fn) unsupported(node, dtype);
  using Probe = decltype(Op{}(0.0f, 0.0f));
  DType want = std::is_same<Probe, bool>::value ? DType::Bool : dtype;
  PDNG_CHECK(node.outputs[0].dtype == want, node.op_type + ": output dtype " + dtype_name(node.outputs[0].dtype) +
                                                ", expected " + dtype_name(want));
  return std::unique_ptr<Kernel>(new BinaryKernel(node, fn));
}

using UnaryFn = void (*)(const Tensor&, Tensor&);

template <class Op, class T>
void unary_fn(const Tensor& in, Tensor& out) {
  const T* __restrict x = in.as<T>();
  T* __restrict y = out.as<T>();
  int64_t n = in.numel();
  parallel_ranges_by_cost(n, n * Op::cost, [&](int64_t begin, int64_t end) {
    const Op op{};
    for (int64_t i = begin; i < end; ++i) y[i] = op(x[i]);
  });
}

template <class Op>
UnaryFn pick_unary(DType dtype) {
  switch (dtype) {
    case DType::Float32: if constexpr (bool(Op::kinds & kFloat)) return &unary_fn<Op, float>; break;
    case DType::Float64: if constexpr (bool(Op::kinds & kFloat)) return &unary_fn<Op, double>; break;
    case DType::Int32: if constexpr (bool(Op::kinds & kInt)) return &unary_fn<Op, int32_t>; break;
    case DType::Int64: if constexpr (bool(Op::kinds & kInt)) return &unary_fn<Op, int64_t>; break;
    case DType::Int16: if constexpr (bool(Op::kinds & kInt)) return &unary_fn<Op, int16_t>; break;
    case DType::Int8: if constexpr (bool(Op::kinds & kInt)) return &unary_fn<Op, int8_t>; break;
    case DType::UInt8: if constexpr (bool(Op::kinds & kInt)) return &unary_fn<Op, uint8_t>; break;
    case DType::Bool: if constexpr (bool(Op::kinds & kBool)) return &unary_fn<Op, bool>; break;
    default: break;
  }
  return nullptr;
}

class UnaryKernel : public Kernel {
 public:
  explicit UnaryKernel(UnaryFn fn) : fn_(fn) {}
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { fn_(in[0], out[0]); }

 private:
  UnaryFn fn_;
};

template <class Op>
std::unique_ptr<Kernel> make_unary_with(const NodeInfo& node) {
  check_arity(node, 1, 1);
  DType dtype = node.inputs[0].dtype;
  UnaryFn fn = pick_unary<Op>(dtype);
  if (!fn) unsupported(node, dtype);
  PDNG_CHECK(node.outputs[0].dtype == dtype && node.outputs[0].shape == node.inputs[0].shape,
             node.op_type + ": output " + node.outputs[0].str() + " differs from input " + node.inputs[0].str());
  return std::unique_ptr<Kernel>(new UnaryKernel(fn));
}

}  // namespace pdng
