// A Paddle custom operator the engine cannot know: y = x * |x|, dx = 2 |x| dy.
// The fallback tests place it between engine segments (tests/transpiler/test_fallback.py).
#include <cmath>
#include <vector>

#include "paddle/extension.h"

std::vector<paddle::Tensor> SignedSquareForward(const paddle::Tensor& x) {
  auto out = paddle::empty(x.shape(), x.dtype(), x.place());
  const float* in = x.data<float>();
  float* y = out.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) y[i] = in[i] * std::fabs(in[i]);
  return {out};
}

std::vector<paddle::Tensor> SignedSquareBackward(const paddle::Tensor& x, const paddle::Tensor& grad_out) {
  auto grad_x = paddle::empty(x.shape(), x.dtype(), x.place());
  const float* in = x.data<float>();
  const float* dy = grad_out.data<float>();
  float* dx = grad_x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dx[i] = 2.0f * std::fabs(in[i]) * dy[i];
  return {grad_x};
}

PD_BUILD_OP(pdng_signed_square)
    .Inputs({"X"})
    .Outputs({"Out"})
    .SetKernelFn(PD_KERNEL(SignedSquareForward));

PD_BUILD_GRAD_OP(pdng_signed_square)
    .Inputs({"X", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .SetKernelFn(PD_KERNEL(SignedSquareBackward));
