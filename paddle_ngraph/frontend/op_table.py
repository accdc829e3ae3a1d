"""The converter table: every Paddle op type we convert, legacy and PIR names.

One entry per name; aliases point at the same converter function. Ops in
``SKIPPED_OPS`` carry no computation (feeds, fetches, parameter declarations,
list packing) and are handled by the decoders.
"""
from __future__ import annotations

from .converters import activation, elementwise, loss, matmul, optimizer, reduction, tensor

OP_TABLE = {
    # matmul
    "matmul_v2": matmul.matmul_v2, "pd_op.matmul": matmul.matmul_v2,
    "matmul_v2_grad": matmul.matmul_v2_grad, "pd_op.matmul_grad": matmul.matmul_v2_grad,
    # elementwise
    "elementwise_add": elementwise.elementwise, "pd_op.add": elementwise.elementwise,
    "elementwise_sub": elementwise.elementwise, "pd_op.subtract": elementwise.elementwise,
    "elementwise_mul": elementwise.elementwise, "pd_op.multiply": elementwise.elementwise,
    "elementwise_div": elementwise.elementwise, "pd_op.divide": elementwise.elementwise,
    "elementwise_max": elementwise.elementwise, "pd_op.maximum": elementwise.elementwise,
    "elementwise_min": elementwise.elementwise, "pd_op.minimum": elementwise.elementwise,
    "elementwise_pow": elementwise.elementwise, "pd_op.elementwise_pow": elementwise.elementwise,
    "elementwise_add_grad": elementwise.elementwise_add_grad, "pd_op.add_grad": elementwise.elementwise_add_grad,
    "elementwise_sub_grad": elementwise.elementwise_sub_grad, "pd_op.subtract_grad": elementwise.elementwise_sub_grad,
    "elementwise_mul_grad": elementwise.elementwise_mul_grad, "pd_op.multiply_grad": elementwise.elementwise_mul_grad,
    "sum": elementwise.sum, "pd_op.add_n": elementwise.sum,
    # activations
    "relu": activation.relu, "pd_op.relu": activation.relu,
    "relu_grad": activation.relu_grad, "pd_op.relu_grad": activation.relu_grad,
    # reductions
    "reduce_mean": reduction.reduce_mean, "pd_op.mean": reduction.reduce_mean,
    "reduce_sum": reduction.reduce_sum, "pd_op.sum": reduction.reduce_sum,
    "reduce_sum_grad": reduction.reduce_sum_grad, "pd_op.sum_grad": reduction.reduce_sum_grad,
    "reduce_mean_grad": reduction.reduce_mean_grad, "pd_op.mean_grad": reduction.reduce_mean_grad,
    # losses
    "softmax_with_cross_entropy": loss.softmax_with_cross_entropy,
    "pd_op.cross_entropy_with_softmax": loss.softmax_with_cross_entropy,
    "softmax_with_cross_entropy_grad": loss.softmax_with_cross_entropy_grad,
    "pd_op.cross_entropy_with_softmax_grad": loss.softmax_with_cross_entropy_grad,
    # tensor creation
    "fill_constant": tensor.fill_constant, "pd_op.full": tensor.fill_constant,
    "pd_op.full_int_array": tensor.full_int_array,
    "fill_any_like": tensor.full_like, "pd_op.full_like": tensor.full_like,
    "assign": tensor.assign, "pd_op.assign": tensor.assign,
    "assign_value": tensor.assign_value, "pd_op.assign_value": tensor.assign_value,
    "pd_op.assign_value_": tensor.assign_value,
    # optimizers
    "sgd": optimizer.sgd, "pd_op.sgd_": optimizer.sgd,
    "momentum": optimizer.momentum, "pd_op.momentum_": optimizer.momentum,
    "adam": optimizer.adam, "pd_op.adam_": optimizer.adam,
    "adamw": optimizer.adamw, "pd_op.adamw_": optimizer.adamw,
}

SKIPPED_OPS = {"feed", "fetch", "fetch_v2", "pd_op.data", "pd_op.feed", "pd_op.fetch", "builtin.parameter",
               "builtin.combine", "builtin.shadow_output", "builtin.set_parameter"}
