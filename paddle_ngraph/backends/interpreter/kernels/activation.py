"""Kernels of the activations (ir/ops/activation.py): Relu, Tanh, Sigmoid, GELU, Softmax, and their
backprops.

The formulas, and where it changes float32 results their order of operations, follow Paddle's
CPU kernels (paddle/phi/kernels/cpu and funcs), so that results match Paddle to about 1e-5.
Scalars are cast to the data's dtype first, as Paddle's ``static_cast<T>`` does.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

from .registry import kernel, output_dtype


@kernel("Relu")
def _relu(node, args, transport):
    return [np.maximum(args[0], 0).astype(output_dtype(node))]


@kernel("Tanh")
def _tanh(node, args, transport):
    return [np.asarray(np.tanh(args[0])).astype(output_dtype(node), copy=False)]


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


@kernel("Sigmoid")
def _sigmoid_k(node, args, transport):
    return [np.asarray(_sigmoid(args[0])).astype(output_dtype(node), copy=False)]


@kernel("ReluBackprop")
def _relu_bp(node, args, transport):
    out, delta = args
    return [np.where(out > 0, delta, 0).astype(delta.dtype)]


@kernel("TanhBackprop")
def _tanh_bp(node, args, transport):
    out, delta = args
    return [(delta * (1 - out * out)).astype(delta.dtype)]


@kernel("SigmoidBackprop")
def _sigmoid_bp(node, args, transport):
    out, delta = args
    return [(delta * out * (1 - out)).astype(delta.dtype)]


# --- GELU ---------------------------------------------------------------------------------------------
_GELU_ALPHA = math.sqrt(2.0 / math.pi)  # M_2_SQRTPI * M_SQRT1_2


_GELU_CONSTANT = 0.044715


@kernel("Gelu")
def _gelu(node, args, transport):
    x = args[0]
    t = x.dtype.type
    if node.attrs["approximate"]:
        inner = np.tanh(t(_GELU_ALPHA) * (x + t(_GELU_CONSTANT) * x * x * x))
    else:
        inner = erf(x * t(math.sqrt(0.5)))
    return [(x * t(0.5) * (t(1) + inner)).astype(x.dtype)]


@kernel("GeluBackprop")
def _gelu_bp(node, args, transport):
    x, delta = args
    t = x.dtype.type
    if node.attrs["approximate"]:
        alpha = t(_GELU_ALPHA)
        beta = alpha * t(_GELU_CONSTANT) * t(3)
        x_sq = x * x
        tanh_out = np.tanh(alpha * x * (t(1) + t(_GELU_CONSTANT) * x_sq))
        slope = (t(1) - tanh_out * tanh_out) * (alpha + beta * x_sq)
        grad = delta * t(0.5) * (t(1) + tanh_out + x * slope)
    else:
        first = t(0.5) * (t(1) + erf(x * t(math.sqrt(0.5))))
        second = t(1 / math.sqrt(2 * math.pi)) * x * np.exp(t(-0.5) * x * x)
        grad = delta * (first + second)
    return [grad.astype(x.dtype)]


# --- softmax ----------------------------------------------------------------------------------------
def _softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


@kernel("Softmax")
def _softmax_k(node, args, transport):
    return [_softmax(args[0], node.attrs["axis"]).astype(output_dtype(node))]


@kernel("SoftmaxBackprop")
def _softmax_bp(node, args, transport):
    out, delta = args
    axis = node.attrs["axis"]
    return [(out * (delta - np.sum(delta * out, axis=axis, keepdims=True))).astype(delta.dtype)]
