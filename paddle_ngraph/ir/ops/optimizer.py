"""Optimizer updates. Each returns the new parameter first, then the new state.

``param_input`` and ``grad_input`` tell the AllReduce pass where the gradient
enters, so it can reduce the gradient right before the update consumes it.
"""
from __future__ import annotations

from ..node import Node, register_op

__all__ = ["OptimizerUpdate", "SGDUpdate", "MomentumUpdate", "AdamUpdate", "LambUpdate", "LarsMomentumUpdate"]


class OptimizerUpdate(Node):
    param_input = 0
    grad_input = 1
    lr_input = 2
    #: input index of each state tensor that is returned updated, in output order after the param
    state_inputs: tuple = ()
    #: those of them with one value per element of the parameter (moments, velocity), which ZeRO-1
    #: slices with it; the others are one value per parameter (Adam's beta powers)
    elementwise_state_inputs: tuple = ()

    def infer(self):
        param, grad, lr = (self.input_type(i) for i in range(3))
        self.check(param.dtype.is_float, f"parameter must be floating point, got {param}")
        self.check(param.dtype == grad.dtype and param.shape == grad.shape,
                   f"gradient {grad} does not match parameter {param}")
        self.check(lr.num_elements() == 1, f"learning rate must have one element, got {lr}")
        for i in self.state_inputs:
            self.check(self.input_type(i).dtype.is_float, f"state input {i} must be floating point")
        return [param] + [self.input_type(i) for i in self.state_inputs]


@register_op
class SGDUpdate(OptimizerUpdate):
    """Inputs (param, grad, lr). param - lr * grad."""

    op_type = "SGDUpdate"
    num_inputs = 3


@register_op
class MomentumUpdate(OptimizerUpdate):
    """Inputs (param, grad, lr, velocity). Paddle's momentum, with optional L2 decay."""

    op_type = "MomentumUpdate"
    attributes = {"mu": 0.9, "use_nesterov": False, "regularization_coeff": 0.0, "rescale_grad": 1.0}
    num_inputs = 4
    state_inputs = (3,)
    elementwise_state_inputs = (3,)


@register_op
class AdamUpdate(OptimizerUpdate):
    """Inputs (param, grad, lr, moment1, moment2, beta1_pow, beta2_pow). Paddle's adam/adamw."""

    op_type = "AdamUpdate"
    attributes = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.0, "lr_ratio": 1.0}
    num_inputs = 7
    state_inputs = (3, 4, 5, 6)
    elementwise_state_inputs = (3, 4)


@register_op
class LambUpdate(OptimizerUpdate):
    """Inputs (param, grad, lr, moment1, moment2, beta1_pow, beta2_pow). Paddle's lamb.

    Adam's moments give the step r = m_hat / (sqrt(v_hat) + epsilon) + weight_decay * param,
    scaled by the trust ratio ||param|| / ||r|| (1 when either is 0, or when weight_decay is 0
    and not ``always_adapt``).
    """

    op_type = "LambUpdate"
    attributes = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "weight_decay": 0.01, "always_adapt": False}
    num_inputs = 7
    state_inputs = (3, 4, 5, 6)
    elementwise_state_inputs = (3, 4)


@register_op
class LarsMomentumUpdate(OptimizerUpdate):
    """Inputs (param, grad, lr, velocity). Paddle's lars_momentum, for one parameter.

    Momentum with a layer-wise learning rate: with g = rescale_grad * grad,
    lr * lars_coeff * ||param|| / (||g|| + lars_weight_decay * ||param|| + epsilon) when
    lars_weight_decay > 0 and both norms are > 0, else lr; then
    velocity = mu * velocity + local_lr * (g + lars_weight_decay * param), param -= velocity.
    Paddle's op takes a list of parameters with one decay each (0 for those excluded from
    weight decay); the converters make one node per parameter.
    """

    op_type = "LarsMomentumUpdate"
    attributes = {"mu": 0.9, "lars_coeff": 0.001, "lars_weight_decay": 0.0005, "epsilon": 0.0, "rescale_grad": 1.0}
    num_inputs = 4
    state_inputs = (3,)
    elementwise_state_inputs = (3,)

    def infer(self):
        types = super().infer()
        velocity, param = self.input_type(3), self.input_type(0)
        self.check(velocity.dtype == param.dtype and velocity.shape == param.shape,
                   f"velocity {velocity} does not match parameter {param}")
        return types
