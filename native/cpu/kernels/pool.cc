// MaxPool, MaxPoolBackprop, AvgPool, AvgPoolBackprop: 2-D, NCHW, explicit paddings, ceil_mode,
// exclusive (average over the non-padding elements only), adaptive (``window`` is the output size,
// bins of near-equal size as Paddle's AdaptStartIndex / AdaptEndIndex).
//
// float32 non-adaptive pooling runs on oneDNN's pooling primitives (plain NCHW):
//  - ceil_mode: the output size comes from the node; the right padding given to oneDNN is what
//    that output size needs (the last windows may reach past the attribute's pads_end).
//  - max: padding never wins, so the extra right padding changes nothing.
//  - average, exclusive: oneDNN's avg_exclude_padding counts the data elements of each window, as
//    the interpreter does.
//  - average, not exclusive: oneDNN's avg_include_padding divides by the full window; the
//    interpreter (Paddle) by the window clipped to the data plus the attribute's paddings. That
//    only differs for the windows that reach past pads_end (ceil_mode); the kernel rescales those
//    outputs (forward) or the output gradients that feed them (backward).
//  - MaxPoolBackprop: oneDNN's backward needs the workspace (argmax) of a forward run, so the
//    kernel reruns the forward primitive into buffers it owns, then runs the backward. oneDNN
//    keeps the first maximum of a window in row-major order (strict comparison), as Paddle and
//    the interpreter do (checked by tests with many ties).
// float64, adaptive pooling, and any problem oneDNN refuses run plain loops that follow the
// interpreter window by window.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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

enum class Kind { Max, Avg };

// Windows along one spatial dim: data range [lo, hi) of each output position, and the divisor
// size of an average (the window clipped to the padded data, or to the data if exclusive).
struct Windows {
  std::vector<int64_t> lo, hi, padded;
};

struct PoolGeometry {
  Kind kind;
  bool backprop;
  int64_t N, C, H, W, OH, OW;
  int64_t KH, KW, sh, sw, pt, pl, pb, pr;
  bool ceil_mode, adaptive, exclusive;
  Windows wh, ww;

  PoolGeometry(const NodeInfo& node, Kind kind_, bool backprop_) : kind(kind_), backprop(backprop_) {
    const Attrs& a = node.attrs;
    PDNG_CHECK(node.inputs.size() == (backprop ? 2u : 1u), node.op_type + " takes " + (backprop ? "(data, delta)" : "(data)"));
    PDNG_CHECK(node.outputs.size() == 1, node.op_type + " has one output");
    const TensorDesc& x = node.inputs[0];
    const TensorDesc& y = backprop ? node.inputs[1] : node.outputs[0];
    PDNG_CHECK(x.rank() == 4 && y.rank() == 4, "data " + x.str() + " and output " + y.str() + " must be 4-D (NCHW)");
    N = x.shape[0]; C = x.shape[1]; H = x.shape[2]; W = x.shape[3];
    OH = y.shape[2]; OW = y.shape[3];
    PDNG_CHECK(y.shape[0] == N && y.shape[1] == C, "output " + y.str() + " does not match data " + x.str());
    auto window = hw_attr(a, "window"), strides = hw_attr(a, "strides");
    auto begin = hw_attr(a, "pads_begin"), end = hw_attr(a, "pads_end");
    KH = window[0]; KW = window[1]; sh = strides[0]; sw = strides[1];
    pt = begin[0]; pl = begin[1]; pb = end[0]; pr = end[1];
    ceil_mode = a.get_bool("ceil_mode");
    adaptive = a.get_bool("adaptive");
    // MaxPool has no divisor and no such attribute; adaptive averages are always exclusive.
    exclusive = adaptive || kind == Kind::Max || a.get_bool("exclusive");
    if (adaptive) {
      PDNG_CHECK(OH == KH && OW == KW, "adaptive pooling output " + y.str() + " should have the size of window");
    } else {
      PDNG_CHECK(KH > 0 && KW > 0 && sh > 0 && sw > 0, "window and strides must be > 0");
      auto count = [&](int64_t size, int64_t k, int64_t s, int64_t p0, int64_t p1) {
        const int64_t span = size + p0 + p1 - k;
        return (span + (ceil_mode ? s - 1 : 0)) / s + 1;
      };
      PDNG_CHECK(OH == count(H, KH, sh, pt, pb) && OW == count(W, KW, sw, pl, pr),
                 "output " + y.str() + " does not match the pooling of " + x.str());
    }
    wh = windows(H, OH, KH, sh, pt, pb);
    ww = windows(W, OW, KW, sw, pl, pr);
  }

  Windows windows(int64_t size, int64_t out, int64_t k, int64_t s, int64_t p0, int64_t p1) const {
    Windows w;
    for (int64_t i = 0; i < out; ++i) {
      int64_t start, stop, padded;
      if (adaptive) {
        start = (i * size) / out;
        stop = ((i + 1) * size + out - 1) / out;
        padded = stop - start;
      } else {
        start = i * s - p0;
        stop = std::min(start + k, size + p1);
        padded = stop - start;
      }
      w.lo.push_back(std::max<int64_t>(start, 0));
      w.hi.push_back(std::min(stop, size));
      w.padded.push_back(padded);
    }
    return w;
  }

  int64_t divisor(int64_t oh, int64_t ow) const {
    if (exclusive) return (wh.hi[oh] - wh.lo[oh]) * (ww.hi[ow] - ww.lo[ow]);
    return wh.padded[oh] * ww.padded[ow];
  }
};

// ---- loops (float64, adaptive pooling, fallback) ----------------------------------------------------------
template <class T>
bool parallel_planes(const PoolGeometry& g) {
  return g.N * g.C > 1 && g.N * g.C * g.H * g.W > 16384;
}

template <class T>
void pool_forward_loops(const PoolGeometry& g, const T* x, T* y) {
  const int64_t planes = g.N * g.C;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (parallel_planes<T>(g))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    T* yp = y + p * g.OH * g.OW;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t h0 = g.wh.lo[oh], h1 = g.wh.hi[oh], w0 = g.ww.lo[ow], w1 = g.ww.hi[ow];
        T r;
        if (g.kind == Kind::Max) {
          T m = -std::numeric_limits<T>::infinity();
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const T v = xp[h * g.W + w];
              if (v > m || std::isnan(v)) m = v;  // NaN sticks (v > NaN is false), as numpy's max
            }
          r = m;
        } else {
          T s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += xp[h * g.W + w];
          r = s / static_cast<T>(g.divisor(oh, ow));
        }
        yp[oh * g.OW + ow] = r;
      }
    }
  }
}

template <class T>
void pool_backprop_loops(const PoolGeometry& g, const T* x, const T* dy, T* dx) {
  const int64_t planes = g.N * g.C;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (parallel_planes<T>(g))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    const T* dyp = dy + p * g.OH * g.OW;
    T* dxp = dx + p * g.H * g.W;
    std::fill(dxp, dxp + g.H * g.W, T(0));
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t h0 = g.wh.lo[oh], h1 = g.wh.hi[oh], w0 = g.ww.lo[ow], w1 = g.ww.hi[ow];
        if (h0 >= h1 || w0 >= w1) continue;
        const T d = dyp[oh * g.OW + ow];
        if (g.kind == Kind::Max) {
          // The first maximum in row-major order (numpy's argmax: a NaN counts as the maximum).
          int64_t best = h0 * g.W + w0;
          T m = xp[best];
          for (int64_t h = h0; h < h1 && !std::isnan(m); ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const T v = xp[h * g.W + w];
              if (v > m || std::isnan(v)) {
                m = v;
                best = h * g.W + w;
                if (std::isnan(v)) break;
              }
            }
          dxp[best] += d;
        } else {
          // Paddle's Pool2dGradFunctor scales by a float32 1/count, whatever the dtype.
          const T scale = static_cast<T>(static_cast<float>(1.0 / static_cast<double>(g.divisor(oh, ow))));
          const T v = scale * d;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) dxp[h * g.W + w] += v;
        }
      }
    }
  }
}

// ---- oneDNN (float32) -----------------------------------------------------------------------------------
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

class DnnlPool {
 public:
  // Throws dnnl::error (or Error) when oneDNN cannot do it.
  explicit DnnlPool(const PoolGeometry& g) : g_(g) {
    PDNG_CHECK(!g.adaptive, "adaptive pooling runs loops");
    // Right paddings consistent with the output size (ceil_mode may need more than pads_end).
    const int64_t pb = right_pad(g.H, g.OH, g.KH, g.sh, g.pt, g.pb);
    const int64_t pr = right_pad(g.W, g.OW, g.KW, g.sw, g.pl, g.pr);
    const auto alg = g.kind == Kind::Max ? dnnl::algorithm::pooling_max
                     : g.exclusive       ? dnnl::algorithm::pooling_avg_exclude_padding
                                         : dnnl::algorithm::pooling_avg_include_padding;
    const memory::dims strides{g.sh, g.sw}, kernel{g.KH, g.KW}, dilation{0, 0}, pad_l{g.pt, g.pl}, pad_r{pb, pr};
    const memory::desc x_md({g.N, g.C, g.H, g.W}, memory::data_type::f32, memory::format_tag::nchw);
    const memory::desc y_md({g.N, g.C, g.OH, g.OW}, memory::data_type::f32, memory::format_tag::nchw);

    // avg_include_padding divides by KH * KW; the interpreter by the window clipped to the
    // attribute paddings. Factors for the outputs where they differ (ceil_mode only).
    if (g.kind == Kind::Avg && !g.exclusive) {
      scale_.assign(static_cast<size_t>(g.OH * g.OW), 1.0f);
      bool any = false;
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t d = g.divisor(oh, ow);
          if (d != g.KH * g.KW) {
            PDNG_CHECK(d > 0, "empty pooling window");
            scale_[oh * g.OW + ow] = static_cast<float>(static_cast<double>(g.KH * g.KW) / static_cast<double>(d));
            any = true;
          }
        }
      if (!any) scale_.clear();
    }

    auto kind = g.backprop ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    dnnl::pooling_forward::primitive_desc fwd(dnnl_engine(), kind, alg, x_md, y_md, strides, kernel, dilation, pad_l,
                                              pad_r, user_scratchpad());
    if (!g.backprop) {
      fwd_ = dnnl::pooling_forward(fwd);
      x_ = wrap(x_md);
      y_ = wrap(y_md);
      fwd_args_ = {{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_},
                   {DNNL_ARG_SCRATCHPAD, dnnl::memory(fwd.scratchpad_desc(), dnnl_engine())}};
      return;
    }
    dnnl::pooling_backward::primitive_desc bwd(dnnl_engine(), alg, x_md, y_md, strides, kernel, dilation, pad_l, pad_r,
                                               fwd, user_scratchpad());
    bwd_ = dnnl::pooling_backward(bwd);
    dy_ = wrap(y_md);
    dx_ = wrap(x_md);
    bwd_args_ = {{DNNL_ARG_DIFF_DST, dy_}, {DNNL_ARG_DIFF_SRC, dx_},
                 {DNNL_ARG_SCRATCHPAD, dnnl::memory(bwd.scratchpad_desc(), dnnl_engine())}};
    if (g.kind == Kind::Max) {
      // The forward rerun, into kernel-owned output and workspace.
      fwd_ = dnnl::pooling_forward(fwd);
      x_ = wrap(x_md);
      y_ = dnnl::memory(y_md, dnnl_engine());
      dnnl::memory ws(fwd.workspace_desc(), dnnl_engine());
      fwd_args_ = {{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_}, {DNNL_ARG_WORKSPACE, ws},
                   {DNNL_ARG_SCRATCHPAD, dnnl::memory(fwd.scratchpad_desc(), dnnl_engine())}};
      bwd_args_[DNNL_ARG_WORKSPACE] = ws;
    }
    if (!scale_.empty()) scaled_dy_.resize(static_cast<size_t>(g.N * g.C * g.OH * g.OW));
  }

  void forward(const float* x, float* y) {
    x_.set_data_handle(const_cast<float*>(x));
    y_.set_data_handle(y);
    fwd_.execute(dnnl_stream(), fwd_args_);
    dnnl_stream().wait();
    if (!scale_.empty()) {
      const int64_t planes = g_.N * g_.C, area = g_.OH * g_.OW;
      for (int64_t p = 0; p < planes; ++p)
        for (int64_t i = 0; i < area; ++i) y[p * area + i] *= scale_[i];
    }
  }

  void backprop(const float* x, const float* dy, float* dx) {
    auto& stream = dnnl_stream();
    if (g_.kind == Kind::Max) {
      x_.set_data_handle(const_cast<float*>(x));
      fwd_.execute(stream, fwd_args_);
    }
    if (!scale_.empty()) {
      const int64_t planes = g_.N * g_.C, area = g_.OH * g_.OW;
      for (int64_t p = 0; p < planes; ++p)
        for (int64_t i = 0; i < area; ++i) scaled_dy_[p * area + i] = dy[p * area + i] * scale_[i];
      dy = scaled_dy_.data();
    }
    dy_.set_data_handle(const_cast<float*>(dy));
    dx_.set_data_handle(dx);
    bwd_.execute(stream, bwd_args_);
    stream.wait();
  }

 private:
  // The right padding for which oneDNN's (floor) output size formula gives `out`.
  static int64_t right_pad(int64_t size, int64_t out, int64_t k, int64_t s, int64_t p0, int64_t p1) {
    if ((size + p0 + p1 - k) / s + 1 == out) return p1;
    const int64_t p = (out - 1) * s + k - size - p0;
    PDNG_CHECK(p >= 0 && (size + p0 + p - k) / s + 1 == out, "no right padding gives the output size");
    return p;
  }

  PoolGeometry g_;
  dnnl::pooling_forward fwd_;
  dnnl::pooling_backward bwd_;
  dnnl::memory x_, y_, dy_, dx_;
  std::unordered_map<int, dnnl::memory> fwd_args_, bwd_args_;
  std::vector<float> scale_, scaled_dy_;
};

// ---- the kernels ---------------------------------------------------------------------------------------
class PoolKernel : public Kernel {
 public:
  PoolKernel(const NodeInfo& node, Kind kind, bool backprop) : g_(node, kind, backprop) {
    dtype_ = node.inputs[0].dtype;
    check_float_dtype(dtype_);
    for (const auto& d : node.inputs) PDNG_CHECK(d.dtype == dtype_, "input dtypes differ");
    PDNG_CHECK(node.outputs[0].dtype == dtype_, "output dtype differs from the input's");
    PDNG_CHECK(node.outputs[0].shape == (backprop ? node.inputs[0].shape : Shape{g_.N, g_.C, g_.OH, g_.OW}),
               "unexpected output " + node.outputs[0].str());
    const bool empty = node.inputs[0].numel() == 0 || g_.OH * g_.OW == 0;
    if (dtype_ == DType::Float32 && !g_.adaptive && !empty) {
      try {
        dnnl_.reset(new DnnlPool(g_));
      } catch (const dnnl::error&) {
        dnnl_.reset();
      } catch (const Error&) {
        dnnl_.reset();
      }
    }
  }

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    if (out[0].numel() == 0) return;
    if (in[0].numel() == 0 || g_.OH * g_.OW == 0) {  // nothing pooled: a zero gradient
      std::memset(out[0].data, 0, out[0].desc.nbytes());
      return;
    }
    if (dnnl_) {
      if (g_.backprop) dnnl_->backprop(in[0].as<float>(), in[1].as<float>(), out[0].as<float>());
      else dnnl_->forward(in[0].as<float>(), out[0].as<float>());
      return;
    }
    PDNG_DISPATCH_FLOAT(dtype_, T, {
      if (g_.backprop) pool_backprop_loops<T>(g_, in[0].as<T>(), in[1].as<T>(), out[0].as<T>());
      else pool_forward_loops<T>(g_, in[0].as<T>(), out[0].as<T>());
    });
  }

 private:
  PoolGeometry g_;
  DType dtype_;
  std::unique_ptr<DnnlPool> dnnl_;
};

PDNG_REGISTER_KERNEL("MaxPool", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new PoolKernel(node, Kind::Max, false));
});
PDNG_REGISTER_KERNEL("MaxPoolBackprop", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new PoolKernel(node, Kind::Max, true));
});
PDNG_REGISTER_KERNEL("AvgPool", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new PoolKernel(node, Kind::Avg, false));
});
PDNG_REGISTER_KERNEL("AvgPoolBackprop", [](const NodeInfo& node) {
  return std::unique_ptr<Kernel>(new PoolKernel(node, Kind::Avg, true));
});

}  // namespace
}  // namespace pdng
