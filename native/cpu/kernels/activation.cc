// Kernels of the elementwise activations (ir/ops/activation.py): Relu, Tanh, Sigmoid, Gelu and their
// backprops, on the loops of elementwise_loops.h. Gelu's erf is evaluated in double as scipy's
// float32 erf is (exact float32 Gelu and GeluBackprop of finite same-shape tensors run oneDNN's
// vectorized GELU instead: see DnnlGelu). tanh is the C library's, which may differ from NumPy's
// SIMD version by an ulp. The NumPy interpreter (backends/interpreter/kernels/activation.py) is the
// specification.
//
// Softmax and SoftmaxBackprop: every step is done in the data's dtype, in the interpreter's order;
// sums accumulate in double. Plain loops with OpenMP, float32 and float64; float32 Softmax runs
// oneDNN's (vectorized exp) where oneDNN has an implementation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "pdng/dnnl_common.h"
#include "pdng/elementwise_loops.h"
#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

// --- backprops: (forward value, output gradient) -> input gradient, as the interpreter ----------------
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

// --- unary activations: same shape in and out, one flat loop ---------------------------------------
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
    if (same_shapes && !node.attrs.get_bool("approximate")) use_dnnl_ = dnnl_.init(n_, backward_);
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
  auto loops = node.attrs.get_bool("approximate") ? make_binary_with<GeluBackpropOp<true>>(node)
                                                 : make_binary_with<GeluBackpropOp<false>>(node);
  return std::unique_ptr<Kernel>(new GeluKernel(node, std::move(loops)));
}
std::unique_ptr<Kernel> make_gelu(const NodeInfo& node) {
  auto loops = node.attrs.get_bool("approximate") ? make_unary_with<GeluOp<true>>(node)
                                                 : make_unary_with<GeluOp<false>>(node);
  return std::unique_ptr<Kernel>(new GeluKernel(node, std::move(loops)));
}

PDNG_REGISTER_KERNEL("Relu", make_unary_with<ReluOp>);
PDNG_REGISTER_KERNEL("Tanh", make_unary_with<TanhOp>);
PDNG_REGISTER_KERNEL("Sigmoid", make_unary_with<SigmoidOp>);
PDNG_REGISTER_KERNEL("Gelu", make_gelu);
PDNG_REGISTER_KERNEL("ReluBackprop", make_binary_with<ReluBackpropOp>);
PDNG_REGISTER_KERNEL("TanhBackprop", make_binary_with<TanhBackpropOp>);
PDNG_REGISTER_KERNEL("SigmoidBackprop", make_binary_with<SigmoidBackpropOp>);
PDNG_REGISTER_KERNEL("GeluBackprop", make_gelu_backprop);

// --- Softmax -----------------------------------------------------------------------------------
// e = exp(x - max(x)); out = e / sum(e). float32 runs oneDNN's softmax_accurate (vectorized exp,
// within ~3e-7 of the loops) unless the input holds NaN or inf. The loops reduce along the axis of
// an AxisLayout, one lane group at a time (for_each_lane_group, kernel_util.h).
template <class T>
class SoftmaxKernel : public Kernel {
 public:
  explicit SoftmaxKernel(const NodeInfo& node) {
    check_arity(node, 1, 1);
    const TensorDesc& x = node.inputs[0];
    check_like(node.outputs[0], x, "output");
    PDNG_CHECK(x.rank() >= 1, "softmax needs rank >= 1, got " + x.str());
    const int axis = normalize_axis(node.attrs.get_int("axis"), x.rank(), "axis");
    L_ = axis_layout(x.shape, axis);
    if (std::is_same<T, float>::value && L_.numel() > 0)
      use_dnnl_ = dnnl_.init(x, axis, dnnl::algorithm::softmax_accurate);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (L_.numel() == 0) return;
    if (use_dnnl_ && all_finite(in[0].as<float>(), L_.numel())) {
      dnnl_.run(in[0].data, out[0].data);
      return;
    }
    const T* x = in[0].as<T>();
    T* y = out[0].as<T>();
    const int64_t n = L_.n, inner = L_.inner;
    for_each_lane_group(L_, [=](auto tag, int64_t base, int64_t lanes, int64_t /*row*/) {
      constexpr bool kRow = decltype(tag)::value;
      constexpr int64_t W = kRow ? 1 : kLanes;
      const int64_t S = kRow ? 1 : inner, J = kRow ? 1 : lanes;
      const T* xb = x + base;
      T* yb = y + base;
      T mx[W], total[W];
      double sum[W];
      for (int64_t j = 0; j < J; ++j) mx[j] = xb[j], sum[j] = 0;
      for (int64_t k = 1; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) mx[j] = std::max(mx[j], xb[k * S + j]);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) {
          const T e = std::exp(xb[k * S + j] - mx[j]);
          yb[k * S + j] = e;
          sum[j] += e;
        }
      for (int64_t j = 0; j < J; ++j) total[j] = static_cast<T>(sum[j]);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) yb[k * S + j] = yb[k * S + j] / total[j];
    });
  }

 private:
  AxisLayout L_;
  DnnlSoftmax dnnl_;
  bool use_dnnl_ = false;
};

// Inputs (out, delta): grad = out * (delta - sum(delta * out)).
template <class T>
class SoftmaxBackpropKernel : public Kernel {
 public:
  explicit SoftmaxBackpropKernel(const NodeInfo& node) {
    check_arity(node, 2, 1);
    const TensorDesc& delta = node.inputs[1];
    check_like(node.inputs[0], delta, "softmax output");
    check_like(node.outputs[0], delta, "output");
    PDNG_CHECK(delta.rank() >= 1, "softmax needs rank >= 1, got " + delta.str());
    L_ = axis_layout(delta.shape, normalize_axis(node.attrs.get_int("axis"), delta.rank(), "axis"));
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (L_.numel() == 0) return;
    const T* o = in[0].as<T>();
    const T* d = in[1].as<T>();
    T* g = out[0].as<T>();
    const int64_t n = L_.n, inner = L_.inner;
    for_each_lane_group(L_, [=](auto tag, int64_t base, int64_t lanes, int64_t /*row*/) {
      constexpr bool kRow = decltype(tag)::value;
      constexpr int64_t W = kRow ? 1 : kLanes;
      const int64_t S = kRow ? 1 : inner, J = kRow ? 1 : lanes;
      const T* ob = o + base;
      const T* db = d + base;
      T* gb = g + base;
      if constexpr (kRow) {
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < n; ++k) sum += db[k] * ob[k];
        const T dot = static_cast<T>(sum);
#pragma omp simd
        for (int64_t k = 0; k < n; ++k) gb[k] = ob[k] * (db[k] - dot);
        return;
      }
      double sum[W];
      T dot[W];
      for (int64_t j = 0; j < J; ++j) sum[j] = 0;
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) sum[j] += db[k * S + j] * ob[k * S + j];
      for (int64_t j = 0; j < J; ++j) dot[j] = static_cast<T>(sum[j]);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) gb[k * S + j] = ob[k * S + j] * (db[k * S + j] - dot[j]);
    });
  }

 private:
  AxisLayout L_;
};

// --- registration (float_factory: kernel_util.h) -----------------------------------------------------
PDNG_REGISTER_KERNEL("Softmax", float_factory<SoftmaxKernel>(0));
PDNG_REGISTER_KERNEL("SoftmaxBackprop", float_factory<SoftmaxBackpropKernel>(1));

}  // namespace
}  // namespace pdng
