// See pdng/blas.h.
#include "pdng/blas.h"

#include <algorithm>
#include <climits>
#include <mutex>

#include <cblas.h>  // scipy-openblas32's: every symbol carries the scipy_ prefix

namespace pdng {
namespace {

// OpenBLAS's own threads stay idle: one thread per call, the kernels share the work out over the
// backend's OpenMP team (see blas.h). Set once, before the first product.
void single_threaded_openblas() {
  static std::once_flag once;
  std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}

constexpr int64_t kLineDoubles = 8;  // a 64-byte cache line of float64

}  // namespace

bool blas_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    if (v < 0 || v > INT_MAX) return false;
  return true;
}

void dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
           int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // a sum over nothing; not left to BLAS, whose lda/ldb checks reject K == 0
    for (int64_t i = 0; i < M; ++i) {
      double* c = C + i * ldc;
      if (beta == 0.0) std::fill(c, c + N, 0.0);
      else for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
    return;
  }
  single_threaded_openblas();
  scipy_cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), 1.0, A,
                    static_cast<blasint>(std::max<int64_t>(lda, 1)), B, static_cast<blasint>(std::max<int64_t>(ldb, 1)),
                    beta, C, static_cast<blasint>(std::max<int64_t>(ldc, 1)));
}

void dgemm_share(int part, int parts, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A,
                 int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (parts <= 1) {
    dgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t blocks = (extent + kLineDoubles - 1) / kLineDoubles;
  const int64_t b0 = blocks * part / parts, b1 = blocks * (part + 1) / parts;
  const int64_t lo = std::min(extent, b0 * kLineDoubles), hi = std::min(extent, b1 * kLineDoubles);
  if (lo >= hi) return;
  if (by_rows) {  // rows [lo, hi) of C: rows of op(A)
    const double* a = ta ? A + lo : A + lo * lda;
    dgemm(ta, tb, hi - lo, N, K, a, lda, B, ldb, beta, C + lo * ldc, ldc);
  } else {  // columns [lo, hi) of C: columns of op(B)
    const double* b = tb ? B + lo * ldb : B + lo;
    dgemm(ta, tb, M, hi - lo, K, A, lda, b, ldb, beta, C + lo, ldc);
  }
}

}  // namespace pdng
