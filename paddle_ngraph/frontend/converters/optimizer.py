"""Optimizer updates: sgd, momentum, adam, adamw, lamb, lars_momentum (legacy names; PIR adds a
trailing '_')."""
from __future__ import annotations

from ...ir import ops
from .registry import converter
from .shape import set_list_output


def _reject_multi_precision(ctx):
    if ctx.attr("multi_precision", default=False) and ctx.has_input("MasterParam", "master_param"):
        raise ctx.fail("multi_precision (master weights) is not supported yet")


@converter("sgd", "pd_op.sgd_")
def sgd(ctx):
    _reject_multi_precision(ctx)
    node = ops.SGDUpdate(ctx.input("Param", "param"), ctx.input("Grad", "grad"), ctx.input("LearningRate", "learning_rate"))
    ctx.set_output(("ParamOut", "param_out"), node.output(0))


@converter("momentum", "pd_op.momentum_")
def momentum(ctx):
    _reject_multi_precision(ctx)
    method = ctx.attr("regularization_method", default="")
    coeff = float(ctx.attr("regularization_coeff", default=0.0)) if method == "l2_decay" else 0.0
    node = ops.MomentumUpdate(
        ctx.input("Param", "param"), ctx.input("Grad", "grad"), ctx.input("LearningRate", "learning_rate"),
        ctx.input("Velocity", "velocity"),
        mu=float(ctx.attr("mu")), use_nesterov=bool(ctx.attr("use_nesterov", default=False)),
        regularization_coeff=coeff, rescale_grad=float(ctx.attr("rescale_grad", default=1.0)))
    ctx.set_output(("ParamOut", "param_out"), node.output(0))
    ctx.set_output(("VelocityOut", "velocity_out"), node.output(1))


@converter("adam", "pd_op.adam_")
def adam(ctx):
    _adam(ctx, weight_decay=0.0, lr_ratio=1.0)


@converter("adamw", "pd_op.adamw_")
def adamw(ctx):
    if not ctx.attr("with_decay", default=True):
        _adam(ctx, weight_decay=0.0, lr_ratio=float(ctx.attr("lr_ratio", default=1.0)))
    else:
        _adam(ctx, weight_decay=float(ctx.attr("coeff", default=0.01)), lr_ratio=float(ctx.attr("lr_ratio", default=1.0)))


def _adam(ctx, weight_decay: float, lr_ratio: float):
    _reject_multi_precision(ctx)
    if ctx.attr("amsgrad", default=False):
        raise ctx.fail("amsgrad is not supported yet")
    if ctx.attr("use_global_beta_pow", default=False):
        raise ctx.fail("use_global_beta_pow is not supported yet")
    if ctx.has_input("SkipUpdate", "skip_update"):
        raise ctx.fail("skip_update is not supported yet")
    beta1 = ctx.attr_or_const_input(("beta1",), ("Beta1Tensor", "beta1"))
    beta2 = ctx.attr_or_const_input(("beta2",), ("Beta2Tensor", "beta2"))
    epsilon = ctx.attr_or_const_input(("epsilon",), ("EpsilonTensor", "epsilon"))
    node = ops.AdamUpdate(
        ctx.input("Param", "param"), ctx.input("Grad", "grad"), ctx.input("LearningRate", "learning_rate"),
        ctx.input("Moment1", "moment1"), ctx.input("Moment2", "moment2"),
        ctx.input("Beta1Pow", "beta1_pow"), ctx.input("Beta2Pow", "beta2_pow"),
        beta1=float(beta1), beta2=float(beta2), epsilon=float(epsilon), weight_decay=weight_decay, lr_ratio=lr_ratio)
    for i, slot in enumerate([("ParamOut", "param_out"), ("Moment1Out", "moment1_out"), ("Moment2Out", "moment2_out"),
                              ("Beta1PowOut", "beta1_pow_out"), ("Beta2PowOut", "beta2_pow_out")]):
        ctx.set_output(slot, node.output(i))


@converter("lamb", "pd_op.lamb_")
def lamb(ctx):
    _reject_multi_precision(ctx)
    if ctx.has_input("SkipUpdate", "skip_update"):
        raise ctx.fail("skip_update is not supported yet")
    node = ops.LambUpdate(
        ctx.input("Param", "param"), ctx.input("Grad", "grad"), ctx.input("LearningRate", "learning_rate"),
        ctx.input("Moment1", "moment1"), ctx.input("Moment2", "moment2"),
        ctx.input("Beta1Pow", "beta1_pow"), ctx.input("Beta2Pow", "beta2_pow"),
        beta1=float(ctx.attr("beta1")), beta2=float(ctx.attr("beta2")), epsilon=float(ctx.attr("epsilon")),
        weight_decay=float(ctx.attr("weight_decay")), always_adapt=bool(ctx.attr("always_adapt", default=False)))
    for i, slot in enumerate([("ParamOut", "param_out"), ("Moment1Out", "moment1_out"), ("Moment2Out", "moment2_out"),
                              ("Beta1PowOut", "beta1_pow_out"), ("Beta2PowOut", "beta2_pow_out")]):
        ctx.set_output(slot, node.output(i))


@converter("lars_momentum", "pd_op.lars_momentum_")
def lars_momentum(ctx):
    """Paddle's op updates a list of parameters (one per op as LarsMomentumOptimizer builds it;
    PIR packs each list with builtin.combine), each with its own decay: one node per parameter."""
    _reject_multi_precision(ctx)
    params, grads = ctx.inputs("Param", "param"), ctx.inputs("Grad", "grad")
    velocities, lrs = ctx.inputs("Velocity", "velocity"), ctx.inputs("LearningRate", "learning_rate")
    decays = ctx.attr("lars_weight_decay", default=[0.0005])
    decays = list(decays) if isinstance(decays, (list, tuple)) else [decays]
    counts = [len(params), len(grads), len(velocities), len(lrs), len(decays)]
    if len(set(counts)) != 1:
        raise ctx.fail("Param, Grad, Velocity, LearningRate and lars_weight_decay differ in length "
                       f"({', '.join(map(str, counts))})")
    attrs = dict(mu=float(ctx.attr("mu")), lars_coeff=float(ctx.attr("lars_coeff", default=0.001)),
                 epsilon=float(ctx.attr("epsilon", default=0.0)),
                 rescale_grad=float(ctx.attr("rescale_grad", default=1.0)))
    nodes = [ops.LarsMomentumUpdate(p, g, lr, v, lars_weight_decay=float(d), **attrs)
             for p, g, v, lr, d in zip(params, grads, velocities, lrs, decays)]
    set_list_output(ctx, ("ParamOut", "param_out"), [n.output(0) for n in nodes], inplace_of=("Param", "param"))
    set_list_output(ctx, ("VelocityOut", "velocity_out"), [n.output(1) for n in nodes],
                    inplace_of=("Velocity", "velocity"))
