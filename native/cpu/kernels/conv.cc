// Convolution, ConvolutionBackpropData, ConvolutionBackpropFilter: 2-D, data NCHW, filters
// OIHW (O, C/groups, KH, KW), explicit (possibly asymmetric) paddings, dilations, groups.
//
// float32 runs on oneDNN's convolution primitives (convolution_forward, convolution_backward_data,
// convolution_backward_weights, the backward ones with a forward primitive_desc as hint). The
// primitive may ask for blocked layouts; the kernel then reorders between the plain tensors and
// kernel-owned blocked buffers (see kLayout below). float64 (not supported by oneDNN) runs
// direct loops; they are also the fallback when oneDNN refuses a float32 problem.
//
// Paddle's dilation d is oneDNN's d - 1.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "pdng/dnnl_common.h"
#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

using dnnl::memory;

// ---- geometry -----------------------------------------------------------------------------------------
struct ConvGeometry {
  int64_t N, C, H, W;     // data
  int64_t O, KH, KW;      // filters (O, C/G, KH, KW)
  int64_t OH, OW;         // output / delta
  int64_t G, Cg, Og;      // groups, channels per group
  int64_t sh, sw, dh, dw, pt, pl, pb, pr;
  std::vector<int64_t> ow_lo, ow_hi;  // ow_range of every kw

  // data, filters: the forward inputs; out: the forward output (or delta).
  ConvGeometry(const NodeInfo& node, const TensorDesc& data, const TensorDesc& filters, const TensorDesc& out) {
    const Attrs& a = node.attrs;
    PDNG_CHECK(data.rank() == 4 && filters.rank() == 4 && out.rank() == 4,
               "data " + data.str() + ", filters " + filters.str() + " and output " + out.str() + " must be 4-D");
    auto strides = hw_attr(a, "strides"), dilations = hw_attr(a, "dilations");
    auto begin = hw_attr(a, "pads_begin"), end = hw_attr(a, "pads_end");
    N = data.shape[0]; C = data.shape[1]; H = data.shape[2]; W = data.shape[3];
    O = filters.shape[0]; KH = filters.shape[2]; KW = filters.shape[3];
    OH = out.shape[2]; OW = out.shape[3];
    G = a.get_int("groups");
    PDNG_CHECK(G >= 1 && O % G == 0 && C == filters.shape[1] * G,
               "filters " + filters.str() + " with groups=" + std::to_string(G) + " do not match data " + data.str());
    Cg = C / G; Og = O / G;
    sh = strides[0]; sw = strides[1]; dh = dilations[0]; dw = dilations[1];
    pt = begin[0]; pl = begin[1]; pb = end[0]; pr = end[1];
    PDNG_CHECK(sh > 0 && sw > 0 && dh > 0 && dw > 0, "strides and dilations must be > 0");
    PDNG_CHECK(out.shape[0] == N && out.shape[1] == O, "output " + out.str() + " does not match data and filters");
    auto count = [](int64_t size, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
      return (size + p0 + p1 - (d * (k - 1) + 1)) / s + 1;
    };
    PDNG_CHECK(OH == count(H, KH, sh, dh, pt, pb) && OW == count(W, KW, sw, dw, pl, pr),
               "output " + out.str() + " does not match the convolution of " + data.str() + " by " + filters.str());
    ow_lo.resize(KW);
    ow_hi.resize(KW);
    for (int64_t kw = 0; kw < KW; ++kw) ow_range(kw, &ow_lo[kw], &ow_hi[kw]);
  }

  bool empty_problem() const { return N == 0 || C == 0 || O == 0 || OH <= 0 || OW <= 0 || KH == 0 || KW == 0; }

  // The range [lo, hi) of output columns whose input column ow * sw - pl + kw * dw lies in [0, W).
  void ow_range(int64_t kw, int64_t* lo, int64_t* hi) const {
    const int64_t off = kw * dw - pl;  // iw = ow * sw + off
    int64_t l = off >= 0 ? 0 : (-off + sw - 1) / sw;
    int64_t h = (W - 1 - off) >= 0 ? (W - 1 - off) / sw + 1 : 0;
    *lo = std::min(l, OW);
    *hi = std::max(*lo, std::min(h, OW));
  }

  memory::dims dnnl_strides() const { return {sh, sw}; }
  memory::dims dnnl_dilates() const { return {dh - 1, dw - 1}; }
  memory::dims dnnl_pad_l() const { return {pt, pl}; }
  memory::dims dnnl_pad_r() const { return {pb, pr}; }
};

// ---- loops (float64, and the float32 fallback) ---------------------------------------------------------
template <class T>
void conv_forward_loops(const ConvGeometry& g, const T* x, const T* w, T* y) {
  const int64_t* lo = g.ow_lo.data();
  const int64_t* hi = g.ow_hi.data();
  const int64_t tasks = g.N * g.O;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (tasks > 1 && g.N * g.O * g.OH * g.OW * g.Cg * g.KH * g.KW > 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t n = t / g.O, o = t % g.O, grp = o / g.Og;
    T* yp = y + t * g.OH * g.OW;
    std::fill(yp, yp + g.OH * g.OW, T(0));
    for (int64_t c = 0; c < g.Cg; ++c) {
      const T* xc = x + (n * g.C + grp * g.Cg + c) * g.H * g.W;
      const T* wc = w + (o * g.Cg + c) * g.KH * g.KW;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const T* xr = xc + ih * g.W;
          T* yr = yp + oh * g.OW;
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const T wv = wc[kh * g.KW + kw];
            const int64_t off = kw * g.dw - g.pl;
            if (g.sw == 1) {
              const T* xs = xr + off;
              for (int64_t ow = lo[kw]; ow < hi[kw]; ++ow) yr[ow] += wv * xs[ow];
            } else {
              for (int64_t ow = lo[kw]; ow < hi[kw]; ++ow) yr[ow] += wv * xr[ow * g.sw + off];
            }
          }
        }
      }
    }
  }
}

template <class T>
void conv_backprop_data_loops(const ConvGeometry& g, const T* w, const T* dy, T* dx) {
  const int64_t* lo = g.ow_lo.data();
  const int64_t* hi = g.ow_hi.data();
  const int64_t tasks = g.N * g.C;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (tasks > 1 && g.N * g.O * g.OH * g.OW * g.Cg * g.KH * g.KW > 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t n = t / g.C, c = t % g.C, grp = c / g.Cg, cg = c % g.Cg;
    T* dxp = dx + t * g.H * g.W;
    std::fill(dxp, dxp + g.H * g.W, T(0));
    for (int64_t og = 0; og < g.Og; ++og) {
      const int64_t o = grp * g.Og + og;
      const T* dyp = dy + (n * g.O + o) * g.OH * g.OW;
      const T* wc = w + (o * g.Cg + cg) * g.KH * g.KW;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          T* dxr = dxp + ih * g.W;
          const T* dyr = dyp + oh * g.OW;
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const T wv = wc[kh * g.KW + kw];
            const int64_t off = kw * g.dw - g.pl;
            if (g.sw == 1) {
              T* ds = dxr + off;
              for (int64_t ow = lo[kw]; ow < hi[kw]; ++ow) ds[ow] += wv * dyr[ow];
            } else {
              for (int64_t ow = lo[kw]; ow < hi[kw]; ++ow) dxr[ow * g.sw + off] += wv * dyr[ow];
            }
          }
        }
      }
    }
  }
}

template <class T>
void conv_backprop_filter_loops(const ConvGeometry& g, const T* x, const T* dy, T* dw) {
  const int64_t* lo = g.ow_lo.data();
  const int64_t* hi = g.ow_hi.data();
  const int64_t tasks = g.O * g.Cg;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (tasks > 1 && g.N * g.O * g.OH * g.OW * g.Cg * g.KH * g.KW > 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / g.Cg, cg = t % g.Cg, c = (o / g.Og) * g.Cg + cg;
    T* dwp = dw + t * g.KH * g.KW;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t off = kw * g.dw - g.pl;
        T acc = 0;
        for (int64_t n = 0; n < g.N; ++n) {
          const T* xc = x + (n * g.C + c) * g.H * g.W;
          const T* dyp = dy + (n * g.O + o) * g.OH * g.OW;
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            const T* xr = xc + ih * g.W;
            const T* dyr = dyp + oh * g.OW;
            for (int64_t ow = lo[kw]; ow < hi[kw]; ++ow) acc += dyr[ow] * xr[ow * g.sw + off];
          }
        }
        dwp[kh * g.KW + kw] = acc;
      }
    }
  }
}

// ---- oneDNN --------------------------------------------------------------------------------------------
// Layouts of the activations and weights given to the primitives: plain NCHW/OIHW, or whatever
// oneDNN prefers (format_tag::any: NHWC or channel-blocked, filters blocked) with reorders from
// and to the plain tensors in every run. Measured on this machine (AVX-512, LeNet and small
// ResNet shapes, batch 8..128), the preferred layouts win even with the reorders: with plain
// layouts oneDNN runs im2col + GEMM, or its reference code when there is one input channel (LeNet's
// first conv at batch 8: 16-36 ms instead of 0.06-0.09 ms), with the preferred ones its JIT/brgemm
// kernels (single thread, batch 8: 1.1-2x faster than plain, reorders included). Plain is the fallback.
enum class Layout { Plain, Any };

memory::desc data_md(int64_t n, int64_t c, int64_t h, int64_t w) {
  return memory::desc({n, c, h, w}, memory::data_type::f32, memory::format_tag::nchw);
}

memory::desc filters_md(const ConvGeometry& g) {
  if (g.G == 1) return memory::desc({g.O, g.Cg, g.KH, g.KW}, memory::data_type::f32, memory::format_tag::oihw);
  return memory::desc({g.G, g.Og, g.Cg, g.KH, g.KW}, memory::data_type::f32, memory::format_tag::goihw);
}

memory::desc any_like(const memory::desc& md) {
  return memory::desc(md.get_dims(), md.get_data_type(), memory::format_tag::any);
}

// One primitive with its arguments; arguments whose primitive layout differs from the plain
// user tensor go through kernel-owned buffers and reorders.
class DnnlStep {
 public:
  template <class PrimitiveDesc>
  void set_primitive(dnnl::primitive prim, const PrimitiveDesc& pd) {
    prim_ = std::move(prim);
    args_[DNNL_ARG_SCRATCHPAD] = dnnl::memory(pd.scratchpad_desc(), dnnl_engine());
    impl_ = pd.impl_info_str();
  }

  // oneDNN's name of the implementation ("brg_conv_fwd:avx512_core", "gemm:jit", "ref:any", ...).
  const std::string& impl() const { return impl_; }
  bool is_reference() const { return impl_.rfind("ref", 0) == 0; }

  // A user tensor read (input) or written (output) by the primitive as argument `arg` (3 slots).
  void add(int arg, const memory::desc& user_md, const memory::desc& prim_md, bool is_output) {
    PDNG_CHECK(slots_.size() < 3, "DnnlStep takes 3 tensors");
    Slot s;
    s.user = wrap(user_md);
    if (prim_md == user_md) {
      args_[arg] = s.user;
    } else {
      s.prim = dnnl::memory(prim_md, dnnl_engine());
      s.reorder = is_output ? dnnl::reorder(s.prim, s.user) : dnnl::reorder(s.user, s.prim);
      s.reordered = true;
      s.is_output = is_output;
      args_[arg] = s.prim;
    }
    slots_.push_back(std::move(s));
  }

  // Binds the three added slots in order, runs reorders, primitive, reorders.
  void run(void* slot0, void* slot1, void* slot2) {
    auto& stream = dnnl_stream();
    void* data[3] = {slot0, slot1, slot2};
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].user.set_data_handle(data[i]);
    for (auto& s : slots_)
      if (s.reordered && !s.is_output) s.reorder.execute(stream, s.user, s.prim);
    prim_.execute(stream, args_);
    for (auto& s : slots_)
      if (s.reordered && s.is_output) s.reorder.execute(stream, s.prim, s.user);
    stream.wait();
  }

 private:
  struct Slot {
    dnnl::memory user, prim;
    dnnl::reorder reorder;
    bool reordered = false, is_output = false;
  };
  dnnl::primitive prim_;
  std::string impl_;
  std::vector<Slot> slots_;
  std::unordered_map<int, dnnl::memory> args_;
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvGeometry& g, Layout layout, dnnl::prop_kind kind) {
  memory::desc src = data_md(g.N, g.C, g.H, g.W), wei = filters_md(g), dst = data_md(g.N, g.O, g.OH, g.OW);
  if (layout == Layout::Any) {
    src = any_like(src);
    wei = any_like(wei);
    dst = any_like(dst);
  }
  return dnnl::convolution_forward::primitive_desc(dnnl_engine(), kind, dnnl::algorithm::convolution_direct, src, wei,
                                                   dst, g.dnnl_strides(), g.dnnl_dilates(), g.dnnl_pad_l(),
                                                   g.dnnl_pad_r(), user_scratchpad());
}

enum class Which { Forward, BackpropData, BackpropFilter };

std::unique_ptr<DnnlStep> make_dnnl_step(const ConvGeometry& g, Which which, Layout layout) {
  std::unique_ptr<DnnlStep> step(new DnnlStep());
  const memory::desc x_md = data_md(g.N, g.C, g.H, g.W), w_md = filters_md(g), y_md = data_md(g.N, g.O, g.OH, g.OW);
  if (which == Which::Forward) {
    auto pd = forward_pd(g, layout, dnnl::prop_kind::forward_inference);
    step->set_primitive(dnnl::convolution_forward(pd), pd);
    step->add(DNNL_ARG_SRC, x_md, pd.src_desc(), false);
    step->add(DNNL_ARG_WEIGHTS, w_md, pd.weights_desc(), false);
    step->add(DNNL_ARG_DST, y_md, pd.dst_desc(), true);
  } else if (which == Which::BackpropData) {
    auto hint = forward_pd(g, layout, dnnl::prop_kind::forward_training);
    memory::desc dx = x_md, w = w_md, dy = y_md;
    if (layout == Layout::Any) { dx = any_like(dx); w = any_like(w); dy = any_like(dy); }
    dnnl::convolution_backward_data::primitive_desc pd(dnnl_engine(), dnnl::algorithm::convolution_direct, dx, w, dy,
                                                       g.dnnl_strides(), g.dnnl_dilates(), g.dnnl_pad_l(),
                                                       g.dnnl_pad_r(), hint, user_scratchpad());
    step->set_primitive(dnnl::convolution_backward_data(pd), pd);
    step->add(DNNL_ARG_WEIGHTS, w_md, pd.weights_desc(), false);
    step->add(DNNL_ARG_DIFF_DST, y_md, pd.diff_dst_desc(), false);
    step->add(DNNL_ARG_DIFF_SRC, x_md, pd.diff_src_desc(), true);
  } else {
    auto hint = forward_pd(g, layout, dnnl::prop_kind::forward_training);
    memory::desc x = x_md, dw = w_md, dy = y_md;
    if (layout == Layout::Any) { x = any_like(x); dw = any_like(dw); dy = any_like(dy); }
    dnnl::convolution_backward_weights::primitive_desc pd(dnnl_engine(), dnnl::algorithm::convolution_direct, x, dw,
                                                          dy, g.dnnl_strides(), g.dnnl_dilates(), g.dnnl_pad_l(),
                                                          g.dnnl_pad_r(), hint, user_scratchpad());
    step->set_primitive(dnnl::convolution_backward_weights(pd), pd);
    step->add(DNNL_ARG_SRC, x_md, pd.src_desc(), false);
    step->add(DNNL_ARG_DIFF_DST, y_md, pd.diff_dst_desc(), false);
    step->add(DNNL_ARG_DIFF_WEIGHTS, w_md, pd.diff_weights_desc(), true);
  }
  return step;
}

std::unique_ptr<DnnlStep> try_dnnl_step(const ConvGeometry& g, Which which, Layout layout) {
  try {
    return make_dnnl_step(g, which, layout);
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

// The preferred layouts (see Layout), except:
//  - a layout whose primitive is oneDNN's reference code loses to one that is not;
//  - backprop-data of 1x1 filters: plain (a plain GEMM, no im2col) measured 2.5x faster than the
//    blocked JIT kernel (ResNet's strided 1x1 projection, batch 128).
// nullptr: oneDNN has nothing, the loops run.
std::unique_ptr<DnnlStep> choose_dnnl_step(const ConvGeometry& g, Which which) {
  const bool plain_first = which == Which::BackpropData && g.KH == 1 && g.KW == 1;
  auto first = try_dnnl_step(g, which, plain_first ? Layout::Plain : Layout::Any);
  if (first && !first->is_reference()) return first;
  auto second = try_dnnl_step(g, which, plain_first ? Layout::Any : Layout::Plain);
  if (second && (!first || !second->is_reference())) return second;
  return first;
}

// ---- the kernels ---------------------------------------------------------------------------------------
class ConvKernel : public Kernel {
 public:
  ConvKernel(const NodeInfo& node, Which which)
      : which_(which), g_(node, node.inputs.at(0), node.inputs.at(1),
                          which == Which::Forward ? node.outputs.at(0) : node.inputs.at(2)) {
    const size_t n_in = which == Which::Forward ? 2 : 3;
    PDNG_CHECK(node.inputs.size() == n_in, node.op_type + " takes " + std::to_string(n_in) + " inputs");
    PDNG_CHECK(node.outputs.size() == 1, node.op_type + " has one output");
    dtype_ = node.inputs[0].dtype;
    check_float_dtype(dtype_);
    for (const auto& d : node.inputs) PDNG_CHECK(d.dtype == dtype_, "input dtypes differ");
    PDNG_CHECK(node.outputs[0].dtype == dtype_, "output dtype differs from the inputs'");
    const TensorDesc& expected =
        which == Which::Forward ? node.outputs[0] : (which == Which::BackpropData ? node.inputs[0] : node.inputs[1]);
    PDNG_CHECK(node.outputs[0].shape == expected.shape,
               "output " + node.outputs[0].str() + " should be " + expected.str());
    if (dtype_ == DType::Float32 && !g_.empty_problem()) step_ = choose_dnnl_step(g_, which_);
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (out[0].numel() == 0) return;
    if (g_.empty_problem()) {  // sums over nothing
      std::memset(out[0].data, 0, out[0].desc.nbytes());
      return;
    }
    if (step_) {
      // Slots in the order make_dnnl_step added them.
      switch (which_) {
        case Which::Forward: step_->run(in[0].data, in[1].data, out[0].data); break;
        case Which::BackpropData: step_->run(in[1].data, in[2].data, out[0].data); break;
        case Which::BackpropFilter: step_->run(in[0].data, in[2].data, out[0].data); break;
      }
      return;
    }
    PDNG_DISPATCH_FLOAT(dtype_, T, {
      switch (which_) {
        case Which::Forward: conv_forward_loops<T>(g_, in[0].as<T>(), in[1].as<T>(), out[0].as<T>()); break;
        case Which::BackpropData: conv_backprop_data_loops<T>(g_, in[1].as<T>(), in[2].as<T>(), out[0].as<T>()); break;
        case Which::BackpropFilter: conv_backprop_filter_loops<T>(g_, in[0].as<T>(), in[2].as<T>(), out[0].as<T>()); break;
      }
    });
  }

 private:
  Which which_;
  ConvGeometry g_;
  DType dtype_;
  std::unique_ptr<DnnlStep> step_;
};

PDNG_REGISTER_KERNEL("Convolution", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new ConvKernel(node, Which::Forward));
});
PDNG_REGISTER_KERNEL("ConvolutionBackpropData", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new ConvKernel(node, Which::BackpropData));
});
PDNG_REGISTER_KERNEL("ConvolutionBackpropFilter", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new ConvKernel(node, Which::BackpropFilter));
});

}  // namespace
}  // namespace pdng
