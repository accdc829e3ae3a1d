#include "pdng/half_codec.h"

#include <immintrin.h>

#include "pdng/half_encoding.h"

namespace pdng {
namespace {

// The scalar definitions; the AVX2 clones are the same loops compiled for AVX2 (auto-vectorized).
template <HalfFormat F>
inline uint16_t encode_one(float v) { return F == HalfFormat::BF16 ? encode_bf16(v) : encode_fp16(v); }
template <HalfFormat F>
inline float decode_one(uint16_t h) { return F == HalfFormat::BF16 ? decode_bf16(h) : decode_fp16(h); }

template <HalfFormat F>
void encode_scalar(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = encode_one<F>(x[i]);
}
template <HalfFormat F>
void decode_scalar(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = decode_one<F>(x[i]);
}
template <HalfFormat F>
void accumulate_scalar(const uint16_t* x, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += decode_one<F>(x[i]);
}

__attribute__((target("avx2"))) void encode_bf16_avx2(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = encode_bf16(x[i]);
}
__attribute__((target("avx2"))) void decode_bf16_avx2(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = decode_bf16(x[i]);
}
__attribute__((target("avx2"))) void accumulate_bf16_avx2(const uint16_t* x, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += decode_bf16(x[i]);
}

// vcvtps2ph rounds to nearest even and overflows to inf like the reference; only NaN payloads
// differ (the hardware keeps them), so lanes holding a NaN are set to the canonical 0x7E00.
__attribute__((target("avx,f16c"))) void encode_fp16_f16c(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
      for (int k = 0; k < 8; ++k) y[i + k] = encode_fp16(x[i + k]);
  }
  encode_scalar<HalfFormat::FP16>(x + i, y + i, n - i);
}
__attribute__((target("avx,f16c"))) void decode_fp16_f16c(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  decode_scalar<HalfFormat::FP16>(x + i, y + i, n - i);
}
__attribute__((target("avx,f16c"))) void accumulate_fp16_f16c(const uint16_t* x, float* acc, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 h = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), h));
  }
  accumulate_scalar<HalfFormat::FP16>(x + i, acc + i, n - i);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

}  // namespace

void encode_half(const float* x, uint16_t* y, int64_t n, HalfFormat format) {
  if (format == HalfFormat::BF16) has_avx2() ? encode_bf16_avx2(x, y, n) : encode_scalar<HalfFormat::BF16>(x, y, n);
  else has_f16c() ? encode_fp16_f16c(x, y, n) : encode_scalar<HalfFormat::FP16>(x, y, n);
}

void decode_half(const uint16_t* x, float* y, int64_t n, HalfFormat format) {
  if (format == HalfFormat::BF16) has_avx2() ? decode_bf16_avx2(x, y, n) : decode_scalar<HalfFormat::BF16>(x, y, n);
  else has_f16c() ? decode_fp16_f16c(x, y, n) : decode_scalar<HalfFormat::FP16>(x, y, n);
}

void accumulate_half(const uint16_t* x, float* acc, int64_t n, HalfFormat format) {
  if (format == HalfFormat::BF16)
    has_avx2() ? accumulate_bf16_avx2(x, acc, n) : accumulate_scalar<HalfFormat::BF16>(x, acc, n);
  else has_f16c() ? accumulate_fp16_f16c(x, acc, n) : accumulate_scalar<HalfFormat::FP16>(x, acc, n);
}

}  // namespace pdng
