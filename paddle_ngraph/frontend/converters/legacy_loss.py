"""Legacy (fluid) loss ops: cross_entropy and cross_entropy2 on probabilities, and ``mean``.

These have no PIR counterpart: Paddle 3 expresses them as cross_entropy_with_softmax
(use_softmax=False) and mean.
"""
from __future__ import annotations

from ...ir import ops


def _cross_entropy_attrs(ctx, soft_label: bool) -> dict:
    return dict(soft_label=soft_label, ignore_index=int(ctx.attr("ignore_index", default=-100)))


def cross_entropy(ctx):
    attrs = _cross_entropy_attrs(ctx, bool(ctx.attr("soft_label", default=False)))
    node = ops.CrossEntropy(ctx.input("X"), ctx.input("Label"), **attrs)
    ctx.set_output("Y", node.output(0))


def cross_entropy_grad(ctx):
    attrs = _cross_entropy_attrs(ctx, bool(ctx.attr("soft_label", default=False)))
    grad = ops.CrossEntropyBackprop(ctx.input("X"), ctx.input("Label"), ctx.input("Y@GRAD"), **attrs)
    ctx.set_output("X@GRAD", grad.output())


def cross_entropy2(ctx):
    """Hard labels only. XShape only carries X's shape to the grad, so we bind it to X itself."""
    x = ctx.input("X")
    node = ops.CrossEntropy(x, ctx.input("Label"), **_cross_entropy_attrs(ctx, False))
    ctx.set_output("Y", node.output(0))
    ctx.set_output("MatchX", node.output(1))
    ctx.set_output("XShape", x)


def cross_entropy_grad2(ctx):
    # Paddle computes -dY / MatchX at the label; MatchX is X at the label, which is what
    # CrossEntropyBackprop divides by. X comes through XShape (see cross_entropy2).
    grad = ops.CrossEntropyBackprop(ctx.input("XShape"), ctx.input("Label"), ctx.input("Y@GRAD"),
                                    **_cross_entropy_attrs(ctx, False))
    ctx.set_output("X@GRAD", grad.output())


def mean(ctx):
    """The fluid ``mean`` op: the mean of all elements, a 0-D tensor."""
    ctx.set_output("Out", ops.ReduceMean(ctx.input("X"), axes=[]).output())


def mean_grad(ctx):
    grad = ops.ReduceMeanBackprop(ctx.input("X"), ctx.input("Out@GRAD"), axes=[])
    ctx.set_output("X@GRAD", grad.output())
