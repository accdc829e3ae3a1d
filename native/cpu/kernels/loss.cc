// Kernels of the loss ops: SoftmaxCrossEntropy, CrossEntropy (on probabilities) and their backprops.
//
// The NumPy interpreter (paddle_ngraph/backends/interpreter/kernels/loss.py) is the
// specification: elementwise steps in the data's dtype, in its order (log_softmax = shifted -
// log(sum(exp(shifted))), softmax = exp(log_softmax), as Paddle's fused kernel); sums accumulate
// in double and are cast to the dtype where the interpreter holds the sum. Hard labels are int64
// or int32 shaped like the logits with size 1 on the class axis; a label that is neither
// ignore_index nor in [0, classes) raises Error naming it. Plain loops with OpenMP, float32 and float64.
// (oneDNN's softmax_log is not used: its log-sum is ~1e-6 off, too coarse for small losses at rtol 1e-5,
// and its exp maps NaN to inf.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "pdng/dnnl_common.h"
#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

// A hard label tensor: int64 or int32, one label per reduction row.
void check_hard_label(const TensorDesc& label, int64_t rows, const std::string& logits) {
  PDNG_CHECK(label.dtype == DType::Int64 || label.dtype == DType::Int32,
             "hard label must be int64 or int32, got " + label.str());
  PDNG_CHECK(label.numel() == rows, "hard label " + label.str() + " does not match " + logits +
                                        " (one label per row: " + std::to_string(rows) + ")");
}

// Throws Error for the first label that is neither ignore_index nor in [0, classes).
template <class L>
void check_labels(const L* label, int64_t count, int64_t ignore_index, int64_t classes) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = static_cast<int64_t>(label[i]);
    if (v != ignore_index && (v < 0 || v >= classes))
      throw Error("label " + std::to_string(v) + " out of range [0, " + std::to_string(classes) + ") (ignore_index " +
                  std::to_string(ignore_index) + ")");
  }
}

// Paddle's TolerableValue(log(x)): infinities become +-1e20 (NaN stays NaN).
template <class T>
inline T tolerable_log(T v) {
  const T bound = static_cast<T>(1e20);
  const T l = std::log(v);
  return l > bound ? bound : (l < -bound ? -bound : l);
}

// --- along one axis -----------------------------------------------------------------------------------
// The logits as an AxisLayout [outer, n, inner] (kernel_util.h), n classes; labels and losses as
// [outer, inner], one per row (the row argument of for_each_lane_group's body).

// --- SoftmaxCrossEntropy ------------------------------------------------------------------------------
// Paddle's softmax clips the shifted logits at -64 (phi's ValueClip): no probability falls below
// e^-64 and no hard-label loss exceeds 64, which matters once a model diverges.
template <typename T>
inline T clip_shifted(T v) { return v < T(-64) ? T(-64) : v; }

// Inputs (logits, label); outputs (softmax, loss). shifted = logits - max, log_sum = log(sum(exp(shifted))),
// log_softmax = shifted - log_sum, softmax = exp(shifted) / sum; loss = -sum(label * log_softmax) (soft) or
// -log_softmax[label] (hard; 0 where label == ignore_index).
template <class T>
class SoftmaxCrossEntropyKernel : public Kernel {
 public:
  explicit SoftmaxCrossEntropyKernel(const NodeInfo& node) {
    check_arity(node, 2, 2);
    const TensorDesc& logits = node.inputs[0];
    PDNG_CHECK(logits.rank() >= 1, "logits need rank >= 1, got " + logits.str());
    const int axis = normalize_axis(node.attrs.get_int("axis"), logits.rank(), "axis");
    L_ = axis_layout(logits.shape, axis);
    soft_ = node.attrs.get_bool("soft_label");
    ignore_index_ = node.attrs.get_int("ignore_index");
    if (soft_)
      check_like(node.inputs[1], logits, "soft label");
    else
      check_hard_label(node.inputs[1], L_.rows(), logits.str());
    label_dtype_ = node.inputs[1].dtype;
    check_like(node.outputs[0], logits, "output softmax");
    check_count(node.outputs[1], logits.dtype, L_.rows(), "output loss");
    // Hard labels over a last class axis in float32: oneDNN's softmax (vectorized exp; the loops'
    // scalar exp took 87 us for 24 x 1000 logits).
    if (std::is_same<T, float>::value && !soft_ && L_.inner == 1 && L_.numel() > 0)
      use_dnnl_ = dnnl_.init(logits, axis, dnnl::algorithm::softmax_accurate);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    T* y = out[0].as<T>();
    T* loss = out[1].as<T>();
    if constexpr (std::is_same<T, float>::value) {
      if (use_dnnl_ && all_finite(x, L_.numel())) {
        dnnl_.run(x, y);
        if (label_dtype_ == DType::Int64) {
          check_labels(in[1].as<int64_t>(), L_.rows(), ignore_index_, L_.n);
          loss_from_softmax(x, in[1].as<int64_t>(), y, loss);
        } else {
          check_labels(in[1].as<int32_t>(), L_.rows(), ignore_index_, L_.n);
          loss_from_softmax(x, in[1].as<int32_t>(), y, loss);
        }
        return;
      }
    }
    if (soft_) {
      compute<true>(x, in[1].as<T>(), y, loss);
    } else if (label_dtype_ == DType::Int64) {
      check_labels(in[1].as<int64_t>(), L_.rows(), ignore_index_, L_.n);
      compute<false>(x, in[1].as<int64_t>(), y, loss);
    } else {
      check_labels(in[1].as<int32_t>(), L_.rows(), ignore_index_, L_.n);
      compute<false>(x, in[1].as<int32_t>(), y, loss);
    }
  }

 private:
  template <bool kSoft, class Label>
  void compute(const T* x, const Label* label, T* y, T* loss) {
    if (L_.numel() == 0) {
      // No classes: the interpreter's sums are 0 and log(0) = -inf; no label can be valid but
      // ignored ones (loss 0). Soft: -sum over nothing = -0.
      for (int64_t r = 0; r < L_.rows(); ++r) loss[r] = kSoft ? -T(0) : T(0);
      return;
    }
    const int64_t n = L_.n, inner = L_.inner, ignore_index = ignore_index_;
    for_each_lane_group(L_, [=](auto tag, int64_t base, int64_t lanes, int64_t row) {
      constexpr bool kRow = decltype(tag)::value;
      constexpr int64_t W = kRow ? 1 : kLanes;
      const int64_t S = kRow ? 1 : inner, J = kRow ? 1 : lanes;
      const T* xb = x + base;
      T* yb = y + base;
      T mx[W], log_sum[W];
      double sum[W];
      for (int64_t j = 0; j < J; ++j) mx[j] = xb[j], sum[j] = 0;
      for (int64_t k = 1; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) mx[j] = std::max(mx[j], xb[k * S + j]);
      // One exp per element: exp(shifted) goes into the output as it is summed, then is scaled by
      // 1 / sum (the exp per element and pass took most of the kernel: 139 us for 24 x 1000 logits).
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) {
          const T e = std::exp(clip_shifted(xb[k * S + j] - mx[j]));
          yb[k * S + j] = e;
          sum[j] += e;
        }
      T inv_sum[W];
      for (int64_t j = 0; j < J; ++j) {
        log_sum[j] = std::log(static_cast<T>(sum[j]));
        inv_sum[j] = static_cast<T>(1.0 / sum[j]);
      }
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < J; ++j) yb[k * S + j] *= inv_sum[j];
      if constexpr (kSoft) {
        const T* lb = reinterpret_cast<const T*>(label) + base;
        double acc[W];
        for (int64_t j = 0; j < J; ++j) acc[j] = 0;
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < J; ++j) acc[j] += lb[k * S + j] * (clip_shifted(xb[k * S + j] - mx[j]) - log_sum[j]);
        for (int64_t j = 0; j < J; ++j) loss[row + j] = -static_cast<T>(acc[j]);
      } else {
        for (int64_t j = 0; j < J; ++j) {
          const int64_t l = static_cast<int64_t>(label[row + j]);
          loss[row + j] = l == ignore_index ? T(0) : -(clip_shifted(xb[l * S + j] - mx[j]) - log_sum[j]);
        }
      }
    });
  }

  // -log softmax[label] of each row, from oneDNN's softmax. Paddle (and the loops) clip each shifted
  // logit at -64: a row with a logit more than 64 under its maximum is computed again by the loops,
  // its softmax and its loss, so that its probabilities of e^-64 and its loss match Paddle's.
  template <class Label>
  void loss_from_softmax(const float* x, const Label* label, float* y, float* loss) {
    const int64_t n = L_.n;
    for (int64_t r = 0; r < L_.rows(); ++r) {
      const float* xr = x + r * n;
      float mx = xr[0], mn = xr[0];
#pragma omp simd reduction(max : mx) reduction(min : mn)
      for (int64_t k = 1; k < n; ++k) {
        mx = xr[k] > mx ? xr[k] : mx;
        mn = xr[k] < mn ? xr[k] : mn;
      }
      const int64_t l = static_cast<int64_t>(label[r]);
      if (mn - mx >= -64.0f) {
        loss[r] = l == ignore_index_ ? 0.0f : -std::log(y[r * n + l]);
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(clip_shifted(xr[k] - mx));
      const float log_sum = std::log(static_cast<float>(sum));
      for (int64_t k = 0; k < n; ++k) y[r * n + k] = std::exp(clip_shifted(xr[k] - mx) - log_sum);
      loss[r] = l == ignore_index_ ? 0.0f : -(clip_shifted(xr[l] - mx) - log_sum);
    }
  }

  AxisLayout L_;
  bool soft_ = false;
  int64_t ignore_index_ = -100;
  DType label_dtype_ = DType::Int64;
  DnnlSoftmax dnnl_;
  bool use_dnnl_ = false;
};

// Inputs (softmax, label, loss gradient); output the logits gradient:
// (softmax - label) * g (soft), (softmax - onehot(label)) * g (hard; 0 where label == ignore_index),
// g broadcast along the class axis (or elementwise if it has the softmax's shape).
template <class T>
class SoftmaxCrossEntropyBackpropKernel : public Kernel {
 public:
  explicit SoftmaxCrossEntropyBackpropKernel(const NodeInfo& node) {
    check_arity(node, 3, 1);
    const TensorDesc& softmax = node.inputs[0];
    PDNG_CHECK(softmax.rank() >= 1, "softmax needs rank >= 1, got " + softmax.str());
    L_ = axis_layout(softmax.shape, normalize_axis(node.attrs.get_int("axis"), softmax.rank(), "axis"));
    soft_ = node.attrs.get_bool("soft_label");
    ignore_index_ = node.attrs.get_int("ignore_index");
    if (soft_)
      check_like(node.inputs[1], softmax, "soft label");
    else
      check_hard_label(node.inputs[1], L_.rows(), softmax.str());
    label_dtype_ = node.inputs[1].dtype;
    const TensorDesc& g = node.inputs[2];
    PDNG_CHECK(g.dtype == softmax.dtype && (g.numel() == L_.rows() || g.numel() == L_.numel()),
               "loss gradient " + g.str() + " matches neither the loss nor the softmax " + softmax.str());
    full_grad_ = g.numel() != L_.rows();
    check_like(node.outputs[0], softmax, "output");
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (soft_) {
      compute<true>(in[0].as<T>(), in[1].as<T>(), in[2].as<T>(), out[0].as<T>());
    } else if (label_dtype_ == DType::Int64) {
      check_labels(in[1].as<int64_t>(), L_.rows(), ignore_index_, L_.n);
      compute<false>(in[0].as<T>(), in[1].as<int64_t>(), in[2].as<T>(), out[0].as<T>());
    } else {
      check_labels(in[1].as<int32_t>(), L_.rows(), ignore_index_, L_.n);
      compute<false>(in[0].as<T>(), in[1].as<int32_t>(), in[2].as<T>(), out[0].as<T>());
    }
  }

 private:
  template <bool kSoft, class Label>
  void compute(const T* softmax, const Label* label, const T* g, T* grad) {
    if (L_.numel() == 0) return;
    const int64_t n = L_.n, inner = L_.inner, ignore_index = ignore_index_;
    const bool full = full_grad_;
    for_each_lane_group(L_, [=](auto tag, int64_t base, int64_t lanes, int64_t row) {
      constexpr bool kRow = decltype(tag)::value;
      const int64_t S = kRow ? 1 : inner, J = kRow ? 1 : lanes;
      const T* sb = softmax + base;
      T* gb = grad + base;
      // The loss gradient of element (k, j): gr[j] when broadcast, gf[k * S + j] when full.
      const T* gr = g + row;
      const T* gf = g + base;
      if constexpr (kSoft) {
        const T* lb = reinterpret_cast<const T*>(label) + base;
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < J; ++j)
            gb[k * S + j] = (sb[k * S + j] - lb[k * S + j]) * (full ? gf[k * S + j] : gr[j]);
      } else {
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < J; ++j) gb[k * S + j] = sb[k * S + j] * (full ? gf[k * S + j] : gr[j]);
        for (int64_t j = 0; j < J; ++j) {
          const int64_t l = static_cast<int64_t>(label[row + j]);
          if (l == ignore_index) {
            for (int64_t k = 0; k < n; ++k) gb[k * S + j] = T(0);
          } else {
            gb[l * S + j] = (sb[l * S + j] - T(1)) * (full ? gf[l * S + j] : gr[j]);
          }
        }
      }
    });
  }

  AxisLayout L_;
  bool soft_ = false, full_grad_ = false;
  int64_t ignore_index_ = -100;
  DType label_dtype_ = DType::Int64;
};

// --- CrossEntropy on probabilities (last axis) ------------------------------------------------------------
// Soft: loss = -sum(label * tolerable_log(x)). Hard: match = x[label] (0 where ignored),
// loss = -tolerable_log(match) (0 where ignored); outputs (loss, match).
struct RowLayout {
  int64_t rows = 0, D = 0;
};

RowLayout cross_entropy_layout(const TensorDesc& x) {
  PDNG_CHECK(x.rank() >= 1, "x needs rank >= 1, got " + x.str());
  RowLayout L;
  L.rows = prod(x.shape, 0, x.shape.size() - 1);
  L.D = x.shape.back();
  return L;
}

template <class T>
class CrossEntropyKernel : public Kernel {
 public:
  explicit CrossEntropyKernel(const NodeInfo& node) {
    soft_ = node.attrs.get_bool("soft_label");
    check_arity(node, 2, soft_ ? 1 : 2);
    const TensorDesc& x = node.inputs[0];
    L_ = cross_entropy_layout(x);
    ignore_index_ = node.attrs.get_int("ignore_index");
    if (soft_)
      check_like(node.inputs[1], x, "soft label");
    else
      check_hard_label(node.inputs[1], L_.rows, x.str());
    label_dtype_ = node.inputs[1].dtype;
    for (const TensorDesc& o : node.outputs) check_count(o, x.dtype, L_.rows, "output");
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    T* loss = out[0].as<T>();
    const int64_t rows = L_.rows, D = L_.D;
    const bool parallel = rows * D >= kParallelMin;
    if (soft_) {
      const T* label = in[1].as<T>();
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;
        const T* lr = label + r * D;
        double acc = 0;
        for (int64_t j = 0; j < D; ++j) acc += lr[j] * tolerable_log(xr[j]);
        loss[r] = -static_cast<T>(acc);
      }
    } else if (label_dtype_ == DType::Int64) {
      hard(x, in[1].as<int64_t>(), loss, out[1].as<T>());
    } else {
      hard(x, in[1].as<int32_t>(), loss, out[1].as<T>());
    }
  }

 private:
  template <class Label>
  void hard(const T* x, const Label* label, T* loss, T* match) {
    const int64_t rows = L_.rows, D = L_.D, ignore_index = ignore_index_;
    check_labels(label, rows, ignore_index, D);
#pragma omp parallel for schedule(static) if (rows >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t l = static_cast<int64_t>(label[r]);
      if (l == ignore_index) {
        match[r] = T(0);
        loss[r] = T(0);
      } else {
        const T m = x[r * D + l];
        match[r] = m;
        loss[r] = -tolerable_log(m);
      }
    }
  }

  RowLayout L_;
  bool soft_ = false;
  int64_t ignore_index_ = -100;
  DType label_dtype_ = DType::Int64;
};

// Inputs (x, label, loss gradient); output the gradient of x:
// soft: -label * g / x; hard: -g / x[label] at the label, 0 elsewhere and where ignored.
template <class T>
class CrossEntropyBackpropKernel : public Kernel {
 public:
  explicit CrossEntropyBackpropKernel(const NodeInfo& node) {
    check_arity(node, 3, 1);
    const TensorDesc& x = node.inputs[0];
    L_ = cross_entropy_layout(x);
    soft_ = node.attrs.get_bool("soft_label");
    ignore_index_ = node.attrs.get_int("ignore_index");
    if (soft_)
      check_like(node.inputs[1], x, "soft label");
    else
      check_hard_label(node.inputs[1], L_.rows, x.str());
    label_dtype_ = node.inputs[1].dtype;
    const TensorDesc& g = node.inputs[2];
    const int64_t numel = L_.rows * L_.D;
    PDNG_CHECK(g.dtype == x.dtype && (g.numel() == L_.rows || (soft_ && g.numel() == numel)),
               "loss gradient " + g.str() + " does not match the loss of " + x.str());
    full_grad_ = g.numel() != L_.rows;
    check_like(node.outputs[0], x, "output");
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* g = in[2].as<T>();
    T* grad = out[0].as<T>();
    const int64_t rows = L_.rows, D = L_.D;
    const bool parallel = rows * D >= kParallelMin;
    if (soft_) {
      const T* label = in[1].as<T>();
      const bool full = full_grad_;
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < D; ++j) {
          const int64_t i = r * D + j;
          grad[i] = -label[i] * (full ? g[i] : g[r]) / x[i];
        }
    } else if (label_dtype_ == DType::Int64) {
      hard(x, in[1].as<int64_t>(), g, grad);
    } else {
      hard(x, in[1].as<int32_t>(), g, grad);
    }
  }

 private:
  template <class Label>
  void hard(const T* x, const Label* label, const T* g, T* grad) {
    const int64_t rows = L_.rows, D = L_.D, ignore_index = ignore_index_;
    check_labels(label, rows, ignore_index, D);
#pragma omp parallel for schedule(static) if (rows * D >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      T* gr = grad + r * D;
      std::fill(gr, gr + D, T(0));
      const int64_t l = static_cast<int64_t>(label[r]);
      if (l != ignore_index) gr[l] = -g[r] / x[r * D + l];
    }
  }

  RowLayout L_;
  bool soft_ = false, full_grad_ = false;
  int64_t ignore_index_ = -100;
  DType label_dtype_ = DType::Int64;
};

// --- registration (float_factory: kernel_util.h) -----------------------------------------------------
PDNG_REGISTER_KERNEL("SoftmaxCrossEntropy", float_factory<SoftmaxCrossEntropyKernel>());
PDNG_REGISTER_KERNEL("SoftmaxCrossEntropyBackprop", float_factory<SoftmaxCrossEntropyBackpropKernel>());
PDNG_REGISTER_KERNEL("CrossEntropy", float_factory<CrossEntropyKernel>());
PDNG_REGISTER_KERNEL("CrossEntropyBackprop", float_factory<CrossEntropyBackpropKernel>());

}  // namespace
}  // namespace pdng
