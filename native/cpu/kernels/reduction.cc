// Kernels of the reductions (ir/ops/reduction.py): ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ReduceProd, the backprops ReduceSumBackprop, ReduceMeanBackprop, and the running sum CumSum.
//
// The interpreter (NumPy) is the specification. The constructor merges the input's dims into
// alternating runs of kept and reduced dims (unit dims dropped) and picks one of two loops:
//   - the innermost run is reduced: every output is a sum of contiguous rows (row sums are
//     NumPy's pairwise summation, with 8 accumulators);
//   - the innermost run is kept: outputs are accumulated up to 4096 contiguous columns at a
//     time in a per-thread accumulator row, streaming the input rows (vectorizes across columns).
// Accumulators: float32 and float64 sums in double, integer sums in int64 (as NumPy's sum,
// which accumulates integers in int64 and casts back), every mean in double (NumPy's mean of
// integers divides a float64 sum and our cast truncates as astype does). So float32 results are
// the correctly rounded double result, within float32 rounding of NumPy/Paddle's. Products go
// as sums do (double for floats; int64 for integers, multiplied modulo 2^64 as NumPy's int64 does,
// so the cast back wraps as NumPy's does), row after row, without the pairwise split.
// When there are few outputs and much input, the reduction itself is split in fixed chunks
// (independent of the thread count) whose partial results are added in order: the result
// depends on the shape only, never on the number of threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

constexpr int64_t kFewOutputs = 16;  // below this many outputs (column blocks), split the reduction

// A mixed-radix counter over some dims, tracking a linear offset.
struct Odometer {
  int rank = 0;
  int64_t n[kMaxRank], s[kMaxRank], i[kMaxRank];
  int64_t off = 0;

  Odometer(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
    rank = static_cast<int>(dims.size());
    for (int k = 0; k < rank; ++k) n[k] = dims[k], s[k] = strides[k], i[k] = 0;
  }
  void seek(int64_t linear) {
    off = 0;
    for (int k = rank - 1; k >= 0; --k) {
      i[k] = linear % n[k];
      linear /= n[k];
      off += i[k] * s[k];
    }
  }
  void next() {
    for (int k = rank - 1; k >= 0; --k) {
      ++i[k];
      off += s[k];
      if (i[k] < n[k]) return;
      off -= s[k] * n[k];
      i[k] = 0;
    }
  }
};

// The reduced axes of a node (empty attr: all), normalized, as flags per input dim.
std::vector<bool> reduced_flags(const NodeInfo& node, int rank) {
  std::vector<bool> flags(rank, false);
  if (rank == 0) return flags;  // the interpreter reduces a 0-D input as a whole: a copy
  const auto& axes = node.attrs.get_ints("axes");  // empty: every axis
  if (axes.empty()) return std::vector<bool>(rank, true);
  for (int64_t a : axes) flags[normalize_axis(a, rank)] = true;
  return flags;
}

// The reduction's output shape for keep_dims.
Shape reduced_shape(const Shape& x, const std::vector<bool>& flags, bool keep_dims) {
  Shape s;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!flags[i])
      s.push_back(x[i]);
    else if (keep_dims)
      s.push_back(1);
  }
  return s;
}

// x's dims as alternating runs of kept and reduced dims, unit dims dropped.
struct Layout {
  std::vector<int64_t> n, stride;
  std::vector<bool> reduced;
  int64_t count = 1;  // elements reduced into each output

  Layout(const Shape& shape, const std::vector<bool>& flags) {
    for (size_t i = 0; i < shape.size(); ++i) {
      if (flags[i]) count *= shape[i];
      if (shape[i] == 1) continue;
      if (!n.empty() && reduced.back() == flags[i]) {
        n.back() *= shape[i];
      } else {
        n.push_back(shape[i]);
        reduced.push_back(flags[i]);
      }
    }
    stride = row_major_strides(n);
    if (n.size() + 1 > kMaxRank) throw Error("rank too large");
  }
  bool any_reduced() const {
    for (bool r : reduced)
      if (r) return true;
    return false;
  }
};

// --- forward reductions -------------------------------------------------------------------------
enum class Op { Sum, Mean, Max, Min, Prod };

template <class T, Op op>
struct Traits {
  static constexpr bool kFloat = std::is_floating_point<T>::value;
  // The accumulator: double for float sums and products and every mean, int64 for integer sums
  // and products, T for max/min.
  using Acc = typename std::conditional<
      op == Op::Max || op == Op::Min, T,
      typename std::conditional<(op == Op::Sum || op == Op::Prod) && !kFloat, int64_t, double>::type>::type;

  // NumPy's maximum/minimum: NaN wins.
  // Written branch-free (| not ||) so that g++ vectorizes the loops that use it.
  static inline Acc pick(Acc m, Acc v) {
    if (op == Op::Max) return ((v > m) | (v != v)) ? v : m;
    return ((v < m) | (v != v)) ? v : m;
  }
  // Integer products wrap (unsigned multiplication: signed overflow is undefined in C++).
  static inline Acc times(Acc a, Acc b) {
    if constexpr (std::is_integral<Acc>::value)
      return static_cast<Acc>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    else
      return a * b;
  }
  static inline Acc combine(Acc a, Acc b) {
    if (op == Op::Max || op == Op::Min) return pick(a, b);
    if (op == Op::Prod) return times(a, b);
    return a + b;
  }
  static inline T finish(Acc acc, double count) {
    if (op == Op::Mean) return static_cast<T>(acc / count);
    return static_cast<T>(acc);
  }

  // Reduction of a contiguous row of n >= 1 elements.
  static Acc row(const T* a, int64_t n) {
    if (op == Op::Max || op == Op::Min) {
      // kLanes independent lanes (a loop g++ vectorizes), then the lanes and the tail.
      constexpr int kLanes = 64;
      if (n < 2 * kLanes) {
        Acc m = a[0];
        for (int64_t i = 1; i < n; ++i) m = pick(m, a[i]);
        return m;
      }
      Acc r[kLanes];
      for (int k = 0; k < kLanes; ++k) r[k] = a[k];
      int64_t i = kLanes;
      for (; i + kLanes <= n; i += kLanes) {
        const T* p = a + i;
        for (int k = 0; k < kLanes; ++k) r[k] = pick(r[k], p[k]);
      }
      Acc m = r[0];
      for (int k = 1; k < kLanes; ++k) m = pick(m, r[k]);
      for (; i < n; ++i) m = pick(m, a[i]);
      return m;
    } else if (op == Op::Prod) {
      Acc p = static_cast<Acc>(a[0]);
      for (int64_t i = 1; i < n; ++i) p = times(p, static_cast<Acc>(a[i]));
      return p;
    } else if (std::is_integral<Acc>::value) {
      Acc s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<Acc>(a[i]);
      return s;
    } else {
      return pairwise(a, n);
    }
  }

  // NumPy's pairwise summation (numpy/_core/src/umath/loops_utils.h), in Acc.
  static Acc pairwise(const T* a, int64_t n) {
    if (n < 8) {
      Acc s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<Acc>(a[i]);
      return s;
    }
    if (n <= 128) {
      Acc r[8];
      for (int k = 0; k < 8; ++k) r[k] = static_cast<Acc>(a[k]);
      int64_t i = 8;
      for (; i < n - (n % 8); i += 8)
        for (int k = 0; k < 8; ++k) r[k] += static_cast<Acc>(a[i + k]);
      Acc s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
      for (; i < n; ++i) s += static_cast<Acc>(a[i]);
      return s;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2) + pairwise(a + n2, n - n2);
  }
};

template <class T, Op op>
class ReduceKernel : public Kernel {
  using Tr = Traits<T, op>;
  using Acc = typename Tr::Acc;

 public:
  explicit ReduceKernel(const NodeInfo& node) {
    const TensorDesc &x = node.inputs.at(0), &y = node.outputs.at(0);
    const auto flags = reduced_flags(node, x.rank());
    const Shape expected = reduced_shape(x.shape, flags, node.attrs.get_bool("keep_dims"));
    if (y.shape != expected || y.dtype != x.dtype)
      throw Error("output is " + y.str() + ", expected " + dtype_name(x.dtype) + "[" + shape_str(expected) + "]");
    Layout lay(x.shape, flags);
    in_numel_ = x.numel();
    out_numel_ = y.numel();
    count_ = lay.count;
    if (in_numel_ == 0) {
      mode_ = Mode::Empty;
      return;
    }
    if (!lay.any_reduced()) {
      mode_ = Mode::Copy;
      return;
    }
    const int r = static_cast<int>(lay.n.size());
    inner_ = lay.n[r - 1];
    const bool inner_reduced = lay.reduced[r - 1];
    for (int k = 0; k < r - 1; ++k) {
      if (lay.reduced[k])
        rn_.push_back(lay.n[k]), rs_.push_back(lay.stride[k]);
      else
        kn_.push_back(lay.n[k]), ks_.push_back(lay.stride[k]);
    }
    red_rows_ = 1;
    for (int64_t v : rn_) red_rows_ *= v;
    if (inner_reduced) {
      // out_numel_ outputs, each the reduction of red_rows_ rows of inner_ elements.
      pieces_ = (inner_ + kPiece - 1) / kPiece;
      mode_ = Mode::Rows;
      if (out_numel_ < kFewOutputs && in_numel_ > kParallelMin && red_rows_ * pieces_ > 1) {
        mode_ = Mode::RowsSplit;
        partial_.resize(static_cast<size_t>(out_numel_ * red_rows_ * pieces_));
      }
    } else {
      groups_ = out_numel_ / inner_;
      width_ = std::min(inner_, kMaxWidth);
      blocks_ = (inner_ + width_ - 1) / width_;
      mode_ = Mode::Columns;
      chunk_rows_ = std::max<int64_t>(1, kChunk / width_);
      chunks_ = (red_rows_ + chunk_rows_ - 1) / chunk_rows_;
      if (groups_ * blocks_ < kFewOutputs && in_numel_ > kParallelMin && chunks_ > 1) {
        mode_ = Mode::ColumnsSplit;
        partial_.resize(static_cast<size_t>(groups_ * chunks_ * inner_));
      } else {
        slots_ = std::max(1, num_threads());
        partial_.resize(static_cast<size_t>(slots_ * width_));  // one accumulator row per thread
      }
    }
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const T* x = in[0].as<T>();
    T* y = out[0].as<T>();
    switch (mode_) {
      case Mode::Empty: return run_empty(y);
      case Mode::Copy: return run_copy(x, y);
      case Mode::Rows: return run_rows(x, y);
      case Mode::RowsSplit: return run_rows_split(x, y);
      case Mode::Columns: return run_columns(x, y);
      case Mode::ColumnsSplit: return run_columns_split(x, y);
    }
  }

 private:
  enum class Mode { Empty, Copy, Rows, RowsSplit, Columns, ColumnsSplit };
  static constexpr int64_t kPiece = 16384;  // elements of a row per partial (a multiple of 8)
  static constexpr int64_t kMaxWidth = 4096;  // columns accumulated together (rows are streamed)
  static constexpr int64_t kChunk = 1 << 18;  // elements per partial in the split column loop

  void run_empty(T* y) const {
    if (out_numel_ == 0) return;
    if (op == Op::Max || op == Op::Min)
      throw Error(std::string("zero-size reduction has no identity (") + (op == Op::Max ? "maximum" : "minimum") + ")");
    T value = op == Op::Prod ? 1 : 0;
    if (op == Op::Mean && Tr::kFloat) value = std::numeric_limits<T>::quiet_NaN();
    // NumPy's mean of nothing is NaN, which astype turns into the x86 "integer indefinite"
    // for int32/int64 (and 0 for the narrower types).
    if (op == Op::Mean && !Tr::kFloat && std::is_signed<T>::value && sizeof(T) >= 4) value = std::numeric_limits<T>::min();
    std::fill(y, y + out_numel_, value);
  }

  void run_copy(const T* x, T* y) const {
    const double count = static_cast<double>(count_);
    parallel_ranges(in_numel_, in_numel_, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) y[i] = Tr::finish(static_cast<Acc>(x[i]), count);
    });
  }

  // Sum of the rows of output o's reduction, rows [r0, r1), columns [c0, c1) of each row.
  Acc rows_of(const T* x, int64_t base, int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    Odometer red(rn_, rs_);
    red.seek(r0);
    Acc acc = Tr::row(x + base + red.off + c0, c1 - c0);
    red.next();
    for (int64_t r = r0 + 1; r < r1; ++r, red.next()) acc = Tr::combine(acc, Tr::row(x + base + red.off + c0, c1 - c0));
    return acc;
  }

  void run_rows(const T* x, T* y) const {
    const double count = static_cast<double>(count_);
    parallel_ranges(out_numel_, in_numel_, [&](int64_t b, int64_t e, int) {
      Odometer kept(kn_, ks_);
      kept.seek(b);
      for (int64_t o = b; o < e; ++o, kept.next()) y[o] = Tr::finish(rows_of(x, kept.off, 0, red_rows_, 0, inner_), count);
    });
  }

  void run_rows_split(const T* x, T* y) {
    const double count = static_cast<double>(count_);
    const int64_t units = red_rows_ * pieces_;
    Acc* partial = partial_.data();
    parallel_ranges(out_numel_ * units, in_numel_, [&](int64_t b, int64_t e, int) {
      Odometer kept(kn_, ks_);
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / units, u = it % units, r = u / pieces_, p = u % pieces_;
        kept.seek(o);
        const int64_t c0 = p * kPiece, c1 = std::min(inner_, c0 + kPiece);
        partial[it] = rows_of(x, kept.off, r, r + 1, c0, c1);
      }
    });
    for (int64_t o = 0; o < out_numel_; ++o) {
      Acc acc = partial[o * units];
      for (int64_t u = 1; u < units; ++u) acc = Tr::combine(acc, partial[o * units + u]);
      y[o] = Tr::finish(acc, count);
    }
  }

  // acc[0, w) = the reduction of rows [r0, r1) of the group at `base`, columns [c0, c0 + w).
  // Sums add rows four at a time: acc + ((p0 + p1) + (p2 + p3)), in Acc (fewer loads and stores
  // of acc); max/min and products go row by row.
  void columns_of(const T* x, int64_t base, int64_t r0, int64_t r1, int64_t c0, int64_t w, Acc* acc) const {
    Acc* __restrict a = acc;
    Odometer red(rn_, rs_);
    red.seek(r0);
    const T* p = x + base + red.off + c0;
    for (int64_t j = 0; j < w; ++j) a[j] = static_cast<Acc>(p[j]);
    red.next();
    int64_t r = r0 + 1;
    for (; (op == Op::Sum || op == Op::Mean) && r + 4 <= r1; r += 4) {
      const T* __restrict q0 = x + base + red.off + c0;
      red.next();
      const T* __restrict q1 = x + base + red.off + c0;
      red.next();
      const T* __restrict q2 = x + base + red.off + c0;
      red.next();
      const T* __restrict q3 = x + base + red.off + c0;
      red.next();
      for (int64_t j = 0; j < w; ++j)
        a[j] += (static_cast<Acc>(q0[j]) + static_cast<Acc>(q1[j])) + (static_cast<Acc>(q2[j]) + static_cast<Acc>(q3[j]));
    }
    for (; r < r1; ++r, red.next()) {
      p = x + base + red.off + c0;
      if (op == Op::Max || op == Op::Min) {
        for (int64_t j = 0; j < w; ++j) a[j] = Tr::pick(a[j], p[j]);
      } else if (op == Op::Prod) {
        for (int64_t j = 0; j < w; ++j) a[j] = Tr::times(a[j], static_cast<Acc>(p[j]));
      } else {
        for (int64_t j = 0; j < w; ++j) a[j] += static_cast<Acc>(p[j]);
      }
    }
  }

  void run_columns(const T* x, T* y) {
    const double count = static_cast<double>(count_);
    const int64_t K = inner_, W = width_;
    Acc* scratch = partial_.data();
    parallel_ranges(
        groups_ * blocks_, in_numel_,
        [&](int64_t b, int64_t e, int t) {
          Odometer kept(kn_, ks_);
          Acc* acc = scratch + t * W;
          for (int64_t it = b; it < e; ++it) {
            const int64_t g = it / blocks_, c0 = (it % blocks_) * W, w = std::min(W, K - c0);
            kept.seek(g);
            columns_of(x, kept.off, 0, red_rows_, c0, w, acc);
            T* dst = y + g * K + c0;
            for (int64_t j = 0; j < w; ++j) dst[j] = Tr::finish(acc[j], count);
          }
        },
        slots_);
  }

  void run_columns_split(const T* x, T* y) {
    const double count = static_cast<double>(count_);
    const int64_t K = inner_;
    Acc* partial = partial_.data();  // [group, chunk, K]
    parallel_ranges(groups_ * chunks_ * blocks_, in_numel_, [&](int64_t b, int64_t e, int) {
      Odometer kept(kn_, ks_);
      for (int64_t it = b; it < e; ++it) {
        const int64_t blk = it % blocks_, gc = it / blocks_, g = gc / chunks_, c = gc % chunks_;
        const int64_t c0 = blk * width_, w = std::min(width_, K - c0);
        const int64_t r0 = c * chunk_rows_, r1 = std::min(red_rows_, r0 + chunk_rows_);
        kept.seek(g);
        columns_of(x, kept.off, r0, r1, c0, w, partial + gc * K + c0);
      }
    });
    parallel_ranges(groups_ * K, groups_ * K * chunks_, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t g = i / K, j = i % K;
        const Acc* p = partial + g * chunks_ * K + j;
        Acc acc = p[0];
        for (int64_t c = 1; c < chunks_; ++c) acc = Tr::combine(acc, p[c * K]);
        y[i] = Tr::finish(acc, count);
      }
    });
  }

  Mode mode_ = Mode::Empty;
  int64_t in_numel_ = 0, out_numel_ = 0, count_ = 1, inner_ = 1, red_rows_ = 1;
  std::vector<int64_t> kn_, ks_, rn_, rs_;  // kept and reduced dims (but the innermost) and strides
  int64_t pieces_ = 1;                                       // Rows modes
  int64_t groups_ = 0, blocks_ = 0, width_ = 1, chunk_rows_ = 1, chunks_ = 1;  // Columns modes
  int slots_ = 1;
  std::vector<Acc> partial_;
};

template <Op op>
std::unique_ptr<Kernel> make_reduce(const NodeInfo& node) {
  std::unique_ptr<Kernel> kernel;
  PDNG_DISPATCH_NUMERIC(node.inputs.at(0).dtype, T, { kernel.reset(new ReduceKernel<T, op>(node)); });
  return kernel;
}

// --- backprops: broadcast the gradient back over the reduced axes ----------------------------------
// Sum: grad = broadcast(delta). Mean: grad = broadcast(delta) / T(count), divided elementwise in
// x's dtype as the interpreter does (integers: in double, then truncated).
template <class T, bool mean>
class ReduceBackpropKernel : public Kernel {
 public:
  explicit ReduceBackpropKernel(const NodeInfo& node) {
    const TensorDesc &x = node.inputs.at(0), &delta = node.inputs.at(1), &y = node.outputs.at(0);
    PDNG_CHECK(delta.dtype == x.dtype, "gradient " + delta.str() + " and x " + x.str() + " dtypes differ");
    PDNG_CHECK(y.dtype == x.dtype && y.shape == x.shape, "output is " + y.str() + ", expected " + x.str());
    const auto flags = reduced_flags(node, x.rank());
    const Shape kept = reduced_shape(x.shape, flags, true);
    PDNG_CHECK(delta.numel() == shape_numel(kept),
               "gradient " + delta.str() + " does not match the reduction of " + x.str());
    Layout lay(x.shape, flags);
    numel_ = x.numel();
    count_ = lay.count;
    if (lay.n.empty()) lay.n = {1}, lay.reduced = {false};
    const int r = static_cast<int>(lay.n.size());
    // delta's strides: row-major over the kept runs, 0 over the reduced ones.
    std::vector<int64_t> ds(r, 0);
    int64_t s = 1;
    for (int k = r - 1; k >= 0; --k)
      if (!lay.reduced[k]) ds[k] = s, s *= lay.n[k];
    inner_ = lay.n[r - 1];
    inner_reduced_ = lay.reduced[r - 1];
    on_.assign(lay.n.begin(), lay.n.end() - 1);
    os_.assign(ds.begin(), ds.end() - 1);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (numel_ == 0) return;
    const T* d = in[1].as<T>();
    T* y = out[0].as<T>();
    const int64_t K = inner_;
    const bool fill = inner_reduced_;
    const int64_t count = count_;
    parallel_ranges(numel_ / K, numel_, [&](int64_t b, int64_t e, int) {
      Odometer odo(on_, os_);
      odo.seek(b);
      for (int64_t row = b; row < e; ++row, odo.next()) {
        T* dst = y + row * K;
        const T* src = d + odo.off;
        if (fill) {
          const T v = scale(src[0], count);
          for (int64_t j = 0; j < K; ++j) dst[j] = v;
        } else if (mean) {
          for (int64_t j = 0; j < K; ++j) dst[j] = scale(src[j], count);
        } else {
          std::memcpy(dst, src, static_cast<size_t>(K) * sizeof(T));
        }
      }
    });
  }

 private:
  static inline T scale(T v, int64_t count) {
    if (!mean) return v;
    if (std::is_floating_point<T>::value) return v / static_cast<T>(count);
    return static_cast<T>(static_cast<double>(v) / static_cast<double>(count));
  }

  int64_t numel_ = 0, count_ = 1, inner_ = 1;
  bool inner_reduced_ = false;
  std::vector<int64_t> on_, os_;
};

template <bool mean>
std::unique_ptr<Kernel> make_backprop(const NodeInfo& node) {
  std::unique_ptr<Kernel> kernel;
  PDNG_DISPATCH_NUMERIC(node.inputs.at(0).dtype, T, { kernel.reset(new ReduceBackpropKernel<T, mean>(node)); });
  return kernel;
}

// --- CumSum: the running sum along one axis ------------------------------------------------------
// Accumulated in T, element after element along the axis (from its end when reversed), as NumPy's
// cumsum in the input's dtype and Paddle's Eigen scan: the same additions in the same order, so
// the same bits. Integer sums wrap (added as unsigned: signed overflow is undefined in C++).
// Lanes of a non-innermost axis are summed side by side (for_each_lane_group), one lane group per
// thread, so the result does not depend on the thread count.
template <class T>
class CumSumKernel : public Kernel {
 public:
  explicit CumSumKernel(const NodeInfo& node) {
    check_arity(node, 1, 1);
    const TensorDesc& x = node.inputs[0];
    PDNG_CHECK(x.rank() >= 1, "needs an input of rank >= 1, got " + x.str());
    check_like(node.outputs[0], x, "output");
    layout_ = axis_layout(x.shape, normalize_axis(node.attrs.get_int("axis"), x.rank()));
    exclusive_ = node.attrs.get_bool("exclusive");
    reverse_ = node.attrs.get_bool("reverse");
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (layout_.numel() == 0) return;
    const T* x = in[0].as<T>();
    T* y = out[0].as<T>();
    const int64_t n = layout_.n, inner = layout_.inner;
    const bool exclusive = exclusive_, reverse = reverse_;
    for_each_lane_group(layout_, [=](auto tag, int64_t base, int64_t lanes, int64_t) {
      const int64_t stride = decltype(tag)::value ? 1 : inner;
      T acc[kLanes];
      for (int64_t j = 0; j < lanes; ++j) acc[j] = 0;
      for (int64_t s = 0; s < n; ++s) {
        const int64_t at = base + (reverse ? n - 1 - s : s) * stride;
        const T* src = x + at;
        T* dst = y + at;
        for (int64_t j = 0; j < lanes; ++j) {
          const T sum = add(acc[j], src[j]);
          dst[j] = exclusive ? acc[j] : sum;
          acc[j] = sum;
        }
      }
    });
  }

 private:
  static inline T add(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
      using U = typename std::make_unsigned<T>::type;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }

  AxisLayout layout_;
  bool exclusive_ = false, reverse_ = false;
};

std::unique_ptr<Kernel> make_cumsum(const NodeInfo& node) {
  std::unique_ptr<Kernel> kernel;
  PDNG_DISPATCH_NUMERIC(node.inputs.at(0).dtype, T, { kernel.reset(new CumSumKernel<T>(node)); });
  return kernel;
}

PDNG_REGISTER_KERNEL("ReduceSum", make_reduce<Op::Sum>);
PDNG_REGISTER_KERNEL("ReduceMean", make_reduce<Op::Mean>);
PDNG_REGISTER_KERNEL("ReduceMax", make_reduce<Op::Max>);
PDNG_REGISTER_KERNEL("ReduceMin", make_reduce<Op::Min>);
PDNG_REGISTER_KERNEL("ReduceProd", make_reduce<Op::Prod>);
PDNG_REGISTER_KERNEL("ReduceSumBackprop", make_backprop<false>);
PDNG_REGISTER_KERNEL("ReduceMeanBackprop", make_backprop<true>);
PDNG_REGISTER_KERNEL("CumSum", make_cumsum);

}  // namespace
}  // namespace pdng
