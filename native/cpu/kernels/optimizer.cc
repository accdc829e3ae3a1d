// Optimizer updates (ir/ops/optimizer.py): SGDUpdate, MomentumUpdate, AdamUpdate, LambUpdate.
//
// Each is one fused pass over parameter, gradient and moments (Lamb: two, for its norms), with
// the interpreter's formulas and order of operations (Paddle's CPU kernels): scalars are cast to
// the parameter's dtype first, scalar sub-expressions are evaluated once in that dtype.
// The learning rate and the beta powers are one-element tensors of any float dtype; the updated
// beta powers keep their dtype (NumPy promotion of beta_pow * T(beta)).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

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
  const int threads = threads_for(n);
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = p[i] - lr * g[i];
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
class MomentumKernel : public Kernel {
 public:
  explicit MomentumKernel(const NodeInfo& node) {
    check_node(node, 4, 2);
    dtype_ = node.inputs[0].dtype;
    PDNG_CHECK(node.inputs[3].dtype == dtype_ && node.inputs[3].shape == node.inputs[0].shape,
               "velocity " + node.inputs[3].str() + " does not match parameter " + node.inputs[0].str());
    PDNG_CHECK(node.outputs[1].dtype == dtype_ && node.outputs[1].shape == node.inputs[0].shape,
               "velocity output " + node.outputs[1].str() + " does not match parameter " + node.inputs[0].str());
    mu_ = node.attrs.get_float("mu", 0.9);
    nesterov_ = node.attrs.get_bool("use_nesterov", false);
    coeff_ = node.attrs.get_float("regularization_coeff", 0.0);
    rescale_ = node.attrs.get_float("rescale_grad", 1.0);
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
    const int threads = threads_for(2 * n);
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      T grad = g[i] * rescale;
      if (Decay) grad = grad + coeff * p[i];
      T v_out = v[i] * mu + grad;
      vo[i] = v_out;
      if (Nesterov) po[i] = p[i] - (grad + v_out * mu) * lr;
      else po[i] = p[i] - lr * v_out;
    }
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
    beta1_ = node.attrs.get_float("beta1", 0.9);
    beta2_ = node.attrs.get_float("beta2", 0.999);
    eps_ = node.attrs.get_float("epsilon", 1e-8);
    decay_ = node.attrs.get_float("weight_decay", 0.0);
    lr_ratio_ = node.attrs.get_float("lr_ratio", 1.0);
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
    const int threads = threads_for(4 * n);
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i];
      const T m1_out = beta1 * m1[i] + omb1 * gi;
      const T m2_out = beta2 * m2[i] + omb2 * gi * gi;
      m1o[i] = m1_out;
      m2o[i] = m2_out;
      T param = p[i];
      if (Decay) param = param * keep;
      po[i] = param - lr_t * (m1_out / (std::sqrt(m2_out) + eps_t));
    }
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
    beta1_ = node.attrs.get_float("beta1", 0.9);
    beta2_ = node.attrs.get_float("beta2", 0.999);
    eps_ = node.attrs.get_float("epsilon", 1e-6);
    decay_ = node.attrs.get_float("weight_decay", 0.01);
    always_adapt_ = node.attrs.get_bool("always_adapt", false);
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

    // The step r, from the new moments and the parameter. The parameter output may be the
    // parameter's own buffer (updated in place), so r is not stored: pass 2 computes it again,
    // reading p[i] before writing po[i], with the same operations (the same bits).
    auto step_at = [&](int64_t i) {
      return (m1o[i] / d1) / (std::sqrt(m2o[i] / d2) + eps) + decay * p[i];
    };
    // Pass 1: moments; the norms' sums of squares.
    double p_sq = 0.0, s_sq = 0.0;
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static) reduction(+ : p_sq, s_sq)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i], pi = p[i];
      m1o[i] = beta1 * m1[i] + omb1 * gi;
      m2o[i] = beta2 * m2[i] + omb2 * gi * gi;
      const T step = step_at(i);
      p_sq += static_cast<double>(pi) * static_cast<double>(pi);
      s_sq += static_cast<double>(step) * static_cast<double>(step);
    }
    // Trust ratio ||param|| / ||r||, 1 if either is 0 or the norms are not wanted.
    T ratio = one;
    if (adapt) {
      const T p_norm = std::sqrt(static_cast<T>(p_sq)), s_norm = std::sqrt(static_cast<T>(s_sq));
      if (p_norm > T(0) && s_norm > T(0)) ratio = p_norm / s_norm;
    }
    const T scale = lr * ratio;
    // Pass 2: param - lr * ratio * r.
#pragma omp parallel for if (threads > 1) num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = p[i] - scale * step_at(i);
    update_pow<T>(in[5], out[3], beta1);
    update_pow<T>(in[6], out[4], beta2);
  }

  DType dtype_;
  double beta1_, beta2_, eps_, decay_;
  bool always_adapt_;
};

template <class K>
std::unique_ptr<Kernel> make(const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new K(node));
}

PDNG_REGISTER_KERNEL("SGDUpdate", make<SGDKernel>);
PDNG_REGISTER_KERNEL("MomentumUpdate", make<MomentumKernel>);
PDNG_REGISTER_KERNEL("AdamUpdate", make<AdamKernel>);
PDNG_REGISTER_KERNEL("LambUpdate", make<LambKernel>);

}  // namespace
}  // namespace pdng
