"""pow (legacy and PIR): x to a scalar power (what F.local_response_norm emits), with its grad."""
from __future__ import annotations

from ...ir import ops
from .helpers import constant


def _factor(ctx) -> float:
    """legacy ``factor`` (or a constant FactorTensor), PIR ``y``; Paddle casts it to the data type."""
    return float(ctx.attr_or_const_input(("factor", "y"), ("FactorTensor",), default=1.0))


def pow(ctx):  # noqa: A001  (named after the Paddle op)
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Power(x, constant(_factor(ctx), x.dtype)).output())


def pow_grad(ctx):
    """dx = dout * factor * x^(factor - 1), as Paddle's PowGradFunctor."""
    x, delta, factor = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad"), _factor(ctx)
    slope = ops.Multiply(constant(factor, x.dtype), ops.Power(x, constant(factor - 1, x.dtype)).output()).output()
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(delta, slope).output())
