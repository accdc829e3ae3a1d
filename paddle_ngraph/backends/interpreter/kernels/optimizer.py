"""Kernels of the optimizer updates (ir/ops/optimizer.py): Paddle's CPU kernels' formulas
(phi/kernels/funcs/adam_functors.h, impl/lamb_kernel_impl.h, cpu/lars_momentum_kernel.cc) in
their order of operations."""
from __future__ import annotations

import numpy as np

from .eigen_sum import eigen_sum_squares
from .registry import kernel


@kernel("SGDUpdate")
def _sgd(node, args, transport):
    param, grad, lr = args
    return [(param - lr.reshape(()).astype(param.dtype) * grad).astype(param.dtype)]


@kernel("MomentumUpdate")
def _momentum(node, args, transport):
    param, grad, lr, velocity = args
    a = node.attrs
    lr = lr.reshape(()).astype(param.dtype)
    mu = param.dtype.type(a["mu"])
    grad = grad * param.dtype.type(a["rescale_grad"])
    if a["regularization_coeff"]:
        grad = grad + param.dtype.type(a["regularization_coeff"]) * param
    v_out = velocity * mu + grad
    if a["use_nesterov"]:
        p_out = param - (grad + v_out * mu) * lr
    else:
        p_out = param - lr * v_out
    return [p_out.astype(param.dtype), v_out.astype(param.dtype)]


@kernel("AdamUpdate")
def _adam(node, args, transport):
    param, grad, lr, m1, m2, b1p, b2p = args
    a = node.attrs
    t = param.dtype.type
    beta1, beta2, eps = t(a["beta1"]), t(a["beta2"]), t(a["epsilon"])
    lr = lr.reshape(()).astype(param.dtype) * t(a["lr_ratio"])
    b1, b2 = b1p.reshape(()).astype(param.dtype), b2p.reshape(()).astype(param.dtype)
    if a["weight_decay"]:
        # AdamW: decoupled decay applied to the parameter before the Adam step.
        param = param * (t(1) - lr * t(a["weight_decay"]))
    m1_out = beta1 * m1 + (t(1) - beta1) * grad
    m2_out = beta2 * m2 + (t(1) - beta2) * grad * grad
    lr_t = lr * np.sqrt(t(1) - b2) / (t(1) - b1)
    p_out = param - lr_t * (m1_out / (np.sqrt(m2_out) + eps * np.sqrt(t(1) - b2)))
    return [p_out.astype(param.dtype), m1_out.astype(param.dtype), m2_out.astype(param.dtype),
            (b1p * beta1).astype(b1p.dtype), (b2p * beta2).astype(b2p.dtype)]


@kernel("LambUpdate")
def _lamb(node, args, transport):
    """Paddle's CPU lamb (phi/kernels/impl/lamb_kernel_impl.h), in its order of operations."""
    param, grad, lr, m1, m2, b1p, b2p = args
    a = node.attrs
    t = param.dtype.type
    beta1, beta2, eps, decay = t(a["beta1"]), t(a["beta2"]), t(a["epsilon"]), t(a["weight_decay"])
    m1_out = beta1 * m1 + (t(1) - beta1) * grad
    m2_out = beta2 * m2 + (t(1) - beta2) * grad * grad
    m1_hat = m1_out / (t(1) - b1p.reshape(()).astype(param.dtype))
    m2_hat = m2_out / (t(1) - b2p.reshape(()).astype(param.dtype))
    step = m1_hat / (np.sqrt(m2_hat) + eps) + decay * param
    ratio = t(1)
    # Paddle computes the norms only in these cases; otherwise both stay 0 and the ratio is 1.
    if decay > 0 or a["always_adapt"]:
        p_norm, s_norm = np.sqrt(np.sum(param * param)), np.sqrt(np.sum(step * step))
        if p_norm > 0 and s_norm > 0:
            ratio = t(p_norm / s_norm)
    p_out = param - lr.reshape(()).astype(param.dtype) * ratio * step
    return [p_out.astype(param.dtype), m1_out.astype(param.dtype), m2_out.astype(param.dtype),
            (b1p * beta1).astype(b1p.dtype), (b2p * beta2).astype(b2p.dtype)]


@kernel("LarsMomentumUpdate")
def _lars_momentum(node, args, transport):
    """Paddle's CPU lars_momentum for one parameter, in its order of operations. Its attributes
    are C++ floats, cast to the parameter's dtype, hence the round trip through float32."""
    param, grad, lr, velocity = args
    a = node.attrs
    t = param.dtype.type

    def attr(key):
        return t(np.float32(a[key]))

    mu, coeff, decay, eps = attr("mu"), attr("lars_coeff"), attr("lars_weight_decay"), attr("epsilon")
    grad = attr("rescale_grad") * grad
    p_norm, g_norm = np.sqrt(eigen_sum_squares(param)), np.sqrt(eigen_sum_squares(grad))
    local_lr = lr.reshape(()).astype(param.dtype)[()]
    if decay > 0 and p_norm > 0 and g_norm > 0:
        local_lr = t(t(t(local_lr * coeff) * p_norm) / t(t(g_norm + t(decay * p_norm)) + eps))
    v_out = velocity * mu + local_lr * (grad + decay * param)
    p_out = param - v_out
    return [p_out.astype(param.dtype), v_out.astype(param.dtype)]
