// Bulk 16-bit encoding for the compressed AllReduce: the bits of the scalar functions of
// half_encoding.h (and so of the NumPy reference), vectorized where the CPU allows (AVX2 for bf16,
// F16C for fp16; checked at run time, the scalar loops otherwise).
#pragma once

#include <cstdint>

namespace pdng {

enum class HalfFormat { BF16, FP16 };

void encode_half(const float* x, uint16_t* y, int64_t n, HalfFormat format);
void decode_half(const uint16_t* x, float* y, int64_t n, HalfFormat format);
// acc[i] += decode(x[i]) in float32: one rank's term of the ordered sum.
void accumulate_half(const uint16_t* x, float* acc, int64_t n, HalfFormat format);

}  // namespace pdng
