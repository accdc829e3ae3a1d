"""Kernels of the core, elementwise, matmul, reduction, loss, optimizer and collective ops."""
from __future__ import annotations

import numpy as np

from ....errors import ExecutionError
from ....ir import bfloat16
from ....ir.types import DType
from .precision import compute_inputs
from .registry import KERNELS, kernel


def _dtype(node, i=0):
    return node.output_types[i].dtype.numpy


# --- core -----------------------------------------------------------------------------
@kernel("Constant")
def _constant(node, args, transport):
    return [node.attrs["value"]]


@kernel("Convert")
def _convert(node, args, transport):
    # bfloat16 travels as its bits: widen them to read the values, round to make them.
    source, target = node.inputs[0].type.dtype, node.output_types[0].dtype
    x = bfloat16.widen(args[0]) if source is DType.bfloat16 else args[0]
    if target is DType.bfloat16:
        return [x.copy() if source is DType.bfloat16 else bfloat16.to_bfloat16(x)]
    with np.errstate(invalid="ignore"):  # NaN or inf to an integer: the C cast's value, as Paddle
        return [x.astype(_dtype(node))]


@kernel("Reshape")
def _reshape(node, args, transport):
    return [np.reshape(args[0], node.attrs["shape"])]


@kernel("BroadcastTo")
def _broadcast_to(node, args, transport):
    return [np.ascontiguousarray(np.broadcast_to(args[0], args[1].shape))]


@kernel("Transpose")
def _transpose(node, args, transport):
    return [np.ascontiguousarray(np.transpose(args[0], node.attrs["perm"]))]


@kernel("Concat")
def _concat(node, args, transport):
    return [np.concatenate(args, axis=node.attrs["axis"])]


@kernel("Slice")
def _slice(node, args, transport):
    index = [slice(None)] * args[0].ndim
    for axis, start, end in zip(node.attrs["axes"], node.attrs["starts"], node.attrs["ends"]):
        index[axis] = slice(start, end)
    return [np.ascontiguousarray(args[0][tuple(index)])]


# --- elementwise ------------------------------------------------------------------------
_BINARY = {
    "Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Divide": np.divide,
    "Maximum": np.maximum, "Minimum": np.minimum, "Power": np.power,
    "Equal": np.equal, "NotEqual": np.not_equal, "Less": np.less, "LessEqual": np.less_equal,
    "Greater": np.greater, "GreaterEqual": np.greater_equal,
    "LogicalAnd": np.logical_and, "LogicalOr": np.logical_or,
}


def _binary(node, args, transport):
    a, b = args
    if node.op_type == "Divide" and np.issubdtype(a.dtype, np.integer):
        return [np.floor_divide(a, b).astype(_dtype(node))]
    return [np.asarray(_BINARY[node.op_type](a, b)).astype(_dtype(node), copy=False)]


for _t in _BINARY:
    KERNELS[_t] = _binary


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


_UNARY = {
    "Relu": lambda x: np.maximum(x, 0).astype(x.dtype),
    "Tanh": np.tanh, "Sigmoid": _sigmoid, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
    "Negative": np.negative, "Abs": np.abs, "LogicalNot": np.logical_not,
}


def _unary(node, args, transport):
    return [np.asarray(_UNARY[node.op_type](args[0])).astype(_dtype(node), copy=False)]


for _t in _UNARY:
    KERNELS[_t] = _unary


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


@kernel("Select")
def _select(node, args, transport):
    return [np.where(args[0], args[1], args[2]).astype(_dtype(node))]


# --- matmul and reductions --------------------------------------------------------------------
@kernel("MatMul")
def _matmul(node, args, transport):
    a, b = compute_inputs(node, args)
    if node.attrs["transpose_a"] and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if node.attrs["transpose_b"] and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    return [np.asarray(np.matmul(a, b), dtype=_dtype(node), order="C")]


@kernel("MatMulBias")
def _matmul_bias(node, args, transport):
    out = _matmul(node, args[:2], transport)[0] + args[2]
    if node.attrs["activation"] == "relu":
        out = np.maximum(out, 0)
    return [out.astype(_dtype(node), copy=False)]


_REDUCE = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min}


def _reduce(node, args, transport):
    x = args[0]
    axes = tuple(node.reduced_axes()) if x.ndim else None
    out = _REDUCE[node.op_type](x, axis=axes, keepdims=node.attrs["keep_dims"])
    return [np.asarray(out, dtype=_dtype(node))]


for _t in _REDUCE:
    KERNELS[_t] = _reduce


# --- nn ------------------------------------------------------------------------------------------
def _softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


@kernel("Softmax")
def _softmax_k(node, args, transport):
    return [_softmax(args[0], node.attrs["axis"]).astype(_dtype(node))]


@kernel("SoftmaxBackprop")
def _softmax_bp(node, args, transport):
    out, delta = args
    axis = node.attrs["axis"]
    return [(out * (delta - np.sum(delta * out, axis=axis, keepdims=True))).astype(delta.dtype)]


@kernel("SoftmaxCrossEntropy")
def _softmax_ce(node, args, transport):
    logits, label = args
    axis = node.attrs["axis"] % logits.ndim
    # Paddle's softmax clips the shifted logits at -64 (phi's ValueClip): probabilities stay above
    # e^-64, a hard-label loss at most 64.
    shifted = np.maximum(logits - np.max(logits, axis=axis, keepdims=True), logits.dtype.type(-64))
    log_sum = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    log_softmax = shifted - log_sum
    softmax = np.exp(log_softmax).astype(logits.dtype)
    if node.attrs["soft_label"]:
        loss = -np.sum(label * log_softmax, axis=axis, keepdims=True)
    else:
        ignore = label == node.attrs["ignore_index"]
        safe = np.where(ignore, 0, label).astype(np.int64)
        if np.any((safe < 0) | (safe >= logits.shape[axis])):
            raise ExecutionError(f"label out of range [0, {logits.shape[axis]}) in node '{node.name}'")
        loss = -np.take_along_axis(log_softmax, safe, axis=axis)
        loss = np.where(ignore, 0, loss)
    return [softmax, loss.astype(logits.dtype)]


@kernel("SoftmaxCrossEntropyBackprop")
def _softmax_ce_bp(node, args, transport):
    softmax, label, loss_grad = args
    axis = node.attrs["axis"] % softmax.ndim
    if node.attrs["soft_label"]:
        grad = (softmax - label) * loss_grad
    else:
        ignore = label == node.attrs["ignore_index"]
        safe = np.where(ignore, 0, label).astype(np.int64)
        onehot = np.zeros_like(softmax)
        np.put_along_axis(onehot, safe, 1, axis=axis)
        grad = (softmax - onehot) * loss_grad
        grad = np.where(ignore, 0, grad)
    return [grad.astype(softmax.dtype)]


# --- optimizers: Paddle's CPU kernels' formulas (phi/kernels/funcs/adam_functors.h etc.) ---
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


# --- collectives: served by the transport ------------------------------------------------------
def _require_transport(node, transport):
    if transport is None:
        raise ExecutionError(f"node '{node.name}' ({node.op_type}) needs a transport, and none was given")
    return transport


@kernel("AllReduce")
def _allreduce(node, args, transport):
    if transport is None or transport.size == 1:
        return [np.array(a, copy=True) for a in args]
    name = node.attrs["bucket"] or node.name
    if node.attrs.get("compress", "none") != "none":
        return transport.allreduce_compressed(args, node.attrs["reduction"], node.attrs["compress"], name=name)
    return transport.allreduce_many(args, node.attrs["reduction"], name=name)


@kernel("Broadcast")
def _broadcast(node, args, transport):
    if transport is None or transport.size == 1:
        return [np.array(a, copy=True) for a in args]
    return [transport.broadcast(np.array(a, copy=True), node.attrs["root"]) for a in args]


@kernel("AllGather")
def _allgather(node, args, transport):
    t = _require_transport(node, transport)
    return [t.allgather(a) for a in args]


@kernel("ReduceScatter")
def _reduce_scatter(node, args, transport):
    t = _require_transport(node, transport)
    return [t.reduce_scatter(a, node.attrs["reduction"]) for a in args]


@kernel("Send")
def _send(node, args, transport):
    _require_transport(node, transport).send(args[0], node.attrs["peer"], node.attrs["tag"])
    return [args[0]]


@kernel("Recv")
def _recv(node, args, transport):
    t = node.output_types[0]
    buf = np.empty(t.shape, dtype=t.dtype.numpy)
    _require_transport(node, transport).recv(buf, node.attrs["peer"], node.attrs["tag"])
    return [buf]


@kernel("ReduceMeanBackprop")
def _reduce_mean_bp(node, args, transport):
    x, delta = args
    axes = node.reduced_axes() if x.ndim else []
    kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    grad = np.broadcast_to(np.reshape(delta, kept), x.shape) / x.dtype.type(count)
    return [np.ascontiguousarray(grad, dtype=x.dtype)]


@kernel("ReduceSumBackprop")
def _reduce_sum_bp(node, args, transport):
    x, delta = args
    axes = node.reduced_axes() if x.ndim else []
    kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
    return [np.ascontiguousarray(np.broadcast_to(np.reshape(delta, kept), x.shape), dtype=x.dtype)]
