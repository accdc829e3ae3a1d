// MatMul (numpy.matmul semantics with transpose flags) and the fused MatMulBias (act(a @ b + bias)).
//
// float32 runs on oneDNN's matmul primitive (batch broadcasting and transposition are expressed
// with memory strides, so no copies); MatMulBias adds the bias and a ReLU post-op to the same
// primitive. float64 (which oneDNN's matmul does not support) runs OpenBLAS's dgemm (pdng/blas.h),
// the batch elements or the blocks of one product shared out over the OpenMP team. A blocked loop
// GEMM is the fallback when oneDNN refuses a float32 problem, or a float64 one exceeds OpenBLAS's
// 32-bit dimensions.
//
// As the interpreter (np.swapaxes only for ndim >= 2), transpose flags are ignored for 1-D
// operands: a 1-D a is a row vector [1, K], a 1-D b a column vector [K, 1].
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "pdng/blas.h"
#include "pdng/dnnl_common.h"
#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

using dnnl::memory;

// The problem: out[batch..., M, N] = A[batch..., M, K] @ B[batch..., K, N], A and B possibly stored
// transposed and broadcast over the batch dims.
struct Geometry {
  int64_t M = 1, K = 1, N = 1;
  bool ta = false, tb = false;           // operand stored transposed ([K, M] / [N, K])
  std::vector<int64_t> batch;            // output batch dims
  std::vector<int64_t> a_batch, b_batch; // operand batch dims, padded with leading 1s to batch's rank
  int64_t batch_count = 1;
  std::vector<int64_t> a_offset, b_offset;  // element offset of each output batch's A and B matrices

  Geometry(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b) {
    PDNG_CHECK(!a.empty() && !b.empty(), "MatMul operands must have rank >= 1");
    Shape sa = a, sb = b;
    ta = transpose_a && a.size() >= 2;
    tb = transpose_b && b.size() >= 2;
    if (sa.size() == 1) sa.insert(sa.begin(), 1);
    if (sb.size() == 1) sb.push_back(1);
    int64_t ka;
    if (ta) { M = sa[sa.size() - 1]; ka = sa[sa.size() - 2]; }
    else { M = sa[sa.size() - 2]; ka = sa[sa.size() - 1]; }
    int64_t kb;
    if (tb) { N = sb[sb.size() - 2]; kb = sb[sb.size() - 1]; }
    else { N = sb[sb.size() - 1]; kb = sb[sb.size() - 2]; }
    PDNG_CHECK(ka == kb, "contraction dimensions differ: " + shape_str(a) + " x " + shape_str(b));
    K = ka;
    std::vector<int64_t> ab(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    size_t nb = std::max(ab.size(), bb.size());
    ab.insert(ab.begin(), nb - ab.size(), 1);
    bb.insert(bb.begin(), nb - bb.size(), 1);
    batch.resize(nb);
    for (size_t i = 0; i < nb; ++i) {
      PDNG_CHECK(ab[i] == bb[i] || ab[i] == 1 || bb[i] == 1,
                 "batch dimensions of " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
      batch[i] = ab[i] == 1 ? bb[i] : ab[i];
    }
    a_batch = ab;
    b_batch = bb;
    batch_count = shape_numel(batch);
    // Offsets of every output batch element's operand matrices.
    a_offset.assign(batch_count, 0);
    b_offset.assign(batch_count, 0);
    std::vector<int64_t> idx(nb, 0);
    for (int64_t e = 0; e < batch_count; ++e) {
      int64_t oa = 0, ob = 0, sa_ = M * K, sb_ = K * N;
      for (int d = static_cast<int>(nb) - 1; d >= 0; --d) {
        if (a_batch[d] != 1) oa += idx[d] * sa_;
        if (b_batch[d] != 1) ob += idx[d] * sb_;
        sa_ *= a_batch[d];
        sb_ *= b_batch[d];
      }
      a_offset[e] = oa;
      b_offset[e] = ob;
      for (int d = static_cast<int>(nb) - 1; d >= 0; --d) {
        if (++idx[d] < batch[d]) break;
        idx[d] = 0;
      }
    }
  }

  int64_t out_numel() const { return batch_count * M * N; }
};

// ---- loop GEMM (the fallback of both dtypes) ------------------------------------------------------
// C[M, N] (row-major, ldc) = A @ B, A element (i, k) at A[i * sai + k * sak], B row-major (ldb).
// Register-blocked: an MR x NR block of C is accumulated in registers over a block of K while the
// B panel (KB x NR) stays in L1. The library is compiled for baseline x86-64, so the tile function
// is cloned for AVX-512 and AVX2+FMA (ifunc dispatch at load time).
// 64-byte vectors (GCC vector extension): one zmm with AVX-512, two ymm with AVX2, four xmm else.
typedef double VecF64 __attribute__((vector_size(64)));
typedef float VecF32 __attribute__((vector_size(64)));
template <class T> struct VecOf;
template <> struct VecOf<double> { using type = VecF64; };
template <> struct VecOf<float> { using type = VecF32; };
template <class T>
using Vec = typename VecOf<T>::type;

// C[MR, 2 vectors] += A[MR, kc] @ B[kc, 2 vectors], accumulated in registers.
template <class T, int MR>
inline __attribute__((always_inline)) void micro_tile(int64_t kc, const T* A, int64_t sai, int64_t sak, const T* B,
                                                      int64_t ldb, T* C, int64_t ldc) {
  constexpr int L = sizeof(Vec<T>) / sizeof(T);
  Vec<T> acc0[MR], acc1[MR];
  for (int r = 0; r < MR; ++r) acc0[r] = acc1[r] = Vec<T>{};
  for (int64_t k = 0; k < kc; ++k) {
    Vec<T> b0, b1;  // (unaligned loads; no function returning vectors: baseline ABI)
    std::memcpy(&b0, B + k * ldb, sizeof(b0));
    std::memcpy(&b1, B + k * ldb + L, sizeof(b1));
    for (int r = 0; r < MR; ++r) {
      const T a = A[r * sai + k * sak];
      acc0[r] += a * b0;
      acc1[r] += a * b1;
    }
  }
  for (int r = 0; r < MR; ++r) {
    Vec<T> c0, c1;
    std::memcpy(&c0, C + r * ldc, sizeof(c0));
    std::memcpy(&c1, C + r * ldc + L, sizeof(c1));
    c0 += acc0[r];
    c1 += acc1[r];
    std::memcpy(C + r * ldc, &c0, sizeof(c0));
    std::memcpy(C + r * ldc + L, &c1, sizeof(c1));
  }
}

template <class T, int MR>
inline __attribute__((always_inline)) void micro_rows(int64_t mr, int64_t kc, const T* A, int64_t sai, int64_t sak,
                                                      const T* B, int64_t ldb, T* C, int64_t ldc) {
  switch (mr) {
    case 1: micro_tile<T, 1>(kc, A, sai, sak, B, ldb, C, ldc); break;
    case 2: micro_tile<T, 2>(kc, A, sai, sak, B, ldb, C, ldc); break;
    case 3: micro_tile<T, 3>(kc, A, sai, sak, B, ldb, C, ldc); break;
    case 4: micro_tile<T, 4>(kc, A, sai, sak, B, ldb, C, ldc); break;
    case 5: micro_tile<T, 5>(kc, A, sai, sak, B, ldb, C, ldc); break;
    default: micro_tile<T, MR>(kc, A, sai, sak, B, ldb, C, ldc); break;
  }
}

// Rows [i0, i1) x columns [j0, j1) of C, over all of K. A last panel narrower than NR goes
// through zero-padded copies of its B panel and C tile.
template <class T, int MR>
inline __attribute__((always_inline)) void gemm_tile_impl(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K,
                                                          const T* A, int64_t sai, int64_t sak, const T* B,
                                                          int64_t ldb, T* C, int64_t ldc) {
  static_assert(MR <= 6, "micro_rows handles up to 6 rows");
  constexpr int64_t KB = 256, NR = 2 * sizeof(Vec<T>) / sizeof(T);
  alignas(64) T bpad[KB * NR];
  alignas(64) T cpad[MR * NR];
  for (int64_t i = i0; i < i1; ++i) std::fill(C + i * ldc + j0, C + i * ldc + j1, T(0));
  for (int64_t k0 = 0; k0 < K; k0 += KB) {
    const int64_t kc = std::min(KB, K - k0);
    for (int64_t j = j0; j < j1; j += NR) {
      const int64_t nr = std::min<int64_t>(NR, j1 - j);
      const T* Bp = B + k0 * ldb + j;
      int64_t bld = ldb;
      if (nr < NR) {
        for (int64_t k = 0; k < kc; ++k) {
          std::copy(Bp + k * ldb, Bp + k * ldb + nr, bpad + k * NR);
          std::fill(bpad + k * NR + nr, bpad + (k + 1) * NR, T(0));
        }
        Bp = bpad;
        bld = NR;
      }
      for (int64_t i = i0; i < i1; i += MR) {
        const int64_t mr = std::min<int64_t>(MR, i1 - i);
        const T* Ap = A + i * sai + k0 * sak;
        T* Cp = C + i * ldc + j;
        if (nr == NR) {
          micro_rows<T, MR>(mr, kc, Ap, sai, sak, Bp, bld, Cp, ldc);
        } else {
          std::fill(cpad, cpad + MR * NR, T(0));
          micro_rows<T, MR>(mr, kc, Ap, sai, sak, Bp, bld, cpad, NR);
          for (int64_t r = 0; r < mr; ++r)
            for (int64_t c = 0; c < nr; ++c) Cp[r * ldc + c] += cpad[r * NR + c];
        }
      }
    }
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void gemm_tile(
    int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const double* A, int64_t sai, int64_t sak,
    const double* B, int64_t ldb, double* C, int64_t ldc) {
  gemm_tile_impl<double, 6>(i0, i1, j0, j1, K, A, sai, sak, B, ldb, C, ldc);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void gemm_tile(
    int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A, int64_t sai, int64_t sak,
    const float* B, int64_t ldb, float* C, int64_t ldc) {
  gemm_tile_impl<float, 6>(i0, i1, j0, j1, K, A, sai, sak, B, ldb, C, ldc);
}

template <class T>
class LoopMatMul {
 public:
  explicit LoopMatMul(const Geometry& g) : g_(g) {
    if (g_.tb) {
      int64_t b_count = shape_numel(g_.b_batch);
      packed_b_.resize(static_cast<size_t>(b_count * g_.K * g_.N));
    }
  }

  // out = A @ B (+ bias, relu); bias is nullptr or [N].
  void run(const T* a, const T* b, const T* bias, bool relu, T* out) {
    const Geometry& g = g_;
    const int64_t M = g.M, N = g.N, K = g.K;
    if (g.out_numel() == 0) return;
    const T* bmat = b;
    if (g.tb) {  // pack B^T ([N, K] stored) into row-major [K, N]
      int64_t b_count = shape_numel(g.b_batch);
      T* dst = packed_b_.data();
#pragma omp parallel for num_threads(num_threads()) if (b_count * K * N > 65536) collapse(2)
      for (int64_t e = 0; e < b_count; ++e)
        for (int64_t k = 0; k < K; ++k) {
          const T* src = b + e * K * N;
          T* d = dst + e * K * N + k * N;
          for (int64_t j = 0; j < N; ++j) d[j] = src[j * K + k];
        }
      bmat = dst;
    }
    const int64_t sai = g.ta ? 1 : K, sak = g.ta ? M : 1;
    // Tasks: (batch element, block of 32 rows, block of 256 columns); each computes its tile of C.
    constexpr int64_t RB = 32, CB = 256;
    const int64_t row_blocks = (M + RB - 1) / RB, col_blocks = (N + CB - 1) / CB;
    const int64_t tasks = g.batch_count * row_blocks * col_blocks;
    const bool parallel = static_cast<double>(g.out_numel()) * static_cast<double>(K) > 200000.0 && tasks > 1;
#pragma omp parallel for num_threads(num_threads()) if (parallel) schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t e = t / (row_blocks * col_blocks), rc = t % (row_blocks * col_blocks);
      const int64_t i0 = (rc / col_blocks) * RB, i1 = std::min(M, i0 + RB);
      const int64_t j0 = (rc % col_blocks) * CB, j1 = std::min(N, j0 + CB);
      const T* A = a + g.a_offset[e];
      const T* B = bmat + g.b_offset[e];
      T* C = out + e * M * N;
      gemm_tile(i0, i1, j0, j1, K, A, sai, sak, B, N, C, N);
      if (bias || relu) {
        for (int64_t i = i0; i < i1; ++i) {
          T* c = C + i * N;
          if (bias)
            for (int64_t j = j0; j < j1; ++j) c[j] += bias[j];
          if (relu)
            for (int64_t j = j0; j < j1; ++j) c[j] = c[j] < T(0) ? T(0) : c[j];
        }
      }
    }
  }

 private:
  Geometry g_;
  std::vector<T> packed_b_;
};

// ---- OpenBLAS (float64) -----------------------------------------------------------------------------
class BlasMatMul {
 public:
  explicit BlasMatMul(const Geometry& g) : g_(g) {}

  // Whether every product of g fits OpenBLAS's 32-bit dimensions.
  static bool fits(const Geometry& g) {
    return blas_fits(g.M, g.N, g.K, g.ta ? g.M : g.K, g.tb ? g.K : g.N, g.N);
  }

  // out = A @ B (+ bias, relu); bias is nullptr or [N].
  void run(const double* a, const double* b, const double* bias, bool relu, double* out) const;

 private:
  Geometry g_;
};

// Defined below with the oneDNN matmul, whose small-product threshold it shares.
int matmul_threads(double flops);

void BlasMatMul::run(const double* a, const double* b, const double* bias, bool relu, double* out) const {
  const Geometry& g = g_;
  const int64_t M = g.M, N = g.N, K = g.K;
  const int64_t lda = g.ta ? M : K, ldb = g.tb ? K : N;
  const int threads = matmul_threads(2.0 * g.batch_count * M * N * K);
  // Whole batch elements per thread when there are enough of them, else every product shared out
  // over the team (blocks of rows or columns of C, disjoint).
  const bool by_batch = g.batch_count >= threads;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int part = thread_index(), parts = thread_count();
    if (by_batch) {
#pragma omp for schedule(static)
      for (int64_t e = 0; e < g.batch_count; ++e)
        dgemm(g.ta, g.tb, M, N, K, a + g.a_offset[e], lda, b + g.b_offset[e], ldb, 0.0, out + e * M * N, N);
    } else {
      for (int64_t e = 0; e < g.batch_count; ++e)
        dgemm_share(part, parts, g.ta, g.tb, M, N, K, a + g.a_offset[e], lda, b + g.b_offset[e], ldb, 0.0,
                    out + e * M * N, N);
    }
    if (bias || relu) {
      // The epilogue splits rows, the shared products may have split columns: all of C first.
      if (!by_batch) {
#pragma omp barrier
      }
#pragma omp for schedule(static)
      for (int64_t r = 0; r < g.batch_count * M; ++r) {
        double* c = out + r * N;
        if (bias)
          for (int64_t j = 0; j < N; ++j) c[j] += bias[j];
        if (relu)
          for (int64_t j = 0; j < N; ++j) c[j] = c[j] < 0.0 ? 0.0 : c[j];
      }
    }
  }
}

// ---- oneDNN matmul (float32) -------------------------------------------------------------------------
// Memory descriptor of an operand matrix stack: dims [batch..., rows, cols] of the logical (not
// transposed) operand, strides of how it is stored (row-major, possibly transposed).
memory::desc operand_md(const std::vector<int64_t>& batch, int64_t rows, int64_t cols, bool transposed) {
  const size_t nb = batch.size();
  memory::dims dims(batch.begin(), batch.end());
  dims.push_back(rows);
  dims.push_back(cols);
  memory::dims strides(nb + 2);
  // A matrix with one row or one column is the same memory stored transposed or not. It is then
  // described as row-major: the transposed strides would be (1, 1), which some of oneDNN's
  // AVX-512 implementations read as another layout (wrong products measured on an Intel Xeon with
  // AVX-512: the input gradient of a [?x1] @ [1x5] linear layer).
  if (transposed && rows > 1 && cols > 1) {
    strides[nb] = 1;
    strides[nb + 1] = rows;
  } else {
    strides[nb] = cols;
    strides[nb + 1] = 1;
  }
  int64_t s = rows * cols;
  for (int d = static_cast<int>(nb) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= batch[d];
  }
  return memory::desc(dims, memory::data_type::f32, strides);
}

// oneDNN fixes a primitive's thread count when it is created (omp_get_max_threads then) and runs
// a 1-thread primitive inline, without an OpenMP region. Small products are faster that way.
class ThreadLimit {
 public:
  explicit ThreadLimit(int n) {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    if (n > 0 && n < saved_) omp_set_num_threads(n);
    else saved_ = 0;
#endif
  }
  ~ThreadLimit() {
#ifdef _OPENMP
    if (saved_ > 0) omp_set_num_threads(saved_);
#endif
  }

 private:
  int saved_ = 0;
};

// Below this many flops a product runs on one thread: ~20 us of work, about what waking and joining
// the other threads costs on a busy 2-core machine (measured: 2 threads lose up to ~8 MFLOP there).
constexpr double kSmallFlops = 2e6;

int matmul_threads(double flops) { return flops < kSmallFlops ? 1 : std::max(1, num_threads()); }

class DnnlMatMul {
 public:
  // Throws (dnnl::error) if oneDNN has no implementation.
  DnnlMatMul(const Geometry& g, bool with_bias, bool relu) {
    memory::desc a_md = operand_md(g.a_batch, g.M, g.K, g.ta);
    memory::desc b_md = operand_md(g.b_batch, g.K, g.N, g.tb);
    memory::desc c_md = operand_md(g.batch, g.M, g.N, false);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (relu) {
      dnnl::post_ops po;
      po.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd;
    const double flops = 2.0 * g.batch_count * g.M * g.N * g.K;
    ThreadLimit limit(flops < kSmallFlops ? 1 : 0);
    if (with_bias) {
      std::vector<int64_t> ones(g.batch.size(), 1);
      memory::desc bias_md = operand_md(ones, 1, g.N, false);
      pd = dnnl::matmul::primitive_desc(dnnl_engine(), a_md, b_md, bias_md, c_md, attr);
      bias_ = wrap(bias_md);
    } else {
      pd = dnnl::matmul::primitive_desc(dnnl_engine(), a_md, b_md, c_md, attr);
    }
    prim_ = dnnl::matmul(pd);
    a_ = wrap(a_md);
    b_ = wrap(b_md);
    c_ = wrap(c_md);
    scratch_ = dnnl::memory(pd.scratchpad_desc(), dnnl_engine());
    impl_ = pd.impl_info_str();
    args_ = {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}, {DNNL_ARG_SCRATCHPAD, scratch_}};
    if (with_bias) args_[DNNL_ARG_BIAS] = bias_;
  }

  void run(const void* a, const void* b, const void* bias, void* c) {
    a_.set_data_handle(const_cast<void*>(a));
    b_.set_data_handle(const_cast<void*>(b));
    if (bias) bias_.set_data_handle(const_cast<void*>(bias));
    c_.set_data_handle(c);
    prim_.execute(dnnl_stream(), args_);
    dnnl_stream().wait();
  }

  const std::string& impl() const { return impl_; }

 private:
  dnnl::matmul prim_;
  dnnl::memory a_, b_, bias_, c_, scratch_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string impl_;
};

// ---- the kernels ------------------------------------------------------------------------------------
class MatMulKernel : public Kernel {
 public:
  MatMulKernel(const NodeInfo& node, bool fused)
      : fused_(fused),
        g_(node.inputs.at(0).shape, node.inputs.at(1).shape, node.attrs.get_bool("transpose_a"),
           node.attrs.get_bool("transpose_b")) {
    dtype_ = node.inputs.at(0).dtype;
    check_float_dtype(dtype_);
    PDNG_CHECK(node.inputs.at(1).dtype == dtype_, "input dtypes differ");
    PDNG_CHECK(node.outputs.size() == 1 && node.outputs[0].dtype == dtype_, "MatMul has one output of the inputs' dtype");
    PDNG_CHECK(node.outputs[0].numel() == g_.out_numel(),
               "output " + node.outputs[0].str() + " does not match the product of " + node.inputs[0].str() + " and " +
                   node.inputs[1].str());
    if (fused_) {
      PDNG_CHECK(node.inputs.size() == 3, "MatMulBias takes (a, b, bias)");
      PDNG_CHECK(node.inputs[0].rank() == 2 && node.inputs[1].rank() == 2, "MatMulBias needs 2-D a and b");
      PDNG_CHECK(node.inputs[2].dtype == dtype_ && node.inputs[2].numel() == g_.N,
                 "bias " + node.inputs[2].str() + " must have " + std::to_string(g_.N) + " elements");
      const std::string& act = node.attrs.get_string("activation");
      PDNG_CHECK(act == "none" || act == "relu" || act.empty(), "unsupported activation '" + act + "'");
      relu_ = act == "relu";
    } else {
      PDNG_CHECK(node.inputs.size() == 2, "MatMul takes (a, b)");
    }
    if (g_.out_numel() == 0) return;
    if (dtype_ == DType::Float32 && g_.K > 0) {
      try {
        dnnl_.reset(new DnnlMatMul(g_, fused_, relu_));
      } catch (const dnnl::error&) {
        dnnl_.reset();
      }
    }
    if (dtype_ == DType::Float64 && BlasMatMul::fits(g_)) blas_.reset(new BlasMatMul(g_));
    if (!dnnl_ && !blas_) {
      if (dtype_ == DType::Float32) loop_f32_.reset(new LoopMatMul<float>(g_));
      else loop_f64_.reset(new LoopMatMul<double>(g_));
    }
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (g_.out_numel() == 0) return;
    const void* bias = fused_ ? in[2].data : nullptr;
    if (dnnl_) {
      dnnl_->run(in[0].data, in[1].data, bias, out[0].data);
    } else if (blas_) {
      blas_->run(in[0].as<double>(), in[1].as<double>(), static_cast<const double*>(bias), relu_,
                 out[0].as<double>());
    } else if (loop_f32_) {
      loop_f32_->run(in[0].as<float>(), in[1].as<float>(), static_cast<const float*>(bias), relu_, out[0].as<float>());
    } else {
      loop_f64_->run(in[0].as<double>(), in[1].as<double>(), static_cast<const double*>(bias), relu_,
                     out[0].as<double>());
    }
  }

 private:
  bool fused_;
  bool relu_ = false;
  DType dtype_;
  Geometry g_;
  std::unique_ptr<DnnlMatMul> dnnl_;
  std::unique_ptr<BlasMatMul> blas_;
  std::unique_ptr<LoopMatMul<float>> loop_f32_;
  std::unique_ptr<LoopMatMul<double>> loop_f64_;
};

PDNG_REGISTER_KERNEL("MatMul", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new MatMulKernel(node, false));
});
PDNG_REGISTER_KERNEL("MatMulBias", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new MatMulKernel(node, true));
});

}  // namespace
}  // namespace pdng
