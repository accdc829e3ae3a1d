// 16-bit encodings of float32 for the compressed AllReduce, bit for bit those of the reference
// (paddle_ngraph/distributed/compress.py): bf16 rounds to nearest even like Paddle's bfloat16;
// fp16 is IEEE half rounded to nearest even (the algorithm of NumPy's npy_floatbits_to_halfbits,
// overflow to inf). A NaN becomes one canonical NaN in both, so that the bits do not depend on
// which conversion produced them. Decoding is exact.
#pragma once

#include <cstdint>
#include <cstring>

namespace pdng {

inline uint32_t float_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

inline float bits_float(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

inline uint16_t encode_bf16(float value) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float decode_bf16(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

inline uint16_t encode_fp16(float value) {
  const uint32_t f = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t exp = f & 0x7F800000u;
  if (exp >= 0x47800000u) {  // |value| >= 65536, inf or NaN
    if (exp == 0x7F800000u && (f & 0x007FFFFFu)) return 0x7E00;
    return sign | 0x7C00;
  }
  if (exp <= 0x38000000u) {  // a half subnormal, or zero after rounding
    if (exp < 0x33000000u) return sign;
    uint32_t sig = 0x00800000u + (f & 0x007FFFFFu);
    sig >>= (113 - (exp >> 23));
    // Round to nearest even; bits already shifted out (at most 11) make it not a tie.
    if ((sig & 0x00003FFFu) != 0x00001000u || (f & 0x000007FFu)) sig += 0x00001000u;
    return static_cast<uint16_t>(sign + (sig >> 13));
  }
  const uint16_t half_exp = static_cast<uint16_t>((exp - 0x38000000u) >> 13);
  uint32_t sig = f & 0x007FFFFFu;
  if ((sig & 0x00003FFFu) != 0x00001000u) sig += 0x00001000u;
  // A carry out of the significand increments the exponent, up to inf: the correct rounding.
  return static_cast<uint16_t>(sign + static_cast<uint16_t>((sig >> 13) + half_exp));
}

inline float decode_fp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    exp = 113;  // normalize the subnormal: man * 2^-24
    while (!(man & 0x400u)) {
      man <<= 1;
      --exp;
    }
    return bits_float(sign | (exp << 23) | ((man & 0x3FFu) << 13));
  }
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

}  // namespace pdng
