// Kernels of the tensor ops (ir/ops/tensor.py): Convert (ndarray.astype: float -> int truncates, as C
// casts) and DropoutMask. Constant values are bound by the executor, not by a kernel.
//
// The NumPy interpreter (backends/interpreter/kernels/tensor.py) is the specification.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pdng/kernel.h"
#include "pdng/kernel_util.h"
#include "pdng/elementwise_loops.h"

namespace pdng {
namespace {

// --- DropoutMask ------------------------------------------------------------------------------------
// mask[i] = (u_i >= prob) with u_i uniform in [0, 1) (32-bit resolution), as the interpreter (Paddle
// drops when its draw is below prob). Draw p of a SplitMix64 stream gives the uniforms of elements
// 2p and 2p+1. The stream's key is fixed by attribute 'seed' (the same mask every run), else drawn
// per run from a std::mt19937_64 seeded once from std::random_device. Counter-based, so the mask
// does not depend on the thread count. (NumPy's stream is not reproduced; only the semantics.)
uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class DropoutMaskKernel : public Kernel {
 public:
  explicit DropoutMaskKernel(const NodeInfo& node) {
    const TensorDesc &x = node.inputs.at(0), &y = node.outputs.at(0);
    PDNG_CHECK(y.dtype == DType::UInt8, "the mask must be uint8, got " + y.str());
    check_shape(y, x.shape, "mask");
    prob_ = node.attrs.get_float("prob");
    PDNG_CHECK(prob_ >= 0.0 && prob_ <= 1.0, "prob " + std::to_string(prob_) + " must be in [0, 1]");
    n_ = y.numel();
    seeded_ = node.attrs.has("seed");
    if (seeded_) {
      key_ = splitmix64(static_cast<uint64_t>(node.attrs.get_int("seed")) + 0x9e3779b97f4a7c15ULL);
    } else {
      std::random_device device;
      rng_.seed((static_cast<uint64_t>(device()) << 32) ^ device());
    }
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const uint64_t key = seeded_ ? key_ : rng_();
    uint8_t* mask = out[0].as<uint8_t>();
    // Each 64-bit draw gives two 32-bit uniforms u = h * 2^-32:
    // u >= prob  <=>  h >= ceil(prob * 2^32), a threshold in [0, 2^32].
    const uint64_t threshold = static_cast<uint64_t>(std::ceil(prob_ * 4294967296.0));
    const int64_t n = n_;
    parallel_ranges((n + 1) / 2, n * 4, [&](int64_t b, int64_t e, int) {
      for (int64_t p = b; p < e; ++p) {
        const uint64_t bits = splitmix64(key + static_cast<uint64_t>(p) * 0x9e3779b97f4a7c15ULL);
        mask[2 * p] = static_cast<uint8_t>((bits & 0xffffffffULL) >= threshold);
        if (2 * p + 1 < n) mask[2 * p + 1] = static_cast<uint8_t>((bits >> 32) >= threshold);
      }
    });
  }

 private:
  double prob_ = 0.5;
  int64_t n_ = 0;
  bool seeded_ = false;
  uint64_t key_ = 0;
  std::mt19937_64 rng_;
};

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

template <class K>
KernelFactory make() {
  return [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new K(node)); };
}

PDNG_REGISTER_KERNEL("DropoutMask", make<DropoutMaskKernel>());

}  // namespace
}  // namespace pdng
