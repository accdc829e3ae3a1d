#include "pdng/dnnl_common.h"

namespace pdng {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Kernels run on the executor's thread only, so one stream serves them all.
dnnl::stream& dnnl_stream() {
  static dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::memory::data_type dnnl_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return dnnl::memory::data_type::f32;
    case DType::Float16: return dnnl::memory::data_type::f16;
    case DType::BFloat16: return dnnl::memory::data_type::bf16;
    case DType::Int32: return dnnl::memory::data_type::s32;
    case DType::Int8: return dnnl::memory::data_type::s8;
    case DType::UInt8: return dnnl::memory::data_type::u8;
    default: throw Error(std::string("oneDNN has no data type for ") + dtype_name(dtype));
  }
}

dnnl::memory::desc plain_md(DType dtype, const Shape& shape) {
  if (shape.empty()) return dnnl::memory::desc({1}, dnnl_dtype(dtype), dnnl::memory::dims{1});  // no 0-d in oneDNN
  auto strides = row_major_strides(shape);
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), dnnl_dtype(dtype),
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory::desc plain_md(const TensorDesc& desc) { return plain_md(desc.dtype, desc.shape); }

dnnl::memory wrap(const dnnl::memory::desc& md, void* data) { return dnnl::memory(md, dnnl_engine(), data); }

}  // namespace pdng
