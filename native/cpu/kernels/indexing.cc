// Kernels of the indexing ops (ir/ops/indexing.py): Slice, ReplaceSlice, Gather, ScatterAdd,
// ScatterElementsAdd, TopK, Accuracy, EmbeddingLookup and EmbeddingLookupBackprop.
//
// The NumPy interpreter (backends/interpreter/kernels/indexing.py) is the specification; each kernel
// says where it follows it. Copies go through the strided-copy engine (strided_copy.h).
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
#include "pdng/strided_copy.h"

namespace pdng {
namespace {

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
    const int64_t axis = normalize_axis(node.attrs.get_int("axis"), x.rank());
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
    const int64_t axis = normalize_axis(node.attrs.get_int("axis"), r);
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
    const int64_t axis = normalize_axis(node.attrs.get_int("axis"), x.rank());
    k_ = node.attrs.get_int("k");
    largest_ = node.attrs.get_bool("largest");
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
    padding_ = node.attrs.get_int("padding_idx");
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
    padding_ = node.attrs.get_int("padding_idx");
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

template <class K>
KernelFactory make() {
  return [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new K(node)); };
}

PDNG_REGISTER_KERNEL("Slice", make<SliceKernel>());
PDNG_REGISTER_KERNEL("ReplaceSlice", make<ReplaceSliceKernel>());
PDNG_REGISTER_KERNEL("Gather", make<GatherKernel>());
PDNG_REGISTER_KERNEL("ScatterAdd", make<ScatterAddKernel>());
PDNG_REGISTER_KERNEL("ScatterElementsAdd", make<ScatterElementsAddKernel>());
PDNG_REGISTER_KERNEL("TopK", make_topk);
PDNG_REGISTER_KERNEL("Accuracy", make<AccuracyKernel>());
PDNG_REGISTER_KERNEL("EmbeddingLookup", make<EmbeddingLookupKernel>());
PDNG_REGISTER_KERNEL("EmbeddingLookupBackprop", make<EmbeddingLookupBackpropKernel>());

}  // namespace
}  // namespace pdng
