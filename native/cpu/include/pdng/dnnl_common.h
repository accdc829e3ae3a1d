// The oneDNN engine and stream shared by all kernels, and helpers to describe tensors.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

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

}  // namespace pdng
