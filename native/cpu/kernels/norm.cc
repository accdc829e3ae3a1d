// Kernels of the normalization ops (ir/ops/norm.py): BatchNorm* (sync_batch_norm's *Sums too), LayerNorm, LRN
// and their backprops.
//
// The NumPy interpreter (paddle_ngraph/backends/interpreter/kernels/norm.py) is the
// specification: every elementwise step is done in the data's dtype, in the interpreter's
// order (which is Paddle's where it matters: two-pass variance, the folded batch-norm scale
// and bias, the backprop formulas). Sums accumulate in double and are cast to the dtype where
// the interpreter holds the sum (NumPy sums pairwise in the dtype; double is at least as exact).
// Reductions that span many rows are split into a fixed number of chunks, independent of the
// thread count, so results do not depend on it. Plain loops with OpenMP, float32 and float64.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

// --- batch normalization ----------------------------------------------------------------------------
// The tensor as [outer, C, inner] around the channel axis. Per-channel sums are split into
// `chunks` ranges of outer (a fixed number), summed in parallel, then added up per channel.
struct ChannelLayout {
  int64_t outer = 1, C = 1, inner = 1, chunks = 1;
  int64_t numel() const { return outer * C * inner; }
  int64_t count() const { return outer * inner; }  // elements per channel
};

ChannelLayout channel_layout(const TensorDesc& x, int64_t channel_axis) {
  PDNG_CHECK(x.rank() >= 2, "batch norm needs rank >= 2, got " + x.str());
  const int axis = normalize_axis(channel_axis, x.rank(), "channel_axis");
  ChannelLayout L;
  L.outer = prod(x.shape, 0, axis);
  L.C = x.shape[axis];
  L.inner = prod(x.shape, axis + 1, x.shape.size());
  if (L.inner == 1)
    L.chunks = std::min<int64_t>(L.outer, 64);
  else
    L.chunks = std::min<int64_t>(L.outer, std::max<int64_t>(1, 64 / std::max<int64_t>(L.C, 1)));
  return L;
}

// Calls f(i, c, a0) (K = 1) or f(i, c, a0, a1) (K = 2), which adds element i's (of channel c)
// contributions to the double accumulators; sums[c * K + k] gets the totals of a_k over channel c.
// `partial` holds chunks * K * C doubles.
template <int K, class F>
inline void call_acc(F& f, int64_t i, int64_t c, double& a0, double& a1) {
  if constexpr (K == 1)
    f(i, c, a0);
  else
    f(i, c, a0, a1);
}

template <int K, class F>
void channel_sums(const ChannelLayout& L, double* partial, double* sums, F&& f) {
  static_assert(K == 1 || K == 2, "one or two sums");
  const int64_t C = L.C, inner = L.inner, P = L.chunks;
  const bool parallel = L.numel() >= kParallelMin;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < P; ++p) {
      F fp = f;  // a private copy: its captures then live in registers, and the loop vectorizes
      double* acc0 = partial + p * K * C;
      double* acc1 = K == 2 ? acc0 + C : acc0;
      std::fill(acc0, acc0 + K * C, 0.0);
      const int64_t o0 = p * L.outer / P, o1 = (p + 1) * L.outer / P;
      for (int64_t o = o0; o < o1; ++o) {
        const int64_t base = o * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) call_acc<K>(fp, base + c, c, acc0[c], acc1[c]);
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t item = 0; item < P * C; ++item) {
      const int64_t p = item / C, c = item % C;
      const int64_t o0 = p * L.outer / P, o1 = (p + 1) * L.outer / P;
      F fp = f;
      double a0 = 0, a1 = 0;
      for (int64_t o = o0; o < o1; ++o) {
        const int64_t base = (o * C + c) * inner;
#pragma omp simd reduction(+ : a0, a1)
        for (int64_t j = 0; j < inner; ++j) call_acc<K>(fp, base + j, c, a0, a1);
      }
      partial[p * K * C + c] = a0;
      if (K == 2) partial[p * K * C + C + c] = a1;
    }
  }
  for (int64_t c = 0; c < C; ++c)
    for (int k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t p = 0; p < P; ++p) s += partial[(p * K + k) * C + c];
      sums[c * K + k] = s;
    }
}

// Calls f(i, c) for every element i (of channel c).
template <class F>
void channel_map(const ChannelLayout& L, F&& f) {
  const int64_t C = L.C, inner = L.inner;
  const bool parallel = L.numel() >= kParallelMin;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t o = 0; o < L.outer; ++o) {
      F fp = f;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) fp(o * C + c, c);
    }
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < L.outer * C; ++r) {
      F fp = f;
      const int64_t c = r % C, base = r * inner;
#pragma omp simd
      for (int64_t j = 0; j < inner; ++j) fp(base + j, c);
    }
  }
}

// Checks x, the per-channel inputs and the outputs of a batch-norm node; returns the layout.
ChannelLayout batch_norm_layout(const NodeInfo& node, const std::vector<int>& per_channel_inputs) {
  const TensorDesc& x = node.inputs[0];
  ChannelLayout L = channel_layout(x, node.attrs.get_int("channel_axis"));
  for (int i : per_channel_inputs)
    check_count(node.inputs[i], x.dtype, L.C, "per-channel input " + std::to_string(i));
  return L;
}

// 1 / sqrt(variance + epsilon), in T.
template <class T>
inline T inv_std(T variance, T epsilon) {
  return T(1) / std::sqrt(variance + epsilon);
}

// The outputs of a training batch norm once its batch statistics are known: stats(c, mean,
// variance) gives channel c's; the running ones are updated as running * momentum + batch *
// (1 - momentum), the saved ones written, and y = x * new_scale + new_bias with new_scale =
// inv_std * scale, new_bias = bias - mean * inv_std * scale (Paddle's folding). ``folded`` holds
// 2C values of scratch. Shared by the single-rank kernel and the one from all ranks' sums.
template <class T, class Stats>
void finish_batch_norm_training(const ChannelLayout& L, Stats stats, T epsilon, T momentum,
                                const std::vector<Tensor>& in, std::vector<Tensor>& out, T* folded) {
  const T* x = in[0].as<T>();
  const T* scale = in[1].as<T>();
  const T* bias = in[2].as<T>();
  const T* running_mean = in[3].as<T>();
  const T* running_var = in[4].as<T>();
  T* y = out[0].as<T>();
  T* mean_out = out[1].as<T>();
  T* var_out = out[2].as<T>();
  T* saved_mean = out[3].as<T>();
  T* saved_inv_std = out[4].as<T>();
  const int64_t C = L.C;
  T* ns = folded;
  T* nb = folded + C;
  const T keep = momentum, take = T(1) - momentum;
  for (int64_t c = 0; c < C; ++c) {
    T mean, variance;
    stats(c, mean, variance);
    const T inv = inv_std(variance, epsilon);
    mean_out[c] = running_mean[c] * keep + mean * take;
    var_out[c] = running_var[c] * keep + variance * take;
    saved_mean[c] = mean;
    saved_inv_std[c] = inv;
    ns[c] = inv * scale[c];
    nb[c] = bias[c] - mean * inv * scale[c];
  }
  channel_map(L, [x, y, ns, nb](int64_t i, int64_t c) { y[i] = x[i] * ns[c] + nb[c]; });
}

// Inputs (x, scale, bias, running_mean, running_variance); outputs (y, mean_out, variance_out,
// saved_mean, saved_inv_std). Batch statistics (biased variance, two passes), then
// finish_batch_norm_training.
template <class T>
class BatchNormTrainingKernel : public Kernel {
 public:
  explicit BatchNormTrainingKernel(const NodeInfo& node) {
    check_arity(node, 5, 5);
    L_ = batch_norm_layout(node, {1, 2, 3, 4});
    const TensorDesc& x = node.inputs[0];
    check_like(node.outputs[0], x, "output y");
    for (int i = 1; i < 5; ++i) check_count(node.outputs[i], x.dtype, L_.C, "output " + std::to_string(i));
    epsilon_ = static_cast<T>(node.attrs.get_float("epsilon"));
    momentum_ = static_cast<T>(node.attrs.get_float("momentum"));
    partial_.resize(L_.chunks * L_.C);
    sums_.resize(L_.C);
    mean_.resize(L_.C);
    variance_.resize(L_.C);
    folded_.resize(2 * L_.C);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const int64_t C = L_.C;
    const T count = static_cast<T>(L_.count());
    T* mean = mean_.data();
    T* variance = variance_.data();

    channel_sums<1>(L_, partial_.data(), sums_.data(), [x](int64_t i, int64_t, double& a) { a += x[i]; });
    for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<T>(sums_[c]) / count;
    channel_sums<1>(L_, partial_.data(), sums_.data(), [x, mean](int64_t i, int64_t c, double& a) {
      const T centered = x[i] - mean[c];
      a += centered * centered;
    });
    for (int64_t c = 0; c < C; ++c) variance[c] = static_cast<T>(sums_[c]) / count;
    finish_batch_norm_training<T>(
        L_, [mean, variance](int64_t c, T& m, T& v) { m = mean[c]; v = variance[c]; }, epsilon_, momentum_, in, out,
        folded_.data());
  }

 private:
  ChannelLayout L_;
  T epsilon_, momentum_;
  std::vector<double> partial_, sums_;
  std::vector<T> mean_, variance_, folded_;
};

// Inputs (x, scale, bias, mean, variance): the given statistics, folded as in training.
template <class T>
class BatchNormInferenceKernel : public Kernel {
 public:
  explicit BatchNormInferenceKernel(const NodeInfo& node) {
    check_arity(node, 5, 1);
    L_ = batch_norm_layout(node, {1, 2, 3, 4});
    check_like(node.outputs[0], node.inputs[0], "output y");
    epsilon_ = static_cast<T>(node.attrs.get_float("epsilon"));
    new_scale_.resize(L_.C);
    new_bias_.resize(L_.C);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* scale = in[1].as<T>();
    const T* bias = in[2].as<T>();
    const T* mean = in[3].as<T>();
    const T* variance = in[4].as<T>();
    T* y = out[0].as<T>();
    for (int64_t c = 0; c < L_.C; ++c) {
      const T inv = inv_std(variance[c], epsilon_);
      new_scale_[c] = inv * scale[c];
      new_bias_[c] = bias[c] - mean[c] * inv * scale[c];
    }
    const T* ns = new_scale_.data();
    const T* nb = new_bias_.data();
    channel_map(L_, [x, y, ns, nb](int64_t i, int64_t c) { y[i] = x[i] * ns[c] + nb[c]; });
  }

 private:
  ChannelLayout L_;
  T epsilon_;
  std::vector<T> new_scale_, new_bias_;
};

// Inputs (x, scale, mean, inv_std or variance, delta); outputs (dx, dscale, dbias).
// dbias = sum(delta), dscale = sum(delta * x_hat) with x_hat = (x - mean) * inv_std.
// Training: dx = scale * inv_std / count * (delta * count - dbias - (x - mean) * inv_std * dscale).
// Inference (the statistics are constants): dx = delta * (scale * inv_std).
template <class T, bool kTraining>
class BatchNormBackpropKernel : public Kernel {
 public:
  explicit BatchNormBackpropKernel(const NodeInfo& node) {
    check_arity(node, 5, 3);
    L_ = batch_norm_layout(node, {1, 2, 3});
    const TensorDesc& x = node.inputs[0];
    check_like(node.inputs[4], x, "delta");
    check_like(node.outputs[0], x, "output dx");
    check_count(node.outputs[1], x.dtype, L_.C, "output dscale");
    check_count(node.outputs[2], x.dtype, L_.C, "output dbias");
    epsilon_ = static_cast<T>(node.attrs.get_float("epsilon"));
    partial_.resize(L_.chunks * L_.C * 2);
    sums_.resize(L_.C * 2);
    inv_std_.resize(L_.C);
    coeff_.resize(L_.C);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* scale = in[1].as<T>();
    const T* mean = in[2].as<T>();
    const T* spread = in[3].as<T>();
    const T* delta = in[4].as<T>();
    T* dx = out[0].as<T>();
    T* dscale = out[1].as<T>();
    T* dbias = out[2].as<T>();
    const int64_t C = L_.C;
    T* inv = inv_std_.data();
    for (int64_t c = 0; c < C; ++c) inv[c] = kTraining ? spread[c] : inv_std(spread[c], epsilon_);

    channel_sums<2>(L_, partial_.data(), sums_.data(), [x, mean, inv, delta](int64_t i, int64_t c, double& a0, double& a1) {
      const T x_hat = (x[i] - mean[c]) * inv[c];
      a0 += delta[i];
      a1 += delta[i] * x_hat;
    });
    for (int64_t c = 0; c < C; ++c) {
      dbias[c] = static_cast<T>(sums_[2 * c]);
      dscale[c] = static_cast<T>(sums_[2 * c + 1]);
    }
    T* coeff = coeff_.data();
    if (kTraining) {
      const T count = static_cast<T>(L_.count());
      for (int64_t c = 0; c < C; ++c) coeff[c] = scale[c] * inv[c] / count;
      // dscale and dbias are outputs of this node: read back from them (they do not alias inputs).
      const T* ds = dscale;
      const T* db = dbias;
      channel_map(L_, [=](int64_t i, int64_t c) {
        dx[i] = coeff[c] * (delta[i] * count - db[c] - (x[i] - mean[c]) * inv[c] * ds[c]);
      });
    } else {
      for (int64_t c = 0; c < C; ++c) coeff[c] = scale[c] * inv[c];
      channel_map(L_, [=](int64_t i, int64_t c) { dx[i] = delta[i] * coeff[c]; });
    }
  }

 private:
  ChannelLayout L_;
  T epsilon_;
  std::vector<double> partial_, sums_;
  std::vector<T> inv_std_, coeff_;
};

template <class T>
using BatchNormTrainingBackpropKernel = BatchNormBackpropKernel<T, true>;
template <class T>
using BatchNormInferenceBackpropKernel = BatchNormBackpropKernel<T, false>;

// --- batch normalization over several ranks (sync_batch_norm) ---------------------------------------
// Sums are double [3, C]: rows sum, sum of squares (or products), element count. Products are
// formed in T, as the single-rank kernels form them, and accumulated in double; between the two
// nodes an AllReduce(sum) makes them the whole batch's (ir/ops/norm.py).

// Input x; output sums: sum(x), sum(x * x), count per channel.
template <class T>
class BatchNormSumsKernel : public Kernel {
 public:
  explicit BatchNormSumsKernel(const NodeInfo& node) {
    check_arity(node, 1, 1);
    L_ = batch_norm_layout(node, {});
    check_count(node.outputs[0], DType::Float64, 3 * L_.C, "output sums");
    partial_.resize(L_.chunks * L_.C * 2);
    sums_.resize(L_.C * 2);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    double* sums = out[0].as<double>();
    const int64_t C = L_.C;
    channel_sums<2>(L_, partial_.data(), sums_.data(), [x](int64_t i, int64_t, double& a0, double& a1) {
      a0 += x[i];
      a1 += x[i] * x[i];
    });
    for (int64_t c = 0; c < C; ++c) {
      sums[c] = sums_[2 * c];
      sums[C + c] = sums_[2 * c + 1];
      sums[2 * C + c] = static_cast<double>(L_.count());
    }
  }

 private:
  ChannelLayout L_;
  std::vector<double> partial_, sums_;
};

// Inputs (x, scale, bias, running_mean, running_variance, sums); the outputs of BatchNormTraining,
// with mean = sum / n and the biased variance sum_sq / n - mean^2, in double, rounded to T once.
template <class T>
class BatchNormTrainingFromSumsKernel : public Kernel {
 public:
  explicit BatchNormTrainingFromSumsKernel(const NodeInfo& node) {
    check_arity(node, 6, 5);
    L_ = batch_norm_layout(node, {1, 2, 3, 4});
    const TensorDesc& x = node.inputs[0];
    check_count(node.inputs[5], DType::Float64, 3 * L_.C, "input sums");
    check_like(node.outputs[0], x, "output y");
    for (int i = 1; i < 5; ++i) check_count(node.outputs[i], x.dtype, L_.C, "output " + std::to_string(i));
    epsilon_ = static_cast<T>(node.attrs.get_float("epsilon"));
    momentum_ = static_cast<T>(node.attrs.get_float("momentum"));
    folded_.resize(2 * L_.C);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const double* sums = in[5].as<double>();
    const int64_t C = L_.C;
    finish_batch_norm_training<T>(
        L_,
        [sums, C](int64_t c, T& mean, T& variance) {
          const double n = sums[2 * C + c];
          const double m = sums[c] / n;
          mean = static_cast<T>(m);
          variance = static_cast<T>(std::max(sums[C + c] / n - m * m, 0.0));
        },
        epsilon_, momentum_, in, out, folded_.data());
  }

 private:
  ChannelLayout L_;
  T epsilon_, momentum_;
  std::vector<T> folded_;
};

// Inputs (x, saved_mean, saved_inv_std, delta); outputs (sums, dscale, dbias): sums holds
// sum(delta), sum(delta * x_hat) and the count; dscale and dbias are its first rows in T.
template <class T>
class BatchNormBackpropSumsKernel : public Kernel {
 public:
  explicit BatchNormBackpropSumsKernel(const NodeInfo& node) {
    check_arity(node, 4, 3);
    L_ = batch_norm_layout(node, {1, 2});
    const TensorDesc& x = node.inputs[0];
    check_like(node.inputs[3], x, "delta");
    check_count(node.outputs[0], DType::Float64, 3 * L_.C, "output sums");
    check_count(node.outputs[1], x.dtype, L_.C, "output dscale");
    check_count(node.outputs[2], x.dtype, L_.C, "output dbias");
    partial_.resize(L_.chunks * L_.C * 2);
    sums_.resize(L_.C * 2);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* mean = in[1].as<T>();
    const T* inv = in[2].as<T>();
    const T* delta = in[3].as<T>();
    double* sums = out[0].as<double>();
    T* dscale = out[1].as<T>();
    T* dbias = out[2].as<T>();
    const int64_t C = L_.C;
    channel_sums<2>(L_, partial_.data(), sums_.data(), [x, mean, inv, delta](int64_t i, int64_t c, double& a0, double& a1) {
      const T x_hat = (x[i] - mean[c]) * inv[c];
      a0 += delta[i];
      a1 += delta[i] * x_hat;
    });
    for (int64_t c = 0; c < C; ++c) {
      sums[c] = sums_[2 * c];
      sums[C + c] = sums_[2 * c + 1];
      sums[2 * C + c] = static_cast<double>(L_.count());
      dbias[c] = static_cast<T>(sums_[2 * c]);
      dscale[c] = static_cast<T>(sums_[2 * c + 1]);
    }
  }

 private:
  ChannelLayout L_;
  std::vector<double> partial_, sums_;
};

// Inputs (x, scale, saved_mean, saved_inv_std, delta, sums); output dx: the training backprop's
// formula with the whole batch's sum(delta), sum(delta * x_hat) and count, each rounded to T.
template <class T>
class BatchNormTrainingBackpropFromSumsKernel : public Kernel {
 public:
  explicit BatchNormTrainingBackpropFromSumsKernel(const NodeInfo& node) {
    check_arity(node, 6, 1);
    L_ = batch_norm_layout(node, {1, 2, 3});
    const TensorDesc& x = node.inputs[0];
    check_like(node.inputs[4], x, "delta");
    check_count(node.inputs[5], DType::Float64, 3 * L_.C, "input sums");
    check_like(node.outputs[0], x, "output dx");
    coeff_.resize(L_.C);
    dbias_.resize(L_.C);
    dscale_.resize(L_.C);
    count_.resize(L_.C);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* scale = in[1].as<T>();
    const T* mean = in[2].as<T>();
    const T* inv = in[3].as<T>();
    const T* delta = in[4].as<T>();
    const double* sums = in[5].as<double>();
    T* dx = out[0].as<T>();
    const int64_t C = L_.C;
    for (int64_t c = 0; c < C; ++c) {
      dbias_[c] = static_cast<T>(sums[c]);
      dscale_[c] = static_cast<T>(sums[C + c]);
      count_[c] = static_cast<T>(sums[2 * C + c]);
      coeff_[c] = scale[c] * inv[c] / count_[c];
    }
    const T* coeff = coeff_.data();
    const T* db = dbias_.data();
    const T* ds = dscale_.data();
    const T* count = count_.data();
    channel_map(L_, [=](int64_t i, int64_t c) {
      dx[i] = coeff[c] * (delta[i] * count[c] - db[c] - (x[i] - mean[c]) * inv[c] * ds[c]);
    });
  }

 private:
  ChannelLayout L_;
  std::vector<T> coeff_, dbias_, dscale_, count_;
};

// --- layer normalization ----------------------------------------------------------------------------
// x as [rows, width]: normalized over dims [begin_norm_axis, rank).
struct RowLayout {
  int64_t rows = 1, width = 1;
};

RowLayout layer_norm_layout(const NodeInfo& node) {
  const TensorDesc& x = node.inputs[0];
  const int64_t begin = node.attrs.get_int("begin_norm_axis");
  PDNG_CHECK(begin >= 0 && begin < x.rank(), "begin_norm_axis " + std::to_string(begin) + " out of range for " + x.str());
  RowLayout L;
  L.rows = prod(x.shape, 0, begin);
  L.width = prod(x.shape, begin, x.shape.size());
  return L;
}

// Inputs (x, scale, bias); outputs (y, mean, variance), the statistics per row:
// mean = sum(x) / width, variance = sum((x - mean)^2) / width,
// y = (x - mean) / sqrt(variance + epsilon) * scale + bias.
template <class T>
class LayerNormKernel : public Kernel {
 public:
  explicit LayerNormKernel(const NodeInfo& node) {
    check_arity(node, 3, 3);
    L_ = layer_norm_layout(node);
    const TensorDesc& x = node.inputs[0];
    check_count(node.inputs[1], x.dtype, L_.width, "scale");
    check_count(node.inputs[2], x.dtype, L_.width, "bias");
    check_like(node.outputs[0], x, "output y");
    check_count(node.outputs[1], x.dtype, L_.rows, "output mean");
    check_count(node.outputs[2], x.dtype, L_.rows, "output variance");
    epsilon_ = static_cast<T>(node.attrs.get_float("epsilon"));
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* scale = in[1].as<T>();
    const T* bias = in[2].as<T>();
    T* y = out[0].as<T>();
    T* mean_out = out[1].as<T>();
    T* var_out = out[2].as<T>();
    const int64_t rows = L_.rows, width = L_.width;
    const T w = static_cast<T>(width), epsilon = epsilon_;
#pragma omp parallel for schedule(static) if (rows * width >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * width;
      T* yr = y + r * width;
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < width; ++j) sum += xr[j];
      const T mean = static_cast<T>(sum) / w;
      double squares = 0;
#pragma omp simd reduction(+ : squares)
      for (int64_t j = 0; j < width; ++j) {
        const T centered = xr[j] - mean;
        squares += centered * centered;
      }
      const T variance = static_cast<T>(squares) / w;
      const T std_dev = std::sqrt(variance + epsilon);
      for (int64_t j = 0; j < width; ++j) yr[j] = (xr[j] - mean) / std_dev * scale[j] + bias[j];
      mean_out[r] = mean;
      var_out[r] = variance;
    }
  }

 private:
  RowLayout L_;
  T epsilon_;
};

// Inputs (x, scale, mean, variance, delta); outputs (dx, dscale, dbias):
// std = sqrt(variance + epsilon), x_hat = (x - mean) / std, dbias = sum_rows(dy),
// dscale = sum_rows(dy * x_hat), dy_scaled = dy * scale,
// dx = (dy_scaled - sum(dy_scaled) / width - x_hat * sum(dy_scaled * x_hat) / width) / std.
// Rows are split into a fixed number of chunks, each with partial column sums.
template <class T>
class LayerNormBackpropKernel : public Kernel {
 public:
  static constexpr int64_t kChunks = 32;

  explicit LayerNormBackpropKernel(const NodeInfo& node) {
    check_arity(node, 5, 3);
    L_ = layer_norm_layout(node);
    const TensorDesc& x = node.inputs[0];
    check_count(node.inputs[1], x.dtype, L_.width, "scale");
    check_count(node.inputs[2], x.dtype, L_.rows, "mean");
    check_count(node.inputs[3], x.dtype, L_.rows, "variance");
    check_like(node.inputs[4], x, "delta");
    check_like(node.outputs[0], x, "output dx");
    check_count(node.outputs[1], x.dtype, L_.width, "output dscale");
    check_count(node.outputs[2], x.dtype, L_.width, "output dbias");
    epsilon_ = static_cast<T>(node.attrs.get_float("epsilon"));
    chunks_ = std::min(L_.rows, kChunks);
    partial_.resize(chunks_ * L_.width * 2);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* scale = in[1].as<T>();
    const T* mean = in[2].as<T>();
    const T* variance = in[3].as<T>();
    const T* delta = in[4].as<T>();
    T* dx = out[0].as<T>();
    T* dscale = out[1].as<T>();
    T* dbias = out[2].as<T>();
    const int64_t rows = L_.rows, width = L_.width, P = chunks_;
    const T w = static_cast<T>(width), epsilon = epsilon_;
    double* partial = partial_.data();
    const bool parallel = rows * width >= kParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < P; ++p) {
      double* pbias = partial + p * 2 * width;
      double* pscale = pbias + width;
      std::fill(pbias, pbias + 2 * width, 0.0);
      const int64_t r0 = p * rows / P, r1 = (p + 1) * rows / P;
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * width;
        const T* dyr = delta + r * width;
        T* dxr = dx + r * width;
        const T mu = mean[r];
        const T std_dev = std::sqrt(variance[r] + epsilon);
        double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
        for (int64_t j = 0; j < width; ++j) {
          const T x_hat = (xr[j] - mu) / std_dev, dy_scaled = dyr[j] * scale[j];
          a += dy_scaled;
          b += dy_scaled * x_hat;
        }
        const T mean_dy = static_cast<T>(a) / w;
        const T dot = static_cast<T>(b);
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) {
          const T x_hat = (xr[j] - mu) / std_dev;
          const T dy_scaled = dyr[j] * scale[j];
          dxr[j] = (dy_scaled - mean_dy - x_hat * dot / w) / std_dev;
          pbias[j] += dyr[j];
          pscale[j] += dyr[j] * x_hat;
        }
      }
    }
#pragma omp parallel for schedule(static) if (parallel && width >= 256)
    for (int64_t j = 0; j < width; ++j) {
      double sb = 0, ss = 0;
      for (int64_t p = 0; p < P; ++p) {
        sb += partial[p * 2 * width + j];
        ss += partial[p * 2 * width + width + j];
      }
      dbias[j] = static_cast<T>(sb);
      dscale[j] = static_cast<T>(ss);
    }
  }

 private:
  RowLayout L_;
  T epsilon_;
  int64_t chunks_ = 0;
  std::vector<double> partial_;
};

// --- local response normalization (Paddle's LRNFunctor / LRNGradFunctor) -------------------------------
// NCHW. mid = k + sum over the `size` channels c' centred on c of alpha * x[c']^2 (added in channel
// order, out-of-range channels skipped); out = x * mid^-beta.
struct LRNParams {
  int64_t N = 0, C = 0, HW = 0, half = 0;
  double k = 2.0, alpha = 1e-4, beta = 0.75;
};

LRNParams lrn_params(const NodeInfo& node) {
  const TensorDesc& x = node.inputs[0];
  PDNG_CHECK(x.rank() == 4, "LRN needs a 4-D (NCHW) input, got " + x.str());
  const int64_t size = node.attrs.get_int("size");
  PDNG_CHECK(size > 0 && size % 2 == 1, "size " + std::to_string(size) + " must be odd and > 0");
  LRNParams p;
  p.N = x.shape[0];
  p.C = x.shape[1];
  p.HW = x.shape[2] * x.shape[3];
  p.half = size / 2;
  p.k = node.attrs.get_float("k");
  p.alpha = node.attrs.get_float("alpha");
  p.beta = node.attrs.get_float("beta");
  return p;
}

template <class T>
class LRNKernel : public Kernel {
 public:
  explicit LRNKernel(const NodeInfo& node) {
    check_arity(node, 1, 2);
    p_ = lrn_params(node);
    check_like(node.outputs[0], node.inputs[0], "output out");
    check_like(node.outputs[1], node.inputs[0], "output mid");
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    T* y = out[0].as<T>();
    T* mid = out[1].as<T>();
    const int64_t C = p_.C, HW = p_.HW, half = p_.half;
    const T k = static_cast<T>(p_.k), alpha = static_cast<T>(p_.alpha), neg_beta = static_cast<T>(-p_.beta);
#pragma omp parallel for schedule(static) if (p_.N * C * HW >= kParallelMin / 4)
    for (int64_t nc = 0; nc < p_.N * C; ++nc) {
      const int64_t n = nc / C, c = nc % C;
      T* m = mid + nc * HW;
      for (int64_t i = 0; i < HW; ++i) m[i] = k;
      for (int64_t off = -half; off <= half; ++off) {
        const int64_t cc = c + off;
        if (cc < 0 || cc >= C) continue;
        const T* xc = x + (n * C + cc) * HW;
        for (int64_t i = 0; i < HW; ++i) m[i] += alpha * (xc[i] * xc[i]);
      }
      const T* xr = x + nc * HW;
      T* yr = y + nc * HW;
      for (int64_t i = 0; i < HW; ++i) yr[i] = xr[i] * std::pow(m[i], neg_beta);
    }
  }

 private:
  LRNParams p_;
};

// Inputs (x, out, mid, delta):
// grad = mid^-beta * delta + sum over the window of (-2 * alpha * beta) * delta[c'] * out[c'] * x / mid[c'].
template <class T>
class LRNBackpropKernel : public Kernel {
 public:
  explicit LRNBackpropKernel(const NodeInfo& node) {
    check_arity(node, 4, 1);
    p_ = lrn_params(node);
    for (int i = 1; i < 4; ++i) check_like(node.inputs[i], node.inputs[0], "input " + std::to_string(i));
    check_like(node.outputs[0], node.inputs[0], "output");
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    const T* o = in[1].as<T>();
    const T* mid = in[2].as<T>();
    const T* delta = in[3].as<T>();
    T* grad = out[0].as<T>();
    const int64_t C = p_.C, HW = p_.HW, half = p_.half;
    const T ratio = T(-2) * static_cast<T>(p_.alpha) * static_cast<T>(p_.beta);
    const T neg_beta = static_cast<T>(-p_.beta);
#pragma omp parallel for schedule(static) if (p_.N * C * HW >= kParallelMin / 4)
    for (int64_t nc = 0; nc < p_.N * C; ++nc) {
      const int64_t n = nc / C, c = nc % C;
      const T* xr = x + nc * HW;
      const T* mr = mid + nc * HW;
      const T* dr = delta + nc * HW;
      T* g = grad + nc * HW;
      for (int64_t i = 0; i < HW; ++i) g[i] = std::pow(mr[i], neg_beta) * dr[i];
      for (int64_t off = -half; off <= half; ++off) {
        const int64_t cc = c + off;
        if (cc < 0 || cc >= C) continue;
        const int64_t base = (n * C + cc) * HW;
        const T* dc = delta + base;
        const T* oc = o + base;
        const T* mc = mid + base;
        for (int64_t i = 0; i < HW; ++i) g[i] += ratio * dc[i] * oc[i] * xr[i] / mc[i];
      }
    }
  }

 private:
  LRNParams p_;
};

// --- registration (float_factory: kernel_util.h) -----------------------------------------------------
PDNG_REGISTER_KERNEL("BatchNormTraining", float_factory<BatchNormTrainingKernel>(0));
PDNG_REGISTER_KERNEL("BatchNormInference", float_factory<BatchNormInferenceKernel>(0));
PDNG_REGISTER_KERNEL("BatchNormTrainingBackprop", float_factory<BatchNormTrainingBackpropKernel>(0));
PDNG_REGISTER_KERNEL("BatchNormInferenceBackprop", float_factory<BatchNormInferenceBackpropKernel>(0));
PDNG_REGISTER_KERNEL("BatchNormSums", float_factory<BatchNormSumsKernel>(0));
PDNG_REGISTER_KERNEL("BatchNormTrainingFromSums", float_factory<BatchNormTrainingFromSumsKernel>(0));
PDNG_REGISTER_KERNEL("BatchNormBackpropSums", float_factory<BatchNormBackpropSumsKernel>(0));
PDNG_REGISTER_KERNEL("BatchNormTrainingBackpropFromSums", float_factory<BatchNormTrainingBackpropFromSumsKernel>(0));
PDNG_REGISTER_KERNEL("LayerNorm", float_factory<LayerNormKernel>(0));
PDNG_REGISTER_KERNEL("LayerNormBackprop", float_factory<LayerNormBackpropKernel>(0));
PDNG_REGISTER_KERNEL("LRN", float_factory<LRNKernel>(0));
PDNG_REGISTER_KERNEL("LRNBackprop", float_factory<LRNBackpropKernel>(0));

}  // namespace
}  // namespace pdng
