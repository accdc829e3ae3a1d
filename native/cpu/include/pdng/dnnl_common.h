// The oneDNN engine and stream shared by all kernels, and helpers to describe tensors.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>

#include "pdng/kernel.h"

namespace pdng {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();

// oneDNN's data type of a dtype (f32, f64 is not supported by most primitives: throws Error).
dnnl::memory::data_type dnnl_dtype(DType dtype);
// A plain row-major memory descriptor for a desc (format tag by rank: a, ab, abc, ...).
dnnl::memory::desc plain_md(const TensorDesc& desc);
dnnl::memory::desc plain_md(DType dtype, const Shape& shape);
// A dnnl::memory over an existing buffer (no copy); set_data_handle() rebinds it per step.
dnnl::memory wrap(const dnnl::memory::desc& md, void* data = DNNL_MEMORY_NONE);

// --- oneDNN softmax (float32) --------------------------------------------------------------------
// A softmax_forward primitive on plain row-major tensors; init() returns false where oneDNN
// has no implementation (the kernel then runs its loops).
class DnnlSoftmax {
 public:
  bool init(const TensorDesc& x, int axis, dnnl::algorithm algorithm) {
    try {
      const dnnl::memory::desc md = plain_md(x);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::softmax_forward::primitive_desc pd(dnnl_engine(), dnnl::prop_kind::forward_inference, algorithm, md, md,
                                               axis, attr);
      prim_ = dnnl::softmax_forward(pd);
      src_ = wrap(md);
      dst_ = wrap(md);
      args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_},
               {DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), dnnl_engine())}};
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

  void run(const void* x, void* y) {
    src_.set_data_handle(const_cast<void*>(x));
    dst_.set_data_handle(y);
    prim_.execute(dnnl_stream(), args_);
    dnnl_stream().wait();
  }

 private:
  dnnl::primitive prim_;
  dnnl::memory src_, dst_;
  std::unordered_map<int, dnnl::memory> args_;
};

}  // namespace pdng
