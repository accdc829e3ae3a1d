"""tril_triu (legacy), tril and triu (PIR), with their grads: what nn.Transformer's
generate_square_subsequent_mask emits. A Select with a constant mask of the last two dims."""
from __future__ import annotations

import numpy as np

from ...ir import ops
from .helpers import constant


def _keep(ctx, x):
    """The kept elements of the last two dims: i - j >= -diagonal (tril) or <= -diagonal (triu)."""
    if x.type.rank < 2 or min(x.shape[-2:]) < 0:
        raise ctx.fail(f"needs an input of rank >= 2 with static last two dims, got {x.type}")
    lower = ctx.attr("lower") if ctx.has_attr("lower") else ctx.op_type.endswith(("tril", "tril_grad"))
    diagonal = int(ctx.attr("diagonal", default=0))
    rows, cols = x.shape[-2:]
    mask = np.tril(np.ones((rows, cols), bool), diagonal) if lower else np.triu(np.ones((rows, cols), bool), diagonal)
    return ops.Constant(mask).output()


def tril_triu(ctx):
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Select(_keep(ctx, x), x, constant(0, x.dtype)).output())


def tril_triu_grad(ctx):
    delta = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.Select(_keep(ctx, delta), delta, constant(0, delta.dtype)).output())
