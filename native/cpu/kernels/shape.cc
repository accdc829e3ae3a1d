// Kernels of the shape ops (ir/ops/shape.py) that move data: Reshape, Transpose, Concat and Stack
// and BroadcastTo.
//
// The NumPy interpreter (backends/interpreter/kernels/shape.py) is the specification. Every copy
// goes through the strided-copy engine (strided_copy.h): rows of contiguous elements become
// memcpy calls, anything else (transposes) is copied in cache-sized tiles.
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
#include "pdng/elementwise_loops.h"
#include "pdng/strided_copy.h"

namespace pdng {
namespace {

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
    const int64_t axis = normalize_axis(node.attrs.get_int("axis"), stack ? r + 1 : r);
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

// --- BroadcastTo: on the broadcasting plan of elementwise_loops.h ---------------------------------------
template <class U>
void broadcast_fn(const Broadcast& p, const Tensor& a, Tensor& out) {
  const U* pa = a.as<U>();
  U* po = out.as<U>();
  const bool contiguous = p.istride[0] != 0;
  p.for_each(1, [&](int64_t oo, const int64_t* off, int64_t n) {
    U* __restrict o = po + oo;
    if (contiguous) {
      std::memcpy(o, pa + off[0], static_cast<size_t>(n) * sizeof(U));
    } else {
      const U v = pa[off[0]];
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    }
  });
}

class BroadcastToKernel : public Kernel {
 public:
  explicit BroadcastToKernel(const NodeInfo& node) : plan_({node.inputs[0].shape}, node.outputs[0].shape) {
    PDNG_CHECK(node.outputs[0].dtype == node.inputs[0].dtype,
               "BroadcastTo: output dtype " + node.outputs[0].str() + " differs from input " + node.inputs[0].str());
    PDNG_CHECK(node.outputs[0].shape == node.inputs[1].shape,
               "BroadcastTo: output " + node.outputs[0].str() + " does not have the shape of " + node.inputs[1].str());
    switch (dtype_size(node.inputs[0].dtype)) {
      case 1: fn_ = &broadcast_fn<uint8_t>; break;
      case 2: fn_ = &broadcast_fn<uint16_t>; break;
      case 4: fn_ = &broadcast_fn<uint32_t>; break;
      case 8: fn_ = &broadcast_fn<uint64_t>; break;
      default: unsupported(node, node.inputs[0].dtype);
    }
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override { fn_(plan_, in[0], out[0]); }

 private:
  Broadcast plan_;
  void (*fn_)(const Broadcast&, const Tensor&, Tensor&) = nullptr;
};

PDNG_REGISTER_KERNEL("BroadcastTo", [](const NodeInfo& node) {
  check_arity(node, 2, 1);
  return std::unique_ptr<Kernel>(new BroadcastToKernel(node));
});

template <class K>
KernelFactory make() {
  return [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new K(node)); };
}

PDNG_REGISTER_KERNEL("Reshape", make<ReshapeKernel>());
PDNG_REGISTER_KERNEL("Transpose", make<TransposeKernel>());
PDNG_REGISTER_KERNEL("Concat", [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new JoinKernel(node, false)); });
PDNG_REGISTER_KERNEL("Stack", [](const NodeInfo& node) { return std::unique_ptr<Kernel>(new JoinKernel(node, true)); });

}  // namespace
}  // namespace pdng
