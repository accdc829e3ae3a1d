// float64 GEMM for the kernels (MatMul, convolution), on OpenBLAS (scipy-openblas32 from PyPI):
// oneDNN, which runs the float32 products, has no float64 on CPU.
//
// OpenBLAS runs single-threaded here: its own pthread pool next to the OpenMP team of the rest of
// the backend would oversubscribe the cores (OpenMP workers spin after each region). Kernels split
// their products over the OpenMP team themselves (dgemm_share) and call OpenBLAS per share.
#pragma once

#include <cstdint>

namespace pdng {

// Whether every dimension and leading dimension fits OpenBLAS's 32-bit integers.
bool blas_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

// C[M, N] = op(A) @ op(B) + beta * C, row-major; op(A) is A or, with ta, A stored transposed
// ([K, M], lda >= M); likewise B ([K, N] or [N, K]). On the calling thread only. K == 0 gives
// beta * C.
void dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
           int64_t ldb, double beta, double* C, int64_t ldc);

// Share `part` of `parts` of the same product: a contiguous block of rows or columns of C (the
// longer of M, N, in blocks of whole cache lines). Every member of a team calling it with its
// thread index computes the whole product between them, each writing only its block.
void dgemm_share(int part, int parts, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A,
                 int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

}  // namespace pdng
