// Convolution, ConvolutionBackpropData, ConvolutionBackpropFilter: 2-D, data NCHW, filters
// OIHW (O, C/groups, KH, KW), explicit (possibly asymmetric) paddings, dilations, groups.
//
// float32 runs on oneDNN's convolution primitives (convolution_forward, convolution_backward_data,
// convolution_backward_weights, the backward ones with a forward primitive_desc as hint). The
// primitive may ask for blocked layouts; the kernel then reorders between the plain tensors and
// kernel-owned blocked buffers (see kLayout below). float64 (not supported by oneDNN) runs im2col
// and OpenBLAS's dgemm (ConvGemm). Direct loops are the fallback when oneDNN refuses a float32
// problem, or a float64 one exceeds OpenBLAS's 32-bit dimensions.
//
// Paddle's dilation d is oneDNN's d - 1.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "pdng/blas.h"
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

enum class Which { Forward, BackpropData, BackpropFilter };

// ---- im2col + GEMM (float64) ---------------------------------------------------------------------------
// oneDNN has no float64 convolution on CPU; these run them as products on OpenBLAS (pdng/blas.h).
// A chunk of nb images of one group is unfolded into col[Cg*KH*KW, nb*P] (P = OH*OW output
// positions; row (c, kh, kw), column (image, oh, ow)), so that even the small feature maps of the
// deep layers make one wide product instead of nb thin ones:
//   forward         Y[Og, nb*P]   = W_g[Og, CK] @ col
//   backprop data   dcol[CK, nb*P] = W_g^T @ dY[Og, nb*P], folded back (col2im) into dx
//   backprop filter dW_g[Og, CK]  += dY @ col^T, over the chunks
// Y and dY are the images' [Og, P] blocks side by side: gathered from / scattered to NCHW when the
// chunk has more than one image, read and written in place when it has one. A 1x1 filter with unit
// strides and no padding needs no unfolding for one image: its col is the image itself.
class ConvGemm {
 public:
  // Whether the products fit OpenBLAS's 32-bit dimensions (else the loops run).
  static bool fits(const ConvGeometry& g) {
    const int64_t ck = g.Cg * g.KH * g.KW, p = g.OH * g.OW;
    return blas_fits(g.Og, g.N * p, ck, ck, g.N * p, g.N * p);
  }

  ConvGemm(const ConvGeometry& g, Which which) : g_(g), which_(which) {
    ck_ = g.Cg * g.KH * g.KW;
    p_ = g.OH * g.OW;
    identity_col_ = g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 && g.pb == 0 &&
                    g.pr == 0;
    // Images per chunk: all of them while col stays within kColElements, else as few chunks as
    // that allows, of equal size.
    const int64_t per_image = std::max<int64_t>(1, ck_ * p_);
    const int64_t chunks = std::max<int64_t>(1, (g.N * per_image + kColElements - 1) / kColElements);
    nb_ = std::max<int64_t>(1, (g.N + chunks - 1) / chunks);
    chunks_ = (g.N + nb_ - 1) / nb_;
    flops_ = 2.0 * g.N * g.Og * g.G * ck_ * p_;
  }

  // Forward: (x, w) -> y; BackpropData: (w, dy) -> dx; BackpropFilter: (x, dy) -> dw.
  void run(const double* in0, const double* in1, double* out) {
    // The backend's thread count is read per run (executables of one process may differ in it).
    const int threads = flops_ < kSerialFlops ? 1 : std::max(1, num_threads());
    if (threads != threads_) plan(threads);
    const int64_t col_size = ck_ * nb_ * p_, ybuf_size = g_.Og * nb_ * p_;
#pragma omp parallel num_threads(threads_) if (threads_ > 1)
    {
      if (by_task_) {
        const int t = thread_index();
        Scratch s{col_.empty() ? nullptr : col_.data() + t * col_size, ybuf_.empty() ? nullptr : ybuf_.data() + t * ybuf_size};
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks_; ++task) run_task(task, in0, in1, out, s, 0, 1);
      } else {
        Scratch s{col_.empty() ? nullptr : col_.data(), ybuf_.empty() ? nullptr : ybuf_.data()};
        for (int64_t task = 0; task < tasks_; ++task) run_task(task, in0, in1, out, s, thread_index(), thread_count());
      }
    }
  }

 private:
  // Tasks run whole on one thread each when there are enough of them to share evenly: (chunk,
  // group) pairs, or only groups for the filter gradient (whose chunks add into one dW_g); else the
  // team shares every task. Buffers: one set per thread for whole tasks, one shared set else.
  void plan(int threads) {
    threads_ = threads;
    tasks_ = which_ == Which::BackpropFilter ? g_.G : chunks_ * g_.G;
    by_task_ = threads > 1 && (tasks_ % threads == 0 || tasks_ >= 4 * threads);
    const int64_t buffers = by_task_ ? threads : 1;
    col_.clear();
    ybuf_.clear();
    if (!(identity_col_ && nb_ == 1)) col_.resize(static_cast<size_t>(buffers * ck_ * nb_ * p_));
    if (nb_ > 1) ybuf_.resize(static_cast<size_t>(buffers * g_.Og * nb_ * p_));
  }

  // col (and Y/dY when gathered) of 32 MB at most per buffer.
  static constexpr int64_t kColElements = int64_t(1) << 22;
  // Below this many flops a convolution runs on one thread (as the matmul's threshold).
  static constexpr double kSerialFlops = 2e6;

  struct Scratch {
    double* col;
    double* ybuf;
  };

  // One task, shared by `parts` threads that all call it (part = the caller's index; 1: alone).
  // Phases that depend on each other are separated by barriers when shared.
  void run_task(int64_t task, const double* in0, const double* in1, double* out, const Scratch& s, int part,
                int parts) {
    const bool shared = parts > 1;
    auto barrier = [shared] {
      if (shared) {
#pragma omp barrier
      }
    };
    if (which_ == Which::BackpropFilter) {
      const int64_t grp = task;
      for (int64_t chunk = 0; chunk < chunks_; ++chunk) {
        const int64_t n0 = chunk * nb_, nb = std::min(nb_, g_.N - n0);
        const double* x = in0;
        const double* dy = in1;
        const int64_t ld = nb * p_;
        const double* dyp = gather_or_direct(dy, n0, nb, grp, s.ybuf, part, parts);
        const double* col = unfold_or_direct(x, n0, nb, grp, s.col, part, parts);
        barrier();
        double* dwg = out + grp * g_.Og * ck_;
        dgemm_share(part, parts, false, true, g_.Og, ck_, ld, dyp, ld, col, ld, chunk == 0 ? 0.0 : 1.0, dwg, ck_);
        barrier();
      }
      return;
    }
    const int64_t chunk = task / g_.G, grp = task % g_.G;
    const int64_t n0 = chunk * nb_, nb = std::min(nb_, g_.N - n0), ld = nb * p_;
    const double* w = which_ == Which::Forward ? in1 : in0;
    const double* wg = w + grp * g_.Og * ck_;
    if (which_ == Which::Forward) {
      const double* col = unfold_or_direct(in0, n0, nb, grp, s.col, part, parts);
      barrier();
      double* y = nb == 1 ? out + (n0 * g_.O + grp * g_.Og) * p_ : s.ybuf;
      dgemm_share(part, parts, false, false, g_.Og, ld, ck_, wg, ck_, col, ld, 0.0, y, ld);
      if (nb > 1) {
        barrier();
        scatter(s.ybuf, n0, nb, grp, out, part, parts);
      }
      barrier();
    } else {
      const double* dyp = gather_or_direct(in1, n0, nb, grp, s.ybuf, part, parts);
      barrier();
      if (identity_col_ && nb == 1) {  // dx of the image's group channels, straight from the product
        dgemm_share(part, parts, true, false, ck_, ld, g_.Og, wg, ck_, dyp, ld, 0.0,
                    out + (n0 * g_.C + grp * g_.Cg) * p_, ld);
      } else {
        dgemm_share(part, parts, true, false, ck_, ld, g_.Og, wg, ck_, dyp, ld, 0.0, s.col, ld);
        barrier();
        fold(s.col, n0, nb, grp, out, part, parts);
      }
      barrier();
    }
  }

  // Rows [lo, hi) of `items` for share `part` of `parts`.
  static void share(int64_t items, int part, int parts, int64_t* lo, int64_t* hi) {
    *lo = items * part / parts;
    *hi = items * (part + 1) / parts;
  }

  // col of images [n0, n0 + nb) of group grp, or the image itself when that is its col.
  const double* unfold_or_direct(const double* x, int64_t n0, int64_t nb, int64_t grp, double* col, int part,
                                 int parts) const {
    if (identity_col_ && nb == 1) return x + (n0 * g_.C + grp * g_.Cg) * p_;
    const ConvGeometry& g = g_;
    const int64_t ld = nb * p_;
    int64_t c0, c1;
    share(g.Cg, part, parts, &c0, &c1);
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t kh = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          double* row = col + ((c * g.KH + kh) * g.KW + kw) * ld;
          const int64_t lo = g.ow_lo[kw], hi = g.ow_hi[kw], off = kw * g.dw - g.pl;
          for (int64_t i = 0; i < nb; ++i) {
            const double* xc = x + ((n0 + i) * g.C + grp * g.Cg + c) * g.H * g.W;
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              double* dst = row + i * p_ + oh * g.OW;
              const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
              if (ih < 0 || ih >= g.H) {
                std::fill(dst, dst + g.OW, 0.0);
                continue;
              }
              const double* xr = xc + ih * g.W + off;
              std::fill(dst, dst + lo, 0.0);
              if (g.sw == 1) std::copy(xr + lo, xr + hi, dst + lo);
              else for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = xr[ow * g.sw];
              std::fill(dst + hi, dst + g.OW, 0.0);
            }
          }
        }
    return col;
  }

  // Adds col (the unfolded gradient) into dx of images [n0, n0 + nb), group grp (zeroed first).
  void fold(const double* col, int64_t n0, int64_t nb, int64_t grp, double* dx, int part, int parts) const {
    const ConvGeometry& g = g_;
    const int64_t ld = nb * p_;
    int64_t c0, c1;
    share(g.Cg, part, parts, &c0, &c1);
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t i = 0; i < nb; ++i) {
        double* xc = dx + ((n0 + i) * g.C + grp * g.Cg + c) * g.H * g.W;
        std::fill(xc, xc + g.H * g.W, 0.0);
        for (int64_t kh = 0; kh < g.KH; ++kh)
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const double* row = col + ((c * g.KH + kh) * g.KW + kw) * ld + i * p_;
            const int64_t lo = g.ow_lo[kw], hi = g.ow_hi[kw], off = kw * g.dw - g.pl;
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              double* xr = xc + ih * g.W + off;
              const double* src = row + oh * g.OW;
              if (g.sw == 1) for (int64_t ow = lo; ow < hi; ++ow) xr[ow] += src[ow];
              else for (int64_t ow = lo; ow < hi; ++ow) xr[ow * g.sw] += src[ow];
            }
          }
      }
  }

  // dY[Og, nb*P] of images [n0, n0 + nb), group grp: in place for one image, else gathered.
  const double* gather_or_direct(const double* dy, int64_t n0, int64_t nb, int64_t grp, double* buf, int part,
                                 int parts) const {
    if (nb == 1) return dy + (n0 * g_.O + grp * g_.Og) * p_;
    int64_t o0, o1;
    share(g_.Og, part, parts, &o0, &o1);
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t i = 0; i < nb; ++i) {
        const double* src = dy + ((n0 + i) * g_.O + grp * g_.Og + o) * p_;
        std::copy(src, src + p_, buf + o * nb * p_ + i * p_);
      }
    return buf;
  }

  // The inverse of the gather: Y[Og, nb*P] into y (NCHW).
  void scatter(const double* buf, int64_t n0, int64_t nb, int64_t grp, double* y, int part, int parts) const {
    int64_t o0, o1;
    share(g_.Og, part, parts, &o0, &o1);
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t i = 0; i < nb; ++i) {
        const double* src = buf + o * nb * p_ + i * p_;
        std::copy(src, src + p_, y + ((n0 + i) * g_.O + grp * g_.Og + o) * p_);
      }
  }

  ConvGeometry g_;
  Which which_;
  int64_t ck_ = 0, p_ = 0, nb_ = 1, chunks_ = 1, tasks_ = 1;
  bool identity_col_ = false, by_task_ = false;
  double flops_ = 0;
  int threads_ = 0;  // of the current plan (0: none yet)
  std::vector<double> col_, ybuf_;
};

// ---- loops (the fallback of both dtypes) ---------------------------------------------------------
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
    if (dtype_ == DType::Float64 && !g_.empty_problem() && ConvGemm::fits(g_)) gemm_.reset(new ConvGemm(g_, which_));
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
    if (gemm_) {
      switch (which_) {
        case Which::Forward: gemm_->run(in[0].as<double>(), in[1].as<double>(), out[0].as<double>()); break;
        case Which::BackpropData: gemm_->run(in[1].as<double>(), in[2].as<double>(), out[0].as<double>()); break;
        case Which::BackpropFilter: gemm_->run(in[0].as<double>(), in[2].as<double>(), out[0].as<double>()); break;
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
  std::unique_ptr<ConvGemm> gemm_;
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
