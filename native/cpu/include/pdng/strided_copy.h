// The strided-copy engine of the data-movement kernels (shape.cc, indexing.cc), and the dispatches
// they share.
//
// A copy's plan is made once, in a kernel's constructor: the layout is simplified, rows of
// contiguous elements become memcpy calls, anything else (transposes) is copied in cache-sized
// tiles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace pdng {

inline bool is_index_dtype(DType d) { return d == DType::Int32 || d == DType::Int64; }

// Dispatch on an index dtype (int32 or int64).
#define PDNG_DISPATCH_INDEX(dtype, I, ...)                                                       \
  switch (dtype) {                                                                              \
    PDNG_DISPATCH_CASE(Int32, int32_t, I, __VA_ARGS__)                                          \
    PDNG_DISPATCH_CASE(Int64, int64_t, I, __VA_ARGS__)                                          \
    default:                                                                                    \
      throw ::pdng::Error(std::string("unsupported index dtype ") + ::pdng::dtype_name(dtype) + \
                          " (int32 or int64 expected)");                                        \
  }

// Calls f(T{}) with an unsigned integer type of the element size (for moves of any dtype).
template <class F>
void by_element_size(size_t size, F&& f) {
  switch (size) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: throw Error("unsupported element size " + std::to_string(size));
  }
}

// A mixed-radix counter over some dims, tracking one or two linear offsets.
struct Odometer {
  int rank = 0;
  int64_t n[kMaxRank], s1[kMaxRank], s2[kMaxRank], i[kMaxRank];
  int64_t off1 = 0, off2 = 0;

  Odometer(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides1,
           const std::vector<int64_t>& strides2) {
    rank = static_cast<int>(dims.size());
    for (int k = 0; k < rank; ++k) {
      n[k] = dims[k];
      s1[k] = strides1[k];
      s2[k] = strides2.empty() ? 0 : strides2[k];
    }
  }
  void seek(int64_t linear) {
    off1 = off2 = 0;
    for (int k = rank - 1; k >= 0; --k) {
      i[k] = linear % n[k];
      linear /= n[k];
      off1 += i[k] * s1[k];
      off2 += i[k] * s2[k];
    }
  }
  void next() {
    for (int k = rank - 1; k >= 0; --k) {
      ++i[k];
      off1 += s1[k];
      off2 += s2[k];
      if (i[k] < n[k]) return;
      off1 -= s1[k] * n[k];
      off2 -= s2[k] * n[k];
      i[k] = 0;
    }
  }
};

// Copies a strided view into another strided view, with the plan made once.
// dims/src_strides/dst_strides in elements, bases in elements.
class StridedCopy {
 public:
  void prepare(size_t elem_size, const Shape& dims, const std::vector<int64_t>& src_strides,
               const std::vector<int64_t>& dst_strides, int64_t src_base = 0, int64_t dst_base = 0) {
    es_ = elem_size;
    src_base_ = src_base;
    dst_base_ = dst_base;
    total_ = shape_numel(dims);
    if (total_ == 0) return;
    // Drop unit dims, then merge neighbours that are contiguous in both views.
    std::vector<int64_t> n, s, d;
    for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
      if (dims[k] == 1) continue;
      if (!n.empty() && src_strides[k] == s.back() * n.back() && dst_strides[k] == d.back() * n.back()) {
        n.back() *= dims[k];
      } else {
        n.push_back(dims[k]);
        s.push_back(src_strides[k]);
        d.push_back(dst_strides[k]);
      }
    }
    std::reverse(n.begin(), n.end());
    std::reverse(s.begin(), s.end());
    std::reverse(d.begin(), d.end());
    if (n.empty()) n = {1}, s = {1}, d = {1};
    const int r = static_cast<int>(n.size());
    if (r + 2 > kMaxRank) throw Error("rank " + std::to_string(r) + " too large for a strided copy");
    on_.clear(), os_.clear(), od_.clear();
    if (s[r - 1] == 1 && d[r - 1] == 1) {
      rows_ = true;
      C_ = n[r - 1];
      piece_ = std::max<int64_t>(1, (int64_t(1) << 16) / static_cast<int64_t>(es_));
      pieces_ = (C_ + piece_ - 1) / piece_;
      on_.assign(n.begin(), n.end() - 1);
      os_.assign(s.begin(), s.end() - 1);
      od_.assign(d.begin(), d.end() - 1);
    } else {
      rows_ = false;
      if (r == 1) n.insert(n.begin(), 1), s.insert(s.begin(), 0), d.insert(d.begin(), 0);
      const int rr = static_cast<int>(n.size());
      // Tile over the dim densest in the destination (columns) and the one densest in the source (rows).
      int c = 0;
      for (int k = 1; k < rr; ++k)
        if (std::llabs(d[k]) < std::llabs(d[c])) c = k;
      int row = c == 0 ? 1 : 0;
      for (int k = 0; k < rr; ++k)
        if (k != c && std::llabs(s[k]) < std::llabs(s[row])) row = k;
      R_ = n[row], C_ = n[c], sR_ = s[row], sC_ = s[c], dR_ = d[row], dC_ = d[c];
      for (int k = 0; k < rr; ++k)
        if (k != row && k != c) on_.push_back(n[k]), os_.push_back(s[k]), od_.push_back(d[k]);
      tR_ = (R_ + kTile - 1) / kTile;
      tC_ = (C_ + kTile - 1) / kTile;
    }
    outer_ = 1;
    for (int64_t v : on_) outer_ *= v;
  }

  void run(const void* src, void* dst) const {
    if (total_ == 0) return;
    const char* sp = static_cast<const char*>(src) + src_base_ * static_cast<int64_t>(es_);
    char* dp = static_cast<char*>(dst) + dst_base_ * static_cast<int64_t>(es_);
    if (rows_) {
      run_rows(sp, dp);
    } else {
      by_element_size(es_, [&](auto tag) {
        using E = decltype(tag);
        run_tiles(reinterpret_cast<const E*>(sp), reinterpret_cast<E*>(dp));
      });
    }
  }

 private:
  static constexpr int64_t kTile = 16;  // elements per tile side (4x4 register blocks inside)

  void run_rows(const char* src, char* dst) const {
    const int64_t es = static_cast<int64_t>(es_);
    parallel_ranges(outer_ * pieces_, total_, [&](int64_t b, int64_t e, int) {
      Odometer odo(on_, os_, od_);
      int64_t p = b % pieces_;
      odo.seek(b / pieces_);
      for (int64_t it = b; it < e; ++it) {
        const int64_t start = p * piece_, len = std::min(piece_, C_ - start);
        std::memcpy(dst + (odo.off2 + start) * es, src + (odo.off1 + start) * es, static_cast<size_t>(len * es));
        if (++p == pieces_) p = 0, odo.next();
      }
    });
  }

  // One tile: rows [i0, i1) x columns [j0, j1).
  template <class E>
  static void tile(const E* s, E* d, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t sR, int64_t sC,
                   int64_t dR, int64_t dC) {
    for (int64_t i = i0; i < i1; ++i) {
      const E* si = s + i * sR;
      E* di = d + i * dR;
      if (dC == 1) {
        for (int64_t j = j0; j < j1; ++j) di[j] = si[j * sC];
      } else {
        for (int64_t j = j0; j < j1; ++j) di[j * dC] = si[j * sC];
      }
    }
  }

#ifdef __SSE2__
  // A plain transpose tile of 4-byte elements (rows contiguous in the source, columns in the
  // destination) in 4x4 register blocks; the edges go through the scalar loop.
  static void tile(const uint32_t* s, uint32_t* d, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t sR,
                   int64_t sC, int64_t dR, int64_t dC) {
    if (sR != 1 || dC != 1) return tile<uint32_t>(s, d, i0, i1, j0, j1, sR, sC, dR, dC);
    const int64_t i4 = i0 + (i1 - i0) / 4 * 4, j4 = j0 + (j1 - j0) / 4 * 4;
    for (int64_t i = i0; i < i4; i += 4) {
      for (int64_t j = j0; j < j4; j += 4) {
        __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(s + (j + 0) * sC + i));
        __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(s + (j + 1) * sC + i));
        __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(s + (j + 2) * sC + i));
        __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(s + (j + 3) * sC + i));
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);  // shuffles only: the bits move unchanged
        _mm_storeu_ps(reinterpret_cast<float*>(d + (i + 0) * dR + j), r0);
        _mm_storeu_ps(reinterpret_cast<float*>(d + (i + 1) * dR + j), r1);
        _mm_storeu_ps(reinterpret_cast<float*>(d + (i + 2) * dR + j), r2);
        _mm_storeu_ps(reinterpret_cast<float*>(d + (i + 3) * dR + j), r3);
      }
    }
    tile<uint32_t>(s, d, i0, i4, j4, j1, sR, sC, dR, dC);
    tile<uint32_t>(s, d, i4, i1, j0, j1, sR, sC, dR, dC);
  }

  // The same for 8-byte elements, in 2x2 register blocks.
  static void tile(const uint64_t* s, uint64_t* d, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t sR,
                   int64_t sC, int64_t dR, int64_t dC) {
    if (sR != 1 || dC != 1) return tile<uint64_t>(s, d, i0, i1, j0, j1, sR, sC, dR, dC);
    const int64_t i2 = i0 + (i1 - i0) / 2 * 2, j2 = j0 + (j1 - j0) / 2 * 2;
    for (int64_t i = i0; i < i2; i += 2) {
      for (int64_t j = j0; j < j2; j += 2) {
        const __m128d a = _mm_loadu_pd(reinterpret_cast<const double*>(s + j * sC + i));
        const __m128d b = _mm_loadu_pd(reinterpret_cast<const double*>(s + (j + 1) * sC + i));
        _mm_storeu_pd(reinterpret_cast<double*>(d + i * dR + j), _mm_unpacklo_pd(a, b));
        _mm_storeu_pd(reinterpret_cast<double*>(d + (i + 1) * dR + j), _mm_unpackhi_pd(a, b));
      }
    }
    tile<uint64_t>(s, d, i0, i2, j2, j1, sR, sC, dR, dC);
    tile<uint64_t>(s, d, i2, i1, j0, j1, sR, sC, dR, dC);
  }
#endif

  template <class E>
  void run_tiles(const E* src, E* dst) const {
    const int64_t tiles = tR_ * tC_;
    parallel_ranges(outer_ * tiles, total_, [&](int64_t b, int64_t e, int) {
      Odometer odo(on_, os_, od_);
      for (int64_t it = b; it < e; ++it) {
        odo.seek(it / tiles);
        const int64_t t = it % tiles;
        const int64_t i0 = (t / tC_) * kTile, i1 = std::min(R_, i0 + kTile);
        const int64_t j0 = (t % tC_) * kTile, j1 = std::min(C_, j0 + kTile);
        tile(src + odo.off1, dst + odo.off2, i0, i1, j0, j1, sR_, sC_, dR_, dC_);
      }
    });
  }

  size_t es_ = 1;
  int64_t src_base_ = 0, dst_base_ = 0, total_ = 0, outer_ = 1;
  std::vector<int64_t> on_, os_, od_;
  bool rows_ = true;
  int64_t C_ = 0, piece_ = 1, pieces_ = 1;
  int64_t R_ = 0, sR_ = 0, sC_ = 0, dR_ = 0, dC_ = 0, tR_ = 0, tC_ = 0;
};

// A contiguous copy of n elements of es bytes (parallel for large buffers).
inline void parallel_copy(void* dst, const void* src, int64_t n, size_t es) {
  StridedCopy c;
  c.prepare(es, Shape{n}, {1}, {1});
  c.run(src, dst);
}

}  // namespace pdng
