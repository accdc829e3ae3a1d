// Optimizer updates (ir/ops/optimizer.py): SGDUpdate, MomentumUpdate, AdamUpdate, LambUpdate,
// LarsMomentumUpdate.
//
// Each is one fused pass over parameter, gradient and moments (Lamb: two, for its norms; LARS:
// its two norms, then one), with
// the interpreter's formulas and order of operations (Paddle's CPU kernels): scalars are cast to
// the parameter's dtype first, scalar sub-expressions are evaluated once in that dtype.
// The learning rate and the beta powers are one-element tensors of any float dtype; the updated
// beta powers keep their dtype (NumPy promotion of beta_pow * T(beta)).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif
#include <emmintrin.h>  // SSE2 non-temporal stores (x86-64's baseline)

#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

constexpr int64_t kWorkPerThread = 16384;

int threads_for(int64_t work) {
#ifdef _OPENMP
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), work / kWorkPerThread)));
#else
  return 1;
#endif
}

// --- updates written to other memory than their inputs ----------------------------------------------
// An elastic commit keeps the memory of parameters and moments as they are, and the next step writes
// the new values to other memory (paddle_ngraph/elastic/held_state.py). A plain store to memory not
// in cache first reads the line it writes (read for ownership): a third more memory traffic than the
// update in place, which writes lines it has just read. So such an update computes a tile at a time
// into buffers in L1, with the same loop (the same results, bit for bit), and streams each tile out
// with non-temporal stores, which do not read the destination.

constexpr int64_t kTile = 512;  // elements per output per tile: 2-4 KB, three outputs stay in L1

template <class T>
inline void stream_store(T* dst, const T* src, int64_t n) {
  int64_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 16 != 0; ++i) dst[i] = src[i];
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  } else if constexpr (std::is_same_v<T, double>) {
    for (; i + 2 <= n; i += 2) _mm_stream_pd(dst + i, _mm_loadu_pd(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
}

// Runs ``body(begin, end, outputs)`` over [0, n) on ``threads`` threads, ``outputs`` pointing at
// element ``begin`` of each of the N outputs: straight into them where the first output is the
// first input's memory (in place), else through L1 tiles streamed out.
template <class T, int N, class Body>
void update_loop(int64_t n, int threads, bool in_place, T* const (&outputs)[N], Body body) {
  if (in_place) {
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
    for (int64_t t = 0; t < n; t += kTile) {
      const int64_t end = std::min(n, t + kTile);
      T* at[N];
      for (int k = 0; k < N; ++k) at[k] = outputs[k] + t;
      body(t, end, at);
    }
    return;
  }
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    alignas(64) T tiles[N][kTile];
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n; t += kTile) {
      const int64_t end = std::min(n, t + kTile);
      T* at[N];
      for (int k = 0; k < N; ++k) at[k] = tiles[k];
      body(t, end, at);
      for (int k = 0; k < N; ++k) stream_store(outputs[k] + t, tiles[k], end - t);
    }
    _mm_sfence();  // the streamed stores reach memory before the threads join
  }
}

// The one element of a scalar tensor (lr, beta pow) as double.
double scalar_value(const Tensor& t, const char* what) {
  PDNG_CHECK(t.numel() == 1, std::string(what) + " must have one element, got " + t.desc.str());
  switch (t.dtype()) {
    case DType::Float32: return *t.as<float>();
    case DType::Float64: return *t.as<double>();
    case DType::Int32: return static_cast<double>(*t.as<int32_t>());
    case DType::Int64: return static_cast<double>(*t.as<int64_t>());
    default: throw Error(std::string(what) + ": unsupported dtype " + dtype_name(t.dtype()));
  }
}

// out = (beta_pow * T(beta)).astype(beta_pow.dtype), with NumPy's promotion of the product.
template <class T>
void update_pow(const Tensor& in, Tensor& out, T beta) {
  PDNG_DISPATCH_FLOAT(in.dtype(), B, {
    using P = decltype(B() * T());
    const B* x = in.as<B>();
    B* y = out.as<B>();
    for (int64_t i = 0, n = in.numel(); i < n; ++i) y[i] = static_cast<B>(static_cast<P>(x[i]) * static_cast<P>(beta));
  });
}

void check_node(const NodeInfo& node, size_t nin, size_t nout) {
  check_arity(node, nin, nout);
  const TensorDesc& p = node.inputs[0];
  PDNG_CHECK(p.dtype == DType::Float32 || p.dtype == DType::Float64,
             node.op_type + ": unsupported parameter dtype " + dtype_name(p.dtype) + " (float32 or float64 expected)");
  PDNG_CHECK(node.inputs[1].dtype == p.dtype && node.inputs[1].shape == p.shape,
             node.op_type + ": gradient " + node.inputs[1].str() + " does not match parameter " + p.str());
  PDNG_CHECK(node.inputs[2].numel() == 1, node.op_type + ": learning rate must have one element, got " +
                                              node.inputs[2].str());
  PDNG_CHECK(node.outputs[0].dtype == p.dtype && node.outputs[0].shape == p.shape,
             node.op_type + ": output " + node.outputs[0].str() + " does not match parameter " + p.str());
}

// Moments (inputs 3, 4) must be like the parameter; beta pows (5, 6) one float element each.
void check_adam_like(const NodeInfo& node) {
  check_node(node, 7, 5);
  const TensorDesc& p = node.inputs[0];
  for (int i : {3, 4}) {
    PDNG_CHECK(node.inputs[i].dtype == p.dtype && node.inputs[i].shape == p.shape,
               node.op_type + ": moment " + node.inputs[i].str() + " does not match parameter " + p.str());
  }
  for (int i : {5, 6}) {
    PDNG_CHECK(node.inputs[i].numel() == 1 &&
                   (node.inputs[i].dtype == DType::Float32 || node.inputs[i].dtype == DType::Float64),
               node.op_type + ": beta pow must be one float element, got " + node.inputs[i].str());
  }
  for (int i = 1; i < 5; ++i) {
    PDNG_CHECK(node.outputs[i].dtype == node.inputs[i + 2].dtype && node.outputs[i].shape == node.inputs[i + 2].shape,
               node.op_type + ": output " + std::to_string(i) + " " + node.outputs[i].str() +
                   " does not match its state input " + node.inputs[i + 2].str());
  }
}

// --- SGD: param - lr * grad ----------------------------------------------------------------------
template <class T>
void sgd(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const T* __restrict p = in[0].as<T>();
  const T* __restrict g = in[1].as<T>();
  T* __restrict po = out[0].as<T>();
  const T lr = static_cast<T>(scalar_value(in[2], "learning rate"));
  const int64_t n = in[0].numel();
  T* const outputs[1] = {po};
  update_loop<T, 1>(n, threads_for(n), po == p, outputs, [&](int64_t begin, int64_t end, T* const* o) {
    T* __restrict po_at = o[0];
    for (int64_t i = begin; i < end; ++i) po_at[i - begin] = p[i] - lr * g[i];
  });
}

class SGDKernel : public Kernel {
 public:
  explicit SGDKernel(const NodeInfo& node) {
    check_node(node, 3, 1);
    dtype_ = node.inputs[0].dtype;
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_FLOAT(dtype_, T, sgd<T>(in, out));
  }

 private:
  DType dtype_;
};

// --- Momentum ---------------------------------------------------------------------------------------
// (param, grad, lr, velocity) -> (param, velocity): Momentum's and LARS momentum's shape of node.
inline void check_velocity_node(const NodeInfo& node) {
  check_node(node, 4, 2);
  const TensorDesc& param = node.inputs[0];
  PDNG_CHECK(node.inputs[3].dtype == param.dtype && node.inputs[3].shape == param.shape,
             node.op_type + ": velocity " + node.inputs[3].str() + " does not match parameter " + param.str());
  PDNG_CHECK(node.outputs[1].dtype == param.dtype && node.outputs[1].shape == param.shape,
             node.op_type + ": velocity output " + node.outputs[1].str() + " does not match parameter " +
                 param.str());
}

class MomentumKernel : public Kernel {
 public:
  explicit MomentumKernel(const NodeInfo& node) {
    check_velocity_node(node);
    dtype_ = node.inputs[0].dtype;
    mu_ = node.attrs.get_float("mu");
    nesterov_ = node.attrs.get_bool("use_nesterov");
    coeff_ = node.attrs.get_float("regularization_coeff");
    rescale_ = node.attrs.get_float("rescale_grad");
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_FLOAT(dtype_, T, {
      if (coeff_ != 0.0) {
        if (nesterov_) update<T, true, true>(in, out);
        else update<T, true, false>(in, out);
      } else {
        if (nesterov_) update<T, false, true>(in, out);
        else update<T, false, false>(in, out);
      }
    });
  }

 private:
  template <class T, bool Decay, bool Nesterov>
  void update(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
    const T* __restrict p = in[0].as<T>();
    const T* __restrict g = in[1].as<T>();
    const T* __restrict v = in[3].as<T>();
    T* __restrict po = out[0].as<T>();
    T* __restrict vo = out[1].as<T>();
    const T lr = static_cast<T>(scalar_value(in[2], "learning rate"));
    const T mu = static_cast<T>(mu_), rescale = static_cast<T>(rescale_), coeff = static_cast<T>(coeff_);
    const int64_t n = in[0].numel();
    T* const outputs[2] = {po, vo};
    update_loop<T, 2>(n, threads_for(2 * n), po == p, outputs, [&](int64_t begin, int64_t end, T* const* o) {
      T* __restrict po_at = o[0];
      T* __restrict vo_at = o[1];
      for (int64_t i = begin; i < end; ++i) {
        T grad = g[i] * rescale;
        if (Decay) grad = grad + coeff * p[i];
        T v_out = v[i] * mu + grad;
        vo_at[i - begin] = v_out;
        if (Nesterov) po_at[i - begin] = p[i] - (grad + v_out * mu) * lr;
        else po_at[i - begin] = p[i] - lr * v_out;
      }
    });
  }

  DType dtype_;
  double mu_, coeff_, rescale_;
  bool nesterov_;
};

// --- Adam / AdamW -------------------------------------------------------------------------------------
class AdamKernel : public Kernel {
 public:
  explicit AdamKernel(const NodeInfo& node) {
    check_adam_like(node);
    dtype_ = node.inputs[0].dtype;
    beta1_ = node.attrs.get_float("beta1");
    beta2_ = node.attrs.get_float("beta2");
    eps_ = node.attrs.get_float("epsilon");
    decay_ = node.attrs.get_float("weight_decay");
    lr_ratio_ = node.attrs.get_float("lr_ratio");
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_FLOAT(dtype_, T, {
      if (decay_ != 0.0) update<T, true>(in, out);
      else update<T, false>(in, out);
    });
  }

 private:
  template <class T, bool Decay>
  void update(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
    const T one = T(1);
    const T beta1 = static_cast<T>(beta1_), beta2 = static_cast<T>(beta2_), eps = static_cast<T>(eps_);
    const T lr = static_cast<T>(scalar_value(in[2], "learning rate")) * static_cast<T>(lr_ratio_);
    const T b1 = static_cast<T>(scalar_value(in[5], "beta1_pow"));
    const T b2 = static_cast<T>(scalar_value(in[6], "beta2_pow"));
    // AdamW: decoupled decay applied to the parameter before the Adam step.
    const T keep = one - lr * static_cast<T>(decay_);
    const T omb1 = one - beta1, omb2 = one - beta2;
    const T sqrt_omb2p = std::sqrt(one - b2);
    const T lr_t = lr * sqrt_omb2p / (one - b1);
    const T eps_t = eps * sqrt_omb2p;

    const T* __restrict p = in[0].as<T>();
    const T* __restrict g = in[1].as<T>();
    const T* __restrict m1 = in[3].as<T>();
    const T* __restrict m2 = in[4].as<T>();
    T* __restrict po = out[0].as<T>();
    T* __restrict m1o = out[1].as<T>();
    T* __restrict m2o = out[2].as<T>();
    const int64_t n = in[0].numel();
    T* const outputs[3] = {po, m1o, m2o};
    update_loop<T, 3>(n, threads_for(4 * n), po == p, outputs, [&](int64_t begin, int64_t end, T* const* o) {
      T* __restrict po_at = o[0];
      T* __restrict m1o_at = o[1];
      T* __restrict m2o_at = o[2];
      for (int64_t i = begin; i < end; ++i) {
        const T gi = g[i];
        const T m1_out = beta1 * m1[i] + omb1 * gi;
        const T m2_out = beta2 * m2[i] + omb2 * gi * gi;
        m1o_at[i - begin] = m1_out;
        m2o_at[i - begin] = m2_out;
        T param = p[i];
        if (Decay) param = param * keep;
        po_at[i - begin] = param - lr_t * (m1_out / (std::sqrt(m2_out) + eps_t));
      }
    });
    update_pow<T>(in[5], out[3], beta1);
    update_pow<T>(in[6], out[4], beta2);
  }

  DType dtype_;
  double beta1_, beta2_, eps_, decay_, lr_ratio_;
};

// --- Lamb -------------------------------------------------------------------------------------------
class LambKernel : public Kernel {
 public:
  explicit LambKernel(const NodeInfo& node) {
    check_adam_like(node);
    dtype_ = node.inputs[0].dtype;
    beta1_ = node.attrs.get_float("beta1");
    beta2_ = node.attrs.get_float("beta2");
    eps_ = node.attrs.get_float("epsilon");
    decay_ = node.attrs.get_float("weight_decay");
    always_adapt_ = node.attrs.get_bool("always_adapt");
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_FLOAT(dtype_, T, update<T>(in, out));
  }

 private:
  template <class T>
  void update(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
    const T one = T(1);
    const T beta1 = static_cast<T>(beta1_), beta2 = static_cast<T>(beta2_), eps = static_cast<T>(eps_);
    const T decay = static_cast<T>(decay_);
    const T lr = static_cast<T>(scalar_value(in[2], "learning rate"));
    const T omb1 = one - beta1, omb2 = one - beta2;
    const T d1 = one - static_cast<T>(scalar_value(in[5], "beta1_pow"));
    const T d2 = one - static_cast<T>(scalar_value(in[6], "beta2_pow"));
    const bool adapt = decay > T(0) || always_adapt_;

    const T* __restrict p = in[0].as<T>();
    const T* __restrict g = in[1].as<T>();
    const T* __restrict m1 = in[3].as<T>();
    const T* __restrict m2 = in[4].as<T>();
    T* __restrict po = out[0].as<T>();
    T* __restrict m1o = out[1].as<T>();
    T* __restrict m2o = out[2].as<T>();
    const int64_t n = in[0].numel();
    const int threads = threads_for(4 * n);

    // r = m1_hat / (sqrt(m2_hat) + eps) + decay * param, from the new moments.
    auto step = [&](int64_t i) {
      const T m1_hat = m1o[i] / d1;
      const T m2_hat = m2o[i] / d2;
      return m1_hat / (std::sqrt(m2_hat) + eps) + decay * p[i];
    };
    // Pass 1: the moments; the norms' sums of squares. The parameter output is not written yet:
    // the engine may give it the parameter's own buffer (backends/cpu/passes/liveness.py), which pass 2 reads.
    double p_sq = 0.0, s_sq = 0.0;
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static) reduction(+ : p_sq, s_sq)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i], pi = p[i];
      m1o[i] = beta1 * m1[i] + omb1 * gi;
      m2o[i] = beta2 * m2[i] + omb2 * gi * gi;
      const T r = step(i);
      p_sq += static_cast<double>(pi) * static_cast<double>(pi);
      s_sq += static_cast<double>(r) * static_cast<double>(r);
    }
    // Trust ratio ||param|| / ||r||, 1 if either is 0 or the norms are not wanted.
    T ratio = one;
    if (adapt) {
      const T p_norm = std::sqrt(static_cast<T>(p_sq)), s_norm = std::sqrt(static_cast<T>(s_sq));
      if (p_norm > T(0) && s_norm > T(0)) ratio = p_norm / s_norm;
    }
    const T scale = lr * ratio;
    // Pass 2: param - lr * ratio * r, r computed again (the same operations, the same value);
    // element i of the parameter is read before it is written.
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = p[i] - scale * step(i);
    update_pow<T>(in[5], out[3], beta1);
    update_pow<T>(in[6], out[4], beta2);
  }

  DType dtype_;
  double beta1_, beta2_, eps_, decay_;
  bool always_adapt_;
};

// --- LARS momentum ------------------------------------------------------------------------------------
// Paddle takes LARS's norms with Eigen's x.square().sum(), whose order of additions the interpreter
// repeats (backends/interpreter/kernels/eigen_sum.py, which explains it): halve ranges longer than
// kLeafPackets packets (the split rounded up to a packet boundary), and in a leaf add pairs of
// packets lane-wise into two accumulators. A packet is 32 bytes (Paddle's AVX build). The leaves
// are independent, so they run in parallel; the tree then adds their sums in Eigen's order.
// (The squares and sums must not become FMAs: this library is built without -mfma.)
constexpr int64_t kLeafPackets = 1024;

template <class T>
constexpr int64_t lanes() { return 32 / static_cast<int64_t>(sizeof(T)); }

// Eigen's leaf: value(j) for j in [first, first + n), squared and summed.
template <class T, class F>
T leaf_sum_squares(const F& value, int64_t first, int64_t n) {
  constexpr int64_t P = lanes<T>();
  T acc[P] = {}, acc2[P] = {};
  const int64_t unrolled = n / (2 * P) * 2 * P, vectorized = n / P * P;
  for (int64_t j = 0; j < unrolled; j += 2 * P) {
    for (int64_t l = 0; l < P; ++l) {
      const T a = value(first + j + l), b = value(first + j + P + l);
      acc[l] += a * a;
      acc2[l] += b * b;
    }
  }
  if (unrolled < vectorized) {
    for (int64_t l = 0; l < P; ++l) {
      const T a = value(first + unrolled + l);
      acc[l] += a * a;
    }
  }
  T scalar = T(0);
  for (int64_t j = vectorized; j < n; ++j) {
    const T a = value(first + j);
    scalar += a * a;
  }
  for (int64_t l = 0; l < P; ++l) acc[l] += acc2[l];
  // predux: lanes i and i + width / 2 down to 4 lanes, then (0 + 2) + (1 + 3).
  for (int64_t width = P; width > 4; width /= 2) {
    for (int64_t l = 0; l < width / 2; ++l) acc[l] += acc[l + width / 2];
  }
  return scalar + ((acc[0] + acc[2]) + (acc[1] + acc[3]));
}

// The leaves of Eigen's tree over [first, first + n), in order.
template <class T>
void eigen_leaves(int64_t first, int64_t n, std::vector<std::pair<int64_t, int64_t>>& leaves) {
  constexpr int64_t P = lanes<T>();
  if (n <= P * kLeafPackets) {
    leaves.emplace_back(first, n);
    return;
  }
  const int64_t split = P * ((first + (n + 1) / 2 + P - 1) / P);
  const int64_t left = std::min(split - first, n);
  eigen_leaves<T>(first, left, leaves);
  if (left < n) eigen_leaves<T>(split, n - left, leaves);
}

// Adds the leaves' sums as Eigen's tree does; `next` walks `sums` in leaf order.
template <class T>
T eigen_combine(int64_t first, int64_t n, const std::vector<T>& sums, size_t& next) {
  constexpr int64_t P = lanes<T>();
  if (n <= P * kLeafPackets) return sums[next++];
  const int64_t split = P * ((first + (n + 1) / 2 + P - 1) / P);
  const int64_t left = std::min(split - first, n);
  T total = eigen_combine<T>(first, left, sums, next);
  if (left < n) total = total + eigen_combine<T>(split, n - left, sums, next);
  return total;
}

template <class T, class F>
T eigen_sum_squares(const F& value, int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> leaves;
  eigen_leaves<T>(0, n, leaves);
  std::vector<T> sums(leaves.size());
  const int64_t count = static_cast<int64_t>(leaves.size());
  const int threads = static_cast<int>(std::min<int64_t>(threads_for(n), count));
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
  for (int64_t i = 0; i < count; ++i) sums[i] = leaf_sum_squares<T>(value, leaves[i].first, leaves[i].second);
  size_t next = 0;
  return eigen_combine<T>(0, n, sums, next);
}

class LarsMomentumKernel : public Kernel {
 public:
  explicit LarsMomentumKernel(const NodeInfo& node) {
    check_velocity_node(node);
    dtype_ = node.inputs[0].dtype;
    // Paddle's attributes are C++ floats, cast to the parameter's type.
    mu_ = static_cast<float>(node.attrs.get_float("mu"));
    coeff_ = static_cast<float>(node.attrs.get_float("lars_coeff"));
    decay_ = static_cast<float>(node.attrs.get_float("lars_weight_decay"));
    eps_ = static_cast<float>(node.attrs.get_float("epsilon"));
    rescale_ = static_cast<float>(node.attrs.get_float("rescale_grad"));
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_FLOAT(dtype_, T, update<T>(in, out));
  }

 private:
  // Reads all of param and grad (the norms) before writing anything, then element i of each
  // input before element i of the outputs: safe when the outputs share the inputs' buffers.
  template <class T>
  void update(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
    const T* __restrict p = in[0].as<T>();
    const T* __restrict g = in[1].as<T>();
    const T* __restrict v = in[3].as<T>();
    T* __restrict po = out[0].as<T>();
    T* __restrict vo = out[1].as<T>();
    const T mu = static_cast<T>(mu_), coeff = static_cast<T>(coeff_), decay = static_cast<T>(decay_);
    const T eps = static_cast<T>(eps_), rescale = static_cast<T>(rescale_);
    const int64_t n = in[0].numel();
    const T p_norm = std::sqrt(eigen_sum_squares<T>([p](int64_t i) { return p[i]; }, n));
    const T g_norm = std::sqrt(eigen_sum_squares<T>([g, rescale](int64_t i) { return rescale * g[i]; }, n));
    T local_lr = static_cast<T>(scalar_value(in[2], "learning rate"));
    if (decay > T(0) && p_norm > T(0) && g_norm > T(0)) {
      local_lr = local_lr * coeff * p_norm / (g_norm + decay * p_norm + eps);
    }
    const int threads = threads_for(2 * n);
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const T pi = p[i];
      const T v_out = v[i] * mu + local_lr * (rescale * g[i] + decay * pi);
      vo[i] = v_out;
      po[i] = pi - v_out;
    }
  }

  DType dtype_;
  float mu_, coeff_, decay_, eps_, rescale_;
};

template <class K>
std::unique_ptr<Kernel> make(const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new K(node));
}

PDNG_REGISTER_KERNEL("SGDUpdate", make<SGDKernel>);
PDNG_REGISTER_KERNEL("MomentumUpdate", make<MomentumKernel>);
PDNG_REGISTER_KERNEL("AdamUpdate", make<AdamKernel>);
PDNG_REGISTER_KERNEL("LambUpdate", make<LambKernel>);
PDNG_REGISTER_KERNEL("LarsMomentumUpdate", make<LarsMomentumKernel>);

}  // namespace
}  // namespace pdng
