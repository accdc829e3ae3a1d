// Elementwise kernels: binary arithmetic and comparisons with NumPy broadcasting, unary math,
// the unary backprops, Select, Convert and BroadcastTo.
//
// The NumPy interpreter (backends/interpreter/kernels/basic.py, nn.py) is the specification:
// same dtypes, same order of floating-point operations (scalars cast to the data's dtype first),
// integer Divide is np.floor_divide (x // 0 == 0), integer arithmetic wraps, Maximum/Minimum
// propagate NaN, Gelu's erf is evaluated in double as scipy's float32 erf is (exact float32 Gelu
// and GeluBackprop of finite same-shape tensors run oneDNN's vectorized GELU instead: see DnnlGelu),
// bool Divide and
// Power are NumPy's (a or not b), float -> int Convert truncates (C casts, as NumPy's astype).
// exp/log/tanh/pow are the C library's, which may differ from NumPy's SIMD versions by an ulp.
//
// Broadcasting: the constructor collapses the output's dims into an innermost run, along which
// each operand is either contiguous (stride 1) or constant (stride 0), and outer dims with
// per-operand strides. run() walks the outer dims with an odometer and calls a simple inner loop
// specialized for the stride pattern; same-shape operands and a scalar operand are one flat run,
// a bias over the last dim is a contiguous run per row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "pdng/dnnl_common.h"
#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

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

// --- binary functors: operator()(a, b) -> output element ----------------------------------------
struct AddOp {
  static constexpr unsigned kinds = kAll;  // bool: logical or, as np.add
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) + Arith<T>(b)); }
};
struct SubtractOp {
  static constexpr unsigned kinds = kNumeric;
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) - Arith<T>(b)); }
};
struct MultiplyOp {
  static constexpr unsigned kinds = kAll;  // bool: logical and
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) * Arith<T>(b)); }
};
// bool Divide and Power: NumPy computes them in float64 / int8 and casts back: a or not b.
struct DivideOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 2;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_same<T, bool>::value) {
      return a || !b;
    } else if constexpr (is_float_v<T>) {
      return a / b;
    } else {
      // np.floor_divide: x // 0 == 0, MIN // -1 == MIN (wraps).
      if (b == 0) return T(0);
      if constexpr (std::is_signed<T>::value) {
        if (b == T(-1)) return static_cast<T>(Arith<T>(0) - Arith<T>(a));
        T q = static_cast<T>(a / b);
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        return q;
      } else {
        return static_cast<T>(a / b);
      }
    }
  }
};
struct MaximumOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const {
    if constexpr (is_float_v<T>) return (a >= b || a != a) ? a : b;  // NaN propagates
    else return a >= b ? a : b;
  }
};
struct MinimumOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const {
    if constexpr (is_float_v<T>) return (a <= b || a != a) ? a : b;
    else return a <= b ? a : b;
  }
};
struct PowerOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 16;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_same<T, bool>::value) {
      return a || !b;
    } else if constexpr (is_float_v<T>) {
      return std::pow(a, b);
    } else {
      // Exponentiation by squaring modulo 2^64 (negative exponents are rejected before).
      uint64_t base = static_cast<uint64_t>(static_cast<int64_t>(a)), result = 1;
      uint64_t e = static_cast<uint64_t>(b);
      while (e) {
        if (e & 1) result *= base;
        base *= base;
        e >>= 1;
      }
      return static_cast<T>(result);
    }
  }
};

#define PDNG_COMPARISON(Name, expr)                                     \
  struct Name {                                                         \
    static constexpr unsigned kinds = kAll;                             \
    static constexpr int cost = 1;                                      \
    template <class T> bool operator()(T a, T b) const { return expr; } \
  };
PDNG_COMPARISON(EqualOp, a == b)
PDNG_COMPARISON(NotEqualOp, a != b)
PDNG_COMPARISON(LessOp, a < b)
PDNG_COMPARISON(LessEqualOp, a <= b)
PDNG_COMPARISON(GreaterOp, a > b)
PDNG_COMPARISON(GreaterEqualOp, a >= b)
PDNG_COMPARISON(LogicalAndOp, (a != T(0)) && (b != T(0)))
PDNG_COMPARISON(LogicalOrOp, (a != T(0)) || (b != T(0)))
#undef PDNG_COMPARISON

// Backprops: (forward value, output gradient) -> input gradient, as the interpreter.
struct ReluBackpropOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 1;
  template <class T> T operator()(T out, T delta) const { return out > T(0) ? delta : T(0); }
};
struct TanhBackpropOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 1;
  template <class T> T operator()(T out, T delta) const { return delta * (T(1) - out * out); }
};
struct SigmoidBackpropOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 1;
  template <class T> T operator()(T out, T delta) const { return delta * out * (T(1) - out); }
};

// GELU constants, each rounded to the data's dtype as the interpreter's t(...) does.
constexpr double kGeluAlpha = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluConstant = 0.044715;  // (the decimal constants round to Python's math.sqrt values)
constexpr double kSqrtHalf = 0.70710678118654752440;   // sqrt(0.5)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

// erf as scipy.special.erf computes it: the float32 loop evaluates in double.
inline float erf_of(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }
inline double erf_of(double x) { return std::erf(x); }

template <bool Approximate>
struct GeluBackpropOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 24;
  template <class T> T operator()(T x, T delta) const {
    if constexpr (Approximate) {
      const T alpha = T(kGeluAlpha), c = T(kGeluConstant);
      const T beta = alpha * c * T(3);
      T x_sq = x * x;
      T tanh_out = std::tanh(alpha * x * (T(1) + c * x_sq));
      T slope = (T(1) - tanh_out * tanh_out) * (alpha + beta * x_sq);
      return delta * T(0.5) * (T(1) + tanh_out + x * slope);
    } else {
      T first = T(0.5) * (T(1) + erf_of(x * T(kSqrtHalf)));
      T second = T(kInvSqrt2Pi) * x * std::exp(T(-0.5) * x * x);
      return delta * (first + second);
    }
  }
};

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

template <class Op, class T>
void binary_fn(const Broadcast& p, const Tensor& a, const Tensor& b, Tensor& out) {
  using TO = decltype(Op{}(T(), T()));
  if constexpr (std::is_same<Op, PowerOp>::value && std::is_integral<T>::value && std::is_signed<T>::value) {
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

[[noreturn]] void unsupported(const NodeInfo& node, DType dtype) {
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

// --- oneDNN GELU (float32, erf) ---------------------------------------------------------------------
// The loops evaluate erf in double, one element at a time, to match scipy bit for bit: in a
// transformer layer's step that made Gelu and GeluBackprop a third of the step (tools/profile_steps.py,
// one thread: 2.6 of 7.8 ms; 0.4 ms with oneDNN). oneDNN's eltwise gelu_erf is vectorized; against the
// loops, on 65,536 inputs of N(0, 16): median 1 ulp forward and 2 backward, absolute error at most
// 4.8e-7 and 7.2e-7. It runs on finite float32 tensors of one shape, the loops on everything else.
// The tanh approximation (rarer: approximate=True) keeps its loops.
class DnnlGelu {
 public:
  // backward: GeluBackprop (inputs x, delta); otherwise Gelu. False where oneDNN has no implementation.
  bool init(int64_t n, bool backward) {
    if (n <= 0) return false;
    try {
      const dnnl::memory::desc md({n}, dnnl::memory::data_type::f32, dnnl::memory::dims{1});
      const auto algorithm = dnnl::algorithm::eltwise_gelu_erf;
      dnnl::eltwise_forward::primitive_desc forward(dnnl_engine(), dnnl::prop_kind::forward_training, algorithm, md,
                                                    md, 0.f, 0.f);
      src_ = wrap(md);
      out_ = wrap(md);
      if (backward) {
        dnnl::eltwise_backward::primitive_desc pd(dnnl_engine(), algorithm, md, md, md, 0.f, 0.f, forward);
        prim_ = dnnl::eltwise_backward(pd);
        delta_ = wrap(md);
        args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, delta_}, {DNNL_ARG_DIFF_SRC, out_}};
      } else {
        prim_ = dnnl::eltwise_forward(forward);
        args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, out_}};
      }
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

  void run(const void* x, const void* delta, void* out) {
    src_.set_data_handle(const_cast<void*>(x));
    if (delta) delta_.set_data_handle(const_cast<void*>(delta));
    out_.set_data_handle(out);
    prim_.execute(dnnl_stream(), args_);
    dnnl_stream().wait();
  }

 private:
  dnnl::primitive prim_;
  dnnl::memory src_, delta_, out_;
  std::unordered_map<int, dnnl::memory> args_;
};

// Gelu (one input) or GeluBackprop (x, delta): oneDNN where it applies, else the loop kernel.
class GeluKernel : public Kernel {
 public:
  GeluKernel(const NodeInfo& node, std::unique_ptr<Kernel> loops) : loops_(std::move(loops)) {
    const bool same_shapes = std::all_of(node.inputs.begin(), node.inputs.end(), [&](const TensorDesc& d) {
      return d.dtype == DType::Float32 && d.shape == node.outputs[0].shape;
    });
    n_ = node.outputs[0].numel();
    backward_ = node.inputs.size() == 2;
    if (same_shapes && !node.attrs.get_bool("approximate", false)) use_dnnl_ = dnnl_.init(n_, backward_);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (use_dnnl_ && all_finite(in[0].as<float>(), n_) && (!backward_ || all_finite(in[1].as<float>(), n_))) {
      dnnl_.run(in[0].data, backward_ ? in[1].data : nullptr, out[0].data);
      return;
    }
    loops_->run(in, out);
  }

 private:
  std::unique_ptr<Kernel> loops_;
  DnnlGelu dnnl_;
  int64_t n_ = 0;
  bool backward_ = false, use_dnnl_ = false;
};

std::unique_ptr<Kernel> make_gelu_backprop(const NodeInfo& node) {
  auto loops = node.attrs.get_bool("approximate", false) ? make_binary_with<GeluBackpropOp<true>>(node)
                                                         : make_binary_with<GeluBackpropOp<false>>(node);
  return std::unique_ptr<Kernel>(new GeluKernel(node, std::move(loops)));
}

PDNG_REGISTER_KERNEL("Add", make_binary_with<AddOp>);
PDNG_REGISTER_KERNEL("Subtract", make_binary_with<SubtractOp>);
PDNG_REGISTER_KERNEL("Multiply", make_binary_with<MultiplyOp>);
PDNG_REGISTER_KERNEL("Divide", make_binary_with<DivideOp>);
PDNG_REGISTER_KERNEL("Maximum", make_binary_with<MaximumOp>);
PDNG_REGISTER_KERNEL("Minimum", make_binary_with<MinimumOp>);
PDNG_REGISTER_KERNEL("Power", make_binary_with<PowerOp>);
PDNG_REGISTER_KERNEL("Equal", make_binary_with<EqualOp>);
PDNG_REGISTER_KERNEL("NotEqual", make_binary_with<NotEqualOp>);
PDNG_REGISTER_KERNEL("Less", make_binary_with<LessOp>);
PDNG_REGISTER_KERNEL("LessEqual", make_binary_with<LessEqualOp>);
PDNG_REGISTER_KERNEL("Greater", make_binary_with<GreaterOp>);
PDNG_REGISTER_KERNEL("GreaterEqual", make_binary_with<GreaterEqualOp>);
PDNG_REGISTER_KERNEL("LogicalAnd", make_binary_with<LogicalAndOp>);
PDNG_REGISTER_KERNEL("LogicalOr", make_binary_with<LogicalOrOp>);
PDNG_REGISTER_KERNEL("ReluBackprop", make_binary_with<ReluBackpropOp>);
PDNG_REGISTER_KERNEL("TanhBackprop", make_binary_with<TanhBackpropOp>);
PDNG_REGISTER_KERNEL("SigmoidBackprop", make_binary_with<SigmoidBackpropOp>);
PDNG_REGISTER_KERNEL("GeluBackprop", make_gelu_backprop);

// --- unary ops: same shape in and out, one flat loop ------------------------------------------------
struct ReluOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 1;
  // np.maximum(x, 0): NaN stays NaN.
  template <class T> T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
struct TanhOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 16;
  template <class T> T operator()(T x) const { return std::tanh(x); }
};
struct SigmoidOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 16;
  template <class T> T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); }
};
struct ExpOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 16;
  template <class T> T operator()(T x) const { return std::exp(x); }
};
struct LogOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 16;
  template <class T> T operator()(T x) const { return std::log(x); }
};
struct SqrtOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 2;
  template <class T> T operator()(T x) const { return std::sqrt(x); }
};
struct NegativeOp {
  static constexpr unsigned kinds = kNumeric;
  static constexpr int cost = 1;
  template <class T> T operator()(T x) const {
    if constexpr (is_float_v<T>) return -x;
    else return static_cast<T>(Arith<T>(0) - Arith<T>(x));
  }
};
struct AbsOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T x) const {
    if constexpr (is_float_v<T>) return std::fabs(x);
    else if constexpr (std::is_signed<T>::value) {
      // Branch-free |x| (MIN stays MIN, as in NumPy): (x ^ m) - m with m all ones where x < 0.
      using U = std::make_unsigned_t<T>;
      const U m = static_cast<U>(U(0) - U(x < 0));
      return static_cast<T>(static_cast<U>(static_cast<U>(U(x) ^ m) - m));
    }
    else return x;
  }
};
struct LogicalNotOp {  // output has the input's dtype (the IR's type rule), 1 where x == 0
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T x) const { return static_cast<T>(x == T(0)); }
};
template <bool Approximate>
struct GeluOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 24;
  template <class T> T operator()(T x) const {
    T inner;
    if constexpr (Approximate) inner = std::tanh(T(kGeluAlpha) * (x + T(kGeluConstant) * x * x * x));
    else inner = erf_of(x * T(kSqrtHalf));
    return x * T(0.5) * (T(1) + inner);
  }
};

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

std::unique_ptr<Kernel> make_gelu(const NodeInfo& node) {
  auto loops = node.attrs.get_bool("approximate", false) ? make_unary_with<GeluOp<true>>(node)
                                                         : make_unary_with<GeluOp<false>>(node);
  return std::unique_ptr<Kernel>(new GeluKernel(node, std::move(loops)));
}

PDNG_REGISTER_KERNEL("Relu", make_unary_with<ReluOp>);
PDNG_REGISTER_KERNEL("Tanh", make_unary_with<TanhOp>);
PDNG_REGISTER_KERNEL("Sigmoid", make_unary_with<SigmoidOp>);
PDNG_REGISTER_KERNEL("Exp", make_unary_with<ExpOp>);
PDNG_REGISTER_KERNEL("Log", make_unary_with<LogOp>);
PDNG_REGISTER_KERNEL("Sqrt", make_unary_with<SqrtOp>);
PDNG_REGISTER_KERNEL("Negative", make_unary_with<NegativeOp>);
PDNG_REGISTER_KERNEL("Abs", make_unary_with<AbsOp>);
PDNG_REGISTER_KERNEL("LogicalNot", make_unary_with<LogicalNotOp>);
PDNG_REGISTER_KERNEL("Gelu", make_gelu);

// --- Select, BroadcastTo: moves of whole elements, by element size -----------------------------------
template <size_t N> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };

// c ? x : y without a branch or conditional loads, so that the loops vectorize.
template <class U>
inline U blend(uint8_t c, U x, U y) {
  const U m = static_cast<U>(U(0) - U(c != 0));
  return static_cast<U>((x & m) | (y & static_cast<U>(~m)));
}

template <class U>
void select_fn(const Broadcast& p, const Tensor& c, const Tensor& a, const Tensor& b, Tensor& out) {
  const uint8_t* pc = c.as<uint8_t>();  // bool, read as bytes
  const U* pa = a.as<U>();
  const U* pb = b.as<U>();
  U* po = out.as<U>();
  const int64_t sc = p.istride[0], sa = p.istride[1], sb = p.istride[2];
  p.for_each(1, [&](int64_t oo, const int64_t* off, int64_t n) {
    const uint8_t* __restrict cc = pc + off[0];
    const U* __restrict aa = pa + off[1];
    const U* __restrict bb = pb + off[2];
    U* __restrict o = po + oo;
    if (sc && sa && sb) {
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], aa[i], bb[i]);
    } else if (sc && sa) {
      const U bv = *bb;
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], aa[i], bv);
    } else if (sc && sb) {
      const U av = *aa;
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], av, bb[i]);
    } else if (sc) {
      const U av = *aa, bv = *bb;
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], av, bv);
    } else {
      const U* __restrict src = *cc ? aa : bb;
      if (*cc ? sa : sb) {
        std::memcpy(o, src, static_cast<size_t>(n) * sizeof(U));
      } else {
        const U v = *src;
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      }
    }
  });
}

class SelectKernel : public Kernel {
 public:
  explicit SelectKernel(const NodeInfo& node)
      : plan_({node.inputs[0].shape, node.inputs[1].shape, node.inputs[2].shape}, node.outputs[0].shape) {
    check_arity(node, 3, 1);
    PDNG_CHECK(node.inputs[0].dtype == DType::Bool, "Select: condition must be bool, got " + node.inputs[0].str());
    PDNG_CHECK(node.inputs[1].dtype == node.inputs[2].dtype && node.outputs[0].dtype == node.inputs[1].dtype,
               "Select: branch dtypes differ: " + node.inputs[1].str() + " and " + node.inputs[2].str());
    switch (dtype_size(node.inputs[1].dtype)) {
      case 1: fn_ = &select_fn<uint8_t>; break;
      case 2: fn_ = &select_fn<uint16_t>; break;
      case 4: fn_ = &select_fn<uint32_t>; break;
      case 8: fn_ = &select_fn<uint64_t>; break;
      default: unsupported(node, node.inputs[1].dtype);
    }
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    fn_(plan_, in[0], in[1], in[2], out[0]);
  }

 private:
  Broadcast plan_;
  void (*fn_)(const Broadcast&, const Tensor&, const Tensor&, const Tensor&, Tensor&) = nullptr;
};

PDNG_REGISTER_KERNEL("Select", [](const NodeInfo& node) {
  check_arity(node, 3, 1);
  return std::unique_ptr<Kernel>(new SelectKernel(node));
});

template <class U>
void broadcast_fn(const Broadcast& p, const Tensor& a, Tensor& out) {
  const U* pa = a.as<U>();
  U* po = out.as<U>();
  const bool contiguous = p.istride[0] != 0;
  p.for_each(1, [&](int64_t oo, const int64_t* off, int64_t n) {
    U* __restrict o = po + oo;
    if (contiguous) {
      std::memcpy(o, pa + off[0], static_cast<size_t>(n) * sizeof(U));
    } else {
      const U v = pa[off[0]];
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    }
  });
}

class BroadcastToKernel : public Kernel {
 public:
  explicit BroadcastToKernel(const NodeInfo& node) : plan_({node.inputs[0].shape}, node.outputs[0].shape) {
    PDNG_CHECK(node.outputs[0].dtype == node.inputs[0].dtype,
               "BroadcastTo: output dtype " + node.outputs[0].str() + " differs from input " + node.inputs[0].str());
    PDNG_CHECK(node.outputs[0].shape == node.inputs[1].shape,
               "BroadcastTo: output " + node.outputs[0].str() + " does not have the shape of " + node.inputs[1].str());
    switch (dtype_size(node.inputs[0].dtype)) {
      case 1: fn_ = &broadcast_fn<uint8_t>; break;
      case 2: fn_ = &broadcast_fn<uint16_t>; break;
      case 4: fn_ = &broadcast_fn<uint32_t>; break;
      case 8: fn_ = &broadcast_fn<uint64_t>; break;
      default: unsupported(node, node.inputs[0].dtype);
    }
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { fn_(plan_, in[0], out[0]); }

 private:
  Broadcast plan_;
  void (*fn_)(const Broadcast&, const Tensor&, Tensor&) = nullptr;
};

PDNG_REGISTER_KERNEL("BroadcastTo", [](const NodeInfo& node) {
  check_arity(node, 2, 1);
  return std::unique_ptr<Kernel>(new BroadcastToKernel(node));
});

// --- Convert: ndarray.astype ----------------------------------------------------------------------
template <class D, class S>
inline D convert_one(S s) {
  if constexpr (std::is_same<D, bool>::value) return s != S(0);  // float -> bool: x != 0 (NaN is true)
  else return static_cast<D>(s);                                 // float -> int truncates, as C casts
}

template <class S, class D>
void convert_fn(const Tensor& in, Tensor& out) {
  const S* __restrict x = in.as<S>();
  D* __restrict y = out.as<D>();
  int64_t n = in.numel();
  parallel_ranges_by_cost(n, n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = convert_one<D, S>(x[i]);
  });
}

void copy_fn(const Tensor& in, Tensor& out) {
  size_t bytes = in.desc.nbytes();
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  parallel_ranges_by_cost(static_cast<int64_t>(bytes), static_cast<int64_t>(bytes / 8),
                          [&](int64_t begin, int64_t end) {
                            std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
                          });
}

#define PDNG_CONVERT_DST(S, dst_dtype, fn)                        \
  switch (dst_dtype) {                                            \
    case DType::Bool: fn = &convert_fn<S, bool>; break;           \
    case DType::UInt8: fn = &convert_fn<S, uint8_t>; break;       \
    case DType::Int8: fn = &convert_fn<S, int8_t>; break;         \
    case DType::Int16: fn = &convert_fn<S, int16_t>; break;       \
    case DType::Int32: fn = &convert_fn<S, int32_t>; break;       \
    case DType::Int64: fn = &convert_fn<S, int64_t>; break;       \
    case DType::Float32: fn = &convert_fn<S, float>; break;       \
    case DType::Float64: fn = &convert_fn<S, double>; break;      \
    default: break;                                               \
  }

std::unique_ptr<Kernel> make_convert(const NodeInfo& node) {
  check_arity(node, 1, 1);
  DType src = node.inputs[0].dtype, dst = node.outputs[0].dtype;
  PDNG_CHECK(node.inputs[0].shape == node.outputs[0].shape,
             "Convert: output shape " + node.outputs[0].str() + " differs from input " + node.inputs[0].str());
  UnaryFn fn = nullptr;
  if (src == dst) {
    fn = &copy_fn;
  } else {
    switch (src) {
      case DType::Bool: PDNG_CONVERT_DST(bool, dst, fn); break;
      case DType::UInt8: PDNG_CONVERT_DST(uint8_t, dst, fn); break;
      case DType::Int8: PDNG_CONVERT_DST(int8_t, dst, fn); break;
      case DType::Int16: PDNG_CONVERT_DST(int16_t, dst, fn); break;
      case DType::Int32: PDNG_CONVERT_DST(int32_t, dst, fn); break;
      case DType::Int64: PDNG_CONVERT_DST(int64_t, dst, fn); break;
      case DType::Float32: PDNG_CONVERT_DST(float, dst, fn); break;
      case DType::Float64: PDNG_CONVERT_DST(double, dst, fn); break;
      default: break;
    }
  }
  if (!fn) {
    throw Error(std::string("Convert: unsupported conversion from ") + dtype_name(src) + " to " + dtype_name(dst));
  }
  return std::unique_ptr<Kernel>(new UnaryKernel(fn));
}
#undef PDNG_CONVERT_DST

PDNG_REGISTER_KERNEL("Convert", make_convert);

}  // namespace
}  // namespace pdng
