// Kernels of the data-movement and indexing ops: Reshape, Transpose, Concat, Slice, ReplaceSlice,
// Stack, Gather, ScatterAdd, ScatterElementsAdd, TopK, Accuracy, EmbeddingLookup,
// EmbeddingLookupBackprop and DropoutMask.
//
// The NumPy interpreter (backends/interpreter/kernels) is the specification; each kernel says
// where it follows it. Every copy goes through one strided-copy engine (StridedCopy) that
// simplifies the layout once, in the constructor: rows of contiguous elements become memcpy
// calls, anything else (transposes) is copied in cache-sized tiles.
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

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace pdng {
namespace {

void check_shape(const TensorDesc& got, const Shape& expected, const std::string& what) {
  if (got.shape != expected)
    throw Error(what + " is " + got.str() + ", expected shape [" + shape_str(expected) + "]");
}

bool is_index_dtype(DType d) { return d == DType::Int32 || d == DType::Int64; }

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
void parallel_copy(void* dst, const void* src, int64_t n, size_t es) {
  StridedCopy c;
  c.prepare(es, Shape{n}, {1}, {1});
  c.run(src, dst);
}

// --- Reshape ------------------------------------------------------------------------------------
class ReshapeKernel : public Kernel {
 public:
  explicit ReshapeKernel(const NodeInfo& node) {
    const TensorDesc &x = node.inputs.at(0), &y = node.outputs.at(0);
    PDNG_CHECK(x.numel() == y.numel(), "cannot reshape " + x.str() + " to " + y.str());
    PDNG_CHECK(x.dtype == y.dtype, "input " + x.str() + " and output " + y.str() + " dtypes differ");
    copy_.prepare(dtype_size(x.dtype), Shape{x.numel()}, {1}, {1});
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { copy_.run(in[0].data, out[0].data); }

 private:
  StridedCopy copy_;
};

// --- Transpose ----------------------------------------------------------------------------------
class TransposeKernel : public Kernel {
 public:
  explicit TransposeKernel(const NodeInfo& node) {
    const TensorDesc &x = node.inputs.at(0), &y = node.outputs.at(0);
    const auto& perm = node.attrs.get_ints("perm");
    const int r = x.rank();
    PDNG_CHECK(static_cast<int>(perm.size()) == r, "perm has " + std::to_string(perm.size()) +
                                                       " entries for input " + x.str());
    std::vector<bool> seen(r, false);
    Shape dims(r);
    std::vector<int64_t> src_strides(r);
    const auto xs = row_major_strides(x.shape);
    for (int i = 0; i < r; ++i) {
      const int64_t p = normalize_axis(perm[i], r, "perm entry");
      PDNG_CHECK(!seen[p], "perm is not a permutation of rank " + std::to_string(r));
      seen[p] = true;
      dims[i] = x.shape[p];
      src_strides[i] = xs[p];
    }
    check_shape(y, dims, "output");
    copy_.prepare(dtype_size(x.dtype), dims, src_strides, row_major_strides(dims));
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { copy_.run(in[0].data, out[0].data); }

 private:
  StridedCopy copy_;
};

// --- Concat and Stack: each input is a block of rows of the output -----------------------------
class JoinKernel : public Kernel {
 public:
  // stack: a new axis `axis` of the output; otherwise join along the existing `axis`.
  JoinKernel(const NodeInfo& node, bool stack) {
    PDNG_CHECK(!node.inputs.empty(), "needs at least one input");
    const TensorDesc& first = node.inputs[0];
    const TensorDesc& y = node.outputs.at(0);
    const int r = first.rank();
    const int64_t axis = normalize_axis(node.attrs.get_int("axis", 0), stack ? r + 1 : r);
    const int64_t outer = prod(first.shape, 0, axis);
    int64_t total = 0;
    std::vector<int64_t> chunks;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const TensorDesc& t = node.inputs[i];
      PDNG_CHECK(t.dtype == first.dtype && t.rank() == r,
                 "input " + std::to_string(i) + " is " + t.str() + ", input 0 is " + first.str());
      for (int d = 0; d < r; ++d)
        PDNG_CHECK(t.shape[d] == first.shape[d] || (!stack && d == axis),
                   "input " + std::to_string(i) + " is " + t.str() + ", input 0 is " + first.str());
      chunks.push_back(prod(t.shape, axis, r));
      total += chunks.back();
    }
    Shape expected = first.shape;
    if (stack) {
      expected.insert(expected.begin() + axis, static_cast<int64_t>(node.inputs.size()));
    } else {
      int64_t along = 0;
      for (const auto& t : node.inputs) along += t.shape[axis];
      expected[axis] = along;
    }
    check_shape(y, expected, "output");
    copies_.resize(node.inputs.size());
    int64_t offset = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      copies_[i].prepare(dtype_size(first.dtype), Shape{outer, chunks[i]}, {chunks[i], 1}, {total, 1}, 0, offset);
      if (outer == 1) block_bytes_.push_back(offset * dtype_size(first.dtype));
      offset += chunks[i];
    }
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    auto* base = static_cast<char*>(out[0].data);
    for (size_t i = 0; i < copies_.size(); ++i) {
      // The memory plan may have had the producer write this input at its place in the output
      // (liveness: a bucket's gradients as views of the flattened bucket): nothing to copy.
      if (!block_bytes_.empty() && in[i].data == base + block_bytes_[i]) continue;
      copies_[i].run(in[i].data, out[0].data);
    }
  }

 private:
  std::vector<StridedCopy> copies_;
  std::vector<int64_t> block_bytes_;  // where each input starts in the output, when it is one block
};

// --- Slice and ReplaceSlice -----------------------------------------------------------------------
// Python's slice(start, end).indices(n) with step 1: (start, length).
std::pair<int64_t, int64_t> python_slice(int64_t start, int64_t end, int64_t n) {
  auto clamp = [n](int64_t v) {
    if (v < 0) {
      v += n;
      if (v < 0) v = 0;
    } else if (v > n) {
      v = n;
    }
    return v;
  };
  start = clamp(start);
  end = clamp(end);
  return {start, std::max<int64_t>(0, end - start)};
}

// The sliced region of `x`: its shape and its element offset. As the interpreter, a later entry
// for the same axis replaces an earlier one.
void slice_region(const NodeInfo& node, const TensorDesc& x, Shape& dims, int64_t& base) {
  const auto& axes = node.attrs.get_ints("axes");
  const auto& starts = node.attrs.get_ints("starts");
  const auto& ends = node.attrs.get_ints("ends");
  const int r = x.rank();
  std::vector<int64_t> start(r, 0);
  dims = x.shape;
  const size_t n = std::min({axes.size(), starts.size(), ends.size()});
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = normalize_axis(axes[i], r);
    const auto se = python_slice(starts[i], ends[i], x.shape[a]);
    start[a] = se.first;
    dims[a] = se.second;
  }
  const auto strides = row_major_strides(x.shape);
  base = 0;
  for (int a = 0; a < r; ++a) base += start[a] * strides[a];
}

class SliceKernel : public Kernel {
 public:
  explicit SliceKernel(const NodeInfo& node) {
    const TensorDesc &x = node.inputs.at(0), &y = node.outputs.at(0);
    Shape dims;
    int64_t base;
    slice_region(node, x, dims, base);
    check_shape(y, dims, "output");
    copy_.prepare(dtype_size(x.dtype), dims, row_major_strides(x.shape), row_major_strides(dims), base, 0);
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { copy_.run(in[0].data, out[0].data); }

 private:
  StridedCopy copy_;
};

class ReplaceSliceKernel : public Kernel {
 public:
  explicit ReplaceSliceKernel(const NodeInfo& node) {
    const TensorDesc &x = node.inputs.at(0), &u = node.inputs.at(1), &y = node.outputs.at(0);
    PDNG_CHECK(u.dtype == x.dtype, "update " + u.str() + " and data " + x.str() + " dtypes differ");
    check_shape(y, x.shape, "output");
    Shape dims;
    int64_t base;
    slice_region(node, x, dims, base);
    check_shape(u, dims, "update");
    whole_.prepare(dtype_size(x.dtype), Shape{x.numel()}, {1}, {1});
    update_.prepare(dtype_size(x.dtype), dims, row_major_strides(dims), row_major_strides(x.shape), 0, base);
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    whole_.run(in[0].data, out[0].data);
    update_.run(in[1].data, out[0].data);
  }

 private:
  StridedCopy whole_, update_;
};

// --- Gather and ScatterAdd ------------------------------------------------------------------------
// The interpreter's _check_bounds: NumPy would wrap negative indices; Paddle rejects them.
template <class I>
void check_bounds(const I* index, int64_t n, int64_t size) {
  if (n == 0) return;
  I lo = index[0], hi = index[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, index[i]);
    hi = std::max(hi, index[i]);
  }
  if (lo < 0 || static_cast<int64_t>(hi) >= size) {
    std::ostringstream m;
    m << "index out of range [0, " << size << "): min " << static_cast<int64_t>(lo) << ", max "
      << static_cast<int64_t>(hi);
    throw Error(m.str());
  }
}

struct GatherGeometry {
  int64_t outer = 1, size = 0, count = 0, inner = 1;  // x viewed as [outer, size, inner]; count indices

  GatherGeometry(const NodeInfo& node, const TensorDesc& x, const TensorDesc& index) {
    PDNG_CHECK(is_index_dtype(index.dtype), "index must be int32 or int64, got " + index.str());
    PDNG_CHECK(index.rank() <= 1, "index must be 0-D or 1-D, got " + index.str());
    PDNG_CHECK(x.rank() >= 1, "needs an input of rank >= 1, got " + x.str());
    const int64_t axis = normalize_axis(node.attrs.get_int("axis", 0), x.rank());
    outer = prod(x.shape, 0, axis);
    size = x.shape[axis];
    inner = prod(x.shape, axis + 1, x.shape.size());
    count = index.numel();
    gathered = x.shape;
    if (index.rank() == 0)
      gathered.erase(gathered.begin() + axis);
    else
      gathered[axis] = count;
  }
  Shape gathered;
};

class GatherKernel : public Kernel {
 public:
  explicit GatherKernel(const NodeInfo& node)
      : g_(node, node.inputs.at(0), node.inputs.at(1)), es_(dtype_size(node.inputs[0].dtype)),
        index_dtype_(node.inputs[1].dtype) {
    check_shape(node.outputs.at(0), g_.gathered, "output");
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_INDEX(index_dtype_, I, {
      const I* index = in[1].as<I>();
      check_bounds(index, g_.count, g_.size);
      by_element_size(es_, [&](auto tag) {
        using E = decltype(tag);
        gather<E, I>(in[0].as<E>(), index, out[0].as<E>());
      });
    });
  }

 private:
  template <class E, class I>
  void gather(const E* x, const I* index, E* y) const {
    const int64_t K = g_.count, D = g_.size, inner = g_.inner;
    parallel_ranges(g_.outer * K, g_.outer * K * inner, [&](int64_t b, int64_t e, int) {
      int64_t o = b / K, k = b % K;
      if (inner == 1) {
        for (int64_t it = b; it < e; ++it) {
          y[it] = x[o * D + static_cast<int64_t>(index[k])];
          if (++k == K) k = 0, ++o;
        }
        return;
      }
      for (int64_t it = b; it < e; ++it) {
        std::memcpy(y + it * inner, x + (o * D + static_cast<int64_t>(index[k])) * inner,
                    static_cast<size_t>(inner) * sizeof(E));
        if (++k == K) k = 0, ++o;
      }
    });
  }

  GatherGeometry g_;
  size_t es_;
  DType index_dtype_;
};

class ScatterAddKernel : public Kernel {
 public:
  explicit ScatterAddKernel(const NodeInfo& node)
      : g_(node, node.inputs.at(0), node.inputs.at(1)), dtype_(node.inputs[0].dtype),
        index_dtype_(node.inputs[1].dtype) {
    const TensorDesc &data = node.inputs[0], &updates = node.inputs.at(2);
    PDNG_CHECK(updates.dtype == data.dtype, "updates " + updates.str() + " and data " + data.str() + " dtypes differ");
    check_shape(updates, g_.gathered, "updates");
    check_shape(node.outputs.at(0), data.shape, "output");
    copy_.prepare(dtype_size(data.dtype), Shape{data.numel()}, {1}, {1});
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_INDEX(index_dtype_, I, {
      const I* index = in[1].as<I>();
      check_bounds(index, g_.count, g_.size);
      copy_.run(in[0].data, out[0].data);
      PDNG_DISPATCH_NUMERIC(dtype_, T, { scatter<T, I>(index, in[2].as<T>(), out[0].as<T>()); });
    });
  }

 private:
  // np.add.at order: repeated indices accumulate in index order. Work is split over (outer,
  // column block), so every element sees its updates in that order whatever the threads.
  template <class T, class I>
  void scatter(const I* index, const T* upd, T* y) const {
    const int64_t K = g_.count, D = g_.size, inner = g_.inner;
    constexpr int64_t kBlock = 1024;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    parallel_ranges(g_.outer * blocks, g_.outer * K * inner, [&](int64_t b, int64_t e, int) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / blocks, j0 = (it % blocks) * kBlock, j1 = std::min(inner, j0 + kBlock);
        for (int64_t k = 0; k < K; ++k) {
          T* dst = y + (o * D + static_cast<int64_t>(index[k])) * inner;
          const T* src = upd + (o * K + k) * inner;
          for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
        }
      }
    });
  }

  GatherGeometry g_;
  DType dtype_, index_dtype_;
  StridedCopy copy_;
};

// --- ScatterElementsAdd ---------------------------------------------------------------------------
class ScatterElementsAddKernel : public Kernel {
 public:
  explicit ScatterElementsAddKernel(const NodeInfo& node) {
    const TensorDesc &data = node.inputs.at(0), &indices = node.inputs.at(1), &updates = node.inputs.at(2);
    dtype_ = data.dtype;
    index_dtype_ = indices.dtype;
    PDNG_CHECK(is_index_dtype(indices.dtype), "indices must be int32 or int64, got " + indices.str());
    PDNG_CHECK(indices.rank() == data.rank(), "indices " + indices.str() + " must have the rank of data " + data.str());
    PDNG_CHECK(updates.dtype == data.dtype, "updates " + updates.str() + " and data " + data.str() + " dtypes differ");
    check_shape(updates, indices.shape, "updates");
    check_shape(node.outputs.at(0), data.shape, "output");
    const int r = data.rank();
    const int64_t axis = normalize_axis(node.attrs.get_int("axis", -1), r);
    for (int d = 0; d < r; ++d)
      PDNG_CHECK(d == axis || indices.shape[d] <= data.shape[d],
                 "indices " + indices.str() + " exceed data " + data.str() + " on dim " + std::to_string(d));
    const auto ds = row_major_strides(data.shape);
    size_ = data.shape[axis];
    axis_stride_ = ds[axis];
    along_ = indices.shape[axis];
    numel_ = indices.numel();
    // Data offsets of the positions of the indices before and after the axis.
    outer_off_ = offsets(indices.shape, ds, 0, axis);
    inner_off_ = offsets(indices.shape, ds, axis + 1, r);
    copy_.prepare(dtype_size(data.dtype), Shape{data.numel()}, {1}, {1});
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_INDEX(index_dtype_, I, {
      const I* index = in[1].as<I>();
      check_bounds(index, numel_, size_);
      copy_.run(in[0].data, out[0].data);
      PDNG_DISPATCH_NUMERIC(dtype_, T, { scatter<T, I>(index, in[2].as<T>(), out[0].as<T>()); });
    });
  }

 private:
  static std::vector<int64_t> offsets(const Shape& shape, const std::vector<int64_t>& strides, int begin, int end) {
    std::vector<int64_t> off{0};
    for (int d = begin; d < end; ++d) {
      std::vector<int64_t> next;
      next.reserve(off.size() * shape[d]);
      for (int64_t o : off)
        for (int64_t i = 0; i < shape[d]; ++i) next.push_back(o + i * strides[d]);
      off.swap(next);
    }
    return off;
  }

  // Two updates meet only if they differ in their axis position alone; each work item walks the
  // axis in order (np.add.at's order) for a block of inner positions.
  template <class T, class I>
  void scatter(const I* index, const T* upd, T* y) const {
    const int64_t inner = static_cast<int64_t>(inner_off_.size()), A = along_;
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const int64_t outer = static_cast<int64_t>(outer_off_.size());
    parallel_ranges(outer * blocks, numel_, [&](int64_t b, int64_t e, int) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / blocks, j0 = (it % blocks) * kBlock, j1 = std::min(inner, j0 + kBlock);
        T* base = y + outer_off_[o];
        for (int64_t a = 0; a < A; ++a) {
          const int64_t row = (o * A + a) * inner;
          for (int64_t j = j0; j < j1; ++j)
            base[inner_off_[j] + static_cast<int64_t>(index[row + j]) * axis_stride_] += upd[row + j];
        }
      }
    });
  }

  DType dtype_, index_dtype_;
  int64_t size_ = 0, axis_stride_ = 1, along_ = 0, numel_ = 0;
  std::vector<int64_t> outer_off_, inner_off_;
  StridedCopy copy_;
};

// --- TopK -----------------------------------------------------------------------------------------
// The interpreter: a stable argsort of x (largest: of -x) along the axis, first k. So equal
// values keep the lower index first, and NaN sorts last either way.
template <class T>
class TopKKernel : public Kernel {
 public:
  explicit TopKKernel(const NodeInfo& node) {
    const TensorDesc& x = node.inputs.at(0);
    PDNG_CHECK(x.rank() >= 1, "needs an input of rank >= 1, got " + x.str());
    const int64_t axis = normalize_axis(node.attrs.get_int("axis", -1), x.rank());
    k_ = node.attrs.get_int("k", 1);
    largest_ = node.attrs.get_bool("largest", true);
    n_ = x.shape[axis];
    PDNG_CHECK(k_ >= 1 && k_ <= n_, "k=" + std::to_string(k_) + " out of range [1, " + std::to_string(n_) +
                                        "] for dim " + std::to_string(axis) + " of " + x.str());
    outer_ = prod(x.shape, 0, axis);
    inner_ = prod(x.shape, axis + 1, x.shape.size());
    Shape shape = x.shape;
    shape[axis] = k_;
    PDNG_CHECK(node.outputs.size() == 2, "needs two outputs");
    check_shape(node.outputs[0], shape, "values");
    check_shape(node.outputs[1], shape, "indices");
    PDNG_CHECK(node.outputs[0].dtype == x.dtype && node.outputs[1].dtype == DType::Int64,
               "outputs must be " + std::string(dtype_name(x.dtype)) + " values and int64 indices");
    slots_ = std::max(1, num_threads());
    values_.resize(static_cast<size_t>(slots_ * n_));
    order_.resize(static_cast<size_t>(slots_ * n_));
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    T* values = out[0].as<T>();
    int64_t* indices = out[1].as<int64_t>();
    const int64_t n = n_, k = k_, inner = inner_;
    const bool largest = largest_;
    parallel_ranges(
        outer_ * inner, outer_ * inner * n,
        [&](int64_t b, int64_t e, int t) {
          T* v = values_.data() + t * n;
          int64_t* order = order_.data() + t * n;
          // Strict total order: non-NaN before NaN, then by value, then by index.
          auto before = [v, largest](int64_t a, int64_t c) {
            const T va = v[a], vc = v[c];
            const bool na = va != va, nc = vc != vc;
            if (na || nc) return na == nc ? a < c : nc;
            if (va != vc) return largest ? va > vc : va < vc;
            return a < c;
          };
          for (int64_t line = b; line < e; ++line) {
            const int64_t o = line / inner, i = line % inner;
            const T* src = x + o * n * inner + i;
            for (int64_t j = 0; j < n; ++j) v[j] = src[j * inner], order[j] = j;
            if (k == 1) {
              int64_t best = 0;
              for (int64_t j = 1; j < n; ++j)
                if (before(j, best)) best = j;
              order[0] = best;
            } else if (k == n) {
              std::sort(order, order + n, before);
            } else {
              std::partial_sort(order, order + k, order + n, before);
            }
            T* dv = values + o * k * inner + i;
            int64_t* di = indices + o * k * inner + i;
            for (int64_t j = 0; j < k; ++j) dv[j * inner] = v[order[j]], di[j * inner] = order[j];
          }
        },
        slots_);
  }

 private:
  int64_t k_ = 1, n_ = 0, outer_ = 1, inner_ = 1;
  bool largest_ = true;
  int slots_ = 1;
  std::vector<T> values_;
  std::vector<int64_t> order_;
};

std::unique_ptr<Kernel> make_topk(const NodeInfo& node) {
  std::unique_ptr<Kernel> kernel;
  PDNG_DISPATCH_NUMERIC(node.inputs.at(0).dtype, T, { kernel.reset(new TopKKernel<T>(node)); });
  return kernel;
}

// --- Accuracy -------------------------------------------------------------------------------------
class AccuracyKernel : public Kernel {
 public:
  explicit AccuracyKernel(const NodeInfo& node) {
    const TensorDesc &indices = node.inputs.at(0), &label = node.inputs.at(1);
    PDNG_CHECK(is_index_dtype(indices.dtype) && indices.rank() == 2, "indices must be integer [N, k], got " + indices.str());
    PDNG_CHECK(is_index_dtype(label.dtype) && (label.rank() == 1 || (label.rank() == 2 && label.shape[1] == 1)),
               "label must be integer [N, 1] or [N], got " + label.str());
    PDNG_CHECK(label.shape[0] == indices.shape[0], "label " + label.str() + " and indices " + indices.str() + " differ in N");
    PDNG_CHECK(node.outputs.size() == 3 && node.outputs[0].dtype == DType::Float32 &&
                   node.outputs[1].dtype == DType::Int32 && node.outputs[2].dtype == DType::Int32,
               "outputs must be float32, int32, int32 scalars");
    n_ = indices.shape[0];
    k_ = indices.shape[1];
    index_dtype_ = indices.dtype;
    label_dtype_ = label.dtype;
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_INDEX(index_dtype_, I, {
      PDNG_DISPATCH_INDEX(label_dtype_, L, { count<I, L>(in[0].as<I>(), in[1].as<L>(), out); });
    });
  }

 private:
  template <class I, class L>
  void count(const I* indices, const L* label, std::vector<Tensor>& out) const {
    int64_t lo = 0;
    for (int64_t r = 0; r < n_; ++r) lo = std::min<int64_t>(lo, label[r]);
    if (lo < 0) throw Error("labels must be >= 0, got " + std::to_string(lo));
    int64_t correct = 0;
    for (int64_t r = 0; r < n_; ++r) {
      const int64_t want = label[r];
      bool hit = false;
      for (int64_t j = 0; j < k_; ++j) hit |= static_cast<int64_t>(indices[r * k_ + j]) == want;
      correct += hit;
    }
    *out[0].as<float>() = n_ ? static_cast<float>(correct) / static_cast<float>(n_) : 0.0f;
    *out[1].as<int32_t>() = static_cast<int32_t>(correct);
    *out[2].as<int32_t>() = static_cast<int32_t>(n_);
  }

  int64_t n_ = 0, k_ = 0;
  DType index_dtype_, label_dtype_;
};

// --- EmbeddingLookup and its backprop ---------------------------------------------------------------
// The interpreter's _checked_ids: every id, padding_idx included, must be in [0, rows).
template <class I>
void check_ids(const I* ids, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || static_cast<int64_t>(ids[i]) >= rows)
      throw Error("id " + std::to_string(static_cast<int64_t>(ids[i])) + " out of range [0, " + std::to_string(rows) + ")");
}

void check_embedding(const TensorDesc& weight, const TensorDesc& ids) {
  const bool is_float = weight.dtype == DType::Float32 || weight.dtype == DType::Float64 ||
                        weight.dtype == DType::Float16 || weight.dtype == DType::BFloat16;
  PDNG_CHECK(weight.rank() == 2 && is_float, "weight " + weight.str() + " must be a 2-D floating-point table");
  PDNG_CHECK(is_index_dtype(ids.dtype), "ids must be int64 or int32, got " + ids.str());
}

class EmbeddingLookupKernel : public Kernel {
 public:
  explicit EmbeddingLookupKernel(const NodeInfo& node) {
    const TensorDesc &weight = node.inputs.at(0), &ids = node.inputs.at(1);
    check_embedding(weight, ids);
    Shape shape = ids.shape;
    shape.push_back(weight.shape[1]);
    check_shape(node.outputs.at(0), shape, "output");
    rows_ = weight.shape[0];
    row_bytes_ = static_cast<size_t>(weight.shape[1]) * dtype_size(weight.dtype);
    n_ = ids.numel();
    padding_ = node.attrs.get_int("padding_idx", -1);
    index_dtype_ = ids.dtype;
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_INDEX(index_dtype_, I, {
      const I* ids = in[1].as<I>();
      check_ids(ids, n_, rows_);
      const char* w = static_cast<const char*>(in[0].data);
      char* y = static_cast<char*>(out[0].data);
      const size_t rb = row_bytes_;
      const int64_t padding = padding_;
      parallel_ranges(n_, n_ * static_cast<int64_t>(rb / 4), [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
          const int64_t id = ids[i];
          if (id == padding)
            std::memset(y + i * rb, 0, rb);
          else
            std::memcpy(y + i * rb, w + id * rb, rb);
        }
      });
    });
  }

 private:
  int64_t rows_ = 0, n_ = 0, padding_ = -1;
  size_t row_bytes_ = 0;
  DType index_dtype_;
};

class EmbeddingLookupBackpropKernel : public Kernel {
 public:
  explicit EmbeddingLookupBackpropKernel(const NodeInfo& node) {
    const TensorDesc &weight = node.inputs.at(0), &ids = node.inputs.at(1), &delta = node.inputs.at(2);
    check_embedding(weight, ids);
    Shape shape = ids.shape;
    shape.push_back(weight.shape[1]);
    PDNG_CHECK(delta.dtype == weight.dtype, "delta " + delta.str() + " and weight " + weight.str() + " dtypes differ");
    check_shape(delta, shape, "delta");
    check_shape(node.outputs.at(0), weight.shape, "output");
    dtype_ = weight.dtype;
    rows_ = weight.shape[0];
    dim_ = weight.shape[1];
    n_ = ids.numel();
    padding_ = node.attrs.get_int("padding_idx", -1);
    index_dtype_ = ids.dtype;
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    PDNG_DISPATCH_INDEX(index_dtype_, I, {
      const I* ids = in[1].as<I>();
      check_ids(ids, n_, rows_);
      PDNG_DISPATCH_FLOAT(dtype_, T, { accumulate<T, I>(ids, in[2].as<T>(), out[0].as<T>()); });
    });
  }

 private:
  // np.add.at order: rows of repeated ids add up in id order. Thread t owns the table rows
  // with id % threads == t, so each row is summed in that order by one thread.
  template <class T, class I>
  void accumulate(const I* ids, const T* delta, T* grad) const {
    const int64_t D = dim_, n = n_, padding = padding_;
    parallel_ranges(rows_ * D, rows_ * D, [&](int64_t b, int64_t e, int) {
      std::fill(grad + b, grad + e, T(0));
    });
    auto add_rows = [&](int64_t owner, int64_t owners) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t id = ids[i];
        if (id == padding || id % owners != owner) continue;
        T* dst = grad + id * D;
        const T* src = delta + i * D;
        for (int64_t j = 0; j < D; ++j) dst[j] += src[j];
      }
    };
    const int64_t threads = n * D > kParallelMin ? std::min<int64_t>(num_threads(), rows_) : 1;
    if (threads <= 1) {
      add_rows(0, 1);
      return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(static_cast<int>(threads))
    add_rows(thread_index(), thread_count());
#else
    add_rows(0, 1);
#endif
  }

  DType dtype_, index_dtype_;
  int64_t rows_ = 0, dim_ = 0, n_ = 0, padding_ = -1;
};

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
    prob_ = node.attrs.get_float("prob", 0.5);
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

template <class K>
KernelFactory make() {
  return [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new K(node)); };
}

PDNG_REGISTER_KERNEL("Reshape", make<ReshapeKernel>());
PDNG_REGISTER_KERNEL("Transpose", make<TransposeKernel>());
PDNG_REGISTER_KERNEL("Concat", [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new JoinKernel(node, false)); });
PDNG_REGISTER_KERNEL("Stack", [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new JoinKernel(node, true)); });
PDNG_REGISTER_KERNEL("Slice", make<SliceKernel>());
PDNG_REGISTER_KERNEL("ReplaceSlice", make<ReplaceSliceKernel>());
PDNG_REGISTER_KERNEL("Gather", make<GatherKernel>());
PDNG_REGISTER_KERNEL("ScatterAdd", make<ScatterAddKernel>());
PDNG_REGISTER_KERNEL("ScatterElementsAdd", make<ScatterElementsAddKernel>());
PDNG_REGISTER_KERNEL("TopK", make_topk);
PDNG_REGISTER_KERNEL("Accuracy", make<AccuracyKernel>());
PDNG_REGISTER_KERNEL("EmbeddingLookup", make<EmbeddingLookupKernel>());
PDNG_REGISTER_KERNEL("EmbeddingLookupBackprop", make<EmbeddingLookupBackpropKernel>());
PDNG_REGISTER_KERNEL("DropoutMask", make<DropoutMaskKernel>());

}  // namespace
}  // namespace pdng
